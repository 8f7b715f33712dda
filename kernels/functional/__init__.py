"""The functional attention layers on ``(B, H, T, D)`` tensors: the math, no parameters.

The public namespace of the ops (like ``torch.nn.functional``): each function is defined in its
op folder under `kernels.ops` and re-exported here.

* AFA, seed 000 (`kernels.ops.afa`): `tensor_afa`, `isotropic_afa`, `separable_afa`,
  `predict`;
* RFA, seed 004 (`kernels.ops.rfa`): `rfa_attention`, `rfa_lag_kernel`, `lag_variance`;
* radial-tangential (`kernels.ops.rt`): `rt_afa` (seed 000 Alg. 2), `rt_rfa` (seed 003);
* unrolled AFA, seed 000 B.2 (`kernels.ops.unrolled`): `unrolled_afa`, `kalman_attention`;
* baselines (`kernels.ops.baselines`): `softmax_attention`, `rope_attention`,
  `alibi_attention`, `decayed_rope_attention`;
* the parameter objects `Dynamics` and `Robust` (`kernels.ops.common.params`) and the positional
  banks (`kernels.ops.common.positional`): `rope_frequencies`, `spectral_coupling`,
  `SpectralCoupling`, `alibi_slopes`, `sinusoidal_embedding`.

KLA (seed 001) and the oscillator layer (seed 002) are `kernels.functional.kla` and
`kernels.functional.oscillator`.
"""

from kernels.ops.afa import AFAOutput, isotropic_afa, predict, separable_afa, tensor_afa
from kernels.ops.baselines import (
    AttentionOutput,
    alibi_attention,
    decayed_rope_attention,
    rope_attention,
    softmax_attention,
)
from kernels.ops.common.params import Dynamics, Robust
from kernels.ops.common.positional import (
    SpectralCoupling,
    alibi_slopes,
    rope_frequencies,
    sinusoidal_embedding,
    spectral_coupling,
)
from kernels.ops.rfa import lag_variance, rfa_attention, rfa_lag_kernel
from kernels.ops.rt import RTAFAOutput, RTRFAOutput, rt_afa, rt_rfa
from kernels.ops.unrolled import UnrolledAFAResult, kalman_attention, unrolled_afa

__all__ = [
    "AFAOutput",
    "AttentionOutput",
    "Dynamics",
    "RTAFAOutput",
    "RTRFAOutput",
    "Robust",
    "SpectralCoupling",
    "UnrolledAFAResult",
    "alibi_attention",
    "alibi_slopes",
    "decayed_rope_attention",
    "isotropic_afa",
    "kalman_attention",
    "lag_variance",
    "predict",
    "rfa_attention",
    "rfa_lag_kernel",
    "rope_attention",
    "rope_frequencies",
    "rt_afa",
    "rt_rfa",
    "separable_afa",
    "sinusoidal_embedding",
    "softmax_attention",
    "spectral_coupling",
    "tensor_afa",
    "unrolled_afa",
]

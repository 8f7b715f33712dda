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

* KLA, seed 001 (`kernels.ops.kla`): `kla_scan`, `kla_step`, `ou_prior`, `mc_marginal_nll`,
  `prefix_scan`, `kla_attention_matrix` (App. E.4), the types `KLAState`, `KLAScanResult`,
  `KLAAttention`;
* OsciFormer, seed 002 (`kernels.ops.oscillator`): `oscillator_attention`,
  `oscillator_logits`, `oscillator_values`, `fit_query`, `OscillatorParams`.
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
from kernels.ops.kla import (
    KLAAttention,
    KLAScanResult,
    KLAState,
    kla_attention_matrix,
    kla_scan,
    kla_step,
    mc_marginal_nll,
    ou_prior,
    prefix_scan,
)
from kernels.ops.oscillator import (
    OscillatorParams,
    fit_query,
    oscillator_attention,
    oscillator_logits,
    oscillator_values,
)
from kernels.ops.rfa import lag_variance, rfa_attention, rfa_lag_kernel
from kernels.ops.rt import RTAFAOutput, RTRFAOutput, rt_afa, rt_rfa
from kernels.ops.unrolled import UnrolledAFAResult, kalman_attention, unrolled_afa

__all__ = [
    "AFAOutput",
    "AttentionOutput",
    "Dynamics",
    "KLAAttention",
    "KLAScanResult",
    "KLAState",
    "OscillatorParams",
    "RTAFAOutput",
    "RTRFAOutput",
    "Robust",
    "SpectralCoupling",
    "UnrolledAFAResult",
    "alibi_attention",
    "alibi_slopes",
    "decayed_rope_attention",
    "fit_query",
    "isotropic_afa",
    "kalman_attention",
    "kla_attention_matrix",
    "kla_scan",
    "kla_step",
    "lag_variance",
    "mc_marginal_nll",
    "oscillator_attention",
    "oscillator_logits",
    "oscillator_values",
    "ou_prior",
    "predict",
    "prefix_scan",
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

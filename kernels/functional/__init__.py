"""Functional attention layers on ``(B, H, T, D)`` tensors: the math, no parameters.

`afa` (tensor, isotropic and separable AFA, seed 000), `rt_afa` (seed 000 Algorithm 2),
`unrolled_afa` (seed 000 Algorithm 4), `rfa` (seed 004), `rt_rfa` (seed 003), `baselines`
(softmax, RoPE, ALiBi, decayed RoPE), `positional` (rotary factors, ALiBi slopes, spectral
coupling, sinusoidal embeddings); shared pieces in `complex_pairs` and `lags`.

The public namespace of the op folders (like ``torch.nn.functional``): the functions below are
defined under `kernels.ops` and re-exported here.

* KLA, seed 001 (`kernels.ops.kla`): `kla_scan`, `kla_step`, `ou_prior`, `mc_marginal_nll`,
  `prefix_scan`, the types `KLAState`, `KLAScanResult`;
* OsciFormer, seed 002 (`kernels.ops.oscillator`): `oscillator_attention`,
  `oscillator_logits`, `oscillator_values`, `fit_query`, `OscillatorParams`.
"""

from kernels.ops.kla import (
    KLAScanResult,
    KLAState,
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

__all__ = [
    "KLAScanResult",
    "KLAState",
    "OscillatorParams",
    "fit_query",
    "kla_scan",
    "kla_step",
    "mc_marginal_nll",
    "oscillator_attention",
    "oscillator_logits",
    "oscillator_values",
    "ou_prior",
    "prefix_scan",
]

"""The public functional names of `kernels`, looked up in one place.

`kernels.functional` is the public namespace of the attention functions (defined under
``kernels/ops/<family>/`` and re-exported there); the fuzz suite reaches them only through it.
"""

from __future__ import annotations

from kernels import functional as _F

FUNCTIONS = (
    "tensor_afa",
    "isotropic_afa",
    "separable_afa",
    "predict",
    "rt_afa",
    "unrolled_afa",
    "kalman_attention",
    "rfa_attention",
    "rt_rfa",
    "softmax_attention",
    "rope_attention",
    "alibi_attention",
    "decayed_rope_attention",
    "kla_scan",
    "kla_step",
    "KLAState",
    "ou_prior",
    "mc_marginal_nll",
    "oscillator_attention",
    "oscillator_logits",
    "fit_query",
    "OscillatorParams",
)


def functional(name: str):
    """``kernels.functional.<name>`` (a KeyError for a name the suite does not fuzz)."""
    if name not in FUNCTIONS:
        raise KeyError(name)
    return getattr(_F, name)

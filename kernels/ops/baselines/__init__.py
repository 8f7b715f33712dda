"""Positional softmax-attention baselines (seed 004 E.2 B1-B4; seed 000 4.2).

`softmax_attention` (plain), `rope_attention` (B1), `alibi_attention` (B2) and
`decayed_rope_attention` (B3; B4 = SC-RoPE with a
`kernels.ops.common.positional.SpectralCoupling`): the definitions are in
`kernels.ops.baselines.attention`. The op folder: `naive` (the float64 loop over ``(i, j)``,
the oracle), `params` (scales, lags and the rotary inputs, the one rotation), `attention` (the
torch forms; no fused kernel: ``scaled_dot_product_attention`` does the plain cases).

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``, ``t`` None, ``(T,)`` or ``(B, T)``; outputs
``(B, H, T, Dv)``, weights ``(B, H, T, T)``.
"""

from kernels.ops.baselines.attention import (
    DECAY_MODES,
    alibi_attention,
    decayed_rope_attention,
    rope_attention,
    softmax_attention,
)
from kernels.ops.common.attention import AttentionOutput, future_keys, head_parameter

__all__ = [
    "DECAY_MODES",
    "AttentionOutput",
    "alibi_attention",
    "decayed_rope_attention",
    "future_keys",
    "head_parameter",
    "rope_attention",
    "softmax_attention",
]

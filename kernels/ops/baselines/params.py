"""Argument preparation of the positional baselines (`kernels.ops.baselines`).

`scale_of` (the score scale, ``1/sqrt(D)`` by default), `lag_abs` (``|t_i - t_j|`` from checked
stamps ``(B', 1, T) -> (B', 1, T, T)``) and `rotary` (checked shapes and stamps, the per-head
spectrum ``(H, D/2)``, and ``q, k`` rotated by ``e^{+i omega t}`` with the one rotation of
`kernels.ops.common.rotation`). Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``.
"""

from __future__ import annotations

import math

import torch

from kernels import _validation
from kernels.ops.common import positional
from kernels.ops.common.rotation import Rotation


def scale_of(scale, dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ValueError(f"scale must be a positive number, found {scale!r}")
    return float(scale)


def lag_abs(times: torch.Tensor) -> torch.Tensor:
    """``|t_i - t_j|``: ``(B', 1, T) -> (B', 1, T, T)``."""
    return (times.unsqueeze(-1) - times.unsqueeze(-2)).abs()


def rotary(q, k, v, t, frequencies, decay, base):
    """Validated shapes, stamps and ``q, k`` rotated by ``e^{+i omega t}``; the decay as given."""
    batch, heads, steps, dim, _ = _validation.check_qkv(q, k, v, even=True)
    times = _validation.check_times(t, steps, like=q)
    if times.shape[0] not in (1, batch):
        raise ValueError(f"t batch size must be 1 or {batch}, found {times.shape[0]}")
    n = dim // 2
    if frequencies is None:
        frequencies = positional.rope_frequencies(n, base=base, dtype=q.dtype, device=q.device)
    freq, decay = positional.head_spectrum(
        frequencies, decay, heads=heads, num_frequencies=n, like=q
    )
    rotation = Rotation.at(times, freq)
    q_rot, k_rot = rotation.apply(q), rotation.apply(k)
    return q_rot, k_rot, times, decay, heads, dim

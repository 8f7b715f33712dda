"""The oscillator family's parameter object and its check (OsciFormer, seed 002 section 6-7).

`OscillatorParams` holds one set of per-head, per-channel oscillator parameters (the layer has
one for the keys and one for the values); `check_params` is the one validation of it, used by
the closed form (`kernels.ops.oscillator.closed_form`).

Shapes: ``omega, gamma (H, D)``, ``velocity (H, D, D)``, ``drive_cos, drive_sin (H, M, D)``,
``drive_freqs (M,)``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._validation import check_finite, check_tensor


class OscillatorParams(NamedTuple):
    """Per-head, per-channel oscillator parameters (seed 002 section 6-7).

    omega : ``(H, D)`` natural frequencies ``> 0``.
    gamma : ``(H, D)`` damping ``>= 0`` (``gamma = zeta omega``).
    velocity : ``(H, D, D)`` initial-velocity map ``U``: ``x'(t_j) = U K_j``.
    drive_cos, drive_sin : ``(H, M, D)`` drive gains ``g, h``.
    drive_freqs : ``(M,)`` drive frequencies ``w_n`` (section 7: taken from the query bank).
    """

    omega: torch.Tensor
    gamma: torch.Tensor
    velocity: torch.Tensor
    drive_cos: torch.Tensor
    drive_sin: torch.Tensor
    drive_freqs: torch.Tensor


def check_params(p: OscillatorParams, heads: int, dim: int, name: str) -> None:
    """ValueError naming ``name.field`` unless ``p`` fits ``heads`` heads of ``dim`` channels,
    ``omega > 0`` and ``gamma >= 0``."""
    for field in OscillatorParams._fields:
        check_tensor(f"{name}.{field}", getattr(p, field))
        check_finite(f"{name}.{field}", getattr(p, field))
    expected = {
        "omega": (heads, dim),
        "gamma": (heads, dim),
        "velocity": (heads, dim, dim),
        "drive_cos": (heads, p.drive_freqs.shape[0], dim),
        "drive_sin": (heads, p.drive_freqs.shape[0], dim),
    }
    if p.drive_freqs.ndim != 1:
        raise ValueError(f"{name}.drive_freqs must have shape (M,), found {p.drive_freqs.shape}")
    for field, shape in expected.items():
        found = tuple(getattr(p, field).shape)
        if found != shape:
            raise ValueError(f"{name}.{field} must have shape {shape}, found {found}")
    if (p.omega <= 0).any():
        raise ValueError(f"{name}.omega must be > 0, found min {p.omega.min().item():.3g}")
    if (p.gamma < 0).any():
        raise ValueError(f"{name}.gamma must be >= 0, found min {p.gamma.min().item():.3g}")

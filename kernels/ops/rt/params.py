"""Argument preparation of the radial-tangential forms (RT-AFA and RT-RFA).

RT-AFA (`kernels.ops.rt.afa`) reads per-head parameters as ``(H, 1, 1)`` tensors
(`per_head`, with a ``(radial, tangential)`` pair allowed where a quantity has both parts,
`pair`); RT-RFA (`kernels.ops.rt.rfa`) as ``(1, H or 1, 1, 1)`` (`head_param`) with its
frequencies ``(1, H or 1, 1, n)`` (`frequencies`). Each checks the sign and finiteness once and
names the argument in its error.
"""

from __future__ import annotations

import torch


def as_tensor(value, like: torch.Tensor) -> torch.Tensor:
    """``value`` in ``like``'s dtype and device (numbers directly, without a float32 detour)."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype=like.dtype, device=like.device)
    return torch.tensor(value, dtype=like.dtype, device=like.device)


def per_head(name: str, value, heads: int, like: torch.Tensor, *, positive=False, inf_ok=False):
    """A scalar or ``(H,)`` parameter as an ``(H, 1, 1)`` tensor in ``like``'s dtype/device.

    Values must be ``>= 0`` (``> 0`` if ``positive``) and finite (``inf`` allowed if
    ``inf_ok``); the checks are skipped while compiling (data-dependent control flow).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a number or a tensor, found {type(value).__name__}")
    x = as_tensor(value, like)
    if x.ndim == 0:
        x = x.expand(heads)
    if x.shape != (heads,):
        raise ValueError(
            f"{name} must be a scalar or have shape ({heads},), found {tuple(x.shape)}"
        )
    if not torch.compiler.is_compiling():
        values = x.detach()
        bad = torch.isnan(values) | (values <= 0 if positive else values < 0)
        if not inf_ok:
            bad = bad | torch.isinf(values)
        if bad.any():
            want = ("> 0" if positive else ">= 0") + (" (inf allowed)" if inf_ok else ", finite")
            raise ValueError(f"{name} must be {want}, found {values.flatten().tolist()}")
    return x.view(heads, 1, 1)


def pair(name: str, value) -> tuple:
    """``value`` for both the radial and the tangential part, or a ``(radial, tangential)`` pair."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(
                f"{name} must be one value or a (radial, tangential) pair, found {value!r}"
            )
        return tuple(value)
    return value, value


def head_param(
    name: str,
    value,
    heads: int,
    like: torch.Tensor,
    *,
    positive: bool = False,
) -> torch.Tensor:
    """A finite scalar or per-head ``(H,)`` parameter as a ``(1, H or 1, 1, 1)`` tensor.

    Checks the sign: ``>= 0``, or ``> 0`` when `positive`.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a float or a tensor, found {type(value).__name__}")
    x = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if x.ndim > 1 or (x.ndim == 1 and x.shape[0] not in (1, heads)):
        raise ValueError(
            f"{name} must be a scalar or have shape ({heads},) (one per head), "
            f"found {tuple(x.shape)}"
        )
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} must be finite, found {x.detach().cpu().tolist()}")
    low = x.detach().min().item()
    if low < 0 or (positive and low <= 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be {bound}, found a minimum of {low:g}")
    return x.reshape(1, -1, 1, 1)


def frequencies(frequencies, heads: int, n: int, like: torch.Tensor) -> torch.Tensor:
    """RoPE frequencies ``(n,)`` or ``(H, n)`` as ``(1, H or 1, 1, n)``."""
    if not isinstance(frequencies, torch.Tensor):
        raise TypeError(f"frequencies must be a tensor, found {type(frequencies).__name__}")
    w = frequencies.to(dtype=like.dtype, device=like.device)
    if w.shape not in ((n,), (heads, n), (1, n)):
        raise ValueError(
            f"frequencies must have shape ({n},) or ({heads}, {n}) (one per complex feature, "
            f"D/2 = {n}), found {tuple(w.shape)}"
        )
    if not torch.isfinite(w).all():
        raise ValueError("frequencies must be finite, found NaN or inf")
    return w.reshape(1, -1, 1, n)

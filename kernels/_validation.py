"""Argument checks shared by every attention layer.

Each check raises ``ValueError``/``TypeError`` naming the argument, what was expected and what was
found, so a caller sees at once which input is wrong.
"""

from __future__ import annotations

import torch


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, even: bool = False):
    """Check ``q, k: (B, H, T, D)`` and ``v: (B, H, T, Dv)`` agree; return ``(B, H, T, D, Dv)``.

    ``even=True`` also requires ``D`` and ``Dv`` even (real/imaginary halves of complex features).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, found {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"{name} must have shape (B, H, T, D), found {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, found dtype {x.dtype}")
    if q.shape != k.shape:
        raise ValueError(
            f"q and k must have equal shapes, found {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"v must share (B, H, T) with q: expected {tuple(q.shape[:3])}, "
            f"found {tuple(v.shape[:3])}"
        )
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError(f"q, k, v must share a dtype, found {q.dtype}, {k.dtype}, {v.dtype}")
    if even:
        for name, size in (("q/k feature size D", q.shape[-1]), ("v feature size Dv", v.shape[-1])):
            if size % 2:
                raise ValueError(f"{name} must be even (real and imaginary halves), found {size}")
    batch, heads, steps, dim = q.shape
    if steps < 1:
        raise ValueError(f"q, k, v must hold at least one time step, found T = {steps}")
    if batch < 1 or heads < 1:
        raise ValueError(
            f"q, k, v must hold at least one sequence and one head, found B = {batch}, H = {heads}"
        )
    return batch, heads, steps, dim, v.shape[-1]


def check_times(t, steps: int, *, like: torch.Tensor, name: str = "t") -> torch.Tensor:
    """Time stamps as a ``(B or 1, 1, T)`` tensor in ``like``'s dtype and device.

    ``t`` may be ``None`` (``t_i = i``), a ``(T,)`` or a ``(B, T)`` tensor/array. Stamps must be
    finite and strictly increasing along the last axis.
    """
    if t is None:
        return torch.arange(steps, dtype=like.dtype, device=like.device).view(1, 1, steps)
    if torch.as_tensor(t).is_complex():  # a cast to the real dtype would drop the imaginary part
        raise TypeError(f"{name} must hold real time stamps, found a complex dtype")
    t = torch.as_tensor(t, dtype=like.dtype, device=like.device)
    if t.ndim not in (1, 2) or t.shape[-1] != steps:
        raise ValueError(
            f"{name} must have shape (T,) or (B, T) with T = {steps}, found {tuple(t.shape)}"
        )
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite, found NaN or inf")
    if steps > 1:
        gaps = t[..., 1:] - t[..., :-1]
        if (gaps <= 0).any():
            worst = gaps.min().item()
            raise ValueError(f"{name} must be strictly increasing, found a step of {worst:.3g}")
    t = t.view(1, 1, steps) if t.ndim == 1 else t.unsqueeze(1)
    if t.shape[0] not in (1, like.shape[0]):
        raise ValueError(f"{name} batch size must be 1 or {like.shape[0]}, found {t.shape[0]}")
    return t


def check_heads(embed_dim: int, num_heads: int, *, even: bool = False) -> int:
    """Head size ``embed_dim // num_heads``; ``even=True`` requires it even (complex pairs)."""
    if not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, found {num_heads!r}")
    if not isinstance(embed_dim, int) or embed_dim < 1:
        raise ValueError(f"embed_dim must be a positive integer, found {embed_dim!r}")
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
    head_dim = embed_dim // num_heads
    if even and head_dim % 2:
        raise ValueError(
            f"head size embed_dim / num_heads = {head_dim} must be even (real and imaginary halves)"
        )
    return head_dim


def check_input(x: torch.Tensor, embed_dim: int, *, name: str = "x") -> tuple[int, int]:
    """Check a module input ``x: (B, T, E)`` with ``E == embed_dim``; return ``(B, T)``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, found {type(x).__name__}")
    if x.ndim != 3 or x.shape[-1] != embed_dim:
        raise ValueError(f"{name} must have shape (B, T, {embed_dim}), found {tuple(x.shape)}")
    return x.shape[0], x.shape[1]

"""Causality in IEEE arithmetic for attention layers: a non-finite input reaches no earlier output.

A causal attention layer computes output ``i`` from inputs ``0..i``, but its masked product
``sum_j w_ij v_j`` multiplies the masked-out future by an exact zero, and ``0 x NaN = NaN``:
a NaN or inf at the last step would reach every earlier output. :func:`finite_causal`
wraps a layer's ``forward(x, t, *, need_weights)``: when ``x (B, T, E)`` holds a non-finite
entry, the layer runs once on ``x`` with those entries set to 0 (the outputs before the first
non-finite step of each sequence, which never read it) and once on ``x`` itself (the outputs
from that step on, where the NaN belongs), and the rows are taken from each. Finite input (the
usual case) costs one ``isfinite`` reduction. Non-causal layers (``causal=False``) are left as
they are: there every output reads every step. Under ``torch.compile`` the wrapper traces the
plain forward (a test of the input's values would break the graph), so there the guarantee is
the eager layer's alone.
"""

from __future__ import annotations

import functools

import torch


def finite_causal(forward):
    """Decorate ``forward(self, x, t=None, *, need_weights=False) -> (out, weights)``.

    A ``memory`` keyword (B, T, E) (the keys' and values' source of a layer that takes one) is
    read at the same steps as ``x``: a non-finite entry in either counts.
    """

    @functools.wraps(forward)
    def wrapped(self, x, *args, **kwargs):
        if not (getattr(self, "causal", True) and isinstance(x, torch.Tensor) and x.ndim == 3):
            return forward(self, x, *args, **kwargs)
        if torch.compiler.is_compiling():  # a value test would break torch.compile's graph:
            return forward(self, x, *args, **kwargs)  # it traces the finite path only
        memory = kwargs.get("memory")
        if not (isinstance(memory, torch.Tensor) and memory.shape == x.shape):
            memory = None  # absent, or malformed: the layer names it
        finite = torch.isfinite(x).all(dim=-1)  # (B, T)
        if memory is not None:
            finite = finite & torch.isfinite(memory).all(dim=-1)
        if bool(finite.all()):
            return forward(self, x, *args, **kwargs)
        steps = torch.arange(x.shape[1], device=x.device)
        first = torch.where(finite, x.shape[1], steps).min(dim=1).values  # (B,)
        reads_it = steps >= first[:, None]  # (B, T): rows that read a non-finite step
        kwargs_clean = kwargs if memory is None else {**kwargs, "memory": _zeroed(memory)}
        clean = forward(self, _zeroed(x), *args, **kwargs_clean)
        dirty = forward(self, x, *args, **kwargs)
        return tuple(_rows(reads_it, d, c) for d, c in zip(dirty, clean, strict=True))

    return wrapped


def _zeroed(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its non-finite entries set to 0."""
    return torch.where(torch.isfinite(x), x, torch.zeros_like(x))


def _rows(reads_it: torch.Tensor, dirty, clean):
    """Rows of `dirty` where `reads_it`, else of `clean`: outputs (B, T, ...) and weights
    (B, H, T, T) (also inside a tuple of them); None stays None."""
    if dirty is None:
        return None
    if isinstance(dirty, tuple):
        rows = [_rows(reads_it, d, c) for d, c in zip(dirty, clean, strict=True)]
        return type(dirty)(*rows) if hasattr(dirty, "_fields") else tuple(rows)
    mask = reads_it.view(*reads_it.shape, *([1] * (dirty.ndim - 2)))  # (B, T, 1...)
    if dirty.ndim == 4:  # weights (B, H, T, T): the query rows are axis 2
        mask = reads_it[:, None, :, None]
    return torch.where(mask, dirty, clean)


__all__ = ["finite_causal"]

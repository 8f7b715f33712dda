"""Pieces shared by the softmax-type attention forms (AFA, RFA, the positional baselines).

`AttentionOutput` is their result; `head_parameter` reads a per-head parameter; `future_keys`
is the causal mask; `running_peak` and `merge_chunk` are the online softmax over key chunks,
`accumulate` a chunk's weighted values added in the matmul itself, `tile_scores` a score tile
written into a buffer reused by the tiles of a call.
Shapes: ``(B, H, T, D)`` inputs, ``(B, H, T, T)`` weights.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch


class AttentionOutput(NamedTuple):
    """``output (B, H, T, Dv)`` and ``weights (B, H, T, T)`` (None unless requested)."""

    output: torch.Tensor
    weights: torch.Tensor | None


def head_parameter(name, value, heads: int, like: torch.Tensor, *, positive=False) -> torch.Tensor:
    """A scalar or ``(H,)`` per-head parameter as an ``(H, 1, 1)`` tensor in ``like``'s dtype.

    Tensors keep their autograd graph. Values must be finite and ``>= 0`` (``> 0`` with
    ``positive``).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a number or a tensor, found {type(value).__name__}")
    out = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if out.ndim > 1 or (out.ndim == 1 and out.shape[0] not in (1, heads)):
        raise ValueError(
            f"{name} must be a scalar or have shape ({heads},), found {tuple(out.shape)}"
        )
    bad = (out <= 0) if positive else (out < 0)
    if not torch.compiler.is_compiling() and (not torch.isfinite(out).all() or bad.any()):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be finite and {bound}, found {out.detach().tolist()}")
    return out.reshape(-1, 1, 1).expand(heads, 1, 1)


def future_keys(steps: int, *, device=None) -> torch.Tensor:
    """Boolean ``(T, T)``, True where key ``j > i`` (hidden from query ``i`` under causality).

    Built by comparing indices: ``triu`` on small boolean tensors is orders of magnitude slower
    on CPU (milliseconds for 3 x 3).
    """
    index = torch.arange(steps, device=device)
    return index.unsqueeze(0) > index.unsqueeze(1)


def running_peak(peak: torch.Tensor | None, logits: torch.Tensor) -> torch.Tensor:
    """The running row maximum ``m`` of the online softmax after one more key chunk:
    ``max(m_old, max_j L_j)``; ``logits (B, H, rows, keys)``, ``m (B, H, rows, 1)``."""
    new_peak = logits.amax(dim=-1, keepdim=True)
    return new_peak if peak is None else torch.maximum(peak, new_peak)


def merge_chunk(peak, new_peak, total, acc, weight_sum, values):
    """Fold one key chunk into the online softmax's sums (flash-style; the first chunk has
    ``peak`` None): with the running maximum ``m``, ``total = sum_j e^{L_j - m}`` and ``acc =
    sum_j e^{L_j - m} E_j v_j``, where the chunk's own ``weight_sum`` and ``values`` are taken
    at ``new_peak`` and the old sums are rescaled by ``e^{m_old - m_new}``. Shapes: ``(B, H,
    rows, 1)`` peaks and sums, ``(B, H, rows, Dv)`` accumulators. Returns ``(total, acc)``; the
    output is ``acc / total``."""
    if peak is None:
        return weight_sum, values
    rescale = torch.exp(peak - new_peak)
    return torch.addcmul(weight_sum, total, rescale), torch.addcmul(values, acc, rescale)


def accumulate(acc: torch.Tensor, weights: torch.Tensor, values: torch.Tensor) -> None:
    """``acc += weights @ values`` in place, in one accumulating matmul (``baddbmm``, no
    temporary): ``acc (B, H, rows, Dv)`` contiguous, ``weights (B, H, rows, keys)``, ``values
    (B, H, keys, Dv)``. No autograd (in place)."""
    rows, keys, width = weights.shape[-2], weights.shape[-1], values.shape[-1]
    acc.view(-1, rows, width).baddbmm_(
        weights.reshape(-1, rows, keys), values.reshape(-1, keys, width)
    )


def bounded_weights_(x: torch.Tensor, prior: torch.Tensor, coefficient, *, rational: bool):
    """The bounded in-place paths' weights from ``x = 1 + u`` (``>= 1``), in place:
    ``prior / x`` when ``rational`` (``prior = e^{log P - c}``, temperature 1), else
    ``2^(prior + coefficient log x)`` (``prior`` and ``coefficient`` in base 2). AFA's and RFA's
    `_attend_bounded`."""
    if rational:
        return torch.div(prior, x, out=x)
    return torch.addcmul(prior, x.log_(), coefficient, out=x).exp2_()


def add_bounded_chunk(total, acc, weight_sum, weights, values):
    """``(total, acc)`` after one chunk of a bounded path: ``total += weight_sum``, ``acc +=
    weights @ values`` (the first chunk starts them); no rescaling (one bound per group)."""
    if acc is None:
        return weight_sum, weights @ values
    total.add_(weight_sum)
    accumulate(acc, weights, values)
    return total, acc


def bounded_output(acc: torch.Tensor, total: torch.Tensor, keys: int) -> torch.Tensor | None:
    """``acc / total``, or None where some row's sum is below ``keys tiny / eps`` (or NaN): its
    terms may have reached the subnormal range, so the bound lost precision and the caller
    takes the exact path (the derivation is in `kernels.ops.afa.isotropic._attend_bounded`)."""
    info = torch.finfo(total.dtype)
    if not bool((total >= keys * info.tiny / info.eps).all()):
        return None
    return acc.div_(total)


def tile_scores(workspace: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``q @ k^T`` written into the front of ``workspace``, a flat buffer of at least ``B H
    rows keys`` elements shared by the tiles of a call: tiles of every width then allocate
    nothing (fresh tile-sized allocations of varying sizes made the allocator return and
    re-fault pages, ~1000 minor faults a call at T = 1024; issue 19). ``q (B, H, rows, D)``,
    ``k (B, H, keys, D)`` -> a contiguous ``(B, H, rows, keys)`` view. No autograd."""
    shape = (*q.shape[:-1], k.shape[-2])
    return torch.matmul(q, k.transpose(-1, -2), out=workspace[: math.prod(shape)].view(shape))

"""Splitting ``(B, T, E)`` into heads ``(B, H, T, E/H)`` and back."""

from __future__ import annotations

import torch


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, T, H*D) -> (B, H, T, D)``."""
    batch, steps, width = x.shape
    return x.view(batch, steps, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, T, D) -> (B, T, H*D)``."""
    batch, heads, steps, dim = x.shape
    return x.transpose(1, 2).reshape(batch, steps, heads * dim)


def split_complex_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(B, T, 2*H*n)`` as ``[all re | all im]`` -> ``(B, H, T, 2n)`` as ``[re | im]`` per head."""
    batch, steps, width = x.shape
    n = width // (2 * num_heads)
    parts = x.view(batch, steps, 2, num_heads, n)  # (B, T, re/im, H, n)
    return parts.permute(0, 3, 1, 2, 4).reshape(batch, num_heads, steps, 2 * n)


def merge_complex_heads(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`split_complex_heads`: ``(B, H, T, 2n) -> (B, T, 2*H*n)``."""
    batch, heads, steps, width = x.shape
    n = width // 2
    parts = x.view(batch, heads, steps, 2, n).permute(0, 2, 3, 1, 4)  # (B, T, re/im, H, n)
    return parts.reshape(batch, steps, 2 * heads * n)

"""Complex features stored as real tensors: the last axis is ``[real half | imaginary half]``.

A complex vector ``z in C^n`` is the real vector ``[Re z, Im z] in R^{2n}``, the stacking of seed
000 section 4.1 (its complex linear layer). Layers and kernels use this layout so they run in any
real dtype and in Triton; tests compare against ``torch.complex`` references.
"""

from __future__ import annotations

import torch

from kernels.ops.common.rotation import Rotation, records_graph


def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(..., 2n) -> (Re, Im)``, each ``(..., n)``."""
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


def merge(re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """``(Re, Im)`` each ``(..., n)`` -> ``(..., 2n)``."""
    return torch.cat((re, im), dim=-1)


def to_complex(x: torch.Tensor) -> torch.Tensor:
    """Real-pair ``(..., 2n)`` -> complex ``(..., n)``."""
    re, im = split(x)
    return torch.complex(re, im)


def from_complex(z: torch.Tensor) -> torch.Tensor:
    """Complex ``(..., n)`` -> real-pair ``(..., 2n)``."""
    return merge(z.real, z.imag)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Multiply each complex feature by ``cos + i sin``: ``x * e^{i theta}`` in real pairs.

    ``x: (..., 2n)``; ``cos, sin`` broadcast against ``(..., n)``. The arithmetic is the one
    rotation of `kernels.ops.common.rotation`.
    """
    return Rotation.of(cos, sin).apply(x)


def squared_modulus(x: torch.Tensor) -> torch.Tensor:
    """``sum_k |z_k|^2`` of a real-pair ``(..., 2n)`` tensor: ``(...)``."""
    return (x * x).sum(dim=-1)


def squared_modulus_untracked(x: torch.Tensor) -> torch.Tensor:
    """`squared_modulus` in one reduction without an ``x``-sized temporary, as the square of
    ``torch.linalg.vector_norm`` (within a few ulp of it), where no autograd graph or compiler
    records ``x`` (the norm's gradient is undefined at 0); otherwise `squared_modulus`. The
    ``x * x`` temporary was a fresh page-faulting allocation on every call (issue 19: ~1 ms of
    a T = 1024 attention call on CPU)."""
    if records_graph(x):
        return squared_modulus(x)
    return torch.linalg.vector_norm(x, dim=-1).square_()


def real_inner(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``Re(x^H y)`` over features, one matmul: ``(..., T, 2n), (..., S, 2n) -> (..., T, S)``.

    For real pairs ``Re(sum conj(x_k) y_k) = sum (x_re y_re + x_im y_im)``, the ordinary dot
    product of the stacked vectors.
    """
    return x @ y.transpose(-1, -2)

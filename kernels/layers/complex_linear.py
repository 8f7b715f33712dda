"""Complex linear layer on real/imaginary stacked features (seed 000 section 4.1).

``L([x_r; x_i]) = [[W_r, -W_i], [W_i, W_r]] [x_r; x_i] + [b_r; b_i]``: multiplication by the
complex matrix ``W_r + i W_i`` with bias ``b_r + i b_i``, entirely in real arithmetic. The
initialisation is isotropic in the complex plane: ``W_ij = a_ij e^{i phi_ij}``,
``a_ij ~ sqrt(2 / (n_in + n_out)) N(0, 1)``, ``phi_ij ~ U(0, 2 pi)``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from kernels.functional import complex_pairs


class ComplexLinear(nn.Module):
    """``(..., 2 in_features) -> (..., 2 out_features)``; real inputs may be lifted with zeros.

    Parameters
    ----------
    in_features, out_features : complex feature counts (the real tensors are twice as wide).
    bias : learn a bias.
    imaginary_bias : with ``bias``, also learn its imaginary part. Layers that return only the
        real part of their output pass ``False``: an imaginary bias there would never be used.
    generator : optional ``torch.Generator`` for the initialisation (no global RNG is touched
        when one is given).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = True,
        imaginary_bias: bool = True,
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        for name, size in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be a positive integer, found {size!r}")
        self.in_features = in_features
        self.out_features = out_features
        factory = {"device": device, "dtype": dtype}
        self.weight_real = nn.Parameter(torch.empty(out_features, in_features, **factory))
        self.weight_imag = nn.Parameter(torch.empty(out_features, in_features, **factory))
        self.bias_real = nn.Parameter(torch.zeros(out_features, **factory)) if bias else None
        imaginary = bias and imaginary_bias
        self.bias_imag = nn.Parameter(torch.zeros(out_features, **factory)) if imaginary else None
        self.reset_parameters(generator)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Isotropic complex initialisation (seed 000 4.1); biases to zero."""
        scale = math.sqrt(2.0 / (self.in_features + self.out_features))
        shape = self.weight_real.shape
        kw = {"generator": generator, "device": self.weight_real.device}
        magnitude = scale * torch.randn(shape, **kw, dtype=torch.float64)
        phase = 2 * math.pi * torch.rand(shape, **kw, dtype=torch.float64)
        self.weight_real.copy_(magnitude * torch.cos(phase))
        self.weight_imag.copy_(magnitude * torch.sin(phase))
        for b in (self.bias_real, self.bias_imag):
            if b is not None:
                b.zero_()

    @torch.no_grad()
    def set_complex(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Load a complex ``(out, in)`` weight (and optional ``(out,)`` bias), e.g. ``S^-1``."""
        if weight.shape != self.weight_real.shape:
            raise ValueError(
                f"weight must have shape {tuple(self.weight_real.shape)}, "
                f"found {tuple(weight.shape)}"
            )
        self.weight_real.copy_(weight.real)
        self.weight_imag.copy_(weight.imag)
        if bias is not None:
            if self.bias_real is None:
                raise ValueError("bias given but the layer was built with bias=False")
            if self.bias_imag is None and bool(torch.any(bias.imag != 0)):
                raise ValueError("bias has an imaginary part but the layer has a real bias only")
            self.bias_real.copy_(bias.real)
            if self.bias_imag is not None:
                self.bias_imag.copy_(bias.imag)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != 2 * self.in_features:
            raise ValueError(
                f"x must have last size 2 * in_features = {2 * self.in_features}, "
                f"found {x.shape[-1]}"
            )
        x_re, x_im = complex_pairs.split(x)
        out_re = x_re @ self.weight_real.T - x_im @ self.weight_imag.T
        out_im = x_re @ self.weight_imag.T + x_im @ self.weight_real.T
        if self.bias_real is not None:
            out_re = out_re + self.bias_real
        if self.bias_imag is not None:
            out_im = out_im + self.bias_imag
        return complex_pairs.merge(out_re, out_im)

    def extra_repr(self) -> str:
        has_bias = self.bias_real is not None
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={has_bias}"


def lift(x: torch.Tensor) -> torch.Tensor:
    """Real ``(..., n)`` -> real-pair ``(..., 2n)`` with zero imaginary part (seed 000 Alg. 1)."""
    return complex_pairs.merge(x, torch.zeros_like(x))

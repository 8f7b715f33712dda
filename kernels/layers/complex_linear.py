"""Complex linear layers on real/imaginary stacked features (seed 000 section 4.1).

``L([x_r; x_i]) = [[W_r, -W_i], [W_i, W_r]] [x_r; x_i] + [b_r; b_i]``: multiplication by the
complex matrix ``W_r + i W_i`` with bias ``b_r + i b_i``, entirely in real arithmetic.

:class:`ComplexLinear` learns ``W`` freely; its initialisation is isotropic in the complex
plane: ``W_ij = a_ij e^{i phi_ij}``, ``a_ij ~ sqrt(2 / (n_in + n_out)) N(0, 1)``,
``phi_ij ~ U(0, 2 pi)``. :class:`UnitaryLinear` keeps ``W`` unitary, ``W = exp(K)`` with
``K = (M - M^H) / 2`` skew-Hermitian from a learned complex ``M``: the seed's eigenbasis
``S^-1 = S^H`` of a normal system matrix (seed 000 3.1, where ``S`` unitary makes isotropic
noise stay isotropic in the eigenbasis).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from kernels._validation import check_tensor
from kernels.ops.common import complex_pairs


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
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be a positive integer, found {size!r}")
        self.in_features = in_features
        self.out_features = out_features
        factory = {"device": device, "dtype": dtype}
        self._make_weights((out_features, in_features), factory)
        self.bias_real = nn.Parameter(torch.zeros(out_features, **factory)) if bias else None
        imaginary = bias and imaginary_bias
        self.bias_imag = nn.Parameter(torch.zeros(out_features, **factory)) if imaginary else None
        self.reset_parameters(generator)

    def _make_weights(self, shape: tuple[int, int], factory: dict) -> None:
        self.weight_real = nn.Parameter(torch.empty(shape, **factory))
        self.weight_imag = nn.Parameter(torch.empty(shape, **factory))

    def _zero_biases(self) -> None:
        for b in (self.bias_real, self.bias_imag):
            if b is not None:
                b.zero_()

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
        self._zero_biases()

    def complex_weight(self) -> torch.Tensor:
        """``W = W_r + i W_i`` (out, in), complex."""
        return torch.complex(self.weight_real, self.weight_imag)

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
        self._set_bias(bias)

    def _set_bias(self, bias: torch.Tensor | None) -> None:
        if bias is not None:
            if self.bias_real is None:
                raise ValueError("bias given but the layer was built with bias=False")
            if self.bias_imag is None and bool(torch.any(bias.imag != 0)):
                raise ValueError("bias has an imaginary part but the layer has a real bias only")
            self.bias_real.copy_(bias.real)
            if self.bias_imag is not None:
                self.bias_imag.copy_(bias.imag)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_tensor("x", x)
        if x.shape[-1] != 2 * self.in_features:
            raise ValueError(
                f"x must have last size 2 * in_features = {2 * self.in_features}, "
                f"found {x.shape[-1]}"
            )
        return torch.nn.functional.linear(x, self.real_weight(), self._real_bias())

    def real_weight(self) -> torch.Tensor:
        """The real ``(2 out, 2 in)`` matrix ``[[W_r, -W_i], [W_i, W_r]]`` of the map on real
        pairs (module docstring): the layer is one real product and one bias add, instead of
        four products on the strided halves (2-3x less time forward and backward at small
        widths)."""
        w_re, w_im = self._weight_pair()
        return torch.cat((torch.cat((w_re, -w_im), dim=1), torch.cat((w_im, w_re), dim=1)))

    def _real_bias(self) -> torch.Tensor | None:
        """``[b_r; b_i]`` (``b_i = 0`` for a real bias), or None without a bias."""
        if self.bias_real is None:
            return None
        imag = torch.zeros_like(self.bias_real) if self.bias_imag is None else self.bias_imag
        return torch.cat((self.bias_real, imag))

    def _weight_pair(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.weight_real, self.weight_imag

    def extra_repr(self) -> str:
        has_bias = self.bias_real is not None
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={has_bias}"


class UnitaryLinear(ComplexLinear):
    """A square complex linear layer whose weight is unitary: ``W = exp((M - M^H) / 2)``.

    ``(..., 2 features) -> (..., 2 features)``. The learned parameters are ``M``'s real and
    imaginary parts (``generator_real``, ``generator_imag``, (features, features)); ``W^-1 =
    W^H`` exactly. The initialisation draws ``M`` with standard complex Gaussian entries (a
    generic unitary, not the identity). `weight_real` and `weight_imag` are computed from
    ``M`` (read-only properties); load a unitary weight with :meth:`set_complex`.
    """

    def __init__(
        self,
        features: int,
        *,
        bias: bool = True,
        imaginary_bias: bool = True,
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
    ):
        if not isinstance(features, int) or features < 1:
            raise ValueError(f"features must be a positive integer, found {features!r}")
        super().__init__(
            features,
            features,
            bias=bias,
            imaginary_bias=imaginary_bias,
            generator=generator,
            device=device,
            dtype=dtype,
        )

    def _make_weights(self, shape: tuple[int, int], factory: dict) -> None:
        self.generator_real = nn.Parameter(torch.empty(shape, **factory))
        self.generator_imag = nn.Parameter(torch.empty(shape, **factory))

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """``M`` with standard complex Gaussian entries; biases to zero."""
        kw = {"generator": generator, "device": self.generator_real.device}
        shape = self.generator_real.shape
        self.generator_real.copy_(torch.randn(shape, **kw, dtype=torch.float64))
        self.generator_imag.copy_(torch.randn(shape, **kw, dtype=torch.float64))
        self._zero_biases()

    def complex_weight(self) -> torch.Tensor:
        m = torch.complex(self.generator_real, self.generator_imag)
        return torch.linalg.matrix_exp((m - m.mH) / 2)

    def _weight_pair(self) -> tuple[torch.Tensor, torch.Tensor]:
        w = self.complex_weight()
        return w.real, w.imag

    @property
    def weight_real(self) -> torch.Tensor:
        return self.complex_weight().real

    @property
    def weight_imag(self) -> torch.Tensor:
        return self.complex_weight().imag

    @torch.no_grad()
    def set_complex(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        """Load a unitary ``(features, features)`` weight (and optional bias): ``M = log W``.

        The logarithm of a unitary ``W = V e^{i Theta} V^H`` is ``V i Theta V^H``; ``V``
        diagonalises the commuting Hermitian parts ``(W + W^H)/2`` and ``(W - W^H)/(2i)``
        together (one `eigh` of a generic combination). Raises ValueError if ``W`` is not
        unitary to 1e-10 (relative to its dtype's round-off for float32).
        """
        shape = self.generator_real.shape
        w = torch.as_tensor(weight).to(torch.complex128)
        if w.shape != shape:
            raise ValueError(f"weight must have shape {tuple(shape)}, found {tuple(w.shape)}")
        eye = torch.eye(shape[0], dtype=w.dtype)
        defect = float((w.mH @ w - eye).abs().max())
        if defect > 1e-10:
            raise ValueError(
                f"weight must be unitary (W^H W = I), found |W^H W - I| = {defect:.2g}"
            )
        cosine, sine = (w + w.mH) / 2, (w - w.mH) / 2j
        _, v = torch.linalg.eigh(cosine + 0.5772156649 * sine)
        angles = torch.angle(torch.diagonal(v.mH @ w @ v))
        log = v @ torch.diag(1j * angles) @ v.mH
        if float((torch.linalg.matrix_exp(log) - w).abs().max()) > 1e-9:
            raise ValueError("weight's logarithm failed (eigenvalues too close to separate)")
        self.generator_real.copy_(log.real)
        self.generator_imag.copy_(log.imag)
        self._set_bias(bias)

    def extra_repr(self) -> str:
        return f"features={self.in_features}, bias={self.bias_real is not None}, unitary"


def lift(x: torch.Tensor) -> torch.Tensor:
    """Real ``(..., n)`` -> real-pair ``(..., 2n)`` with zero imaginary part (seed 000 Alg. 1)."""
    return complex_pairs.merge(x, torch.zeros_like(x))

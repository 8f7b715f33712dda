"""The one rotation: ``x -> r e^{i theta} x`` on real pairs ``[re | im]``.

Every layer that rotates features (AFA's co-rotating frame, RFA, RT-AFA, RT-RFA, RoPE and its
decayed variants, the unrolled filter's transition, the fused kernels' pre- and post-rotation)
uses this module: a `Rotation` holds the factors laid out for real pairs,

    cos2 = r [cos theta | cos theta],    sin2 = r [-sin theta | sin theta],

and `Rotation.apply` multiplies by ``e^{sign i theta}`` (times ``r``) in one fused product,

    (re + i im) r (cos + i sin) = [re r cos - im r sin | im r cos + re r sin]
                                = x * cos2 + swap(x) * sin2,      swap([re | im]) = [im | re].

``r = 1`` is a pure rotation (the rotary factors of seed 004 / RoPE and seed 000 3.6's
``Phi = e^{i omega t}``); ``r = e^{-a h}`` gives the transition ``e^{(-a + i omega) h}`` of the
unrolled filter (seed 000 B.2). `Rotation.at` builds the factors ``omega_k t_i`` from real time
stamps: ``t (Bt, 1, T)`` and ``omega (H, n)`` give ``(Bt, H, T, 2n)`` tensors (the angles are
formed from the given stamps, no offset is added, so a time shift changes every angle by
``omega c`` and relative phases are exact up to rounding of ``omega t``). Attention, which
pairs a rotation at ``t_i`` with the inverse one at ``t_j`` only, first measures the stamps
from each sequence's first stamp (`from_origin`): the shift cancels exactly, and the angles
stay as small as the sequence's span allows.

Shapes: ``x (..., 2n)``; ``cos2, sin2`` broadcast against it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Rotation(NamedTuple):
    """``r e^{i theta}`` for real pairs: ``cos2 = r [cos | cos]``, ``sin2 = r [-sin | sin]``."""

    cos2: torch.Tensor
    sin2: torch.Tensor

    @classmethod
    def of(cls, cos: torch.Tensor, sin: torch.Tensor) -> Rotation:
        """From per-feature factors ``cos, sin (..., n)`` (``r cos theta``, ``r sin theta``)."""
        return cls(torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1))

    @classmethod
    def at(cls, times: torch.Tensor, frequencies: torch.Tensor) -> Rotation:
        """Angles ``omega_k t_i``: ``times (Bt, 1, T)``, ``frequencies (H, n)`` -> ``(Bt, H, T,
        2n)`` factors."""
        angles = times.unsqueeze(-1) * frequencies.unsqueeze(-2)
        return cls.of(torch.cos(angles), torch.sin(angles))

    def apply(self, x: torch.Tensor, sign: int = 1) -> torch.Tensor:
        """``x r e^{sign i theta}`` on real pairs ``(..., 2n)``; ``sign`` is +1 or -1.

        ``sign = -1`` conjugates the phase and keeps ``r`` (for ``r = 1`` the inverse).
        """
        if not records_graph(x, *self):
            return self._apply_into(x, sign)
        swapped = x.roll(x.shape[-1] // 2, dims=-1)
        if sign > 0:
            return torch.addcmul(x * self.cos2, swapped, self.sin2)
        return torch.addcmul(x * self.cos2, swapped, self.sin2, value=-1)

    def apply_(self, x: torch.Tensor, sign: int = 1) -> torch.Tensor:
        """`apply` in place on ``x`` (which must have the broadcast shape and be the caller's
        own), with one half-size temporary, where no autograd graph or compiler records it;
        otherwise `apply`'s new tensor. Use the returned tensor."""
        if records_graph(x, *self):
            return self.apply(x, sign)
        n = x.shape[-1] // 2
        re, im = x[..., :n], x[..., n:]
        cos, sin = self.cos2[..., n:], self.sin2[..., n:]  # r cos, r sin
        re_old = re.clone()
        re.mul_(cos).addcmul_(im, sin, value=-sign)  # re r cos -+ im r sin
        im.mul_(cos).addcmul_(re_old, sin, value=sign)  # im r cos +- re r sin
        return x

    def _apply_into(self, x: torch.Tensor, sign: int) -> torch.Tensor:
        """`apply` without autograd: the two halves written into one new tensor by fused
        products (no rolled copy, no full-size temporaries; the same products and sums)."""
        n = x.shape[-1] // 2
        shape = torch.broadcast_shapes(x.shape, self.cos2.shape, self.sin2.shape)
        out = x.new_empty(shape)
        re, im = x[..., :n], x[..., n:]
        cos, sin = self.cos2[..., n:], self.sin2[..., n:]  # r cos, r sin
        torch.mul(re, cos, out=out[..., :n]).addcmul_(im, sin, value=-sign)
        torch.mul(im, cos, out=out[..., n:]).addcmul_(re, sin, value=sign)
        return out

    def rows(self, index) -> Rotation:
        """The factors of rows ``index`` (a slice of the time axis, the second to last)."""
        return Rotation(self.cos2[..., index, :], self.sin2[..., index, :])


def records_graph(*tensors: torch.Tensor) -> bool:
    """Whether autograd or a compiler traces an operation on ``tensors``: then `Rotation`
    (and `complex_pairs.squared_modulus_untracked`) keep their out-of-place products
    (``out=`` and in-place products are neither differentiable nor worth it under
    ``torch.compile``, which fuses them)."""
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(x.requires_grad for x in tensors)


def from_origin(times: torch.Tensor) -> torch.Tensor:
    """Each sequence's stamps measured from its first one: ``times - times[..., :1]``.

    ``times (Bt, 1, T)`` -> ``(Bt, 1, T)``.

    For computations that depend on lags ``t_i - t_j`` alone (attention: a rotation at ``t_i``
    paired with the inverse one at ``t_j``, decays of lags): the lags are unchanged, while the
    stamps, the angles ``omega t`` built from them and the float32 lags formed in the kernels
    stay within the span of the sequence instead of growing with ``max|t|`` (stamps near
    ``10^4`` lose ~1e-3 to float32 rounding). The origin is taken without gradient, so
    gradients with respect to ``times`` are unchanged. (The first stamp, not the centre: on an
    H200 at T = 1024 the centre made the bfloat16 frequency gradient of non-causal AFA ten
    times worse and RFA's 2x better; BENCHMARKS.md, "Fused Triton kernels".) AFA's clock
    (`kernels.ops.afa.params.positions`) and RFA's both come through here.
    """
    return times - times.detach()[..., :1]

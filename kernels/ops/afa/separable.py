"""Causal AFA with seed 000 B.1's separable per-feature precision, ``O(T^2 + T D)`` memory.

B.1 replaces the per-feature precision by ``P~[k, i, j] = c_k + f_ik g_jk`` (value and slope
matched at lag 0, `kernels.ops.afa.precision.separable_factors`), so that with the factorised
residual of 3.5 (``Phi = e^{lambda (t_i - t_ref)}``, ``Zhat = e^{-lambda (t - t_ref)} Z``)::

    D[i, j] = sum_k (c_k + f_ik g_jk) |Phi_ik|^2 |Zq^_ik - Zk^_jk|^2      (one matmul),
    W = (1 + D / nu)^(-temperature) on j <= i,
    N = c (W 1) + f (W g),   U = c (W Zv^) + f (W (g Zv^)),   Zbar = Phi_v U / N.

(B.1 writes ``W = 1 / (1 + D)``, ``nu`` absorbed, and prints ``c[k]`` outside the sum over
``k``; it belongs inside.) Equal to ``tensor_afa(..., precision="separable")``. The factors
grow like ``e^{max(a, sigma^2/eta^2) |t - t_ref|}`` with ``t_ref`` the middle of the time span,
as B.1's factorisation does; keep ``max(a, sigma^2/eta^2) * span / 2`` well below the exponent
range (about 80 in float32, 700 in float64). ``Phi`` and its inverse are the one rotation
(`kernels.ops.common.rotation`) with the magnitude ``e^{-a rel}``.

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``; output ``(B, H, T, Dv)``; weights (the
robust weight matrix ``W``) ``(B, H, T, T)``.
"""

from __future__ import annotations

import torch

from kernels._validation import check_times
from kernels.ops.afa import params
from kernels.ops.afa.params import AFAOutput, HeadDynamics
from kernels.ops.afa.precision import separable_factors
from kernels.ops.common import complex_pairs
from kernels.ops.common.params import Dynamics, Robust
from kernels.ops.common.rotation import Rotation


def separable_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t,
    dynamics: Dynamics,
    robust: Robust,
    return_weights: bool,
) -> AFAOutput:
    """The separable form (module docstring); arguments as `kernels.ops.afa.separable_afa`."""
    p = params.prepare(q, k, v, dynamics, robust, per_feature=True, like=q)
    for prefix, d in (("", p.qk), ("value_", p.vd)):
        params.check_values(f"{prefix}decay (separable precision)", d.decay, positive=True)
        params.check_values(
            f"{prefix}process_var (separable precision)", d.process_var, positive=True
        )
    heads, steps = p.heads, p.steps
    times = check_times(t, steps, like=q)
    middle = 0.5 * (times.amax(-1, keepdim=True) + times.amin(-1, keepdim=True))
    rel = (times - middle).unsqueeze(-1)  # (Bt, 1, T, 1)
    causal = torch.ones(steps, steps, dtype=torch.bool, device=q.device).tril()

    weights = torch.ones((), dtype=q.dtype, device=q.device)
    if p.nu is not None:
        distance = _separable_distance(q, k, p.qk, rel, p.rotate_qk)
        scale = torch.reciprocal(p.nu).view(1, heads, 1, 1)
        temp = p.temperature.view(1, heads, 1, 1)
        weights = torch.exp(-temp * torch.log1p(torch.clamp(distance, min=0.0) * scale))
    weights = torch.where(causal, weights, torch.zeros((), dtype=q.dtype, device=q.device))
    weights = weights.expand(p.batch, heads, steps, steps)

    c, f, g = separable_factors(p.vd, rel)
    phi = _Phi(p.vd, rel)
    hat = _parts(phi.pull_back(v), p.rotate_v)  # Zv^ = e^{-lambda_v (t_j - t_ref)} Zv
    g = g.expand_as(hat[0])
    # right-hand sides [1, g, Zv^, g Zv^] of one matmul
    right = torch.cat((torch.ones_like(hat[0][..., :1]), g, *hat, *(g * h for h in hat)), dim=-1)
    sums = (weights @ right).split([1, p.n_v] + [p.n_v] * 2 * len(hat), dim=-1)
    norm = c * sums[0] + f * sums[1]
    u = [c * s + f * sg for s, sg in zip(sums[2 : 2 + len(hat)], sums[2 + len(hat) :], strict=True)]
    if p.rotate_v:
        output = phi.push(complex_pairs.merge(*u)) / torch.cat((norm, norm), dim=-1)
    else:
        output = phi.push(u[0]) / norm
    return AFAOutput(output, weights if return_weights else None)


class _Phi:
    """``Phi = e^{lambda rel}`` of per-feature dynamics, ``rel (Bt, 1, T, 1)``: ``(Bt, H, T, n)``
    magnitude ``e^{-a rel}`` and, with frequencies, the rotation by ``w rel``."""

    def __init__(self, d: HeadDynamics, rel):
        self.magnitude = torch.exp(-d.decay[None, :, None, :] * rel)
        self.cos = self.sin = None
        if d.frequencies is not None:
            angle = d.frequencies[None, :, None, :] * rel
            self.cos, self.sin = torch.cos(angle), torch.sin(angle)

    def _rotation(self, scale) -> Rotation:
        return Rotation.of(scale * self.cos, scale * self.sin)

    def push(self, x):
        """``Phi x``."""
        return self.magnitude * x if self.cos is None else self._rotation(self.magnitude).apply(x)

    def pull_back(self, x):
        """``Phi^-1 x = e^{-lambda rel} x``."""
        if self.cos is None:
            return x / self.magnitude
        return self._rotation(1 / self.magnitude).apply(x, sign=-1)

    def conj_push(self, x):
        """``conj(Phi) x = e^{-a rel} e^{-i w rel} x``."""
        if self.cos is None:
            return self.magnitude * x
        return self._rotation(self.magnitude).apply(x, sign=-1)


def _parts(x: torch.Tensor, is_complex: bool) -> list[torch.Tensor]:
    """``[re, im]`` of real pairs, ``[x]`` of real features."""
    return list(complex_pairs.split(x)) if is_complex else [x]


def _separable_distance(q, k, qk: HeadDynamics, rel, rotate: bool) -> torch.Tensor:
    """``D[i, j] = sum_k (c_k + f_ik g_jk) |R[k, i, j]|^2`` through one matmul (B.1, 3.5)."""
    c, f, g = separable_factors(qk, rel)
    phi = _Phi(qk, rel)
    # x = conj(Phi) Zq and Zk^ = e^{-lambda rel_j} Zk, so Re(conj(Zq) Phi Zk^) = Re(x^H Zk^).
    x = _parts(phi.conj_push(q), rotate)
    k_hat = _parts(phi.pull_back(k), rotate)
    q2 = sum(part * part for part in _parts(q, rotate))
    k2_hat = sum(part * part for part in k_hat)
    phi2 = phi.magnitude**2
    c, f, g, phi2 = (y.expand_as(q2) for y in (c, f, g, phi2))
    left = torch.cat(
        (c * phi2, f * q2, f * phi2, *(-2 * c * y for y in x), *(-2 * f * y for y in x)), dim=-1
    )
    right = torch.cat((k2_hat, g, g * k2_hat, *k_hat, *(g * y for y in k_hat)), dim=-1)
    return (c * q2).sum(-1, keepdim=True) + left @ right.transpose(-1, -2)

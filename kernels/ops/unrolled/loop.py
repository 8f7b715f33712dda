"""Unrolled AFA's loop over time: the iteratively reweighted recursive filter (seed 000 B.2).

The recursion of `kernels.ops.unrolled` (predict, ``K`` reweighted updates, carry), vectorised
over batch and heads: the per-step transition factors are computed for all steps at once,
each step is a few elementwise operations on ``(B, H, D)`` tensors. The reference form (the
chunked Gaussian form `kernels.ops.unrolled.chunked` is tested against it) and the one used
whenever ``nu < inf``.

Shapes: ``values (B, H, T, D)`` -> `UnrolledAFAResult` fields ``(B, H, T, D)`` / ``(B, H, T)``.
"""

from __future__ import annotations

import math

import torch

from kernels.ops.common.lags import relaxation
from kernels.ops.common.rotation import Rotation
from kernels.ops.unrolled.params import Problem, UnrolledAFAResult


def run(values: torch.Tensor, p: Problem) -> UnrolledAFAResult:
    """The loop on validated arguments (`kernels.ops.unrolled.params.prepare`)."""
    measurements = values.unbind(2)
    batch, heads, steps, n = p.batch, p.heads, p.steps, p.n
    a, q, r, omega, nu_h, tau, delta = (
        p.decay, p.process_var, p.measurement_var, p.frequencies, p.nu, p.temperature, p.damping
    )  # fmt: skip
    times, gaussian, plain, inner, weight = p.times, p.gaussian, p.plain, p.inner, p.weight
    shape = (batch, heads)
    # Per-step factors for all steps at once, (B or 1, H, T-1[, D]), then split per step: the
    # transition e^{(-a + i omega) h} is the one rotation with the magnitude e^{-a h}.
    steps_h = (times[..., 1:] - times[..., :-1]).expand(-1, heads, -1)
    a_, q_ = a.view(1, heads, 1), q.view(1, heads, 1)
    shrink = torch.exp(-a_ * steps_h)  # e^{-a h} <= 1: no growing factor anywhere
    added = q_ * steps_h * relaxation(2 * a_ * steps_h)  # sigma^2 (1 - e^{-2ah}) / (2a)
    angle = omega.view(1, heads, 1, n) * steps_h.unsqueeze(-1)
    c, s = shrink.unsqueeze(-1) * torch.cos(angle), shrink.unsqueeze(-1) * torch.sin(angle)
    transition = Rotation.of(c, s)
    keep, turn = transition.cos2.unbind(2), transition.sin2.unbind(2)
    shrink2, added = (shrink * shrink).unbind(2), added.unbind(2)

    # w = (base + slope |z - x|^2)^-tau: "rational" base 1, slope 1/(eta^2 nu); "student-t"
    # divides both by 1 + n/nu. At nu = inf, slope = 0 and w = 1 exactly.
    r_b, tau_b = r.view(1, heads), tau.view(1, heads)
    scale = 1 + n / nu_h if weight == "student-t" else torch.ones_like(nu_h)
    base = (1 / scale).view(1, heads)
    slope = (1 / (r * nu_h * scale)).view(1, heads)
    delta_b = delta.view(1, heads, 1)
    ones = torch.ones(shape, dtype=values.dtype, device=values.device)

    def robust_weight(residual):
        if gaussian:
            return ones
        return torch.addcmul(base, torch.linalg.vecdot(residual, residual), slope).pow(-tau_b)

    outputs, variances, predictions, pred_variances, weights = [], [], [], [], []
    if p.prior is not None:
        x, v = p.prior
    if p.prior is None:
        # Diffuse start: the measurement alone; its residual is 0, so v = eta^2 / w(0).
        w = (ones * base).pow(-tau_b)
        x, v = measurements[0], r_b / w
        predictions.append(torch.zeros_like(x))
        pred_variances.append(torch.full(shape, math.inf, dtype=x.dtype, device=x.device))
        outputs.append(x)
        variances.append(v)
        weights.append(w)
    for i in range(len(outputs), steps):
        if i > 0:
            x = Rotation(keep[i - 1], turn[i - 1]).apply(x)
            v = torch.addcmul(added[i - 1], shrink2[i - 1], v)
        z = measurements[i]
        predictions.append(x)
        pred_variances.append(v)
        innovation = z - x
        estimate = x
        for k in range(inner):
            w = robust_weight(innovation if k == 0 else z - estimate)
            wv = w * v
            denom = wv + r_b
            target = torch.addcmul(x, (wv / denom).unsqueeze(-1), innovation)
            estimate = target if plain else torch.lerp(estimate, target, delta_b)
        x, v = estimate, v * r_b / denom
        outputs.append(x)
        variances.append(v)
        weights.append(w)
    return UnrolledAFAResult(
        torch.stack(outputs, dim=2),
        1 / torch.stack(variances, dim=2),
        torch.stack(predictions, dim=2),
        1 / torch.stack(pred_variances, dim=2),
        torch.stack(weights, dim=2),
    )

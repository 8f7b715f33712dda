"""The damped oscillator's propagator ``e^{A t}`` in every damping regime (seed 002 A.1).

``A = [[0, 1], [-omega^2, -2 gamma]]`` (eq. 11): `damped_cos_sinc` gives the damped
``(c, s)`` pair as one analytic function through critical damping, `propagator` the 2 x 2
matrix. Shapes: arguments broadcast; `propagator` appends ``(2, 2)``.
"""

from __future__ import annotations

import math

import torch

# |u t^2| <= 1: c and s/t summed as power series in z = u t^2 (no 1/omega_d or 1/sigma); the
# first omitted terms are 1/20! ~ 4e-19 and 1/21! ~ 2e-20 relative to 1, below double rounding.
_SERIES_RADIUS = 1.0
_SERIES_TERMS = 10
_COS_SERIES = [(-1.0) ** n / math.factorial(2 * n) for n in range(_SERIES_TERMS)]
_SINC_SERIES = [(-1.0) ** n / math.factorial(2 * n + 1) for n in range(_SERIES_TERMS)]


def damped_cos_sinc(omega, gamma, t) -> tuple[torch.Tensor, torch.Tensor]:
    """``(e^{-gamma t} c(t), e^{-gamma t} s(t))`` for ``t >= 0`` in every damping regime.

    ``c = cos(sqrt(u) t)``, ``s = sin(sqrt(u) t)/sqrt(u)``, ``u = omega^2 - gamma^2`` continued
    through ``u = 0`` (``c = 1, s = t``) to ``u < 0`` (``cosh, sinh(sigma t)/sigma``), seed 002
    A.1.1-A.1.3 as one analytic function (digest 1.3). Branches: ``|u| t^2 <= 1`` power series
    in ``u t^2``; underdamped ``cos, sin/omega_d``; overdamped
    ``e^{-omega^2 t/(gamma + sigma)} (1 + e^{-2 sigma t})/2`` and
    ``e^{-omega^2 t/(gamma + sigma)} (-expm1(-2 sigma t))/(2 sigma)`` (no cosh overflow).
    Unused branches are evaluated at safe arguments so gradients stay finite.

    Shapes: omega, gamma, t broadcast; returns two tensors of the broadcast shape.
    """
    omega, gamma, t = torch.broadcast_tensors(omega, gamma, t)
    u = (omega - gamma) * (omega + gamma)  # factored: accurate near critical damping
    z = u * t * t
    series = z.abs() <= _SERIES_RADIUS
    under = z > _SERIES_RADIUS
    over = z < -_SERIES_RADIUS
    damp = torch.exp(-gamma * t)

    zs = torch.where(series, z, torch.zeros_like(z))
    cos_sum = torch.zeros_like(z)
    sinc_sum = torch.zeros_like(z)
    for a_cos, a_sinc in zip(_COS_SERIES[::-1], _SINC_SERIES[::-1], strict=True):
        cos_sum = cos_sum * zs + a_cos
        sinc_sum = sinc_sum * zs + a_sinc
    c = damp * cos_sum
    s = damp * t * sinc_sum

    one = torch.ones_like(u)
    wd = torch.sqrt(torch.where(under, u, one))  # u > 0 on this branch; 1 elsewhere (unused)
    c = torch.where(under, damp * torch.cos(wd * t), c)
    s = torch.where(under, damp * torch.sin(wd * t) / wd, s)

    sigma = torch.sqrt(torch.where(over, -u, one))  # -u > 0 on this branch; 1 elsewhere
    grow = torch.exp(-omega * omega * t / (gamma + sigma))  # e^{-(gamma - sigma) t}
    c = torch.where(over, grow * 0.5 * (1.0 + torch.exp(-2.0 * sigma * t)), c)
    s = torch.where(over, grow * -torch.expm1(-2.0 * sigma * t) / (2.0 * sigma), s)
    return c, s


def propagator(omega, gamma, t) -> torch.Tensor:
    """``e^{A t}``, ``A = [[0, 1], [-omega^2, -2 gamma]]`` (seed 002 eq. 11, A.1.2, A.1.3), t >= 0.

    ``e^{At} = e^{-gamma t}(c I + s (A + gamma I))`` with the damped ``c, s`` of
    `damped_cos_sinc`. Shapes: broadcast(omega, gamma, t) + (2, 2).
    """
    c, s = damped_cos_sinc(omega, gamma, t)
    omega, gamma = torch.broadcast_tensors(omega, gamma, c)[:2]
    row0 = torch.stack([c + gamma * s, s], dim=-1)
    row1 = torch.stack([-omega * omega * s, c - gamma * s], dim=-1)
    return torch.stack([row0, row1], dim=-2)

"""AFA's lag kernels: the propagated variance and B.1's separable precision.

Seed 000 A.3 (the closed form of the differential Lyapunov equation): a key measured at ``t_j``
and pulled forward to ``t_i`` (lag ``tau = t_i - t_j``) has the variance

    V(tau) = sigma^2 (1 - e^{-2 a tau}) / (2 a) + eta^2 e^{-2 a tau},                tau >= 0,
    V(tau) = e^{2 a |tau|} (sigma^2 (1 - e^{-2 a |tau|}) / (2 a) + eta^2),           tau < 0,

both ``e^{2 a max(-tau, 0)} (sigma^2 |tau| relax(2 a |tau|) + eta^2 e^{-2 a max(tau, 0)})``
with ``relax(x) = (1 - e^{-x}) / x`` (`kernels.ops.common.lags.relaxation`; the ``a -> 0``
limit ``sigma^2 |tau| + eta^2`` of seed 000 3.8 is reached smoothly). `log_variance` keeps the
backward growth in the exponent, so no branch overflows. Seed 000 3.6 prints the kernel with
the exponents' signs flipped; the corrected form is used (``estimators.closed_forms.
measurement.isotropic_measurement_variance`` with ``dt = -tau``).

B.1 replaces the causal precision ``P = 1 / V`` by ``P~(tau) = c + f(t_i) g(t_j)``, matched in
value and slope at lag 0 (`log_separable_precision`, `separable_factors`).

Shapes: every argument broadcasts (lags ``(Bt, 1, T, T[, 1])``, parameters per head or feature).
"""

from __future__ import annotations

import torch

from kernels.ops.afa.params import HeadDynamics
from kernels.ops.common.lags import relaxation


def log_variance(lag, decay, process_var, measurement_var) -> torch.Tensor:
    """``log V(tau)`` for either sign of ``tau = t_i - t_j`` (module docstring, seed 000 A.3).

    ``V = e^{2 a max(-tau, 0)} (sigma^2 |tau| relax(2 a |tau|) + eta^2 e^{-2 a max(tau, 0)})``:
    the backward growth stays in the exponent, so no branch overflows. All arguments broadcast.
    """
    size = lag.abs()
    back = torch.clamp(-lag, min=0.0)
    inner = process_var * size * relaxation(2 * decay * size)
    inner = inner + measurement_var * torch.exp(-2 * decay * torch.clamp(lag, min=0.0))
    return 2 * decay * back + torch.log(inner)


def neg_log_variance(lag, decay, process_var, measurement_var) -> torch.Tensor:
    """``log P(tau) = -log V(tau)``."""
    return -log_variance(lag, decay, process_var, measurement_var)


def log_separable_precision(lag, decay, process_var, measurement_var) -> torch.Tensor:
    """``log P~(tau)`` of seed 000 B.1 for causal lags ``tau >= 0``.

    ``P~(tau) = (1 / lam_eff) (ratio - (1 - ratio) expm1(-rate tau))`` with
    ``lam_eff = sigma^2 / (2 a)``, ``ratio = lam_eff / eta^2``, ``rate = sigma^2 / eta^2``: the
    exact ``P(tau) = 1 / (lam_eff + (eta^2 - lam_eff) e^{-2 a tau})`` matched in value and slope
    at ``tau = 0`` by ``1 - C e^{-D tau}`` (see
    ``estimators.closed_forms.separable.separable_precision``). Needs ``a > 0``, ``sigma^2 > 0``.
    """
    lam_eff = process_var / (2 * decay)
    ratio = lam_eff / measurement_var
    rate = process_var / measurement_var
    return torch.log(ratio - (1 - ratio) * torch.expm1(-rate * lag)) - torch.log(lam_eff)


def separable_factors(d: HeadDynamics, rel):
    """``(c, f, g)`` with ``c + f_i g_j = P~(t_i - t_j)`` (B.1); rel: (Bt, 1, T, 1) -> (.., n).

    ``c = 1 / lam_eff``, ``f_i = -c (1 - lam_eff / eta^2) e^{-D rel_i}``, ``g_j = e^{D rel_j}``,
    ``D = sigma^2 / eta^2``, ``lam_eff = sigma^2 / (2 a)``.
    """
    a, s2, e2 = (x[None, :, None, :] for x in (d.decay, d.process_var, d.measurement_var))
    lam_eff = s2 / (2 * a)
    rate = s2 / e2
    c = 1 / lam_eff
    f = -c * (1 - lam_eff / e2) * torch.exp(-rate * rel)
    return c, f, torch.exp(rate * rel)

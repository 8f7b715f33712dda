"""Time lags, masks and the isotropic propagated-variance kernel, shared by the filtering layers.

Seed convention: the lag between query ``i`` and key ``j`` is ``tau_ij = t_i - t_j`` (>= 0 for the
keys a causal query may see).
"""

from __future__ import annotations

import torch

# |x| below which (1 - e^{-x}) / x is evaluated by its Taylor series 1 - x/2 + x^2/6: the series
# error there is x^3/24 < 1e-13, and -expm1(-x)/x loses no accuracy above it.
_SERIES_BELOW = 1e-4


def lags(t: torch.Tensor) -> torch.Tensor:
    """``tau[..., i, j] = t_i - t_j``: ``t (..., T) -> (..., T, T)``."""
    return t.unsqueeze(-1) - t.unsqueeze(-2)


def relaxation(x: torch.Tensor) -> torch.Tensor:
    """``(1 - e^{-x}) / x`` with its limit 1 at ``x = 0``; smooth, and gradient-safe there."""
    small = x.abs() < _SERIES_BELOW
    safe = torch.where(small, torch.ones_like(x), x)  # keeps the unused branch finite for autograd
    series = 1 - x / 2 + x * x / 6
    return torch.where(small, series, -torch.expm1(-safe) / safe)


def isotropic_variance(lag_abs, decay, process_var, measurement_var) -> torch.Tensor:
    """Propagated measurement variance of the isotropic model (seed 000 eq. in 3.6 / Alg. 1).

    ``sigma_V^2(tau) = sigma^2 (1 - e^{-2 a tau}) / (2 a) + eta^2 e^{-2 a tau}`` for a decay rate
    ``a = -Re(lambda) >= 0`` and a lag ``tau = |t_i - t_j| >= 0``; the ``a -> 0`` limit is
    ``sigma^2 tau + eta^2`` (seed 000 3.8), reached smoothly through :func:`relaxation`.
    All arguments broadcast; ``decay``, ``process_var``, ``measurement_var`` are typically
    per-head ``(H, 1, 1)`` tensors and ``lag_abs`` is ``(B or 1, 1, T, T)``.
    """
    x = 2 * decay * lag_abs
    return process_var * lag_abs * relaxation(x) + measurement_var * torch.exp(-x)

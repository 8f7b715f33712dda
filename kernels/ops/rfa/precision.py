"""RFA's lag kernel: the residual variance of seed 004 eq. (9) and its precision.

    V(tau) = sigma~^2 (1 - e^{-2 mu tau}) + eta^2 e^{-2 mu tau} + gamma^2,   tau = |t_i - t_j|,

``sigma~^2 = sigma^2 / (2 mu)``; given ``sigma^2`` (the default) the ``mu -> 0`` limit is the
Brownian ``sigma^2 tau + eta^2 + gamma^2`` (B.4.2), given ``sigma~^2`` (``steady_state``) the
constant ``eta^2 + gamma^2``. ``V`` is evaluated from its non-negative parts (never as
``a e^{-2 mu tau} + b``, which cancels). Shapes: every argument broadcasts.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels.ops.common.lags import isotropic_variance


class LagKernel(NamedTuple):
    """Eq. (9) at given lags: ``E = e^{-mu tau}``, ``B = log P = -log V``, ``P = 1/V``."""

    decay: torch.Tensor
    log_precision: torch.Tensor
    precision: torch.Tensor


def lag_variance(
    lag_abs: torch.Tensor,
    *,
    decay,
    process_var,
    measurement_var,
    anchor_var,
    steady_state: bool = False,
) -> torch.Tensor:
    """Seed 004 eq. (9) residual variance ``V(tau)`` at lags ``tau >= 0`` (any broadcast shape).

    ``steady_state=False``: ``process_var`` is ``sigma^2`` and ``V = sigma^2 tau (1 -
    e^{-2 mu tau}) / (2 mu tau) + eta^2 e^{-2 mu tau} + gamma^2`` with its ``mu -> 0`` limit
    ``sigma^2 tau + eta^2 + gamma^2`` (`kernels.ops.common.lags.isotropic_variance`).
    ``steady_state=True``: ``process_var`` is ``sigma~^2`` and ``V = sigma~^2 (1 -
    e^{-2 mu tau}) + eta^2 e^{-2 mu tau} + gamma^2`` (Algorithm 1), ``1 - e^{-x}`` as
    ``-expm1(-x)``.
    """
    if steady_state:
        x = 2 * decay * lag_abs
        return -process_var * torch.expm1(-x) + measurement_var * torch.exp(-x) + anchor_var
    return isotropic_variance(lag_abs, decay, process_var, measurement_var) + anchor_var


def rfa_lag_kernel(
    lag_abs: torch.Tensor,
    *,
    decay,
    process_var=0.0,
    measurement_var=1.0,
    anchor_var=0.0,
    steady_state: bool = False,
) -> LagKernel:
    """`LagKernel` (E, log P, P) of eq. (9) at lags ``tau = |t_i - t_j| >= 0``.

    ``log P = -log V`` is the additive bias and ``P`` the multiplicative gate of eq. (11). In
    the integrative regime (``a > 0``) it equals the paper's ``-log b - softplus(log(a/b) -
    2 mu tau)``, in the diffusive one ``-log b - log(1 - (|a|/b) e^{-2 mu tau})`` (B.4.1);
    the parameters broadcast against ``lag_abs``.
    """
    variance = lag_variance(
        lag_abs,
        decay=decay,
        process_var=process_var,
        measurement_var=measurement_var,
        anchor_var=anchor_var,
        steady_state=steady_state,
    )
    log_precision = -torch.log(variance)
    return LagKernel(torch.exp(-decay * lag_abs), log_precision, torch.exp(log_precision))

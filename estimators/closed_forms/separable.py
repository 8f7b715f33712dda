"""Separable approximation of the per-mode precision tensor (seed 000 B.1, with A.3 and 3.5).

When ``A = S diag(lam) S^-1``, ``C = S diag(c) S^-1``, ``Q = S diag(q) S^H`` and
``R = S diag(rho) S^H`` share the eigenbasis ``S``, the propagated measurement covariance is
``V^C(dt) = S diag(v(dt)) S^H`` (seed 000 A.3) and the precision tensor of the tensor-form
attention (seed 000 3.1, 3.5) is, per mode ``k`` and pair ``(i, j)`` with ``dt = t_j - t_i``,

    P[i, j, k] = 1 / v_k(dt),   v_k(dt) = |c_k|^2 lam_V,k(dt) + e^{-2 Re(lam_k) dt} rho_k,

with ``lam_V,k(dt) = sign(dt) q_k phi(lam_k, dt)`` from `estimators.closed_forms.dle`. For a
causal pair the lag ``tau = t_i - t_j = -dt >= 0`` and, with ``a_k = -2 Re(lam_k) > 0``,

    v_k(tau) = lam_eff,k (1 + lam_r,k e^{-a_k tau}),   lam_eff,k = |c_k|^2 q_k / a_k,
    lam_r,k = rho_k / lam_eff,k - 1 > -1.

B.1 approximates ``(1 + r e^{-a tau})^-1`` by ``1 - C e^{-D tau}``, matching the value and the
slope at ``tau = 0``, which gives

    P~_k(tau) = (1 / lam_eff,k) (1 - (1 - lam_eff,k / rho_k) e^{-|c_k|^2 q_k tau / rho_k}).

Because ``e^{-D (t_i - t_j)} = e^{-D t_i} e^{D t_j}``, the approximation separates as
``P~[i, j, k] = c[k] + f[i, k] g[j, k]`` and the weighted average of B.1 needs only
``(T, T)`` and ``(T, d)`` arrays (`separable_distance`, `separable_estimate`).

Layout: time on rows. The seed writes ``P[k, i, j]`` and ``d x m`` columns; here tensors are
``(..., T, T, d)`` (query time ``i``, key time ``j``, mode ``k``) and sequences ``(..., T, d)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from estimators.closed_forms.dle import eigen_mode_variances
from sde_sim import validation

# Largest exponent allowed in the separable factors e^{-D (t - t_ref)} and e^{D (t - t_ref)}:
# half of log(float64 max) ~ 709, so that a factor, and a product or a sum of T of them in the
# matrix forms, stays finite.
_MAX_FACTOR_EXPONENT = 0.5 * float(np.log(np.finfo(float).max))


class SeparablePrecision(NamedTuple):
    """Per-mode constants of the separable approximation, each of shape (d,).

    ``P~(tau) = floor * (ratio - (1 - ratio) expm1(-rate tau))``, which equals
    ``floor * (1 - (1 - ratio) e^{-rate tau})``.

    floor : ``1 / lam_eff``, the precision as ``tau -> inf`` (seed's ``1/lambda_eff,k``).
    ratio : ``lam_eff / rho = 1 / (1 + lam_r)``, so that ``floor * ratio = 1 / rho = P(0)``.
    rate : ``|c|^2 q / rho = a / (1 + lam_r)``, the decay rate of the approximation.
    """

    floor: np.ndarray
    ratio: np.ndarray
    rate: np.ndarray


def _mode_data(eigenvalues, process_variances, measurement_variances, output_gains):
    lam = validation.complex_array("eigenvalues", eigenvalues, ndim=1)
    d = lam.shape[0]
    q = validation.nonnegative("process_variances", process_variances)
    rho = validation.nonnegative("measurement_variances", measurement_variances)
    gains = np.ones(d, complex) if output_gains is None else output_gains
    gains = validation.complex_array("output_gains", gains, ndim=1)
    for name, arr in (
        ("process_variances", q),
        ("measurement_variances", rho),
        ("output_gains", gains),
    ):
        if arr.shape != (d,):
            raise ValueError(f"{name} must have shape ({d},) to match eigenvalues, got {arr.shape}")
    if np.any(rho == 0):
        # v_k(0) = rho_k: a noiseless measurement has infinite precision at zero lag.
        raise ValueError(
            f"measurement_variances must be > 0 (the precision at zero lag is 1/rho), "
            f"got min {rho.min():g}"
        )
    return lam, q, rho, np.abs(gains) ** 2


def mode_variance(
    eigenvalues, process_variances, measurement_variances, dt, *, output_gains=None
) -> np.ndarray:
    """``v_k(dt) = |c_k|^2 sign(dt) q_k phi(lam_k, dt) + e^{-2 Re(lam_k) dt} rho_k`` (seed 000 A.3).

    The eigenvalues of the propagated measurement covariance ``V^C(dt) = S diag(v) S^H`` for
    both signs of ``dt = t_j - t_i`` (the seed's convention: ``dt <= 0`` is causal), any
    ``Re(lam)`` (the ``Re(lam) = 0`` branch of `dle.psi` included).

    Parameters
    ----------
    eigenvalues : (d,) complex eigenvalues ``lam_k`` of A.
    process_variances : (d,) ``q_k >= 0`` (``Q = S diag(q) S^H``).
    measurement_variances : (d,) ``rho_k > 0`` (``R = S diag(rho) S^H``).
    dt : scalar or array of lags ``t_j - t_i``.
    output_gains : (d,) complex eigenvalues ``c_k`` of ``C = S diag(c) S^-1``; default 1.

    Returns
    -------
    ``dt.shape + (d,)`` positive variances.
    """
    lam, q, rho, c2 = _mode_data(
        eigenvalues, process_variances, measurement_variances, output_gains
    )
    dt = validation.real_array("dt", dt)
    process = eigen_mode_variances(lam, q, dt)
    return c2 * process + np.exp(-2.0 * lam.real * dt[..., None]) * rho


def mode_precision(
    eigenvalues, process_variances, measurement_variances, dt, *, output_gains=None
) -> np.ndarray:
    """``1 / v_k(dt)``, the diagonal of ``S^H P^C(dt) S`` (seed 000 A.3, B.1).

    Arguments as `mode_variance`; returns ``dt.shape + (d,)``.
    """
    return 1.0 / mode_variance(
        eigenvalues, process_variances, measurement_variances, dt, output_gains=output_gains
    )


def precision_tensor(
    eigenvalues, process_variances, measurement_variances, t, *, output_gains=None
) -> np.ndarray:
    """The exact tensor ``P[..., i, j, k] = 1 / v_k(t_j - t_i)`` (seed 000 3.1, B.1).

    Causal pairs (``t_j <= t_i``) are the ones B.1 approximates; pairs with ``t_j > t_i`` get
    the non-causal (backward) form of A.3, which the causal attention masks out.

    Shapes: t (..., T) -> (..., T, T, d).
    """
    t = validation.real_array("t", t)
    if t.ndim < 1:
        raise ValueError(f"t must have at least 1 dimension, got shape {t.shape}")
    dt = t[..., None, :] - t[..., :, None]
    return mode_precision(
        eigenvalues, process_variances, measurement_variances, dt, output_gains=output_gains
    )


def separable_parameters(
    eigenvalues, process_variances, measurement_variances, *, output_gains=None
) -> SeparablePrecision:
    """The constants ``1/lam_eff``, ``lam_eff/rho`` and ``|c|^2 q / rho`` of B.1 (seed 000).

    Raises
    ------
    ValueError
        If a mode is not strictly stable (``Re(lam) >= 0`` makes ``lam_eff`` infinite or
        negative) or has no process noise (``q = 0`` makes ``lam_eff = 0``); B.1 needs both.
    """
    lam, q, rho, c2 = _mode_data(
        eigenvalues, process_variances, measurement_variances, output_gains
    )
    if np.any(lam.real >= 0):
        raise ValueError(
            "eigenvalues must have Re < 0 for the separable approximation (it needs the "
            f"steady-state variance lam_eff); max Re is {lam.real.max():g}"
        )
    if np.any(c2 * q == 0):
        raise ValueError(
            "process_variances and output_gains must be nonzero for the separable "
            "approximation (lam_eff = |c|^2 q / (-2 Re lam) must be > 0)"
        )
    lam_eff = c2 * q / (-2.0 * lam.real)
    return SeparablePrecision(floor=1.0 / lam_eff, ratio=lam_eff / rho, rate=c2 * q / rho)


def separable_precision(
    eigenvalues, process_variances, measurement_variances, lag, *, output_gains=None
) -> np.ndarray:
    """B.1's approximation ``P~_k(tau) = (1/lam_eff)(1 - (1 - lam_eff/rho) e^{-|c|^2 q tau/rho})``.

    Evaluated as ``floor * (ratio - (1 - ratio) expm1(-rate tau))``: at small lags this keeps
    the full relative precision of ``P(0) = 1/rho`` when ``ratio`` is small, where
    ``1 - (1 - ratio) e^{-rate tau}`` would cancel.

    Parameters
    ----------
    lag : scalar or array of causal lags ``tau = t_i - t_j >= 0`` (note the sign: ``-dt``).
    The other parameters are those of `mode_variance`.

    Returns
    -------
    ``lag.shape + (d,)``.
    """
    params = separable_parameters(
        eigenvalues, process_variances, measurement_variances, output_gains=output_gains
    )
    lag = validation.nonnegative("lag", lag)
    return _evaluate(params, lag)


def _evaluate(params: SeparablePrecision, lag: np.ndarray) -> np.ndarray:
    decay = np.expm1(-params.rate * lag[..., None])
    return params.floor * (params.ratio - (1.0 - params.ratio) * decay)


def separable_factors(
    eigenvalues,
    process_variances,
    measurement_variances,
    t,
    *,
    output_gains=None,
    reference_time: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(c, f, g)`` with ``c[k] + f[..., i, k] g[..., j, k] = P~_k(t_i - t_j)`` (seed 000 B.1).

    ``c = 1/lam_eff``, ``f[i] = -(1/lam_eff)(1 - lam_eff/rho) e^{-D (t_i - t_ref)}``,
    ``g[j] = e^{D (t_j - t_ref)}``, ``D = |c|^2 q / rho``. The product does not depend on
    ``t_ref``; the default, the midpoint of the time span, halves the largest exponent.

    The factors grow like ``e^{D |t - t_ref|}``: the same overflow as every factorisation of
    ``e^{-D (t_i - t_j)}`` (seed 000 3.5; seed 004 B.2.3). They are refused, rather than
    returned as inf, when an exponent exceeds ``log(float max) / 2``.

    Shapes: t (..., T) -> c (d,), f (..., T, d), g (..., T, d).
    """
    params = separable_parameters(
        eigenvalues, process_variances, measurement_variances, output_gains=output_gains
    )
    t = validation.real_array("t", t)
    if t.ndim < 1:
        raise ValueError(f"t must have at least 1 dimension, got shape {t.shape}")
    if reference_time is None:
        t_ref = 0.5 * (t.max(axis=-1, keepdims=True) + t.min(axis=-1, keepdims=True))
    else:
        t_ref = np.asarray(validation.scalar("reference_time", reference_time))
    shifted = (t - t_ref)[..., None]
    reach = float(np.max(np.abs(shifted) * params.rate, initial=0.0))
    if reach > _MAX_FACTOR_EXPONENT:
        raise ValueError(
            f"t spans too long a range for the separable factors: D |t - t_ref| reaches "
            f"{reach:.4g} > {_MAX_FACTOR_EXPONENT:.4g} (e^{{D t}} would overflow); split the "
            "sequence or evaluate the kernel pairwise with separable_precision"
        )
    f = -params.floor * (1.0 - params.ratio) * np.exp(-params.rate * shifted)
    g = np.exp(params.rate * shifted)
    return params.floor, f, g


def _factor_arrays(c, f, g):
    c = validation.real_array("c", c, ndim=1)
    f = validation.real_array("f", f)
    g = validation.real_array("g", g)
    if f.ndim < 2 or f.shape[-1] != c.shape[0]:
        raise ValueError(f"f must have shape (..., T, {c.shape[0]}), got {f.shape}")
    if g.shape != f.shape:
        raise ValueError(f"g must have the shape of f {f.shape}, got {g.shape}")
    return c, f, g


def _sequence(name: str, value, shape: tuple[int, ...]) -> np.ndarray:
    arr = validation.complex_array(name, value)
    if arr.shape[-2:] != shape[-2:]:
        raise ValueError(f"{name} must have shape (..., {shape[-2]}, {shape[-1]}), got {arr.shape}")
    return arr


def separable_distance(c, f, g, phi, zq_hat, zk_hat) -> np.ndarray:
    """``D[i, j] = sum_k (c_k + f_ik g_jk) |Phi_ik|^2 |Zq_ik - Zk_jk|^2`` by matrix products.

    Seed 000 3.5 writes the squared Mahalanobis distance of the tensor form with the
    factorised residual ``R[k, i, j] = Phi[k, i] (Zq^[k, i] - Zk^[k, j])``,
    ``Phi = e^{lam t_i}``, ``Zq^ = e^{-lam t_i} Zq``, ``Zk^ = e^{-lam t_j} Zk``; with the
    separable precision B.1 expands ``|a - b|^2 = |a|^2 + |b|^2 - 2 Re(a* b)`` into products
    of ``(T, d)`` arrays, so no ``(T, T, d)`` tensor is formed. (The seed prints ``c[k]`` outside
    the sum over ``k``; here it stays inside, where it belongs.)

    Shapes: c (d,); f, g (..., T, d) real; phi, zq_hat, zk_hat (..., T, d) complex ->
    (..., T, T) real.
    """
    c, f, g = _factor_arrays(c, f, g)
    phi2 = np.abs(_sequence("phi", phi, f.shape)) ** 2
    zq = _sequence("zq_hat", zq_hat, f.shape)
    zk = _sequence("zk_hat", zk_hat, f.shape)
    zq2, zk2 = np.abs(zq) ** 2, np.abs(zk) ** 2

    def mT(x):
        return np.swapaxes(x, -1, -2)

    # c part: the query term does not depend on j (a column broadcast), as in seed 000 3.5.
    left = phi2 * c
    total = np.sum(left * zq2, axis=-1)[..., :, None] + left @ mT(zk2)
    total = total - 2.0 * np.real((left * zq.conj()) @ mT(zk))
    # f g part: every term carries g[j], so the query term becomes a product too.
    left = phi2 * f
    total = total + (left * zq2) @ mT(g) + left @ mT(g * zk2)
    return total - 2.0 * np.real((left * zq.conj()) @ mT(g * zk))


def separable_estimate(weights, c, f, g, phi_v, zv_hat) -> np.ndarray:
    """B.1's causal estimate ``Zbar = Phi_v U / N`` with only ``(T, T)`` and ``(T, d)`` arrays.

    ``Zbar[i, k] = Phi_v[i, k] sum_{j<=i} W_ij P~_ijk Zv^[j, k] / sum_{j<=i} W_ij P~_ijk`` with
    ``P~_ijk = c_k + f_ik g_jk``, evaluated as (seed 000 B.1, time on rows)

        N = c (W_c 1) + f (W_c g),   U = c (W_c Zv^) + f (W_c (g Zv^)),

    where ``W_c`` is ``weights`` with the entries above the diagonal (``j > i``) set to zero;
    rows are in increasing time order.

    Shapes: weights (..., T, T) >= 0 (e.g. ``1 / (1 + D)``); c (d,); f, g (..., T, d);
    phi_v, zv_hat (..., T, d) complex -> (..., T, d) complex.
    """
    c, f, g = _factor_arrays(c, f, g)
    W = validation.nonnegative("weights", weights)
    T = f.shape[-2]
    if W.shape[-2:] != (T, T):
        raise ValueError(f"weights must have shape (..., {T}, {T}), got {W.shape}")
    phi = _sequence("phi_v", phi_v, f.shape)
    zv = _sequence("zv_hat", zv_hat, f.shape)
    Wc = np.tril(W)
    N = c * np.sum(Wc, axis=-1)[..., None] + f * (Wc @ g)
    U = c * (Wc @ zv) + f * (Wc @ (g * zv))
    if np.any(N <= 0):
        raise ValueError(
            "weights must give every row a positive total weight (each row needs a "
            "nonzero weight on or before the diagonal)"
        )
    return phi * U / N

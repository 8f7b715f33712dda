"""Radial-tangential (RT) SDE closed forms: covariance, precision, Ito forms (seeds 000 and 003).

Everything is in real eigen-coordinates ``x_s`` in R^d (seed 003 digest, section 8 item 7: ``d``
is the real dimension, ``Omega`` a real skew generator; RoPE pairs are 2x2 blocks). With the unit
direction ``u = x_s / |x_s|`` and the projectors ``P_R(u) = u u^T``, ``P_T(u) = I - u u^T``, the
RT-SDE of seed 003 eq. 3 is

    dx_s = (-mu_r P_R(u) - mu_t P_T(u) + Omega) x_s dt + sigma_r P_R(u) dw + sigma_t P_T(u) dw.

**Propagated covariance (item 3; seed 000 5.2, seed 003 Proposition 1, eqs. 5-8).** Lags follow
the suite's convention (seed 000, as in `estimators.closed_forms.dle`): ``dt = t_j - t_i`` is the
lag of the key/measurement ``j`` seen from the query ``i``; ``dt < 0`` is causal and is seed 003's
``Delta t_ij = t_i - t_j = -dt``. With ``s = t_i - t_j = -dt`` and
``phi(mu, s) = (1 - e^{-2 mu s}) / (2 mu)`` (``= s`` at ``mu = 0``),

    Lambda_V^(dt) = sigma_Vr^2(dt) P_R(u(t_i)) + sigma_Vt^2(dt) P_T(u(t_i)),
    sigma_Vr^2 = sign(s) phi(mu_r, s) sigma_r^2 + e^{-2 mu_r s} eta_r^2,
    sigma_Vt^2 = sign(s) phi(mu_t, s) sigma_t^2 + e^{-2 mu_t s} eta_t^2,
    Lambda_V^^-1 = P_R / sigma_Vr^2 + P_T / sigma_Vt^2        (Sherman-Morrison, eq. 8).

For causal lags ``sign(s) phi(mu, s) = phi(mu, |dt|)`` is the seed's form; for ``dt > 0`` it is the
backward (pulled-back) variance ``(e^{2 mu dt} - 1) / (2 mu)``, as in `dle`. This is exact for the
*frozen-frame* reading of the SDE, ``u(t) = e^{Omega (t - t_j)} u(t_j)`` (seed 003 digest C12): the
linear time-varying system has the transition

    Phi(t_i <- t_j) = e^{Omega s} (e^{-mu_r s} P_R(u(t_j)) + e^{-mu_t s} P_T(u(t_j)))
                    = (e^{-mu_r s} P_R(u(t_i)) + e^{-mu_t s} P_T(u(t_i))) e^{Omega s},

(the order the seed prints, ``e^{Omega s}`` to the left of projectors at ``u(t_j + s)``, is wrong:
digest section 8 item 2). For the literal SDE (``u = x_s/|x_s|``) the tangential spread decays at
``mu_r``, not ``mu_t`` (digest C17): Proposition 1 describes it only when ``mu_t = mu_r``.
Seed 000 5.2 also carries a measurement gain ``lambda_C`` (``z = lambda_C x + v``), which scales
the process part by ``|lambda_C|^2``; as in seed 003, ``lambda_C = 1`` here.

**Radial SDE (item 10; seed 000 5.1, seed 003 B.1-B.3).** For the literal SDE, Ito's lemma gives
(digest C3-C5; seed 000 prints ``dm = alpha m dt + sigma_r dw_r``, which drops ``tr P_T = d - 1``)

    dm   = (-mu_r m + (d - 1) sigma_t^2 / (2 m)) dt + sigma_r dw_r,
    du   = (Omega - (d - 1) sigma_t^2 / (2 m^2)) u dt + (sigma_t / m) P_T(u) dw,
    d(m^2) = (-2 mu_r m^2 + sigma_r^2 + (d - 1) sigma_t^2) dt + 2 sigma_r m dw_r,
    E[m^2(t)] = m0^2 e^{-2 mu_r t} + (sigma_r^2 + (d - 1) sigma_t^2) phi(mu_r, t)
              = m_inf^2 + (m0^2 - m_inf^2) e^{-2 mu_r t},
    m_inf^2 = (sigma_r^2 + (d - 1) sigma_t^2) / (2 mu_r).

The measured direction and the spherical exponential map (seed 000 5.1, seed 003 eq. 4): with
``z_s = (m + v_r) u + P_T(u) v_t``, ``u_z = z_s / |z_s| ~ N(u, (eta_t^2 / m^2) P_T(u))`` to first
order in ``eta / m``, and ``exp_u(v) = cos|v| u + sin|v| v / |v|`` for tangent ``v``.

Shapes: directions ``u`` (..., d) (normalised here; zero rows are rejected); lags, times and
magnitudes broadcast against ``u.shape[:-1]``; matrices come back as ``(..., d, d)``. The papers
write states as columns; rows here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import expm

from sde_sim import validation
from sde_sim.exact import ou_variance_factor

# A direction must be unit up to this relative error to count as a point on the sphere, and a
# tangent vector orthogonal to it up to this multiple of its length: round-off of a normalisation
# or a projection is ~1e-16, so 1e-9 accepts any honestly computed input and rejects mistakes.
_SPHERE_RTOL = 1e-9
# |Omega + Omega^T| allowed, relative to |Omega|: round-off of a constructed skew matrix.
_SKEW_RTOL = 1e-12


class RTVariances(NamedTuple):
    """Propagated variance along the radial direction and per tangent direction (seed 003 eq. 7)."""

    radial: np.ndarray
    tangential: np.ndarray


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _direction(name: str, value) -> np.ndarray:
    """Rows of `value` (..., d), d >= 2, scaled to unit length; zero rows raise."""
    arr = validation.real_array(name, value)
    if arr.ndim < 1 or arr.shape[-1] < 2:
        raise ValueError(f"{name} must have shape (..., d) with d >= 2, got {arr.shape}")
    norm = np.linalg.norm(arr, axis=-1, keepdims=True)
    if np.any(norm == 0):
        raise ValueError(f"{name} must be nonzero: a zero vector has no direction")
    return arr / norm


def _skew(name: str, value, dim: int) -> np.ndarray:
    arr = validation.square_matrix(name, value, dim)
    gap = float(np.max(np.abs(arr + arr.T), initial=0.0))
    if gap > _SKEW_RTOL * max(1.0, float(np.max(np.abs(arr), initial=0.0))):
        raise ValueError(
            f"{name} must be skew-symmetric ({name}^T = -{name}); max |{name} + {name}^T| = "
            f"{gap:.3g}"
        )
    return 0.5 * (arr - arr.T)


def _dimension(value) -> int:
    return validation.count("dim", value, minimum=1)


# --------------------------------------------------------------------------------------------
# Item 3: propagated covariance and precision (seed 000 5.2; seed 003 Proposition 1)
# --------------------------------------------------------------------------------------------


def phi(mu, lag) -> np.ndarray:
    """``phi(mu, lag) = (1 - e^{-2 mu lag}) / (2 mu)``, and ``lag`` at ``mu = 0`` (seed 003 eq. 7).

    Seed 000 5.2 calls it ``kappa_F`` (with ``alpha = -mu``). Evaluated as
    ``-expm1(-2 mu lag) / (2 mu)`` (`sde_sim.exact.ou_variance_factor`), which keeps full relative
    precision as ``mu lag -> 0``; ``mu == 0`` exactly takes the limit. Any real ``mu`` and ``lag``
    are accepted (``phi`` is negative for ``lag < 0``).

    Shapes: `mu` and `lag` broadcast together.
    """
    mu = validation.real_array("mu", mu)
    lag = validation.real_array("lag", lag)
    return ou_variance_factor(mu, lag)


def projectors(u) -> tuple[np.ndarray, np.ndarray]:
    """``(P_R, P_T) = (u u^T, I - u u^T)`` for directions `u` (..., d) -> two (..., d, d)."""
    u = _direction("u", u)
    P_R = u[..., :, None] * u[..., None, :]
    return P_R, np.eye(u.shape[-1]) - P_R


def radial_tangential_matrix(u, radial, tangential) -> np.ndarray:
    """``radial P_R(u) + tangential P_T(u)``: the form of Lambda_Q, Lambda_R and eq. 7.

    Shapes: u (..., d); `radial`, `tangential` broadcast against ``u.shape[:-1]`` -> (..., d, d).
    """
    P_R, P_T = projectors(u)
    radial = validation.real_array("radial", radial)[..., None, None]
    tangential = validation.real_array("tangential", tangential)[..., None, None]
    return radial * P_R + tangential * P_T


def propagated_variances(dt, *, mu_r, mu_t, sigma_r, sigma_t, eta_r=0.0, eta_t=0.0) -> RTVariances:
    """``(sigma_Vr^2, sigma_Vt^2)`` of seed 003 eq. 7 (seed 000 5.2), for lags ``dt = t_j - t_i``.

    ``sigma_V^2 = sign(s) phi(mu, s) sigma^2 + e^{-2 mu s} eta^2`` with ``s = t_i - t_j = -dt``:
    the process noise accumulated between the two times plus the key's measurement noise carried
    to the query time. For causal lags (``dt <= 0``) this is the seed's
    ``phi(mu, |dt|) sigma^2 + e^{-2 mu |dt|} eta^2``; for ``dt > 0`` the backward form.

    Parameters
    ----------
    dt : lags, any shape.
    mu_r, mu_t : radial and tangential decay rates (any real; ``0`` is the pure-rotation limit).
    sigma_r, sigma_t : process-noise scales, >= 0.
    eta_r, eta_t : measurement-noise scales of the key, >= 0.

    All parameters broadcast with `dt` (per-head values allowed).
    """
    s = -validation.real_array("dt", dt)
    mu_r = validation.real_array("mu_r", mu_r)
    mu_t = validation.real_array("mu_t", mu_t)
    sig_r = validation.nonnegative("sigma_r", sigma_r)
    sig_t = validation.nonnegative("sigma_t", sigma_t)
    eta_r = validation.nonnegative("eta_r", eta_r)
    eta_t = validation.nonnegative("eta_t", eta_t)
    sign = np.sign(s)
    radial = sign * ou_variance_factor(mu_r, s) * sig_r**2 + np.exp(-2.0 * mu_r * s) * eta_r**2
    tangential = sign * ou_variance_factor(mu_t, s) * sig_t**2 + np.exp(-2.0 * mu_t * s) * eta_t**2
    return RTVariances(np.asarray(radial, dtype=float), np.asarray(tangential, dtype=float))


def propagated_covariance(
    u, dt, *, mu_r, mu_t, sigma_r, sigma_t, eta_r=0.0, eta_t=0.0
) -> np.ndarray:
    """``Lambda_V^(dt) = sigma_Vr^2 P_R(u) + sigma_Vt^2 P_T(u)`` (seed 003 eq. 7, seed 000 5.2).

    Parameters
    ----------
    u : (..., d) nominal direction at the *query* time ``t_i`` (normalised here).
    dt : lags ``t_j - t_i``, broadcast against ``u.shape[:-1]``.
    mu_r, mu_t, sigma_r, sigma_t, eta_r, eta_t : as in `propagated_variances`.

    Returns
    -------
    (..., d, d) covariance of the transported key ``Phi(t_i <- t_j) z_j`` around ``x(t_i)``.
    """
    var = propagated_variances(
        dt, mu_r=mu_r, mu_t=mu_t, sigma_r=sigma_r, sigma_t=sigma_t, eta_r=eta_r, eta_t=eta_t
    )
    return radial_tangential_matrix(u, var.radial, var.tangential)


def propagated_precision(
    u, dt, *, mu_r, mu_t, sigma_r, sigma_t, eta_r=0.0, eta_t=0.0
) -> np.ndarray:
    """``Lambda_V^^-1 = P_R(u) / sigma_Vr^2 + P_T(u) / sigma_Vt^2`` (seed 003 eq. 8).

    The Sherman-Morrison inverse of ``a I + b u u^T`` with ``a = sigma_Vt^2``,
    ``b = sigma_Vr^2 - sigma_Vt^2`` (seed 000 5.2), which splits over the two orthogonal
    subspaces. Same arguments as `propagated_covariance`.

    Raises
    ------
    ValueError
        If a propagated variance is not positive (e.g. ``dt = 0`` without measurement noise):
        the covariance is singular there.
    """
    var = propagated_variances(
        dt, mu_r=mu_r, mu_t=mu_t, sigma_r=sigma_r, sigma_t=sigma_t, eta_r=eta_r, eta_t=eta_t
    )
    for name, v in (("radial", var.radial), ("tangential", var.tangential)):
        if np.any(v <= 0):
            raise ValueError(
                f"the propagated {name} variance must be > 0 to invert; its minimum is "
                f"{float(np.min(v)):.3g} (zero lag without measurement noise is singular)"
            )
    return radial_tangential_matrix(u, 1.0 / var.radial, 1.0 / var.tangential)


def rank_one_inverse(a, b, u) -> np.ndarray:
    """Sherman-Morrison: ``(a I + b u u^T)^-1 = (I - b u u^T / (a + b |u|^2)) / a``.

    For a unit ``u`` this is ``P_T(u) / a + P_R(u) / (a + b)`` (seed 000 5.2, seed 003 B.4). Here
    `u` (..., d) is used as given (not normalised); `a`, `b` broadcast against ``u.shape[:-1]``.

    Raises
    ------
    ValueError
        If ``a = 0`` or ``a + b |u|^2 = 0`` (the matrix is singular).
    """
    u = validation.real_array("u", u)
    if u.ndim < 1:
        raise ValueError(f"u must have shape (..., d), got {u.shape}")
    a = validation.real_array("a", a)
    b = validation.real_array("b", b)
    denom = a + b * np.sum(u * u, axis=-1)
    if np.any(a == 0):
        raise ValueError("a must be nonzero: a I + b u u^T is singular on the complement of u")
    if np.any(denom == 0):
        raise ValueError("a + b |u|^2 must be nonzero: a I + b u u^T is singular along u")
    outer = u[..., :, None] * u[..., None, :]
    eye = np.eye(u.shape[-1])
    return (eye - (b / denom)[..., None, None] * outer) / a[..., None, None]


def nominal_direction(Omega, u0, s) -> np.ndarray:
    """``u(t0 + s) = e^{Omega s} u0``: the frozen frame carried by the rotation (seed 003 B.4).

    Shapes: Omega (d, d) skew; u0 (..., d) (normalised here); s broadcast against
    ``u0.shape[:-1]`` -> (..., d).
    """
    u0 = _direction("u0", u0)
    Omega = _skew("Omega", Omega, u0.shape[-1])
    s = validation.real_array("s", s)
    d = u0.shape[-1]
    # One exponential per time, not per direction.
    R = expm(Omega * s.reshape(-1)[:, None, None]).reshape(*s.shape, d, d)
    return np.einsum("...de,...e->...d", R, u0)


def frozen_frame_drift(Omega, u, *, mu_r, mu_t) -> np.ndarray:
    """``A(u) = -mu_r P_R(u) - mu_t P_T(u) + Omega`` (seed 003 eq. 3), (..., d, d)."""
    P_R, P_T = projectors(u)
    Omega = _skew("Omega", Omega, P_R.shape[-1])
    mu_r = validation.real_array("mu_r", mu_r)[..., None, None]
    mu_t = validation.real_array("mu_t", mu_t)[..., None, None]
    return -mu_r * P_R - mu_t * P_T + Omega


def frozen_frame_transition(Omega, u_key, dt, *, mu_r, mu_t) -> np.ndarray:
    """Transition ``Phi(t_i <- t_j)`` of the frozen-frame RT-SDE, ``dt = t_j - t_i``.

    ``Phi = e^{Omega s} (e^{-mu_r s} P_R(u_j) + e^{-mu_t s} P_T(u_j))``, ``s = -dt``, with ``u_j``
    the nominal direction at the key time ``t_j``; it equals
    ``(e^{-mu_r s} P_R(u_i) + e^{-mu_t s} P_T(u_i)) e^{Omega s}`` with ``u_i = e^{Omega s} u_j``.
    This is the corrected ordering of seed 003 B.4 (digest section 8 item 2). The transported
    key ``Phi z_j`` is the estimate of ``x(t_i)`` whose covariance is `propagated_covariance`
    at ``u_i``; with ``mu_t = mu_r = mu`` it is ``e^{-A dt}``, ``A = -mu I + Omega``.

    Shapes: Omega (d, d); u_key (..., d); dt broadcast against ``u_key.shape[:-1]`` ->
    (..., d, d).
    """
    P_R, P_T = projectors(u_key)
    d = P_R.shape[-1]
    Omega = _skew("Omega", Omega, d)
    s = -validation.real_array("dt", dt)
    mu_r = validation.real_array("mu_r", mu_r)
    mu_t = validation.real_array("mu_t", mu_t)
    # One exponential per lag, not per direction: the rotation does not depend on u_key.
    R = expm(Omega * s.reshape(-1)[:, None, None]).reshape(*s.shape, d, d)
    decay = np.exp(-mu_r * s)[..., None, None] * P_R + np.exp(-mu_t * s)[..., None, None] * P_T
    return R @ decay


# --------------------------------------------------------------------------------------------
# Item 10: magnitude and direction SDEs of the literal RT-SDE (seed 000 5.1; seed 003 B.1-B.3)
# --------------------------------------------------------------------------------------------


def ito_rates(m, *, mu_r, sigma_t, dim) -> tuple[np.ndarray, np.ndarray]:
    """``(mu~_r, mu~_t)`` of seed 003 B.1: ``mu~_t = (d-1) sigma_t^2 / (2 m^2)``, ``mu~_r = mu_r -
    mu~_t``, so that ``dm = -mu~_r m dt + sigma_r dw_r`` and the direction decays at ``mu~_t``.

    ``dim`` is the real dimension d of ``x_s``. Shapes: `m` > 0, broadcast with the parameters.
    """
    m = validation.real_array("m", m)
    if np.any(m <= 0):
        raise ValueError(f"m must be > 0 (a magnitude), got min {float(np.min(m)):.3g}")
    mu_r = validation.real_array("mu_r", mu_r)
    sig_t = validation.nonnegative("sigma_t", sigma_t)
    mu_tilde_t = (_dimension(dim) - 1) * sig_t**2 / (2.0 * m**2)
    return mu_r - mu_tilde_t, mu_tilde_t


def magnitude_drift(m, *, mu_r, sigma_t, dim) -> np.ndarray:
    """Ito drift of ``m = |x_s|``: ``-mu_r m + (d - 1) sigma_t^2 / (2 m)`` (digest C3).

    Seed 000 5.1 prints ``alpha m`` (``alpha = -mu_r``): its quadratic variation drops the
    tangential ``sigma_t^2 tr P_T = (d - 1) sigma_t^2``, so it holds only for ``sigma_t = 0``.
    The diffusion of ``m`` is ``sigma_r dw_r`` (``dw_r = u^T dw``). Shapes: `m` > 0, broadcast.
    """
    mu_tilde_r, _ = ito_rates(m, mu_r=mu_r, sigma_t=sigma_t, dim=dim)
    return -mu_tilde_r * validation.real_array("m", m)


def direction_drift(u, m, *, Omega, sigma_t) -> np.ndarray:
    """Ito drift of ``u = x_s / |x_s|``: ``(Omega - (d - 1) sigma_t^2 / (2 m^2)) u`` (digest C4).

    The diffusion is ``(sigma_t / m) P_T(u) dw``. Seed 000 5.1 prints the drift
    ``P_T(u) Lambda_Omega u``, which lacks the Ito term. Shapes: u (..., d); m broadcast against
    ``u.shape[:-1]`` -> (..., d).
    """
    u = _direction("u", u)
    d = u.shape[-1]
    Omega = _skew("Omega", Omega, d)
    _, mu_tilde_t = ito_rates(m, mu_r=0.0, sigma_t=sigma_t, dim=d)
    return u @ Omega.T - mu_tilde_t[..., None] * u


def magnitude_squared_drift(m2, *, mu_r, sigma_r, sigma_t, dim) -> np.ndarray:
    """Drift of ``m^2``: ``-2 mu_r m^2 + sigma_r^2 + (d - 1) sigma_t^2`` (digest C5).

    Its diffusion is ``2 sigma_r m dw_r``; the drift is affine in ``m^2``, so ``E[m^2]`` solves a
    closed linear ODE (`magnitude_second_moment`).
    """
    m2 = validation.nonnegative("m2", m2)
    mu_r = validation.real_array("mu_r", mu_r)
    return -2.0 * mu_r * m2 + _noise_power(sigma_r, sigma_t, dim)


def stationary_magnitude_squared(*, mu_r, sigma_r, sigma_t, dim) -> np.ndarray:
    """``m_inf^2 = (sigma_r^2 + (d - 1) sigma_t^2) / (2 mu_r)``, the limit of ``E[m^2]``.

    Requires ``mu_r > 0`` (otherwise ``E[m^2]`` grows without bound).
    """
    mu_r = validation.real_array("mu_r", mu_r)
    if np.any(mu_r <= 0):
        raise ValueError(
            f"mu_r must be > 0 for a stationary magnitude, got min {float(np.min(mu_r)):.3g}"
        )
    return _noise_power(sigma_r, sigma_t, dim) / (2.0 * mu_r)


def magnitude_second_moment(t, *, m0, mu_r, sigma_r, sigma_t, dim) -> np.ndarray:
    """``E[m^2(t)] = m0^2 e^{-2 mu_r t} + (sigma_r^2 + (d-1) sigma_t^2) phi(mu_r, t)`` (digest C5).

    Equal to ``m_inf^2 + (m0^2 - m_inf^2) e^{-2 mu_r t}`` for ``mu_r != 0``; written with `phi`
    so that it stays exact as ``mu_r -> 0`` (then ``m0^2 + (sigma_r^2 + (d-1) sigma_t^2) t``).
    Holds for the literal RT-SDE from a fixed ``x_s(0)`` with ``|x_s(0)| = m0`` (or with ``m0^2``
    read as ``E[m^2(0)]``). Shapes: t >= 0, broadcast with the parameters.
    """
    t = validation.real_array("t", t)
    if np.any(t < 0):
        raise ValueError(f"t must be >= 0, got min {float(np.min(t)):.3g}")
    m0 = validation.nonnegative("m0", m0)
    mu_r = validation.real_array("mu_r", mu_r)
    return m0**2 * np.exp(-2.0 * mu_r * t) + _noise_power(
        sigma_r, sigma_t, dim
    ) * ou_variance_factor(mu_r, t)


def _noise_power(sigma_r, sigma_t, dim) -> np.ndarray:
    """``tr(G G^T) = sigma_r^2 + (d - 1) sigma_t^2``: the noise's contribution to ``d<x, x>``."""
    sig_r = validation.nonnegative("sigma_r", sigma_r)
    sig_t = validation.nonnegative("sigma_t", sigma_t)
    return sig_r**2 + (_dimension(dim) - 1) * sig_t**2


def tangent_step(u, u_bar) -> np.ndarray:
    """The tangent-plane step ``P_T(u) u_bar`` of the directional estimator (seed 003 C.1, eq. 15).

    It minimises ``sum_j kappa_j |du - (u_hat_j - u)|^2`` over tangent vectors ``du`` (``u . du =
    0``) when ``u_bar = sum_j A_j u_hat_j`` with weights ``A_j = kappa_j / sum kappa``: the
    unconstrained minimiser ``u_bar - u`` projected onto the tangent plane, which removes its
    radial part ``(u . u_bar - 1) u``. Seed 003 C.1 states ``u_bar - u`` itself, which is not a
    tangent vector unless ``u . u_bar = 1``.

    Shapes: u (..., d) unit, u_bar (..., d) -> (..., d).
    """
    u = _direction("u", u)
    u_bar = validation.real_array("u_bar", u_bar)
    if u_bar.shape[-1:] != u.shape[-1:]:
        raise ValueError(f"u_bar must have shape (..., {u.shape[-1]}), got {u_bar.shape}")
    return u_bar - np.sum(u * u_bar, axis=-1, keepdims=True) * u


def spherical_exp(u, v) -> np.ndarray:
    """Spherical exponential map ``exp_u(v) = cos|v| u + sin|v| v / |v|`` (seed 000 5.1).

    Moves from ``u`` along the great circle with initial velocity ``v`` for arc length ``|v|``.
    ``sin|v| / |v|`` is evaluated as ``np.sinc(|v| / pi)``, which is exact at ``v = 0`` and keeps
    full precision for tiny ``|v|``.

    Shapes: u (..., d) unit; v (..., d) tangent at u (``u . v = 0``); broadcast -> (..., d).

    Raises
    ------
    ValueError
        If `u` is not unit length or `v` is not orthogonal to `u` (relative tolerance 1e-9).
    """
    u = validation.real_array("u", u)
    v = validation.real_array("v", v)
    if u.ndim < 1 or v.ndim < 1 or u.shape[-1] != v.shape[-1]:
        raise ValueError(
            f"u and v must have shape (..., d) with the same d, got {u.shape}, {v.shape}"
        )
    norm_u = np.linalg.norm(u, axis=-1)
    if np.any(np.abs(norm_u - 1.0) > _SPHERE_RTOL):
        worst = float(np.max(np.abs(norm_u - 1.0)))
        raise ValueError(f"u must be unit length; max | |u| - 1 | = {worst:.3g}")
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    along = np.abs(np.sum(u * v, axis=-1, keepdims=True))
    if np.any(along > _SPHERE_RTOL * np.maximum(n, 1.0)):
        raise ValueError(
            f"v must be tangent at u (u . v = 0); max |u . v| = {float(np.max(along)):.3g}"
        )
    return np.cos(n) * u + np.sinc(n / np.pi) * v


def sphere_distance(u, w) -> np.ndarray:
    """Great-circle distance ``arccos(u . w)`` of unit vectors, as ``2 atan2(|u - w|, |u + w|)``.

    The ``atan2`` form is accurate for nearby and for antipodal points, where ``arccos`` loses
    half the digits. Shapes: u, w (..., d) broadcast -> (...).
    """
    u = _direction("u", u)
    w = _direction("w", w)
    return 2.0 * np.arctan2(np.linalg.norm(u - w, axis=-1), np.linalg.norm(u + w, axis=-1))


def direction_covariance(u, m, eta_t) -> np.ndarray:
    """Linearised covariance of the measured direction: ``(eta_t^2 / m^2) P_T(u)`` (seed 003 eq. 4).

    For ``z_s = (m + v_r) u + P_T(u) v_t`` with ``v_r ~ N(0, eta_r^2)``, ``v_t ~ N(0, eta_t^2 I)``,
    ``u_z = z_s / |z_s| = u + P_T(u) v_t / m + O((eta / m)^2)``: radial noise does not move the
    direction to first order. Shapes: u (..., d); m > 0 and eta_t >= 0 broadcast against
    ``u.shape[:-1]`` -> (..., d, d).
    """
    m = validation.real_array("m", m)
    if np.any(m <= 0):
        raise ValueError(f"m must be > 0 (a magnitude), got min {float(np.min(m)):.3g}")
    eta_t = validation.nonnegative("eta_t", eta_t)
    _, P_T = projectors(u)
    return (eta_t**2 / m**2)[..., None, None] * P_T

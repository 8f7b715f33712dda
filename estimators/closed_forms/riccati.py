"""Covariance under continuous measurements: the differential Riccati equation (seed 000 A.3).

With measurements ``dy = C x dt + dv`` (``dv`` of covariance ``R dt``) taken continuously, the
filter's error covariance solves (seed 000 A.3, end)

    dV/dt = A V + V A^T + Q - V C^T R^-1 C V,     V(0) = 0.

When ``A = S diag(lam) S^-1``, ``Q = S diag(q) S^H``, ``C = S diag(c) S^-1`` and
``R = S diag(r) S^H`` (simultaneously diagonalizable), ``V = S diag(v) S^H`` and each mode obeys
the scalar Riccati equation

    v' = 2 alpha v + q - k v^2,    v(0) = 0,    alpha = Re(lam),  k = |c|^2 / r  (information).

With ``beta = sqrt(alpha^2 + k q)`` and ``v = (alpha + y) / k``, ``y' = beta^2 - y^2``, so

    v(t) = (alpha + beta tanh(beta t - artanh(alpha / beta))) / k
         = q (1 - e^{-2 beta t}) / ((beta - alpha) + (beta + alpha) e^{-2 beta t}).

The seed prints ``v = (r/|c|^2) (beta tanh((beta/2)(t - gamma)) + alpha)`` with
``gamma = log((beta - alpha)/(beta + alpha)) / beta``: its time scale is halved and its shift
has the wrong sign, so it solves ``y' = (beta^2 - y^2)/2`` with ``v(0) = 2 alpha r / |c|^2``
(registered as a seed error in ``verify/checks/riccati.py``). In the seed's symbols the correct
argument is ``beta (t + gamma / 2)``.

The exponential form is the one computed: it never evaluates ``tanh`` or ``artanh`` of a large
argument (``e^{-2 beta t}`` only decays), it holds for ``k = 0`` (no measurement: the Lyapunov
variance ``q (e^{2 alpha t} - 1) / (2 alpha)``), ``q = 0`` (``v = 0``) and ``alpha = 0``; and
``beta -/+ alpha`` are formed without cancellation (one of them as ``k q / (beta +/- alpha)``).

Shapes: eigenvalues, process/measurement variances and gains (d,); ``t`` scalar or (...);
mode variances ``t.shape + (d,)``; covariances ``t.shape + (d, d)``.
"""

from __future__ import annotations

import numpy as np

from sde_sim import validation

# |Im| of S diag(v) S^H that should be real, relative to its size: round-off only.
_REAL_RTOL = 1e-9


def riccati_variance(alpha, q, information, t) -> np.ndarray:
    """``v(t)`` solving ``v' = 2 alpha v + q - information v^2``, ``v(0) = 0`` (seed 000 A.3).

    ``v(t) = q (1 - e^{-2 beta t}) / ((beta - alpha) + (beta + alpha) e^{-2 beta t})`` with
    ``beta = sqrt(alpha^2 + information q)``; ``v = q t`` when ``beta = 0``.

    Parameters
    ----------
    alpha : real part of the mode's eigenvalue (any sign).
    q : process-noise variance rate, >= 0.
    information : ``|c|^2 / r``, the measurement's information rate, >= 0 (0: no measurement).
    t : time since the filter started with zero variance, >= 0.

    Returns
    -------
    The broadcast shape of the four arguments. Infinite only where the true variance overflows
    (``information = 0``, ``alpha > 0``, ``2 alpha t`` beyond ~709).
    """
    alpha = validation.real_array("alpha", alpha)
    q = validation.nonnegative("q", q)
    k = validation.nonnegative("information", information)
    t = validation.nonnegative("t", t)
    alpha, q, k, t = np.broadcast_arrays(alpha, q, k, t)
    beta, minus, plus = _rates(alpha, q, k)
    E = np.exp(-2.0 * beta * t)
    num = -q * np.expm1(-2.0 * beta * t)
    den = minus + plus * E
    out = q * t  # the beta = 0 limit (alpha = 0 and k q = 0): v' = q
    live = (beta > 0) & (q > 0)  # q = 0 (and beta > 0): v = 0 exactly, which q * t already is
    with np.errstate(divide="ignore", over="ignore"):  # den = 0 only where v overflows (see above)
        return np.where(live, num / np.where(live, den, 1.0), out)


def riccati_steady_state(alpha, q, information) -> np.ndarray:
    """``lim_{t -> oo} v(t) = q / (beta - alpha)`` (``= (alpha + beta) / information``).

    For ``q > 0`` and ``information > 0`` this is the stabilizing solution of the algebraic
    Riccati equation ``2 alpha v + q - information v^2 = 0``. For ``q = 0`` it is 0 (``v`` stays
    at 0, even for ``alpha > 0`` where the stabilizing root is ``2 alpha / information``); with
    no measurement and ``alpha >= 0`` it is ``inf``.
    """
    alpha = validation.real_array("alpha", alpha)
    q = validation.nonnegative("q", q)
    k = validation.nonnegative("information", information)
    alpha, q, k = np.broadcast_arrays(alpha, q, k)
    _, minus, _ = _rates(alpha, q, k)
    live = q > 0
    with np.errstate(divide="ignore"):  # minus = 0 with q > 0: unbounded growth, inf
        return np.where(live, q / np.where(live, minus, 1.0), 0.0)


def riccati_mode_variances(
    eigenvalues, process_variances, measurement_gains, measurement_variances, t
) -> np.ndarray:
    """Per-mode Riccati variances ``v_k(t)`` (seed 000 A.3, the decoupled scalar equations).

    ``alpha_k = Re(lam_k)``, ``information_k = |c_k|^2 / r_k``.

    Shapes: eigenvalues (d,) complex, process_variances (d,) >= 0, measurement_gains (d,)
    complex (the eigenvalues of C), measurement_variances (d,) > 0, t scalar or (...) ->
    t.shape + (d,).
    """
    alpha, q, k = _modes(eigenvalues, process_variances, measurement_gains, measurement_variances)
    t = validation.nonnegative("t", t)
    return riccati_variance(alpha, q, k, t[..., None])


def eigen_riccati_covariance(
    eigenvalues, S, process_variances, measurement_gains, measurement_variances, t
) -> np.ndarray:
    """``V(t) = S diag(v(t)) S^H`` solving the matrix Riccati equation (seed 000 A.3).

    For ``A = S diag(eigenvalues) S^-1``, ``Q = S diag(process_variances) S^H``,
    ``C = S diag(measurement_gains) S^-1``, ``R = S diag(measurement_variances) S^H``; the
    eigen-data must describe real matrices (conjugate pairs, conjugate columns, equal variances
    and ``|c|`` on a pair), else the result is not real and a ValueError says so.

    Shapes: S (d, d), the rest (d,), t scalar or (...) -> t.shape + (d, d).
    """
    S = validation.invertible("S", S)
    v = riccati_mode_variances(
        eigenvalues, process_variances, measurement_gains, measurement_variances, t
    )
    if v.shape[-1] != S.shape[0]:
        raise ValueError(f"eigenvalues must have shape ({S.shape[0]},) to match S, got {v.shape}")
    return _real_symmetric((S * v[..., None, :]) @ S.conj().T)


def eigen_riccati_steady_state(
    eigenvalues, S, process_variances, measurement_gains, measurement_variances
) -> np.ndarray:
    """``V(oo) = S diag(v(oo)) S^H``: the algebraic Riccati solution in the decoupled case.

    Shapes: S (d, d), the rest (d,) -> (d, d).
    """
    S = validation.invertible("S", S)
    alpha, q, k = _modes(eigenvalues, process_variances, measurement_gains, measurement_variances)
    if alpha.shape != (S.shape[0],):
        raise ValueError(
            f"eigenvalues must have shape ({S.shape[0]},) to match S, got {alpha.shape}"
        )
    return _real_symmetric((S * riccati_steady_state(alpha, q, k)) @ S.conj().T)


# --- helpers -----------------------------------------------------------------------------------


def _rates(alpha, q, k):
    """``beta``, ``beta - alpha`` and ``beta + alpha`` without cancellation.

    ``(beta - alpha)(beta + alpha) = k q``; the factor whose two terms have opposite signs is
    taken as ``k q`` over the other (which is then >= |alpha| > 0 unless beta = 0).
    """
    kq = k * q
    beta = np.hypot(alpha, np.sqrt(kq))
    pos = alpha > 0
    with np.errstate(divide="ignore", invalid="ignore"):  # beta = alpha = 0: unused (masked)
        minus = np.where(pos, kq / (beta + alpha), beta - alpha)
        plus = np.where(pos, beta + alpha, kq / (beta - alpha))
    zero = beta == 0
    return beta, np.where(zero, 0.0, minus), np.where(zero, 0.0, plus)


def _modes(eigenvalues, process_variances, measurement_gains, measurement_variances):
    lam = validation.complex_array("eigenvalues", eigenvalues, ndim=1)
    q = validation.nonnegative("process_variances", process_variances)
    c = validation.complex_array("measurement_gains", measurement_gains, ndim=1)
    r = validation.real_array("measurement_variances", measurement_variances)
    for name, arr in (("process_variances", q), ("measurement_gains", c)):
        if arr.shape != lam.shape:
            raise ValueError(f"{name} must have shape {lam.shape}, got {arr.shape}")
    if r.shape != lam.shape:
        raise ValueError(f"measurement_variances must have shape {lam.shape}, got {r.shape}")
    if np.any(r <= 0):
        raise ValueError(f"measurement_variances must be > 0 (R^-1 is used), got min {r.min():g}")
    return lam.real, q, np.abs(c) ** 2 / r


def _real_symmetric(V: np.ndarray) -> np.ndarray:
    scale = max(1.0, float(np.abs(V).max(initial=0.0)))
    imag = float(np.abs(V.imag).max(initial=0.0))
    if imag > _REAL_RTOL * scale:
        raise ValueError(
            f"S diag(v) S^H is not real (max |Im| = {imag:.3g}): the eigen-data must describe "
            "real A, Q, C, R (conjugate pairs with conjugate columns and equal variances)"
        )
    V = V.real
    return 0.5 * (V + np.swapaxes(V, -1, -2))

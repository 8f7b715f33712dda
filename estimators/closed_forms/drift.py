"""Inhomogeneous drift, measurement bias and measurement delay (seed 000 sections 3.9, 3.10).

Model (seed 000 3.9, 3.10; columns there, rows here)::

    dx = (A x + u) dt + G dw,        z(t_k) = C x(t_k + phi) + b + v(t_k),   v ~ N(0, R).

Over a lag ``dt = t_j - t_i`` the mean moves by the drift integral

    G_u(dt) = int_0^dt e^{A (dt - tau)} dtau = int_0^dt e^{A s} ds   (= (e^{A dt} - I) A^-1),

which is entire in ``A``: it needs no inverse and is defined for singular ``A``. The estimate of
``x(t_i)`` pulled back from ``x(t_j)`` (3.9) is

    x_hat_i(t_j) = e^{-A dt} (x(t_j) - G_u(dt) u) = e^{-A dt} x(t_j) + G_u(-dt) u,

i.e. the deterministic flow of ``x' = A x + u`` run for ``-dt``; its error is ``N(0, V(dt))``
with the drift-free ``V`` of `estimators.closed_forms.dle` (``u`` is deterministic). In the
eigenbasis ``A = S diag(lam) S^-1``, ``x_s = S^-1 x``, ``u_s = S^-1 u``, per mode

    x_hat_s = e^{-lam dt} x_s - (1 - e^{-lam dt}) u_s / lam
            = e^{-lam dt} (x_s + u_s / lam) - u_s / lam        (lam != 0; seed 3.9)
            = e^{-lam dt} x_s + g(lam, -dt) u_s,   g(lam, s) = (e^{lam s} - 1) / lam,

the last form being the one computed (`drift_factor`, with its ``lam -> 0`` limit ``s``).

With a bias and a delay (3.10), the measurement at ``t_j`` pulled back to ``t_i`` is

    z_hat(t_i) = Phi_z z(t_j) + C ((I - e^{-A dt}) G_u(phi) - e^{-A (dt - phi)} G_u(dt)) u
                 + (I - Phi_z) b,                                   Phi_z = C e^{-A dt} C^-1,

and the drift bracket equals ``-e^{-A dt} G_u(dt)`` for every ``phi``: the delay cancels. When
``C = S diag(lam_C) S^-1`` this is the seed's final form

    z_hat_s(t_i) = e^{-lam dt} z_s(t_j) + (1 - e^{-lam dt}) (b_s - lam_C u_s / lam).

Seed errors (registered in ``verify/checks/drift.py``): 3.9 defines ``u_s := S u S^-1``; for a
vector the eigen-coordinates are ``u_s = S^-1 u``. The first eigenbasis line of 3.9 closes its
bracket before ``u_s``. In the AFA residual of 3.9 the biased query is indexed ``[k, j]``
instead of ``[k, i]``. The extracted text writes ``A`` (and ``A_C``) for the diagonal ``Lambda``
(``Lambda_C``) in eigenbasis formulas, as in its 2.2 (``A = S A S^-1``); read as ``Lambda``
they are correct.

Shapes: ``A``, ``C`` (d, d); eigenvalues (d,); ``S`` (d, d) complex; ``u``, ``b`` (d,); states
and measurements ``x``, ``z`` (..., d) with time on rows; ``dt`` scalar or any shape that
broadcasts against ``x.shape[:-1]``.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import expm

from sde_sim import validation

# |Im| of S y that should be real, relative to its size: round-off only.
_REAL_RTOL = 1e-9


def drift_factor(lam, dt) -> np.ndarray:
    """``g(lam, dt) = (e^{lam dt} - 1) / lam = int_0^dt e^{lam s} ds``, ``g(0, dt) = dt``.

    The per-eigenvalue drift integral ``G_u`` (seed 000 3.9), complex ``lam`` allowed, any sign
    of ``dt``. Evaluated as ``expm1(lam dt) / lam``: ``expm1`` keeps full relative precision
    when ``lam dt`` is tiny, where ``e^{lam dt} - 1`` cancels; ``lam == 0`` exactly takes the
    limit (a singular ``A``, e.g. a pure integrator).

    Shapes: ``lam`` and ``dt`` broadcast together; complex result of the broadcast shape.
    """
    lam = validation.complex_array("lam", lam)
    dt = validation.real_array("dt", dt)
    lam, dt = np.broadcast_arrays(lam, dt)
    out = np.array(dt, dtype=complex)
    nz = lam != 0
    out[nz] = np.expm1(lam[nz] * dt[nz]) / lam[nz]
    return out


def drift_integral(A, dt) -> np.ndarray:
    """``G_u(dt) = int_0^dt e^{A s} ds`` for any real ``A`` (seed 000 3.9), singular included.

    The top-right block of ``expm([[A, I], [0, 0]] dt)``: the augmented system of seed 000 3.9
    (with ``I`` in place of ``u``), which needs no ``A^-1``. ``dt`` may be negative
    (``G_u(-s) = -e^{-A s} G_u(s)``).

    Shapes: A (d, d); dt scalar or (...) -> dt.shape + (d, d).
    """
    A = validation.square_matrix("A", A)
    dt = validation.real_array("dt", dt)
    d = A.shape[0]
    block = np.zeros((2 * d, 2 * d))
    block[:d, :d], block[:d, d:] = A, np.eye(d)
    out = expm(block * dt.reshape(-1, 1, 1))[:, :d, d:]
    return out.reshape(*dt.shape, d, d)


def eigen_drift_integral(eigenvalues, S, dt) -> np.ndarray:
    """``G_u(dt) = S diag(g(lam, dt)) S^-1`` (seed 000 3.9, "the drift term"), real.

    Shapes: eigenvalues (d,), S (d, d), dt scalar or (...) -> dt.shape + (d, d).
    """
    lam, S, S_inv = _eigendata(eigenvalues, S)
    dt = validation.real_array("dt", dt)
    G = (S * drift_factor(lam, dt[..., None])[..., None, :]) @ S_inv
    return _real(G, "S diag(g) S^-1")


def pulled_back_state(A, u, x, dt) -> np.ndarray:
    """``x_hat_i(t_j) = e^{-A dt} (x(t_j) - G_u(dt) u)`` with ``dt = t_j - t_i`` (seed 000 3.9).

    Computed as ``e^{-A dt} x + G_u(-dt) u`` from one augmented exponential
    ``expm([[A, u], [0, 0]] (-dt))`` (the flow of ``x' = A x + u`` over ``-dt``), which is
    the same map and needs no ``A^-1``.

    Parameters
    ----------
    A : (d, d) real drift matrix.
    u : (d,) constant drift.
    x : (..., d) states at ``t_j``.
    dt : lags ``t_j - t_i``; scalar or an array broadcasting against ``x.shape[:-1]``.

    Returns
    -------
    (broadcast of x.shape[:-1] and dt.shape) + (d,) estimates of ``x(t_i)``.
    """
    A = validation.square_matrix("A", A)
    d = A.shape[0]
    u = validation.vector("u", u, d)
    x = _rows("x", x, d)
    dt = _lags(dt, x)
    block = np.zeros((d + 1, d + 1))
    block[:d, :d], block[:d, d] = A, u
    M = expm(block * -dt.reshape(-1, 1, 1)).reshape(*dt.shape, d + 1, d + 1)
    return (M[..., :d, :d] @ x[..., None])[..., 0] + M[..., :d, d]


def eigen_pulled_back_state(eigenvalues, S, u, x, dt) -> np.ndarray:
    """Eigenbasis ``x_hat_s = e^{-lam dt} x_s + g(lam, -dt) u_s``, mapped back by ``S``.

    Equal to the seed's ``e^{-lam dt} (x_s + u_s / lam) - u_s / lam`` (seed 000 3.9) when no
    eigenvalue is zero, and finite when one is. ``x_s = S^-1 x``, ``u_s = S^-1 u``.

    Shapes: eigenvalues (d,), S (d, d), u (d,), x (..., d), dt broadcasting against
    ``x.shape[:-1]`` -> the broadcast shape + (d,), real.
    """
    lam, S, S_inv = _eigendata(eigenvalues, S)
    d = lam.size
    u = validation.vector("u", u, d)
    x = _rows("x", x, d)
    dt = _lags(dt, x)[..., None]
    x_s, u_s = x @ S_inv.T, S_inv @ u
    x_hat_s = np.exp(-lam * dt) * x_s + drift_factor(lam, -dt) * u_s
    return _real(x_hat_s @ S.T, "S x_hat_s")


def drift_bias(eigenvalues, S, u, measurement_eigenvalues=None) -> np.ndarray:
    """The AFA bias ``b_s = lam_C u_s / lam`` in eigen-coordinates (seed 000 3.9, ``b_qk``).

    With it the pulled-back estimate is ``e^{-lam dt} (z_s + b_s) - b_s``. ``-u_s / lam`` is
    the fixed point of ``x_s' = lam x_s + u_s``, so the form needs every ``lam != 0``; for a
    singular ``A`` use `eigen_pulled_back_state`, which does not divide by ``lam``.

    Shapes: eigenvalues (d,), S (d, d), u (d,), measurement_eigenvalues (d,) (default ones,
    i.e. ``C = I``) -> (d,) complex.

    Raises
    ------
    ValueError
        If an eigenvalue is zero.
    """
    lam, S, S_inv = _eigendata(eigenvalues, S)
    d = lam.size
    u = validation.vector("u", u, d)
    lam_c = _measurement_eigenvalues(measurement_eigenvalues, d)
    zero = np.flatnonzero(lam == 0)
    if zero.size:
        raise ValueError(
            f"eigenvalues must be nonzero for the bias u_s / lam; eigenvalue {zero[0]} is 0 "
            "(use eigen_pulled_back_state, which has the lam -> 0 limit)"
        )
    return lam_c * (S_inv @ u) / lam


def pulled_back_measurement(A, C, u, b, z, dt, *, delay: float = 0.0) -> np.ndarray:
    """Measurement at ``t_j`` pulled back to ``t_i`` with drift, bias and delay (seed 000 3.10).

    The seed's decomposition, term by term (``Phi_z = C e^{-A dt} C^-1``)::

        z_hat(t_i) = Phi_z z(t_j)
                     + C ((I - e^{-A dt}) G_u(phi) - e^{-A (dt - phi)} G_u(dt)) u
                     + (I - Phi_z) b

    for ``z(t_k) = C x(t_k + phi) + b + v``. The result does not depend on ``phi``: the drift
    bracket is ``-e^{-A dt} G_u(dt)`` for every ``phi`` (checked in ``verify``). Any invertible
    ``C``; ``A`` and ``C`` need not commute.

    Parameters
    ----------
    A : (d, d) drift matrix.   C : (d, d) invertible measurement matrix.
    u : (d,) drift.            b : (d,) measurement bias.
    z : (..., d) measurements at ``t_j``.
    dt : lags ``t_j - t_i``, scalar or broadcasting against ``z.shape[:-1]``.
    delay : ``phi``; the measurement at ``t_k`` sees the state at ``t_k + phi``.

    Returns
    -------
    (broadcast shape) + (d,) estimates of ``C x(t_i + phi) + b``.
    """
    A = validation.square_matrix("A", A)
    d = A.shape[0]
    C = validation.square_matrix("C", C, d)
    validation.invertible("C", C)
    u = validation.vector("u", u, d)
    b = validation.vector("b", b, d)
    z = _rows("z", z, d)
    dt = _lags(dt, z)
    phi = validation.scalar("delay", delay)
    flat = dt.reshape(-1)
    E = expm(-A * flat[:, None, None])
    E_shift = expm(-A * (flat - phi)[:, None, None])
    Phi_z = C @ E @ np.linalg.inv(C)
    bracket = (np.eye(d) - E) @ drift_integral(A, phi) - E_shift @ drift_integral(A, flat)
    offset = C @ bracket @ u + (np.eye(d) - Phi_z) @ b
    shape = (*dt.shape, d)
    return (Phi_z.reshape(*shape, d) @ z[..., None])[..., 0] + offset.reshape(shape)


def eigen_pulled_back_measurement(
    eigenvalues, S, measurement_eigenvalues, u, b, z, dt
) -> np.ndarray:
    """Seed 000 3.10's final form, in the eigenbasis of ``A`` and ``C = S diag(lam_C) S^-1``::

        z_hat_s(t_i) = e^{-lam dt} z_s(t_j) + (1 - e^{-lam dt}) (b_s - lam_C u_s / lam)

    with ``z_s = S^-1 z``, ``b_s = S^-1 b``, ``u_s = S^-1 u``. There is no delay argument: it
    has cancelled. Evaluated as ``e^{-lam dt} z_s - expm1(-lam dt) b_s + lam_C g(lam, -dt)
    u_s``, which is finite at ``lam = 0``.

    Shapes: eigenvalues, measurement_eigenvalues (d,); S (d, d); u, b (d,); z (..., d); dt
    broadcasting against ``z.shape[:-1]`` -> the broadcast shape + (d,), real.
    """
    lam, S, S_inv = _eigendata(eigenvalues, S)
    d = lam.size
    lam_c = _measurement_eigenvalues(measurement_eigenvalues, d)
    u = validation.vector("u", u, d)
    b = validation.vector("b", b, d)
    z = _rows("z", z, d)
    dt = _lags(dt, z)[..., None]
    z_s = z @ S_inv.T
    z_hat_s = (
        np.exp(-lam * dt) * z_s
        - np.expm1(-lam * dt) * (S_inv @ b)
        + lam_c * drift_factor(lam, -dt) * (S_inv @ u)
    )
    return _real(z_hat_s @ S.T, "S z_hat_s")


# --- validation helpers ------------------------------------------------------------------------


def _eigendata(eigenvalues, S) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    S = validation.invertible("S", S)
    lam = validation.complex_array("eigenvalues", eigenvalues, ndim=1)
    if lam.shape != (S.shape[0],):
        raise ValueError(f"eigenvalues must have shape ({S.shape[0]},) to match S, got {lam.shape}")
    return lam, S, np.linalg.inv(S)


def _measurement_eigenvalues(value, d: int) -> np.ndarray:
    if value is None:
        return np.ones(d, dtype=complex)
    lam_c = validation.complex_array("measurement_eigenvalues", value, ndim=1)
    if lam_c.shape != (d,):
        raise ValueError(f"measurement_eigenvalues must have shape ({d},), got {lam_c.shape}")
    return lam_c


def _rows(name: str, value, d: int) -> np.ndarray:
    arr = validation.real_array(name, value)
    if arr.ndim < 1 or arr.shape[-1] != d:
        raise ValueError(f"{name} must have shape (..., {d}), got {arr.shape}")
    return arr


def _lags(dt, rows: np.ndarray) -> np.ndarray:
    dt = validation.real_array("dt", dt)
    try:
        np.broadcast_shapes(dt.shape, rows.shape[:-1])
    except ValueError:
        raise ValueError(
            f"dt must broadcast against the leading shape {rows.shape[:-1]}, got {dt.shape}"
        ) from None
    return dt


def _real(y: np.ndarray, name: str) -> np.ndarray:
    scale = max(1.0, float(np.abs(y).max(initial=0.0)))
    imag = float(np.abs(y.imag).max(initial=0.0))
    if imag > _REAL_RTOL * scale:
        raise ValueError(
            f"{name} is not real (max |Im| = {imag:.3g}): the eigen-data must describe real "
            "matrices (conjugate pairs with conjugate columns of S)"
        )
    return np.ascontiguousarray(y.real)

"""Open-loop waypoint control and its convex-combination closed form (seed 000 B.4).

Problem (B.4.1): steer ``dx/dtau = A x + B u``, ``x(0) = x0`` towards ``x_ref`` at ``t_f``,

    J(u) = (x(t_f) - x_ref)^T Q_f (x(t_f) - x_ref) + int_0^{t_f} u^T R_c u dtau.

With ``W = int_0^{t_f} e^{As} B R_c^-1 B^T e^{A^T s} ds`` (a controllability Gramian, computed by
Van Loan as `dle.forward_covariance`) and ``e0 = x_ref - e^{A t_f} x0`` the minimiser is

    u(tau) = R_c^-1 B^T e^{A^T (t_f - tau)} Q_f (I + W Q_f)^-1 e0,
    x(t_f) = e^{A t_f} x0 + (I + W Q_f)^-1 W Q_f e0.

Modal form (B.4.2). When ``A = S diag(lam) S^-1``, ``B = S diag(b) S^-1``, and the weights
decouple in the same basis, ``Q_f = S^-H diag(q) S^-1`` and ``R_c = S^-H diag(r) S^-1`` (so that
the costs are ``sum_k q_k |x_s,k - x_ref,s,k|^2`` and ``sum_k r_k |u_s,k|^2`` in eigen-coordinates
``x_s = S^-1 x``; `eigen_weight_matrix` builds them), each mode is a scalar problem with

    c_k = q_k |b_k|^2 / r_k,   g_k = (e^{2 Re(lam_k) t_f} - 1) / (2 Re(lam_k))  (t_f at Re = 0),
    beta_k = c_k g_k / (1 + c_k g_k) in [0, 1),
    u_k(tau) = (q_k conj(b_k) / r_k) e0_k / (1 + c_k g_k) e^{conj(lam_k) (t_f - tau)},
    x_k(t_f) = (1 - beta_k) x0_k e^{lam_k t_f} + beta_k x_ref,k,

the convex combination of the free response and the waypoint. The seed's next-step reading is
``t_f = Delta t`` with the filtered estimate as ``x0``. The state on the way is
``x_k(tau) = x0_k e^{lam_k tau} + C_k e^{Re(lam_k) t_f} e^{i Im(lam_k) (tau - t_f)}
sinh(Re(lam_k) tau) / Re(lam_k)`` with ``C_k = c_k e0_k / (1 + c_k g_k)``. The noise of an SDE
``dx = (A x + B u) dtau + G dw`` adds ``N(0, V_F(t_f))`` independently of the (deterministic)
control.

Shapes: eigen-data (d,); states ``(..., d)`` (eigen-coordinates complex, original ones real);
times ``tau`` (n,) -> ``(..., n, d)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import expm

from estimators.closed_forms import dle
from sde_sim import validation

# |Im| of S^-H diag(w) S^-1 that should be real, relative to its size: round-off only.
_REAL_RTOL = 1e-9


class ModalProblem(NamedTuple):
    """Eigen-data of a decoupled waypoint problem (seed 000 B.4.2); build with `modal_problem`.

    ``eigenvalues`` lam (d,) of A; ``B_eigenvalues`` b (d,) of B; ``terminal_weights`` q (d,)
    ``>= 0`` of Q_f; ``control_weights`` r (d,) ``> 0`` of R_c (all complex / real float64).
    """

    eigenvalues: np.ndarray
    B_eigenvalues: np.ndarray
    terminal_weights: np.ndarray
    control_weights: np.ndarray


def modal_problem(eigenvalues, B_eigenvalues, terminal_weights, control_weights) -> ModalProblem:
    """Validate and bundle the modal data (shapes must agree; ``r > 0``, ``q >= 0``)."""
    lam = validation.complex_array("eigenvalues", eigenvalues, ndim=1)
    b = validation.complex_array("B_eigenvalues", B_eigenvalues, ndim=1)
    q = validation.nonnegative("terminal_weights", terminal_weights)
    r = validation.real_array("control_weights", control_weights)
    for name, arr in (("B_eigenvalues", b), ("terminal_weights", q), ("control_weights", r)):
        if arr.shape != lam.shape:
            raise ValueError(f"{name} must have shape {lam.shape}, got {arr.shape}")
    if np.any(r <= 0):
        raise ValueError(f"control_weights must be > 0 (R_c invertible), got min {r.min():.6g}")
    return ModalProblem(lam, b, q, r)


def eigen_weight_matrix(S, weights, *, name: str = "W") -> np.ndarray:
    """The real weight ``S^-H diag(weights) S^-1``: ``x^T W x = sum_k w_k |(S^-1 x)_k|^2``.

    Real when conjugate columns of S carry equal weights; PSD for ``weights >= 0``.

    Shapes: S (d, d), weights (d,) -> (d, d).
    """
    S = validation.invertible("S", S)
    w = validation.nonnegative(f"weights of {name}", weights)
    if w.shape != (S.shape[0],):
        raise ValueError(f"weights of {name} must have shape ({S.shape[0]},), got {w.shape}")
    S_inv = np.linalg.inv(S)
    W = (S_inv.conj().T * w) @ S_inv
    scale = max(1.0, float(np.abs(W).max(initial=0.0)))
    if float(np.abs(W.imag).max(initial=0.0)) > _REAL_RTOL * scale:
        raise ValueError(
            f"{name} is not real: conjugate columns of S must carry equal weights of {name}"
        )
    return 0.5 * (W.real + W.real.T)


def _horizon(t_f) -> float:
    return validation.scalar("t_f", t_f, minimum=0.0, strict=True)


def _times(tau, t_f: float) -> np.ndarray:
    tau = validation.real_array("tau", tau)
    if np.any(tau < 0) or np.any(tau > t_f):
        raise ValueError(
            f"tau must lie in [0, t_f] = [0, {t_f:g}], got [{tau.min():g}, {tau.max():g}]"
        )
    return tau


def _gain_terms(problem: ModalProblem, t_f: float) -> tuple[np.ndarray, np.ndarray]:
    """``(c_k, g_k)`` with ``g = psi(-2 Re(lam), t_f)`` (expm1 form, limit ``t_f`` at Re = 0)."""
    lam, b, q, r = problem
    c = q * np.abs(b) ** 2 / r
    g = dle.psi(-2.0 * lam.real, t_f).real
    return c, g


def mpc_blend_weights(problem: ModalProblem, t_f) -> np.ndarray:
    """``beta_k = c_k g_k / (1 + c_k g_k)`` in ``[0, 1)`` (seed 000 B.4.2); shape (d,)."""
    c, g = _gain_terms(problem, _horizon(t_f))
    cg = c * g
    return cg / (1.0 + cg)


def _modal_states(problem: ModalProblem, x0, x_ref) -> tuple[np.ndarray, np.ndarray]:
    d = problem.eigenvalues.size
    x0 = validation.complex_array("x0", x0)
    x_ref = validation.complex_array("x_ref", x_ref)
    for name, arr in (("x0", x0), ("x_ref", x_ref)):
        if arr.ndim < 1 or arr.shape[-1] != d:
            raise ValueError(f"{name} must have shape (..., {d}), got {arr.shape}")
    return x0, x_ref


def mpc_terminal_state(problem: ModalProblem, x0, x_ref, t_f) -> np.ndarray:
    """``x_s(t_f) = (1 - beta) x0_s e^{lam t_f} + beta x_ref,s`` (seed 000 B.4.2).

    Shapes: x0, x_ref (..., d) eigen-coordinates ``S^-1 x`` -> broadcast (..., d) complex.
    """
    t_f = _horizon(t_f)
    x0, x_ref = _modal_states(problem, x0, x_ref)
    beta = mpc_blend_weights(problem, t_f)
    return (1.0 - beta) * x0 * np.exp(problem.eigenvalues * t_f) + beta * x_ref


def _modal_forcing(problem: ModalProblem, x0, x_ref, t_f: float) -> np.ndarray:
    """``e0_k / (1 + c_k g_k)``: the per-mode error the open-loop control closes."""
    c, g = _gain_terms(problem, t_f)
    e0 = x_ref - x0 * np.exp(problem.eigenvalues * t_f)
    return e0 / (1.0 + c * g)


def mpc_control(problem: ModalProblem, x0, x_ref, t_f, tau) -> np.ndarray:
    """Modal feedforward control of seed 000 B.4.2, in eigen-coordinates.

    ``u_k(tau) = (q_k conj(b_k) / r_k) e0_k / (1 + c_k g_k) e^{conj(lam_k) (t_f - tau)}``; in
    original coordinates the control is ``S u_s``.

    Shapes: x0, x_ref (..., d); tau (n,) in [0, t_f] -> (..., n, d) complex.
    """
    t_f = _horizon(t_f)
    tau = _times(tau, t_f)
    x0, x_ref = _modal_states(problem, x0, x_ref)
    lam, b, q, r = problem
    forcing = _modal_forcing(problem, x0, x_ref, t_f)[..., None, :]
    return q * b.conj() / r * forcing * np.exp(lam.conj() * (t_f - tau[:, None]))


def mpc_state(problem: ModalProblem, x0, x_ref, t_f, tau) -> np.ndarray:
    """Closed-loop modal state ``x_k(tau)`` under `mpc_control` for ``tau`` in ``[0, t_f]``.

    ``x_k(tau) = x0_k e^{lam_k tau} + C_k e^{a_k t_f} e^{i w_k (tau - t_f)} sinh(a_k tau)/a_k``
    with ``lam_k = a_k + i w_k`` and ``C_k = c_k e0_k / (1 + c_k g_k)``: the solution of
    ``dx_k/dtau = lam_k x_k + b_k u_k(tau)`` (seed 000 B.4.2; at ``tau = t_f`` it is
    `mpc_terminal_state`). ``sinh(a tau)/a`` is taken as ``tau`` at ``a = 0`` and is accurate
    to round-off for small ``a tau`` (``np.sinh`` keeps relative precision there).

    Shapes: x0, x_ref (..., d); tau (n,) -> (..., n, d) complex.
    """
    t_f = _horizon(t_f)
    tau = _times(tau, t_f)
    x0, x_ref = _modal_states(problem, x0, x_ref)
    lam = problem.eigenvalues
    c, _ = _gain_terms(problem, t_f)
    forcing = c * _modal_forcing(problem, x0, x_ref, t_f)[..., None, :]
    a, w = lam.real, lam.imag
    tt = tau[:, None]
    safe_a = np.where(a == 0, 1.0, a)
    sinhc = np.where(a == 0, tt, np.sinh(a * tt) / safe_a)
    driven = np.exp(a * t_f + 1j * w * (tt - t_f)) * sinhc
    return x0[..., None, :] * np.exp(lam * tt) + forcing * driven


# --- general (non-modal) form, seed 000 B.4.1 --------------------------------------------------


class _General(NamedTuple):
    A: np.ndarray
    B: np.ndarray
    Q_f: np.ndarray
    R_inv: np.ndarray
    E: np.ndarray  # e^{A t_f}
    W: np.ndarray  # controllability Gramian weighted by R_c^-1


def _general(A, B, Q_f, R_c, t_f: float) -> _General:
    A = validation.square_matrix("A", A)
    d = A.shape[0]
    B = validation.real_array("B", B, ndim=2)
    if B.shape[0] != d:
        raise ValueError(f"B must have {d} rows (one per state), got shape {B.shape}")
    Q_f = validation.covariance("Q_f", Q_f, d)
    R_c = validation.covariance("R_c", R_c, B.shape[1])
    if np.linalg.eigvalsh(R_c)[0] <= 0:
        raise ValueError("R_c must be positive definite (the control cost is strictly convex)")
    R_inv = np.linalg.inv(R_c)
    BRB = B @ R_inv @ B.T
    W = dle.forward_covariance(A, 0.5 * (BRB + BRB.T), t_f)
    return _General(A, B, Q_f, R_inv, expm(A * t_f), W)


def _general_states(g: _General, x0, x_ref) -> tuple[np.ndarray, np.ndarray]:
    d = g.A.shape[0]
    x0 = validation.real_array("x0", x0)
    x_ref = validation.real_array("x_ref", x_ref)
    for name, arr in (("x0", x0), ("x_ref", x_ref)):
        if arr.ndim < 1 or arr.shape[-1] != d:
            raise ValueError(f"{name} must have shape (..., {d}), got {arr.shape}")
    return x0, x_ref


def _costate(g: _General, x0, x_ref) -> np.ndarray:
    """``Q_f (I + W Q_f)^-1 e0`` with ``e0 = x_ref - e^{A t_f} x0``; shape (..., d)."""
    e0 = x_ref - x0 @ g.E.T
    e0, _ = np.broadcast_arrays(e0, x_ref)
    K = np.eye(g.A.shape[0]) + g.W @ g.Q_f
    return np.linalg.solve(K, e0[..., None])[..., 0] @ g.Q_f.T


def mpc_terminal_state_general(A, B, Q_f, R_c, x0, x_ref, t_f) -> np.ndarray:
    """``x(t_f) = e^{A t_f} x0 + W Q_f (I + W Q_f)^-1 e0`` for any real A, B (seed 000 B.4.1).

    (``W Q_f (I + W Q_f)^-1 = (I + W Q_f)^-1 W Q_f``: the two commute.)

    Shapes: A (d, d), B (d, m), Q_f (d, d) PSD, R_c (m, m) SPD, x0, x_ref (..., d) -> (..., d).
    """
    t_f = _horizon(t_f)
    g = _general(A, B, Q_f, R_c, t_f)
    x0, x_ref = _general_states(g, x0, x_ref)
    return x0 @ g.E.T + _costate(g, x0, x_ref) @ g.W.T


def mpc_control_general(A, B, Q_f, R_c, x0, x_ref, t_f, tau) -> np.ndarray:
    """``u(tau) = R_c^-1 B^T e^{A^T (t_f - tau)} Q_f (I + W Q_f)^-1 e0`` (seed 000 B.4.1).

    Shapes: as `mpc_terminal_state_general`; tau (n,) in [0, t_f] -> (..., n, m).
    """
    t_f = _horizon(t_f)
    tau = _times(tau, t_f)
    g = _general(A, B, Q_f, R_c, t_f)
    x0, x_ref = _general_states(g, x0, x_ref)
    lam = _costate(g, x0, x_ref)
    M = expm(g.A.T * (t_f - tau.ravel())[:, None, None])  # (n, d, d): e^{A^T (t_f - tau)}
    gain = g.R_inv @ g.B.T  # (m, d)
    return np.einsum("md,nde,...e->...nm", gain, M, lam)

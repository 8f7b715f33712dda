"""Checks of the open-loop waypoint control and its convex-combination form (seed 000 B.4)."""

from __future__ import annotations

import warnings

import numpy as np
import sympy as sp
from numpy.polynomial import legendre
from scipy.integrate import solve_ivp
from scipy.linalg import expm

from estimators.closed_forms import dle, mpc
from sde_sim import BrownianPath, LinearSDE, TimeGrid, UnstableSystemWarning, simulate_exact
from verify.problems.mpc import (
    random_problem,
)
from verify.registry import Outcome, check, seed
from verify.tools import relative_error, symbolic_residual, whitened_scores

SIGMA_LEVEL = 5.0


# --- symbolic: one mode, lam = a + i w, b = br + i bi -----------------------------------------


class _Mode:
    """One decoupled mode of B.4.2 in SymPy.

    The initial state ``x0`` and the open-loop error ``e0 = x_ref - x0 e^{lam t_f}`` are free
    complex symbols (so ``x_ref = e0 + x0 e^{lam t_f}``), and ``C`` stands for the printed
    ``C_k = c e0 / (1 + c g)`` where only its product with ``e^{conj(lam)(t_f - tau)}`` matters.
    """

    def __init__(self) -> None:
        a, w, br, bi = sp.symbols("a w b_r b_i", real=True)
        self.q, self.r, self.t_f, self.tau, self.s = sp.symbols("q r t_f tau s", positive=True)
        self.x0, self.e0, self.C_sym = sp.symbols("x0 e0 C", complex=True)
        self.a, self.w = a, w
        self.lam, self.lam_c = a + sp.I * w, a - sp.I * w
        self.b, self.b_c = br + sp.I * bi, br - sp.I * bi
        self.c = self.q * (br**2 + bi**2) / self.r  # c_qr = q |b|^2 / r
        self.g = (sp.exp(2 * a * self.t_f) - 1) / (2 * a)
        self.beta = self.c * self.g / (1 + self.c * self.g)
        self.x_ref = self.e0 + self.x0 * sp.exp(self.lam * self.t_f)
        self.C = self.c * self.e0 / (1 + self.c * self.g)
        self.forcing = sp.exp(self.lam_c * (self.t_f - self.tau))  # e^{conj(lam)(t_f - tau)}
        # B.4.2's u_ref,k
        self.u = self.q * self.b_c / self.r * self.e0 / (1 + self.c * self.g) * self.forcing

    def state(self, C):
        """``x(tau) = x0 e^{lam tau} + C e^{a t_f + i w (tau - t_f)} sinh(a tau) / a``."""
        a, tau, t_f = self.a, self.tau, self.t_f
        driven = sp.exp(a * t_f + sp.I * self.w * (tau - t_f)) * sp.sinh(a * tau) / a
        return self.x0 * sp.exp(self.lam * tau) + C * driven


def _exp_form(expr):
    return sp.expand(expr.rewrite(sp.exp))


@check(
    "mpc.modal-state-solves-ode",
    title="x(tau) = x0 e^{lam tau} + C e^{a t_f + iw(tau - t_f)} sinh(a tau)/a solves dx/dtau = "
    "lam x + b u_ref(tau), x(0) = x0, with B.4.2's u_ref = (C/b) e^{conj(lam)(t_f - tau)}; "
    "x(t_f) = x0 e^{lam t_f} + g C",
    source=seed(0, "B.4.2"),
    kind="symbolic",
    tolerance=0.0,
)
def _modal_state(quick: bool) -> float:
    m = _Mode()
    x = m.state(m.C_sym)
    return max(
        symbolic_residual(m.b * m.u - m.C * m.forcing),  # b u_ref = C_k e^{conj(lam)(t_f - tau)}
        symbolic_residual(_exp_form(sp.diff(x, m.tau) - m.lam * x - m.C_sym * m.forcing)),
        symbolic_residual(x.subs(m.tau, 0) - m.x0),
        symbolic_residual(
            _exp_form(x.subs(m.tau, m.t_f) - (m.x0 * sp.exp(m.lam * m.t_f) + m.g * m.C_sym))
        ),
    )


@check(
    "mpc.convex-combination",
    title="G_k = c int_0^t_f e^{2a(t_f - tau)} dtau = c g; x0 e^{lam t_f} + g C_k = (1 - beta) x0 "
    "e^{lam t_f} + beta x_ref with beta = c g/(1 + c g), 1 - beta = 1/(1 + c g) > 0",
    source=seed(0, "B.4.2"),
    kind="symbolic",
    tolerance=0.0,
)
def _convex_combination(quick: bool) -> float:
    m = _Mode()
    G = m.c * sp.integrate(sp.exp(2 * m.a * (m.t_f - m.s)), (m.s, 0, m.t_f), conds="none")
    terminal = m.x0 * sp.exp(m.lam * m.t_f) + m.g * m.C
    convex = (1 - m.beta) * m.x0 * sp.exp(m.lam * m.t_f) + m.beta * m.x_ref
    return max(
        symbolic_residual(G - m.c * m.g),
        symbolic_residual(terminal - convex),
        symbolic_residual(1 - m.beta - 1 / (1 + m.c * m.g)),
    )


@check(
    "mpc.stationarity",
    title="first-order optimality of the strictly convex J: r u(tau) + q conj(b) e^{conj(lam)"
    "(t_f - tau)} (x(t_f) - x_ref) = 0; B.4.1: -((I+G)^-1 G - I) = (I+G)^-1 (scalar)",
    source=seed(0, "B.4.1, B.4.2"),
    kind="symbolic",
    tolerance=0.0,
)
def _stationarity(quick: bool) -> float:
    """The gradient of J in ``conj(u(tau))``, zero at the printed control.

    ``dJ/d conj(u(tau)) = r u + q conj(M(tau)) (x(t_f) - x_ref)`` with ``M = b e^{lam (t_f -
    tau)}``; J is a positive-definite quadratic (``r > 0``) plus a convex one, so the stationary
    control is the unique minimiser.
    """
    m = _Mode()
    terminal = m.x0 * sp.exp(m.lam * m.t_f) + m.g * m.C  # mpc.modal-state-solves-ode
    gradient = m.r * m.u + m.q * m.b_c * m.forcing * (terminal - m.x_ref)
    G = sp.symbols("G", positive=True)
    return max(
        symbolic_residual(gradient),
        symbolic_residual(-(G / (1 + G) - 1) - 1 / (1 + G)),
    )


@check(
    "mpc.imaginary-axis-limit",
    title="Re(lam) -> 0: g -> t_f and x(tau) -> x0 e^{iw tau} + C e^{iw(tau - t_f)} tau (the "
    "a = 0 branch of the closed forms)",
    source=seed(0, "B.4.2"),
    kind="symbolic",
    tolerance=0.0,
)
def _imaginary_axis(quick: bool) -> float:
    m = _Mode()
    a, w, tau, t_f = m.a, m.w, m.tau, m.t_f
    limit_state = m.x0 * sp.exp(sp.I * w * tau) + m.C_sym * sp.exp(sp.I * w * (tau - t_f)) * tau
    return max(
        symbolic_residual(sp.limit(m.g, a, 0) - t_f),
        symbolic_residual(sp.limit(m.state(m.C_sym), a, 0) - limit_state),
    )


# --- numeric ----------------------------------------------------------------------------------


def _cases(quick: bool, seed_: int):
    rng = np.random.default_rng(seed_)
    for _ in range(2 if quick else 20):
        d = int(rng.integers(2, 6))
        problem, S, A, B, Q_f, R_c = random_problem(rng, d)
        x0, x_ref = rng.normal(size=(2, 4, d))  # a batch of 4 initial states and waypoints
        t_f = rng.uniform(0.2, 2.0)
        yield problem, S, A, B, Q_f, R_c, x0, x_ref, t_f


def _to_modal(S, x):
    return x @ np.linalg.inv(S).T


def _from_modal(S, x_s):
    return (x_s @ S.T).real


@check(
    "mpc.modal-vs-gramian",
    title="B.4.2 modal closed form (terminal state, control) = B.4.1 matrix form with the Gramian "
    "W = int e^{As} B R^-1 B^T e^{A^T s} ds from Van Loan",
    source=seed(0, "B.4.1, B.4.2"),
    kind="numeric",
    tolerance=1e-10,
)
def _modal_vs_gramian(quick: bool) -> Outcome:
    # |Re(lambda)| t_f <= 2: expm and Van Loan carry ~u e^{4}; S and I + W Q_f (eigenvalues
    # >= 1) are well conditioned here, so the two forms agree to ~1e-12; tolerance 1e-10.
    worst = 0.0
    for problem, S, A, B, Q_f, R_c, x0, x_ref, t_f in _cases(quick, 41):
        x0_s, ref_s = _to_modal(S, x0), _to_modal(S, x_ref)
        modal = _from_modal(S, mpc.mpc_terminal_state(problem, x0_s, ref_s, t_f))
        general = mpc.mpc_terminal_state_general(A, B, Q_f, R_c, x0, x_ref, t_f)
        tau = np.linspace(0.0, t_f, 5)
        u_modal = _from_modal(S, mpc.mpc_control(problem, x0_s, ref_s, t_f, tau))
        u_general = mpc.mpc_control_general(A, B, Q_f, R_c, x0, x_ref, t_f, tau)
        worst = max(worst, relative_error(modal, general), relative_error(u_modal, u_general))
    return Outcome(worst, "random d in 2..5, stable and unstable A, t_f in [0.2, 2]")


def _direct_solution(A, B, Q_f, R_c, x0, x_ref, t_f, *, degree=24, nodes=48):
    """Minimise J over controls that are polynomials of `degree` - 1 in tau (Legendre basis).

    ``x(t_f) = e^{A t_f} x0 + F c`` with ``F_n = int_0^t_f e^{A(t_f - tau)} B P_n(tau) dtau``
    by Gauss-Legendre quadrature, and ``int u^T R_c u = sum_n t_f/(2n+1) c_n^T R_c c_n``; the
    normal equations of the finite quadratic problem give ``c``.
    """
    d, m = B.shape
    z, wq = legendre.leggauss(nodes)
    tau, wq = 0.5 * t_f * (z + 1.0), 0.5 * t_f * wq
    P = legendre.legvander(z, degree - 1)  # (nodes, degree)
    EB = expm(A * (t_f - tau)[:, None, None]) @ B  # (nodes, d, m)
    F = np.einsum("k,kdm,kn->dnm", wq, EB, P).reshape(d, degree * m)
    H = np.kron(np.diag(t_f / (2.0 * np.arange(degree) + 1.0)), R_c)
    E = expm(A * t_f)
    e0 = x_ref - x0 @ E.T
    coef = np.linalg.solve(F.T @ Q_f @ F + H, (e0 @ Q_f.T @ F).T).T
    terminal = x0 @ E.T + coef @ F.T

    def control(t):
        basis = legendre.legvander(2.0 * np.asarray(t) / t_f - 1.0, degree - 1)
        return np.einsum("tn,...nm->...tm", basis, coef.reshape(*coef.shape[:-1], degree, m))

    return terminal, control


@check(
    "mpc.vs-direct-least-squares",
    title="closed form = direct minimisation of J over degree-23 polynomial controls "
    "(Gauss-Legendre, 48 nodes): terminal state and u(tau)",
    source=seed(0, "B.4.1, B.4.2"),
    kind="numeric",
    tolerance=1e-9,
)
def _vs_direct(quick: bool) -> Outcome:
    # The optimal u is a combination of e^{conj(lam_k)(t_f - tau)}: its Legendre coefficients
    # fall like (|lam| t_f / 2)^n / n! <= 2.3^24 / 24! ~ 5e-16 at the truncation (|lam| <= 2.3,
    # t_f <= 2), and 48 Gauss nodes integrate F to round-off. The normal equations' condition
    # number (~1e4 here) times u bounds the rest: ~1e-12; tolerance 1e-9.
    worst = 0.0
    for problem, S, A, B, Q_f, R_c, x0, x_ref, t_f in _cases(quick, 42):
        x0_s, ref_s = _to_modal(S, x0), _to_modal(S, x_ref)
        terminal, control = _direct_solution(A, B, Q_f, R_c, x0, x_ref, t_f)
        modal = _from_modal(S, mpc.mpc_terminal_state(problem, x0_s, ref_s, t_f))
        tau = np.linspace(0.0, t_f, 9)
        u_modal = _from_modal(S, mpc.mpc_control(problem, x0_s, ref_s, t_f, tau))
        worst = max(worst, relative_error(modal, terminal), relative_error(u_modal, control(tau)))
    return Outcome(worst, "random d in 2..5; the polynomial optimum, not the derivation")


@check(
    "mpc.state-vs-solve-ivp",
    title="closed-loop state x(tau) = S x_s(tau) (mpc_state) = solve_ivp of dx/dtau = A x + B "
    "u_ref(tau) on [0, t_f]",
    source=seed(0, "B.4.2"),
    kind="numeric",
    tolerance=1e-9,
)
def _state_vs_ivp(quick: bool) -> Outcome:
    # DOP853 at rtol 1e-12 / atol 1e-14 over |A| t_f <~ 5: global error ~1e-11; tolerance 1e-9.
    worst = 0.0
    for problem, S, A, B, _, _, x0, x_ref, t_f in _cases(quick, 43):
        x0_s, ref_s = _to_modal(S, x0[0]), _to_modal(S, x_ref[0])

        def rhs(t, x, problem=problem, S=S, x0_s=x0_s, ref_s=ref_s, t_f=t_f, A=A, B=B):
            u = _from_modal(S, mpc.mpc_control(problem, x0_s, ref_s, t_f, [min(t, t_f)])[0])
            return A @ x + B @ u

        tau = np.linspace(0.0, t_f, 7)
        sol = solve_ivp(rhs, (0.0, t_f), x0[0], method="DOP853", rtol=1e-12, atol=1e-14, t_eval=tau)
        closed = _from_modal(S, mpc.mpc_state(problem, x0_s, ref_s, t_f, tau))
        worst = max(worst, relative_error(closed, sol.y.T))
    return Outcome(worst, "DOP853 at rtol 1e-12")


# --- statistical --------------------------------------------------------------------------------


@check(
    "mpc.controlled-sde-terminal-law",
    title="Monte Carlo: dx = (A x + B u_ref) dt + G dw (exact sampler, augmented state) ends at "
    "x(t_f) ~ N((1 - beta) x0 e^{lam t_f} + beta x_ref, V_F(t_f)): the noise ignores the control",
    source=seed(0, "B.4.2 (covariance independent of the control)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _controlled_sde(quick: bool) -> Outcome:
    """The open-loop control is generated inside a linear SDE: ``u = R_c^-1 B^T y`` with
    ``dy/dtau = -A^T y``, ``y(0) = e^{A^T t_f} Q_f (I + W Q_f)^-1 e0`` (B.4.1), so the augmented
    state ``(x, y)`` is a `LinearSDE` the exact sampler draws without time discretisation error.
    """
    rng = np.random.default_rng(44)
    paths = 4000 if quick else 40_000
    worst = 0.0
    for k, d in enumerate((2, 3)):
        problem, S, A, B, Q_f, R_c = random_problem(rng, d)
        Q = 0.05 * np.eye(d) + 0.02 * np.ones((d, d))  # process noise, not diagonal in S
        x0, x_ref, t_f = rng.normal(size=d), rng.normal(size=d), 1.5
        W = dle.forward_covariance(A, B @ np.linalg.solve(R_c, B.T), t_f)
        e0 = x_ref - expm(A * t_f) @ x0
        y0 = expm(A.T * t_f) @ Q_f @ np.linalg.solve(np.eye(d) + W @ Q_f, e0)
        A_aug = np.block([[A, B @ np.linalg.solve(R_c, B.T)], [np.zeros((d, d)), -A.T]])
        G_aug = np.vstack([np.linalg.cholesky(Q), np.zeros((d, d))])
        with warnings.catch_warnings():  # -A^T is unstable when A is stable: y grows as designed
            warnings.simplefilter("ignore", UnstableSystemWarning)
            sde = LinearSDE(A_aug, G_aug)
        grid = TimeGrid.uniform(t_f / 4, 4)
        start = np.tile(np.concatenate([x0, y0]), (paths, 1))
        x = simulate_exact(sde, start, BrownianPath(45 + k, grid, paths, 2 * d))[:, -1, :d]
        mean = _from_modal(
            S, mpc.mpc_terminal_state(problem, _to_modal(S, x0), _to_modal(S, x_ref), t_f)
        )
        cov = dle.forward_covariance(A, Q, t_f)
        worst = max(worst, float(np.max(np.abs(whitened_scores(x - mean, cov)))))
    return Outcome(worst, f"{paths} paths, d = 2 and 3, t_f = 1.5; max |z|")

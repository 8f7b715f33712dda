"""Checks of the propagated state covariance (differential Lyapunov equation), seed 000 A.1-A.3."""

from __future__ import annotations

import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp
from scipy.linalg import expm

from estimators.closed_forms import dle
from sde_sim import BrownianPath, LinearSDE, TimeGrid, simulate_exact
from sde_sim.models import real_from_eigen
from verify.registry import Outcome, check, seed
from verify.tools import (
    random_eigensystem,
    random_spd,
    relative_error,
    symbolic_residual,
    whitened_scores,
)

SIGMA_LEVEL = 5.0


# --- symbolic ---------------------------------------------------------------------------------


@check(
    "dle.mode-solution",
    title="G (e^{a s} - 1)/a solves f' = a f + G, f(0) = 0 (forward); G (1 - e^{-a s})/a "
    "solves f' = -a f + G (backward)",
    source=seed(0, "A.3 (Lambda_VB entries), A.1 (DLE)"),
    kind="symbolic",
    tolerance=0.0,
)
def _mode_solution(quick: bool) -> float:
    a, g = sp.symbols("a g", complex=True)
    s = sp.symbols("s", positive=True)
    forward = g * (sp.exp(a * s) - 1) / a
    backward = g * (1 - sp.exp(-a * s)) / a
    return max(
        symbolic_residual(sp.diff(forward, s) - a * forward - g),
        symbolic_residual(forward.subs(s, 0)),
        symbolic_residual(sp.diff(backward, s) + a * backward - g),
        symbolic_residual(backward.subs(s, 0)),
    )


@check(
    "dle.eigenbasis-reduction",
    title="A = S L S^-1, V = S L_V S^H, Q = S G S^H: A V + V A^H + Q = S (a_kl L_V,kl + G_kl) S^H",
    source=seed(0, "A.3"),
    kind="symbolic",
    tolerance=0.0,
)
def _eigenbasis_reduction(quick: bool) -> float:
    d = 2
    lam = sp.symbols(f"l0:{d}", complex=True)
    S = sp.Matrix(d, d, sp.symbols(f"s0:{d * d}", complex=True))
    LV = sp.Matrix(d, d, sp.symbols(f"v0:{d * d}", complex=True))
    G = sp.Matrix(d, d, sp.symbols(f"g0:{d * d}", complex=True))
    L = sp.diag(*lam)
    A = S * L * S.inv()
    lhs = A * (S * LV * S.H) + (S * LV * S.H) * A.H + S * G * S.H
    entry = sp.Matrix(d, d, lambda k, m: (lam[k] + sp.conjugate(lam[m])) * LV[k, m] + G[k, m])
    return symbolic_residual(sp.simplify(lhs - S * entry * S.H))


@check(
    "dle.imaginary-axis-limit",
    title="psi(a, dt) = sign(dt)(1 - e^{-a dt})/a -> |dt| as a -> 0 (the Re(lambda) = 0 branch)",
    source=seed(0, "A.3 (phi for Re(lambda) = 0)"),
    kind="symbolic",
    tolerance=0.0,
)
def _imaginary_axis_limit(quick: bool) -> float:
    a = sp.symbols("a")
    tau = sp.symbols("tau", positive=True)
    return max(
        symbolic_residual(sp.limit((1 - sp.exp(-a * tau)) / a, a, 0) - tau),  # dt = tau > 0
        symbolic_residual(sp.limit(-(1 - sp.exp(a * tau)) / a, a, 0) - tau),  # dt = -tau
    )


@check(
    "dle.sign-form",
    title="sign(dt) q phi(lam, dt) = V_B(dt) for dt > 0 and V_F(|dt|) for dt < 0 (scalar mode)",
    source=seed(0, "A.3 (unified causal/non-causal form)"),
    kind="symbolic",
    tolerance=0.0,
)
def _sign_form(quick: bool) -> float:
    alpha, q = sp.symbols("alpha q", real=True)
    tau, r = sp.symbols("tau r", positive=True)

    def phi(dt):
        return (sp.exp(-2 * alpha * dt) - 1) / (-2 * alpha)

    v_f = sp.integrate(q * sp.exp(2 * alpha * r), (r, 0, tau), conds="none")
    v_b = sp.integrate(q * sp.exp(-2 * alpha * r), (r, 0, tau), conds="none")
    return max(symbolic_residual(q * phi(tau) - v_b), symbolic_residual(-q * phi(-tau) - v_f))


# --- numeric ----------------------------------------------------------------------------------


# Random cases keep |Re(lambda)| <= 1 and |dt| <= 2. Van Loan's block exponential holds both
# e^{As} and e^{-As}, so its round-off is about u e^{2 max|Re(lambda)| |dt|} <= 55 u ~ 1e-14
# relative to the result; the numeric tolerances (1e-10) leave a factor 1e4 for the
# conditioning of S and of the products.


def _random_cases(quick: bool, seed_: int):
    rng = np.random.default_rng(seed_)
    for _ in range(4 if quick else 40):
        d = int(rng.integers(2, 6))
        lam, S = random_eigensystem(rng, d, decay=(0.05, 1.0))
        Q = random_spd(rng, d)
        dt = rng.uniform(0.01, 2.0, size=6) * rng.choice([-1.0, 1.0], size=6)
        yield lam, S, Q, dt


@check(
    "dle.closed-form-vs-van-loan",
    title="eigenbasis closed form (non-diagonal G = S^-1 Q S^-H, both signs of dt) = Van Loan",
    source=seed(0, "A.3"),
    kind="numeric",
    tolerance=1e-10,
)
def _closed_form_vs_van_loan(quick: bool) -> Outcome:
    worst = 0.0
    for lam, S, Q, dt in _random_cases(quick, 1):
        A = real_from_eigen(lam, S)
        closed = dle.eigen_propagated_covariance(lam, S, Q, dt)
        worst = max(worst, relative_error(closed, dle.propagated_covariance(A, Q, dt)))
    return Outcome(worst, "random d in 2..5, Q with full G, dt in +-[0.01, 2]")


@check(
    "dle.van-loan-vs-ode",
    title="Van Loan V_F(s) = solve_ivp of dV/ds = A V + V A^T + Q, V(0) = 0 (any A, Jordan "
    "blocks included)",
    source=seed(0, "A.1 (DLE)"),
    kind="numeric",
    tolerance=1e-9,
)
def _van_loan_vs_ode(quick: bool) -> Outcome:
    rng = np.random.default_rng(2)
    worst = 0.0
    cases = [np.array([[-0.5, 1.0], [0.0, -0.5]])]  # a Jordan block: not diagonalizable
    for _ in range(2 if quick else 12):  # stable, non-normal: K skew, P SPD, eigenvalues in the
        K = rng.normal(size=(3, 3))  # open left half-plane
        cases.append((K - K.T) - random_spd(rng, 3, floor=0.2))
    for A in cases:
        d = A.shape[0]
        Q = random_spd(rng, d)
        s_end = 3.0

        def rhs(_, v, A=A, Q=Q, d=d):
            V = v.reshape(d, d)
            return (A @ V + V @ A.T + Q).ravel()

        sol = solve_ivp(
            rhs,
            (0, s_end),
            np.zeros(d * d),
            method="DOP853",
            rtol=1e-12,
            atol=1e-14,
            dense_output=True,
        )
        s = np.linspace(0.1, s_end, 7)
        ode = sol.sol(s).T.reshape(-1, d, d)
        worst = max(worst, relative_error(dle.forward_covariance(A, Q, s), ode))
    return Outcome(worst, "DOP853 at rtol 1e-12")


@check(
    "dle.backward-is-forward-of-minus-a",
    title="V_B(s) = e^{-As} V_F(s) e^{-A^T s} (seed 000 A.1: V_F = e^{A dt} V_B e^{A^T dt})",
    source=seed(0, "A.1"),
    kind="numeric",
    tolerance=1e-10,
)
def _backward_forward(quick: bool) -> Outcome:
    # V_B grows like e^{2 |Re(lambda)| s} and e^{As} shrinks by as much, so this identity is
    # conditioned like e^{4 max|Re(lambda)| s}: lags are capped at 1 (factor <= 55).
    worst = 0.0
    for lam, S, Q, dt in _random_cases(quick, 3):
        A = real_from_eigen(lam, S)
        for s in np.minimum(np.abs(dt), 1.0):
            E = expm(A * s)
            worst = max(
                worst,
                relative_error(
                    E @ dle.backward_covariance(A, Q, s) @ E.T, dle.forward_covariance(A, Q, s)
                ),
            )
    return Outcome(worst, "lags up to 1")


@check(
    "dle.rotation-eigenvalues",
    title="Re(lambda) = 0 exactly (pure rotation) and |Re(lambda)| = 1e-9: closed form = Van "
    "Loan; for Re(lambda) = 0, V_F(s) = q s I",
    source=seed(0, "A.3 (Re(lambda) = 0 case), 3.8"),
    kind="numeric",
    tolerance=1e-10,
)
def _rotation(quick: bool) -> float:
    S = np.array([[1 - 1j, 1 + 1j], [1, 1]])
    worst = 0.0
    for alpha in (0.0, -1e-9, 1e-9):
        lam = np.array([alpha - 1j, alpha + 1j])
        A = real_from_eigen(lam, S)
        Q = 0.3 * (S @ S.conj().T).real  # simultaneously diagonalizable, q = 0.3 per mode
        dt = np.array([-4.0, -0.3, 0.3, 4.0])
        closed = dle.diagonal_propagated_covariance(lam, S, Q, dt)
        worst = max(worst, relative_error(closed, dle.propagated_covariance(A, Q, dt)))
        if alpha == 0.0:
            expected = 0.3 * np.abs(dt)[:, None, None] * (S @ S.conj().T).real
            worst = max(worst, relative_error(closed, expected))
    return worst


@check(
    "dle.expm1-branch",
    title="psi(a, dt) keeps full precision as a -> 0 (50-digit reference); the naive "
    "(1 - e^{-a dt})/a loses digits",
    source=seed(0, "A.3 (Re(lambda) -> 0)"),
    kind="numeric",
    tolerance=1e-14,
)
def _expm1_branch(quick: bool) -> Outcome:
    import mpmath

    mpmath.mp.dps = 50
    worst, naive_worst = 0.0, 0.0
    for a in (1e-4, 1e-8, 1e-12, -1e-10, 1e-9 + 1e-3j):
        for dt in (0.7, -2.5):
            ref = complex(mpmath.sign(dt) * (1 - mpmath.exp(-mpmath.mpc(a) * dt)) / mpmath.mpc(a))
            worst = max(worst, abs(complex(dle.psi(a, dt)) - ref) / abs(ref))
            naive = np.sign(dt) * (1 - np.exp(-a * dt)) / a
            naive_worst = max(naive_worst, abs(naive - ref) / abs(ref))
    return Outcome(worst, f"naive formula's relative error: {naive_worst:.1e}")


# --- statistical --------------------------------------------------------------------------------


@check(
    "dle.pulled-forward-estimates",
    title="Monte Carlo: e^{-A dt} x(t_j) - x(t_i) ~ N(0, V(dt)) for causal and non-causal lags "
    "(exact sampler, correlated Q)",
    source=seed(0, "2.1, A.1"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _pulled_forward(quick: bool) -> Outcome:
    S = np.array([[1 - 1j, 1 + 1j], [1, 1]])
    lam = np.array([-0.1 - 1j, -0.1 + 1j])
    A = real_from_eigen(lam, S)
    Q = 0.05 * np.array([[1.0, 0.5], [0.5, 1.0]])  # not simultaneously diagonalizable
    sde = LinearSDE.from_covariance(A, Q)
    paths = 4000 if quick else 40_000
    h, n_steps, i = 0.05, 120, 60
    grid = TimeGrid.uniform(h, n_steps)
    x0 = np.random.default_rng(5).normal(size=(paths, 2)) * 3
    x = simulate_exact(sde, x0, BrownianPath(11, grid, paths, 2))
    worst, lags = 0.0, []
    for j in (0, 30, 55, 65, 90, 120):
        dt = (j - i) * h
        pulled = x[:, j] @ expm(-A * dt).T
        V = dle.eigen_propagated_covariance(lam, S, Q, dt)
        worst = max(worst, float(np.max(np.abs(whitened_scores(pulled - x[:, i], V)))))
        lags.append(f"{dt:+.2f}")
    return Outcome(worst, f"{paths} paths, lags {', '.join(lags)}; max |z|")


@check(
    "dle.rfa-eq5-monte-carlo",
    title="seed 004 eq. (5), A.2: with Q = S Lambda_Q S^H the pulled-forward estimates' error "
    "covariance is S Lambda_V S^H, Lambda_V = sign(dt) lambda_Q (e^{-2 Re(lambda) dt} - 1) / "
    "(-2 Re(lambda)) per mode (Monte Carlo, exact sampler, both lag signs)",
    source=seed(4, "eq. (5), A.2"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _rfa_eq5(quick: bool) -> Outcome:
    S = np.array([[1 - 1j, 1 + 1j], [1, 1]])
    lam = np.array([-0.3 - 0.8j, -0.3 + 0.8j])
    lam_q = np.array([0.2, 0.2])  # equal on the conjugate pair: Q is real (seed 004, eq. 5)
    A = real_from_eigen(lam, S)
    Q = (S @ np.diag(lam_q) @ S.conj().T).real
    sde = LinearSDE.from_covariance(A, Q)
    paths = 4000 if quick else 40_000
    h, n_steps, i = 0.05, 100, 50
    x0 = np.random.default_rng(7).normal(size=(paths, 2)) * 2
    x = simulate_exact(sde, x0, BrownianPath(12, TimeGrid.uniform(h, n_steps), paths, 2))
    worst, lags = 0.0, []
    for j in (0, 25, 45, 55, 75, 100):
        dt = (j - i) * h
        pulled = x[:, j] @ expm(-A * dt).T
        modes = dle.eigen_mode_variances(lam, lam_q, dt)  # Lambda_V, one per mode
        V = (S @ np.diag(modes) @ S.conj().T).real
        worst = max(worst, float(np.max(np.abs(whitened_scores(pulled - x[:, i], V)))))
        lags.append(f"{dt:+.2f}")
    return Outcome(worst, f"{paths} paths, lags {', '.join(lags)}; max |z|")


# --- seed errors --------------------------------------------------------------------------------


@check(
    "dle.printed-s-inverse",
    title="seeds print V = S Lambda_V S^-1: for a non-unitary S (the afa-2d basis) that is not "
    "the propagated covariance (it is not even symmetric); the corrected S Lambda_V S^H is "
    "dle.closed-form-vs-van-loan",
    source=seed(3, "3.3 (after eq. 5)") + "; " + seed(0, "5.2"),
    kind="numeric",
    tolerance=1e-10,
    expect="fails",
    printed=r"V(\Delta t) = S\,\Lambda_V(\Delta t)\,S^{-1}",
    corrected=r"V(\Delta t) = S\,\Lambda_V(\Delta t)\,S^{H}",
    correction="dle.closed-form-vs-van-loan",
)
def _printed_s_inverse(quick: bool) -> Outcome:
    S = np.array([[1 - 1j, 1 + 1j], [1, 1]])
    lam = np.array([-0.1 - 1j, -0.1 + 1j])
    q = np.array([0.3, 0.3])  # equal on the conjugate pair: Q = S diag(q) S^H is real
    Q = (S * q) @ S.conj().T
    A = real_from_eigen(lam, S)
    dt = np.array([-3.0, -0.5, 0.5, 3.0])
    modes = dle.eigen_mode_variances(lam, q, dt)
    printed = ((S * modes[:, None, :]) @ np.linalg.inv(S)).real
    reference = dle.propagated_covariance(A, Q.real, dt)
    asymmetry = float(np.abs(printed - np.swapaxes(printed, 1, 2)).max())
    return Outcome(
        relative_error(printed, reference), f"max |V - V^T| of the printed form: {asymmetry:.2g}"
    )


# --- seed 004 C.7: time-structured (coloured) process noise (issue 17, P24) ----------------------


@check(
    "dle.coloured-noise-prior",
    title="seed 004 C.7: with q(s) = sum_j c_j e^{gamma_j s}, lambda_V(dt) = Re sum_j c_j "
    "(e^{gamma_j dt} - e^{-2 mu dt}) / (2 mu + gamma_j) is the convolution int_0^dt e^{-2 mu "
    "(dt - s)} q(s) ds and solves d lambda_V/d dt = -2 mu lambda_V + q, lambda_V(0) = 0",
    source=seed(4, "C.7"),
    kind="symbolic",
    tolerance=0.0,
)
def _coloured_noise(quick: bool) -> float:
    dt, s, mu = sp.symbols("dt s mu", positive=True)
    gamma, c = sp.symbols("gamma c", complex=True)  # one term of the sum (the map is linear)
    closed = c * (sp.exp(gamma * dt) - sp.exp(-2 * mu * dt)) / (2 * mu + gamma)
    ode = sp.diff(closed, dt) - (-2 * mu * closed + c * sp.exp(gamma * dt))
    integrand = sp.exp(-2 * mu * (dt - s)) * c * sp.exp(gamma * s)
    convolution = sp.integrate(integrand, (s, 0, dt), conds="none")  # gamma != -2 mu
    # the real part: the ODE has the real coefficient -2 mu, so Re commutes with it (a real
    # gamma and c make the sum real; conjugate pairs of terms do the same)
    return max(
        symbolic_residual(sp.simplify(ode)),
        symbolic_residual(closed.subs(dt, 0)),
        symbolic_residual(sp.simplify(convolution - closed)),
    )

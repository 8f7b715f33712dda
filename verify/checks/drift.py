"""Checks of the inhomogeneous drift, measurement bias and delay forms, seed 000 3.9 and 3.10.

Symbolic checks work per eigenvalue (scalar modes: every matrix in these formulas is a function
of ``A`` or commutes with it in the eigenbasis); the general, non-commuting ``C`` of 3.10 is
checked numerically. Seed errors found in 3.9 are registered as printed/corrected pairs:

* ``u_s := S u S^-1`` (a vector has eigen-coordinates ``S^-1 u``);
* the first eigenbasis line closes its bracket before ``u_s``;
* the AFA residual indexes the biased query ``Z_q^u[k, j]`` instead of ``[k, i]``.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp
from scipy.linalg import expm

from estimators.closed_forms import dle, drift
from sde_sim import FixedTimes, GaussianInitial, LinearMeasurement, LinearSDE, Scenario, simulate
from sde_sim.models import real_from_eigen
from verify.registry import Outcome, check, seed
from verify.tools import (
    random_eigensystem,
    random_spd,
    relative_error,
    sampled_residual,
    symbolic_residual,
    whitened_scores,
)

SIGMA_LEVEL = 5.0


def _g(lam, s):
    """Per-eigenvalue drift integral ``int_0^s e^{lam r} dr = (e^{lam s} - 1) / lam``."""
    return (sp.exp(lam * s) - 1) / lam


# --- symbolic ---------------------------------------------------------------------------------


@check(
    "drift.drift-integral",
    title="g = (e^{lam s} - 1)/lam = int_0^s e^{lam(s - tau)} dtau solves g' = lam g + 1, "
    "g(0) = 0, -> s as lam -> 0; e^{lam s} x + g u solves x' = lam x + u",
    source=seed(0, "3.9 (G_u and the solution of the inhomogeneous SDE)"),
    kind="symbolic",
    tolerance=0.0,
)
def _drift_integral(quick: bool) -> float:
    lam = sp.symbols("lam", nonzero=True)
    s, tau = sp.symbols("s tau", positive=True)
    x0, u = sp.symbols("x0 u")
    g = _g(lam, s)
    integral = sp.integrate(sp.exp(lam * (s - tau)), (tau, 0, s), conds="none")
    mean = sp.exp(lam * s) * x0 + g * u
    return max(
        symbolic_residual(sp.diff(g, s) - lam * g - 1),
        symbolic_residual(g.subs(s, 0)),
        symbolic_residual(integral - g),
        symbolic_residual(sp.limit(g, lam, 0) - s),
        symbolic_residual(sp.diff(mean, s) - lam * mean - u),
        symbolic_residual(mean.subs(s, 0) - x0),
        symbolic_residual(_g(lam, -s) + sp.exp(-lam * s) * g),  # G_u(-s) = -e^{-As} G_u(s)
    )


def _eigenbasis_lines():
    lam = sp.symbols("lam", nonzero=True)
    dt = sp.symbols("dt", real=True)
    x, u = sp.symbols("x_s u_s")
    decay = sp.exp(-lam * dt)
    line2 = decay * x - (1 - decay) / lam * u
    return lam, dt, x, u, decay, line2


@check(
    "drift.corrected-eigenbasis-lines",
    title="e^{-lam dt}(x_s - g(lam, dt) u_s) = e^{-lam dt} x_s - (1 - e^{-lam dt}) u_s/lam = "
    "e^{-lam dt}(x_s + u_s/lam) - u_s/lam = e^{-lam dt} x_s + g(lam, -dt) u_s; its mean is x(t_i)",
    source=seed(0, "3.9 (pulled-back estimate in the eigenbasis)"),
    kind="symbolic",
    tolerance=0.0,
)
def _corrected_eigenbasis_lines(quick: bool) -> float:
    lam, dt, x, u, decay, line2 = _eigenbasis_lines()
    line1 = decay * (x - _g(lam, dt) * u)  # the bracket closed after u_s
    line3 = decay * (x + u / lam) - u / lam
    computed = decay * x + _g(lam, -dt) * u  # what estimators.closed_forms.drift evaluates
    x_i = sp.symbols("x_i")
    mean_j = sp.exp(lam * dt) * x_i + _g(lam, dt) * u  # E[x_s(t_j) | x_s(t_i)]
    return max(
        symbolic_residual(line1 - line2),
        symbolic_residual(line2 - line3),
        symbolic_residual(line3 - computed),
        symbolic_residual(line1.subs(x, mean_j) - x_i),
    )


@check(
    "drift.printed-eigenbasis-lines",
    title="seed error: printed e^{-lam dt}(x_s - (e^{lam dt} - 1)/lam) u_s (bracket closed "
    "before u_s) is not the next line e^{-lam dt} x_s - (1 - e^{-lam dt}) u_s/lam",
    source=seed(0, "3.9 (first line of the eigenbasis estimate)"),
    kind="symbolic",
    tolerance=0.0,
    expect="fails",
    printed=r"e^{-\lambda\Delta t}\Bigl(x_s - \frac{e^{\lambda\Delta t}-1}{\lambda}\Bigr)u_s",
    corrected=(
        r"e^{-\lambda\Delta t}\Bigl(x_s - \frac{e^{\lambda\Delta "
        r"t}-1}{\lambda}\,u_s\Bigr) = e^{-\lambda\Delta t}x_s - \frac{1-e^{-\lambda\Delta "
        r"t}}{\lambda}\,u_s"
    ),
    correction="drift.corrected-eigenbasis-lines",
)
def _printed_eigenbasis_lines(quick: bool) -> Outcome:
    lam, dt, x, u, decay, line2 = _eigenbasis_lines()
    printed = decay * (x - (sp.exp(lam * dt) - 1) / lam) * u
    residual = sampled_residual(printed - line2)
    return Outcome(
        residual, "max |printed - next line| at sample points (it multiplies x_s by u_s)"
    )


@check(
    "drift.measurement-bias-form",
    title="with z_s = lam_C x_s: lam_C x_hat_s = e^{-lam dt}(z_s + lam_C u_s/lam) - lam_C u_s/lam",
    source=seed(0, "3.9 (including the measurement model)"),
    kind="symbolic",
    tolerance=0.0,
)
def _measurement_bias_form(quick: bool) -> float:
    lam, dt, x, u, decay, _ = _eigenbasis_lines()
    lam_c = sp.symbols("lam_C")
    z = lam_c * x
    seed_form = decay * (z + lam_c * u / lam) - lam_c * u / lam
    return symbolic_residual(lam_c * decay * (x - _g(lam, dt) * u) - seed_form)


@check(
    "drift.delay-cancellation",
    title="3.10 step by step (scalar mode): every printed intermediate equals the composed "
    "estimate; the drift bracket is -(1 - e^{-lam dt})/lam; z_hat does not depend on phi",
    source=seed(0, "3.10"),
    kind="symbolic",
    tolerance=0.0,
)
def _delay_cancellation(quick: bool) -> Outcome:
    lam, c = sp.symbols("lam c", nonzero=True)
    b, u, z = sp.symbols("b u z")
    dt, phi = sp.symbols("dt phi", real=True)
    decay = sp.exp(-lam * dt)
    # The chain of estimates of 3.10, each step as printed.
    x_j_phi = (z - b) / c
    x_j = sp.exp(-lam * phi) * (x_j_phi - _g(lam, phi) * u)
    x_i = decay * (x_j - _g(lam, dt) * u)
    x_i_phi = sp.exp(lam * phi) * x_i + _g(lam, phi) * u
    z_hat = c * x_i_phi + b
    # The printed intermediate expressions.
    shift = sp.exp(-lam * (dt - phi))
    step1 = shift * x_j + (_g(lam, phi) - shift * _g(lam, dt)) * u
    bracket = (1 - decay) * _g(lam, phi) - shift * _g(lam, dt)
    step2 = decay * x_j_phi + bracket * u
    decomposition = decay * z + c * bracket * u + (1 - decay) * b  # Phi_z = e^{-lam dt}
    bracket_line2 = (
        (sp.exp(lam * phi) - 1) / lam
        - decay * (sp.exp(lam * phi) - 1) / lam
        - sp.exp(lam * phi) * (1 - decay) / lam
    )
    final = decay * z + (1 - decay) * (b - c * u / lam)
    residuals = {
        "x(t_i + phi) via x(t_j)": x_i_phi - step1,
        "x(t_i + phi) via x(t_j + phi)": x_i_phi - step2,
        "z_hat decomposition": z_hat - decomposition,
        "bracket line 2": bracket - bracket_line2,
        "bracket = -(1 - e^{-lam dt})/lam": bracket + (1 - decay) / lam,
        "final form": z_hat - final,
        "d z_hat / d phi": sp.diff(z_hat, phi),
    }
    worst = {name: symbolic_residual(expr) for name, expr in residuals.items()}
    bad = [name for name, r in worst.items() if r != 0]
    return Outcome(max(worst.values()), f"not proved: {', '.join(bad)}" if bad else "all 7 steps")


def _afa_symbols():
    lam = sp.symbols("lam", nonzero=True)
    t_i, t_j = sp.symbols("t_i t_j", real=True)
    zq_i, zq_j, zk_j, b = sp.symbols("Zq_i Zq_j Zk_j b")
    E = sp.exp(-lam * (t_j - t_i))  # E_qk[k, i, j]
    residual = zq_i - (E * (zk_j + b) - b)  # Z_q[k, i] - Z_hat_k[k, i, j]
    return lam, t_i, t_j, zq_i, zq_j, zk_j, b, E, residual


@check(
    "drift.corrected-afa-bias",
    title="AFA with bias b = lam_C u/lam: residual = (Z_q[i] + b) - E (Z_k[j] + b) = "
    "Phi[i](Zhat_q^u[i] - Zhat_k^u[j]); value MLE and prediction step (normalised weights)",
    source=seed(0, "3.9 (AFA: biased queries, keys, values and prediction)"),
    kind="symbolic",
    tolerance=0.0,
)
def _corrected_afa_bias(quick: bool) -> float:
    lam, t_i, t_j, zq_i, _, zk_j, b, E, residual = _afa_symbols()
    Phi_i = sp.exp(lam * t_i)
    zq_hat = sp.exp(-lam * t_i) * (zq_i + b)
    zk_hat = sp.exp(-lam * t_j) * (zk_j + b)
    # Value MLE over three keys with attention weights a_1 + a_2 + a_3 = 1.
    a1, a2 = sp.symbols("a1 a2")
    weights = (a1, a2, 1 - a1 - a2)
    times = sp.symbols("t_1:4", real=True)
    values = sp.symbols("Zv_1:4")
    estimates = [sp.exp(-lam * (t - t_i)) * (v + b) - b for t, v in zip(times, values, strict=True)]
    mle = sum(a * e for a, e in zip(weights, estimates, strict=True))
    factored = (
        Phi_i
        * sum(
            a * sp.exp(-lam * t) * (v + b) for a, t, v in zip(weights, times, values, strict=True)
        )
        - b
    )
    # Prediction: with Zbar = lam_C x and b = lam_C u/lam, the drift-aware propagation of x.
    lam_c, x, u, dt = sp.symbols("lam_C x u dt")
    zbar = lam_c * x
    bias = lam_c * u / lam
    predicted = sp.exp(lam * dt) * zbar + bias * (sp.exp(lam * dt) - 1)
    return max(
        symbolic_residual(residual - ((zq_i + b) - E * (zk_j + b))),
        symbolic_residual(residual - Phi_i * (zq_hat - zk_hat)),
        symbolic_residual(mle - factored),
        symbolic_residual(predicted - (sp.exp(lam * dt) * (zbar + bias) - bias)),
        symbolic_residual(predicted - lam_c * (sp.exp(lam * dt) * x + _g(lam, dt) * u)),
    )


@check(
    "drift.printed-afa-bias",
    title="seed error: printed residual Z_q^u[k, j] - E[k, i, j] Z_k^u[k, j] uses the query at "
    "time j; the residual Z_q[k, i] - Zhat_k[k, i, j] needs Z_q^u[k, i]",
    source=seed(0, "3.9 (AFA residual with biased queries and keys)"),
    kind="symbolic",
    tolerance=0.0,
    expect="fails",
    printed=r"Z^u_q[k,j] - E[k,i,j]\,Z^u_k[k,j]",
    corrected=r"Z^u_q[k,i] - E[k,i,j]\,Z^u_k[k,j]",
    correction="drift.corrected-afa-bias",
)
def _printed_afa_bias(quick: bool) -> Outcome:
    _, _, _, _, zq_j, zk_j, b, E, residual = _afa_symbols()
    printed = (zq_j + b) - E * (zk_j + b)
    return Outcome(
        sampled_residual(printed - residual),
        "max |printed - residual| at sample points (Z_q at t_j, not t_i)",
    )


# --- numeric ----------------------------------------------------------------------------------


def _general_matrices(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Non-normal stable matrices, a singular one, a nilpotent Jordan block and a rotation."""
    cases = [
        np.array([[0.0, 1.0], [0.0, 0.0]]),  # nilpotent: G_u(s) = [[s, s^2/2], [0, s]]
        np.array([[-1.0, 2.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, -0.5]]),  # eigenvalue 0
        np.array([[0.0, -1.5], [1.5, 0.0]]),  # rotation
    ]
    for _ in range(n):
        d = int(rng.integers(2, 6))
        K = rng.normal(size=(d, d))
        cases.append((K - K.T) - random_spd(rng, d, floor=0.1))
    return cases


# Gauss-Legendre with 16 nodes is exact up to degree 31 in s; the Taylor remainder of e^{As}
# beyond it is below ||A dt||^32 / 32! < 2e-26 for ||A dt|| <= 2 (the cases are scaled so).
# Each node's expm carries ~1e-15 relative error and the terms are at most e^2 ~ 7 times the
# result, so round-off stays near 16 * 7 * 1e-15 ~ 1e-13; the tolerance keeps a factor 1e2.
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(16)


def _quadrature_integral(A: np.ndarray, dt: float) -> np.ndarray:
    s = 0.5 * dt * (_GL_NODES + 1.0)
    return 0.5 * dt * np.einsum("n,nij->ij", _GL_WEIGHTS, expm(A * s[:, None, None]))


@check(
    "drift.integral-vs-quadrature",
    title="G_u(dt) (augmented expm) = Gauss-Legendre quadrature of int_0^dt e^{As} ds, any A "
    "(singular, nilpotent, rotation, non-normal), both signs of dt",
    source=seed(0, "3.9 (G_u)"),
    kind="numeric",
    tolerance=1e-11,
)
def _integral_vs_quadrature(quick: bool) -> Outcome:
    rng = np.random.default_rng(21)
    worst, count = 0.0, 0
    lags = 2 if quick else 3
    for A in _general_matrices(rng, 1 if quick else 20):
        scale = max(1.0, float(np.linalg.norm(A, 2)))
        for dt in rng.uniform(0.05, 2.0, size=lags) * rng.choice([-1.0, 1.0], size=lags) / scale:
            ref = _quadrature_integral(A, dt)
            worst = max(worst, relative_error(drift.drift_integral(A, dt), ref))
            count += 1
    nilpotent = drift.drift_integral([[0.0, 1.0], [0.0, 0.0]], 1.5)
    worst = max(worst, relative_error(nilpotent, [[1.5, 1.125], [0.0, 1.5]]))
    return Outcome(worst, f"{count} (A, dt) pairs, ||A dt|| <= 2, and the nilpotent closed form")


@check(
    "drift.eigen-vs-augmented",
    title="S diag(expm1(lam dt)/lam) S^-1 = augmented-expm G_u, with Re(lam) = 0, |lam| = 1e-9 "
    "and lam = 0 exactly",
    source=seed(0, "3.9 (drift term in the eigenbasis)"),
    kind="numeric",
    tolerance=1e-10,
)
def _eigen_vs_augmented(quick: bool) -> Outcome:
    # Both are exact to round-off; the eigen form multiplies by S and S^-1 (cond(S) <= 100), and
    # e^{lam dt} reaches e^{2 |Re(lam)|} <= e^2 relative to G_u, so the round-off is below
    # ~u * 100 * 10 ~ 2e-13; 1e-10 leaves a factor 5e2.
    rng = np.random.default_rng(22)
    worst = 0.0
    cases = []
    for _ in range(2 if quick else 40):
        d = int(rng.integers(2, 6))
        cases.append(random_eigensystem(rng, d, decay=(-0.5, 1.0)))
    S3 = random_eigensystem(rng, 3)[1]
    for real_eig in (0.0, 1e-9, -1e-9):  # singular and nearly singular A
        lam3 = np.array([-0.2 + 1j, -0.2 - 1j, real_eig])
        cases.append((lam3, S3))
    rotation = np.array([1j * 1e-9 - 1e-9, -1j * 1e-9 - 1e-9])  # nearly zero pair
    cases.append((rotation, np.array([[1 - 1j, 1 + 1j], [1, 1]])))
    for lam, S in cases:
        A = real_from_eigen(lam, S)
        dt = rng.uniform(0.01, 2.0, size=5) * rng.choice([-1.0, 1.0], size=5)
        closed = drift.eigen_drift_integral(lam, S, dt)
        worst = max(worst, relative_error(closed, drift.drift_integral(A, dt)))
    return Outcome(worst, f"{len(cases)} eigensystems incl. lam = 0, +-1e-9")


def _backward_flow(A: np.ndarray, u: np.ndarray, x: np.ndarray, dt: float) -> np.ndarray:
    """solve_ivp of x' = A x + u from x at time 0 to time -dt (the pulled-back state)."""
    if dt == 0:
        return x.copy()
    sol = solve_ivp(lambda _, y: A @ y + u, (0.0, -dt), x, method="DOP853", rtol=1e-12, atol=1e-14)
    return sol.y[:, -1]


@check(
    "drift.pulled-back-vs-ode",
    title="x_hat_i(t_j) = e^{-A dt}(x(t_j) - G_u(dt) u) (general and eigen forms) = solve_ivp "
    "of x' = A x + u from x(t_j) over -dt; the seed's bias form agrees for invertible A",
    source=seed(0, "3.9"),
    kind="numeric",
    tolerance=1e-9,
)
def _pulled_back_vs_ode(quick: bool) -> Outcome:
    # DOP853 at rtol 1e-12 over |dt| <= 2 with ||A|| ~ 1: global error ~1e-11 relative; the
    # closed forms' round-off is ~u cond(S) e^{2 |Re(lam)| |dt|} < 1e-12; 1e-9 keeps a factor 1e2.
    rng = np.random.default_rng(23)
    worst, bias_worst = 0.0, 0.0
    for _ in range(3 if quick else 20):
        d = int(rng.integers(2, 5))
        lam, S = random_eigensystem(rng, d, decay=(-0.3, 1.0))
        A = real_from_eigen(lam, S)
        u = rng.normal(size=d)
        x = rng.normal(size=(4, d)) * 3
        dt = rng.uniform(0.05, 2.0, size=4) * rng.choice([-1.0, 1.0], size=4)
        ref = np.stack([_backward_flow(A, u, x[k], dt[k]) for k in range(4)])
        general = drift.pulled_back_state(A, u, x, dt)
        eigen = drift.eigen_pulled_back_state(lam, S, u, x, dt)
        worst = max(worst, relative_error(general, ref), relative_error(eigen, ref))
        # Seed form e^{-lam dt}(x_s + u_s/lam) - u_s/lam, lam != 0 here.
        S_inv = np.linalg.inv(S)
        x_s, u_s = x @ S_inv.T, S_inv @ u
        seed_form = np.exp(-lam * dt[:, None]) * (x_s + u_s / lam) - u_s / lam
        bias_worst = max(bias_worst, relative_error((seed_form @ S.T).real, ref))
    singular = np.array([[0.0, 1.0], [0.0, 0.0]])  # a double integrator: A^-1 does not exist
    u, x = np.array([0.5, -1.0]), np.array([[1.0, 2.0]])
    ref = _backward_flow(singular, u, x[0], 1.3)[None]
    worst = max(worst, relative_error(drift.pulled_back_state(singular, u, x, 1.3), ref))
    return Outcome(max(worst, bias_worst), f"seed's bias form: {bias_worst:.1e}; + singular A")


@check(
    "drift.expm1-branch",
    title="g(lam, dt) = expm1(lam dt)/lam keeps full precision as lam -> 0 (50-digit "
    "reference); the naive (e^{lam dt} - 1)/lam loses digits",
    source=seed(0, "3.9 (G_u near singular A)"),
    kind="numeric",
    tolerance=1e-14,
)
def _expm1_branch(quick: bool) -> Outcome:
    import mpmath

    mpmath.mp.dps = 50
    worst, naive_worst = 0.0, 0.0
    for lam in (1e-4, -1e-8, 1e-12, 3e-10 - 2e-9j, 1e-9 + 1e-3j, 0.0):
        for dt in (0.7, -2.5):
            m = mpmath.mpc(lam)
            ref = complex(mpmath.expm1(m * dt) / m) if lam != 0 else dt
            worst = max(worst, abs(complex(drift.drift_factor(lam, dt)) - ref) / abs(ref))
            if lam != 0:
                naive = (np.exp(lam * dt) - 1) / lam
                naive_worst = max(naive_worst, abs(naive - ref) / abs(ref))
    return Outcome(worst, f"naive formula's relative error: {naive_worst:.1e}")


def _direct_measurement_estimate(A, C, u, b, z, dt) -> np.ndarray:
    """C x_hat + b with x_hat the ODE flow of C^-1 (z - b) over -dt: no delay, no closed form."""
    return C @ _backward_flow(A, u, np.linalg.solve(C, z - b), dt) + b


@check(
    "drift.delay-cancels",
    title="3.10 z_hat(t_i) (with delay phi, non-commuting C) = the same without phi = C x_hat + "
    "b from solve_ivp; for C = S Lambda_C S^-1 = the eigenbasis final form",
    source=seed(0, "3.10"),
    kind="numeric",
    tolerance=1e-9,
)
def _delay_cancels(quick: bool) -> Outcome:
    # References are DOP853 at rtol 1e-12 (see drift.pulled-back-vs-ode); C^-1 adds cond(C) <= 30
    # (redrawn otherwise), so the error stays near 3e-10 at worst; 1e-9 keeps a factor 3.
    rng = np.random.default_rng(24)
    worst, phi_worst = 0.0, 0.0
    for _ in range(2 if quick else 20):
        d = int(rng.integers(2, 5))
        lam, S = random_eigensystem(rng, d, decay=(-0.3, 1.0))
        A = real_from_eigen(lam, S)
        u, b = rng.normal(size=d), rng.normal(size=d)
        C = np.eye(d) + 0.4 * rng.normal(size=(d, d))  # does not commute with A
        while np.linalg.cond(C) > 30:
            C = np.eye(d) + 0.4 * rng.normal(size=(d, d))
        z = rng.normal(size=(3, d))
        dt = rng.uniform(0.05, 2.0, size=3) * rng.choice([-1.0, 1.0], size=3)
        ref = np.stack([_direct_measurement_estimate(A, C, u, b, z[k], dt[k]) for k in range(3)])
        no_delay = drift.pulled_back_measurement(A, C, u, b, z, dt)
        worst = max(worst, relative_error(no_delay, ref))
        for phi in rng.uniform(-1.0, 1.0, size=3):
            delayed = drift.pulled_back_measurement(A, C, u, b, z, dt, delay=phi)
            phi_worst = max(phi_worst, relative_error(delayed, no_delay))
        # Commuting C: the seed's final eigenbasis form.
        lam_c = np.empty(d, dtype=complex)
        lam_c[: d - d % 2 : 2] = rng.uniform(0.5, 2.0, d // 2) + 1j * rng.normal(size=d // 2)
        lam_c[1 : d - d % 2 : 2] = lam_c[: d - d % 2 : 2].conj()  # pairs follow lam's pairs
        if d % 2:
            lam_c[-1] = rng.uniform(0.5, 2.0)
        Cc = real_from_eigen(lam_c, S, name="C")
        ref = np.stack([_direct_measurement_estimate(A, Cc, u, b, z[k], dt[k]) for k in range(3)])
        final = drift.eigen_pulled_back_measurement(lam, S, lam_c, u, b, z, dt)
        worst = max(worst, relative_error(final, ref))
    return Outcome(max(worst, phi_worst), f"max change with phi in [-1, 1]: {phi_worst:.1e}")


def _drift_term_cases(quick: bool):
    rng = np.random.default_rng(25)
    for _ in range(3 if quick else 20):
        d = int(rng.integers(2, 5))
        lam, S = random_eigensystem(rng, d)
        u = rng.normal(size=d)
        dt = rng.uniform(0.1, 2.0) * rng.choice([-1.0, 1.0])
        d_aug = np.zeros((d + 1, d + 1))
        d_aug[:d, :d], d_aug[:d, d] = real_from_eigen(lam, S), u
        # The seed's own augmented system: expm([[A, u], [0, 0]] dt) holds G_u(dt) u.
        yield lam, S, u, dt, expm(d_aug * dt)[:d, d]


@check(
    "drift.corrected-u-eigen-coordinates",
    title="G_u(dt) u = S diag(g(lam, dt)) u_s with u_s = S^-1 u = the last column of "
    "expm([[A, u], [0, 0]] dt) (the seed's augmented system)",
    source=seed(0, "3.9 (drift term, u_s)"),
    kind="numeric",
    tolerance=1e-10,
)
def _corrected_u(quick: bool) -> float:
    # Round-off of expm and of the eigen form, ~u cond(S) e^2 < 2e-13 with cond(S) <= 100:
    # 1e-10 keeps a factor 5e2.
    worst = 0.0
    for lam, S, u, dt, ref in _drift_term_cases(quick):
        u_s = np.linalg.solve(S, u)
        worst = max(worst, relative_error((S @ (drift.drift_factor(lam, dt) * u_s)).real, ref))
    return worst


@check(
    "drift.printed-u-eigen-coordinates",
    title="seed error: printed u_s := S u S^-1 (read as S u, the only product a vector allows) "
    "gives S diag(g) S u != G_u u",
    source=seed(0, "3.9 (drift term, u_s)"),
    kind="numeric",
    tolerance=1e-10,
    expect="fails",
    printed=r"u_s := S\,u\,S^{-1}",
    corrected=(
        r"u_s = S^{-1}u,\qquad G_u(\Delta t)\,u = "
        r"S\,\operatorname{diag}\bigl(g(\lambda,\Delta t)\bigr)\,u_s"
    ),
    correction="drift.corrected-u-eigen-coordinates",
)
def _printed_u(quick: bool) -> Outcome:
    best = np.inf  # the printed form must be wrong in every case, so report the smallest error
    for lam, S, u, dt, ref in _drift_term_cases(quick):
        printed = S @ (drift.drift_factor(lam, dt) * (S @ u))
        best = min(best, relative_error(printed, ref))
    return Outcome(best, "smallest relative error over the cases")


# --- statistical --------------------------------------------------------------------------------

_S2 = np.array([[1 - 1j, 1 + 1j], [1, 1]])
_LAM2 = np.array([-0.1 - 1j, -0.1 + 1j])


def _residual_covariance(A, C, Q, R, dt, eigen=None) -> np.ndarray:
    """Covariance of z(t_i) - z_hat(t_i) for i != j: C V(dt) C^T + Phi_z R Phi_z^T + R.

    ``V`` is the drift-free propagated covariance of `estimators.closed_forms.dle` (its
    eigenbasis closed form when ``eigen = (lam, S)`` is given, else Van Loan).
    """
    if eigen is None:
        V = dle.propagated_covariance(A, Q, dt)
    else:
        V = dle.eigen_propagated_covariance(*eigen, Q, dt)
    Phi_z = C @ expm(-A * dt) @ np.linalg.inv(C)
    return C @ V @ C.T + Phi_z @ R @ Phi_z.T + R


@check(
    "drift.pulled-back-measurement-mc",
    title="Monte Carlo (exact sampler, drift u, bias b, delay phi): z(t_i) - z_hat(t_i) ~ "
    "N(0, C V(dt) C^T + Phi_z R Phi_z^T + R), eigenbasis form and general non-commuting C",
    source=seed(0, "3.9, 3.10"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _pulled_back_measurement_mc(quick: bool) -> Outcome:
    A = real_from_eigen(_LAM2, _S2)
    Q = 0.05 * np.array([[1.0, 0.5], [0.5, 1.0]])
    u, b = np.array([0.5, -0.3]), np.array([0.7, -1.2])
    R = np.array([[0.02, 0.005], [0.005, 0.03]])
    lam_c = np.array([1.5 - 0.4j, 1.5 + 0.4j])
    times = np.array([0.5, 1.5, 2.0, 2.6, 4.0])
    i = 2
    paths = 4000 if quick else 40_000
    worst, naive_worst, n_scores = 0.0, 0.0, 0
    commuting = real_from_eigen(lam_c, _S2, name="C")
    general = np.array([[1.2, 0.3], [-0.4, 0.9]])  # does not commute with A
    for label, C, delay, sim_seed in (
        ("eigen", commuting, 0.35, 31),
        ("general", general, -0.4, 32),
    ):
        scenario = Scenario(
            system=LinearSDE.from_covariance(A, Q, u),
            measurement=LinearMeasurement(C, R, b, delay=delay),
            initial=GaussianInitial(np.array([3.0, -2.0]), np.eye(2)),
            dt=0.05,
            n_steps=100,
            observations=FixedTimes(times),
        )
        z = simulate(scenario, paths, seed=sim_seed, method="exact").z
        for j in (0, 1, 3, 4):
            dt = times[j] - times[i]
            if label == "eigen":
                z_hat = drift.eigen_pulled_back_measurement(_LAM2, _S2, lam_c, u, b, z[:, j], dt)
                cov = _residual_covariance(A, C, Q, R, dt, eigen=(_LAM2, _S2))
            else:
                z_hat = drift.pulled_back_measurement(A, C, u, b, z[:, j], dt, delay=delay)
                cov = _residual_covariance(A, C, Q, R, dt)
            scores = whitened_scores(z[:, i] - z_hat, cov)
            worst = max(worst, float(np.max(np.abs(scores))))
            n_scores += scores.size
            # Without the drift and bias correction: Phi_z z(t_j) alone is biased.
            naive = z[:, j] @ (C @ expm(-A * dt) @ np.linalg.inv(C)).T
            naive_worst = max(
                naive_worst, float(np.abs(whitened_scores(z[:, i] - naive, cov)[:2]).max())
            )
    return Outcome(
        worst,
        f"{paths} paths x 2 systems, {n_scores} scores; uncorrected Phi_z z_j: mean |z| up to "
        f"{naive_worst:.0f}",
    )


# --- seed 004 C.2: drift and measurement bias in RFA (issue 17, P23) -----------------------------


def _rfa_drift_cases(quick: bool):
    """Eigenbasis problems: ``Lambda``, ``Lambda_C`` (complex diagonals), ``u_s``, ``b_s``,
    ``z_s``, ``dt`` and the reference prediction ``Lambda_C xhat_s + b_s`` with ``xhat_s`` from
    the augmented exponential ``expm([[Lambda, u_s], [0, 0]] dt)`` (the seed's own device)."""
    rng = np.random.default_rng(402)
    for _ in range(3 if quick else 20):
        d = int(rng.integers(1, 4))
        lam = -rng.uniform(0.1, 1.0, d) + 1j * rng.uniform(-2.0, 2.0, d)
        lam_c = rng.uniform(0.5, 2.0, d) * np.exp(1j * rng.uniform(-np.pi, np.pi, d))
        u_s, b_s, z_s = (rng.normal(size=d) + 1j * rng.normal(size=d) for _ in range(3))
        dt = rng.uniform(0.1, 2.0)
        aug = np.zeros((d + 1, d + 1), dtype=complex)
        aug[:d, :d], aug[:d, d] = np.diag(lam), u_s
        flow = expm(aug * dt)
        x_s = (z_s - b_s) / lam_c
        reference = lam_c * (flow[:d, :d] @ x_s + flow[:d, d]) + b_s
        yield lam, lam_c, u_s, b_s, z_s, dt, reference


@check(
    "drift.printed-rfa-c2-middle",
    title="seed error: seed 004 C.2's middle display z_hat = Lambda_C e^{Lambda dt} (Lambda_C^-1 "
    "(z_s - b) + u_s/Lambda) - u_s/Lambda + b drops Lambda_C from the last u_s/Lambda",
    source=seed(4, "C.2 (z_hat_s,ij, first line)"),
    kind="numeric",
    tolerance=1e-10,
    expect="fails",
    printed=(
        r"\hat z = \Lambda_C e^{\Lambda\Delta t}\bigl(\Lambda_C^{-1}(z_s - b) + "
        r"u_s/\Lambda\bigr) - u_s/\Lambda + b"
    ),
    corrected=(
        r"\hat z = \Lambda_C e^{\Lambda\Delta t}\bigl(\Lambda_C^{-1}(z_s - b) + "
        r"u_s/\Lambda\bigr) - \Lambda_C u_s/\Lambda + b"
    ),
    correction="drift.corrected-rfa-c2",
)
def _printed_rfa_c2(quick: bool) -> Outcome:
    best = np.inf
    for lam, lam_c, u_s, b_s, z_s, dt, reference in _rfa_drift_cases(quick):
        growth = np.exp(lam * dt)
        printed = lam_c * growth * ((z_s - b_s) / lam_c + u_s / lam) - u_s / lam + b_s
        best = min(best, relative_error(printed, reference))
    return Outcome(best, "smallest relative error over the cases")


@check(
    "drift.corrected-rfa-c2",
    title="seed 004 C.2: z_hat = e^{Lambda dt} (z_s + beta) - beta with beta = Lambda_C u_s / "
    "Lambda - b_s (its final form, right), = the middle display with -Lambda_C u_s / Lambda",
    source=seed(4, "C.2"),
    kind="numeric",
    tolerance=1e-10,
)
def _corrected_rfa_c2(quick: bool) -> float:
    # expm of an O(1) augmented matrix against O(1) closed forms: ~1e-15; 1e-10 is generous
    worst = 0.0
    for lam, lam_c, u_s, b_s, z_s, dt, reference in _rfa_drift_cases(quick):
        growth = np.exp(lam * dt)
        beta = lam_c * u_s / lam - b_s
        final = growth * (z_s + beta) - beta
        middle = lam_c * growth * ((z_s - b_s) / lam_c + u_s / lam) - lam_c * u_s / lam + b_s
        worst = max(worst, relative_error(final, reference), relative_error(middle, reference))
    return worst

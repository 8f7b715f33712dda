"""Checks of the damped, driven oscillator closed forms (seed 002 App. A.1-A.3, A.5.2-A.5.4).

Two printed forms of seed 002 are wrong and registered as failing checks beside their
corrections: eq. (30) (``oscillator.printed-eq30`` / ``oscillator.corrected-eq30``) and the
overdamped transient coefficients U, V of A.5.4 (``oscillator.printed-od-transient`` /
``oscillator.corrected-od-transient``).
"""

from __future__ import annotations

import functools

import mpmath
import numpy as np
import sympy as sp
from scipy.integrate import solve_ivp
from scipy.linalg import expm, solve_continuous_lyapunov

from estimators.closed_forms import dle
from estimators.closed_forms import oscillator as osc
from sde_sim import BrownianPath, LinearSDE, TimeGrid, presets, simulate_exact
from verify.registry import Outcome, check, seed
from verify.tools import relative_error, symbolic_residual, trig_residual, whitened_scores

SIGMA_LEVEL = 5.0

# Symbols shared by the symbolic checks: t is any real time, the rest positive parameters.
_t = sp.symbols("t", real=True)
_g, _wd, _sg, _wj, _al = sp.symbols("gamma omega_d sigma omega_j alpha", positive=True)


def _ode_residual(x, omega_sq, gamma, force=0):
    """``x'' + 2 gamma x' + omega^2 x - force`` in t (seed 002 eq. 6)."""
    velocity = sp.diff(x, _t)
    return sp.diff(velocity, _t) + 2 * gamma * velocity + omega_sq * x - force


def _propagator_residuals(E, omega_sq, gamma) -> list:
    """Entries of ``dE/dt - A E`` and ``E(0) - I`` for ``A = [[0, 1], [-omega^2, -2 gamma]]``."""
    A = sp.Matrix([[0, 1], [-omega_sq, -2 * gamma]])
    return list(E.diff(_t) - A * E) + list(E.subs(_t, 0) - sp.eye(2))


def _damped_matrix(c, s, omega_sq, gamma):
    """``e^{-gamma t} [c I + s (A + gamma I)]``: the shape shared by all three printed forms."""
    return sp.exp(-gamma * _t) * sp.Matrix([[c + gamma * s, s], [-omega_sq * s, c - gamma * s]])


# --- symbolic: propagators ------------------------------------------------------------------------


@check(
    "oscillator.propagator-underdamped",
    title="eq. (11) e^{At} (gamma < omega): dE/dt = A E and E(0) = I, entry by entry",
    source=seed(2, "A.1.1, eq. (11)"),
    kind="symbolic",
    tolerance=0.0,
)
def _propagator_underdamped(quick: bool) -> float:
    omega_sq = _wd**2 + _g**2  # omega_d = sqrt(omega^2 - gamma^2) > 0
    E = _damped_matrix(sp.cos(_wd * _t), sp.sin(_wd * _t) / _wd, omega_sq, _g)
    return max(symbolic_residual(e) for e in _propagator_residuals(E, omega_sq, _g))


@check(
    "oscillator.propagator-critical",
    title="critical e^{At} = e^{-gamma t}[[1 + gamma t, t], [-gamma^2 t, 1 - gamma t]]: "
    "dE/dt = A E, E(0) = I at omega = gamma",
    source=seed(2, "A.1.2 (Jordan form)"),
    kind="symbolic",
    tolerance=0.0,
)
def _propagator_critical(quick: bool) -> float:
    E = _damped_matrix(sp.Integer(1), _t, _g**2, _g)
    printed = sp.exp(-_g * _t) * sp.Matrix([[1 + _g * _t, _t], [-(_g**2) * _t, 1 - _g * _t]])
    return max(
        max(symbolic_residual(e) for e in _propagator_residuals(E, _g**2, _g)),
        symbolic_residual(E - printed),
    )


@check(
    "oscillator.propagator-overdamped",
    title="overdamped e^{At} (cosh/sinh of sigma t, sigma = sqrt(gamma^2 - omega^2)): "
    "dE/dt = A E, E(0) = I",
    source=seed(2, "A.1.3"),
    kind="symbolic",
    tolerance=0.0,
)
def _propagator_overdamped(quick: bool) -> float:
    omega_sq = _g**2 - _sg**2
    E = _damped_matrix(sp.cosh(_sg * _t), sp.sinh(_sg * _t) / _sg, omega_sq, _g)
    return max(symbolic_residual(e) for e in _propagator_residuals(E, omega_sq, _g))


@check(
    "oscillator.propagator-unified",
    title="one formula e^{-gamma t}[cos(sqrt(u) t) I + sin(sqrt(u) t)/sqrt(u) (A + gamma I)], "
    "u = omega^2 - gamma^2 of any sign: dE/dt = A E, E(0) = I; u -> 0 gives the critical form",
    source=seed(2, "A.1 (all three cases as one analytic function of omega_d^2)"),
    kind="symbolic",
    tolerance=0.0,
)
def _propagator_unified(quick: bool) -> float:
    u = sp.symbols("u", real=True, nonzero=True)  # u < 0: sqrt(u) = i sigma, cos -> cosh
    omega_sq = u + _g**2
    c, s = sp.cos(sp.sqrt(u) * _t), sp.sin(sp.sqrt(u) * _t) / sp.sqrt(u)
    E = _damped_matrix(c, s, omega_sq, _g)
    critical = _damped_matrix(sp.Integer(1), _t, _g**2, _g)
    limit = sp.Matrix(2, 2, lambda i, j: sp.limit(E[i, j], u, 0))
    return max(
        max(symbolic_residual(e) for e in _propagator_residuals(E, omega_sq, _g)),
        symbolic_residual(limit - critical),
    )


@check(
    "oscillator.regime-limits",
    title="eq. (11) as omega_d -> 0+ and the overdamped form as sigma -> 0+ both tend to the "
    "critical form",
    source=seed(2, "A.1.1-A.1.3"),
    kind="symbolic",
    tolerance=0.0,
)
def _regime_limits(quick: bool) -> float:
    critical = _damped_matrix(sp.Integer(1), _t, _g**2, _g)
    under = _damped_matrix(sp.cos(_wd * _t), sp.sin(_wd * _t) / _wd, _wd**2 + _g**2, _g)
    over = _damped_matrix(sp.cosh(_sg * _t), sp.sinh(_sg * _t) / _sg, _g**2 - _sg**2, _g)
    lim_under = sp.Matrix(2, 2, lambda i, j: sp.limit(under[i, j], _wd, 0, "+"))
    lim_over = sp.Matrix(2, 2, lambda i, j: sp.limit(over[i, j], _sg, 0, "+"))
    return max(symbolic_residual(lim_under - critical), symbolic_residual(lim_over - critical))


# --- symbolic: particular solutions ---------------------------------------------------------------


def _i1_i2_symbolic(corrected: bool = True):
    """Eqs. (29)-(30), lambda_+- = omega_d +- omega_j; `corrected=False`: eq. (30) as printed."""
    damp = sp.exp(-_g * _t)

    def sine_part(lam):
        return (-_g * damp * sp.sin(lam * _t) - lam * (damp * sp.cos(lam * _t) - 1)) / (
            _g**2 + lam**2
        )

    def cosine_part(lam):
        return (-_g * damp * sp.cos(lam * _t) + lam * damp * sp.sin(lam * _t) + _g) / (
            _g**2 + lam**2
        )

    lam_p, lam_m = _wd + _wj, _wd - _wj
    I1 = (sine_part(lam_p) + sine_part(lam_m)) / 2
    sign = -1 if corrected else 1
    I2 = (cosine_part(lam_m) + sign * cosine_part(lam_p)) / 2
    return I1, I2


@check(
    "oscillator.eq29-eq30-antiderivatives",
    title="eq. (29) I1 and corrected eq. (30) I2 = (G(lambda_-) - G(lambda_+))/2: d/dt gives "
    "e^{-gamma t} sin(omega_d t) cos/sin(omega_j t), and both vanish at t = 0",
    source=seed(2, "A.2.1, eqs. (25)-(30)"),
    kind="symbolic",
    tolerance=0.0,
)
def _eq29_eq30(quick: bool) -> float:
    I1, I2 = _i1_i2_symbolic()
    damp_sin = sp.exp(-_g * _t) * sp.sin(_wd * _t)
    return max(
        trig_residual(sp.diff(I1, _t) - damp_sin * sp.cos(_wj * _t)),
        trig_residual(sp.diff(I2, _t) - damp_sin * sp.sin(_wj * _t)),
        symbolic_residual(I1.subs(_t, 0)),
        symbolic_residual(I2.subs(_t, 0)),
    )


@check(
    "oscillator.eq31-particular",
    title="eq. (31) x_p = (alpha/omega_d)(cos(omega_j t) I1 + sin(omega_j t) I2) with the "
    "corrected I2 solves x'' + 2 gamma x' + omega^2 x = alpha cos(omega_j t), x(0) = x'(0) = 0",
    source=seed(2, "A.2.1, eqs. (21)-(31)"),
    kind="symbolic",
    tolerance=0.0,
)
def _eq31(quick: bool) -> float:
    I1, I2 = _i1_i2_symbolic()
    x = _al / _wd * (sp.cos(_wj * _t) * I1 + sp.sin(_wj * _t) * I2)
    force = _al * sp.cos(_wj * _t)
    return max(
        trig_residual(_ode_residual(x, _wd**2 + _g**2, _g, force)),
        symbolic_residual(x.subs(_t, 0)),
        trig_residual(sp.diff(x, _t).subs(_t, 0)),
    )


def _steady_coefficients_symbolic(omega_sq, gamma, w, p, q):
    det = (omega_sq - w**2) ** 2 + (2 * gamma * w) ** 2  # eq. (42)
    C = (p * (omega_sq - w**2) - q * 2 * gamma * w) / det  # eq. (43)
    D = (q * (omega_sq - w**2) + p * 2 * gamma * w) / det  # eq. (44)
    return C, D


@check(
    "oscillator.particular-critical-overdamped",
    title="closed forms of eqs. (33) and (35) (gaps in the seed): steady state + critical / "
    "corrected-U,V transient solve the ODE with x(0) = x'(0) = 0",
    source=seed(2, "A.2.2-A.2.3, eqs. (32)-(35)"),
    kind="symbolic",
    tolerance=0.0,
)
def _particular_critical_overdamped(quick: bool) -> float:
    force = _al * sp.cos(_wj * _t)
    residuals = []
    # critical, omega = gamma: x = C cos + D sin - e^{-gamma t}(C + (gamma C + w D) t)
    C, D = _steady_coefficients_symbolic(_g**2, _g, _wj, _al, 0)
    x = (
        C * sp.cos(_wj * _t)
        + D * sp.sin(_wj * _t)
        - sp.exp(-_g * _t) * (C + (_g * C + _wj * D) * _t)
    )
    residuals.append((x, _g**2))
    # overdamped, omega^2 = gamma^2 - sigma^2: x = C cos + D sin + U e^{-(g-s)t} + V e^{-(g+s)t}
    omega_sq = _g**2 - _sg**2
    C, D = _steady_coefficients_symbolic(omega_sq, _g, _wj, _al, 0)
    x0, v0 = C, _wj * D
    U = (-(_g + _sg) * x0 - v0) / (2 * _sg)
    V = ((_g - _sg) * x0 + v0) / (2 * _sg)
    x = (
        C * sp.cos(_wj * _t)
        + D * sp.sin(_wj * _t)
        + U * sp.exp(-(_g - _sg) * _t)
        + V * sp.exp(-(_g + _sg) * _t)
    )
    residuals.append((x, omega_sq))
    return max(
        max(
            symbolic_residual(sp.expand(_ode_residual(x, w2, _g, force))),
            symbolic_residual(x.subs(_t, 0)),
            symbolic_residual(sp.diff(x, _t).subs(_t, 0)),
        )
        for x, w2 in residuals
    )


# --- symbolic: steady state, transients -------------------------------------------------------


@check(
    "oscillator.steady-state",
    title="eqs. (43)-(45): C cos + D sin solves the ODE driven by p cos + q sin; "
    "C - iD = (p - iq) H with H = 1/(omega0^2 - w^2 + 2 i gamma w), |H|^2 det = 1",
    source=seed(2, "A.3, eqs. (36)-(45); eq. (64); Introduction (H)"),
    kind="symbolic",
    tolerance=0.0,
)
def _steady_state(quick: bool) -> float:
    w0, p, q = sp.symbols("omega_0 p q", real=True)
    C, D = _steady_coefficients_symbolic(w0**2, _g, _wj, p, q)
    x = C * sp.cos(_wj * _t) + D * sp.sin(_wj * _t)
    force = p * sp.cos(_wj * _t) + q * sp.sin(_wj * _t)
    H = 1 / (w0**2 - _wj**2 + 2 * sp.I * _g * _wj)
    det = (w0**2 - _wj**2) ** 2 + (2 * _g * _wj) ** 2
    return max(
        symbolic_residual(_ode_residual(x, w0**2, _g, force)),
        symbolic_residual(C - sp.I * D - (p - sp.I * q) * H),
        symbolic_residual(H * sp.conjugate(H) * det - 1),
    )


def _anchor_mode():
    """One drive mode (eq. 63 with M_f = 1): steady state at the anchor t_i, and its velocity."""
    t_i, C, D = sp.symbols("t_i C D", real=True)
    x_ss = C * sp.cos(_wj * t_i) + D * sp.sin(_wj * t_i)
    v_ss = _wj * (D * sp.cos(_wj * t_i) - C * sp.sin(_wj * t_i))
    return t_i, C, D, x_ss, v_ss


def _transient_residuals(x_tr, x_ss, v_ss, omega_sq) -> list:
    """Homogeneous ODE residual and the two anchoring conditions (A.5.3)."""
    return [
        _ode_residual(x_tr, omega_sq, _g),
        x_tr.subs(_t, 0) + x_ss,
        sp.diff(x_tr, _t).subs(_t, 0) + v_ss,
    ]


@check(
    "oscillator.transient-underdamped-critical",
    title="eqs. (66)-(67) E_i, F_i (one drive mode) and the critical E, F of A.5.4: x_tr solves "
    "the homogeneous ODE and cancels x_ss, x_ss' at the anchor",
    source=seed(2, "A.5.3, eqs. (66)-(67), (70); A.5.4 (critical)"),
    kind="symbolic",
    tolerance=0.0,
)
def _transient_under_critical(quick: bool) -> float:
    t_i, C, D, x_ss, v_ss = _anchor_mode()
    E = -x_ss  # eq. (66)
    F = (  # eq. (67), as printed
        -_g * x_ss + C * _wj * sp.sin(_wj * t_i) - D * _wj * sp.cos(_wj * t_i)
    ) / _wd
    under = sp.exp(-_g * _t) * (E * sp.cos(_wd * _t) + F * sp.sin(_wd * _t))
    E_c = -x_ss
    F_c = _g * E_c - v_ss
    critical = sp.exp(-_g * _t) * (E_c + F_c * _t)
    return max(
        *(symbolic_residual(r) for r in _transient_residuals(under, x_ss, v_ss, _wd**2 + _g**2)),
        *(symbolic_residual(r) for r in _transient_residuals(critical, x_ss, v_ss, _g**2)),
    )


def _overdamped_transient(U, V, x0, v0, *, with_ode: bool = True) -> float:
    """Residuals of x_tr = U e^{-(gamma - sigma) t} + V e^{-(gamma + sigma) t} (A.5.4).

    The homogeneous ODE holds for any U, V (both exponents are eigenvalues); `with_ode=False`
    measures the two anchoring conditions only.
    """
    x_tr = U * sp.exp(-(_g - _sg) * _t) + V * sp.exp(-(_g + _sg) * _t)
    residuals = _transient_residuals(x_tr, x0, v0, _g**2 - _sg**2)
    # One Matrix: SymPy stops simplifying at the first entry it cannot reduce to zero.
    return symbolic_residual(sp.Matrix(residuals if with_ode else residuals[1:]))


def _printed_uv(x0, v0):
    """A.5.4's overdamped U, V as printed (x0 = x_ss(t_i), v0 = its velocity)."""
    return (-(_g + _sg) * x0 + v0) / (2 * _sg), (-(_g - _sg) * x0 - v0) / (2 * _sg)


def _corrected_uv(x0, v0):
    return (-(_g + _sg) * x0 - v0) / (2 * _sg), ((_g - _sg) * x0 + v0) / (2 * _sg)


def _shown_uv(form) -> str:
    """SymPy's LaTeX of ``U = ..., V = ...`` for the report."""
    U, V = form(*sp.symbols("x_ss v_ss", real=True))
    return rf"{sp.latex(sp.Eq(sp.Symbol('U'), U))},\qquad {sp.latex(sp.Eq(sp.Symbol('V'), V))}"


@check(
    "oscillator.printed-od-transient",
    title="A.5.4 overdamped U, V AS PRINTED miss the anchoring: U + V = -(gamma/sigma) x_ss "
    "(not -x_ss) and the velocity condition fails (seed error)",
    source=seed(2, "A.5.4 (overdamped U, V)"),
    kind="symbolic",
    tolerance=0.0,
    expect="fails",
    printed=functools.partial(_shown_uv, _printed_uv),
    corrected=functools.partial(_shown_uv, _corrected_uv),
    correction="oscillator.corrected-od-transient",
)
def _printed_od_transient(quick: bool) -> Outcome:
    x0, v0 = sp.symbols("x_ss v_ss", real=True)
    U, V = _printed_uv(x0, v0)
    return Outcome(
        _overdamped_transient(U, V, x0, v0, with_ode=False),
        f"U + V + x_ss = {sp.factor(sp.cancel(U + V + x0))}",
    )


@check(
    "oscillator.corrected-od-transient",
    title="corrected U = (-(gamma + sigma) x_ss - x_ss')/(2 sigma), V = ((gamma - sigma) x_ss + "
    "x_ss')/(2 sigma): x_tr solves the ODE and starts the key from rest",
    source=seed(2, "A.5.4 (overdamped U, V, corrected)"),
    kind="symbolic",
    tolerance=0.0,
)
def _corrected_od_transient(quick: bool) -> float:
    x0, v0 = sp.symbols("x_ss v_ss", real=True)
    U, V = _corrected_uv(x0, v0)
    return _overdamped_transient(U, V, x0, v0)


@check(
    "oscillator.stationary-covariance",
    title="P = diag(s^2/(4 gamma omega^2), s^2/(4 gamma)) solves A P + P A^T + diag(0, s^2) = 0; "
    "V = P - E P E^T solves dV/dt = A V + V A^T + Q, V(0) = 0 for any E with E' = A E, E(0) = I",
    source=seed(2, "eq. (7) with velocity noise; seed 000 A.1 (DLE)"),
    kind="symbolic",
    tolerance=0.0,
)
def _stationary_covariance(quick: bool) -> float:
    w, s = sp.symbols("omega s", positive=True)
    A = sp.Matrix([[0, 1], [-(w**2), -2 * _g]])
    Q = sp.diag(0, s**2)
    P = sp.diag(s**2 / (4 * _g * w**2), s**2 / (4 * _g))
    E = sp.Matrix(2, 2, lambda i, j: sp.Function(f"e{i}{j}")(_t))
    V = P - E * P * E.T
    derivatives = {sp.Derivative(E[i, j], _t): (A * E)[i, j] for i in range(2) for j in range(2)}
    dV = V.diff(_t).subs(derivatives)
    return max(
        symbolic_residual(A * P + P * A.T + Q),
        symbolic_residual(sp.expand(dV - A * V - V * A.T - Q)),
        symbolic_residual(
            V.subs(_t, 0).subs(
                {E[i, j].subs(_t, 0): int(i == j) for i in range(2) for j in range(2)}
            )
        ),
    )


# --- numeric ----------------------------------------------------------------------------------


def _random_regime(rng: np.random.Generator, regime: str) -> tuple[float, float]:
    """(omega, gamma) with omega in [0.2, 3] and the damping ratio of the regime."""
    omega = float(rng.uniform(0.2, 3.0))
    zeta = {"under": rng.uniform(0.02, 0.95), "critical": 1.0, "over": rng.uniform(1.05, 4.0)}
    return omega, float(zeta[regime]) * omega


_REGIMES = ("under", "critical", "over")


def _regime_propagator(omega, gamma, t, regime):
    if regime == "under":
        return osc.propagator_underdamped(omega, gamma, t)
    if regime == "critical":
        return osc.propagator_critical(gamma, t)
    return osc.propagator_overdamped(omega, gamma, t)


@check(
    "oscillator.propagators-vs-expm",
    title="eq. (11), the critical and overdamped forms and the unified stable form = scipy expm "
    "at random (omega, gamma, t) in each regime",
    source=seed(2, "A.1.1-A.1.3"),
    kind="numeric",
    tolerance=1e-11,
)
def _propagators_vs_expm(quick: bool) -> Outcome:
    # scipy's expm (Pade 13, scaling and squaring) has a forward error up to about
    # eps ||A t||_1 2^s relative to ||e^{At}||: ||A t||_1 <= (1 + 2 * 12) 5 = 125 needs s = 5
    # squarings (to ||A t||_1 / 2^s <= 5.4), so ~ 2.2e-16 * 125 * 32 ~ 1e-12; tolerance 1e-11.
    # (The closed forms themselves are good to ~1e-15 against mpmath, see near-critical.)
    rng = np.random.default_rng(20)
    t = np.linspace(0.0, 5.0, 11)
    worst = 0.0
    for _ in range(2 if quick else 25):
        for regime in _REGIMES:
            omega, gamma = _random_regime(rng, regime)
            reference = expm(osc.drift_matrix(omega, gamma) * t[:, None, None])
            worst = max(
                worst,
                relative_error(_regime_propagator(omega, gamma, t, regime), reference),
                relative_error(osc.propagator(omega, gamma, t), reference),
            )
    return Outcome(worst, "omega in [0.2, 3], zeta in [0.02, 0.95] | 1 | [1.05, 4], t in [0, 5]")


def _mp_propagator(omega: float, gamma: float, t: float) -> np.ndarray:
    """e^{At} at 40 significant digits (mpmath), from the exact binary values of the inputs."""
    with mpmath.workdps(40):
        w, g, tt = mpmath.mpf(omega), mpmath.mpf(gamma), mpmath.mpf(t)
        E = mpmath.expm(mpmath.matrix([[0, 1], [-(w**2), -2 * g]]) * tt)
        return np.array([[float(E[i, j]) for j in range(2)] for i in range(2)])


def _eigenvector_route(omega: float, gamma: float, t: float) -> np.ndarray:
    """A.1.3's derivation evaluated literally: P diag(e^{lambda t}) P^-1 (P = eigenvectors)."""
    sigma = np.sqrt((gamma - omega) * (gamma + omega))
    P = np.array([[1.0, 1.0], [-gamma + sigma, -gamma - sigma]])
    P_inv = -1.0 / (2.0 * sigma) * np.array([[-gamma - sigma, -1.0], [gamma - sigma, 1.0]])
    return P @ np.diag(np.exp(np.array([-gamma + sigma, -gamma - sigma]) * t)) @ P_inv


@check(
    "oscillator.near-critical",
    title="stable propagator and particular solution within 1e-8 relative of critical damping "
    "(and exactly at it) = 40-digit mpmath; the regime routes' losses are reported",
    source=seed(2, "A.1 (regime boundaries); Table 10 (~5% of learned channels near zeta = 1)"),
    kind="numeric",
    tolerance=1e-14,
)
def _near_critical(quick: bool) -> Outcome:
    # The stable forms add a few roundings per entry (exp, series or cos/sin, products):
    # a relative error of ~ 10 eps = 2e-15 against the 40-digit reference; tolerance 1e-14.
    rng = np.random.default_rng(21)
    omega = 1.3
    gammas = [omega, np.nextafter(omega, 2.0), np.nextafter(omega, 0.0)]  # exact and 1 ulp
    gammas += [omega * (1.0 + d) for d in (1e-12, -1e-12, 1e-8, -1e-8)]
    gammas += list(omega * (1.0 + rng.uniform(-1e-8, 1e-8, size=2 if quick else 12)))
    times = (0.05, 0.9, 2.7, 8.0)
    stable = band = eigen = uv = 0.0
    literal_nan = 0
    for gamma in gammas:
        for t in times:
            ref = _mp_propagator(omega, gamma, t)
            stable = max(stable, relative_error(osc.propagator(omega, gamma, t), ref))
            band = max(band, relative_error(osc.propagator_critical(gamma, t), ref))
            with np.errstate(divide="ignore", invalid="ignore"):
                wd2 = omega * omega - gamma * gamma  # the literal omega_d^2
                if wd2 > 0:
                    literal = osc.propagator_underdamped(omega, gamma, t)
                elif wd2 < 0:
                    literal = osc.propagator_overdamped(omega, gamma, t)
                else:  # eq. (11) at omega_d = 0 exactly: 0/0
                    literal = np.full((2, 2), np.nan)
                literal_nan += int(np.isnan(literal).any())
                if gamma > omega:
                    eigen = max(eigen, relative_error(_eigenvector_route(omega, gamma, t), ref))
        # drive cos(0.9 t) from rest: the stable form, and the U, V route where it applies
        t = np.linspace(0.0, 8.0, 3 if quick else 17)
        ref_x = _mp_particular(omega, gamma, 0.9, t)
        x = osc.particular_solution(omega, gamma, 0.9, t)[..., 0]
        stable = max(stable, relative_error(x, ref_x))
        if gamma > omega:
            x_uv = osc.particular_solution_overdamped(omega, gamma, 0.9, t)
            uv = max(uv, relative_error(x_uv, ref_x))
    detail = (
        f"{len(gammas)} dampings with |gamma/omega - 1| <= 1e-8; regime routes: "
        f"literal eq. (11)/A.1.3 NaN at {literal_nan} points, critical form used in a 1e-8 "
        f"band {band:.1e}, A.1.3 eigenvector route {eigen:.1e}, U/V particular {uv:.1e}"
    )
    return Outcome(stable, detail)


def _mp_particular(omega0: float, gamma: float, w: float, t) -> np.ndarray:
    """x_p(t) from rest under cos(w t), at 40 digits: the drive as part of a linear system.

    ``[x, v, cos(w t), sin(w t)]`` obeys ``d/dt = M [.]`` with the drive generated by the
    rotation block, so ``x_p(t)`` is the first entry of ``expm(M t) [0, 0, 1, 0]``.
    """
    out = []
    with mpmath.workdps(40):
        w0, g, ww = mpmath.mpf(omega0), mpmath.mpf(gamma), mpmath.mpf(w)
        M = mpmath.matrix([[0, 1, 0, 0], [-(w0**2), -2 * g, 1, 0], [0, 0, 0, -ww], [0, 0, ww, 0]])
        for tt in np.atleast_1d(t):
            out.append(
                float((mpmath.expm(M * mpmath.mpf(float(tt))) * mpmath.matrix([0, 0, 1, 0]))[0])
            )
    return np.array(out)


@check(
    "oscillator.long-lag-overdamped",
    title="stable propagator at sigma t from 50 to 1.5e4 (strongly overdamped, slow mode "
    "e^{-omega^2 t/(gamma + sigma)}) = mpmath; the printed cosh/sinh form overflows (NaN)",
    source=seed(2, "A.1.3"),
    kind="numeric",
    tolerance=1e-12,
)
def _long_lag(quick: bool) -> Outcome:
    # The slow mode e^{-omega^2 t/(gamma + sigma)} has exponents up to ~125 here; exp amplifies
    # the exponent's relative rounding (a few eps) by its size: <= 125 * 4 eps ~ 1e-13 relative.
    # Tolerance 1e-12.
    cases = [(0.01, 1.0, 800.0), (0.05, 3.0, 5000.0), (0.3, 2.0, 1000.0), (0.5, 1.0, 60.0)]
    if not quick:
        cases += [(1e-3, 10.0, 1e3), (0.2, 0.5, 3000.0), (1.0, 400.0, 10.0)]
    worst, printed_nan = 0.0, 0
    for omega, gamma, t in cases:
        worst = max(
            worst, relative_error(osc.propagator(omega, gamma, t), _mp_propagator(omega, gamma, t))
        )
        with np.errstate(over="ignore", invalid="ignore"):
            printed_nan += int(np.isnan(osc.propagator_overdamped(omega, gamma, t)).any())
    return Outcome(worst, f"printed form NaN in {printed_nan} of {len(cases)} cases")


def _printed_eq30_i2(gamma, omega_d, w, t):
    """Eq. (30) exactly as printed: (G(lambda_+) + G(lambda_-))/2 -- a seed error."""
    damp = np.exp(-gamma * t)
    total = 0.0
    for lam in (omega_d + w, omega_d - w):
        total += (-gamma * damp * np.cos(lam * t) + lam * damp * np.sin(lam * t) + gamma) / (
            gamma**2 + lam**2
        )
    return 0.5 * total


def _gauss_legendre_nodes(t: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the 80-point Gauss-Legendre rule on [0, t]."""
    x, wts = _leggauss(80)
    return 0.5 * t * (x + 1.0), 0.5 * t * wts


def _eq30_cases(quick: bool):
    """Random (gamma, omega_d, w, t) and Gauss-Legendre values of eqs. (25)-(26).

    The integrands are entire with |complex rate| <= gamma + omega_d + w <= 8 on [0, t <= 6]:
    80 nodes leave an error <= 24^160 / 160! ~ e^-140, far below round-off.
    """
    rng = np.random.default_rng(22)
    for _ in range(5 if quick else 40):
        gamma, omega_d = rng.uniform(0.05, 2.0), rng.uniform(0.1, 3.0)
        w, t = rng.uniform(0.1, 3.0), rng.uniform(0.2, 6.0)
        r, wts = _gauss_legendre_nodes(t)
        damp_sin = wts * np.exp(-gamma * r) * np.sin(omega_d * r)
        yield gamma, omega_d, w, t, damp_sin @ np.cos(w * r), damp_sin @ np.sin(w * r)


def _eq30_error(value, ref, gamma, omega_d, t) -> float:
    # Relative to the integrand's scale int_0^t e^{-gamma r} dr, so that a reference near zero
    # (I2 changes sign) does not inflate the measure.
    scale = -np.expm1(-gamma * t) / gamma
    return abs(value - ref) / scale


@check(
    "oscillator.printed-eq30",
    title="eq. (30) AS PRINTED, (G(lambda_+) + G(lambda_-))/2, differs from the quadrature of "
    "eq. (26) at every sampled point (seed error: the lambda_+ term must be subtracted)",
    source=seed(2, "A.2.1, eq. (30)"),
    kind="numeric",
    tolerance=1e-12,
    expect="fails",
    printed=r"I_2 = \tfrac12\bigl(G(\lambda_+) + G(\lambda_-)\bigr)",
    corrected=(
        r"I_2 = \tfrac12\bigl(G(\lambda_-) - G(\lambda_+)\bigr),\quad G(l) = "
        r"\frac{-\gamma e^{-\gamma t}\cos lt + l\,e^{-\gamma t}\sin lt + \gamma}{\gamma^2 "
        r"+ l^2}"
    ),
    correction="oscillator.corrected-eq30",
)
def _printed_eq30(quick: bool) -> Outcome:
    # The residual is the SMALLEST error over the cases: the printed form fails at every one.
    errors = [
        _eq30_error(_printed_eq30_i2(g, a, w, t), ref2, g, a, t)
        for g, a, w, t, _, ref2 in _eq30_cases(quick)
    ]
    return Outcome(min(errors), f"min over {len(errors)} random cases; max {max(errors):.2f}")


@check(
    "oscillator.corrected-eq30",
    title="corrected eq. (30) I2 = (G(lambda_-) - G(lambda_+))/2 and eq. (29) I1 = "
    "Gauss-Legendre quadrature of eqs. (25)-(26) at the same points",
    source=seed(2, "A.2.1, eqs. (25)-(30)"),
    kind="numeric",
    tolerance=1e-12,
)
def _corrected_eq30(quick: bool) -> Outcome:
    # Round-off of (29)-(30): a few eps times max |G(lambda)| / scale <= 2 (gamma + |lambda|) t
    # <= 100, i.e. <= 1e-13, plus the quadrature's round-off ~ eps; tolerance 1e-12 (the same
    # for the printed form).
    worst = 0.0
    for g, a, w, t, ref1, ref2 in _eq30_cases(quick):
        I1, I2 = osc.damped_sine_integrals(g, a, w, t)
        worst = max(worst, _eq30_error(I1, ref1, g, a, t), _eq30_error(I2, ref2, g, a, t))
    return Outcome(worst, "relative to int_0^t e^{-gamma r} dr")


@functools.cache
def _leggauss(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    return np.polynomial.legendre.leggauss(nodes)  # an 80 x 80 eigenproblem: computed once


def _gauss_legendre_duhamel(omega0, gamma, w, t, *, nodes=80):
    """x_p(t) = int_0^t g12(r) cos(w (t - r)) dr (eq. 21) by Gauss-Legendre quadrature.

    ``g12 = [e^{Ar}]_12`` comes from `propagator` (checked against expm above): this tests the
    convolution form of eqs. (18)-(21), not the propagator again.
    """
    x, wts = _leggauss(nodes)
    out = []
    for tt in np.atleast_1d(t):
        r = 0.5 * tt * (x + 1.0)
        g12 = osc.propagator(omega0, gamma, r)[:, 0, 1]
        out.append(0.5 * tt * np.sum(wts * g12 * np.cos(w * (tt - r))))
    return np.array(out)


def _augmented_expm(omega0, gamma, w, t):
    """x_p(t) from rest under cos(w t) as ``[expm(M t) [0, 0, 1, 0]]_0`` (scipy expm).

    The state ``[x, v, cos(w t), sin(w t)]`` is linear, ``d/dt = M [.]``, with the drive
    generated by a rotation block: an exact reference independent of every closed form here.
    """
    M = np.zeros((4, 4))
    M[:2, :2] = osc.drift_matrix(omega0, gamma)
    M[1, 2] = 1.0
    M[2, 3], M[3, 2] = -w, w
    return np.array([expm(M * tt)[0, 2] for tt in np.atleast_1d(t)])


def _ode_from_rest(omega0, gamma, w, p, q, t_anchor, s):
    """solve_ivp of x'' + 2 gamma x' + omega0^2 x = p cos(w t) + q sin(w t), rest at t_anchor."""

    def rhs(t, z):
        return [
            z[1],
            -(omega0**2) * z[0] - 2 * gamma * z[1] + p * np.cos(w * t) + q * np.sin(w * t),
        ]

    sol = solve_ivp(
        rhs,
        (t_anchor, t_anchor + s[-1]),
        [0.0, 0.0],
        method="DOP853",
        rtol=1e-12,
        atol=1e-14,
        t_eval=t_anchor + s,
    )
    return sol.y.T


@check(
    "oscillator.particular-vs-duhamel",
    title="particular solution of alpha cos(w t) from rest (stable form, eq. (31), critical and "
    "overdamped closed forms) = expm of the drive-augmented system, Gauss-Legendre Duhamel "
    "integral (eq. 21) and solve_ivp",
    source=seed(2, "A.2, eqs. (16)-(35)"),
    kind="numeric",
    tolerance=1e-9,
)
def _particular_vs_duhamel(quick: bool) -> Outcome:
    # Three references: the augmented-system expm (~1e-13, as in propagators-vs-expm); 80
    # Gauss-Legendre nodes on an entire integrand with |complex rate| * t / 2 <= 36, error
    # <= 36^160 / 160! ~ e^-79; DOP853 at rtol 1e-12 accumulating <= 1e-10 over ~10^2 steps.
    # Tolerance 1e-9, set by the ODE solve.
    rng = np.random.default_rng(23)
    t = np.linspace(0.0, 6.0, 7 if quick else 13)
    worst = 0.0
    for _ in range(1 if quick else 8):
        for regime in (*_REGIMES, "near"):
            if regime == "near":  # within 1e-8 of critical, on either side
                omega0 = float(rng.uniform(0.3, 2.0))
                gamma = omega0 * (1.0 + float(rng.uniform(-1e-8, 1e-8)))
            else:
                omega0, gamma = _random_regime(rng, regime)
            w, alpha = float(rng.uniform(0.1, 3.0)), float(rng.uniform(0.5, 2.0))
            duhamel = alpha * _gauss_legendre_duhamel(omega0, gamma, w, t)
            augmented = alpha * _augmented_expm(omega0, gamma, w, t)
            ode = _ode_from_rest(omega0, gamma, w, alpha, 0.0, 0.0, t[1:])[:, 0]
            closed = [osc.particular_solution(omega0, gamma, w, t, alpha=alpha)[:, 0]]
            if regime == "under":
                closed.append(osc.particular_solution_underdamped(omega0, gamma, w, t, alpha=alpha))
            elif regime == "critical":
                closed.append(osc.particular_solution_critical(gamma, w, t, alpha=alpha))
            elif regime == "over":
                closed.append(osc.particular_solution_overdamped(omega0, gamma, w, t, alpha=alpha))
            for x in closed:
                worst = max(
                    worst,
                    relative_error(x, augmented),
                    relative_error(x, duhamel),
                    relative_error(x[1:], ode),
                )
    return Outcome(worst, "t in [0, 6]; regimes under, critical, over, |zeta - 1| <= 1e-8")


@check(
    "oscillator.anchored-response-vs-ode",
    title="driven key from rest at t_i (eq. 70; E, F of eqs. (66)-(67), critical E, F, corrected "
    "U, V; stable form) = solve_ivp of the ODE driven by p cos + q sin (eq. 63)",
    source=seed(2, "A.5.2-A.5.4, eqs. (63)-(70)"),
    kind="numeric",
    tolerance=1e-9,
)
def _anchored_vs_ode(quick: bool) -> Outcome:
    # DOP853 at rtol 1e-12, atol 1e-14 over <= 10^2 steps: <= 1e-10 relative; tolerance 1e-9.
    rng = np.random.default_rng(24)
    s = np.linspace(0.0, 5.0, 11)
    worst = 0.0
    for _ in range(1 if quick else 8):
        for regime in _REGIMES:
            omega0, gamma = _random_regime(rng, regime)
            w, p, q = rng.uniform(0.1, 3.0), rng.normal(), rng.normal()
            t_i = float(rng.uniform(0.0, 4.0))
            ode = _ode_from_rest(omega0, gamma, w, p, q, t_i, s[1:])
            stable = osc.anchored_response(omega0, gamma, w, p, q, t_i, s)
            worst = max(worst, relative_error(stable[1:], ode))
            # the printed coefficient forms, evaluated as the seed writes them
            x_ss = osc.steady_state(omega0, gamma, w, p, q, t_i + s)[:, 0]
            x0, v0 = osc.steady_state(omega0, gamma, w, p, q, t_i)
            if regime == "under":
                E, F = osc.underdamped_transient_coefficients(omega0, gamma, x0, v0)
                wd = np.sqrt(omega0**2 - gamma**2)
                x_tr = np.exp(-gamma * s) * (E * np.cos(wd * s) + F * np.sin(wd * s))
            elif regime == "critical":
                E, F = osc.critical_transient_coefficients(gamma, x0, v0)
                x_tr = np.exp(-gamma * s) * (E + F * s)
            else:
                U, V = osc.overdamped_transient_coefficients(omega0, gamma, x0, v0)
                sigma = np.sqrt(gamma**2 - omega0**2)
                x_tr = U * np.exp(-(gamma - sigma) * s) + V * np.exp(-(gamma + sigma) * s)
            worst = max(worst, relative_error((x_ss + x_tr)[1:], ode[:, 0]))
    return Outcome(worst, "t_i in [0, 4], s in [0, 5], random p, q")


@check(
    "oscillator.steady-state-vs-linear-solve",
    title="steady state (C, D), |H| and arg H = the complex solve (i w I - A) X = [0, p - i q]",
    source=seed(2, "A.3, eqs. (42)-(44); App. E |H_i(omega)|"),
    kind="numeric",
    tolerance=1e-12,
)
def _steady_vs_solve(quick: bool) -> Outcome:
    # cond(i w I - A) <= (||A|| + w)^2 / (2 gamma w) ~ 1e3 for gamma >= 0.05, w >= 0.1, so the
    # reference solve is good to ~1e3 eps ~ 2e-13; tolerance 1e-12.
    rng = np.random.default_rng(25)
    worst = 0.0
    for _ in range(20 if quick else 200):
        omega0, gamma = rng.uniform(0.2, 3.0), rng.uniform(0.05, 4.0)
        w, p, q = rng.uniform(0.1, 4.0), rng.normal(), rng.normal()
        M = 1j * w * np.eye(2) - osc.drift_matrix(omega0, gamma)
        X = np.linalg.solve(M, np.array([0.0, p - 1j * q]))[0]
        H = np.linalg.solve(M, np.array([0.0, 1.0]))[0]
        C, D = osc.steady_state_coefficients(omega0, gamma, w, p, q)
        worst = max(
            worst,
            abs(complex(C, -D) - X) / abs(X),
            abs(osc.frequency_response(omega0, gamma, w) - H) / abs(H),
            abs(osc.response_amplitude(omega0, gamma, w) - abs(H)) / abs(H),
            abs(osc.response_phase(omega0, gamma, w) - np.angle(H)),
        )
    return Outcome(worst, "gamma in [0.05, 4], w in [0.1, 4]")


@check(
    "oscillator.covariance-vs-lyapunov",
    title="stationary covariance = scipy solve_continuous_lyapunov; P - e^{At} P e^{A^T t} = "
    "Van Loan V_F(t) (dle.forward_covariance) in each regime",
    source=seed(2, "eq. (7) with velocity noise; seed 000 A.1"),
    kind="numeric",
    tolerance=1e-10,
)
def _covariance_vs_lyapunov(quick: bool) -> Outcome:
    # Bartels-Stewart is backward stable: ~ eps cond, cond ~ 1/(gamma omega^2) <= 1e3 here, so
    # ~1e-13. P - E P E^T has an absolute error ~ eps |P|, and |P| / |V_F(t)| <= 640 over
    # omega in [0.2, 3], gamma in [0.05, 12], t >= 0.2: ~1.5e-13; Van Loan is good to ~1e-14.
    # Tolerance 1e-10, as in dle.closed-form-vs-van-loan.
    rng = np.random.default_rng(26)
    t = np.array([0.2, 1.0, 3.0, 10.0])
    worst = 0.0
    for _ in range(2 if quick else 20):
        for regime in _REGIMES:
            omega, gamma = _random_regime(rng, regime)
            gamma = max(gamma, 0.05)
            s = float(rng.uniform(0.1, 2.0))
            A = osc.drift_matrix(omega, gamma)
            Q = np.diag([0.0, s**2])
            P = osc.stationary_covariance(omega, gamma, s)
            worst = max(
                worst,
                relative_error(P, solve_continuous_lyapunov(A, -Q)),
                relative_error(
                    osc.velocity_noise_covariance(omega, gamma, s, t),
                    dle.forward_covariance(A, Q, t),
                ),
            )
    return Outcome(worst, "t in {0.2, 1, 3, 10}")


# --- statistical ------------------------------------------------------------------------------


def _preset_oscillator(variant: str) -> tuple[LinearSDE, np.ndarray, float, float, float]:
    scenario = presets.get("oscillator").scenario(variant)
    sde = scenario.system
    omega = float(np.sqrt(-sde.A[1, 0]))
    gamma = float(-sde.A[1, 1] / 2.0)
    noise = float(sde.G[1, 0])
    return sde, np.asarray(scenario.initial.mean), omega, gamma, noise


@check(
    "oscillator.mc-moments",
    title="Monte Carlo (exact sampler, presets under/critical/over): x(t) from a fixed start ~ "
    "N(e^{At} x0, P - e^{At} P e^{A^T t}) at four lags",
    source=seed(2, "eq. (7), A.1 (three damping regimes) with velocity noise"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _mc_moments(quick: bool) -> Outcome:
    # 3 regimes x 4 lags x 5 scores (2 mean, 3 covariance): under the hypothesis max |z| > 5
    # has probability ~ 60 * 5.7e-7 ~ 3e-5.
    paths = 4000 if quick else 40_000
    h, lags = 0.05, (5, 20, 40, 80)
    worst = 0.0
    for k, variant in enumerate(_REGIMES):
        sde, x0, omega, gamma, noise = _preset_oscillator(variant)
        grid = TimeGrid.uniform(h, max(lags))
        x = simulate_exact(sde, np.tile(x0, (paths, 1)), BrownianPath(30 + k, grid, paths, 2))
        for j in lags:
            t = j * h
            mean = osc.propagator(omega, gamma, t) @ x0
            cov = osc.velocity_noise_covariance(omega, gamma, noise, t)
            worst = max(worst, float(np.max(np.abs(whitened_scores(x[:, j] - mean, cov)))))
    return Outcome(worst, f"{paths} paths per regime, lags {[j * h for j in lags]}; max |z|")


@check(
    "oscillator.mc-stationary",
    title="Monte Carlo: started from N(0, P), P = diag(s^2/(4 gamma w^2), s^2/(4 gamma)), the "
    "noisy oscillator keeps the law N(0, P) (presets under/critical/over)",
    source=seed(2, "eq. (7) with velocity noise"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _mc_stationary(quick: bool) -> Outcome:
    # 3 regimes x 2 times x 5 scores = 30 z-scores; P(max |z| > 5) ~ 2e-5 under the hypothesis.
    paths = 4000 if quick else 40_000
    h, n = 0.1, 30
    worst = 0.0
    for k, variant in enumerate(_REGIMES):
        sde, _, omega, gamma, noise = _preset_oscillator(variant)
        P = osc.stationary_covariance(omega, gamma, noise)
        rng = np.random.default_rng(40 + k)
        x0 = rng.standard_normal((paths, 2)) * np.sqrt(np.diag(P))
        x = simulate_exact(sde, x0, BrownianPath(50 + k, TimeGrid.uniform(h, n), paths, 2))
        for j in (10, n):
            worst = max(worst, float(np.max(np.abs(whitened_scores(x[:, j], P)))))
    return Outcome(worst, f"{paths} paths per regime, t = 1 and 3; max |z|")


# --- A.5.1: the exponential-trigonometric kernels (52)-(61) and (76) as printed (issue 17) -------

_G, _L, _DELTA, _S = sp.symbols("gamma lambda Delta s", real=True)


def _printed_c(g, lam, delta):
    """(52) ``C_gamma(Delta, lambda)`` as printed (SymPy or numpy arguments)."""
    exp, cos, sin = (
        (sp.exp, sp.cos, sp.sin) if isinstance(g, sp.Basic) else (np.exp, np.cos, np.sin)
    )
    return (exp(-g * delta) * (-g * cos(lam * delta) + lam * sin(lam * delta)) + g) / (
        g**2 + lam**2
    )


def _printed_s(g, lam, delta):
    """(53) ``S_gamma(Delta, lambda)`` as printed."""
    exp, cos, sin = (
        (sp.exp, sp.cos, sp.sin) if isinstance(g, sp.Basic) else (np.exp, np.cos, np.sin)
    )
    return (exp(-g * delta) * (-g * sin(lam * delta) - lam * cos(lam * delta)) + lam) / (
        g**2 + lam**2
    )


def printed_products(g, a, b, delta) -> dict[str, float]:
    """(54)-(57): ``int_0^Delta e^{-gamma s} f(a s) h(b s) ds`` for (f, h) = (cos, cos), (sin,
    sin), (sin, cos), (cos, sin), from (52)-(53) as printed; (58)-(61) at ``gamma = 0``."""
    c_minus, c_plus = _printed_c(g, a - b, delta), _printed_c(g, a + b, delta)
    s_minus, s_plus = _printed_s(g, a - b, delta), _printed_s(g, a + b, delta)
    return {
        "cc": (c_minus + c_plus) / 2,
        "ss": (c_minus - c_plus) / 2,
        "sc": (s_plus + s_minus) / 2,
        "cs": (s_plus - s_minus) / 2,
    }


def printed_undamped(a, b, delta) -> dict[str, float]:
    """(58)-(61) as printed (``gamma = 0``, ``a != b``)."""
    p, m = a + b, a - b
    return {
        "cc": np.sin(m * delta) / (2 * m) + np.sin(p * delta) / (2 * p),
        "ss": np.sin(m * delta) / (2 * m) - np.sin(p * delta) / (2 * p),
        "sc": (1 - np.cos(p * delta)) / (2 * p) + (1 - np.cos(m * delta)) / (2 * m),
        "cs": (1 - np.cos(p * delta)) / (2 * p) + (1 - np.cos(-m * delta)) / (2 * -m),
    }


def printed_equal_frequencies(a, delta) -> dict[str, float]:
    """The printed ``a = b`` limits of (58)-(61)."""
    return {
        "cc": delta / 2 + np.sin(2 * a * delta) / (4 * a),
        "ss": delta / 2 - np.sin(2 * a * delta) / (4 * a),
        "sc": (1 - np.cos(2 * a * delta)) / (4 * a),
        "cs": (1 - np.cos(2 * a * delta)) / (4 * a),
    }


@functools.cache
def _s_weighted():
    """(76)'s s-weighted integrals as ``-d/dgamma`` of (52)-(53), numpy functions of
    ``(gamma, lambda, Delta)``."""
    args = (_G, _L, _DELTA)
    return tuple(
        sp.lambdify(args, -sp.diff(f(*args), _G), "numpy") for f in (_printed_c, _printed_s)
    )


def _quadrature(power: int, gamma, f, a, h, b, delta) -> float:
    """``int_0^Delta s^power e^{-gamma s} f(a s) h(b s) ds`` by adaptive quadrature."""
    from scipy.integrate import quad

    def integrand(s):
        return s**power * np.exp(-gamma * s) * f(a * s) * h(b * s)

    return quad(integrand, 0.0, delta, epsabs=1e-13, epsrel=1e-12, limit=400)[0]


TRIG = {"c": np.cos, "s": np.sin}


@check(
    "oscillator.kernels-52-53-proved",
    title="A.5.1 (52)-(53): d/dDelta of the printed C_gamma, S_gamma is e^{-gamma Delta} cos, sin "
    "(lambda Delta) and both vanish at Delta = 0; the a = b limits of (58)-(61) as printed",
    source=seed(2, "A.5.1, eqs. (52)-(61)"),
    kind="symbolic",
    tolerance=0.0,
)
def _kernels_proved(quick: bool) -> float:
    c, s = _printed_c(_G, _L, _DELTA), _printed_s(_G, _L, _DELTA)
    a, b = sp.symbols("a b", positive=True)
    p, m = a + b, a - b
    undamped = {
        "cc": sp.sin(m * _DELTA) / (2 * m) + sp.sin(p * _DELTA) / (2 * p),
        "ss": sp.sin(m * _DELTA) / (2 * m) - sp.sin(p * _DELTA) / (2 * p),
        "sc": (1 - sp.cos(p * _DELTA)) / (2 * p) + (1 - sp.cos(m * _DELTA)) / (2 * m),
    }
    limits = {
        "cc": _DELTA / 2 + sp.sin(2 * a * _DELTA) / (4 * a),
        "ss": _DELTA / 2 - sp.sin(2 * a * _DELTA) / (4 * a),
        "sc": (1 - sp.cos(2 * a * _DELTA)) / (4 * a),
    }
    residuals = [
        sp.diff(c, _DELTA) - sp.exp(-_G * _DELTA) * sp.cos(_L * _DELTA),
        sp.diff(s, _DELTA) - sp.exp(-_G * _DELTA) * sp.sin(_L * _DELTA),
        c.subs(_DELTA, 0),
        s.subs(_DELTA, 0),
        *(sp.limit(undamped[k], b, a) - limits[k] for k in undamped),
    ]
    return max(symbolic_residual(r) for r in residuals)


@check(
    "oscillator.kernels-52-61-vs-quadrature",
    title="A.5.1 (52)-(61) as printed (damped products, undamped a != b, a = b limits) and (76)'s "
    "s-weighted integrals as -d/dgamma of (52)-(53), against adaptive quadrature",
    source=seed(2, "A.5.1, eqs. (52)-(61); A.5.4, eq. (76)"),
    kind="numeric",
    tolerance=1e-9,
)
def _kernels_vs_quadrature(quick: bool) -> Outcome:
    # quad is asked for 1e-12 relative on integrals of size >= ~1e-2 over at most ~60
    # oscillations; the printed forms lose at most ~1e-12 to cancellation when a - b or lambda
    # is ~0.05 (the smallest gaps drawn): 1e-9 leaves three orders of headroom.
    rng = np.random.default_rng(93)
    worst, count = 0.0, 0
    for _ in range(6 if quick else 40):
        g, delta = rng.uniform(0.0, 2.0), rng.uniform(0.2, 8.0)
        a = rng.uniform(0.1, 5.0)
        b = a + rng.choice([-1, 1]) * rng.uniform(0.05, 3.0)
        b = abs(b) if abs(b) > 0.05 else b + 0.1
        forms = {
            "damped": (g, printed_products(g, a, b, delta)),
            "undamped": (0.0, printed_undamped(a, b, delta)),
            "equal": (0.0, printed_equal_frequencies(a, delta)),
        }
        for name, (gam, values) in forms.items():
            freq_b = a if name == "equal" else b
            for key, value in values.items():
                ref = _quadrature(0, gam, TRIG[key[0]], a, TRIG[key[1]], freq_b, delta)
                worst = max(worst, abs(value - ref) / max(abs(ref), 1e-2))
                count += 1
        c_weighted, s_weighted = _s_weighted()
        lam = rng.uniform(0.05, 5.0)
        for fn, trig in ((c_weighted, np.cos), (s_weighted, np.sin)):
            ref = _quadrature(1, g, trig, lam, np.cos, 0.0, delta)
            worst = max(worst, abs(float(fn(g, lam, delta)) - ref) / max(abs(ref), 1e-2))
            count += 1
    return Outcome(worst, f"{count} kernel values")

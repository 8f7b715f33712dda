"""Checks of the separable precision approximation and its three stated properties, seed 000 B.1.

Notation of the checks: per mode, ``a = -2 Re(lam) > 0``, ``c2 = |lam_C|^2``, ``q = lam_Q``,
``rho = lam_R``, ``lam_eff = c2 q / a``, ``R = rho / lam_eff = 1 + lam_r > 0`` and the causal
lag ``tau = t_i - t_j >= 0``. The exact kernel is ``f(tau) = 1 / (lam_eff (1 + (R - 1)
e^{-a tau}))`` and B.1's approximation ``g(tau) = (1 - (1 - 1/R) e^{-a tau / R}) / lam_eff``.
"""

from __future__ import annotations

import functools

import numpy as np
import sympy as sp
from scipy.linalg import expm

from estimators.closed_forms import dle, separable
from sde_sim import BrownianPath, LinearMeasurement, LinearSDE, TimeGrid, simulate_exact
from sde_sim.models import covariance_from_eigen, real_from_eigen
from verify.registry import Outcome, check, seed
from verify.tools import random_eigensystem, relative_error, symbolic_residual

SIGMA_LEVEL = 5.0


def _kernels():
    """SymPy exact kernel f, B.1's approximation g (first printed form) and their symbols."""
    a, q, c2, rho, tau = sp.symbols("a q c2 rho tau", positive=True)
    lam_eff = c2 * q / a
    lam_r = rho / lam_eff - 1
    f = 1 / (lam_eff * (1 + lam_r * sp.exp(-a * tau)))
    g = (1 - lam_r / (1 + lam_r) * sp.exp(-a * tau / (1 + lam_r))) / lam_eff
    return f, g, (a, q, c2, rho, tau, lam_eff, lam_r)


# --- symbolic ---------------------------------------------------------------------------------


@check(
    "separable.kernel-normal-form",
    title="|c|^2 q (1 - e^{-a tau})/a + rho e^{-a tau} = lam_eff (1 + lam_r e^{-a tau}); its "
    "first term is A.3's sign(dt) q phi(lam, dt) at dt = -tau",
    source=seed(0, "B.1 (precision kernel), A.3"),
    kind="symbolic",
    tolerance=0.0,
)
def _kernel_normal_form(quick: bool) -> float:
    f, _, (a, q, c2, rho, tau, lam_eff, lam_r) = _kernels()
    variance = c2 * q * (1 - sp.exp(-a * tau)) / a + rho * sp.exp(-a * tau)
    alpha = -a / 2  # Re(lambda)
    dt = -tau  # the seed's dt = t_j - t_i of a causal pair
    a3_term = sp.sign(dt) * q * (sp.exp(-2 * alpha * dt) - 1) / (-2 * alpha)
    return max(
        symbolic_residual(variance - lam_eff * (1 + lam_r * sp.exp(-a * tau))),
        symbolic_residual(1 / variance - f),
        symbolic_residual(a3_term - q * (1 - sp.exp(-a * tau)) / a),
    )


@check(
    "separable.value-slope-match",
    title="(1 + A e^{Bx})^-1 ~ 1 - C e^{-Dx} with C = A/(1+A), D = -B/(1+A) matches value and "
    "slope at 0; B.1's two printed forms of the approximation agree",
    source=seed(0, "B.1 (separable approximation)"),
    kind="symbolic",
    tolerance=0.0,
)
def _value_slope_match(quick: bool) -> float:
    A, B = sp.symbols("A B", real=True)
    x = sp.symbols("x", real=True)
    exact = 1 / (1 + A * sp.exp(B * x))
    approx = 1 - A / (1 + A) * sp.exp(B * x / (1 + A))
    f, g, (a, q, c2, rho, tau, lam_eff, _) = _kernels()
    second_form = (1 - (1 - lam_eff / rho) * sp.exp(-c2 * q * tau / rho)) / lam_eff
    return max(
        symbolic_residual((exact - approx).subs(x, 0)),
        symbolic_residual(sp.diff(exact - approx, x).subs(x, 0)),
        symbolic_residual(g - second_form),
        symbolic_residual((f - g).subs(tau, 0)),
        symbolic_residual(sp.diff(f - g, tau).subs(tau, 0)),
    )


@check(
    "separable.property1-boundary-values",
    title="property 1: g(0) = f(0) = 1/rho and g, f -> 1/lam_eff as tau -> inf (Re(lam) < 0)",
    source=seed(0, "B.1 (property 1)"),
    kind="symbolic",
    tolerance=0.0,
)
def _boundary_values(quick: bool) -> float:
    f, g, (a, q, c2, rho, tau, lam_eff, _) = _kernels()
    return max(
        symbolic_residual(f.subs(tau, 0) - 1 / rho),
        symbolic_residual(g.subs(tau, 0) - 1 / rho),
        symbolic_residual(sp.limit(f, tau, sp.oo) - 1 / lam_eff),
        symbolic_residual(sp.limit(g, tau, sp.oo) - 1 / lam_eff),
    )


@check(
    "separable.property2-monotone-ordering",
    title="property 2: f'(tau) / g'(tau) = R^2 e^{-a tau (1 - 1/R)} / ((1 - u) + R u)^2 > 0 "
    "(u = e^{-a tau}): f and g rise or fall together, so lags keep their order",
    source=seed(0, "B.1 (property 2)"),
    kind="symbolic",
    tolerance=0.0,
)
def _monotone(quick: bool) -> float:
    # Every factor of the right-hand side is positive for R > 0, 0 < u <= 1, so the two
    # derivatives never have opposite signs (both vanish only when R = 1, a constant kernel).
    f, g, (a, q, c2, rho, tau, lam_eff, _) = _kernels()
    R = rho / lam_eff
    u = sp.exp(-a * tau)
    ratio = R**2 * sp.exp(-a * tau * (1 - 1 / R)) / ((1 - u) + R * u) ** 2
    return symbolic_residual(sp.diff(f, tau) / sp.diff(g, tau) - ratio)


@check(
    "separable.property3-below-true-kernel",
    title="property 3: lam_eff (f - g) = -s u^p h(u) / (p + s u), h(u) = u^s - 1 - s(u - 1), "
    "p = 1/R, s = 1 - p; h(1) = 0, h' = s(u^{s-1} - 1), so s h <= 0 and g <= f",
    source=seed(0, "B.1 (property 3)"),
    kind="symbolic",
    tolerance=0.0,
)
def _below(quick: bool) -> float:
    # The sign argument the identities prove: for 0 < u < 1, u^{s-1} > 1 (s - 1 < 0 as p > 0),
    # so h' has the sign of s and h rises (s > 0) or falls (s < 0) to h(1) = 0: s h(u) <= 0.
    # With p + s u = p (1 - u) + u > 0, f - g >= 0 (Bernoulli's inequality), equal only at
    # tau = 0 or when R = 1.
    f, g, (a, q, c2, rho, tau, lam_eff, _) = _kernels()
    p = lam_eff / rho
    s = 1 - p
    u = sp.exp(-a * tau)

    def h(v):
        return v**s - 1 - s * (v - 1)

    U, P = sp.symbols("u p", positive=True)
    S = 1 - P
    H = U**S - 1 - S * (U - 1)
    return max(
        symbolic_residual(lam_eff * (f - g) + s * u**p * h(u) / (p + s * u)),
        symbolic_residual(H.subs(U, 1)),
        symbolic_residual(sp.diff(H, U) - S * (U ** (S - 1) - 1)),
        symbolic_residual((p + s * u) - (p * (1 - u) + u)),
    )


@check(
    "separable.factorization",
    title="c + f_i g_j = g(t_i - t_j) with c = 1/lam_eff, f_i = -c (1 - 1/R) e^{-D(t_i - t0)}, "
    "g_j = e^{D(t_j - t0)}, for any reference time t0",
    source=seed(0, "B.1 (P ~ c[k] + f[k,i] g[k,j])"),
    kind="symbolic",
    tolerance=0.0,
)
def _factorization(quick: bool) -> float:
    _, g, (a, q, c2, rho, tau, lam_eff, _) = _kernels()
    t_i, t_j, t0 = sp.symbols("t_i t_j t0", real=True)
    D = c2 * q / rho
    c = 1 / lam_eff
    f_i = -c * (1 - lam_eff / rho) * sp.exp(-D * (t_i - t0))
    g_j = sp.exp(D * (t_j - t0))
    return symbolic_residual(c + f_i * g_j - g.subs(tau, t_i - t_j))


# --- numeric ----------------------------------------------------------------------------------


def _random_modes(rng: np.random.Generator, d: int, *, phase=(0.3, 1.2)):
    """Eigen-data of a real (A, C, Q, R) sharing the eigenbasis S: conjugate pairs carry
    conjugate gains c and equal variances q, rho (so C, Q, R are real)."""
    lam, S = random_eigensystem(rng, d, decay=(0.1, 1.0))
    q, rho, gains = np.empty(d), np.empty(d), np.empty(d, complex)
    for k in range(0, d - d % 2, 2):
        q[k : k + 2] = rng.uniform(0.2, 2.0)
        rho[k : k + 2] = rng.uniform(0.05, 2.0)
        gain = rng.uniform(0.5, 1.5) * np.exp(1j * rng.uniform(*phase))
        gains[k : k + 2] = gain, np.conj(gain)
    if d % 2:
        q[-1], rho[-1], gains[-1] = rng.uniform(0.2, 2.0), rng.uniform(0.05, 2.0), -0.8
    return lam, S, q, rho, gains


def _reference_mode_precision(lam, S, q, rho, gains, dt):
    """diag and off-diagonal size of ``S^H inv(V^C(dt)) S`` from Van Loan and expm (dense)."""
    A = real_from_eigen(lam, S)
    C = real_from_eigen(gains, S, name="C")
    Q = covariance_from_eigen(S, q)
    R = covariance_from_eigen(S, rho, name="R")
    V = dle.propagated_covariance(A, Q, dt)  # Van Loan, both signs of dt
    out = []
    for Vk, dtk in zip(V, dt, strict=True):
        Phi = C @ expm(-A * dtk) @ np.linalg.inv(C)
        VC = C @ Vk @ C.T + Phi @ R @ Phi.T
        out.append(S.conj().T @ np.linalg.inv(VC) @ S)
    return np.array(out)


# A.3's eigenbasis precision against a dense reference: Van Loan (relative round-off ~1e-14,
# see dle's checks), expm, and an inverse conditioned like cond(S)^2 * max v / min v
# (<= 1e3 * 60 here, |Re lam| <= 1, |dt| <= 2): ~1e-10 at worst; tolerance 1e-9.
_TENSOR_TOL = 1e-9


@functools.cache
def _tensor_cases(quick: bool) -> tuple:
    """Random cases with their dense reference ``S^H inv(V^C) S``, shared by two checks."""
    rng = np.random.default_rng(61)
    cases = []
    for _ in range(3 if quick else 30):
        d = int(rng.integers(2, 6))
        lam, S, q, rho, gains = _random_modes(rng, d)
        dt = rng.uniform(0.0, 2.0, size=5) * np.array([-1, -1, -1, 1, 1])
        ref = _reference_mode_precision(lam, S, q, rho, gains, dt)
        cases.append((lam, q, rho, gains, dt, ref))
    return tuple(cases)


@check(
    "separable.corrected-tensor-vs-van-loan",
    title="P[i,j,k] = 1/(|c_k|^2 lam_V,k(dt) + e^{-2 Re(lam_k) dt} rho_k) = diag of "
    "S^H inv(C V C^T + Phi R Phi^T) S (Van Loan, expm; complex gains c, both signs of dt)",
    source=seed(0, "A.3, B.1 (precision tensor with |lambda_C|^2)"),
    kind="numeric",
    tolerance=_TENSOR_TOL,
)
def _tensor_vs_van_loan(quick: bool) -> Outcome:
    worst = 0.0
    for lam, q, rho, gains, dt, ref in _tensor_cases(quick):
        closed = separable.mode_precision(lam, q, rho, dt, output_gains=gains)
        diag = np.einsum("nkk->nk", ref)
        off = ref - np.einsum("nk,kl->nkl", diag, np.eye(lam.size))
        off_size = float(np.max(np.abs(off))) / float(np.max(np.abs(diag)))  # should be 0
        worst = max(worst, relative_error(closed, diag), off_size)
    return Outcome(worst, "random d in 2..5, dt in [-2, 2]; includes |off-diagonal| of S^H P S")


@check(
    "separable.printed-tensor-lambda-c-squared",
    title="printed (3.1, B.1, and 3.3's Toeplitz kernel K^V_qk): the precision tensor with "
    "lambda_C^2 instead of |lambda_C|^2 (A.3) is complex and wrong for complex output gains",
    source=seed(0, "3.1, B.1 (P^C[k,i,j]) and 3.3 (K^V_qk[tau]), each with lambda_C,k^2"),
    kind="numeric",
    tolerance=_TENSOR_TOL,
    expect="fails",
    printed=(
        r"P^C[k,i,j] = \frac{1}{\lambda_{C,k}^2\,\Lambda_{V,k}(\Delta t) + "
        r"e^{-2\operatorname{Re}\lambda_k\Delta t}\,\Lambda_{R,k}}"
    ),
    corrected=(
        r"P^C[k,i,j] = \frac{1}{|\lambda_{C,k}|^2\,\Lambda_{V,k}(\Delta t) + "
        r"e^{-2\operatorname{Re}\lambda_k\Delta t}\,\Lambda_{R,k}}"
    ),
    correction="separable.corrected-tensor-vs-van-loan",
)
def _printed_lambda_c_squared(quick: bool) -> Outcome:
    # C = S diag(c) S^-1 is real with complex conjugate-pair gains c; then C V C^T contributes
    # |c|^2 lam_V, not c^2 lam_V (A.3's |Lambda_C|^2).
    worst = np.inf
    for lam, q, rho, gains, dt, full_ref in _tensor_cases(quick):
        ref = np.einsum("nkk->nk", full_ref)
        process = dle.eigen_mode_variances(lam, q, dt)
        printed = 1.0 / (gains**2 * process + np.exp(-2.0 * lam.real * dt[:, None]) * rho)
        worst = min(worst, relative_error(printed, ref))
    return Outcome(worst, "smallest relative error over the random cases")


def _grid_cases(quick: bool):
    rng = np.random.default_rng(62)
    ratios = [1.0, 0.05, 20.0] + list(
        np.exp(rng.uniform(np.log(0.05), np.log(20), 5 if quick else 60))
    )
    for R in ratios:  # R = rho / lam_eff: R < 1 diffusive (precision falls), R > 1 integrative
        a = rng.uniform(0.1, 2.0)
        c2q = rng.uniform(0.1, 3.0)  # |c|^2 q
        lam = np.array([-a / 2 + 1j * rng.uniform(-2, 2)])
        rho = R * c2q / a
        yield lam, np.array([c2q]), np.array([rho]), a, R


# The exact f (from A.3's variance) and g (expm1 form) are each a few correctly rounded
# operations on O(1) quantities: relative error <= ~6 u ~ 1.3e-15 each, so the measured gaps
# (value at 0, value at the far end, sign of steps, g - f) are round-off when the property
# holds; 1e-13 leaves a factor ~40 for the conditioning of lam_eff = c2 q / a.
@check(
    "separable.properties-on-grid",
    title="the three B.1 properties on dense lag grids, both regimes (R in [0.05, 20]): "
    "g(0) = f(0), g(inf) = f(inf), steps of g have the sign of steps of f, g <= f",
    source=seed(0, "B.1 (properties 1-3)"),
    kind="numeric",
    tolerance=1e-13,
)
def _properties_on_grid(quick: bool) -> Outcome:
    worst = {"value at 0": 0.0, "value at inf": 0.0, "monotone": 0.0, "below": 0.0}
    largest_gap = 0.0
    for lam, c2q, rho, a, R in _grid_cases(quick):
        slowest = min(a, a / R)  # decay rates of f and g
        tau = np.concatenate([np.linspace(0.0, 30.0 / slowest, 3001), [80.0 / slowest]])
        f = separable.mode_precision(lam, c2q, rho, -tau)[:, 0]
        g = separable.separable_precision(lam, c2q, rho, tau)[:, 0]
        floor = a / c2q[0]
        worst["value at 0"] = max(worst["value at 0"], abs(g[0] - f[0]) / f[0])
        worst["value at inf"] = max(worst["value at inf"], abs(g[-1] - f[-1]) / floor)
        direction = np.sign(R - 1.0)  # f rises with the lag when R > 1, falls when R < 1
        for kernel in (f, g):
            violation = np.max(np.maximum(0.0, -direction * np.diff(kernel[:-1])), initial=0.0)
            worst["monotone"] = max(worst["monotone"], violation / floor)
        worst["below"] = max(worst["below"], float(np.max((g - f) / f)))
        largest_gap = max(largest_gap, float(np.max((f - g) / f)))
    detail = ", ".join(f"{k} {v:.1e}" for k, v in worst.items())
    return Outcome(max(worst.values()), f"{detail}; largest (f - g)/f {largest_gap:.3f}")


@check(
    "separable.small-lag-precision",
    title="g(tau) in expm1 form keeps full precision at tiny lags when lam_eff << rho "
    "(50-digit reference); the printed 1 - (1 - lam_eff/rho) e^{-D tau} loses digits",
    source=seed(0, "B.1"),
    kind="numeric",
    tolerance=1e-14,
)
def _small_lag(quick: bool) -> Outcome:
    import mpmath

    mpmath.mp.dps = 50
    worst, naive_worst = 0.0, 0.0
    lam = np.array([-0.5 + 1j])
    for ratio in (1e-3, 1e-6, 1e-9):  # lam_eff / rho
        c2q = np.array([1.0])
        lam_eff = 1.0  # c2 q / a with c2 q = 1, a = -2 Re(lam) = 1
        rho = np.array([lam_eff / ratio])
        for tau in (1e-12, 1e-8, 1e-4, 1.0):
            mf = mpmath.mpf
            D = mf(1) / mf(rho[0])
            ref = (1 - (1 - mf(lam_eff) / mf(rho[0])) * mpmath.exp(-D * mf(tau))) / mf(lam_eff)
            value = separable.separable_precision(lam, c2q, rho, tau)[0]
            worst = max(worst, float(abs(mf(value) - ref) / ref))
            naive = (1 - (1 - lam_eff / rho[0]) * np.exp(-tau / rho[0])) / lam_eff
            naive_worst = max(naive_worst, float(abs(mf(naive) - ref) / ref))
    return Outcome(worst, f"naive form's relative error: {naive_worst:.1e}")


def _factor_case(rng: np.random.Generator, T: int, d: int):
    lam, _, q, rho, gains = _random_modes(rng, d)
    rho = rho * np.exp(rng.uniform(-1.5, 1.5, size=d))  # R spans both regimes
    params = separable.separable_parameters(lam, q, rho, output_gains=gains)
    span = 30.0 / float(params.rate.max())  # exponents up to +-15
    t = np.sort(rng.uniform(0.0, span, size=T))
    return lam, q, rho, gains, t


# c + f_i g_j: each exponential carries relative error <= u |D (t - t0)| <= 15 u, the product
# ~35 u; the sum c + f g = c (1 - amp e^{-x}) amplifies it by at most (1 + amp)/(1 - amp)
# <= 2 R ~ 40 for R <= 20: ~3e-13; tolerance 1e-12.
@check(
    "separable.factors-vs-kernel",
    title="c[k] + f[i,k] g[j,k] from separable_factors = g_k(t_i - t_j) on random irregular "
    "times (causal pairs), factor exponents up to 15",
    source=seed(0, "B.1 (separable form)"),
    kind="numeric",
    tolerance=1e-12,
)
def _factors_vs_kernel(quick: bool) -> float:
    rng = np.random.default_rng(63)
    worst = 0.0
    for _ in range(3 if quick else 30):
        lam, q, rho, gains, t = _factor_case(rng, 40, int(rng.integers(2, 6)))
        c, f, g = separable.separable_factors(lam, q, rho, t, output_gains=gains)
        product = c + f[:, None, :] * g[None, :, :]
        i, j = np.tril_indices(t.size)
        kernel = separable.separable_precision(lam, q, rho, t[i] - t[j], output_gains=gains)
        worst = max(worst, float(np.max(np.abs(product[i, j] - kernel) / kernel)))
    return worst


@check(
    "separable.matrix-forms-vs-tensor",
    title="B.1's matrix forms: D by (T, d) products = sum_k P~ |Phi|^2 |Zq^ - Zk^|^2, and "
    "Phi_v U / N = the normalised causal tensor sum, against explicit (T, T, d) tensors",
    source=seed(0, "B.1 (D, N, U); 3.5 (factorised residuals)"),
    kind="numeric",
    tolerance=1e-12,
)
def _matrix_forms(quick: bool) -> Outcome:
    # Same round-off budget as the factors (<= 3e-13 per kernel entry); the sums over k and j
    # of positive terms do not amplify it, and the D expansion |a|^2 + |b|^2 - 2 Re(a* b) of
    # random (not nearly equal) a, b cancels by at most a factor ~10 at the worst entry.
    rng = np.random.default_rng(64)
    worst_d, worst_z = 0.0, 0.0
    for _ in range(2 if quick else 20):
        T, d = 12, int(rng.integers(2, 5))
        lam, q, rho, gains, t = _factor_case(rng, T, d)
        c, f, g = separable.separable_factors(lam, q, rho, t, output_gains=gains)
        P = separable.separable_precision(
            lam, q, rho, np.abs(t[:, None] - t[None, :]), output_gains=gains
        )  # (T, T, d); only causal pairs (j <= i) are compared

        def crandn(*shape):
            return rng.normal(size=shape) + 1j * rng.normal(size=shape)

        phi, zq, zk, phi_v, zv = (crandn(T, d) for _ in range(5))
        D = separable.separable_distance(c, f, g, phi, zq, zk)
        tensor = np.abs(phi[:, None, :]) ** 2 * np.abs(zq[:, None, :] - zk[None, :, :]) ** 2
        D_ref = np.sum(P * tensor, axis=-1)
        causal = np.tril(np.ones((T, T), bool))
        worst_d = max(worst_d, relative_error(D[causal], D_ref[causal]))

        W = 1.0 / (1.0 + rng.uniform(0, 5, size=(T, T)))
        estimate = separable.separable_estimate(W, c, f, g, phi_v, zv)
        weights = np.where(causal[:, :, None], W[:, :, None] * P, 0.0)
        ref = phi_v * np.sum(weights * zv[None, :, :], axis=1) / np.sum(weights, axis=1)
        worst_z = max(worst_z, relative_error(estimate, ref))
    return Outcome(max(worst_d, worst_z), f"D {worst_d:.1e}, estimate {worst_z:.1e}")


# --- statistical --------------------------------------------------------------------------------


@check(
    "separable.monte-carlo-mode-precision",
    title="Monte Carlo: E[|S^-1 (C x_i - Phi_z z_j)|_k^2] P[i,j,k] = 1 per mode, causal and "
    "non-causal lags (exact sampler, complex output gains)",
    source=seed(0, "A.3, B.1 (precision tensor)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _monte_carlo(quick: bool) -> Outcome:
    rng = np.random.default_rng(65)
    lam, S, q, rho, gains = _random_modes(rng, 3)
    A = real_from_eigen(lam, S)
    C = real_from_eigen(gains, S, name="C")
    sde = LinearSDE.from_covariance(A, covariance_from_eigen(S, q))
    meas = LinearMeasurement(C, covariance_from_eigen(S, rho, name="R"))
    paths, h, n_steps, i = (4000 if quick else 40_000), 0.05, 80, 60
    grid = TimeGrid.uniform(h, n_steps)
    x = simulate_exact(sde, np.zeros((paths, 3)), BrownianPath(66, grid, paths, 3))
    S_inv_T = np.linalg.inv(S).T
    worst, worst_dropped = 0.0, 0.0
    for j in (0, 20, 50, 60, 70):
        dt = (j - i) * h  # the seed's t_j - t_i: negative is causal
        z_j = meas.observe(x[:, j], rng.normal(size=(paths, 3)))
        Phi_z = C @ expm(-A * dt) @ np.linalg.inv(C)
        r_s = (x[:, i] @ C.T - z_j @ Phi_z.T) @ S_inv_T  # eigenbasis residual, (paths, 3)
        P = separable.mode_precision(lam, q, rho, dt, output_gains=gains)
        y = np.abs(r_s) ** 2 * P
        z = (y.mean(axis=0) - 1.0) / (y.std(axis=0, ddof=1) / np.sqrt(paths))
        worst = max(worst, float(np.max(np.abs(z))))
        # Power: the same statistic when the measurement noise is not propagated (rho instead
        # of e^{-2 Re(lam) dt} rho) must be far off at the long lags.
        wrong = 1.0 / (1.0 / P - np.exp(-2.0 * lam.real * dt) * rho + rho)
        y_wrong = np.abs(r_s) ** 2 * wrong
        z_wrong = (y_wrong.mean(axis=0) - 1.0) / (y_wrong.std(axis=0, ddof=1) / np.sqrt(paths))
        worst_dropped = max(worst_dropped, float(np.max(np.abs(z_wrong))))
    return Outcome(
        worst,
        f"{paths} paths, lags dt = -3..+0.5; max |z|; without propagated R: {worst_dropped:.0f}",
    )


# --- 3.3: the Toeplitz kernel's indexing (issue 17) ----------------------------------------------


@check(
    "separable.toeplitz-kernel-indexing",
    title="3.3: e^{lambda (t_i - t_j)} = K[m - (i - j)] with the printed kernels K = [e^{lambda "
    "(m-1) dt}, ..., e^0, ..., e^{-lambda m dt}] (and the causal one padded with m ones), read "
    "1-based; a 0-based reading is one step off",
    source=seed(0, "3.3"),
    kind="numeric",
    tolerance=1e-15,
)
def _toeplitz_indexing(quick: bool) -> Outcome:
    rng = np.random.default_rng(33)
    worst, zero_based = 0.0, np.inf
    for _ in range(3 if quick else 20):
        m = int(rng.integers(2, 12))
        lam = complex(-rng.uniform(0.05, 1.0), rng.uniform(-2.0, 2.0))
        dt = rng.uniform(0.1, 1.0)
        exponents = np.arange(m - 1, -m - 1, -1)  # m - 1, ..., 0, ..., -m: 2m entries
        kernel = np.exp(lam * exponents * dt)
        causal = np.concatenate([np.exp(lam * np.arange(m - 1, 0, -1) * dt), np.ones(m)])
        i, j = np.meshgrid(np.arange(1, m + 1), np.arange(1, m + 1), indexing="ij")
        direct = np.exp(lam * (i - j) * dt)
        index = m - (i - j)  # 1-based, as printed
        worst = max(worst, float(np.max(np.abs(kernel[index - 1] - direct))))
        below = i >= j  # causal: keys up to the query
        worst = max(worst, float(np.max(np.abs(causal[index - 1][below] - direct[below]))))
        zero_based = min(zero_based, float(np.max(np.abs(kernel[index] - direct))))
    return Outcome(worst, f"0-based reading: error >= {zero_based:.2e}")

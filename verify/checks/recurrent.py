"""Checks of the iteratively reweighted recursive filter (seed 000 B.2, Algorithm 4).

`estimators.recurrent` implements the consistent reading of B.2 (see its module docstring for the
seven inconsistencies of the printed text). Here: the IRLS derivation (symbolic), the limits
against independent references (the Kalman filter, the dense joint-Gaussian oracle, seed 000's
batch MLE of 2.2), the eigenbasis form against the state-space form, the fixed point and the
monotone objective, a Monte Carlo check, and the printed forms shown to fail.
"""

from __future__ import annotations

import functools

import numpy as np
import sympy as sp

from estimators import recurrent as rec
from estimators.kalman import GaussianPrior, kalman_filter
from estimators.oracle import dense_filter_smoother
from sde_sim import (
    Contamination,
    EveryKSteps,
    FixedTimes,
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    Scenario,
    simulate,
)
from sde_sim.models import covariance_from_eigen, real_from_eigen
from verify.problems.recurrent import (
    AFA_LAM,
    AFA_S,
    batch_mle,
    eigen_problem,
    mode_recursion,
    random_problem,
)
from verify.registry import Outcome, check, seed
from verify.tools import (
    random_eigensystem,
    random_spd,
    relative_error,
    symbolic_residual,
    whitened_scores,
)

SIGMA_LEVEL = 5.0


# --- the afa-2d modes (shared problems: `verify.problems.recurrent`) ------------------------------


@functools.cache
def _afa_modes(quick: bool):
    """afa-2d modes with q = 0.5, r = 0.5, h = 0.1: data, prior and the Kalman reference."""
    q, r = np.array([0.5, 0.5]), np.array([0.5, 0.5])
    sde = LinearSDE.from_covariance(
        real_from_eigen(AFA_LAM, AFA_S), covariance_from_eigen(AFA_S, q)
    )
    meas = LinearMeasurement(np.eye(2), covariance_from_eigen(AFA_S, r, name="R"))
    prior_v = np.array([4.0, 4.0])
    prior = GaussianPrior(np.zeros(2), covariance_from_eigen(AFA_S, prior_v, name="prior"))
    sc = Scenario(sde, meas, GaussianInitial(prior.mean, prior.cov), 0.1, 60, EveryKSteps(1))
    sim = simulate(sc, 16 if quick else 128, seed=3, method="exact")
    kf = kalman_filter(sde, meas, sim.z, sim.t_obs, prior=prior)
    zs = sim.z @ np.linalg.inv(AFA_S).T
    return q, r, zs, prior_v, kf.means


def _printed_error(quick: bool, printed: tuple[str, ...], n_iter: int = 5) -> Outcome:
    q, r, zs, prior_v, reference = _afa_modes(quick)
    modes = mode_recursion(AFA_LAM, q, r, zs, 0.1, n_iter, np.zeros(2), prior_v, printed)
    err = relative_error((modes @ AFA_S.T).real, reference)
    name = ", ".join(printed) or "none"
    return Outcome(err, f"printed: {name}; K = {n_iter}; max rel. error of the means vs Kalman")


# --- symbolic -----------------------------------------------------------------------------------


@check(
    "recurrent.irls-derivation",
    title="rho' = w for (nu + k)/(nu + m) and 1/(1 + m/nu), rho concave (majoriser), and the "
    "frozen-weight update x = (p x^- + w c z)/(p + w c) solves dJ/dx = 0 at its fixed point",
    source=seed(0, "B.2, A.4"),
    kind="symbolic",
    tolerance=0.0,
)
def _irls_derivation(quick: bool) -> float:
    m, nu, k, x, xm, z, p, c = sp.symbols("m nu k x x_m z p c", positive=True)
    rho_t = (nu + k) * sp.log(1 + m / nu)
    rho_r = nu * sp.log(1 + m / nu)
    w_t, w_r = (nu + k) / (nu + m), 1 / (1 + m / nu)
    # scalar objective J = p (x - x^-)^2 / 2 + rho(c (z - x)^2) / 2, weight frozen at w
    w = sp.Symbol("w", positive=True)
    x_star = (p * xm + w * c * z) / (p + w * c)
    J_frozen = p * (x - xm) ** 2 / 2 + w * c * (z - x) ** 2 / 2
    mx = c * (z - x) ** 2
    grad_J = sp.diff(p * (x - xm) ** 2 / 2 + rho_t.subs(m, mx) / 2, x)
    grad_at = grad_J - (p * (x - xm) - w_t.subs(m, mx) * c * (z - x))
    return max(
        symbolic_residual(sp.diff(rho_t, m) - w_t),
        symbolic_residual(sp.diff(rho_r, m) - w_r),
        symbolic_residual(sp.diff(rho_t, m, 2) + w_t**2 / (nu + k)),  # rho'' < 0: concave
        symbolic_residual(sp.diff(rho_r, m, 2) + w_r**2 / nu),
        symbolic_residual(sp.diff(J_frozen, x).subs(x, x_star)),
        symbolic_residual(grad_at),
    )


@check(
    "recurrent.printed-inner-iteration-limit",
    title="B.2's printed inner iteration (prior replaced by the iterate, gain g) gives "
    "z^+(k) = z - (1 - g)^{k+1} (z - z^-): it tends to the measurement z for 0 < g < 1, while "
    "the posterior is z - (1 - g)(z - z^-) (K = 1 only)",
    source=seed(0, "B.2 (Weighted Update, 'Set the prior for the next inner iteration')"),
    kind="symbolic",
    tolerance=0.0,
)
def _printed_inner_limit(quick: bool) -> float:
    s, z, z0, n = sp.symbols("s z z0 n", positive=True)
    g = 1 / (1 + s)  # any gain in (0, 1)
    it, worst = z0, 0.0
    for kk in range(4):
        it = it + g * (z - it)
        worst = max(worst, symbolic_residual(it - (z - (1 - g) ** (kk + 1) * (z - z0))))
    limit = sp.limit((s / (1 + s)) ** n, n, sp.oo)
    return max(worst, symbolic_residual(limit))


# --- numeric ------------------------------------------------------------------------------------


@check(
    "recurrent.kalman-limit",
    title="nu = inf: the recursion equals the Kalman filter with exact discretisation (means, "
    "covariances), irregular per-sequence times, missing values, C 2x3, proper and diffuse "
    "priors; and the dense joint-Gaussian oracle",
    source=seed(0, "B.2 (nu -> inf)"),
    kind="numeric",
    tolerance=1e-10,
)
def _kalman_limit(quick: bool) -> Outcome:
    rng = np.random.default_rng(11)
    worst = 0.0
    for d, k in ((3, 2), (2, 2), (4, 4)):
        sde, meas, z, t, _ = random_problem(rng, d, k, B=6, T=25 if quick else 80)
        mask = rng.random(z.shape[:2]) > 0.15
        mask[:, 0] = True
        prior = GaussianPrior(rng.normal(size=d), random_spd(rng, d)) if k < d else None
        ours = rec.recurrent_filter(sde, meas, z, t, prior=prior, mask=mask, n_iter=3)
        ref = kalman_filter(sde, meas, z, t, prior=prior, mask=mask)
        worst = max(
            worst,
            relative_error(ours.means, ref.means),
            relative_error(ours.covs, ref.covs[ref.group]),
        )
        if prior is not None:
            f_means, f_covs, *_ = dense_filter_smoother(
                sde, meas, z[0], t[0], prior.mean, prior.cov, mask[0]
            )
            worst = max(
                worst,
                relative_error(ours.means[0], f_means),
                relative_error(ours.covs[0], f_covs),
            )
    return Outcome(worst, "max rel. error vs kalman_filter and the dense oracle")


@check(
    "recurrent.batch-mle-limit",
    title="nu = inf, Q = 0, diffuse prior: C x_i equals seed 000's causal batch MLE "
    "(sum_j P^C_ij)^-1 sum_j P^C_ij z_hat_ij (dense, expm) on irregular times",
    source=seed(0, "2.2, B.2"),
    kind="numeric",
    tolerance=1e-9,
)
def _batch_mle_limit(quick: bool) -> Outcome:
    rng = np.random.default_rng(5)
    worst = 0.0
    for d in (2, 3):
        lam, S = random_eigensystem(rng, d, decay=(0.05, 0.5))
        A = real_from_eigen(lam, S)
        sde = LinearSDE(A, np.zeros((d, 1)))
        C = np.eye(d) + 0.3 * rng.normal(size=(d, d))
        R = random_spd(rng, d, floor=0.1)
        meas = LinearMeasurement(C, R)
        T = 12 if quick else 40
        t = np.cumsum(rng.uniform(0.05, 0.4, T))
        z = rng.normal(size=(T, d))
        ours = rec.recurrent_filter(sde, meas, z, t)
        ref = batch_mle(A, np.zeros((d, d)), C, R, z, t)
        worst = max(worst, relative_error(ours.means @ C.T, ref))
    return Outcome(worst, "max rel. error of C x vs the dense batch estimator")


@check(
    "recurrent.eigen-vs-state",
    title="the per-mode eigenbasis recursion (Algorithm 4's form) equals the state-space one "
    "for finite nu with heavy-tailed data, both weights, d = 2..5, irregular times",
    source=seed(0, "B.2, Algorithm 4"),
    kind="numeric",
    tolerance=1e-10,
)
def _eigen_vs_state(quick: bool) -> Outcome:
    rng = np.random.default_rng(7)
    worst = 0.0
    for d in (2, 3) if quick else (2, 3, 4, 5):
        lam, S, q, r, sde, meas = eigen_problem(rng, d)
        B, T = 4, 15 if quick else 60
        t = np.cumsum(rng.uniform(0.01, 0.5, size=(B, T)), axis=1)
        z = rng.standard_t(2, size=(B, T, d)) * 2
        for weight in rec.WEIGHTS:
            kw = dict(nu=3.0, weight=weight, n_iter=25, tol=0.0)
            a = rec.recurrent_filter(sde, meas, z, t, **kw)
            b = rec.eigen_recurrent_filter(lam, S, q, r, z, t, **kw)
            worst = max(worst, relative_error(b.means, a.means), relative_error(b.covs, a.covs))
    return Outcome(worst, "max rel. error, means and covariances")


@check(
    "recurrent.fixed-point",
    title="finite nu, converged: grad J = (P^-)^-1 (x - x^-) - w C^T R^-1 (z - Cx - b) = 0 at "
    "every step, and J(x^(k)) never increases along the inner iterations (majorise-minimise)",
    source=seed(0, "B.2, 2.3 (IRLS)"),
    kind="numeric",
    tolerance=1e-9,
)
def _fixed_point(quick: bool) -> Outcome:
    rng = np.random.default_rng(13)
    sde, meas, z, t, _ = random_problem(rng, 3, 2, B=8, T=10 if quick else 50)
    prior = GaussianPrior(np.zeros(3), 4.0 * np.eye(3))
    worst_grad, worst_rise = 0.0, 0.0
    for weight in rec.WEIGHTS:
        res = rec.recurrent_filter(
            sde, meas, z, t, nu=2.5, weight=weight, n_iter=500, tol=1e-13, prior=prior
        )
        xm, Pm = res.pred_means.reshape(-1, 3), res.pred_covs.reshape(-1, 3, 3)
        x, w = res.means.reshape(-1, 3), res.weights.reshape(-1)
        r = z.reshape(-1, 2) - x @ meas.C.T - meas.b
        prior_pull = np.linalg.solve(Pm, (x - xm)[..., None])[..., 0]
        data_pull = w[:, None] * np.linalg.solve(meas.R, r.T).T @ meas.C
        scale = np.abs(prior_pull).max(axis=1) + np.abs(data_pull).max(axis=1)
        worst_grad = max(worst_grad, float(np.max(np.abs(prior_pull - data_pull).max(1) / scale)))
        # J along the iterates at one step: n_iter = k gives iterate k of the inner loop
        sl = (slice(None), 7)
        args = (res.pred_means[sl], res.pred_covs[sl], z[sl], meas)
        values = np.array(
            [
                rec.step_objective(
                    rec.robust_update(*args, nu=2.5, weight=weight, n_iter=kk, tol=0.0).mean,
                    *args,
                    nu=2.5,
                    weight=weight,
                )
                for kk in range(1, 12 if quick else 40)
            ]
        )
        rise = np.diff(values, axis=0) / np.abs(values[:-1])
        worst_rise = max(worst_rise, float(np.max(rise, initial=0.0)))
    return Outcome(
        max(worst_grad, worst_rise),
        f"rel. stationarity residual {worst_grad:.2g}; largest rel. rise of J {worst_rise:.2g}",
    )


@check(
    "recurrent.b2-corrected-is-kalman",
    title="the per-mode recursion of B.2 / Algorithm 4 with the corrections (lag-0 measurement "
    "precision, sigma^2 kappa, fixed prior, no accumulation), K = 5, equals the Kalman filter",
    source=seed(0, "B.2, Algorithm 4"),
    kind="numeric",
    tolerance=1e-10,
)
def _corrected(quick: bool) -> Outcome:
    return _printed_error(quick, ())


@check(
    "recurrent.printed-measurement-precision",
    title="printed: the new measurement weighted by the one-step propagated precision "
    "Lambda_P^C(dt) = 1/(sigma^2 kappa + eta^2 Phi_alpha^2) instead of 1/eta^2 (lag 0)",
    source=seed(0, "B.2 (Lambda_P^C(dt_{i,i-1})), Algorithm 4 (sigma_V^2)"),
    kind="numeric",
    tolerance=1e-6,
    expect="fails",
    printed=(
        r"\Lambda^C_P(\Delta t_{i,i-1}) = \frac{1}{\sigma^2\kappa + \eta^2\Phi_\alpha^2}\ "
        r"\text{(new measurement)}"
    ),
    corrected=(
        r"\Lambda^C_P(0) = \Lambda_R^{-1} = \frac{1}{\eta^2}\ "
        r"\text{(the measurement is at lag 0)}"
    ),
    correction="recurrent.b2-corrected-is-kalman",
)
def _printed_measurement(quick: bool) -> Outcome:
    return _printed_error(quick, ("measurement-precision",))


@check(
    "recurrent.printed-process-noise",
    title="printed: prediction |Lambda|^2 Lambda_V + Lambda_Q (Algorithm 4: + sigma^2) instead "
    "of the noise accumulated over the step, sigma^2 kappa",
    source=seed(0, "B.2 (Prediction Step), Algorithm 4 (propagated precision)"),
    kind="numeric",
    tolerance=1e-6,
    expect="fails",
    printed=r"\Lambda_V^- = |\Lambda|^2\Lambda_V^+ + \Lambda_Q\quad(\text{Alg. 4: } +\sigma^2)",
    corrected=(
        r"\Lambda_V^- = |\Lambda|^2\Lambda_V^+ + \Lambda_Q\,\kappa\quad(\text{Alg. 4: } "
        r"+\sigma^2\kappa),\quad \kappa = \frac{1 - "
        r"e^{2\operatorname{Re}\lambda\,\Delta t}}{-2\operatorname{Re}\lambda}"
    ),
    correction="recurrent.b2-corrected-is-kalman",
)
def _printed_process(quick: bool) -> Outcome:
    return _printed_error(quick, ("process-noise",))


@check(
    "recurrent.printed-inner-iteration",
    title="printed: the inner iteration restarts from the iterate (z^-(k+1) = z^+(k)) with the "
    "prior precision kept: with K = 5 it drifts to the measurement",
    source=seed(0, "B.2 (Weighted Update), Algorithm 4"),
    kind="numeric",
    tolerance=1e-6,
    expect="fails",
    printed=r"z^{-(k+1)} = z^{+(k)}\ \text{(prior precision kept)}",
    corrected=r"z^{-(k+1)} = z^-\ \text{(the prior is fixed; only the weight is recomputed)}",
    correction="recurrent.b2-corrected-is-kalman",
)
def _printed_inner(quick: bool) -> Outcome:
    return _printed_error(quick, ("inner-iteration",))


@check(
    "recurrent.printed-precision-accumulation",
    title="printed: p^-(k+1) = p_tilde^+(k), the measurement's precision added at each of the "
    "K = 5 inner iterations (counted K times)",
    source=seed(0, "Algorithm 4 ('Set prior for next inner iteration')"),
    kind="numeric",
    tolerance=1e-6,
    expect="fails",
    printed=r"p^{-(k+1)} = \tilde p^{+(k)}",
    corrected=r"p^{-(k+1)} = p^-",
    correction="recurrent.b2-corrected-is-kalman",
)
def _printed_accumulation(quick: bool) -> Outcome:
    return _printed_error(quick, ("precision-accumulation",))


def _alg4_step_along_innovation(use_log: bool, quick: bool) -> Outcome:
    """Algorithm 4's mean step ``sigmoid(delta) W y / (p_tilde sigma_V^2)`` projected on ``y``.

    ``W`` is the printed ``w = -log(1 + p^+ |y|^2 + eps)`` (use_log) or the weight it stands for,
    ``exp(tau_s w)``. Returns the largest step *away* from the measurement, in units of ``y``.
    """
    rng = np.random.default_rng(17)
    n = 200 if quick else 5000
    y = rng.normal(size=(n, 4)) + 1j * rng.normal(size=(n, 4))
    p_minus, sigma_v2 = rng.uniform(0.1, 10, n), rng.uniform(0.1, 10, n)
    tau_s, delta, eps = 1.0, 0.5, 1e-6
    p_plus = p_minus + 1 / sigma_v2
    logit = -np.log(1 + p_plus * np.sum(np.abs(y) ** 2, axis=1) + eps)
    weight = np.exp(tau_s * logit)
    p_tilde = p_minus + weight / sigma_v2
    factor = (logit if use_log else weight) / (1 + np.exp(-delta)) / (p_tilde * sigma_v2)
    step = factor[:, None] * y
    along = np.sum((step.conj() * y).real, axis=1) / np.sum(np.abs(y) ** 2, axis=1)
    away = float(np.max(-along, initial=0.0))
    return Outcome(max(away, 0.0), f"largest step away from z, in units of y: {away:.3g}")


@check(
    "recurrent.alg4-step-toward-measurement",
    title="Algorithm 4's mean step with the weight exp(tau_s w) moves toward the measurement "
    "(never away) for every sample",
    source=seed(0, "Algorithm 4 (Posterior mean update)"),
    kind="numeric",
    tolerance=0.0,
)
def _alg4_toward(quick: bool) -> Outcome:
    return _alg4_step_along_innovation(False, quick)


@check(
    "recurrent.printed-alg4-log-weight",
    title="printed: Algorithm 4's mean update multiplies y by w = -log(1 + p|y|^2 + eps) <= 0 "
    "(the logit, not the weight): it steps away from the measurement",
    source=seed(0, "Algorithm 4 (Posterior mean update)"),
    kind="numeric",
    tolerance=0.0,
    expect="fails",
    printed=r"w = -\log\bigl(1 + p^+|y|^2 + \epsilon\bigr)\ \text{multiplies } y",
    corrected=(
        r"e^{\tau_s w} = \bigl(1 + p^+|y|^2 + \epsilon\bigr)^{-\tau_s}\ \text{multiplies "
        r"} y"
    ),
    correction="recurrent.alg4-step-toward-measurement",
)
def _alg4_log_weight(quick: bool) -> Outcome:
    return _alg4_step_along_innovation(True, quick)


# --- statistical --------------------------------------------------------------------------------


@check(
    "recurrent.monte-carlo",
    title="Monte Carlo: nu = inf errors ~ N(0, P) (whitened, Gaussian noise); finite nu under 10% "
    "Cauchy outliers: E[x_hat - x] = 0 (the estimate is odd in the noise)",
    source=seed(0, "B.2, A.4"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _monte_carlo(quick: bool) -> Outcome:
    paths = 1500 if quick else 20_000
    A = real_from_eigen(AFA_LAM, AFA_S)
    sde = LinearSDE.from_covariance(A, 0.3 * np.eye(2))
    meas = LinearMeasurement.identity(2, 0.5)
    initial = GaussianInitial(np.array([3.0, -1.0]), np.eye(2))
    prior = GaussianPrior(initial.mean, initial.cov)  # at t = 0, the first measurement time
    times = np.concatenate([[0.0], np.sort(np.random.default_rng(4).uniform(0.0, 6.0, 14))])
    base = Scenario(sde, meas, initial, 0.1, 60, FixedTimes(times))
    gauss = simulate(base, paths, seed=21, method="exact")
    kf = rec.recurrent_filter(sde, meas, gauss.z, gauss.t_obs, prior=prior)
    last = -1
    calib = whitened_scores(kf.means[:, last] - gauss.x_obs[:, last], kf.covs[0, last])
    dirty = simulate(
        base.replace(contamination=Contamination(outlier_fraction=0.1)),
        paths,
        seed=22,
        method="exact",
    )
    robust = rec.recurrent_filter(sde, meas, dirty.z, dirty.t_obs, nu=4.0, prior=prior)
    err = robust.means - dirty.x_obs  # (P, M, 2)
    mean_z = np.sqrt(paths) * err.mean(axis=0) / err.std(axis=0, ddof=1)
    worst = max(float(np.max(np.abs(calib))), float(np.max(np.abs(mean_z))))
    return Outcome(
        worst,
        f"{paths} paths, {gauss.t_obs.size} irregular times; max |z| calibration "
        f"{np.max(np.abs(calib)):.2f}, robust mean error {np.max(np.abs(mean_z)):.2f}",
    )

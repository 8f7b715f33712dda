"""Checks of KLA's information filter as Moebius + affine associative scans (seed 001).

The scans (`estimators.scan.kla_filter`, Hillis-Steele and Blelloch groupings) against the
direct recursion, against `estimators.kalman.kalman_filter`, against dense joint-Gaussian
conditioning (`estimators.oracle`), on long sequences, and by Monte Carlo.
"""

from __future__ import annotations

import numpy as np

from estimators import scan
from estimators.closed_forms import kla
from estimators.kalman import GaussianPrior, kalman_filter
from estimators.oracle import joint_gaussian
from sde_sim import BrownianPath, LinearMeasurement, LinearSDE, TimeGrid, simulate_exact
from verify.registry import Outcome, check, seed
from verify.tools import whitened_scores

SIGMA_LEVEL = 5.0
U = np.finfo(float).eps / 2  # unit round-off of float64
PARALLEL = ("hillis-steele", "blelloch")


def _random_tokens(rng: np.random.Generator, B: int, T: int, D: int, missing: float = 0.1):
    """Random filters over (B, T, D) tokens, irregular steps; some tokens missing.

    Returns the `kla_filter` arguments, the prior and the OU law (a (D,), p (D,) and the token
    times (T + 1,) from t = 0). Ranges: a in [0.1, 2] (log-uniform), p in [0.1, 2], steps
    dt_t in [0.02, 0.3] shared by the batch (per-step a_bar_t, p_bar_t of shape (T, D)),
    k in [-1.5, 1.5], Lambda^v in [0.1, 5] (log-uniform, 0 for a missing token),
    v ~ 2 N(0, 1), lam0 in [0.1, 10], eta0 ~ lam0 N(0, 1).
    """
    a = np.exp(rng.uniform(np.log(0.1), np.log(2.0), D))
    p = rng.uniform(0.1, 2.0, D)
    dt = rng.uniform(0.02, 0.3, T)
    a_bar, p_bar = kla.ou_discretisation(a, p, dt[:, None])
    k = rng.uniform(-1.5, 1.5, (B, T, D))
    lam_v = np.exp(rng.uniform(np.log(0.1), np.log(5.0), (B, T, D)))
    lam_v[rng.random((B, T, D)) < missing] = 0.0
    v = 2.0 * rng.standard_normal((B, T, D))
    lam0 = np.exp(rng.uniform(np.log(0.1), np.log(10.0), (B, D)))
    eta0 = lam0 * rng.standard_normal((B, D))
    law = {"a": a, "p": p, "times": np.concatenate([[0.0], np.cumsum(dt)])}
    return (k, lam_v, v, a_bar, p_bar), {"lam0": lam0, "eta0": eta0}, law


def _term_size(args, prior) -> np.ndarray:
    """``sum_s |F_{s+1:t} b_s| + |F_{1:t} eta_0|`` (the gates are > 0): the size of the terms
    summed into each eta_t, the scale for its rounding errors."""
    k, lam_v, v, a_bar, p_bar = args
    return scan.kla_filter(
        np.abs(k),
        lam_v,
        np.abs(v),
        a_bar,
        p_bar,
        lam0=prior["lam0"],
        eta0=np.abs(prior["eta0"]),
        method="recursion",
    ).info_mean


@check(
    "scan.groupings-vs-recursion",
    title="lam_t, eta_t from the Moebius + affine prefix scans (sequential fold, Hillis-Steele, "
    "Blelloch) = the direct recursion (18)-(19); irregular steps, 10% missing tokens",
    source=seed(1, "Thm 1-2, Cor. 1.1, 2.1"),
    kind="numeric",
    tolerance=1e-10,
)
def _groupings(quick: bool) -> Outcome:
    # Budget at T = 200: a prefix of t Moebius leaves in any grouping is within 4(t + 1)u per
    # entry (nonnegative entries: no cancellation; 2u per product, 2u per trace division), its
    # application 3u more, the recursion within 4tu (relative sensitivities <= 1): lam within
    # (8T + 7)u = 1.8e-13. The gates then carry <= (8T + 10)u, a product of T of them
    # T(8T + 10)u, so eta is within (8T^2 + 13T)u ~ 3.6e-11 of the size of its terms.
    # 1e-10 leaves a factor 2.8 over the worst case.
    rng = np.random.default_rng(61)
    T = 200
    args, prior, _ = _random_tokens(rng, 4 if quick else 32, T, 8)
    ref = scan.kla_filter(*args, **prior, method="recursion")
    size = _term_size(args, prior)
    errs = {}
    for method in ("sequential", *PARALLEL):
        got = scan.kla_filter(*args, **prior, method=method)
        errs[method] = (
            float(np.max(np.abs(got.precision / ref.precision - 1))),
            float(np.max(np.abs(got.info_mean - ref.info_mean) / size)),
        )
    worst = max(max(e) for e in errs.values())
    detail = "; ".join(f"{m} lam {e[0]:.0e} eta {e[1]:.0e}" for m, e in errs.items())
    return Outcome(worst, f"T = {T}; {detail}")


@check(
    "scan.vs-kalman-filter",
    title="Blelloch scan (mean eta/lam, variance 1/lam) = estimators.kalman.kalman_filter on "
    "the 1-D OU SDE of each channel (exact discretisation, irregular steps, missing tokens)",
    source=seed(1, "Thm 1-2, eqs. (7)-(9), Table 5"),
    kind="numeric",
    tolerance=1e-10,
)
def _vs_kalman(quick: bool) -> Outcome:
    # kalman_filter takes its steps from expm/Van Loan (within a few u of eq. (8)) and uses the
    # Joseph form; both filters are within ~ 1e-12 of exact by the budgets of
    # scan.groupings-vs-recursion (T = 60) and kla.info-form-vs-kalman. 1e-10 leaves a
    # factor 100. Errors: relative on the variance, and on the mean relative to its posterior
    # standard deviation (the scale of a filtering error).
    rng = np.random.default_rng(62)
    B, T, D = (2, 20, 2) if quick else (4, 60, 4)
    a, p = rng.uniform(0.2, 2.0, D), rng.uniform(0.2, 1.5, D)
    k, lam_v = rng.uniform(0.3, 1.5, D) * rng.choice([-1.0, 1.0], D), rng.uniform(0.2, 5.0, D)
    dt = rng.uniform(0.02, 0.4, T)
    t = np.cumsum(dt)
    a_bar, p_bar = kla.ou_discretisation(a, p, dt[:, None])
    v = rng.standard_normal((B, T, D))
    mask = rng.random((B, T)) > 0.2
    lam0, eta0 = rng.uniform(0.5, 3.0, (B, D)), rng.standard_normal((B, D))
    got = scan.kla_filter(k, lam_v, v, a_bar, p_bar, lam0=lam0, eta0=eta0, mask=mask)
    err_var = err_mean = 0.0
    for d in range(D):
        sde = LinearSDE([[-a[d]]], [[p[d]]])
        meas = LinearMeasurement([[k[d]]], [[1.0 / lam_v[d]]])
        for i in range(B):
            # KLA's belief (lam0, eta0) is at t = 0; kalman_filter's prior is at the first token
            prior = GaussianPrior(
                np.array([a_bar[0, d] * eta0[i, d] / lam0[i, d]]),
                np.array([[a_bar[0, d] ** 2 / lam0[i, d] + p_bar[0, d]]]),
            )
            ref = kalman_filter(sde, meas, v[i, :, d : d + 1], t, prior=prior, mask=mask[i])
            var = ref.covs[0, :, 0, 0]
            err_var = max(err_var, float(np.max(np.abs(got.variance[i, :, d] / var - 1))))
            gap = np.abs(got.mean[i, :, d] - ref.means[:, 0]) / np.sqrt(var)
            err_mean = max(err_mean, float(np.max(gap)))
    return Outcome(max(err_var, err_mean), f"variance {err_var:.0e}, mean {err_mean:.0e} sd")


@check(
    "scan.vs-dense-oracle",
    title="Hillis-Steele and Blelloch filters with token-dependent k_t, Lambda^v_t and missing "
    "tokens = dense conditioning of the joint Gaussian of (z_0..z_T, v_1..v_T) on v_1..v_t",
    source=seed(1, "Thm 1-2, eqs. (7)-(9), (15)"),
    kind="numeric",
    tolerance=1e-9,
)
def _vs_dense_oracle(quick: bool) -> Outcome:
    # The oracle solves with S = diag(k) Sigma_x diag(k) + diag(1/Lambda^v) over the observed
    # tokens: eigenvalues in [1/5, T max k^2 max Var z + 10] <= [0.2, 20 * 2.25 * 20 + 10], so
    # cond(S) <= 5e3 and a backward-stable solve is within ~ cond * T u ~ 2e-11 relative to the
    # prior's scale; the scans within 1e-13 (scan.groupings-vs-recursion). 1e-9 leaves a
    # factor 50. Mean errors are relative to the posterior standard deviation.
    rng = np.random.default_rng(63)
    T, D = 20, 2
    args, prior, law = _random_tokens(rng, 2 if quick else 6, T, D, missing=0.25)
    k, lam_v, v, _, _ = args
    lam0, eta0 = prior["lam0"], prior["eta0"]
    results = {m: scan.kla_filter(*args, **prior, method=m) for m in PARALLEL}
    err_var = err_mean = 0.0
    for d in range(D):
        sde = LinearSDE([[-law["a"][d]]], [[law["p"][d]]])
        unit = LinearMeasurement([[1.0]], [[1.0]])
        for i in range(v.shape[0]):
            joint = joint_gaussian(
                sde, unit, law["times"], [eta0[i, d] / lam0[i, d]], [[1.0 / lam0[i, d]]]
            )
            x_mean, x_cov = joint.x_mean, joint.x_cov  # states z_0..z_T
            H = np.zeros((T, T + 1))
            H[np.arange(T), np.arange(1, T + 1)] = k[i, :, d]
            z_cov = H @ x_cov @ H.T + np.diag(
                np.divide(1.0, lam_v[i, :, d], out=np.ones(T), where=lam_v[i, :, d] > 0)
            )
            xz = x_cov @ H.T
            for t in range(T):
                sel = (np.arange(T) <= t) & (lam_v[i, :, d] > 0)
                mean, var = x_mean[t + 1], x_cov[t + 1, t + 1]
                if np.any(sel):
                    S = z_cov[np.ix_(sel, sel)]
                    gain = np.linalg.solve(S, xz[t + 1, sel])
                    mean = mean + gain @ (v[i, sel, d] - H[sel] @ x_mean)
                    var = var - gain @ xz[t + 1, sel]
                for res in results.values():
                    err_var = max(err_var, abs(res.variance[i, t, d] / var - 1))
                    err_mean = max(err_mean, abs(res.mean[i, t, d] - mean) / np.sqrt(var))
    return Outcome(
        max(err_var, err_mean), f"T = {T}; variance {err_var:.0e}, mean {err_mean:.0e} sd"
    )


@check(
    "scan.long-sequence",
    title="T = 2e4 (quick) / 1e5 tokens: trace-renormalised Blelloch and Hillis-Steele scans "
    "stay finite and equal the recursion; the unnormalised prefix products overflow",
    source=seed(1, "Cor. 1.1, App. C.1 (renormalisation not stated: digest 1.13, C8)"),
    kind="numeric",
    tolerance=2e-10,
)
def _long_sequence(quick: bool) -> Outcome:
    # Residual: relative error of lam against the recursion (worst case (8T + 7)u <= 1.8e-10 for
    # T <= 1e5, see scan.groupings-vs-recursion; the filter's forgetting keeps the measured error
    # near u). The information means are reported relative to the size of their terms; any
    # non-finite output makes the residual inf.
    T = 20_000 if quick else 100_000
    rng = np.random.default_rng(64)
    args, prior, _ = _random_tokens(rng, 1, T, 4, missing=0.2)
    ref = scan.kla_filter(*args, **prior, method="recursion")
    size = _term_size(args, prior)
    worst_lam = worst_eta = 0.0
    finite = True
    for method in PARALLEL:
        got = scan.kla_filter(*args, **prior, method=method)
        finite &= bool(np.all(np.isfinite(got.precision)) and np.all(np.isfinite(got.mean)))
        worst_lam = max(worst_lam, float(np.max(np.abs(got.precision / ref.precision - 1))))
        worst_eta = max(worst_eta, float(np.max(np.abs(got.info_mean - ref.info_mean) / size)))
    leaves = scan.kla_leaves(args[3], args[4], args[0] ** 2 * args[1])
    with np.errstate(over="ignore", invalid="ignore"):
        plain = scan.associative_scan(
            lambda x, y: scan.mobius_combine(x, y, normalise=False),
            leaves,
            method="hillis-steele",
            axis=1,
        ).prefix
        lam_plain = scan.mobius_apply(plain, prior["lam0"][:, None])
    bad = ~np.isfinite(lam_plain)
    overflow = f"at t = {int(np.argmax(bad.any(axis=(0, 2))))}" if bad.any() else "never"
    detail = (
        f"T = {T}; lam {worst_lam:.0e}, eta {worst_eta:.0e} of term size; unnormalised "
        f"products give non-finite lam {overflow}"
    )
    if not finite or not bad.any():
        return Outcome(float("inf"), detail)
    return Outcome(worst_lam, detail)


@check(
    "scan.filter-errors",
    title="Monte Carlo: on simulated OU paths observed with token-dependent k_t, Lambda^v_t "
    "(irregular steps, missing tokens) the Blelloch filter's errors z_t - mu_t ~ N(0, 1/lam_t)",
    source=seed(1, "Thm 1-2, Cor. 1.1, 2.1, eqs. (7)-(9), (15)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _filter_errors(quick: bool) -> Outcome:
    # Paths from sde_sim's exact sampler (z_0 ~ N(eta0/lam0, 1/lam0)), not from eq. (8).
    # Scores: the mean and variance of the whitened errors per channel at each scored step
    # (`whitened_scores`), |z| <= 5 sigma.
    rng = np.random.default_rng(65)
    paths, T, D = (3000, 16, 3) if quick else (30_000, 40, 3)
    a, p = np.array([0.3, 1.0, 2.0]), np.array([0.5, 1.5, 1.0])
    dt = rng.uniform(0.05, 0.4, T)
    times = np.concatenate([[0.0], np.cumsum(dt)])
    a_bar, p_bar = kla.ou_discretisation(a, p, dt[:, None])
    k = rng.uniform(0.3, 1.5, (T, D)) * rng.choice([-1.0, 1.0], (T, D))
    lam_v = np.exp(rng.uniform(np.log(0.3), np.log(10.0), (T, D)))
    lam_v[rng.random((T, D)) < 0.2] = 0.0
    lam0, mu0 = np.array([0.5, 2.0, 1.0]), np.array([1.0, -0.5, 0.0])
    z0 = mu0 + rng.standard_normal((paths, D)) / np.sqrt(lam0)
    sde = LinearSDE(np.diag(-a), np.diag(p))
    z = simulate_exact(sde, z0, BrownianPath(66, TimeGrid.from_times(times), paths, D))[:, 1:]
    v = k * z + rng.standard_normal((paths, T, D)) / np.sqrt(np.where(lam_v > 0, lam_v, 1.0))
    res = scan.kla_filter(k, lam_v, v, a_bar, p_bar, lam0=lam0, eta0=lam0 * mu0)
    err = z - res.mean
    worst = 0.0
    for t in np.unique(np.linspace(0, T - 1, 6).astype(int)):
        # lam_t depends only on the tokens' k, Lambda^v: the same for every path
        scores = whitened_scores(err[:, t], np.diag(res.variance[0, t]))
        worst = max(worst, float(np.max(np.abs(scores))))
    return Outcome(worst, f"{paths} paths x {T} tokens x {D} channels; max |z|")

"""Checks of the parameter MLE (`estimators.fit`): score, recovery, calibration, maximality.

The data come from `sde_sim` with initial laws the fits' priors match exactly (a known Gaussian
initial state, or the stationary law), so the likelihood maximised is the true one and the
asymptotic theory (estimate ~ N(truth, H^-1)) applies.
"""

from __future__ import annotations

import functools

import numpy as np

from estimators import fit as mle
from verify.problems.fit import (
    ISOTROPIC,
    ISOTROPIC_PRIOR,
    ISOTROPIC_TRUTH,
    OU,
    OU_TRUTH,
    custom_problem,
    finite_difference_score,
    isotropic_data,
    ou_data,
    whitened,
    z_scores,
)
from verify.registry import Outcome, check, seed
from verify.tools import whitened_scores

SIGMA_LEVEL = 5.0


@functools.cache
def _isotropic_fit(quick: bool):
    """One fit from a distant start, shared by two checks: (FitResult, z, t)."""
    B, T = (100, 16) if quick else (400, 31)
    z, t = isotropic_data(B, T, 11)
    start = ISOTROPIC.pack(alpha=-0.5, omega=0.7, sigma2=1.0, eta2=1.0)
    return mle.fit(ISOTROPIC, start, z, t, prior=ISOTROPIC_PRIOR), z, t


# --- numeric ----------------------------------------------------------------------------------


@check(
    "fit.score-fisher-identity",
    title="d log L / d phi by Fisher's identity (RTS smoother + derivatives of the step maps) "
    "= central differences of the Kalman log-likelihood (u, C 3x2, bias, full R, delay, "
    "irregular per-sequence times, missing values; stationary and diffuse priors)",
    source=seed(0, "2.1 (model); 3.6 (isotropic family); seed 001 eqs. (7)-(8)"),
    kind="numeric",
    tolerance=1e-6,
)
def _score(quick: bool) -> Outcome:
    # Central differences with h = 1e-5 of a log-likelihood of size |L| ~ 1e2 err by about
    # u |L| / h + h^2 |L'''| ~ 1e-9; relative to a score of size >= 1, 1e-6 is loose.
    family, theta, z, t, mask, prior = custom_problem()
    cases = [(family, theta, z, t, {"mask": mask, "prior": prior})]
    zi, ti = isotropic_data(8, 12, 3)
    cases.append((ISOTROPIC, ISOTROPIC_TRUTH * [1.5, 0.9, 1.2, 0.8], zi, ti, {}))
    if not quick:
        zo, to = ou_data(6, 12, 4)
        cases.append((OU, OU_TRUTH * 1.1, zo, to, {"prior": "stationary"}))
    worst = 0.0
    for fam, th, zz, tt, kw in cases:
        exact = mle.score(fam, th, zz, tt, **kw)
        fd = finite_difference_score(fam, th, zz, tt, **kw)
        worst = max(worst, float(np.max(np.abs(exact - fd)) / max(1.0, np.max(np.abs(fd)))))
    return Outcome(worst, f"{len(cases)} models; max |score - FD| / max(1, |FD|)")


@check(
    "fit.likelihood-maximal",
    title="at the estimate, steps of +-1 SE along each parameter and along random directions "
    "lower log L by 1/2 d^T H d (the quadratic model of the observed information)",
    source=seed(0, "2.1 (model), 3.6 (isotropic family)"),
    kind="numeric",
    tolerance=0.05,
)
def _maximal(quick: bool) -> Outcome:
    res, z, t = _isotropic_fit(quick)
    rng = np.random.default_rng(9)
    n = res.params.size
    dirs = [np.eye(n)[i] * res.se_unconstrained[i] for i in range(n)]
    if not quick:
        L = np.linalg.cholesky(res.cov_unconstrained)
        dirs += [L @ v / np.linalg.norm(v) for v in rng.normal(size=(4, n))]
    worst = 0.0
    for delta in dirs:
        drops = []
        for sign in (1.0, -1.0):
            theta = mle.from_unconstrained(res.unconstrained + sign * delta, res.constraints)
            drops.append(
                res.log_likelihood
                - mle.log_likelihood(ISOTROPIC, theta, z, t, prior=ISOTROPIC_PRIOR)
            )
        if min(drops) <= 0:
            return Outcome(float("inf"), "a perturbation increased the log-likelihood")
        # the mean of the two drops cancels the cubic term: its error is O(|delta|^2)
        predicted = 0.5 * delta @ res.hessian @ delta
        worst = max(worst, abs(np.mean(drops) - predicted) / predicted)
    return Outcome(worst, f"{len(dirs)} directions; max |drop - quadratic| / quadratic")


# --- statistical ------------------------------------------------------------------------------


@check(
    "fit.recovers-isotropic",
    title="MLE of (alpha, omega, sigma2, eta2) of A = alpha I + omega J from simulated "
    "afa-2d-like data lies within the sigma level of its standard errors",
    source=seed(0, "3.6 (isotropic decay and noise), 4.2 (eigenvalues -0.1 +- i)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _recovers_isotropic(quick: bool) -> Outcome:
    res, z, _ = _isotropic_fit(quick)
    B, T = z.shape[:2]
    worst = float(np.max(np.abs(z_scores(res, ISOTROPIC_TRUTH))))
    if not res.convergence.converged:
        return Outcome(float("inf"), f"not converged: {res.convergence.message}")
    detail = f"{B} x {T} obs; max |z| over 4 parameters, {res.convergence.iterations} iterations"
    return Outcome(worst, detail)


@check(
    "fit.recovers-ou",
    title="MLE of per-channel (a, p) and eta2 of the `ou` preset (stationary prior) lies within "
    "the sigma level of its standard errors",
    source=seed(1, "eqs. (7)-(8) (OU prior, exact discretisation)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _recovers_ou(quick: bool) -> Outcome:
    B, T = (50, 11) if quick else (200, 41)
    z, t = ou_data(B, T, 12)
    # quick: from 25% off the truth; full: from the same rate and diffusion in every channel
    start = OU_TRUTH * np.tile([1.25, 0.8], 5)[:9] if quick else OU.pack(a=1.0, p=0.7, eta2=0.3)
    res = mle.fit(OU, start, z, t, prior="stationary")
    if not res.convergence.converged:
        return Outcome(float("inf"), f"not converged: {res.convergence.message}")
    worst = float(np.max(np.abs(z_scores(res, OU_TRUTH))))
    return Outcome(worst, f"{B} x {T} obs; max |z| over 9 parameters")


@check(
    "fit.standard-errors-calibrated",
    title="over independent datasets, L^-1 (phi_hat - phi) (L L^T = H^-1) has mean 0 and "
    "covariance I: the standard errors match the Monte Carlo spread of the estimates",
    source=seed(0, "3.6 (isotropic family)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _calibrated(quick: bool) -> Outcome:
    K, B, T = (3, 50, 11) if quick else (40, 100, 21)
    z, t = isotropic_data(K * B, T, 13)
    w = np.array(
        [
            whitened(
                mle.fit(
                    ISOTROPIC, ISOTROPIC_TRUTH, z[k * B : (k + 1) * B], t, prior=ISOTROPIC_PRIOR
                ),
                ISOTROPIC_TRUTH,
            )
            for k in range(K)
        ]
    )
    scores = whitened_scores(w, np.eye(w.shape[1]))
    ratio = float(np.mean(w**2))
    detail = f"{K} datasets of {B} x {T}; mean square of whitened errors {ratio:.3f}; max |z|"
    return Outcome(float(np.max(np.abs(scores))), detail)

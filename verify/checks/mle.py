"""Checks of the batch precision-weighted MLE (seed 000 2.2, A.2; `estimators.mle`).

Independent references: the Kalman filter/smoother from a diffuse prior and a stacked
generalised least-squares solve (zero process noise, where the MLE is exact), the per-mode
tensor form, Monte Carlo against the exact error covariance with shared process noise, and the
Gauss-Markov ordering of that covariance against the Kalman filter's.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import expm

from estimators.kalman import kalman_filter, rts_smoother
from estimators.mle import DiagonalizableModel, batch_mle, eigen_batch_mle, mle_error_covariance
from sde_sim import GaussianInitial, LinearMeasurement, LinearSDE, presets, simulate
from verify.registry import Outcome, check, seed
from verify.tools import random_eigensystem, random_spd, relative_error, whitened_scores

SIGMA_LEVEL = 5.0
# Exact comparisons of float64 d x d solves: the summed precisions H have condition numbers up
# to ~1e4 for the systems drawn here (d <= 4, cond(C) <= 10), so the states carry errors up to
# ~u cond(H) cond(C)^2 ~ 2e-10; tolerance 1e-9 (measured worst 5e-11, full mode).
_ROUNDOFF = 1e-9


def _zero_noise_problem(rng: np.random.Generator, d: int, T: int):
    """A random stable system with Q = 0, drift, an invertible C, bias, irregular times."""
    # |Re lambda| <= 0.5 over a span <= 16 * 0.15 = 2.4 keeps e^{A dt} within a factor ~3 of
    # orthogonal, so the summed precisions stay well conditioned (the tolerance's premise).
    lam, S = random_eigensystem(rng, d, decay=(0.05, 0.5))
    A = (S * lam) @ np.linalg.inv(S)
    sde = LinearSDE(A.real, np.zeros((d, 1)), rng.normal(size=d))
    while True:
        C = np.eye(d) + 0.4 * rng.normal(size=(d, d))
        if np.linalg.cond(C) < 10:
            break
    meas = LinearMeasurement(C, random_spd(rng, d, floor=0.1), b=rng.normal(size=d))
    t = np.cumsum(rng.uniform(0.03, 0.15, size=T))
    z = 3.0 * rng.normal(size=(2, T, d))
    mask = rng.random((2, T)) > 0.25
    mask[:, 0] = True
    return sde, meas, t, z, mask


def _cases(quick: bool, seed_: int):
    rng = np.random.default_rng(seed_)
    for n in range(2 if quick else 12):
        yield _zero_noise_problem(rng, 2 + n % 3, 8 if quick else 16)


@check(
    "mle.diffuse-kalman",
    title="Q = 0: causal batch MLE = Kalman filter from a diffuse prior, non-causal = RTS "
    "smoother (means and covariances; drift, bias, irregular times, missing values)",
    source=seed(0, "2.2, A.2 (and seed 004 A.4's independence assumption, exact at Q = 0)"),
    kind="numeric",
    tolerance=_ROUNDOFF,
)
def _diffuse_kalman(quick: bool) -> Outcome:
    worst_mean, worst_cov = 0.0, 0.0
    for sde, meas, t, z, mask in _cases(quick, 81):
        filtered = kalman_filter(sde, meas, z, t, mask=mask)
        smoothed = rts_smoother(filtered)
        for causal, ref in ((True, filtered), (False, smoothed)):
            mle = batch_mle(sde, meas, z, t, mask=mask, causal=causal)
            worst_mean = max(worst_mean, relative_error(mle.states, ref.means))
            worst_cov = max(worst_cov, relative_error(mle.state_covs, ref.covs[ref.group]))
    return Outcome(max(worst_mean, worst_cov), f"means {worst_mean:.1e}, covs {worst_cov:.1e}")


@check(
    "mle.stacked-least-squares",
    title="Q = 0: batch MLE of x_i = generalised least squares on the stacked measurements "
    "z_j - b - C G_u(t_j - t_i) u = C e^{A (t_j - t_i)} x_i + v_j (no C^-1, no V^C)",
    source=seed(0, "A.2 (the log-likelihood it maximises)"),
    kind="numeric",
    tolerance=_ROUNDOFF,
)
def _stacked(quick: bool) -> float:
    worst = 0.0
    for sde, meas, t, z, mask in _cases(quick, 82):
        d = sde.dim
        mle = batch_mle(sde, meas, z, t, mask=mask, causal=False)
        W = np.linalg.inv(np.linalg.cholesky(meas.R))  # whitening: W R W^T = I
        for i in range(t.size):
            # flow of x' = A x + u over t_j - t_i from the augmented exponential
            block = np.zeros((d + 1, d + 1))
            block[:d, :d], block[:d, d] = sde.A, sde.u
            flows = expm(block * (t - t[i])[:, None, None])
            M = meas.C @ flows[:, :d, :d]  # (T, k, d)
            y = z - meas.b - (meas.C @ flows[:, :d, d].T).T  # (B, T, k)
            for b in range(z.shape[0]):
                rows = mask[b]
                lhs = (W @ M[rows]).reshape(-1, d)
                rhs = (y[b, rows] @ W.T).reshape(-1)
                x = np.linalg.lstsq(lhs, rhs, rcond=None)[0]
                worst = max(worst, relative_error(mle.states[b, i], x))
    return worst


@check(
    "mle.eigenbasis-tensor-form",
    title="per-mode tensor form (scalar precisions 1/lambda^C_V, O(T^2 d)) = general matrix "
    "form, simultaneously diagonalizable A, C, Q, R, with drift and bias, causal and not",
    source=seed(0, "2.2 (tensor MLE), A.3"),
    kind="numeric",
    tolerance=_ROUNDOFF,
)
def _eigen(quick: bool) -> float:
    rng = np.random.default_rng(83)
    worst = 0.0
    for n in range(2 if quick else 10):
        d = 2 + n % 3
        lam, S = random_eigensystem(rng, d)
        q = np.repeat(rng.uniform(0.05, 0.5, size=(d + 1) // 2), 2)[:d]
        r = np.repeat(rng.uniform(0.1, 1.0, size=(d + 1) // 2), 2)[:d]
        c = np.repeat(rng.uniform(0.5, 2.0, size=(d + 1) // 2), 2)[:d]
        model = DiagonalizableModel(
            lam, S, q, r, C_eigenvalues=c, u=rng.normal(size=d), b=rng.normal(size=d)
        )
        t = np.cumsum(rng.uniform(0.05, 0.4, size=10))
        z = rng.normal(size=(3, 10, d))
        mask = rng.random((3, 10)) > 0.2
        for causal in (True, False):
            eigen = eigen_batch_mle(model, z, t, mask=mask, causal=causal)
            general = batch_mle(model.sde(), model.measurement(), z, t, mask=mask, causal=causal)
            finite = ~np.isnan(general.outputs)
            worst = max(
                worst,
                relative_error(eigen.outputs[finite], general.outputs[finite]),
                relative_error(np.nan_to_num(eigen.covs), np.nan_to_num(general.covs)),
            )
    return worst


def _rotation(n_paths: int, seed_: int):
    sc = presets.get("rotation-3d").scenario()
    sc = sc.replace(
        system=LinearSDE(sc.system.A, np.sqrt(0.1) * np.eye(3)),
        initial=GaussianInitial(np.array([4.0, 0.0, 1.0]), np.eye(3)),
        n_steps=300,
    )
    return sc, simulate(sc, n_paths, seed=seed_, method="exact")


@check(
    "mle.error-covariance-monte-carlo",
    title="Q > 0: Monte Carlo errors z_bar_i - C x_i - b of the batch MLE against its exact "
    "covariance with shared process noise (mle_error_covariance, derived here), whitened "
    "moments, rotation-3d, causal and non-causal",
    source=seed(0, "A.2; seed 004 A.4 (the correlations its independence assumption drops)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _error_covariance(quick: bool) -> Outcome:
    sc, sim = _rotation(500 if quick else 5000, 84)
    target = sim.x_obs @ sc.measurement.C.T + sc.measurement.b
    worst, nominal = 0.0, 0.0
    for causal in (True, False):
        mle = batch_mle(sc.system, sc.measurement, sim.z, sim.t_obs, causal=causal)
        exact = mle_error_covariance(sc.system, sc.measurement, sim.t_obs, causal=causal)
        for i in (5, 20):
            errors = mle.outputs[:, i] - target[:, i]
            worst = max(worst, float(np.abs(whitened_scores(errors, exact[i])).max()))
            nominal = max(nominal, float(np.abs(whitened_scores(errors, mle.covs[0, i])).max()))
    return Outcome(worst, f"nominal (sum_j P^C_ij)^-1 instead: max |z| = {nominal:.1f}")


@check(
    "mle.kalman-gap",
    title="Q > 0: exact MLE error covariance - Kalman (diffuse) covariance is PSD at every "
    "step (Gauss-Markov: the Kalman estimate is the best linear unbiased one); afa-2d b",
    source=seed(0, "2.2, A.2 vs the Kalman filter; seed 004 A.4 (approximation validity)"),
    kind="numeric",
    tolerance=1e-10,
)
def _kalman_gap(quick: bool) -> Outcome:
    # The Kalman covariances and the exact MLE covariance are each good to ~1e-13 relative;
    # a negative eigenvalue of their difference below 1e-10 of the scale is round-off.
    sc = presets.get("afa-2d").scenario("b")
    t = 0.1 * np.arange(41 if quick else 101)
    z = np.zeros((t.size, 2))
    filtered = kalman_filter(sc.system, sc.measurement, z, t)
    smoothed = rts_smoother(filtered)
    worst, ratios = 0.0, []
    for causal, ref in ((True, filtered.covs[0]), (False, smoothed.covs[0])):
        exact = mle_error_covariance(sc.system, sc.measurement, t, causal=causal)
        gap = np.linalg.eigvalsh(exact - ref).min(axis=-1)
        scale = float(np.abs(exact).max())
        worst = max(worst, max(0.0, -float(gap.min())) / scale)
        late = slice(10, None)
        tr = np.trace(exact[late], axis1=-1, axis2=-2).sum()
        ratios.append(tr / np.trace(ref[late], axis1=-1, axis2=-2).sum())
    return Outcome(
        worst,
        f"MSE(MLE)/MSE(Kalman) after step 10: causal {ratios[0]:.2f}, non-causal {ratios[1]:.2f}",
    )

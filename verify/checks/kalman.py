"""Checks of the Kalman filter and RTS smoother: the dense joint-Gaussian oracle and Monte Carlo."""

from __future__ import annotations

import numpy as np

from estimators.kalman import GaussianPrior, kalman_filter, rts_smoother
from estimators.oracle import dense_filter_smoother
from sde_sim import GaussianInitial, LinearMeasurement, LinearSDE, PoissonTimes, presets, simulate
from verify.registry import Outcome, check, seed
from verify.tools import random_spd, whitened_scores

SIGMA_LEVEL = 5.0


def _random_model(rng: np.random.Generator):
    """A random stable system (non-normal A), rectangular C, correlated noise, a delay."""
    d = int(rng.integers(1, 5))
    k = int(rng.integers(1, d + 2))
    K = rng.normal(size=(d, d))
    A = (K - K.T) - random_spd(rng, d, floor=0.1)
    sde = LinearSDE.from_covariance(A, random_spd(rng, d), u=rng.normal(size=d))
    meas = LinearMeasurement(
        rng.normal(size=(k, d)),
        random_spd(rng, k, floor=0.1),
        b=rng.normal(size=k),
        delay=float(rng.uniform(0.0, 0.2)),
    )
    return sde, meas


def _oracle_cases(quick: bool, seed_: int):
    rng = np.random.default_rng(seed_)
    for _ in range(4 if quick else 40):
        sde, meas = _random_model(rng)
        T = int(rng.integers(2, 16))
        t = np.cumsum(rng.uniform(0.02, 0.6, size=T))
        z = rng.normal(size=(T, meas.out_dim)) * 2
        mask = rng.random(T) > 0.3
        prior = GaussianPrior(rng.normal(size=sde.dim), random_spd(rng, sde.dim, floor=0.3))
        yield sde, meas, t, z, mask, prior


def _relative(a, b) -> float:
    return float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))))


# Both sides are float64 with condition numbers of a few hundred at most (covariances with
# eigenvalues >= 0.1, T <= 15): agreement to ~1e-12; tolerance 1e-9.
ORACLE_TOLERANCE = 1e-9


@check(
    "kalman.filter-vs-dense-oracle",
    title="filtered means and covariances = dense conditioning of the joint Gaussian on the "
    "measurements up to each step (irregular times, missing values, rectangular C, delay)",
    source=seed(0, "2.1, A.1 (model)"),
    kind="numeric",
    tolerance=ORACLE_TOLERANCE,
)
def _filter_vs_oracle(quick: bool) -> Outcome:
    worst = 0.0
    for sde, meas, t, z, mask, prior in _oracle_cases(quick, 1):
        out = kalman_filter(sde, meas, z, t, prior=prior, mask=mask)
        f_m, f_c, *_ = dense_filter_smoother(sde, meas, z, t, prior.mean, prior.cov, mask)
        worst = max(worst, _relative(out.means, f_m), _relative(out.covs[0], f_c))
    return Outcome(worst, "max error relative to max(1, |reference|)")


@check(
    "kalman.smoother-vs-dense-oracle",
    title="RTS smoothed means and covariances = dense conditioning on all measurements",
    source=seed(0, "2.1, A.1 (model)"),
    kind="numeric",
    tolerance=ORACLE_TOLERANCE,
)
def _smoother_vs_oracle(quick: bool) -> float:
    worst = 0.0
    for sde, meas, t, z, mask, prior in _oracle_cases(quick, 2):
        out = rts_smoother(kalman_filter(sde, meas, z, t, prior=prior, mask=mask))
        _, _, s_m, s_c, _ = dense_filter_smoother(sde, meas, z, t, prior.mean, prior.cov, mask)
        worst = max(worst, _relative(out.means, s_m), _relative(out.covs[0], s_c))
    return worst


@check(
    "kalman.likelihood-vs-dense-density",
    title="sum of innovation log-densities = log N(z_observed; mean, cov) of the joint Gaussian",
    source=seed(0, "A.2 (likelihood)"),
    kind="numeric",
    tolerance=ORACLE_TOLERANCE,
)
def _likelihood_vs_density(quick: bool) -> float:
    worst = 0.0
    for sde, meas, t, z, mask, prior in _oracle_cases(quick, 3):
        out = kalman_filter(sde, meas, z, t, prior=prior, mask=mask)
        dense = dense_filter_smoother(sde, meas, z, t, prior.mean, prior.cov, mask)[4]
        worst = max(worst, abs(out.log_likelihood - dense) / max(1.0, abs(dense)))
    return worst


@check(
    "kalman.diffuse-prior-limit",
    title="the diffuse start is the limit of priors N(0, s I) as s grows: means differ by O(1/s)",
    source=seed(4, "A (batch MLE vs diffuse Kalman, digest section 3)"),
    kind="numeric",
    tolerance=1e-6,
)
def _diffuse_limit(quick: bool) -> Outcome:
    # With s = 1e9 the prior's influence on the means is ~ R / s ~ 1e-9 relative; 1e-6 leaves
    # room for the conditioning of the first update. The gap must also shrink with s.
    sc = presets.get("afa-2d").scenario("b")
    sim = simulate(sc, 2, seed=5)
    diffuse = kalman_filter(sc.system, sc.measurement, sim.z, sim.t_obs)
    gaps = []
    for s in (1e3, 1e6, 1e9):
        wide = kalman_filter(
            sc.system,
            sc.measurement,
            sim.z,
            sim.t_obs,
            prior=GaussianPrior(np.zeros(2), s * np.eye(2)),
        )
        gaps.append(_relative(wide.means, diffuse.means))
    shrinking = gaps[0] > gaps[1] > gaps[2]
    return Outcome(gaps[-1] if shrinking else np.inf, f"gaps {', '.join(f'{g:.1e}' for g in gaps)}")


def _calibration_data(quick: bool):
    """Simulated paths whose initial law is the filter's prior, at Poisson measurement times."""
    sc = presets.get("rfa-ensemble-2d").scenario()
    prior = GaussianPrior(np.array([5.0, 0.0]), np.diag([0.5, 0.3]), time=0.0)
    sc = sc.replace(
        initial=GaussianInitial(prior.mean, prior.cov), observations=PoissonTimes(4.0), n_steps=800
    )
    sim = simulate(sc, 2000 if quick else 20_000, seed=6, method="exact")
    return sc, prior, sim


@check(
    "kalman.filter-calibration",
    title="Monte Carlo: filter and smoother errors x - m ~ N(0, P) at several steps (true model, "
    "prior = the initial law, irregular times)",
    source=seed(0, "2.1"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _calibration(quick: bool) -> Outcome:
    sc, prior, sim = _calibration_data(quick)
    out = kalman_filter(sc.system, sc.measurement, sim.z, sim.t_obs, prior=prior)
    smooth = rts_smoother(out)
    T = sim.t_obs.size
    worst = 0.0
    for step in (0, 1, T // 3, T - 1):
        worst = max(
            worst,
            np.max(
                np.abs(whitened_scores(sim.x_obs[:, step] - out.means[:, step], out.covs[0, step]))
            ),
        )
        worst = max(
            worst,
            np.max(
                np.abs(
                    whitened_scores(
                        sim.x_obs[:, step] - smooth.means[:, step], smooth.covs[0, step]
                    )
                )
            ),
        )
    return Outcome(worst, f"{sim.x.shape[0]} paths, {T} measurements; max |z|")


@check(
    "kalman.innovations-white",
    title="Monte Carlo: standardised innovations are N(0, I) and uncorrelated across steps",
    source=seed(0, "2.1"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _innovations(quick: bool) -> Outcome:
    sc, prior, sim = _calibration_data(quick)
    out = kalman_filter(sc.system, sc.measurement, sim.z, sim.t_obs, prior=prior)
    C, R = sc.measurement.C, sc.measurement.R
    worst = 0.0
    whitened = []
    pred_means, pred_covs = out.pred_means, out.pred_covs  # computed on access: once
    for step in (1, 5, sim.t_obs.size // 2):
        S = C @ pred_covs[0, step] @ C.T + R
        e = sim.z[:, step] - pred_means[:, step] @ C.T - sc.measurement.b
        worst = max(worst, np.max(np.abs(whitened_scores(e, S))))
        whitened.append(np.linalg.solve(np.linalg.cholesky(S), e.T).T)
    n = whitened[0].shape[0]
    for a in range(len(whitened)):  # cross-step correlations ~ N(0, 1/n) each
        for b in range(a + 1, len(whitened)):
            cross = whitened[a].T @ whitened[b] / n
            worst = max(worst, float(np.max(np.abs(cross))) * np.sqrt(n))
    return Outcome(worst, f"{n} paths; max |z|")

"""Problems of the parameter MLE (`estimators.fit`): the data, the truth and the diagnostics that
the checks `verify.checks.fit` and the tests of `estimators.fit` share.

The data come from `sde_sim` with initial laws the fits' priors match exactly (a known Gaussian
initial state, or the stationary law), so the likelihood maximised is the true one and the
asymptotic theory (estimate ~ N(truth, H^-1)) applies.
"""

from __future__ import annotations

import numpy as np

from estimators import fit as mle
from estimators.kalman import GaussianPrior
from sde_sim import (
    EveryKSteps,
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    Scenario,
    presets,
    simulate,
)

# The afa-2d eigenvalues -0.1 +- i (seed 000 section 4.2) in the isotropic family
# A = alpha I + omega J (section 3.6), with afa-2d variant b's noise and measurement step 0.1.
ISOTROPIC = mle.IsotropicFamily(2)


ISOTROPIC_TRUTH = ISOTROPIC.pack(alpha=-0.1, omega=1.0, sigma2=0.3, eta2=0.5)


# A known Gaussian initial state far from the origin (afa-2d starts at radius ~20): its decay
# carries information about alpha and omega; the fits use this law as their prior.
X0_MEAN, X0_COV = np.array([6.0, 0.0]), np.eye(2)


ISOTROPIC_PRIOR = GaussianPrior(X0_MEAN, X0_COV)


STEP = 0.1


def isotropic_data(n_paths: int, n_obs: int, seed_: int, *, family=ISOTROPIC, theta=None):
    """Measurements (P, n_obs, 2) and times of the isotropic system, exact sampler."""
    theta = ISOTROPIC_TRUTH if theta is None else theta
    sde, meas = family.build(theta)
    scenario = Scenario(
        system=sde,
        measurement=meas,
        initial=GaussianInitial(X0_MEAN, X0_COV),
        dt=STEP,
        n_steps=n_obs - 1,
        observations=EveryKSteps(1),
    )
    sim = simulate(scenario, n_paths, seed=seed_, method="exact")
    return sim.z, sim.t_obs


def ou_data(n_paths: int, n_obs: int, seed_: int):
    """The `ou` preset (seed 001 eqs. (7)-(8)), stationary start, measured every 0.1."""
    scenario = presets.get("ou").scenario().replace(n_steps=10 * (n_obs - 1))
    sim = simulate(scenario, n_paths, seed=seed_, method="exact")
    return sim.z, sim.t_obs


OU = mle.OUFamily(4)


OU_TRUTH = OU.pack(a=presets.OU_RATES, p=1.0, eta2=0.1)


def z_scores(result: mle.FitResult, truth: np.ndarray) -> np.ndarray:
    """``(theta_hat - theta) / se`` per parameter."""
    return (result.params - truth) / result.se


def whitened(result: mle.FitResult, truth: np.ndarray) -> np.ndarray:
    """``L^-1 (phi_hat - phi)``, ``L L^T = H^-1``: N(0, I) asymptotically."""
    phi = mle.to_unconstrained(truth, result.constraints)
    L = np.linalg.cholesky(result.cov_unconstrained)
    return np.linalg.solve(L, result.unconstrained - phi)


def custom_problem():
    """A model using every part of the score: drift offset u, C (3x2), bias, full R, delay,
    per-sequence irregular times, missing values and a Gaussian prior at t = 0 (before the
    first measurements, so the model carries it forward)."""

    def build(theta):
        a, w, s, r = theta
        sde = LinearSDE(
            np.array([[-a, w], [-w, -2.0 * a]]),
            np.array([[s, 0.0], [0.3 * s, 0.5]]),
            np.array([0.5 * w, -a]),
        )
        C = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, w]])
        R = r * np.array([[1.0, 0.2, 0.0], [0.2, 1.0, 0.1], [0.0, 0.1, 2.0]])
        return sde, LinearMeasurement(C, R, b=np.array([a, 0.0, -w]), delay=0.05)

    family = mle.CustomFamily(build, ("positive", "real", "positive", "positive"))
    theta = np.array([0.4, 0.8, 0.7, 0.3])
    rng = np.random.default_rng(5)
    B, T = 6, 9
    t = np.cumsum(rng.uniform(0.05, 0.4, (B, T)), axis=1)
    z = rng.normal(size=(B, T, 3))
    mask = rng.random((B, T)) > 0.2
    z[~mask] = np.nan
    # the prior is the law at t = 0, carried to each sequence's first state time by the model
    prior = GaussianPrior(np.array([0.5, -0.5]), np.array([[1.0, 0.3], [0.3, 0.5]]), 0.0)
    return family, theta, z, t, mask, prior


def finite_difference_score(family, theta, z, t, **kwargs) -> np.ndarray:
    """Central differences of the filter's log-likelihood in the unconstrained coordinates."""
    phi = mle.to_unconstrained(theta, family.constraints)
    h = 1e-5 * np.maximum(1.0, np.abs(phi))
    out = np.empty(phi.size)
    for i in range(phi.size):
        e = np.zeros(phi.size)
        e[i] = h[i]
        up = mle.log_likelihood(
            family, mle.from_unconstrained(phi + e, family.constraints), z, t, **kwargs
        )
        dn = mle.log_likelihood(
            family, mle.from_unconstrained(phi - e, family.constraints), z, t, **kwargs
        )
        out[i] = (up - dn) / (2 * h[i])
    return out

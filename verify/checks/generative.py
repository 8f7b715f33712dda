"""Checks of seed 000 B.3.1: sampling a prediction in the eigenbasis and mapping it back.

The seed draws ``z_s^+ ~ N(zbar_s^+, Lambda^+)`` in the eigenbasis and writes ``z^+ = S z_s^+
S^-1``, which sandwiches a vector between ``S`` and ``S^-1``. The map back is ``z^+ = S z_s^+``
(as `drift.printed-u-eigen-coordinates`' corrected form), so ``z^+`` has covariance ``S Lambda^+
S^H``; the sandwich, read on the covariance as the similarity ``S Lambda^+ S^-1``, is another
matrix unless ``S`` is unitary. Both are checked against the empirical covariance of draws of
``S z_s`` (circular complex Gaussian ``z_s``, fixed seeds), in standard errors.

The propagation itself, ``Lambda^+ = e^{2 Re(lambda) dt} Lambda^- + Lambda_proc``, is checked
against the Kalman filter's predicted measurement covariance (`generative.prediction-covariance`).
"""

from __future__ import annotations

import numpy as np

from estimators.backward_sampling import sample_paths
from estimators.kalman import GaussianPrior, kalman_filter, rts_smoother
from sde_sim import LinearMeasurement, LinearSDE
from sde_sim.models import rotation_generator
from verify.registry import Outcome, check, seed
from verify.tools import random_eigensystem, relative_error, whitened_scores

SIGMA_LEVEL = 5.0


def _draws(quick: bool):
    """``(S, Lambda^+, z = S z_s)`` for random eigenbases (``cond(S) > 1``: not unitary)."""
    rng = np.random.default_rng(31)
    n = 20_000 if quick else 200_000
    for _ in range(2 if quick else 6):
        d = int(rng.integers(2, 5))
        _, S = random_eigensystem(rng, d)
        variances = rng.uniform(0.2, 2.0, size=d)  # Lambda^+ (diagonal, seed B.3.1)
        z_s = (rng.normal(size=(n, d)) + 1j * rng.normal(size=(n, d))) * np.sqrt(variances / 2)
        yield S, np.diag(variances), z_s @ S.T  # rows: S z_s


def _scores(z: np.ndarray, claimed: np.ndarray) -> float:
    """Largest ``|C_hat - claimed| / se`` over the entries (real and imaginary parts) of the
    empirical covariance ``C_hat = mean(z z^H)``; ``se^2 = C_aa C_bb / (2 n)`` per part for a
    circular complex Gaussian (the true covariance's diagonal from the sample)."""
    n = z.shape[0]
    empirical = z.T @ z.conj() / n
    diag = np.real(np.diag(empirical))
    se = np.sqrt(np.outer(diag, diag) / (2 * n))
    gap = empirical - claimed
    return float(max(np.max(np.abs(gap.real) / se), np.max(np.abs(gap.imag) / se)))


@check(
    "generative.printed-eigenbasis-map",
    title="seed error: printed B.3.1 z^+ = S z_s^+ S^-1 sandwiches a vector; read on the "
    "covariance, S Lambda^+ S^-1 is not the covariance of the mapped draws",
    source=seed(0, "B.3.1 (z_i^+ = S z_s,i^+ S^-1)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
    expect="fails",
    printed=r"z_i^+ = S\,z_{s,i}^+\,S^{-1}\quad(\operatorname{Cov} = S\,\Lambda^+ S^{-1})",
    corrected=r"z_i^+ = S\,z_{s,i}^+,\qquad \operatorname{Cov}(z_i^+) = S\,\Lambda^+ S^{H}",
    correction="generative.corrected-eigenbasis-map",
)
def _printed_map(quick: bool) -> Outcome:
    best = min(_scores(z, S @ L @ np.linalg.inv(S)) for S, L, z in _draws(quick))
    return Outcome(best, "smallest max |z-score| over the cases")


@check(
    "generative.corrected-eigenbasis-map",
    title="B.3.1 corrected: z^+ = S z_s^+ has covariance S Lambda^+ S^H (Monte Carlo, in "
    "standard errors)",
    source=seed(0, "B.3.1"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _corrected_map(quick: bool) -> Outcome:
    worst = max(_scores(z, S @ L @ S.conj().T) for S, L, z in _draws(quick))
    return Outcome(worst, "largest max |z-score| over the cases")


@check(
    "generative.prediction-covariance",
    title="B.3.1: the prediction's covariance Lambda^+ = e^{2 Re(lambda) dt} Lambda^- + "
    "|lambda_C|^2 lambda_Q (1 - e^{2 Re(lambda) dt}) / (-2 Re(lambda)) + lambda_R equals the "
    "Kalman filter's C P^- C^T + R (isotropic decay; Lambda^- = |lambda_C|^2 P, the estimate's)",
    source=seed(0, "B.3.1"),
    kind="numeric",
    tolerance=1e-12,
)
def _prediction_covariance(quick: bool) -> float:
    # kalman_filter's Van Loan discretisation against the scalar closed form: ~1e-15
    rng = np.random.default_rng(32)
    worst = 0.0
    for _ in range(2 if quick else 10):
        decay, omega = rng.uniform(0.1, 1.0), rng.uniform(-2.0, 2.0)
        q, c, r = rng.uniform(0.1, 1.0), rng.uniform(0.5, 2.0), rng.uniform(0.1, 1.0)
        A = -decay * np.eye(2) + rotation_generator([omega])
        sde = LinearSDE.from_covariance(A, q * np.eye(2))
        measurement = LinearMeasurement(c * np.eye(2), r * np.eye(2))
        t = np.cumsum(rng.uniform(0.1, 1.0, size=12))
        z = rng.normal(size=(12, 2))
        prior = GaussianPrior(np.zeros(2), np.eye(2))
        result = kalman_filter(sde, measurement, z, t, prior=prior)
        pred_covs = result.pred_covs  # computed on access: once
        for k in range(len(t) - 1):
            dt = t[k + 1] - t[k]
            before = c**2 * result.covs[0, k]  # Lambda^-: the estimate's covariance, z space
            growth = np.exp(-2 * decay * dt)  # e^{2 Re(lambda) dt}
            printed = growth * before + (c**2 * q * (1 - growth) / (2 * decay) + r) * np.eye(2)
            kalman = c**2 * pred_covs[0, k + 1] + r * np.eye(2)
            worst = max(worst, relative_error(printed, kalman))
    return worst


# --- B.3.1: RTS backward sampling ----------------------------------------------------------------


def backward_sampling_scores(draws: int, *, independent: bool = False) -> np.ndarray:
    """z-scores of sampled trajectories against the smoother: per consecutive pair ``(x_k,
    x_{k+1})`` the whitened first and second moments (`verify.tools.whitened_scores`) under
    ``N((m^s_k, m^s_{k+1}), [[P^s_k, J_k P^s_{k+1}], [., P^s_{k+1}]])``.

    A damped rotation in 2-D observed through one noisy coordinate (T = 25, 20% missing).
    ``independent`` draws each step from its smoother marginal alone (right marginals, no
    coupling between steps): the negative control.
    """
    rng = np.random.default_rng(111)
    A = rotation_generator([1.3]) - 0.3 * np.eye(2)
    sde = LinearSDE(A, G=0.6 * np.eye(2))
    meas = LinearMeasurement(np.array([[1.0, 0.2]]), np.array([[0.25]]))
    T = 25
    t = np.cumsum(rng.uniform(0.1, 0.4, T))
    z = rng.normal(size=(T, 1))
    mask = rng.random(T) > 0.2
    filtered = kalman_filter(
        sde, meas, z, t, prior=GaussianPrior(np.zeros(2), np.eye(2)), mask=mask
    )
    smoothed = rts_smoother(filtered)
    m, P = smoothed.means, smoothed.covs[0]
    F, Pf, Pp = filtered.transition[0], filtered.covs[0], filtered.pred_covs
    Pp = Pp[0]
    if independent:
        factors = np.linalg.cholesky(P)
        paths = m + np.einsum("kij,nkj->nki", factors, rng.standard_normal((draws, T, 2)))
    else:
        paths = sample_paths(filtered, draws, seed=112)
    scores = []
    for k in range(T - 1):
        J = Pf[k] @ F[k + 1].T @ np.linalg.inv(Pp[k + 1])
        cross = J @ P[k + 1]
        cov = np.block([[P[k], cross], [cross.T, P[k + 1]]])
        pair = np.concatenate([paths[:, k] - m[k], paths[:, k + 1] - m[k + 1]], axis=1)
        scores.append(whitened_scores(pair, cov))
    return np.concatenate(scores)


@check(
    "generative.rts-backward-sampling",
    title="B.3.1: trajectories drawn backward from x_T (x_k | x_{k+1}, filtered estimate) have "
    "the RTS smoother's marginals and lag-one cross-covariances J_k P^s_{k+1} (Monte Carlo, "
    "estimators.backward_sampling)",
    source=seed(0, "B.3.1 (RTS backward sampling)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _rts_backward_sampling(quick: bool) -> Outcome:
    # 24 pairs x 14 scores = 336 asymptotically normal scores: P(max |z| > 5) ~ 2e-4 when the
    # law is right; independent draws (right marginals) miss the cross terms (tests/verify).
    draws = 20_000 if quick else 200_000
    z = backward_sampling_scores(draws)
    return Outcome(float(np.max(np.abs(z))), f"{draws} trajectories, {z.size} scores")

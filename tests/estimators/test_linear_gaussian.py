"""The linear-Gaussian core (`estimators.linear_gaussian`): the pieces the estimators share.

The filters that use them are tested against the dense oracle (test_kalman.py,
test_recurrent.py); these tests pin each piece against its defining formula.
"""

import numpy as np
import pytest

from estimators import linear_gaussian as lg
from sde_sim import LinearMeasurement, LinearSDE, linear_transition


def _spd(rng, n, size=()):
    A = rng.normal(size=(*size, n, n))
    return A @ np.swapaxes(A, -1, -2) / n + 0.3 * np.eye(n)


def test_update_is_the_information_form_posterior():
    """``P+ = (P^-1 + C^T R^-1 C)^-1``, ``K = P+ C^T R^-1``, ``log det S``, ``S = C P C^T + R``;
    with ``R / w`` per row it is the reweighted update (precision ``w C^T R^-1 C``)."""
    rng = np.random.default_rng(0)
    d, k, n = 3, 2, 5
    P, R, C = _spd(rng, d, (n,)), _spd(rng, k), rng.normal(size=(k, d))
    w = rng.uniform(0.2, 2.0, n)
    for noise, scale in ((R, np.ones(n)), (R / w[:, None, None], w)):
        P_new, K, Linv, logdet = lg.update(P, C, noise)
        info = np.linalg.inv(P) + scale[:, None, None] * (C.T @ np.linalg.solve(R, C))
        np.testing.assert_allclose(P_new, np.linalg.inv(info), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(K, P_new @ C.T @ np.linalg.inv(noise), rtol=1e-11)
        S = C @ P @ C.T + noise
        np.testing.assert_allclose(logdet, np.linalg.slogdet(S)[1], rtol=1e-13)
        np.testing.assert_allclose(np.swapaxes(Linv, -1, -2) @ Linv, np.linalg.inv(S), rtol=1e-12)
        np.testing.assert_array_equal(P_new, np.swapaxes(P_new, -1, -2))


def test_predict_is_the_exact_one_step_law():
    rng = np.random.default_rng(1)
    d, n = 3, 4
    sde = LinearSDE(-np.eye(d) + rng.normal(size=(d, d)) * 0.3, np.eye(d), u=rng.normal(size=d))
    maps = linear_transition(sde, rng.uniform(0.05, 0.5, n))
    m, P = rng.normal(size=(n, d)), _spd(rng, d, (n,))
    mean, cov = lg.predict(m, P, maps.Phi, maps.offset, maps.Qd)
    for i in range(n):
        F = maps.Phi[i]
        np.testing.assert_allclose(mean[i], F @ m[i] + maps.offset[i], rtol=1e-14)
        np.testing.assert_allclose(cov[i], F @ P[i] @ F.T + maps.Qd[i], rtol=1e-13)
    # one shared map (d, d) for every row gives the same as that map per row
    shared = lg.predict_mean(m, maps.Phi[0], maps.offset[0])
    per_row = lg.predict_mean(m, np.broadcast_to(maps.Phi[0], (n, d, d)), maps.offset[0])
    np.testing.assert_allclose(shared, per_row, rtol=1e-14)


def test_step_classes_merge_round_off_and_keep_distinct_steps():
    t = np.arange(50) * 0.1  # differences vary in their last bits
    steps = np.concatenate([np.diff(t), [0.2, 0.2 * (1 + 1e-10)]])
    assert np.unique(steps).size > 3
    sizes, classes = lg.step_classes(steps)
    assert sizes.size == 3  # 0.1, 0.2 and 0.2 (1 + 1e-10): far above the merge gap
    np.testing.assert_allclose(sizes[classes], steps, rtol=lg.STEP_RTOL)
    maps, index = lg.step_maps(LinearSDE(-np.eye(2), np.eye(2)), steps)
    assert maps.Phi.shape == (3, 2, 2) and index.shape == steps.shape


def test_diffuse_start_is_the_generalised_least_squares_estimate():
    rng = np.random.default_rng(2)
    d, k = 2, 3
    meas = LinearMeasurement(rng.normal(size=(k, d)), _spd(rng, k), b=rng.normal(size=k))
    z0 = rng.normal(size=(4, k))
    P0 = lg.diffuse_covariance(meas)
    Rinv = np.linalg.inv(meas.R)
    np.testing.assert_allclose(P0, np.linalg.inv(meas.C.T @ Rinv @ meas.C), rtol=1e-12)
    expected = (z0 - meas.b) @ (P0 @ meas.C.T @ Rinv).T
    np.testing.assert_allclose(lg.diffuse_mean(meas, z0, P0), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="full column rank 2, got rank 1"):
        lg.diffuse_covariance(LinearMeasurement(np.ones((3, 2)), np.eye(3)))
    with pytest.raises(ValueError, match="invertible R"):
        lg.diffuse_covariance(LinearMeasurement(np.eye(2), np.diag([1.0, 0.0])))
    with pytest.raises(ValueError, match="mask\\[:, 0\\] all True"):
        lg.require_first_observed(np.array([True, False]))


def test_model_and_prior_checks_name_the_argument():
    sde, meas = LinearSDE(-np.eye(2), np.eye(2)), LinearMeasurement.identity(2, 1.0)
    lg.check_model(sde, meas)
    with pytest.raises(TypeError, match="sde must be a sde_sim.LinearSDE"):
        lg.check_model("A", meas)
    with pytest.raises(TypeError, match="measurement must be a sde_sim.LinearMeasurement"):
        lg.check_model(sde, None)
    with pytest.raises(ValueError, match="measurement.C has 3 columns; the state has 2"):
        lg.check_model(sde, LinearMeasurement(np.ones((1, 3)), np.eye(1)))
    assert lg.prior_moments(None, 2) == (None, None, None)
    assert lg.prior_moments(lg.GaussianPrior(np.ones(2)), 2) == (None, None, None)
    mean, cov, time = lg.prior_moments(lg.GaussianPrior(cov=np.eye(2), time=-1), 2)
    np.testing.assert_array_equal(mean, 0.0)
    assert time == -1.0
    with pytest.raises(TypeError, match="prior must be an estimators.kalman.GaussianPrior"):
        lg.prior_moments((np.zeros(2), np.eye(2)), 2)
    with pytest.raises(ValueError, match="must not be after the first state time"):
        lg.check_prior_time(1.0, np.array([2.0, 0.5]))

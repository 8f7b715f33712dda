"""RTS backward sampling against the dense oracle's joint posterior; batching; bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.backward_sampling import rts_sample, sample_paths
from estimators.kalman import kalman_filter
from estimators.oracle import condition, joint_gaussian
from sde_sim import presets
from tests.estimators.test_kalman import _problem
from tests.strategies import stable_linear_sdes


def _affine_law(filtered):
    """Mean (T d,) and covariance (T d, T d) of one sequence's draws: the sampler is affine in
    its noise, x = c + M e, so c is its value at e = 0 and M's columns its responses to unit
    vectors."""
    T, d = filtered.means.shape
    basis = np.eye(T * d).reshape(T * d, T, d)
    c = rts_sample(filtered, np.zeros((1, T, d)))[0].reshape(-1)
    M = (rts_sample(filtered, basis).reshape(T * d, -1) - c).T
    return c, M @ M.T


@settings(max_examples=15)
@given(stable_linear_sdes(), st.integers(0, 2**32 - 1), st.integers(1, 10))
def test_law_of_the_draws_is_the_dense_joint_posterior(sde, seed, T):
    # The whole joint law, not only marginals and lag-one terms: the affine map's mean and
    # covariance against dense conditioning (no shared code but the transition). Both are a few
    # dozen float64 solves of well-conditioned (T d)^2 systems: 1e-8 relative leaves room for
    # covariances with condition numbers ~1e5.
    meas, t, z, mask, prior = _problem(sde, seed, T)
    filtered = kalman_filter(sde, meas, z, t, prior=prior, mask=mask)
    mean, cov = _affine_law(filtered)
    joint = joint_gaussian(sde, meas, t, prior.mean, prior.cov)
    want_mean, want_cov = condition(joint, z, mask)
    np.testing.assert_allclose(mean, want_mean, atol=1e-8 * max(1.0, np.abs(want_mean).max()))
    np.testing.assert_allclose(cov, want_cov, atol=1e-8 * max(1.0, np.abs(want_cov).max()))


def test_batched_draws_equal_each_sequence_alone():
    sde = presets.get("rotation-3d").scenario().system
    meas, t, z, _, prior = _problem(sde, 3, 12, k=2)
    rng = np.random.default_rng(4)
    zs = rng.normal(size=(3, 12, 2))
    masks = rng.random((3, 12)) > 0.3
    masks[:, 0] = True
    batched = kalman_filter(sde, meas, zs, t, prior=prior, mask=masks)
    noise = rng.standard_normal((5, 3, 12, 3))
    together = rts_sample(batched, noise)
    for b in range(3):
        alone = kalman_filter(sde, meas, zs[b], t, prior=prior, mask=masks[b])
        np.testing.assert_allclose(rts_sample(alone, noise[:, b]), together[:, b], atol=1e-12)


def test_sample_paths_is_seeded_and_checks_its_arguments():
    sde = presets.get("rotation-3d").scenario().system
    meas, t, z, mask, prior = _problem(sde, 5, 6)
    filtered = kalman_filter(sde, meas, z, t, prior=prior, mask=mask)
    first = sample_paths(filtered, 4, seed=1)
    assert first.shape == (4, 6, 3)
    np.testing.assert_array_equal(first, sample_paths(filtered, 4, seed=1))
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="draws must be an integer >= 1"):
            sample_paths(filtered, bad)
    with pytest.raises(ValueError, match=r"noise must have shape \(N, 6, 3\)"):
        rts_sample(filtered, np.zeros((2, 6, 2)))
    with pytest.raises(ValueError, match="noise must be finite"):
        rts_sample(filtered, np.full((1, 6, 3), np.nan))
    with pytest.raises(TypeError, match="FilterResult"):
        rts_sample((1, 2), np.zeros((1, 6, 3)))

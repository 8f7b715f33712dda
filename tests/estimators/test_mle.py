"""Batch precision-weighted MLE (seed 000 2.2, A.2): against a per-pair loop over the closed
forms, the diffuse Kalman filter/smoother (Q = 0), its eigenbasis tensor form, Monte Carlo, and
the measured gap to the Kalman posterior when Q > 0; shapes, batching and bad input.

Statistical tests use 5 sigma; the tolerances of the exact comparisons are derived in
`_ROUNDOFF`'s comment.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.closed_forms import drift
from estimators.closed_forms import measurement as meas_cf
from estimators.kalman import kalman_filter, rts_smoother
from estimators.mle import (
    DiagonalizableModel,
    batch_mle,
    eigen_batch_mle,
    mle_error_covariance,
    pairwise_terms,
)
from sde_sim import GaussianInitial, LinearMeasurement, LinearSDE, presets, simulate
from sde_sim.models import real_from_eigen
from tests.strategies import hurwitz_matrices
from verify.tools import random_eigensystem, random_spd, whitened_scores

SIGMA = 5.0
# Exact comparisons: both sides are a few dozen float64 operations on d x d matrices. With
# cond(C) <= 10 and summed precisions H of condition number up to ~1e4 (d <= 5), the states
# carry relative errors up to ~u cond(H) cond(C)^2 ~ 2e-10; 1e-9 relative to the largest entry
# leaves a factor 5 over that bound (the measured worst case here is 1.2e-13).
_ROUNDOFF = 1e-9


def _close(actual, expected, rtol=_ROUNDOFF):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert np.array_equal(np.isnan(actual), np.isnan(expected))
    finite = ~np.isnan(expected)
    scale = max(1.0, float(np.abs(expected[finite]).max(initial=0.0)))
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=0, atol=rtol * scale)


def _measurement(rng, d, *, delay=0.0):
    """Invertible C (cond <= 10), SPD R, random bias."""
    while True:
        C = np.eye(d) + 0.4 * rng.normal(size=(d, d))
        if np.linalg.cond(C) < 10:
            break
    return LinearMeasurement(C, random_spd(rng, d, floor=0.1), b=rng.normal(size=d), delay=delay)


def _problem(A, seed, T, *, B=3, process_noise=True):
    rng = np.random.default_rng(seed)
    d = A.shape[0]
    Q = random_spd(rng, d) if process_noise else np.zeros((d, d))
    sde = LinearSDE.from_covariance(A, Q, rng.normal(size=d))
    meas = _measurement(rng, d, delay=float(rng.uniform(0, 0.1)))
    t = np.cumsum(rng.uniform(0.05, 0.3, size=T))
    z = 3.0 * rng.normal(size=(B, T, d))
    mask = rng.random((B, T)) > 0.3
    mask[:, 0] = True  # the diffuse Kalman filter needs the first measurement
    z[~mask] = np.nan
    return sde, meas, t, z, mask


def _loop_mle(sde, meas, z, t, mask, causal):
    """Reference: one sequence, target by target, straight from the closed forms' public
    functions (`measurement_covariance`, and `pulled_back_measurement` with the delay) at each
    target's own lags, without the lag table or the einsum contractions of `batch_mle`."""
    T, d = z.shape
    out = np.full((T, d), np.nan)
    for i in range(T):
        js = np.flatnonzero(mask & ((np.arange(T) <= i) | (not causal)))
        if js.size == 0:
            continue
        dt = t[js] - t[i]
        P = np.linalg.inv(meas_cf.measurement_covariance(sde.A, sde.Q, meas.C, meas.R, dt))
        z_hat = drift.pulled_back_measurement(
            sde.A, meas.C, sde.u, meas.b, z[js], dt, delay=meas.delay
        )
        out[i] = np.linalg.solve(P.sum(axis=0), np.einsum("jkl,jl->k", P, z_hat))
    return out


# --- exactness -------------------------------------------------------------------------------


@settings(max_examples=10)
@given(hurwitz_matrices(dims=st.integers(1, 3)), st.integers(0, 2**32 - 1), st.booleans())
def test_general_form_equals_the_pairwise_loop(A, seed, causal):
    sde, meas, t, z, mask = _problem(A, seed, 7, B=2)
    result = batch_mle(sde, meas, z, t, mask=mask, causal=causal)
    for b in range(2):
        _close(result.outputs[b], _loop_mle(sde, meas, z[b], t, mask[b], causal))
    _close(result.states, (result.outputs - meas.b) @ np.linalg.inv(meas.C).T)


def test_regular_grid_lags_merged_only_at_round_off():
    """On a regular grid the T^2 lags collapse to 2T - 1 values (the merge in `_distinct`); the
    result equals the loop that evaluates every pair's own lag."""
    sc = presets.get("rotation-3d").scenario()
    t = 0.1 * np.arange(9) + 0.3
    z = np.random.default_rng(2).normal(size=(9, 3))
    mask = np.ones(9, dtype=bool)
    for causal in (True, False):
        mle = batch_mle(sc.system, sc.measurement, z, t, causal=causal)
        _close(mle.outputs, _loop_mle(sc.system, sc.measurement, z, t, mask, causal))


@settings(max_examples=15)
@given(hurwitz_matrices(dims=st.integers(1, 3)), st.integers(0, 2**32 - 1), st.integers(1, 12))
def test_zero_process_noise_equals_diffuse_kalman(A, seed, T):
    """Q = 0: causal MLE = Kalman filter from a diffuse prior, non-causal = RTS smoother (means,
    covariances, and the one-step predictions), with drift, bias, delay and missing values."""
    sde, meas, t, z, mask = _problem(A, seed, T, process_noise=False)
    filtered = kalman_filter(sde, meas, z, t, mask=mask)  # prior=None: diffuse
    smoothed = rts_smoother(filtered)
    causal = batch_mle(sde, meas, z, t, mask=mask)
    _close(causal.states, filtered.means)
    _close(causal.state_covs, filtered.covs[filtered.group])
    _close(causal.predictions[:, 1:], filtered.pred_means[:, 1:] @ meas.C.T + meas.b)
    np.testing.assert_array_equal(causal.times, filtered.times)
    noncausal = batch_mle(sde, meas, z, t, mask=mask, causal=False)
    _close(noncausal.states, smoothed.means)
    _close(noncausal.state_covs, smoothed.covs[smoothed.group])


@settings(max_examples=15)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.booleans())
def test_eigenbasis_form_equals_general_form(seed, d, causal):
    rng = np.random.default_rng(seed)
    lam, S = random_eigensystem(rng, d)
    c = np.ones(d, dtype=complex)
    for k in range(d // 2):  # conjugate pairs share the pair's columns of S
        c[2 * k] = rng.uniform(0.5, 2.0) * np.exp(1j * rng.uniform(-1, 1))
        c[2 * k + 1] = np.conj(c[2 * k])
    q = np.repeat(rng.uniform(0.0, 0.5, size=(d + 1) // 2), 2)[:d]
    r = np.repeat(rng.uniform(0.1, 1.0, size=(d + 1) // 2), 2)[:d]
    model = DiagonalizableModel(
        lam, S, q, r, C_eigenvalues=c, u=rng.normal(size=d), b=rng.normal(size=d)
    )
    T, B = 8, 3
    t = np.cumsum(rng.uniform(0.05, 0.4, size=(B, T)), axis=1)  # per-sequence irregular times
    z = rng.normal(size=(B, T, d)) * 2
    mask = rng.random((B, T)) > 0.3
    eigen = eigen_batch_mle(model, z, t, mask=mask, causal=causal)
    general = batch_mle(model.sde(), model.measurement(), z, t, mask=mask, causal=causal)
    for field in ("outputs", "states", "covs", "state_covs", "predictions"):
        _close(getattr(eigen, field), getattr(general, field))
    np.testing.assert_array_equal(eigen.n_used, general.n_used)


def test_from_linear_recovers_the_eigen_data_and_rejects_a_non_diagonal_q():
    rot = presets.get("rotation-3d").scenario()  # A normal, Q = 0.1 I, R = 0.25 I: diagonal
    model = DiagonalizableModel.from_linear(rot.system, rot.measurement)
    np.testing.assert_allclose(model.A, rot.system.A, atol=1e-13)
    np.testing.assert_allclose(model.Q, rot.system.Q, atol=1e-13)
    z = simulate(rot, 2, seed=0).z[:, :20]
    t = 0.1 * np.arange(20)
    _close(
        eigen_batch_mle(model, z, t).outputs, batch_mle(rot.system, rot.measurement, z, t).outputs
    )
    # afa-2d: S = [[1-i, 1+i], [1, 1]] is not unitary, so Q = sigma^2 I is not S diag(q) S^H:
    # the seed's tensor form is an approximation for its own 2-D experiment.
    afa = presets.get("afa-2d").scenario("b")
    with pytest.raises(ValueError, match="Q is not diagonal"):
        DiagonalizableModel.from_linear(afa.system, afa.measurement)


# --- statistics ------------------------------------------------------------------------------


def _rotation_paths(n_paths, *, sigma2, seed, n_steps=300):
    """rotation-3d with process variance sigma2 (0 allowed), measured every 0.1, from a
    Gaussian start (the estimators need no prior)."""
    sc = presets.get("rotation-3d").scenario()
    A = sc.system.A
    sde = LinearSDE(A, np.sqrt(sigma2) * np.eye(3))
    sc = sc.replace(
        system=sde,
        initial=GaussianInitial(np.array([4.0, 0.0, 1.0]), np.eye(3)),
        n_steps=n_steps,
    )
    return sc, simulate(sc, n_paths, seed=seed, method="exact")


def test_zero_noise_error_covariance_is_the_inverse_summed_precision():
    """Q = 0: z_bar_i - C x_i - b ~ N(0, (sum_j P^C_ij)^-1) exactly; whitened first and second
    moments of 4000 paths at 5 sigma, at a causal and a non-causal target."""
    sc, sim = _rotation_paths(4000, sigma2=0.0, seed=21, n_steps=150)
    target = sim.x_obs @ sc.measurement.C.T + sc.measurement.b
    for causal, i in ((True, 4), (True, 15), (False, 7)):
        mle = batch_mle(sc.system, sc.measurement, sim.z, sim.t_obs, causal=causal)
        cov = mle.covs[0, i]
        np.testing.assert_allclose(mle.covs[:, i], np.broadcast_to(cov, mle.covs[:, i].shape))
        scores = whitened_scores(mle.outputs[:, i] - target[:, i], cov)
        assert np.abs(scores).max() < SIGMA, scores


def test_error_covariance_with_process_noise_matches_monte_carlo():
    """Q > 0: the exact error covariance of `mle_error_covariance` (shared process noise
    included) against 2000 simulated paths at 5 sigma; the nominal (sum_j P^C_ij)^-1 fails."""
    sc, sim = _rotation_paths(2000, sigma2=0.1, seed=22, n_steps=500)
    target = sim.x_obs @ sc.measurement.C.T + sc.measurement.b
    for causal in (True, False):
        mle = batch_mle(sc.system, sc.measurement, sim.z, sim.t_obs, causal=causal)
        exact = mle_error_covariance(sc.system, sc.measurement, sim.t_obs, causal=causal)
        for i in (3, 12, 40):
            errors = mle.outputs[:, i] - target[:, i]
            assert np.abs(whitened_scores(errors, exact[i])).max() < SIGMA
            if i >= 12:  # enough shared process noise for the nominal form to be rejected
                assert np.abs(whitened_scores(errors, mle.covs[0, i])).max() > SIGMA


def test_process_noise_gap_to_the_kalman_posterior_is_measured():
    """afa-2d variant b (sigma^2 = 0.3, eta^2 = 0.5; the module docstring's table): the Kalman
    filter/smoother beat the batch MLE on every path's mean squared error over steps >= 10
    (sign test: 200 wins of 200 is 14 sigma, 5 sigma needs 136), the Monte Carlo MSE of the
    MLE agrees with the trace of `mle_error_covariance` within 5 standard errors, the exact
    covariances are ordered (Kalman <= MLE, PSD), and the estimates differ by far more than
    round-off."""
    sc = presets.get("afa-2d").scenario("b")
    sim = simulate(sc, 200, seed=11, method="exact")
    sde, meas = sc.system, sc.measurement
    filtered = kalman_filter(sde, meas, sim.z, sim.t_obs)
    pairs = ((True, filtered.means, filtered.covs[0]),)
    smoothed = rts_smoother(filtered)
    pairs += ((False, smoothed.means, smoothed.covs[0]),)
    late = slice(10, None)
    n = sim.z.shape[0]
    for causal, kalman, kalman_cov in pairs:
        mle = batch_mle(sde, meas, sim.z, sim.t_obs, causal=causal)
        exact = mle_error_covariance(sde, meas, sim.t_obs, causal=causal)
        sq_mle = np.sum((mle.states - sim.x_obs) ** 2, axis=-1)[:, late]
        sq_kf = np.sum((kalman - sim.x_obs) ** 2, axis=-1)[:, late]
        wins = int(np.sum(sq_kf.mean(1) < sq_mle.mean(1)))
        assert (wins - n / 2) / np.sqrt(n / 4) > SIGMA
        # per-path means are independent across paths: standard error of their average
        per_path = sq_mle.mean(1)
        predicted = np.trace(exact, axis1=-1, axis2=-2)[late].mean()  # C = I: state = output
        assert abs(per_path.mean() - predicted) < SIGMA * per_path.std(ddof=1) / np.sqrt(n)
        gap = exact - kalman_cov
        assert np.linalg.eigvalsh(gap[late]).min() > -1e-12
        assert np.trace(gap, axis1=-1, axis2=-2)[late].mean() > 0.5 * predicted
        distance = np.sqrt(np.mean(np.sum((mle.states - kalman) ** 2, axis=-1)[:, late]))
        assert distance > 0.1


# --- shapes, batching, missing values --------------------------------------------------------


def test_unbatched_input_and_per_sequence_times_equal_separate_runs():
    rng = np.random.default_rng(4)
    sc = presets.get("afa-2d").scenario("c")
    B, T = 3, 8
    t = np.cumsum(rng.uniform(0.05, 0.3, size=(B, T)), axis=1)
    z = rng.normal(size=(B, T, 2))
    mask = rng.random((B, T)) > 0.2
    batched = batch_mle(sc.system, sc.measurement, z, t, mask=mask, causal=False)
    for b in range(B):
        single = batch_mle(sc.system, sc.measurement, z[b], t[b], mask=mask[b], causal=False)
        assert single.outputs.shape == (T, 2) and single.covs.shape == (T, 2, 2)
        for field in batched._fields:
            _close(getattr(single, field), getattr(batched, field)[b])


def test_missing_values_and_empty_causal_rows():
    sc = presets.get("afa-2d").scenario("b")
    t = 0.1 * np.arange(6)
    z = np.random.default_rng(5).normal(size=(6, 2))
    mask = np.array([False, False, True, True, False, True])
    z[~mask] = np.nan
    mle = batch_mle(sc.system, sc.measurement, z, t, mask=mask)
    assert np.all(np.isnan(mle.outputs[:2])) and np.all(np.isfinite(mle.outputs[2:]))
    np.testing.assert_array_equal(mle.n_used, [0, 0, 1, 2, 2, 3])
    assert np.all(np.isnan(mle.predictions[:3])) and np.all(np.isfinite(mle.predictions[3:]))
    # a target's estimate from its own measurement alone is that measurement
    _close(mle.outputs[2], z[2])
    noncausal = batch_mle(sc.system, sc.measurement, z, t, mask=mask, causal=False)
    np.testing.assert_array_equal(noncausal.n_used, np.full(6, 3))
    terms = pairwise_terms(sc.system, sc.measurement, z, t, mask=mask)
    assert terms.used.shape == (1, 6, 6) and not np.any(terms.used[0, :, ~mask])


def test_prediction_is_the_propagated_estimate():
    sc = presets.get("rfa-ensemble-2d").scenario()
    sim = simulate(sc, 2, seed=1)
    mle = batch_mle(sc.system, sc.measurement, sim.z, sim.t_obs)
    h = np.diff(sim.t_obs)
    from scipy.linalg import expm

    expected = np.einsum("kij,bkj->bki", expm(sc.system.A * h[:, None, None]), mle.outputs[:, :-1])
    _close(mle.predictions[:, 1:], expected)  # C = I, b = u = 0: z_plus = e^{A h} z_bar


# --- bad input -------------------------------------------------------------------------------


def test_bad_input_names_the_argument():
    sc = presets.get("afa-2d").scenario("b")
    sde, meas = sc.system, sc.measurement
    t, z = 0.1 * np.arange(5), np.zeros((5, 2))
    with pytest.raises(ValueError, match="measurement.C must be square"):
        batch_mle(sde, LinearMeasurement(np.ones((1, 2)), np.eye(1)), z[:, :1], t)
    with pytest.raises(ValueError, match="measurement.C must be invertible"):
        batch_mle(sde, LinearMeasurement(np.ones((2, 2)), np.eye(2)), z, t)
    with pytest.raises(ValueError, match="measurement.R must be positive definite"):
        batch_mle(sde, LinearMeasurement(np.eye(2), np.diag([1.0, 0.0])), z, t)
    with pytest.raises(ValueError, match="z must have shape"):
        batch_mle(sde, meas, np.zeros((5, 3)), t)
    with pytest.raises(ValueError, match="t must have shape"):
        batch_mle(sde, meas, z, t[:4])
    with pytest.raises(ValueError, match="t must be strictly increasing"):
        batch_mle(sde, meas, z, t[::-1])
    bad = z.copy()
    bad[2, 0] = np.nan
    with pytest.raises(ValueError, match="z has NaN .* sequence 0, step 2"):
        batch_mle(sde, meas, bad, t)
    with pytest.raises(ValueError, match="mask must have shape"):
        batch_mle(sde, meas, z, t, mask=np.ones(4, dtype=bool))
    with pytest.raises(TypeError, match="mask must be boolean"):
        batch_mle(sde, meas, z, t, mask=np.ones(5))
    with pytest.raises(TypeError, match="sde must be"):
        batch_mle("A", meas, z, t)
    with pytest.raises(TypeError, match="z must be a real"):
        batch_mle(sde, meas, z.astype(complex), t)
    S = np.array([[1 - 1j, 1 + 1j], [1, 1]])
    with pytest.raises(ValueError, match="measurement_variances must be > 0"):
        DiagonalizableModel(np.array([-0.1 - 1j, -0.1 + 1j]), S, [0.1, 0.1], [0.0, 0.0])
    with pytest.raises(ValueError, match="do not give a real A"):
        DiagonalizableModel(np.array([-0.1 - 1j, -0.2 + 1j]), S, [0.1, 0.1], [1.0, 1.0])
    with pytest.raises(ValueError, match="C_eigenvalues must be nonzero"):
        DiagonalizableModel([-1.0, -2.0], np.eye(2), [0.1, 0.1], [1, 1], C_eigenvalues=[1, 0])
    with pytest.raises(ValueError, match="delay must be 0"):
        rot = presets.get("ou").scenario()
        DiagonalizableModel.from_linear(
            rot.system, LinearMeasurement(np.eye(4), np.eye(4), delay=0.1)
        )
    A = real_from_eigen(np.array([-0.1 - 1j, -0.1 + 1j]), S)
    assert np.isfinite(batch_mle(LinearSDE(A, np.eye(2)), meas, z, t).outputs).all()


def test_a_long_pause_gives_no_nan_and_no_information_backwards():
    """ou, one gap of 1e6 time units (a long pause in a recording): e^{-A dt} overflows for
    the later measurements pulled back across it. Their precision is 0 in the limit, so the
    non-causal MLE of the targets before the pause equals the MLE on those measurements
    alone; nothing is NaN and nothing warns."""
    import warnings

    from sde_sim import presets

    scenario = presets.get("ou").scenario()
    z = np.random.default_rng(0).normal(size=(1, 18, 4))
    t = np.arange(18.0)
    t[9:] += 1e6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        both = batch_mle(scenario.system, scenario.measurement, z, t, causal=False)
    before = batch_mle(scenario.system, scenario.measurement, z[:, :9], t[:9], causal=False)
    assert np.all(np.isfinite(both.outputs))
    assert np.max(np.abs(both.outputs[:, :9] - before.outputs)) < 1e-10

"""Kalman filter and RTS smoother against the dense joint-Gaussian oracle, pykalman; bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import kalman
from estimators.kalman import GaussianPrior, kalman_filter, rts_smoother
from estimators.oracle import dense_filter_smoother
from sde_sim import LinearMeasurement, LinearSDE, linear_transition, presets, simulate
from tests.strategies import stable_linear_sdes


def _problem(sde: LinearSDE, seed: int, T: int, *, k: int | None = None):
    """Random measurement model, irregular times, data, mask and a proper prior."""
    rng = np.random.default_rng(seed)
    d = sde.dim
    k = k or int(rng.integers(1, d + 2))
    C = rng.normal(size=(k, d))
    L = rng.normal(size=(k, k))
    meas = LinearMeasurement(
        C, L @ L.T / k + 0.1 * np.eye(k), b=rng.normal(size=k), delay=float(rng.uniform(0, 0.1))
    )
    t = np.cumsum(rng.uniform(0.02, 0.5, size=T))
    z = rng.normal(size=(T, k))
    mask = rng.random(T) > 0.25
    prior = GaussianPrior(rng.normal(size=d), np.diag(rng.uniform(0.5, 3.0, size=d)))
    return meas, t, z, mask, prior


@settings(max_examples=15)
@given(stable_linear_sdes(), st.integers(0, 2**32 - 1), st.integers(1, 12))
def test_filter_smoother_and_likelihood_equal_the_dense_oracle(sde, seed, T):
    meas, t, z, mask, prior = _problem(sde, seed, T)
    filtered = kalman_filter(sde, meas, z, t, prior=prior, mask=mask)
    smoothed = rts_smoother(filtered)
    f_m, f_c, s_m, s_c, loglik = dense_filter_smoother(sde, meas, z, t, prior.mean, prior.cov, mask)
    scale = max(1.0, np.abs(f_m).max())
    np.testing.assert_allclose(filtered.means, f_m, atol=1e-9 * scale)
    np.testing.assert_allclose(filtered.covs[0], f_c, atol=1e-9 * max(1.0, np.abs(f_c).max()))
    np.testing.assert_allclose(smoothed.means, s_m, atol=1e-9 * scale)
    np.testing.assert_allclose(smoothed.covs[0], s_c, atol=1e-9 * max(1.0, np.abs(s_c).max()))
    assert filtered.log_likelihood == pytest.approx(loglik, rel=1e-10, abs=1e-9)


def test_groups_of_masks_and_times_equal_separate_runs():
    sde = presets.get("rotation-3d").scenario().system
    rng = np.random.default_rng(1)
    meas = LinearMeasurement(rng.normal(size=(2, 3)), 0.3 * np.eye(2))
    B, T = 6, 25
    z = rng.normal(size=(B, T, 2))
    mask = rng.random((B, T)) > 0.3
    mask[::2] = mask[0]  # three sequences share a pattern
    t = np.cumsum(rng.uniform(0.05, 0.3, size=(B, T)), axis=1)
    t[::2] = t[1] = t[0]
    prior = GaussianPrior(np.zeros(3), np.eye(3))
    batched = kalman_filter(sde, meas, z, t, prior=prior, mask=mask)
    smoothed = rts_smoother(batched)
    assert batched.covs.shape[0] < B  # shared patterns share their covariances
    for b in range(B):
        one = kalman_filter(sde, meas, z[b], t[b], prior=prior, mask=mask[b])
        np.testing.assert_allclose(batched.means[b], one.means, atol=1e-12)
        np.testing.assert_allclose(batched.covs[batched.group[b]], one.covs[0], atol=1e-12)
        assert batched.log_likelihood[b] == pytest.approx(one.log_likelihood, rel=1e-12)
        np.testing.assert_allclose(smoothed.means[b], rts_smoother(one).means, atol=1e-12)


def test_diffuse_prior_is_the_limit_of_wide_priors():
    # A proper prior N(0, s I) tends to the diffuse start as s grows: the filtered means differ
    # by O(1/s), and the log-likelihood minus the first measurement's term converges too.
    sc = presets.get("afa-2d").scenario("b")
    sim = simulate(sc, 3, seed=2)
    diffuse = kalman_filter(sc.system, sc.measurement, sim.z, sim.t_obs)
    gaps = []
    for s in (1e4, 1e6, 1e8):
        wide = kalman_filter(
            sc.system,
            sc.measurement,
            sim.z,
            sim.t_obs,
            prior=GaussianPrior(np.zeros(2), s * np.eye(2)),
        )
        gaps.append(np.abs(wide.means - diffuse.means).max())
        first = -0.5 * (
            np.sum(sim.z[:, 0] ** 2, axis=1) / (s + 0.5) + 2 * np.log(2 * np.pi * (s + 0.5))
        )
        rest = wide.log_likelihood - first
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-6
    np.testing.assert_allclose(rest, diffuse.log_likelihood, atol=1e-5)


def test_agrees_with_pykalman():
    pykalman = pytest.importorskip("pykalman")
    sc = presets.get("rfa-ensemble-2d").scenario()
    sim = simulate(sc, 1, seed=3)
    t = np.arange(60) * 0.1
    z = sim.z[0, :60]
    maps = linear_transition(sc.system, 0.1)
    prior = GaussianPrior(np.array([5.0, 0.0]), 0.5 * np.eye(2))
    ours = kalman_filter(sc.system, sc.measurement, z, t, prior=prior)
    peer = pykalman.KalmanFilter(
        transition_matrices=maps.Phi[0],
        transition_offsets=maps.offset[0],
        transition_covariance=maps.Qd[0],
        observation_matrices=sc.measurement.C,
        observation_offsets=sc.measurement.b,
        observation_covariance=sc.measurement.R,
        initial_state_mean=prior.mean,
        initial_state_covariance=prior.cov,
    )
    means, covs = peer.filter(z)
    np.testing.assert_allclose(ours.means, means, atol=1e-10)
    np.testing.assert_allclose(ours.covs[0], covs, atol=1e-10)
    assert ours.log_likelihood == pytest.approx(peer.loglikelihood(z), rel=1e-10)
    smoothed, _ = peer.smooth(z)
    np.testing.assert_allclose(rts_smoother(ours).means, smoothed, atol=1e-10)


def test_long_sequences_stay_finite():
    sde = presets.get("ou").scenario().system
    meas = LinearMeasurement.identity(4, 0.1)
    T = 20_000
    z = np.random.default_rng(4).normal(size=(2, T, 4))
    out = kalman_filter(sde, meas, z, np.arange(T) * 0.1, mask=np.ones((2, T), dtype=bool))
    assert np.all(np.isfinite(out.means)) and np.all(np.isfinite(out.log_likelihood))


SDE2 = LinearSDE(np.array([[-0.3, -2.0], [1.5, -0.1]]), 0.5 * np.eye(2))
MEAS2 = LinearMeasurement.identity(2, 0.2)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"z": np.zeros((5, 3))}, r"z must have shape \(B, T, 2\) or \(T, 2\)"),
        ({"z": np.zeros((0, 5, 2))}, r"z must hold at least one sequence.*B = 0"),
        ({"t": np.arange(4.0)}, r"t must have shape \(5,\) or \(1, 5\)"),
        ({"t": np.array([0, 1, 1, 2, 3.0])}, "t must be strictly increasing"),
        ({"z": np.full((5, 2), np.nan)}, "NaN or infinite entries at observed measurements"),
        ({"mask": np.ones(5)}, "mask must be boolean"),
        ({"mask": np.ones(4, dtype=bool)}, r"mask must have shape \(5,\)"),
        (
            {"prior": GaussianPrior(np.zeros(2), -np.eye(2))},
            "prior.cov must be positive semidefinite",
        ),
        (
            {"mask": np.array([False, True, True, True, True])},
            "a diffuse prior needs the first measurement",
        ),
        (
            {"measurement": LinearMeasurement(np.ones((1, 2)), np.eye(1))},
            "a diffuse prior needs C with full column rank 2",
        ),
        ({"measurement": LinearMeasurement.identity(3, 1.0)}, "measurement.C has 3 columns"),
    ],
)
def test_bad_input(kwargs, pattern):
    args = {"sde": SDE2, "measurement": MEAS2, "z": np.zeros((5, 2)), "t": np.arange(5.0)}
    args.update(kwargs)
    if args["measurement"].out_dim != 2 and "z" not in kwargs:
        args["z"] = np.zeros((5, args["measurement"].out_dim))
    with pytest.raises((ValueError, TypeError), match=pattern):
        kalman_filter(
            args.pop("sde"), args.pop("measurement"), args.pop("z"), args.pop("t"), **args
        )


def test_prior_time_propagates_the_prior_to_the_first_measurement():
    sde = SDE2
    t = np.array([0.7, 1.0, 1.6])
    z = np.random.default_rng(5).normal(size=(3, 2))
    m0, P0 = np.array([1.0, -2.0]), np.diag([0.5, 2.0])
    maps = linear_transition(sde, 0.7)
    moved = GaussianPrior(
        maps.Phi[0] @ m0 + maps.offset[0], maps.Phi[0] @ P0 @ maps.Phi[0].T + maps.Qd[0]
    )
    at_zero = kalman_filter(sde, MEAS2, z, t, prior=GaussianPrior(m0, P0, time=0.0))
    explicit = kalman_filter(sde, MEAS2, z, t, prior=moved)
    np.testing.assert_allclose(at_zero.means, explicit.means, atol=1e-13)
    np.testing.assert_allclose(at_zero.covs, explicit.covs, atol=1e-13)
    assert at_zero.log_likelihood == pytest.approx(explicit.log_likelihood, rel=1e-13)
    with pytest.raises(ValueError, match="prior.time"):
        kalman_filter(sde, MEAS2, z, t, prior=GaussianPrior(m0, P0, time=1.0))


def test_a_delay_that_rounds_the_times_together_is_refused_by_every_estimator():
    """``delay = 1e300``: ``t + delay`` makes every stamp equal; the estimators once returned
    finite results for it. Each refuses it, naming the delay; a modest delay still runs."""
    from estimators.irls import irls
    from estimators.mle import batch_mle
    from estimators.recurrent import recurrent_filter

    z, t = np.zeros((5, 2)), np.arange(5.0)
    far = LinearMeasurement(np.eye(2), 0.2 * np.eye(2), delay=1e300)
    for estimate in (kalman_filter, batch_mle, recurrent_filter, irls):
        with pytest.raises(ValueError, match="delay 1e\\+300 rounds distinct time stamps"):
            estimate(SDE2, far, z, t)
    near = LinearMeasurement(np.eye(2), 0.2 * np.eye(2), delay=0.05)
    assert np.all(np.isfinite(kalman_filter(SDE2, near, z, t).means))


@pytest.mark.parametrize(
    ("d", "k", "diffuse"),
    [
        (2, 2, False),
        (2, 1, False),
        (3, 3, True),
        (5, 5, False),
        (5, 3, True),
        (9, 6, False),
        (16, 16, False),  # the benchmark's size, C = I
    ],
)
def test_per_sequence_masks_on_one_grid_equal_separate_runs(d, k, diffuse):
    # Every sequence its own mask on one time grid: the grouped paths (group-last for d, k <= 4,
    # gathered otherwise) against one single-sequence run each, predictions included; the
    # measurements of missing steps are NaN and must not be read.
    rng = np.random.default_rng(100 * d + k)
    A = 0.3 * rng.normal(size=(d, d)) - 2.0 * np.eye(d)  # then shifted:
    A -= max(0.0, np.linalg.eigvals(A).real.max() + 0.5) * np.eye(d)  # Re(eig) <= -0.5
    sde = LinearSDE(A, 0.4 * np.eye(d), u=rng.normal(size=d))
    C = np.eye(d) if k == d and d != 3 else rng.normal(size=(k, d))
    if diffuse and k < d:
        C = np.vstack([C, rng.normal(size=(d - k, d))])
    meas = LinearMeasurement(C, 0.3 * np.eye(C.shape[0]), b=rng.normal(size=C.shape[0]))
    B, T = 7, 30
    z = rng.normal(size=(B, T, C.shape[0]))
    mask = rng.random((B, T)) > 0.25
    mask[:, 0] = True
    mask[3] = mask[1]  # two sequences share a group
    mask[:, 5] = False  # a step where no group is observed
    mask[:, 6] = True  # and one where all are
    z[~mask] = np.nan
    t = np.arange(T) * 0.1
    prior = None if diffuse else GaussianPrior(rng.normal(size=d), np.eye(d), time=-0.05)
    batched = kalman_filter(sde, meas, z, t, prior=prior, mask=mask)
    assert batched.covs.shape[0] == B - 1
    pred_means, pred_covs = batched.pred_means, batched.pred_covs
    smoothed = rts_smoother(batched)
    for b in range(B):
        one = kalman_filter(sde, meas, z[b], t, prior=prior, mask=mask[b])
        g = batched.group[b]
        np.testing.assert_allclose(batched.means[b], one.means, atol=1e-12)
        np.testing.assert_allclose(batched.covs[g], one.covs[0], atol=1e-12)
        np.testing.assert_allclose(pred_means[b], one.pred_means, atol=1e-12)
        np.testing.assert_allclose(pred_covs[g], one.pred_covs[0], atol=1e-12)
        assert batched.log_likelihood[b] == pytest.approx(one.log_likelihood, rel=1e-12)
        np.testing.assert_allclose(smoothed.means[b], rts_smoother(one).means, atol=1e-11)


def test_predictions_are_the_predict_step_of_the_filtered_moments():
    sc = presets.get("afa-2d").scenario("b")
    sim = simulate(sc, 3, seed=5)
    prior = GaussianPrior(np.array([1.0, -1.0]), 2.0 * np.eye(2), time=sim.t_obs[0] - 0.3)
    out = kalman_filter(sc.system, sc.measurement, sim.z, sim.t_obs, prior=prior)
    maps = linear_transition(sc.system, np.diff(sim.t_obs, prepend=prior.time))
    F, c, Q = maps.Phi, maps.offset, maps.Qd
    pred_covs = out.pred_covs[0]
    np.testing.assert_allclose(pred_covs[0], F[0] @ prior.cov @ F[0].T + Q[0], atol=1e-13)
    np.testing.assert_allclose(
        pred_covs[1:], F[1:] @ out.covs[0, :-1] @ np.swapaxes(F[1:], 1, 2) + Q[1:], atol=1e-13
    )
    np.testing.assert_allclose(out.pred_means[:, 0], np.tile(F[0] @ prior.mean + c[0], (3, 1)))
    want = np.einsum("tij,btj->bti", F[1:], out.means[:, :-1]) + c[1:]
    np.testing.assert_allclose(out.pred_means[:, 1:], want, atol=1e-13)
    diffuse = kalman_filter(sc.system, sc.measurement, sim.z, sim.t_obs)
    assert np.all(np.isnan(diffuse.pred_means[:, 0])) and np.all(np.isnan(diffuse.pred_covs[:, 0]))


def _threaded_problem(d: int, B: int, T: int, *, grids: bool, seed: int):
    """Per-sequence masks (two sequences sharing one, one never observed), optionally on
    per-sequence time grids; data NaN where missing."""
    rng = np.random.default_rng(seed)
    A = 0.3 * rng.normal(size=(d, d)) - 2.0 * np.eye(d)
    A -= max(0.0, np.linalg.eigvals(A).real.max() + 0.5) * np.eye(d)  # Re(eig) <= -0.5
    sde = LinearSDE(A, 0.4 * np.eye(d), u=rng.normal(size=d))
    meas = LinearMeasurement(rng.normal(size=(d - 1, d)), 0.3 * np.eye(d - 1))
    z = rng.normal(size=(B, T, d - 1))
    mask = rng.random((B, T)) > 0.25
    mask[3] = mask[0]  # a group of two sequences (on the same grid when there are three)
    mask[-1] = False  # a sequence that is never observed
    z[~mask] = np.nan
    t = np.arange(T) * 0.1
    if grids:  # per-sequence times, three distinct grids
        t = np.cumsum(rng.uniform(0.05, 0.3, size=(3, T)), axis=1)[np.arange(B) % 3]
    return sde, meas, z, t, mask


@pytest.mark.parametrize(
    ("d", "B", "grids", "threads"),
    [
        (6, 11, False, 2),  # the gathered path, 2 uneven ranges (5 + 5 groups)
        (6, 11, False, 3),  # 3 ranges of 3, 4, 3 groups
        (6, 11, True, 4),  # several time grids
        (3, 11, True, 3),  # small matrices on several grids: also `_grouped_filter`
        (6, 5, False, 8),  # more threads than groups (4): one group each
    ],
)
def test_threads_give_the_one_thread_result(monkeypatch, d, B, grids, threads):
    # The groups' covariance recursions are independent and each is the same arithmetic in
    # any range, so splitting them over threads must not change the result beyond round-off
    # (the means' products run on fewer rows; BLAS may order their sums differently).
    monkeypatch.setattr(kalman, "_GROUPS_PER_THREAD", 1)  # split even these small batches
    sde, meas, z, t, mask = _threaded_problem(d, B, 40, grids=grids, seed=d + B)
    prior = GaussianPrior(np.ones(d), np.eye(d))
    one = kalman_filter(sde, meas, z, t, prior=prior, mask=mask, threads=1)
    many = kalman_filter(sde, meas, z, t, prior=prior, mask=mask, threads=threads)
    assert many.covs.shape[0] == one.covs.shape[0] == B - 1
    np.testing.assert_array_equal(many.group, one.group)
    np.testing.assert_allclose(many.covs, one.covs, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(many.means, one.means, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(many.log_likelihood, one.log_likelihood, rtol=1e-13)
    # The never-observed sequence: the prior carried forward, no log-likelihood.
    assert many.log_likelihood[-1] == 0.0
    assert np.all(np.isfinite(many.covs)) and np.all(np.isfinite(many.means))


def test_threads_with_a_diffuse_prior_and_one_sequence(monkeypatch):
    monkeypatch.setattr(kalman, "_GROUPS_PER_THREAD", 1)
    sde, _, z, t, mask = _threaded_problem(6, 9, 30, grids=False, seed=3)
    meas = LinearMeasurement.identity(6, 0.3)  # C = I, so a diffuse start is defined
    z = np.random.default_rng(3).normal(size=(9, 30, 6))
    mask[:, 0] = True  # a diffuse prior needs every sequence observed first
    z[~mask] = np.nan
    one = kalman_filter(sde, meas, z, t, mask=mask, threads=1)
    two = kalman_filter(sde, meas, z, t, mask=mask, threads=2)
    np.testing.assert_allclose(two.covs, one.covs, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(two.means, one.means, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(two.log_likelihood, one.log_likelihood, rtol=1e-13)
    single = kalman_filter(sde, meas, z[4], t, mask=mask[4], threads=2)  # one group
    np.testing.assert_allclose(single.means, one.means[4], atol=1e-12)
    np.testing.assert_allclose(single.covs[0], one.covs[one.group[4]], atol=1e-12)


@pytest.mark.parametrize("threads", [0, -1, 1.5, True, "2"])
def test_threads_must_be_a_positive_integer(threads):
    sde, meas, z, t, mask = _threaded_problem(6, 5, 5, grids=False, seed=0)
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        kalman_filter(sde, meas, z, t, mask=mask, prior=GaussianPrior(np.ones(6), np.eye(6)),
                      threads=threads)  # fmt: skip


def test_default_threads_is_at_most_two_and_the_usable_cpus():
    assert 1 <= kalman.default_threads() <= 2


def _blas_thread_counts() -> list[int]:
    """The thread count of each loaded BLAS library's pool, as found now."""
    pools = kalman.ThreadpoolController().select(user_api="blas").info()
    return [pool["num_threads"] for pool in pools]


def test_blas_threads_are_one_during_the_grouped_filter_and_restored_after(monkeypatch):
    # `threads` is what the grouped path uses: BLAS's own pools are limited to one thread
    # while it runs (they made two threads no faster than one) and given back afterwards.
    before = _blas_thread_counts()
    if not before or max(before) < 2:
        pytest.skip("needs a BLAS thread pool of two threads or more")
    seen = []
    run_groups = kalman._filter_groups

    def recording(*args):
        seen.append(_blas_thread_counts())
        return run_groups(*args)

    monkeypatch.setattr(kalman, "_filter_groups", recording)
    sde, meas, z, t, mask = _threaded_problem(6, 11, 10, grids=False, seed=1)
    kalman_filter(sde, meas, z, t, prior=GaussianPrior(np.ones(6), np.eye(6)), mask=mask)
    assert seen and all(counts == [1] * len(before) for counts in seen)
    assert _blas_thread_counts() == before


def test_grouped_covariances_are_stored_time_major():
    # Each step's stack is contiguous (the filter and the smoother work on covs[:, step]);
    # the result is still indexed (G, T, d, d), and the smoother keeps the layout.
    sde, meas, z, t, mask = _threaded_problem(6, 11, 10, grids=False, seed=2)
    out = kalman_filter(sde, meas, z, t, prior=GaussianPrior(np.ones(6), np.eye(6)), mask=mask)
    G = out.covs.shape[0]
    assert out.covs.shape == (G, 10, 6, 6) and G > 1
    assert out.covs[:, 3].flags.c_contiguous and not out.covs.flags.c_contiguous
    smoothed = kalman.rts_smoother(out)
    assert smoothed.covs[:, 3].flags.c_contiguous
    assert out.pred_covs[:, 3].flags.c_contiguous


def test_result_array_leaves_numpys_huge_page_advice_as_it_was():
    switch = kalman._huge_page_switch()
    if int(np.__version__.split(".")[0]) >= 2:
        assert switch is not None  # numpy 2 has it: the filter must find it
    if switch is None:
        pytest.skip("this numpy has no huge-page switch")
    original = switch(True)
    try:
        for state in (True, False):
            switch(state)
            out = kalman._result_array((5, 3, 2))
            assert out.shape == (5, 3, 2) and out.dtype == np.float64 and out.flags.writeable
            assert switch(state) is state  # what it was before this call: restored
    finally:
        switch(original)


def test_overlapping_calls_from_two_threads_restore_the_blas_threads():
    # The limit is process-wide: A enters, B enters, A leaves, B leaves must end with the
    # user's setting, not with the limit of one that B saw when it entered.
    before = _blas_thread_counts()
    if not before or max(before) < 2:
        pytest.skip("needs a BLAS thread pool of two threads or more")
    a, b = kalman._one_blas_thread(), kalman._one_blas_thread()
    a.__enter__()
    b.__enter__()
    a.__exit__(None, None, None)
    assert _blas_thread_counts() == [1] * len(before)  # B still runs: still limited
    b.__exit__(None, None, None)
    assert _blas_thread_counts() == before

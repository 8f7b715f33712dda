"""Iteratively reweighted recursive filter (seed 000 B.2): limits, fixed point, K, robustness, API.

The registry (`verify/checks/recurrent.py`) holds the oracle comparisons and the printed forms;
these tests pin the behaviour on random problems (hypothesis), the effect of the number of inner
iterations, the robustness claim, batching and the error messages.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import solve_discrete_are
from scipy.optimize import minimize

from estimators import recurrent as rec
from estimators.closed_forms import robust_weights as rw
from estimators.kalman import GaussianPrior, kalman_filter
from estimators.oracle import dense_filter_smoother
from sde_sim import (
    Contamination,
    EveryKSteps,
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    Scenario,
    linear_transition,
    simulate,
)
from sde_sim.models import covariance_from_eigen, real_from_eigen
from tests.strategies import stable_linear_sdes
from verify.problems.recurrent import (
    AFA_LAM,
    AFA_S,
    batch_mle,
    eigen_problem,
    mode_recursion,
    random_problem,
)
from verify.tools import relative_error

# Round-off bound for two float64 implementations of the same recursion over <= 100 steps with
# cond(S) <= 30 (verify.tools.random_eigensystem): ~1e-13 measured, 1e-10 allowed (as in the
# registry's numeric checks).
ROUNDOFF = 1e-10


def _measurement(seed: int, d: int, k: int) -> LinearMeasurement:
    rng = np.random.default_rng(seed)
    L = rng.normal(size=(k, k))
    return LinearMeasurement(
        rng.normal(size=(k, d)),
        L @ L.T / k + 0.1 * np.eye(k),
        b=rng.normal(size=k) * 0.3,
        delay=float(rng.uniform(0.0, 0.1)),
    )


def _contaminated(n_paths: int, seed: int, fraction: float = 0.1):
    """afa-2d dynamics, eta^2 = 0.25, 10% Cauchy outliers of scale 10 (seed 000 2.3's setting)."""
    sde = LinearSDE(real_from_eigen(AFA_LAM, AFA_S), np.sqrt(0.1) * np.eye(2))
    meas = LinearMeasurement.identity(2, 0.25)
    init = GaussianInitial(np.array([5.0, 0.0]), np.eye(2))
    sc = Scenario(
        sde, meas, init, 0.05, 200, EveryKSteps(2), Contamination(outlier_fraction=fraction)
    )
    sim = simulate(sc, n_paths, seed=seed, method="exact")
    return sde, meas, sim, GaussianPrior(init.mean, init.cov)


# --- the nu -> inf limit: which estimator ---------------------------------------------------


@settings(max_examples=15)
@given(stable_linear_sdes(), st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 4))
def test_nu_inf_is_the_kalman_filter_with_exact_discretisation(sde, seed, T, K):
    rng = np.random.default_rng(seed)
    d = sde.dim
    k = int(rng.integers(1, d + 2))
    meas = _measurement(seed, d, k)
    B = 3
    t = np.cumsum(rng.uniform(0.01, 0.8, size=(B, T)), axis=1)
    z = rng.normal(size=(B, T, k)) * 3
    mask = rng.random((B, T)) > 0.2
    prior = GaussianPrior(rng.normal(size=d), np.diag(rng.uniform(0.2, 3.0, d)))
    ours = rec.recurrent_filter(sde, meas, z, t, prior=prior, mask=mask, n_iter=K)
    ref = kalman_filter(sde, meas, z, t, prior=prior, mask=mask)
    assert relative_error(ours.means, ref.means) <= ROUNDOFF
    assert relative_error(ours.covs, ref.covs[ref.group]) <= ROUNDOFF
    assert relative_error(ours.pred_covs, ref.pred_covs[ref.group]) <= ROUNDOFF
    # w = 1: the second update repeats the first bit for bit, so K >= 2 stops there
    assert np.all(ours.weights[mask] == 1.0)
    assert np.all(ours.iterations[mask] == min(K, 2))
    if K >= 2:
        assert np.all(ours.final_change == 0.0) and np.all(ours.converged)


def test_a_prior_given_before_the_first_measurement_is_predicted_to_it():
    """``GaussianPrior(time=...)``: at nu = inf the filter equals `kalman_filter` with the same
    prior time (it once ignored the time and differed by 0.49); per-sequence first times and a
    measurement delay included. A time after the first state, or NaN, is refused."""
    rng = np.random.default_rng(8)
    sde, _, z, t, _ = random_problem(rng, 3, 2, B=2, T=15)
    meas = _measurement(8, 3, 2)
    prior = GaussianPrior(rng.normal(size=3), np.diag([0.5, 1.0, 2.0]), time=t.min() - 1.3)
    ours = rec.recurrent_filter(sde, meas, z, t, prior=prior)
    ref = kalman_filter(sde, meas, z, t, prior=prior)
    assert relative_error(ours.means, ref.means) <= ROUNDOFF
    assert relative_error(ours.covs, ref.covs[ref.group]) <= ROUNDOFF
    untimed = rec.recurrent_filter(sde, meas, z, t, prior=prior._replace(time=None))
    assert relative_error(untimed.means, ours.means) > 1e-3  # the time matters
    with pytest.raises(ValueError, match="prior.time .* must not be after the first state"):
        rec.recurrent_filter(sde, meas, z, t, prior=prior._replace(time=t.max()))
    with pytest.raises(ValueError, match="prior.time must be finite"):
        rec.recurrent_filter(sde, meas, z, t, prior=prior._replace(time=float("nan")))


def test_nu_inf_with_missing_values_equals_the_dense_oracle():
    rng = np.random.default_rng(3)
    sde, meas, z, t, _ = random_problem(rng, 3, 2, B=1, T=20)
    mask = rng.random(20) > 0.3
    prior = GaussianPrior(np.zeros(3), 2.0 * np.eye(3))
    ours = rec.recurrent_filter(sde, meas, z[0], t[0], prior=prior, mask=mask)
    f_m, f_c, *_ = dense_filter_smoother(sde, meas, z[0], t[0], prior.mean, prior.cov, mask)
    assert relative_error(ours.means, f_m) <= ROUNDOFF
    assert relative_error(ours.covs, f_c) <= ROUNDOFF


def test_without_process_noise_it_is_the_batch_mle_and_with_it_it_is_not():
    """Q = 0: the recursion (diffuse) is seed 000 2.2's batch estimator; Q > 0: it is the Kalman
    filter, and 2.2's estimator (pulled-forward estimates treated as independent) is not."""
    rng = np.random.default_rng(8)
    lam = np.array([-0.3 - 1.2j, -0.3 + 1.2j])
    S = np.array([[1 - 1j, 1 + 1j], [1, 1]])
    A = real_from_eigen(lam, S)
    C, R = np.array([[1.0, 0.4], [-0.2, 0.9]]), np.array([[0.3, 0.05], [0.05, 0.2]])
    meas = LinearMeasurement(C, R)
    t = np.cumsum(rng.uniform(0.05, 0.4, 30))
    z = rng.normal(size=(30, 2))
    noiseless = rec.recurrent_filter(LinearSDE(A, np.zeros((2, 1))), meas, z, t)
    assert relative_error(noiseless.means @ C.T, batch_mle(A, np.zeros((2, 2)), C, R, z, t)) < 1e-9
    Q = 0.5 * np.eye(2)
    noisy_sde = LinearSDE.from_covariance(A, Q)
    noisy = rec.recurrent_filter(noisy_sde, meas, z, t)
    assert relative_error(noisy.means, kalman_filter(noisy_sde, meas, z, t).means) <= ROUNDOFF
    gap = relative_error(noisy.means @ C.T, batch_mle(A, Q, C, R, z, t))
    assert gap > 0.05  # measured 0.2: a different estimator, not round-off


def test_uniform_steps_reach_the_steady_state_exponential_average():
    """With uniform steps the gain tends to the DARE gain: the late estimates are the fixed-gain
    recursion x_i = (I - K C) e^{Ah} x_{i-1} + K z_i (an exponentially weighted average)."""
    sde = LinearSDE.from_covariance(real_from_eigen(AFA_LAM, AFA_S), 0.2 * np.eye(2))
    meas = LinearMeasurement.identity(2, 0.3)
    h, T = 0.1, 300
    t = h * np.arange(T)
    z = np.random.default_rng(2).normal(size=(T, 2))
    res = rec.recurrent_filter(sde, meas, z, t)
    maps = linear_transition(sde, h)
    P_pred = solve_discrete_are(maps.Phi[0].T, np.eye(2), maps.Qd[0], meas.R)
    K = P_pred @ np.linalg.inv(P_pred + meas.R)
    F = (np.eye(2) - K) @ maps.Phi[0]
    x = res.means[200].copy()
    for i in range(201, T):
        x = F @ x + K @ z[i]
        np.testing.assert_allclose(res.means[i], x, atol=1e-10)


# --- finite nu: weights, fixed point, objective -------------------------------------------


def test_first_inner_iteration_is_the_information_form_update_with_robust_weights():
    rng = np.random.default_rng(4)
    meas = _measurement(1, 3, 2)
    xm, Pm = rng.normal(size=(5, 3)), np.stack([np.diag(rng.uniform(0.3, 2, 3)) for _ in range(5)])
    z = rng.normal(size=(5, 2)) * 4
    innovation = z - xm @ meas.C.T - meas.b
    m = np.einsum("bk,kl,bl->b", innovation, np.linalg.inv(meas.R), innovation)
    for weight, expected in (
        ("student-t", rw.student_t_weight(m, 3.0, 2)),
        ("rational", rw.rational_weight(m, 3.0)),
    ):
        u = rec.robust_update(xm, Pm, z, meas, nu=3.0, weight=weight, n_iter=1)
        np.testing.assert_allclose(u.weight, expected, rtol=1e-14)
        info = np.linalg.inv(Pm) + expected[:, None, None] * (
            meas.C.T @ np.linalg.inv(meas.R) @ meas.C
        )
        vec = np.linalg.solve(Pm, xm[..., None])[..., 0] + expected[:, None] * (
            (z - meas.b) @ np.linalg.inv(meas.R) @ meas.C
        )
        np.testing.assert_allclose(
            u.mean, np.linalg.solve(info, vec[..., None])[..., 0], rtol=1e-12
        )
        np.testing.assert_allclose(u.cov, np.linalg.inv(info), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("weight", rec.WEIGHTS)
def test_converged_update_is_the_minimiser_of_the_step_objective(weight):
    """Independent reference: BFGS on J (a general-purpose minimiser started at the prior)."""
    rng = np.random.default_rng(6)
    meas = _measurement(2, 2, 2)
    xm, Pm = np.array([1.0, -0.5]), np.array([[1.0, 0.3], [0.3, 0.6]])
    for z in (xm @ meas.C.T + meas.b + rng.normal(size=2), xm @ meas.C.T + 9.0):
        u = rec.robust_update(xm, Pm, z, meas, nu=2.0, weight=weight, n_iter=1000, tol=1e-13)
        assert u.converged

        def J(x, z=z):
            return float(rec.step_objective(x, xm, Pm, z, meas, nu=2.0, weight=weight))

        best = minimize(J, xm, method="BFGS", options={"gtol": 1e-12})
        np.testing.assert_allclose(u.mean, best.x, atol=1e-6)
        assert J(u.mean) <= best.fun + 1e-12 * abs(best.fun)


@settings(max_examples=20)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from(rec.WEIGHTS),
    st.floats(0.3, 20.0),
    st.sampled_from([1.0, 0.7, 0.3]),
)
def test_objective_never_increases_along_the_inner_iterations(seed, weight, nu, damping):
    """Majorise-minimise: rho is concave, so each frozen-weight quadratic lies above J."""
    rng = np.random.default_rng(seed)
    d, k = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    meas = _measurement(seed, d, k)
    xm = rng.normal(size=(4, d))
    L = rng.normal(size=(4, d, d))
    Pm = L @ np.swapaxes(L, 1, 2) / d + 0.1 * np.eye(d)
    z = rng.standard_t(1.0, size=(4, k)) * 3
    kw = dict(nu=nu, weight=weight, tol=0.0, damping=damping)
    values = np.array(
        [
            rec.step_objective(
                rec.robust_update(xm, Pm, z, meas, n_iter=kk, **kw).mean,
                xm,
                Pm,
                z,
                meas,
                nu=nu,
                weight=weight,
            )
            for kk in range(1, 16)
        ]
    )
    assert np.all(np.diff(values, axis=0) <= 1e-12 * np.abs(values[:-1]))


def test_inner_iterations_converge_as_K_grows_to_the_fixed_point():
    """K = 1, 2, 4, ..., 128 on a contaminated trajectory: the error to the converged filter
    shrinks with K and K = 64 is at the fixed point; the change per inner iteration decays at the
    rate predicted by the Jacobian of the IRLS map at the fixed point."""
    sde, meas, sim, prior = _contaminated(8, seed=7)
    kw = dict(nu=4.0, prior=prior)
    ref = rec.recurrent_filter(sde, meas, sim.z, sim.t_obs, n_iter=5000, tol=1e-14, **kw)
    assert np.all(ref.converged)
    scale = np.abs(ref.means).max()
    errors = []
    for K in (1, 2, 4, 8, 16, 32, 64, 128):
        run = rec.recurrent_filter(sde, meas, sim.z, sim.t_obs, n_iter=K, tol=0.0, **kw)
        errors.append(np.abs(run.means - ref.means).max() / scale)
    errors = np.array(errors)
    # measured: 0.12, 0.069, 0.018, 4.9e-4, 2.5e-7, 6.4e-14, 3.7e-16, 3.7e-16
    assert np.all(errors[1:] <= errors[:-1] + 1e-15)
    assert errors[0] > 1e-2 and errors[-2] < 1e-13 and errors[-1] < 1e-13

    # The slowest step (36 iterations to 1e-13). With delta = 1 the map is
    # T(x) = x^- + u(w(m(x))), u(w) = w (P^-1 + w H)^-1 C^T R^-1 e0 (H = C^T R^-1 C, e0 the
    # innovation), whose Jacobian is rank one: u'(w) w'(m) grad m^T. Its only nonzero
    # eigenvalue grad m^T u'(w) w'(m) is the asymptotic ratio of successive changes.
    b, s = np.unravel_index(np.argmax(ref.iterations), ref.iterations.shape)
    xm, P, z = ref.pred_means[b, s], ref.pred_covs[b, s], sim.z[b, s]
    u = rec.robust_update(xm, P, z, meas, nu=4.0, n_iter=500, tol=1e-13)
    assert abs(u.mean - ref.means[b, s]).max() <= 1e-12 * scale
    C, Ri, k = meas.C, np.linalg.inv(meas.R), 2
    r = z - C @ u.mean - meas.b
    w = (4.0 + k) / (4.0 + r @ Ri @ r)
    M_inv = np.linalg.inv(np.linalg.inv(P) + w * C.T @ Ri @ C)
    c = C.T @ Ri @ (z - C @ xm - meas.b)
    du = M_inv @ (c - C.T @ Ri @ C @ (M_inv @ (w * c)))
    rate = abs((-2 * C.T @ Ri @ r) @ du * (-(w**2) / (4.0 + k)))  # w'(m) = -w^2/(nu + k)
    ch = u.changes[: u.iterations]
    settled = (ch[:-1] < 1e-4) & (ch[:-1] > 1e-9)  # past the transient, above round-off
    np.testing.assert_allclose((ch[1:] / ch[:-1])[settled], rate, rtol=1e-3)  # measured 0.3876
    assert 0 < rate < 1


def test_damping_slows_the_iteration_by_exactly_one_minus_delta():
    """nu = inf: x^(k) = x_KF - (1 - delta)^k (x_KF - x^-), so successive changes shrink by
    1 - delta and the fixed point is the Kalman update."""
    rng = np.random.default_rng(9)
    meas = _measurement(3, 2, 2)
    xm, Pm, z = rng.normal(size=2), np.eye(2), rng.normal(size=2) * 3
    u = rec.robust_update(xm, Pm, z, meas, damping=0.4, n_iter=200, tol=1e-12)
    ch = u.changes[: u.iterations]
    # each change carries ~1e-15 absolute round-off: where it is above 1e-6 the ratio is exact
    # to ~1e-9
    big = ch[:-1] > 1e-6
    assert big.sum() > 20
    np.testing.assert_allclose((ch[1:] / ch[:-1])[big], 0.6, rtol=1e-8)
    kalman = rec.robust_update(xm, Pm, z, meas, n_iter=1)
    np.testing.assert_allclose(u.mean, kalman.mean, rtol=1e-11)
    # finite nu: same fixed point with or without damping
    a = rec.robust_update(xm, Pm, z + 10, meas, nu=3.0, n_iter=2000, tol=1e-13)
    b = rec.robust_update(xm, Pm, z + 10, meas, nu=3.0, n_iter=2000, tol=1e-13, damping=0.5)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-10)


def test_approaches_the_kalman_filter_at_rate_one_over_nu():
    """w = 1 + c(m)/nu + O(nu^-2) for both weights, so the estimate is the Kalman one plus
    D/nu + O(nu^-2): the nu = 1e3 deviation is 10 times the nu = 1e4 one, up to O(m/nu) ~ 1%."""
    sde, meas, sim, prior = _contaminated(4, seed=5, fraction=0.0)
    kf = rec.recurrent_filter(sde, meas, sim.z, sim.t_obs, prior=prior)
    for weight in rec.WEIGHTS:
        dev = [
            rec.recurrent_filter(
                sde, meas, sim.z, sim.t_obs, prior=prior, nu=nu, weight=weight
            ).means
            - kf.means
            for nu in (1e3, 1e4)
        ]
        assert np.abs(dev[0] - 10 * dev[1]).max() <= 0.02 * np.abs(dev[0]).max()  # measured 0.6%


# --- robustness -----------------------------------------------------------------------------


def test_reweighting_beats_the_kalman_filter_under_outliers():
    """10% Cauchy outliers, 64 paths: per-path RMSE against the true states. Sign test: with no
    systematic difference the number of paths the robust filter wins is Bin(64, 1/2), mean 32,
    sd 4; require 5 sd above (>= 52). Measured: 64 of 64, RMSE 0.35 vs 93 (student-t, nu = 4)."""
    sde, meas, sim, prior = _contaminated(64, seed=7)
    kf = rec.recurrent_filter(sde, meas, sim.z, sim.t_obs, prior=prior)
    rmse_kf = np.sqrt(np.sum((kf.means - sim.x_obs) ** 2, axis=-1).mean(axis=1))
    for weight in rec.WEIGHTS:
        robust = rec.recurrent_filter(
            sde, meas, sim.z, sim.t_obs, prior=prior, nu=4.0, weight=weight
        )
        assert np.all(robust.converged)
        rmse = np.sqrt(np.sum((robust.means - sim.x_obs) ** 2, axis=-1).mean(axis=1))
        assert np.sum(rmse < rmse_kf) >= 52
        # outliers get small weights, inliers weights near 1
        w_out = np.median(robust.weights[sim.outlier])
        w_in = np.median(robust.weights[~sim.outlier])
        assert w_out < 0.2 < 0.6 < w_in


def test_printed_inner_iteration_drifts_to_the_measurement():
    """B.2's printed inner loop (prior replaced by the iterate) ends at the measurement itself."""
    sde, meas, sim, _ = _contaminated(2, seed=1, fraction=0.0)
    zs = sim.z @ np.linalg.inv(AFA_S).T
    q = r = np.array([0.5, 0.5])
    out = mode_recursion(AFA_LAM, q, r, zs, 0.1, 200, np.zeros(2), np.ones(2), ("inner-iteration",))
    np.testing.assert_allclose(out, zs, atol=1e-9)
    fixed = mode_recursion(AFA_LAM, q, r, zs, 0.1, 200, np.zeros(2), np.ones(2))
    assert np.abs(fixed - zs).max() > 0.1


# --- eigenbasis form -------------------------------------------------------------------------


@settings(max_examples=12)
@given(st.integers(0, 2**32 - 1), st.sampled_from(rec.WEIGHTS), st.sampled_from([np.inf, 1.5, 6.0]))
def test_eigenbasis_form_equals_the_state_space_form(seed, weight, nu):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 5))
    lam, S, q, r, sde, meas = eigen_problem(rng, d)
    B, T = 3, 15
    t = np.cumsum(rng.uniform(0.01, 0.6, size=(B, T)), axis=1)
    z = rng.standard_t(1.5, size=(B, T, d))
    mask = rng.random((B, T)) > 0.2
    mask[:, 0] = True
    kw = dict(nu=nu, weight=weight, n_iter=20, tol=0.0, mask=mask)
    a = rec.recurrent_filter(sde, meas, z, t, **kw)
    b = rec.eigen_recurrent_filter(lam, S, q, r, z, t, **kw)
    assert relative_error(b.means, a.means) <= ROUNDOFF
    assert relative_error(b.covs, a.covs) <= ROUNDOFF
    np.testing.assert_allclose(b.weights, a.weights, rtol=1e-9)


def test_eigenbasis_form_estimates_C_x_for_a_commuting_C_and_allows_pure_rotation():
    lam = np.array([1.3j, -1.3j, -0.4])  # a pure rotation plane and a decaying axis
    rng = np.random.default_rng(12)
    v = rng.normal(size=3) + 1j * rng.normal(size=3)
    S = np.stack([v, v.conj(), rng.normal(size=3) + 0j], axis=1)
    c = np.array([0.7 * np.exp(0.4j), 0.7 * np.exp(-0.4j), 1.5])
    q, r = np.array([0.3, 0.3, 0.8]), np.array([0.2, 0.2, 0.5])
    sde = LinearSDE.from_covariance(real_from_eigen(lam, S), covariance_from_eigen(S, q))
    C = real_from_eigen(c, S, name="C")
    meas = LinearMeasurement(C, covariance_from_eigen(S, r, name="R"))
    t = np.cumsum(rng.uniform(0.05, 0.5, 25))
    z = rng.standard_t(2.0, size=(25, 3))
    prior_x = rng.normal(size=3)
    prior_v = np.array([2.0, 2.0, 1.0])
    state = rec.recurrent_filter(
        sde,
        meas,
        z,
        t,
        nu=3.0,
        n_iter=30,
        tol=0.0,
        prior=GaussianPrior(prior_x, covariance_from_eigen(S, prior_v, name="prior")),
    )
    modes = rec.eigen_recurrent_filter(
        lam,
        S,
        np.abs(c) ** 2 * q,
        r,
        z,
        t,
        nu=3.0,
        n_iter=30,
        tol=0.0,
        prior_mean=C @ prior_x,
        prior_variances=np.abs(c) ** 2 * prior_v,
    )
    assert relative_error(modes.means, state.means @ C.T) <= ROUNDOFF
    assert relative_error(modes.covs, C @ state.covs @ C.T) <= ROUNDOFF
    assert modes.means.shape == (25, 3) and modes.mode_variances.shape == (25, 3)


# --- batching, missing values, shapes ------------------------------------------------------


def test_batched_run_equals_separate_runs_and_missing_steps_only_predict():
    rng = np.random.default_rng(10)
    sde, meas, z, t, _ = random_problem(rng, 3, 2, B=5, T=18)
    mask = rng.random((5, 18)) > 0.3
    prior = GaussianPrior(np.zeros(3), np.eye(3))
    batched = rec.recurrent_filter(sde, meas, z, t, nu=2.0, prior=prior, mask=mask)
    for b in range(5):
        one = rec.recurrent_filter(sde, meas, z[b], t[b], nu=2.0, prior=prior, mask=mask[b])
        np.testing.assert_allclose(batched.means[b], one.means, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(batched.covs[b], one.covs, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(batched.iterations[b], one.iterations)
    missing = ~mask
    np.testing.assert_array_equal(batched.means[missing], batched.pred_means[missing])
    assert np.all(np.isnan(batched.weights[missing])) and np.all(batched.iterations[missing] == 0)
    assert np.all(batched.iterations[mask] >= 1)


def test_diffuse_start_uses_the_first_measurement_and_its_weight():
    meas = LinearMeasurement(np.eye(2), np.array([[0.4, 0.1], [0.1, 0.3]]), b=np.array([1.0, 2.0]))
    sde = LinearSDE.from_covariance(-0.5 * np.eye(2), 0.1 * np.eye(2))
    z = np.array([[3.0, 1.0], [2.0, 0.0]])
    res = rec.recurrent_filter(sde, meas, z, [0.0, 0.5], nu=4.0)
    np.testing.assert_allclose(res.means[0], z[0] - meas.b)
    np.testing.assert_allclose(res.covs[0], meas.R / (1 + 2 / 4.0))  # w(0) = (nu + k)/nu
    assert np.all(np.isnan(res.pred_means[0]))
    with pytest.raises(ValueError, match="first measurement"):
        rec.recurrent_filter(sde, meas, z, [0.0, 0.5], mask=np.array([False, True]))


# --- bad input -----------------------------------------------------------------------------


def test_bad_input_names_the_argument():
    sde = LinearSDE.from_covariance(-np.eye(2), np.eye(2))
    meas = LinearMeasurement.identity(2, 0.5)
    z, t = np.zeros((5, 2)), np.arange(5.0)
    cases = [
        (dict(nu=0.0), ValueError, "nu must be > 0"),
        (dict(nu=float("nan")), ValueError, "nu must be > 0"),
        (dict(nu="4"), TypeError, "nu must be a real number"),
        (dict(weight="huber"), ValueError, "weight must be one of"),
        (dict(n_iter=0), ValueError, "n_iter must be >= 1"),
        (dict(damping=0.0), ValueError, "damping must be > 0"),
        (dict(damping=1.5), ValueError, "damping must be in"),
        (dict(tol=-1.0), ValueError, "tol must be >= 0"),
    ]
    for kwargs, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            rec.recurrent_filter(sde, meas, z, t, **kwargs)
    with pytest.raises(ValueError, match=r"z must have shape \(B, T, 2\)"):
        rec.recurrent_filter(sde, meas, np.zeros((5, 3)), t)
    bad = z.copy()
    bad[2, 0] = np.nan
    with pytest.raises(ValueError, match="step 2"):
        rec.recurrent_filter(sde, meas, bad, t)
    rec.recurrent_filter(sde, meas, bad, t, mask=np.arange(5) != 2)  # declared missing: fine
    with pytest.raises(ValueError, match="strictly increasing"):
        rec.recurrent_filter(sde, meas, z, t[::-1])
    with pytest.raises(TypeError, match="mask must be boolean"):
        rec.recurrent_filter(sde, meas, z, t, mask=np.ones(5))
    singular = LinearMeasurement(np.eye(2), np.diag([1.0, 0.0]))
    prior = GaussianPrior(np.zeros(2), np.eye(2))
    rec.recurrent_filter(sde, singular, z, t, prior=prior)  # nu = inf needs no R^-1
    with pytest.raises(ValueError, match="measurement.R must be positive definite"):
        rec.recurrent_filter(sde, singular, z, t, prior=prior, nu=3.0)
    with pytest.raises(TypeError, match="sde must be"):
        rec.recurrent_filter("sde", meas, z, t)
    with pytest.raises(ValueError, match="prior_cov must be positive semidefinite"):
        rec.robust_update(np.zeros(2), -np.eye(2), np.zeros(2), meas)
    with pytest.raises(ValueError, match="prior_mean must have shape"):
        rec.robust_update(np.zeros(3), np.eye(2), np.zeros(2), meas)


def test_bad_eigen_data_names_the_argument():
    z, t = np.zeros((4, 2)), np.arange(4.0)
    q = r = np.array([0.5, 0.5])
    with pytest.raises(ValueError, match="measurement_variances must be > 0"):
        rec.eigen_recurrent_filter(AFA_LAM, AFA_S, q, [0.0, 0.0], z, t)
    with pytest.raises(ValueError, match="measurement_variances"):
        rec.eigen_recurrent_filter(AFA_LAM, AFA_S, q, [0.5, 0.7], z, t)  # conjugates differ
    with pytest.raises(ValueError, match="real A"):
        rec.eigen_recurrent_filter(np.array([-1 + 1j, -1 + 1j]), AFA_S, q, r, z, t)
    with pytest.raises(ValueError, match="together"):
        rec.eigen_recurrent_filter(AFA_LAM, AFA_S, q, r, z, t, prior_mean=np.zeros(2))
    with pytest.raises(ValueError, match="process_variances must have shape"):
        rec.eigen_recurrent_filter(AFA_LAM, AFA_S, [0.5], r, z, t)

"""Robust IRLS (seed 000 2.3, A.4; seed 004 eqs. 10-11, A.5): the Gaussian limit is the batch
MLE, the fixed point solves the weighted normal equations, outliers are rejected, the printed
P <- P / w rescaling is not; eigenbasis vs general form; weights; bad input.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators.closed_forms import drift
from estimators.closed_forms import measurement as meas_cf
from estimators.closed_forms import robust_weights as rw
from estimators.irls import FAMILIES, eigen_irls, irls, log_weights
from estimators.mle import DiagonalizableModel, batch_mle, eigen_batch_mle
from sde_sim import Contamination, LinearMeasurement, LinearSDE, presets, simulate
from tests.strategies import hurwitz_matrices
from verify.tools import random_eigensystem, random_spd

SIGMA = 5.0
# As in test_mle: float64 d x d solves, errors up to ~u cond(H) cond(C)^2 ~ 2e-10.
_ROUNDOFF = 1e-9


def _close(actual, expected, rtol=_ROUNDOFF):
    actual, expected = np.asarray(actual), np.asarray(expected)
    finite = ~np.isnan(expected)
    assert np.array_equal(np.isnan(actual), ~finite)
    scale = max(1.0, float(np.abs(expected[finite]).max(initial=0.0)))
    np.testing.assert_allclose(actual[finite], expected[finite], rtol=0, atol=rtol * scale)


def _problem(A, seed, T, B=2):
    rng = np.random.default_rng(seed)
    d = A.shape[0]
    sde = LinearSDE.from_covariance(A, random_spd(rng, d), rng.normal(size=d))
    while True:
        C = np.eye(d) + 0.4 * rng.normal(size=(d, d))
        if np.linalg.cond(C) < 10:
            break
    meas = LinearMeasurement(C, random_spd(rng, d, floor=0.1), b=rng.normal(size=d))
    t = np.cumsum(rng.uniform(0.05, 0.3, size=T))
    z = 2.0 * rng.normal(size=(B, T, d))
    z[:, T // 2] += 30.0  # one gross outlier per sequence, so the weights differ from 1
    mask = rng.random((B, T)) > 0.2
    return sde, meas, t, z, mask


def _contaminated(n_paths, seed, n_steps=600):
    sc = presets.get("afa-2d").scenario("b")
    sc = sc.replace(
        contamination=Contamination(outlier_fraction=0.1, outlier_df=1, outlier_scale=10),
        n_steps=n_steps,
    )
    return sc, simulate(sc, n_paths, seed=seed, method="exact")


# --- Gaussian limit ---------------------------------------------------------------------------


@settings(max_examples=10)
@given(
    hurwitz_matrices(dims=st.integers(1, 3)),
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.sampled_from(["student-t", "rational", "exponential", "power"]),
)
def test_infinite_nu_is_the_batch_mle(A, seed, causal, family):
    """nu = inf makes every weight 1 (the power family with a fixed kappa): IRLS started from
    the measurements reaches the MLE in one step and stops on the second."""
    sde, meas, t, z, mask = _problem(A, seed, 9)
    kappa = 2.0 if family == "power" else None
    mle = batch_mle(sde, meas, z, t, mask=mask, causal=causal)
    robust = irls(
        sde,
        meas,
        z,
        t,
        nu=np.inf,
        family=family,
        kappa=kappa,
        mask=mask,
        causal=causal,
        init="measurement",
    )
    _close(robust.outputs, mle.outputs)
    _close(robust.covs, mle.covs)
    assert robust.converged and robust.iterations <= 2 and robust.final_change <= 1e-12 * 30
    np.testing.assert_array_equal(robust.weights, mask[:, None, :] & (robust.weights > 0))


def test_large_nu_approaches_the_mle_at_first_order():
    """Student-t weights (nu + d)/(nu + m) = const (1 - m/nu + O(nu^-2)): with
    eps = max m / nu, the fixed point moves from the MLE by at most
    eps / sqrt(1 - eps) sum_j sqrt(m_j) in the norm of H = sum_j P_j (derivation:
    x(w) - x(1) = H_w^-1 sum_j eps_j P_j e_j and P_j <= H <= H_w / (1 - eps))."""
    sc = presets.get("afa-2d").scenario("b").replace(n_steps=300)
    sim = simulate(sc, 3, seed=4)
    mle = batch_mle(sc.system, sc.measurement, sim.z, sim.t_obs, causal=False)
    nu = 1e9
    robust = irls(sc.system, sc.measurement, sim.z, sim.t_obs, nu=nu, causal=False)
    from estimators.mle import pairwise_terms

    terms = pairwise_terms(sc.system, sc.measurement, sim.z, sim.t_obs, causal=False)
    m = terms.mahalanobis(mle.outputs)
    eps = m.max() / nu
    bound = eps / np.sqrt(1 - eps) * np.sqrt(m).sum(axis=2)  # (B, T)
    gap = robust.outputs - mle.outputs
    H = np.linalg.inv(mle.covs)
    h_norm = np.sqrt(np.einsum("bik,bikl,bil->bi", gap, H, gap))
    assert np.all(h_norm <= 2.0 * bound)  # factor 2: m evaluated at the MLE, not x(w)
    assert h_norm.max() > 0  # and the weights did act


def test_power_family_with_rfa_exponent_is_not_the_mle_as_nu_grows():
    """kappa = (nu + d)/d: the weight tends to exp(-m/d), not 1 (seed 004 eq. 11)."""
    sc, sim = _contaminated(2, seed=1, n_steps=200)
    args = (sc.system, sc.measurement, sim.z, sim.t_obs)
    power = irls(*args, nu=np.inf, family="power")
    softmax = irls(*args, family=lambda m: np.exp(-m / 2.0))
    _close(power.outputs, softmax.outputs, rtol=1e-8)
    mle = batch_mle(*args)
    assert np.nanmax(np.abs(power.outputs - mle.outputs)) > 1.0


# --- the fixed point --------------------------------------------------------------------------


@settings(max_examples=8)
@given(
    hurwitz_matrices(dims=st.integers(1, 3)),
    st.integers(0, 2**32 - 1),
    st.booleans(),
    st.sampled_from(["student-t", "exponential", "power"]),
    st.sampled_from([1.0, 0.6]),
)
def test_fixed_point_solves_the_weighted_normal_equations(A, seed, causal, family, damping):
    """sum_j w(d_ij^2) P^C_ij (x_i - z_hat_ij) = 0 at the returned x, with P^C, z_hat and the
    weights recomputed here from the closed forms' public functions (not from `irls`)."""
    sde, meas, t, z, mask = _problem(A, seed, 8)
    d = A.shape[0]
    nu = 3.0
    robust = irls(
        sde,
        meas,
        z,
        t,
        nu=nu,
        family=family,
        mask=mask,
        causal=causal,
        damping=damping,
        tol=1e-14,
        max_iter=3000,
    )
    assert robust.converged, (robust.iterations, robust.final_change)
    T = t.size
    for b in range(z.shape[0]):
        for i in range(T):
            js = np.flatnonzero(mask[b] & ((np.arange(T) <= i) | (not causal)))
            if js.size == 0:
                assert np.all(np.isnan(robust.outputs[b, i]))
                continue
            dt = t[js] - t[i]
            P = np.linalg.inv(meas_cf.measurement_covariance(sde.A, sde.Q, meas.C, meas.R, dt))
            z_hat = drift.pulled_back_measurement(sde.A, meas.C, sde.u, meas.b, z[b, js], dt)
            r = robust.outputs[b, i] - z_hat
            m = np.einsum("jk,jkl,jl->j", r, P, r)
            if family == "student-t":
                w = rw.student_t_weight(m, nu, d)
            elif family == "exponential":
                w = np.exp(-m / nu)
            else:
                w = (1 + m / nu) ** (-(nu + d) / d)
            normal = np.einsum("j,jkl,jl->k", w, P, r)
            scale = np.einsum("j,jkl,jl->k", w, np.abs(P), np.abs(z_hat)).max()
            # The residual is H times the distance to the fixed point, about the last step
            # (< 1e-14 max(1, |x|)) over the damping, plus the round-off of summing ~10 terms
            # of size `scale` (~10 u): a few 1e-14 relative (measured: 2.5e-14); 1e-12 leaves
            # a factor 40.
            assert np.abs(normal).max() <= 1e-12 * scale
            w_ref = w / w.max()
            np.testing.assert_allclose(
                robust.weights[b, i, js] / robust.weights[b, i, js].max(), w_ref, rtol=1e-8
            )


def test_damping_and_initialisation_reach_the_same_fixed_point():
    sc, sim = _contaminated(3, seed=2, n_steps=300)
    args = (sc.system, sc.measurement, sim.z, sim.t_obs)
    plain = irls(*args, nu=4.0, causal=False)
    damped = irls(*args, nu=4.0, causal=False, damping=0.5)
    assert damped.converged and damped.iterations > plain.iterations
    _close(damped.outputs, plain.outputs, rtol=1e-8)
    given_init = irls(*args, nu=4.0, causal=False, init=plain.outputs)
    assert given_init.iterations <= 2
    _close(given_init.outputs, plain.outputs, rtol=1e-8)
    capped = irls(*args, nu=4.0, causal=False, max_iter=2)
    assert not capped.converged and capped.iterations == 2 and capped.final_change > 0


def test_seed_initialisation_can_lock_onto_an_outlier():
    """Seed 000 2.3 starts from z_hat_ii = z_i. An outlier at i then has residual 0 against
    itself and the largest precision R^-1, and the Student-t fixed point can stay there: the
    MLE start (the default) does not."""
    sc, sim = _contaminated(10, seed=5, n_steps=300)
    args = (sc.system, sc.measurement, sim.z, sim.t_obs)
    from_mle = irls(*args, nu=4.0, causal=False)
    from_z = irls(*args, nu=4.0, causal=False, init="measurement")
    err_mle = np.linalg.norm(from_mle.states - sim.x_obs, axis=-1)
    err_z = np.linalg.norm(from_z.states - sim.x_obs, axis=-1)
    worst = np.unravel_index(np.argmax(err_z - err_mle), err_z.shape)
    assert sim.outlier[worst]
    assert err_z[worst] > 10 * err_mle[worst]


def test_rational_and_student_t_weights_give_the_same_estimates():
    """(nu + d)/(nu + m) = (1 + d/nu) / (1 + m/nu): a constant factor per row, which the
    estimate does not see."""
    sc, sim = _contaminated(2, seed=3, n_steps=200)
    args = (sc.system, sc.measurement, sim.z, sim.t_obs)
    a = irls(*args, nu=3.0, family="student-t")
    b = irls(*args, nu=3.0, family="rational")
    _close(a.outputs, b.outputs, rtol=1e-10)
    assert a.iterations == b.iterations


# --- outliers ---------------------------------------------------------------------------------


def test_irls_beats_the_mle_under_heavy_tailed_outliers():
    """afa-2d b with 10% Cauchy outliers of scale 10: per-path mean squared state error over
    steps >= 10, IRLS (Student-t, nu = 4) against the MLE. The MLE's errors are Cauchy-tailed,
    so a paired mean is dominated by a few paths; the sign test is not: under "no
    improvement" the wins are Binomial(n, 1/2), and 5 sigma needs n/2 + 2.5 sqrt(n) wins.
    Measured (seed 6, 60 paths): see the report."""
    sc, sim = _contaminated(60, seed=6)
    args = (sc.system, sc.measurement, sim.z, sim.t_obs)
    late = slice(10, None)
    n = sim.z.shape[0]
    for causal in (True, False):
        mle = batch_mle(*args, causal=causal)
        robust = irls(*args, nu=4.0, causal=causal)
        assert robust.converged
        sq_mle = np.sum((mle.states - sim.x_obs) ** 2, axis=-1)[:, late]
        sq_irls = np.sum((robust.states - sim.x_obs) ** 2, axis=-1)[:, late]
        wins = int(np.sum(sq_irls.mean(1) < sq_mle.mean(1)))
        assert (wins - n / 2) / np.sqrt(n / 4) > SIGMA, wins
        assert np.sqrt(sq_irls.mean()) < np.sqrt(sq_mle.mean())
        # outliers get small weights: median weight of a pair whose source is an outlier
        # against that of an inlier pair
        used = robust.weights > 0
        out_src = np.broadcast_to(sim.outlier[:, None, :], used.shape)
        assert np.median(robust.weights[used & out_src]) < 0.1 * np.median(
            robust.weights[used & ~out_src]
        )


def test_printed_rescaling_favours_the_outliers():
    """Seed 000 2.3 prints P <- P / w, w = 1/(1 + m/nu): weights 1 + m/nu grow with the
    residual. After 20 steps the pairs from outliers carry more weight than the others (the
    corrected P <- w P gives them a small fraction), and the estimate is worse than the
    corrected one. (Against the MLE itself the comparison goes either way: the MLE's error is
    Cauchy-tailed.)"""
    sc, sim = _contaminated(20, seed=7, n_steps=300)
    args = (sc.system, sc.measurement, sim.z, sim.t_obs)
    printed = irls(*args, family=lambda m: 1.0 + m / 4.0, causal=False, max_iter=20)
    corrected = irls(*args, family=lambda m: 1.0 / (1.0 + m / 4.0), causal=False)

    def ratio(result):
        used = result.weights > 0
        source = np.broadcast_to(sim.outlier[:, None, :], used.shape)
        w = result.weights / result.weights.max(axis=2, keepdims=True)
        return np.median(w[used & source]) / np.median(w[used & ~source])

    assert ratio(printed) > 1.0 > 10 * ratio(corrected)

    def rmse(result):
        return np.sqrt(np.nanmean(np.sum((result.states - sim.x_obs) ** 2, axis=-1)))

    assert rmse(printed) > 2 * rmse(corrected)


# --- forms and weights ------------------------------------------------------------------------


@settings(max_examples=8)
@given(st.integers(0, 2**32 - 1), st.integers(2, 4), st.booleans())
def test_eigenbasis_irls_equals_general_irls(seed, d, causal):
    rng = np.random.default_rng(seed)
    lam, S = random_eigensystem(rng, d)
    q = np.repeat(rng.uniform(0.05, 0.5, size=(d + 1) // 2), 2)[:d]
    r = np.repeat(rng.uniform(0.1, 1.0, size=(d + 1) // 2), 2)[:d]
    model = DiagonalizableModel(lam, S, q, r, b=rng.normal(size=d))
    T = 10
    t = np.cumsum(rng.uniform(0.05, 0.4, size=T))
    z = eigen_batch_mle(model, rng.normal(size=(2, T, d)), t).outputs  # smooth-ish data
    z = z + rng.normal(size=z.shape)
    z[:, 3] += 20.0
    z[:, 0] = rng.normal(size=(2, d))
    eigen = eigen_irls(model, z, t, nu=3.0, causal=causal)
    general = irls(model.sde(), model.measurement(), z, t, nu=3.0, causal=causal)
    assert eigen.converged and general.converged
    _close(eigen.outputs, general.outputs, rtol=1e-8)
    _close(eigen.covs, general.covs, rtol=1e-8)
    np.testing.assert_allclose(eigen.weights, general.weights, rtol=1e-7, atol=1e-12)


def test_log_weights_are_the_closed_forms():
    m = np.array([0.0, 0.5, 3.0, 1e3, 1e300])
    d, nu = 3, 2.5
    np.testing.assert_allclose(
        np.exp(log_weights(m, family="student-t", nu=nu, dim=d)), (nu + d) / (nu + m)
    )
    np.testing.assert_allclose(
        np.exp(log_weights(m, family="rational", nu=nu, dim=d)), rw.rational_weight(m, nu)
    )
    np.testing.assert_allclose(log_weights(m, family="exponential", nu=nu, dim=d), -m / nu)
    np.testing.assert_allclose(
        log_weights(m, family="power", nu=nu, dim=d), -(nu + d) / d * np.log1p(m / nu)
    )
    np.testing.assert_allclose(
        log_weights(m, family="power", nu=nu, dim=d, kappa=0.5), -0.5 * np.log1p(m / nu)
    )
    for family in ("student-t", "rational", "exponential"):
        np.testing.assert_array_equal(log_weights(m, family=family, nu=np.inf, dim=d), 0.0)
    np.testing.assert_allclose(log_weights(m[:4], family="power", nu=np.inf, dim=d), -m[:4] / d)
    assert set(FAMILIES) == {"student-t", "rational", "exponential", "power"}


def test_huge_residuals_do_not_empty_a_row():
    """exp(-m/nu) underflows to 0 for m/nu > 745; the row-wise shift keeps the nearest pair."""
    sc = presets.get("afa-2d").scenario("b")
    t = 0.1 * np.arange(4)
    z = np.array([[0.0, 0.0], [1e5, 0.0], [-1e5, 0.0], [0.0, 3e5]])
    robust = irls(sc.system, sc.measurement, z, t, nu=1.0, family="exponential", causal=False)
    assert np.all(np.isfinite(robust.outputs)) and np.all(robust.weights.max(axis=1) == 1.0)


# --- bad input --------------------------------------------------------------------------------


def test_bad_input_names_the_argument():
    sc = presets.get("afa-2d").scenario("b")
    args = (sc.system, sc.measurement, np.zeros((5, 2)), 0.1 * np.arange(5))
    with pytest.raises(TypeError, match="nu is required"):
        irls(*args)
    with pytest.raises(ValueError, match="nu must be > 0"):
        irls(*args, nu=0.0)
    with pytest.raises(ValueError, match="nu must be > 0"):
        irls(*args, nu=float("nan"))
    with pytest.raises(ValueError, match="family must be one of"):
        irls(*args, nu=1.0, family="huber")
    with pytest.raises(ValueError, match="damping must be in"):
        irls(*args, nu=1.0, damping=1.5)
    with pytest.raises(ValueError, match="damping must be > 0"):
        irls(*args, nu=1.0, damping=0.0)
    with pytest.raises(ValueError, match="kappa must be > 0"):
        irls(*args, nu=1.0, family="power", kappa=-1.0)
    with pytest.raises(ValueError, match="init must have shape"):
        irls(*args, nu=1.0, init=np.zeros((4, 2)))
    with pytest.raises(ValueError, match="init must be one of"):
        irls(*args, nu=1.0, init="zeros")
    with pytest.raises(ValueError, match="max_iter must be >= 1"):
        irls(*args, nu=1.0, max_iter=0)
    with pytest.raises(ValueError, match="family .a callable. must return"):
        irls(*args, family=lambda m: -np.ones_like(m))
    with pytest.raises(ValueError, match="mahalanobis_sq must be >= 0"):
        log_weights(np.array([-1.0]), family="rational", nu=1.0, dim=2)


def test_irls_outliers_bound_fails_a_broken_irls():
    """The bound of the registered check irls.outliers (RMSE against the inlier-only oracle)
    holds for IRLS and fails an IRLS stopped after one reweighting and the plain batch MLE."""
    from verify.problems.irls import OUTLIER_RMSE_BOUND, outlier_rmse_ratios

    ratio, mle_ratio, _ = outlier_rmse_ratios(True)
    assert ratio <= OUTLIER_RMSE_BOUND
    assert mle_ratio > OUTLIER_RMSE_BOUND
    one_step, _, iterations = outlier_rmse_ratios(True, max_iter=1)
    assert iterations == 1
    assert one_step > OUTLIER_RMSE_BOUND

"""RT-Kalman IRLS (seed 000 5.3) and the directional MLE / IRLS (seed 003 eqs. 10-16).

The loop references, the sphere search and the order measurement come from the check module
(`verify/checks/rt_irls.py`), which registers the same comparisons with the verify registry.

Monte Carlo assertions are paired per path: with ``D_p`` the difference of two estimators' mean
squared angular errors on path p (time-averaged), ``mean(D) / (std(D) / sqrt(P))`` is
asymptotically standard normal when the two are equally good; the tests require 5 (5 sigma).
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from estimators import rt_irls as rti
from estimators.closed_forms import radial_tangential as rt
from sde_sim import (
    Contamination,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    presets,
    simulate,
)
from sde_sim.models import skew_from_vector
from verify.problems.rt_irls import (
    ALPHAS,
    mean_field_scenario,
    measured_order,
    random_problem,
    reference_directional,
    reference_rt_irls,
    rt_fixed_point_residual,
    sphere_search,
)

SIGMA = 5.0


def _angles(est, latent):
    """Great-circle distance between estimated directions and the latent state's direction."""
    return rt.sphere_distance(est, latent / np.linalg.norm(latent, axis=-1, keepdims=True))


def _paired_z(err_a, err_b):
    """z-score that paths' mean squared angle under `a` exceeds that under `b`; (P, T) inputs."""
    diff = np.mean(err_a**2, axis=1) - np.mean(err_b**2, axis=1)
    return diff.mean() / (diff.std(ddof=1) / np.sqrt(diff.size))


def _rms(err):
    return float(np.sqrt(np.mean(err**2)))


# --------------------------------------------------------------------------------------------
# rt-sphere-3d: recovery of the latent direction
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sphere_sim():
    """The `rt-sphere-3d` preset (b: rotation about a tilted axis), first time unit."""
    sc = presets.get("rt-sphere-3d").scenario("b").replace(n_steps=100)
    return sc, simulate(sc, 160, seed=7)


def test_rt_irls_recovers_the_latent_direction_better_than_the_measurements(sphere_sim):
    """RT-IRLS on rt-sphere-3d beats the raw measured direction by 5 sigma over 160 paths.

    Measured (seed 7): RMS angle 0.168 rad against 0.270 for the raw direction (-38 %, z = 37,
    9 iterations from the measurements); the robust run (nu = 4, 40 paths) 0.176 (z = 16, 376
    iterations to 1e-6: IRLS is linear and slow where a query's few keys nearly split). The
    preset measures at every step with eta_t = 0.2, so measurement noise dominates the process
    noise accumulated over the ~44 nearest keys (eta_t^2 / (sigma_t^2 dt) = 0.04 / 0.0009),
    where averaging transported keys pays; eta_t = 0.05 every 10 steps is the opposite regime
    (next test).
    """
    sc, sim = sphere_sim
    model = rti.RTModel.from_sde(sc.system, sc.measurement)
    raw = _angles(sim.z, sim.x_obs)
    gauss = rti.rt_irls(model, sim.z, sim.t_obs, init="query", tol=1e-10)
    assert gauss.converged.all() and gauss.iterations < 100
    err = _angles(gauss.directions, sim.x_obs)
    assert _paired_z(raw, err) > SIGMA
    assert _rms(err) < 0.75 * _rms(raw)
    robust = rti.rt_irls(model, sim.z[:40], sim.t_obs, nu_r=4.0, nu_t=4.0, tol=1e-6, max_iter=1000)
    assert robust.converged.all()
    err_robust = _angles(robust.directions, sim.x_obs[:40])
    assert _paired_z(raw[:40], err_robust) > SIGMA
    # Without outliers robust weights cost little: the t_4 M-estimator's efficiency at the
    # normal is 0.92 (variance +9 %, RMS +4.5 %; measured +4.9 %); allow +10 %.
    assert _rms(err_robust) < 1.1 * _rms(err[:40])


def test_mean_field_estimate_is_worse_than_raw_when_process_noise_dominates():
    """With eta_t = 0.05, measured every 10 steps, the mean-field RT estimate loses.

    eta_t^2 / (sigma_t^2 dt) = 0.0025 / 0.009 = 0.28 steps: process noise dominates, and the
    mean-field weights (transported keys treated as independent) give the 100 older keys,
    which share the process increments, far more weight than they carry. Measured: RMS angle
    0.152 rad against 0.070 raw (z = 22). The check `rt_irls.mean-field-error` confirms, in a
    small-angle variant, that this error is the linear-Gaussian prediction for these weights.
    """
    sc = mean_field_scenario(eta_t=0.05, every=10, n_steps=1000)
    sim = simulate(sc, 60, seed=8)
    model = rti.RTModel.from_sde(sc.system, sc.measurement)
    est = rti.rt_mle(model, sim.z, sim.t_obs)
    raw = _angles(sim.z, sim.x_obs)
    err = _angles(est.directions, sim.x_obs)
    assert _paired_z(err, raw) > SIGMA
    assert _rms(err) > 1.5 * _rms(raw)


def test_robust_estimators_beat_non_robust_ones_with_outliers():
    """10 % Student-t(1) outliers (scale 10): robust RT-IRLS and directional IRLS (nu = 4)
    beat their Gaussian counterparts by 5 sigma (60 paths).

    Measured (seed 9, 9.6 % outliers): RT 0.226 rad against 0.615 (z = 7.1, 236 iterations);
    directional 0.263 against 0.357 (z = 10.7, 82 iterations); raw measurements 0.460.
    """
    sc = mean_field_scenario(eta_t=0.2, every=2, n_steps=200).replace(
        contamination=Contamination(outlier_fraction=0.1)
    )
    sim = simulate(sc, 60, seed=9)
    assert 0.05 < sim.outlier.mean() < 0.15
    model = rti.RTModel.from_sde(sc.system, sc.measurement)
    gauss = _angles(rti.rt_mle(model, sim.z, sim.t_obs).directions, sim.x_obs)
    robust = rti.rt_irls(model, sim.z, sim.t_obs, nu_r=4.0, nu_t=4.0, tol=1e-6, max_iter=300)
    err = _angles(robust.directions, sim.x_obs)
    assert _paired_z(gauss, err) > SIGMA
    assert _rms(err) < 0.6 * _rms(gauss)
    d_gauss = _angles(rti.directional_mle(model, sim.z, sim.t_obs).directions, sim.x_obs)
    d_robust = rti.directional_irls(model, sim.z, sim.t_obs, nu=4.0, tol=1e-8, max_iter=300)
    d_err = _angles(d_robust.directions, sim.x_obs)
    assert _paired_z(d_gauss, d_err) > SIGMA


# --------------------------------------------------------------------------------------------
# Directional MLE: the concentrated likelihood on the sphere (C19, C20)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_directional_mle_maximises_the_concentrated_likelihood_on_the_sphere(seed):
    rng = np.random.default_rng(seed)
    model, z, t, _ = random_problem(rng, B=1, T=9)
    est = rti.directional_mle(model, z[0], t[0], tau_theta=0.1)
    i = 8
    u_hat = np.array(
        [
            rt.nominal_direction(model.Omega, z[0, j] / np.linalg.norm(z[0, j]), t[0, i] - t[0, j])
            for j in range(i + 1)
        ]
    )
    kappa = est.precision[i, : i + 1]
    u_search, grid_best = sphere_search(kappa, u_hat, 100_000)
    value = est.directions[i] @ (kappa @ u_hat)
    assert grid_best <= value * (1 + 1e-14)
    # The grid spacing is ~sqrt(4 pi / 1e5) = 0.011 rad: the grid's best is within 1 - cos.
    assert grid_best >= value * (1 - 0.5 * 0.011**2)
    assert rt.sphere_distance(u_search, est.directions[i]) < 1e-10
    # It also minimises sum kappa |u - u^|^2: any other unit vector does worse.
    others = rng.normal(size=(200, 3))
    others /= np.linalg.norm(others, axis=-1, keepdims=True)

    def cost(u):
        return np.sum(kappa * np.sum((u[..., None, :] - u_hat) ** 2, axis=-1), axis=-1)

    assert np.all(cost(others) >= cost(est.directions[i]))


@given(st.integers(0, 2**32 - 1))
def test_mean_resultant_is_the_attention_output_and_its_normalisation_the_mle(seed):
    rng = np.random.default_rng(seed)
    model, z, t, mask = random_problem(rng, B=2, T=5, missing=bool(seed % 2))
    tau = float(rng.uniform(0.0, 0.3))
    est = rti.directional_mle(model, z, t, mask=mask, tau_theta=tau + 1e-3, causal=bool(seed % 3))
    length = np.linalg.norm(est.resultant, axis=-1)
    np.testing.assert_allclose(est.resultant_length, length, rtol=0, atol=1e-15)
    assert np.all(length <= 1 + 1e-15) and np.all(length > 0)
    np.testing.assert_allclose(est.directions * length[..., None], est.resultant, atol=1e-15)
    assert np.all(est.precision >= 0) and np.all(est.precision <= 1 / (tau + 1e-3) ** 2)
    assert np.all(est.weights[est.precision == 0] == 0)


def test_directional_mle_equals_loop_reference_with_missing_values_and_non_causal_keys():
    rng = np.random.default_rng(3)
    model, z, t, mask = random_problem(rng, B=3, T=6, missing=True)
    for causal in (True, False):
        ref_bar, ref_kappa, _ = reference_directional(
            model, z, t, tau_theta=0.05, eps=1e-4, causal=causal, mask=mask
        )
        est = rti.directional_mle(model, z, t, tau_theta=0.05, eps=1e-4, causal=causal, mask=mask)
        np.testing.assert_allclose(est.resultant, ref_bar, rtol=0, atol=1e-14)
        np.testing.assert_allclose(est.precision, ref_kappa, rtol=1e-13, atol=0)


# --------------------------------------------------------------------------------------------
# Directional IRLS: nu -> inf, stationarity, monotone loss
# --------------------------------------------------------------------------------------------


def test_directional_irls_with_infinite_nu_is_the_mle_and_approaches_it_as_one_over_nu():
    rng = np.random.default_rng(4)
    model, z, t, _ = random_problem(rng, B=2, T=8)
    mle = rti.directional_mle(model, z, t)
    inf = rti.directional_irls(model, z, t, nu=np.inf)
    np.testing.assert_array_equal(inf.directions, mle.directions)
    assert inf.iterations == 1 and inf.converged.all()
    gaps = []
    for nu in (1e4, 1e5, 1e6):
        res = rti.directional_irls(model, z, t, nu=nu, tol=1e-15, max_iter=500)
        gaps.append(np.max(rt.sphere_distance(res.directions, mle.directions)))
    # w = 1 - d^2/nu + O(nu^-2): the gap falls tenfold per decade of nu.
    np.testing.assert_allclose(np.array(gaps[:-1]) / np.array(gaps[1:]), 10.0, rtol=0.01)


@pytest.mark.parametrize("exponent", [1.0, 2.0])
def test_directional_irls_fixed_point_is_stationary_and_the_loss_never_increases(exponent):
    rng = np.random.default_rng(5)
    model, z, t, _ = random_problem(rng, B=2, T=8)
    z[1, 4] = -3.0 * z[1, 4]  # a gross outlier
    opts = dict(nu=2.0, exponent=exponent, tau_theta=0.05)
    res = rti.directional_irls(model, z, t, **opts, tol=1e-14, max_iter=3000)
    assert res.converged.all()
    # Stationarity: sum_j w kappa u^ is parallel to u (weights recomputed at u by the loops).
    ref_bar, _, ref_w = reference_directional(model, z, t, res.directions, **opts)
    u = res.directions
    along = np.sum(u * ref_bar, axis=-1)
    tangential = np.linalg.norm(ref_bar - along[..., None] * u, axis=-1)
    assert np.all(along > 0)
    assert np.max(tangential / np.linalg.norm(ref_bar, axis=-1)) < 1e-12
    np.testing.assert_allclose(res.weights, ref_w, rtol=1e-12, atol=0)
    # The outlier is downweighted relative to its neighbours at every later query.
    assert np.all(res.weights[1, 5:, 4] < 0.5 * res.weights[1, 5:, 3])
    # Majorise-minimise: the loss never increases from one iteration to the next.
    losses = np.array(
        [
            rti.directional_loss(
                model,
                z,
                t,
                rti.directional_irls(model, z, t, **opts, max_iter=k, tol=0).directions,
                **opts,
            )
            for k in range(1, 12)
        ]
    )
    assert np.all(np.diff(losses, axis=0) <= 1e-13 * np.abs(losses[:-1]))
    # ... and the fixed point is a minimum along the sphere: nearby points do worse.
    at_fixed = rti.directional_loss(model, z, t, u, **opts)
    for _ in range(5):
        v = rng.normal(size=u.shape) * 1e-3
        moved = rti.directional_loss(
            model, z, t, u + v - np.sum(u * v, -1, keepdims=True) * u, **opts
        )
        assert np.all(moved >= at_fixed - 1e-12 * np.abs(at_fixed))


def test_directional_loss_is_seed_003_l_t_for_infinite_nu():
    rng = np.random.default_rng(6)
    model, z, t, _ = random_problem(rng, B=1, T=5)
    mle = rti.directional_mle(model, z, t)
    u = mle.directions
    _, kappa, _ = reference_directional(model, z, t)
    loss = rti.directional_loss(model, z, t, u)
    # L_T = sum_j kappa (1 - u . u^) = sum_j kappa - |sum_j kappa u^| at the MLE.
    expected = kappa.sum(-1) - np.linalg.norm(mle.resultant, axis=-1) * kappa.sum(-1)
    np.testing.assert_allclose(loss, expected, rtol=1e-12, atol=1e-12 * kappa.sum())


def test_query_anchor_is_one_attention_step_at_the_measured_directions():
    rng = np.random.default_rng(7)
    model, z, t, _ = random_problem(rng, B=2, T=6)
    exponent = float((3.0 + 3) / 3)  # Alg. 1's (nu + d)/d with nu = 3
    res = rti.directional_irls(model, z, t, nu=3.0, exponent=exponent, anchor="query")
    step = rti.directional_consensus(model, z, t, z, nu=3.0, exponent=exponent)
    np.testing.assert_array_equal(res.resultant, step.resultant)
    assert res.iterations == 1 and np.all(res.final_change == 0)


def test_student_t_exponent_tends_to_the_gaussian_kernel():
    """(1 + x/nu)^-((nu + d)/d) -> exp(-x/d) (digest C25), not to 1: not the MLE's weights."""
    rng = np.random.default_rng(8)
    model, z, t, _ = random_problem(rng, B=1, T=6)
    nu = 1e10
    res = rti.directional_consensus(model, z, t, z, nu=nu, exponent=(nu + 3) / 3)
    _, kappa, _ = reference_directional(model, z, t)
    u_z = z / np.linalg.norm(z, axis=-1, keepdims=True)
    ref = reference_directional(model, z, t, u_z, nu=1.0, exponent=1.0)[2]  # w = 1/(1 + d^2)
    d2 = 1.0 / np.where(kappa > 0, ref, 1.0) - 1.0
    expected = np.where(kappa > 0, np.exp(-d2 / 3), 0.0)
    # log of the ratio: -((nu + d)/d) log1p(x/nu) + x/d = x (x/(2d) - 1)/nu + O(nu^-2).
    rtol = 2.0 * np.max(d2 * (1 + d2 / 6)) / nu + 1e-13
    np.testing.assert_allclose(res.weights, expected, rtol=rtol, atol=0)
    assert np.max(np.abs(expected - (kappa > 0))) > 1e-2


# --------------------------------------------------------------------------------------------
# RT-Kalman IRLS
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("step", "damping", "init", "causal", "missing"),
    [
        ("geodesic", 0.0, "mle", True, False),
        ("first-order", 0.0, "query", True, True),
        ("geodesic", 0.4, "query", False, True),
        ("first-order", 0.2, "mle", False, False),
    ],
)
def test_rt_irls_equals_the_loop_reference(step, damping, init, causal, missing):
    rng = np.random.default_rng(10)
    model, z, t, mask = random_problem(rng, B=2, T=6, missing=missing)
    kw = dict(nu_r=1.5, nu_t=2.5, step=step, damping=damping, init=init, causal=causal, mask=mask)
    ref_m, ref_u = reference_rt_irls(model, z, t, iterations=4, **kw)
    res = rti.rt_irls(model, z, t, max_iter=4, tol=0.0, **kw)
    assert res.iterations == 4
    np.testing.assert_allclose(res.magnitudes, ref_m, rtol=1e-12)
    np.testing.assert_allclose(res.directions, ref_u, rtol=0, atol=1e-13)


@pytest.mark.parametrize(
    ("step", "damping"), [("geodesic", 0.0), ("first-order", 0.0), ("geodesic", 0.5)]
)
def test_rt_irls_with_infinite_nu_converges_to_the_closed_form(step, damping):
    rng = np.random.default_rng(11)
    model, z, t, mask = random_problem(rng, B=3, T=8, missing=True)
    closed = rti.rt_mle(model, z, t, mask=mask)
    res = rti.rt_irls(
        model, z, t, step=step, damping=damping, init="query", mask=mask, tol=1e-13, max_iter=2000
    )
    assert res.converged.all() and res.iterations > 3
    np.testing.assert_allclose(res.means, closed.means, rtol=0, atol=1e-10)
    # Closed form: the tangential condition P_T(u) sum_j z^_ij / b_ij = 0 holds exactly, and
    # started there the iteration stays (one iteration, zero change).
    again = rti.rt_irls(model, z, t, mask=mask)
    assert again.iterations == 1 and np.all(again.final_change < 1e-14)


def test_rt_irls_robust_fixed_point_solves_both_weighted_least_squares():
    rng = np.random.default_rng(12)
    model, z, t, _ = random_problem(rng, B=2, T=7)
    z[0, 2] *= -1.0
    z[1, 5] *= 4.0
    results = [
        rti.rt_irls(model, z, t, nu_r=1.0, nu_t=1.0, step=s, damping=g, tol=1e-14, max_iter=5000)
        for s, g in (("geodesic", 0.0), ("first-order", 0.0), ("geodesic", 0.5))
    ]
    for res in results:
        assert res.converged.all()
        np.testing.assert_allclose(res.means, results[0].means, rtol=0, atol=1e-11)
    res = results[0]
    # Both weighted least-squares conditions hold at the fixed point (loops, expm transport).
    assert rt_fixed_point_residual(model, z, t, res.magnitudes, res.directions, 1.0, 1.0) < 1e-12
    assert np.all(res.radial_weights <= 1) and np.all(res.tangential_weights >= 0)
    # The scaled key is downweighted radially, the flipped one tangentially.
    assert np.all(res.radial_weights[1, 5:, 5] < 0.2)
    assert np.all(res.tangential_weights[0, 3:, 2] < 0.2)


def test_rt_mle_shapes_batching_and_ambient_basis():
    rng = np.random.default_rng(13)
    model, z, t, _ = random_problem(rng, B=3, T=5)
    full = rti.rt_mle(model, z, t)
    assert full.means.shape == (3, 5, 3) and full.magnitudes.shape == (3, 5)
    for b in range(3):
        one = rti.rt_mle(model, z[b], t[b])
        assert one.means.shape == (5, 3)
        np.testing.assert_allclose(one.means, full.means[b], rtol=0, atol=1e-14)
    # Times shared by every sequence ((T,)) or given per sequence ((B, T)): the same result.
    shared = rti.rt_irls(model, z, t[0], nu_r=2.0, nu_t=2.0, max_iter=3, tol=0)
    tiled = rti.rt_irls(model, z, np.tile(t[0], (3, 1)), nu_r=2.0, nu_t=2.0, max_iter=3, tol=0)
    np.testing.assert_array_equal(shared.means, tiled.means)
    # Ambient coordinates: z = S z_s; means come back ambient, directions in the eigenbasis.
    S = rng.normal(size=(3, 3)) + 2 * np.eye(3)
    ambient = rti.rt_mle(model._replace(basis=S), z @ S.T, t)
    np.testing.assert_allclose(ambient.means, full.means @ S.T, rtol=0, atol=1e-12)
    np.testing.assert_allclose(ambient.directions, full.directions, rtol=0, atol=1e-12)
    res = rti.rt_irls(model, z[0], t[0], nu_r=2.0, nu_t=2.0)
    assert res.radial_weights.shape == (5, 5) and np.ndim(res.converged) == 0


def test_missing_measurements_do_not_matter_and_rows_without_keys_are_undefined():
    rng = np.random.default_rng(14)
    model, z, t, _ = random_problem(rng, B=2, T=6)
    mask = np.ones((2, 6), dtype=bool)
    mask[0, 0] = mask[1, 3] = False
    a = z.copy()
    a[~mask] = np.nan
    b = z.copy()
    b[~mask] = 1e6
    for fn in (rti.rt_mle, rti.directional_mle):
        ra, rb = fn(model, a, t, mask=mask), fn(model, b, t, mask=mask)
        np.testing.assert_array_equal(ra.defined, rb.defined)
        np.testing.assert_allclose(ra.directions, rb.directions, equal_nan=True)
        assert not ra.defined[0, 0] and np.isnan(ra.directions[0, 0]).all()
        assert ra.defined[1, 3]  # a missing query still has earlier keys
    with pytest.raises(ValueError, match="mark missing ones with mask"):
        rti.rt_mle(model, a, t)


def test_literal_and_frozen_frame_models_pick_the_tangential_decay():
    sde = RadialTangentialSDE(skew_from_vector([0, 0, 1.0]), 0.3, 1.2, 0.1, 0.2)
    meas = RadialTangentialMeasurement(0.05, 0.1)
    assert rti.RTModel.from_sde(sde, meas).mu_t == 0.3  # digest C17
    assert rti.RTModel.from_sde(sde.with_mode("frozen-frame"), meas).mu_t == 1.2


def test_directional_precision_floor_eps_and_flat_prior_limit():
    rng = np.random.default_rng(15)
    model, z, t, _ = random_problem(rng, B=1, T=5)
    flat = model._replace(sigma_t=0.0, eta_t=0.0, gamma_t=0.0)
    kappa = rti.directional_precision(flat, z, t, tau_theta=0.5)
    np.testing.assert_array_equal(kappa[0], np.tril(np.full((5, 5), 4.0)))  # 1/tau^2 (C24)
    z0 = z.copy()
    z0[0, 1] = 0.0  # a zero-magnitude key has no direction
    k_zero = rti.directional_precision(model, z0, t)
    assert np.all(k_zero[0, 1:, 1] == 0) and np.all(k_zero[0, 1, :] == 0)
    k_eps = rti.directional_precision(model, z0, t, eps=1e-2)
    assert np.all(k_eps[0, 2:, 1] > 0) and np.all(k_eps[0, 2:, 1] < 1e-2 * k_eps[0, 2:, 2])
    with pytest.raises(ValueError, match="tau_theta"):
        rti.directional_precision(flat, z, t)


# --------------------------------------------------------------------------------------------
# Steps on the sphere (seed 000 5.3; seed 003 eqs. 15-16, C.2, C26-C28)
# --------------------------------------------------------------------------------------------


def test_exact_geodesic_and_additive_steps_agree_to_first_order():
    """C28: Norm(z + r u_bar) - exp_u(r P_T u_bar / m) = O(alpha^2), alpha = r |u_bar| / m."""
    rng = np.random.default_rng(16)
    for _ in range(5):
        u = rng.normal(size=3)
        u /= np.linalg.norm(u)
        u_bar = 0.6 * u + 0.5 * rng.normal(size=3)
        m = rng.uniform(0.5, 3.0)
        errs, errs_projected = [], []
        for alpha in ALPHAS:
            r = alpha * m / np.linalg.norm(u_bar)
            exact = rti.geodesic_step(u, r * (u_bar - (u @ u_bar) * u) / m)
            errs.append(
                rt.sphere_distance(exact, rti.geometric_update(m * u, u_bar, r, project=False)[1])
            )
            errs_projected.append(
                rt.sphere_distance(exact, rti.geometric_update(m * u, u_bar, r)[1])
            )
        errs = np.array(errs)
        assert abs(measured_order(errs) - 2.0) < 0.05
        assert abs(measured_order(np.array(errs_projected)) - 3.0) < 0.05
        # The error ratio scales as alpha^2: halving alpha quarters the error.
        np.testing.assert_allclose(errs[:-1] / errs[1:], 4.0, rtol=0.03)
        # The printed slerp(u, u*, alpha) turns by alpha W, the additive step by
        # alpha sin W - alpha^2 sin W cos W + O(alpha^3) (W = angle(u, u*)): the gap is
        # alpha (W - sin W) to first order, not O(alpha^2).
        u_star = u_bar / np.linalg.norm(u_bar)
        W = rt.sphere_distance(u, u_star)
        for a in ALPHAS[-2:]:
            r = a * m / np.linalg.norm(u_bar)
            gap = rt.sphere_distance(
                rti.slerp(u, u_star, a), rti.geometric_update(m * u, u_bar, r, project=False)[1]
            )
            assert abs(gap / a - (W - np.sin(W))) <= 2 * a * abs(np.sin(W) * np.cos(W)) + 1e-12


def test_rt_steps_geodesic_and_first_order():
    u = np.array([0.0, 0.0, 1.0])
    v = np.array([0.3, -0.4, 0.0])
    g, f = rti.geodesic_step(u, v), rti.first_order_step(u, v)
    assert np.isclose(rt.sphere_distance(u, g), 0.5) and np.isclose(
        rt.sphere_distance(u, f), np.arctan(0.5)
    )
    # Same great circle: both lie in span(u, v).
    for w in (g, f):
        assert abs(np.linalg.det(np.stack([u, v, w]))) < 1e-15
    np.testing.assert_allclose(rti.slerp(u, g, 0.0), u, atol=1e-15)
    np.testing.assert_allclose(rti.slerp(u, g, 1.0), g, atol=1e-15)
    np.testing.assert_allclose(rti.slerp(u, g, 0.5), rti.geodesic_step(u, v / 2), atol=1e-15)
    with pytest.raises(ValueError, match="antipodal"):
        rti.slerp(u, -u, 0.5)
    with pytest.raises(ValueError, match="tangent"):
        rti.geodesic_step(u, np.array([0.0, 0.0, 0.1]))


def test_geometric_update_and_angular_step_eq_15_16():
    rng = np.random.default_rng(17)
    z = rng.normal(size=(50, 3)) * 3
    u_bar = rng.normal(size=(50, 3))
    u_bar /= np.maximum(1.0, np.linalg.norm(u_bar, axis=-1, keepdims=True))
    r = rng.uniform(0.0, 2.0, 50)
    for project in (True, False):
        z_plus, u_plus = rti.geometric_update(z, u_bar, r, project=project)
        u = z / np.linalg.norm(z, axis=-1, keepdims=True)
        psi = rti.angular_step(z, u_bar, r, project=project)
        np.testing.assert_allclose(psi, rt.sphere_distance(u, u_plus), rtol=1e-12, atol=1e-15)
    # C26: the projected step changes |z|^2 only by r^2 |Pi u_bar|^2.
    z_plus, _ = rti.geometric_update(z, u_bar, r)
    pi = u_bar - np.sum(u * u_bar, -1, keepdims=True) * u
    np.testing.assert_allclose(
        np.sum(z_plus**2, -1), np.sum(z**2, -1) + r**2 * np.sum(pi**2, -1), rtol=1e-13
    )
    # C29: scale invariance z -> c z with r -> c r.
    np.testing.assert_allclose(
        rti.geometric_update(2.5 * z, u_bar, 2.5 * r)[1],
        rti.geometric_update(z, u_bar, r)[1],
        atol=1e-14,
    )
    # eq. 16: the angle is at most r |u_bar| / m.
    m = np.linalg.norm(z, axis=-1)
    assert np.all(rti.angular_step(z, u_bar, r) <= r * np.linalg.norm(u_bar, axis=-1) / m + 1e-15)


def test_iterated_geometric_updates_reach_the_irls_fixed_point():
    """Eq. 15 with the consensus recomputed at the current state (D.4) stops where IRLS does:
    both fixed points satisfy P_T(u) u_bar(u) = 0."""
    rng = np.random.default_rng(18)
    model, z, t, _ = random_problem(rng, B=2, T=6)
    opts = dict(nu=3.0, tau_theta=0.05)
    irls = rti.directional_irls(model, z, t, **opts, tol=1e-14, max_iter=2000)
    state = z / np.linalg.norm(z, axis=-1, keepdims=True)  # unit states, r = 1
    for _ in range(300):
        u_bar = rti.directional_consensus(model, z, t, state, **opts).resultant
        state, _ = rti.geometric_update(state, u_bar, 1.0)
        state /= np.linalg.norm(state, axis=-1, keepdims=True)
    np.testing.assert_allclose(state, irls.directions, rtol=0, atol=1e-9)


# --------------------------------------------------------------------------------------------
# Validation and convergence reports
# --------------------------------------------------------------------------------------------


def _problem():
    return random_problem(np.random.default_rng(20), B=2, T=4)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (
            lambda m, z, t: rti.rt_mle(m, z[..., :2], t),
            ValueError,
            r"z must have shape \(B, T, 3\)",
        ),
        (lambda m, z, t: rti.rt_mle(m, z, t[:, ::-1]), ValueError, "strictly increasing"),
        (lambda m, z, t: rti.rt_mle(m, z, t[0, :3]), ValueError, "t must have shape"),
        (
            lambda m, z, t: rti.rt_mle(m, z, t, mask=np.ones((2, 4))),
            TypeError,
            "mask must be boolean",
        ),
        (
            lambda m, z, t: rti.rt_mle(m, z, t, mask=np.ones(3, bool)),
            ValueError,
            "mask must have shape",
        ),
        (lambda m, z, t: rti.rt_mle(m, z, t, causal=1), TypeError, "causal"),
        (lambda m, z, t: rti.rt_irls(m, z, t, nu_r=0.0), ValueError, "nu_r must be > 0"),
        (lambda m, z, t: rti.rt_irls(m, z, t, nu_t="4"), TypeError, "nu_t"),
        (lambda m, z, t: rti.rt_irls(m, z, t, damping=1.0), ValueError, "damping"),
        (lambda m, z, t: rti.rt_irls(m, z, t, step="slerp"), ValueError, "step must be one of"),
        (lambda m, z, t: rti.rt_irls(m, z, t, init="zero"), ValueError, "init must be one of"),
        (lambda m, z, t: rti.rt_irls(m, z, t, max_iter=0), ValueError, "max_iter"),
        (lambda m, z, t: rti.rt_irls(m, z, t, tol=-1.0), ValueError, "tol"),
        (lambda m, z, t: rti.directional_irls(m, z, t, nu=-1.0), ValueError, "nu must be > 0"),
        (lambda m, z, t: rti.directional_irls(m, z, t, nu=1, exponent=0), ValueError, "exponent"),
        (lambda m, z, t: rti.directional_irls(m, z, t, nu=1, anchor="x"), ValueError, "anchor"),
        (lambda m, z, t: rti.directional_mle(m, z, t, tau_theta=-1), ValueError, "tau_theta"),
        (lambda m, z, t: rti.directional_mle(m, z, t, eps=-1), ValueError, "eps"),
        (lambda m, z, t: rti.directional_consensus(m, z, t, z[:, :2]), ValueError, "anchors"),
        (lambda m, z, t: rti.rt_mle(m._replace(eta_r=0.0, gamma_r=0.0), z, t), ValueError, "eta_r"),
        (lambda m, z, t: rti.rt_mle(m._replace(Omega=np.eye(3)), z, t), ValueError, "skew"),
        (lambda m, z, t: rti.rt_mle(m._replace(sigma_t=-1.0), z, t), ValueError, "sigma_t"),
        (lambda m, z, t: rti.rt_mle(m._replace(basis=np.ones((3, 3))), z, t), ValueError, "basis"),
        (lambda m, z, t: rti.rt_mle(tuple(m), z, t), TypeError, "RTModel"),
        (lambda m, z, t: rti.geometric_update(np.zeros(3), np.ones(3), 1.0), ValueError, "nonzero"),
        (lambda m, z, t: rti.angular_step(np.ones(3), np.ones(2), 1.0), ValueError, "u_bar"),
        (lambda m, z, t: rti.geometric_update(np.ones(3), np.ones(3), -1.0), ValueError, "r must"),
    ],
)
def test_bad_input_names_the_argument(call, exc, match):
    model, z, t, _ = _problem()
    with pytest.raises(exc, match=match):
        call(model, z, t)


def test_from_sde_rejects_other_systems():
    with pytest.raises(TypeError, match="RadialTangentialSDE"):
        rti.RTModel.from_sde(object(), RadialTangentialMeasurement(0.1, 0.1))


def test_convergence_is_reported_not_looped_forever():
    model, z, t, _ = _problem()
    res = rti.rt_irls(model, z, t, nu_r=1.0, nu_t=1.0, init="query", max_iter=2, tol=0.0)
    assert res.iterations == 2 and not res.converged.any() and np.all(res.final_change > 0)
    res = rti.directional_irls(model, z, t, nu=1.0, init="query", max_iter=1, tol=0.0)
    assert res.iterations == 1 and not res.converged.all()

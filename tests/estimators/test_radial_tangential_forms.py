"""Radial-tangential closed forms: shapes, properties, bad input (the registry checks the math)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.linalg import expm

from estimators.closed_forms import radial_tangential as rt
from sde_sim.models import rotation_generator, skew_from_vector
from sde_sim.models import spherical_exp as simulator_spherical_exp

PARAMS = {"mu_r": 0.4, "mu_t": 1.5, "sigma_r": 0.5, "sigma_t": 0.3, "eta_r": 0.2, "eta_t": 0.1}
OMEGA3 = skew_from_vector([0.3, -0.5, 0.8])


def _unit(rng, *shape):
    u = rng.normal(size=shape)
    return u / np.linalg.norm(u, axis=-1, keepdims=True)


def _random_params(rng):
    return {
        "mu_r": rng.uniform(0.0, 1.5),
        "mu_t": rng.uniform(0.0, 1.5),
        "sigma_r": rng.uniform(0.1, 1.0),
        "sigma_t": rng.uniform(0.1, 1.0),
        "eta_r": rng.uniform(0.1, 1.0),
        "eta_t": rng.uniform(0.1, 1.0),
    }


# --- shapes and batching ------------------------------------------------------------------------


def test_shapes_broadcast_directions_against_lags():
    rng = np.random.default_rng(0)
    u = _unit(rng, 5, 3)
    assert rt.propagated_covariance(u, -0.5, **PARAMS).shape == (5, 3, 3)
    assert rt.propagated_covariance(u, np.linspace(-1, 1, 5), **PARAMS).shape == (5, 3, 3)
    assert rt.propagated_covariance(u[0], np.linspace(-1, 1, 7), **PARAMS).shape == (7, 3, 3)
    lags = np.linspace(-2, -0.1, 4)[:, None]  # (T, 1) against (P,) directions -> (T, P)
    assert rt.propagated_precision(u, lags, **PARAMS).shape == (4, 5, 3, 3)
    var = rt.propagated_variances(lags, **PARAMS)
    assert var.radial.shape == var.tangential.shape == (4, 1)
    assert rt.frozen_frame_transition(OMEGA3, u, -0.7, mu_r=0.4, mu_t=1.5).shape == (5, 3, 3)
    assert rt.frozen_frame_transition(OMEGA3, u[0], lags[:, 0], mu_r=0.4, mu_t=1.5).shape == (
        4,
        3,
        3,
    )
    assert rt.nominal_direction(OMEGA3, u, 0.3).shape == (5, 3)
    assert rt.nominal_direction(OMEGA3, u[0], np.arange(6.0)).shape == (6, 3)
    assert rt.direction_covariance(u, np.full(5, 2.0), 0.1).shape == (5, 3, 3)
    assert rt.spherical_exp(u, np.zeros((5, 3))).shape == (5, 3)
    assert rt.magnitude_second_moment(
        np.linspace(0, 2, 9), m0=3.0, mu_r=0.5, sigma_r=0.4, sigma_t=0.5, dim=4
    ).shape == (9,)


def test_batched_results_equal_one_at_a_time():
    rng = np.random.default_rng(1)
    u, dt = _unit(rng, 6, 4), rng.uniform(-2, 2, size=6)
    batched = rt.propagated_covariance(u, dt, **PARAMS)
    for k in range(6):
        np.testing.assert_array_equal(batched[k], rt.propagated_covariance(u[k], dt[k], **PARAMS))
    Omega = rotation_generator([0.7, 1.9])
    batched = rt.frozen_frame_transition(Omega, u, dt, mu_r=0.3, mu_t=0.8)
    for k in range(6):
        single = rt.frozen_frame_transition(Omega, u[k], dt[k], mu_r=0.3, mu_t=0.8)
        np.testing.assert_allclose(batched[k], single, rtol=1e-14, atol=1e-15)


def test_per_head_parameters_broadcast_with_lags():
    var = rt.propagated_variances(-1.0, mu_r=[0.1, 0.5], mu_t=0.3, sigma_r=1.0, sigma_t=0.5)
    assert var.radial.shape == (2,)
    np.testing.assert_allclose(var.radial, rt.phi([0.1, 0.5], 1.0))


# --- properties ---------------------------------------------------------------------------------


@given(st.integers(0, 2**32 - 1), st.integers(2, 8), st.floats(-3, 3).filter(lambda x: x != 0))
def test_covariance_is_rt_structured_and_precision_inverts_it(seed, d, dt):
    rng = np.random.default_rng(seed)
    p, u = _random_params(rng), _unit(rng, d)
    cov = rt.propagated_covariance(u, dt, **p)
    var = rt.propagated_variances(dt, **p)
    np.testing.assert_allclose(cov, cov.T, atol=1e-15)
    expected = np.sort([float(var.radial)] + [float(var.tangential)] * (d - 1))
    np.testing.assert_allclose(np.linalg.eigvalsh(cov), expected, rtol=1e-10)
    np.testing.assert_allclose(cov @ u, var.radial * u, rtol=1e-10, atol=1e-14)
    precision = rt.propagated_precision(u, dt, **p)
    np.testing.assert_allclose(precision @ cov, np.eye(d), atol=1e-9)


@given(st.integers(0, 2**32 - 1), st.integers(2, 6))
def test_rank_one_inverse_is_an_inverse_for_any_vector(seed, d):
    rng = np.random.default_rng(seed)
    a, b, v = rng.uniform(0.5, 2.0), rng.uniform(-0.3, 3.0), rng.normal(size=d)
    v *= rng.uniform(0.1, 1.0) / np.linalg.norm(v)
    inverse = rt.rank_one_inverse(a, b, v)
    np.testing.assert_allclose(
        inverse @ (a * np.eye(d) + b * np.outer(v, v)), np.eye(d), atol=1e-12
    )


@given(
    st.integers(0, 2**32 - 1),
    st.floats(-2, 2),
    st.floats(-2, 2),
    st.sampled_from([3, 4]),
)
def test_transition_composes_along_the_nominal_frame(seed, dt1, dt2, d):
    # Phi(t_i <- t_k) Phi(t_k <- t_j) = Phi(t_i <- t_j): dt = t_j - t_i, so with a key at t_j,
    # an intermediate time t_k = t_j - dt1 and the query t_i = t_k - dt2, the lags add.
    rng = np.random.default_rng(seed)
    Omega = OMEGA3 if d == 3 else rotation_generator([0.7, -1.9])
    mu = {"mu_r": rng.uniform(0, 1), "mu_t": rng.uniform(0, 1)}
    u_j = _unit(rng, d)
    u_k = rt.nominal_direction(Omega, u_j, -dt1)
    first = rt.frozen_frame_transition(Omega, u_j, dt1, **mu)
    second = rt.frozen_frame_transition(Omega, u_k, dt2, **mu)
    both = rt.frozen_frame_transition(Omega, u_j, dt1 + dt2, **mu)
    np.testing.assert_allclose(second @ first, both, rtol=1e-10, atol=1e-12)


def test_transition_is_the_isotropic_exponential_when_the_rates_agree():
    u = np.array([1.0, 2.0, 2.0]) / 3
    A = -0.4 * np.eye(3) + OMEGA3
    for dt in (-1.3, 0.0, 0.8):
        Phi = rt.frozen_frame_transition(OMEGA3, u, dt, mu_r=0.4, mu_t=0.4)
        np.testing.assert_allclose(Phi, expm(-A * dt), rtol=1e-12, atol=1e-14)


def test_transition_carries_the_key_direction_to_the_query_direction():
    u_j = np.array([0.0, 0.6, 0.8])
    Phi = rt.frozen_frame_transition(OMEGA3, u_j, -1.5, mu_r=0.4, mu_t=1.5)
    u_i = rt.nominal_direction(OMEGA3, u_j, 1.5)
    np.testing.assert_allclose(Phi @ u_j, np.exp(-0.6) * u_i, rtol=1e-13)


def test_zero_lag_leaves_the_measurement_noise_and_long_causal_lags_saturate():
    u = np.array([0.0, 1.0, 0.0])
    np.testing.assert_allclose(
        rt.propagated_covariance(u, 0.0, **PARAMS),
        rt.radial_tangential_matrix(u, PARAMS["eta_r"] ** 2, PARAMS["eta_t"] ** 2),
    )
    var = rt.propagated_variances(-60.0, **PARAMS)
    np.testing.assert_allclose(var.radial, PARAMS["sigma_r"] ** 2 / (2 * PARAMS["mu_r"]))
    np.testing.assert_allclose(var.tangential, PARAMS["sigma_t"] ** 2 / (2 * PARAMS["mu_t"]))
    # A key after the query (dt > 0) is pulled back against the decay: its noise is amplified.
    ahead = rt.propagated_variances(3.0, **PARAMS)
    behind = rt.propagated_variances(-3.0, **PARAMS)
    assert ahead.radial > behind.radial and ahead.tangential > behind.tangential


def test_equal_radial_and_tangential_parameters_give_a_scalar_covariance():
    iso = {"mu_r": 0.3, "mu_t": 0.3, "sigma_r": 0.5, "sigma_t": 0.5, "eta_r": 0.1, "eta_t": 0.1}
    cov = rt.propagated_covariance(np.array([3.0, 4.0]), -1.2, **iso)
    expected = 0.25 * rt.phi(0.3, 1.2) + 0.01 * np.exp(-2 * 0.3 * 1.2)
    np.testing.assert_allclose(cov, expected * np.eye(2), rtol=1e-14, atol=1e-17)


def test_phi_is_continuous_through_mu_zero_and_matches_the_variance_factor():
    for lag in (0.1, 2.0, -0.5):
        assert rt.phi(0.0, lag) == lag
        np.testing.assert_allclose(rt.phi(1e-12, lag), lag, rtol=1e-11)
    np.testing.assert_allclose(rt.phi(0.5, 2.0), (1 - np.exp(-2.0)) / 1.0, rtol=1e-15)


def test_directions_are_normalised():
    cov = rt.propagated_covariance([0.0, 5.0, 0.0], -1.0, **PARAMS)
    np.testing.assert_array_equal(cov, rt.propagated_covariance([0, 1, 0], -1.0, **PARAMS))


def test_magnitude_second_moment_limits():
    kw = {"m0": 3.0, "sigma_r": 0.4, "sigma_t": 0.5, "dim": 4}
    c = 0.4**2 + 3 * 0.5**2
    np.testing.assert_allclose(rt.magnitude_second_moment(0.0, mu_r=0.5, **kw), 9.0)
    stationary = rt.stationary_magnitude_squared(mu_r=0.5, sigma_r=0.4, sigma_t=0.5, dim=4)
    np.testing.assert_allclose(stationary, c)
    np.testing.assert_allclose(rt.magnitude_second_moment(80.0, mu_r=0.5, **kw), stationary)
    np.testing.assert_allclose(rt.magnitude_second_moment(2.0, mu_r=0.0, **kw), 9.0 + 2 * c)
    t = np.linspace(0, 3, 7)
    closed = stationary + (9.0 - stationary) * np.exp(-t)
    np.testing.assert_allclose(rt.magnitude_second_moment(t, mu_r=0.5, **kw), closed, rtol=1e-14)


def test_ito_drifts():
    # Seed 000 5.1 would give -mu_r m; tangential noise pushes the magnitude outwards.
    m = np.array([0.5, 1.0, 10.0])
    drift = rt.magnitude_drift(m, mu_r=0.3, sigma_t=0.5, dim=3)
    np.testing.assert_allclose(drift, -0.3 * m + 0.25 / m)
    mu_tilde_r, mu_tilde_t = rt.ito_rates(m, mu_r=0.3, sigma_t=0.5, dim=3)
    np.testing.assert_allclose(mu_tilde_r + mu_tilde_t, 0.3)
    np.testing.assert_allclose(
        rt.magnitude_squared_drift(m**2, mu_r=0.3, sigma_r=0.4, sigma_t=0.5, dim=3),
        -0.6 * m**2 + 0.16 + 0.5,
    )
    # The direction drift's radial part is the Ito term alone (u . Omega u = 0).
    u = _unit(np.random.default_rng(2), 4, 3)
    du = rt.direction_drift(u, np.full(4, 2.0), Omega=OMEGA3, sigma_t=0.5)
    np.testing.assert_allclose(np.sum(du * u, axis=-1), -(0.5**2) / 4.0)


@given(st.integers(0, 2**32 - 1), st.integers(2, 7), st.floats(0.0, np.pi))
def test_spherical_exp_stays_on_the_sphere_at_geodesic_distance(seed, d, length):
    rng = np.random.default_rng(seed)
    u = _unit(rng, d)
    y = rng.normal(size=d)
    v = y - (u @ y) * u
    v *= length / np.linalg.norm(v)
    w = rt.spherical_exp(u, v)
    np.testing.assert_allclose(np.linalg.norm(w), 1.0, rtol=1e-14)
    np.testing.assert_allclose(rt.sphere_distance(u, w), length, atol=1e-12)
    np.testing.assert_allclose(w, simulator_spherical_exp(u, v), atol=1e-15)


def test_spherical_exp_of_zero_is_the_base_point_and_sphere_distance_is_symmetric():
    u = np.array([0.6, 0.0, 0.8])
    np.testing.assert_array_equal(rt.spherical_exp(u, np.zeros(3)), u)
    w = np.array([0.0, 1.0, 0.0])
    assert rt.sphere_distance(u, w) == rt.sphere_distance(w, u)
    np.testing.assert_allclose(rt.sphere_distance(u, -u), np.pi, rtol=1e-15)


def test_direction_covariance_is_tangential():
    u = np.array([0.0, 0.0, 1.0])
    cov = rt.direction_covariance(u, 2.0, 0.1)
    np.testing.assert_allclose(cov, np.diag([0.0025, 0.0025, 0.0]), atol=1e-18)


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (
            lambda: rt.propagated_covariance(np.zeros(3), -1.0, **PARAMS),
            ValueError,
            "u must be nonzero",
        ),
        (
            lambda: rt.propagated_covariance(1.0, -1.0, **PARAMS),
            ValueError,
            r"u must have shape \(\.\.\., d\)",
        ),
        (
            lambda: rt.propagated_covariance([1.0, 0.0], -1.0, **{**PARAMS, "sigma_r": -0.1}),
            ValueError,
            "sigma_r must be >= 0",
        ),
        (
            lambda: rt.propagated_variances([0.0, np.nan], **PARAMS),
            ValueError,
            "dt has 1 NaN",
        ),
        (lambda: rt.propagated_variances("soon", **PARAMS), TypeError, "dt must be numeric"),
        (
            lambda: rt.propagated_precision(
                [1.0, 0.0], 0.0, mu_r=0.1, mu_t=0.1, sigma_r=1.0, sigma_t=1.0
            ),
            ValueError,
            "propagated radial variance must be > 0",
        ),
        (
            lambda: rt.frozen_frame_transition(np.ones((3, 3)), [1, 0, 0], -1.0, mu_r=0, mu_t=0),
            ValueError,
            "Omega must be skew-symmetric",
        ),
        (
            lambda: rt.nominal_direction(OMEGA3, [1.0, 0.0], 1.0),
            ValueError,
            r"Omega must have shape \(2, 2\)",
        ),
        (
            lambda: rt.spherical_exp([1.0, 1.0, 0.0], [0.0, 0.0, 1.0]),
            ValueError,
            "u must be unit length",
        ),
        (
            lambda: rt.spherical_exp([1.0, 0.0, 0.0], [0.1, 1.0, 0.0]),
            ValueError,
            "v must be tangent at u",
        ),
        (lambda: rt.spherical_exp([1.0, 0.0], [0.0, 0.0, 1.0]), ValueError, "same d"),
        (
            lambda: rt.magnitude_drift(0.0, mu_r=0.3, sigma_t=0.5, dim=3),
            ValueError,
            "m must be > 0",
        ),
        (lambda: rt.ito_rates(1.0, mu_r=0.3, sigma_t=0.5, dim=0), ValueError, "dim must be >= 1"),
        (
            lambda: rt.ito_rates(1.0, mu_r=0.3, sigma_t=0.5, dim=2.5),
            TypeError,
            "dim must be an integer",
        ),
        (
            lambda: rt.magnitude_second_moment(-1.0, m0=1, mu_r=0.3, sigma_r=0, sigma_t=0, dim=2),
            ValueError,
            "t must be >= 0",
        ),
        (
            lambda: rt.stationary_magnitude_squared(mu_r=0.0, sigma_r=1, sigma_t=1, dim=3),
            ValueError,
            "mu_r must be > 0",
        ),
        (
            lambda: rt.rank_one_inverse(1.0, -1.0, [1.0, 0.0]),
            ValueError,
            r"a \+ b \|u\|\^2 must be nonzero",
        ),
        (lambda: rt.rank_one_inverse(0.0, 1.0, [1.0, 0.0]), ValueError, "a must be nonzero"),
        (lambda: rt.direction_covariance([1.0, 0.0], 1.0, -0.1), ValueError, "eta_t must be >= 0"),
    ],
)
def test_bad_input(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()

"""Drift/bias/delay and Riccati closed forms: properties and bad input (the registry checks the
math against SymPy, numerical references and Monte Carlo)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.linalg import expm

from estimators.closed_forms import drift, riccati
from sde_sim.models import real_from_eigen
from tests.strategies import hurwitz_matrices
from verify.tools import random_eigensystem

S2 = np.array([[1 - 1j, 1 + 1j], [1, 1]])
LAM2 = np.array([-0.1 - 1j, -0.1 + 1j])
A2 = real_from_eigen(LAM2, S2)
U2 = np.array([0.5, -0.3])
B2 = np.array([0.7, -1.2])
LAM_C2 = np.array([1.5 - 0.4j, 1.5 + 0.4j])

LAGS = st.floats(-2.0, 2.0)
SEEDS = st.integers(0, 2**32 - 1)


# --- drift ------------------------------------------------------------------------------------


def test_drift_factor_broadcasts_and_has_the_zero_limit():
    lam = np.array([0.0, -0.5, 1j])
    dt = np.array([[0.3], [-1.0]])
    g = drift.drift_factor(lam, dt)
    assert g.shape == (2, 3)
    np.testing.assert_array_equal(g[:, 0], [0.3, -1.0])  # lam = 0: g = dt exactly
    np.testing.assert_allclose(g[:, 1], np.expm1(-0.5 * dt[:, 0]) / -0.5)


def test_drift_integral_shapes_zero_lag_and_negative_lags():
    G = drift.drift_integral(A2, np.zeros((2, 3)))
    assert G.shape == (2, 3, 2, 2)
    np.testing.assert_array_equal(G, 0.0)
    s = 0.8  # G_u(-s) = -e^{-A s} G_u(s)
    np.testing.assert_allclose(
        drift.drift_integral(A2, -s), -expm(-A2 * s) @ drift.drift_integral(A2, s), atol=1e-14
    )
    # Invertible A: G_u(s) = (e^{As} - I) A^-1.
    np.testing.assert_allclose(
        drift.drift_integral(A2, s), (expm(A2 * s) - np.eye(2)) @ np.linalg.inv(A2), atol=1e-14
    )


@given(hurwitz_matrices(), SEEDS, LAGS)
def test_pulling_back_undoes_the_mean_propagation(A, seed, dt):
    rng = np.random.default_rng(seed)
    d = A.shape[0]
    u, x_i = rng.normal(size=d), rng.normal(size=(3, d))
    x_j = x_i @ expm(A * dt).T + drift.drift_integral(A, dt) @ u  # E[x(t_j) | x(t_i)]
    np.testing.assert_allclose(drift.pulled_back_state(A, u, x_j, dt), x_i, atol=1e-9)


@given(SEEDS, st.integers(2, 5))
def test_eigen_and_general_forms_agree_with_batched_lags(seed, d):
    rng = np.random.default_rng(seed)
    lam, S = random_eigensystem(rng, d)
    A = real_from_eigen(lam, S)
    u = rng.normal(size=d)
    x = rng.normal(size=(4, 3, d))  # (P, T, d), one lag per time row
    dt = rng.uniform(-2, 2, size=3)
    general = drift.pulled_back_state(A, u, x, dt)
    eigen = drift.eigen_pulled_back_state(lam, S, u, x, dt)
    assert general.shape == eigen.shape == (4, 3, d)
    np.testing.assert_allclose(eigen, general, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(
        drift.eigen_drift_integral(lam, S, dt), drift.drift_integral(A, dt), atol=1e-10
    )


def test_singular_drift_has_a_finite_estimate():
    # A double integrator (x1' = x2, x2' = u2): A^-1 does not exist; G_u is polynomial.
    A = np.array([[0.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(drift.drift_integral(A, 2.0), [[2.0, 2.0], [0.0, 2.0]])
    u, x = np.array([0.0, 1.0]), np.array([3.0, 4.0])
    # Backward over 2: x2 = 4 - 2 = 2, x1 = 3 - (2 * 2 + 2^2 / 2) = -3.
    np.testing.assert_allclose(drift.pulled_back_state(A, u, x, 2.0), [-3.0, 2.0])
    lam, S = np.array([0.0, -1.0]), np.eye(2)
    out = drift.eigen_pulled_back_state(lam, S, [1.0, 1.0], [[0.0, 0.0]], 1.0)
    np.testing.assert_allclose(out, [[-1.0, 1 - np.e]])  # mode 0: x - u dt


def test_bias_form_matches_the_stable_form():
    b = drift.drift_bias(LAM2, S2, U2)  # u_s / lam
    x = np.array([[1.0, 2.0], [-0.5, 0.3]])
    dt = np.array([0.7, -1.1])
    x_s = x @ np.linalg.inv(S2).T
    seed_form = np.exp(-LAM2 * dt[:, None]) * (x_s + b) - b
    np.testing.assert_allclose(
        (seed_form @ S2.T).real, drift.eigen_pulled_back_state(LAM2, S2, U2, x, dt), atol=1e-13
    )
    np.testing.assert_allclose(drift.drift_bias(LAM2, S2, U2, LAM_C2), LAM_C2 * b)


@given(SEEDS, LAGS, st.floats(-1.5, 1.5))
def test_measurement_delay_cancels(seed, dt, delay):
    rng = np.random.default_rng(seed)
    C = np.eye(2) + 0.3 * rng.normal(size=(2, 2))
    z = rng.normal(size=(5, 2))
    with_delay = drift.pulled_back_measurement(A2, C, U2, B2, z, dt, delay=delay)
    without = drift.pulled_back_measurement(A2, C, U2, B2, z, dt)
    np.testing.assert_allclose(with_delay, without, atol=1e-10)


def test_eigen_measurement_form_matches_the_general_form():
    C = real_from_eigen(LAM_C2, S2, name="C")
    z = np.random.default_rng(3).normal(size=(6, 2))
    dt = np.linspace(-2, 2, 6)
    general = drift.pulled_back_measurement(A2, C, U2, B2, z, dt, delay=0.4)
    eigen = drift.eigen_pulled_back_measurement(LAM2, S2, LAM_C2, U2, B2, z, dt)
    assert eigen.shape == (6, 2)
    np.testing.assert_allclose(eigen, general, atol=1e-12)
    # dt = 0: the measurement itself.
    np.testing.assert_allclose(
        drift.eigen_pulled_back_measurement(LAM2, S2, LAM_C2, U2, B2, z, 0.0), z, atol=1e-14
    )


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: drift.drift_integral(np.ones((2, 3)), 1.0), ValueError, "A must be square"),
        (lambda: drift.drift_integral(A2, 1j), TypeError, "dt must be real"),
        (lambda: drift.drift_factor([0.1], np.nan), ValueError, "dt has 1 NaN"),
        (
            lambda: drift.pulled_back_state(A2, [1.0, 2.0, 3.0], [0.0, 0.0], 1.0),
            ValueError,
            r"u must have shape \(2,\)",
        ),
        (
            lambda: drift.pulled_back_state(A2, U2, np.zeros((4, 3)), 1.0),
            ValueError,
            r"x must have shape \(\.\.\., 2\)",
        ),
        (
            lambda: drift.pulled_back_state(A2, U2, np.zeros((4, 2)), np.ones(3)),
            ValueError,
            r"dt must broadcast against the leading shape \(4,\)",
        ),
        (
            lambda: drift.pulled_back_measurement(A2, np.ones((2, 2)), U2, B2, [0.0, 0.0], 1.0),
            ValueError,
            "C must be invertible",
        ),
        (
            lambda: drift.pulled_back_measurement(
                A2, np.eye(2), U2, B2, [0.0, 0.0], 1.0, delay=np.inf
            ),
            ValueError,
            "delay must be finite",
        ),
        (
            lambda: drift.pulled_back_measurement(A2, np.eye(2), U2, [1.0], [0.0, 0.0], 1.0),
            ValueError,
            r"b must have shape \(2,\)",
        ),
        (
            lambda: drift.drift_bias([0.0, -1.0], np.eye(2), U2),
            ValueError,
            "eigenvalues must be nonzero.*eigenvalue 0 is 0",
        ),
        (
            lambda: drift.eigen_pulled_back_measurement(LAM2, S2, [1.0], U2, B2, [0.0, 0.0], 1.0),
            ValueError,
            r"measurement_eigenvalues must have shape \(2,\)",
        ),
        (
            lambda: drift.eigen_drift_integral(LAM2 * [1, 2], S2, 1.0),
            ValueError,
            "not real",
        ),
        (
            lambda: drift.eigen_pulled_back_state(LAM2[:1], S2, U2, [0.0, 0.0], 1.0),
            ValueError,
            r"eigenvalues must have shape \(2,\)",
        ),
    ],
)
def test_drift_bad_input(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# --- riccati ----------------------------------------------------------------------------------


def test_riccati_special_cases():
    t = np.array([0.0, 0.5, 3.0])
    np.testing.assert_array_equal(riccati.riccati_variance(-0.4, 0.0, 2.0, t), 0.0)  # q = 0
    np.testing.assert_array_equal(riccati.riccati_variance(0.0, 1.5, 0.0, t), 1.5 * t)
    np.testing.assert_array_equal(riccati.riccati_variance(0.7, 1.0, 3.0, 0.0), 0.0)
    # No measurement and a stable mode: the causal DLE variance q (1 - e^{2 alpha t}) / (-2 alpha).
    np.testing.assert_allclose(
        riccati.riccati_variance(-0.5, 2.0, 0.0, t), 2.0 * -np.expm1(-t) / 1.0, rtol=1e-15
    )
    # Large t: no overflow, the steady state (alpha + beta) / k.
    beta = np.hypot(0.6, 2.0)
    assert riccati.riccati_variance(0.6, 2.0, 2.0, 1e300) == pytest.approx((0.6 + beta) / 2.0)
    assert riccati.riccati_steady_state(0.6, 0.0, 2.0) == 0.0  # v stays at 0 from v(0) = 0
    assert riccati.riccati_steady_state(0.1, 1.0, 0.0) == np.inf  # unstable, unmeasured


@given(st.floats(-3, 3), st.floats(0.01, 3), st.floats(0.01, 5))
def test_riccati_variance_rises_monotonically_to_the_are_root(alpha, q, k):
    t = np.linspace(0.0, 8.0, 200)
    v = riccati.riccati_variance(alpha, q, k, t)
    v_inf = float(riccati.riccati_steady_state(alpha, q, k))
    assert np.all(np.diff(v) >= -1e-15 * v_inf)
    assert np.all(v <= v_inf * (1 + 1e-12))
    assert abs(2 * alpha * v_inf + q - k * v_inf**2) <= 1e-12 * max(q, k * v_inf**2, 1.0)
    # More information never increases the variance.
    assert np.all(riccati.riccati_variance(alpha, q, 2 * k, t) <= v * (1 + 1e-12))


def test_riccati_broadcasts_over_modes_and_times():
    lam = np.array([-0.3 + 1j, -0.3 - 1j, 0.2])
    q, c, r = np.array([0.5, 0.5, 1.0]), np.array([1 + 0.5j, 1 - 0.5j, 2.0]), np.ones(3)
    t = np.linspace(0, 2, 5)
    modes = riccati.riccati_mode_variances(lam, q, c, r, t)
    assert modes.shape == (5, 3)
    np.testing.assert_allclose(modes[:, 2], riccati.riccati_variance(0.2, 1.0, 4.0, t))
    S = np.array([[1 - 1j, 1 + 1j, 0.3], [1, 1, 0.0], [0.2j, -0.2j, 1.0]])
    V = riccati.eigen_riccati_covariance(lam, S, q, c, r, t)
    assert V.shape == (5, 3, 3)
    np.testing.assert_allclose(V, np.swapaxes(V, -1, -2))
    assert np.linalg.eigvalsh(V[1:]).min() > 0
    np.testing.assert_allclose(V[-1], (S * modes[-1]) @ S.conj().T, atol=1e-14)
    late = riccati.eigen_riccati_covariance(lam, S, q, c, r, 1e4)
    np.testing.assert_allclose(late, riccati.eigen_riccati_steady_state(lam, S, q, c, r))
    np.testing.assert_allclose(
        riccati.eigen_riccati_covariance(lam, S, q, np.zeros(3), r, 0.0), 0.0, atol=1e-15
    )


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: riccati.riccati_variance(0.1, -1.0, 1.0, 1.0), "q must be >= 0"),
        (lambda: riccati.riccati_variance(0.1, 1.0, -1.0, 1.0), "information must be >= 0"),
        (lambda: riccati.riccati_variance(0.1, 1.0, 1.0, [-1.0, 1.0]), "t must be >= 0"),
        (
            lambda: riccati.riccati_mode_variances(LAM2, [1.0, 1.0], [1.0, 1.0], [1.0, 0.0], 1.0),
            "measurement_variances must be > 0",
        ),
        (
            lambda: riccati.riccati_mode_variances(LAM2, [1.0], [1.0, 1.0], [1.0, 1.0], 1.0),
            r"process_variances must have shape \(2,\)",
        ),
        (
            lambda: riccati.eigen_riccati_covariance(
                LAM2, S2, [1.0, 2.0], [1.0, 1.0], [1.0, 1.0], 1.0
            ),
            "not real",
        ),
        (
            lambda: riccati.eigen_riccati_steady_state(
                LAM2, np.ones((2, 2)), [1.0, 1.0], [1.0, 1.0], [1.0, 1.0]
            ),
            "S must be invertible",
        ),
    ],
)
def test_riccati_bad_input(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()

"""Oscillator closed forms: shapes, regimes, stability, bad input (the registry checks the math)."""

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.linalg import expm

from estimators.closed_forms import oscillator as osc

OMEGAS = st.floats(0.2, 3.0)
ZETAS = st.floats(0.02, 4.0)
TIMES = st.floats(-2.0, 6.0)


def _eigenvector_route(omega, gamma, t):
    """P diag(e^{lambda t}) P^-1 with the eigenvectors of A (seed 002 A.1.3), evaluated as is."""
    sigma = np.sqrt((gamma - omega) * (gamma + omega))
    P = np.array([[1.0, 1.0], [-gamma + sigma, -gamma - sigma]])
    lam = np.array([-gamma + sigma, -gamma - sigma])
    return P @ np.diag(np.exp(lam * t)) @ np.linalg.inv(P)


# --- propagators --------------------------------------------------------------------------------


def test_batched_shapes_and_broadcasting():
    omega = np.array([[0.5], [1.0], [2.0]])  # (3, 1): under, critical, over for gamma = 1
    t = np.linspace(0.0, 3.0, 5)  # (5,)
    E = osc.propagator(omega, 1.0, t)
    assert E.shape == (3, 5, 2, 2)
    for i, w in enumerate(omega[:, 0]):
        for k, tk in enumerate(t):
            # normwise: entries like c - gamma s cancel, so no entrywise relative bound
            np.testing.assert_allclose(
                E[i, k], expm(osc.drift_matrix(w, 1.0) * tk), rtol=0, atol=1e-13
            )
    assert osc.drift_matrix(omega, [1.0, 2.0]).shape == (3, 2, 2, 2)
    assert osc.propagator(1.0, 0.3, 2.0).shape == (2, 2)


@given(OMEGAS, ZETAS, TIMES, TIMES)
def test_semigroup_and_determinant(omega, zeta, t, s):
    gamma = zeta * omega
    E_t, E_s = osc.propagator(omega, gamma, t), osc.propagator(omega, gamma, s)
    E_ts = osc.propagator(omega, gamma, t + s)
    scale = max(1.0, np.abs(E_t).max() * np.abs(E_s).max())
    np.testing.assert_allclose(E_t @ E_s, E_ts, atol=1e-13 * scale)
    # det e^{At} = e^{tr(A) t} = e^{-2 gamma t}; ad - bc cancels down from |E|^2
    det_scale = np.abs(E_t).max() ** 2
    np.testing.assert_allclose(np.linalg.det(E_t), np.exp(-2 * gamma * t), atol=1e-14 * det_scale)


@given(OMEGAS, st.floats(0.02, 0.98), st.floats(1.02, 4.0), st.floats(0.0, 6.0))
def test_unified_form_equals_each_printed_form(omega, zeta_under, zeta_over, t):
    for gamma, printed in (
        (zeta_under * omega, osc.propagator_underdamped(omega, zeta_under * omega, t)),
        (omega, osc.propagator_critical(omega, t)),
        (zeta_over * omega, osc.propagator_overdamped(omega, zeta_over * omega, t)),
    ):
        np.testing.assert_allclose(osc.propagator(omega, gamma, t), printed, rtol=0, atol=1e-14)


def test_identity_at_zero_lag_and_backward_propagation():
    for gamma in (0.2, 1.3, 4.0):
        np.testing.assert_array_equal(osc.propagator(1.3, gamma, 0.0), np.eye(2))
        forward, backward = osc.propagator(1.3, gamma, 1.7), osc.propagator(1.3, gamma, -1.7)
        scale = np.abs(forward).max() * np.abs(backward).max()  # e^{(gamma + sigma) t} ~ 4e5
        np.testing.assert_allclose(forward @ backward, np.eye(2), atol=1e-15 * scale)


def test_series_branch_is_continuous_at_its_boundary():
    # |u| t^2 = 1 is where the power series hands over to cos/sin or to the expm1 form.
    omega, t = 1.0, 2.0
    for side in (-1.0, 1.0):
        u_edge = side / t**2
        gamma = np.sqrt(omega**2 - u_edge)
        below = osc.propagator(omega, gamma * (1 - side * 1e-13), t)
        above = osc.propagator(omega, gamma * (1 + side * 1e-13), t)
        np.testing.assert_allclose(below, above, rtol=0, atol=1e-12)


def _mp_propagator(omega, gamma, t):
    with mpmath.workdps(40):
        A = mpmath.matrix([[0, 1], [-(mpmath.mpf(omega) ** 2), -2 * mpmath.mpf(gamma)]])
        E = mpmath.expm(A * mpmath.mpf(t))
        return np.array([[float(E[i, j]) for j in range(2)] for i in range(2)])


@pytest.mark.parametrize("delta", [1e-8, 1e-12, 1e-15])
def test_near_critical_stable_while_eigenvector_route_loses_digits(delta):
    omega, t = 1.3, 2.7
    gamma = omega * (1 + delta)
    reference = _mp_propagator(omega, gamma, t)
    assert np.abs(osc.propagator(omega, gamma, t) - reference).max() < 2e-15
    # the printed cosh/sinh form keeps full accuracy too: sinh(sigma t)/sigma does not cancel
    assert np.abs(osc.propagator_overdamped(omega, gamma, t) - reference).max() < 2e-15
    # (e^{lambda_1 t} - e^{lambda_2 t}) / (2 sigma) cancels: error ~ eps / (sigma t) >= 1e-14
    assert np.abs(_eigenvector_route(omega, gamma, t) - reference).max() > 1e-14


def test_exact_critical_damping_needs_the_stable_form():
    np.testing.assert_allclose(
        osc.propagator(1.3, 1.3, 0.8), osc.propagator_critical(1.3, 0.8), atol=1e-16
    )
    with pytest.raises(ValueError, match="gamma must be < omega"):
        osc.propagator_underdamped(1.3, 1.3, 0.8)
    with pytest.raises(ValueError, match="gamma must be > omega"):
        osc.propagator_overdamped(1.3, 1.3, 0.8)


def test_strongly_overdamped_long_lag_stays_finite():
    # sigma t ~ 800: cosh overflows in the printed form; the slow mode e^{-t w^2/(g + s)} ~ 0.96
    stable = osc.propagator(0.01, 1.0, 800.0)
    sigma = np.sqrt(1 - 1e-4)  # the fast mode e^{-(gamma + sigma) t} has vanished
    slow = np.exp(-800 * 1e-4 / (1 + sigma))
    np.testing.assert_allclose(stable[0, :], [slow * (1 + sigma) / (2 * sigma), slow / (2 * sigma)])
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(osc.propagator_overdamped(0.01, 1.0, 800.0)).all()


# --- steady state, transients, particular solutions ---------------------------------------------


@given(OMEGAS, st.floats(0.05, 3.0), st.floats(0.1, 4.0), st.floats(-2, 2), st.floats(-2, 2))
def test_steady_state_matches_frequency_response(omega0, gamma, w, p, q):
    C, D = osc.steady_state_coefficients(omega0, gamma, w, p, q)
    H = osc.frequency_response(omega0, gamma, w)
    np.testing.assert_allclose(complex(C, -D), (p - 1j * q) * H, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(osc.response_amplitude(omega0, gamma, w), abs(H), rtol=1e-14)
    # cos drive: x_ss = |H| cos(w t + arg H)
    t = np.linspace(0, 3, 7)
    x = osc.steady_state(omega0, gamma, w, 1.0, 0.0, t)[:, 0]
    amp, phase = osc.response_amplitude(omega0, gamma, w), osc.response_phase(omega0, gamma, w)
    np.testing.assert_allclose(x, amp * np.cos(w * t + phase), rtol=0, atol=1e-13 * amp)
    assert -np.pi < phase <= 0


def test_steady_state_shapes_and_velocity():
    t = np.linspace(0.0, 2.0, 9)
    z = osc.steady_state(1.2, 0.3, np.array([[0.5], [2.0]]), 1.0, -0.5, t)
    assert z.shape == (2, 9, 2)
    # velocity is the time derivative of the position (central difference, h = 1e-6)
    h = 1e-6
    zp = osc.steady_state(1.2, 0.3, 0.5, 1.0, -0.5, t + h)[:, 0]
    zm = osc.steady_state(1.2, 0.3, 0.5, 1.0, -0.5, t - h)[:, 0]
    np.testing.assert_allclose(z[0, :, 1], (zp - zm) / (2 * h), atol=1e-8)


@pytest.mark.parametrize(("omega0", "gamma"), [(1.3, 0.4), (1.3, 1.3), (1.3, 2.9)])
def test_transient_coefficients_equal_the_stable_transient(omega0, gamma):
    x_ss, v_ss = 0.7, -0.4
    s = np.linspace(0, 4, 9)
    stable = osc.transient(omega0, gamma, [x_ss, v_ss], s)
    assert stable.shape == (9, 2)
    np.testing.assert_allclose(stable[0], [-x_ss, -v_ss], atol=1e-15)
    if gamma < omega0:
        E, F = osc.underdamped_transient_coefficients(omega0, gamma, x_ss, v_ss)
        wd = np.sqrt(omega0**2 - gamma**2)
        x = np.exp(-gamma * s) * (E * np.cos(wd * s) + F * np.sin(wd * s))
    elif gamma == omega0:
        E, F = osc.critical_transient_coefficients(gamma, x_ss, v_ss)
        x = np.exp(-gamma * s) * (E + F * s)
    else:
        U, V = osc.overdamped_transient_coefficients(omega0, gamma, x_ss, v_ss)
        sigma = np.sqrt(gamma**2 - omega0**2)
        x = U * np.exp(-(gamma - sigma) * s) + V * np.exp(-(gamma + sigma) * s)
    np.testing.assert_allclose(x, stable[:, 0], atol=1e-14)


def test_printed_overdamped_coefficients_would_not_start_from_rest():
    # The seed's U, V: U + V = -(gamma/sigma) x_ss; the corrected ones give -x_ss.
    omega0, gamma, x_ss, v_ss = 1.0, 2.0, 0.7, -0.4
    sigma = np.sqrt(gamma**2 - omega0**2)
    printed_sum = ((-(gamma + sigma) * x_ss + v_ss) + (-(gamma - sigma) * x_ss - v_ss)) / (
        2 * sigma
    )
    U, V = osc.overdamped_transient_coefficients(omega0, gamma, x_ss, v_ss)
    assert abs(U + V + x_ss) < 1e-15
    assert abs(printed_sum + x_ss) > 0.1


@given(OMEGAS, st.floats(0.05, 0.95), st.floats(0.1, 3.0), st.floats(0.0, 6.0))
def test_eq31_with_corrected_eq30_equals_stable_particular_solution(omega0, zeta, w, t):
    gamma = zeta * omega0
    stable = osc.particular_solution(omega0, gamma, w, t, alpha=1.7)
    eq31 = osc.particular_solution_underdamped(omega0, gamma, w, t, alpha=1.7)
    scale = 1.7 * osc.response_amplitude(omega0, gamma, w)
    np.testing.assert_allclose(eq31, stable[0], rtol=0, atol=1e-12 * max(scale, 1.0))


def test_particular_solution_starts_from_rest_in_every_regime():
    t = np.linspace(0.0, 5.0, 11)
    for gamma in (0.3, 1.1, 2.5):
        z = osc.particular_solution(1.1, gamma, 0.8, t, alpha=2.0)
        assert z.shape == (11, 2)
        np.testing.assert_allclose(z[0], 0.0, atol=1e-15)
    np.testing.assert_allclose(
        osc.particular_solution_critical(1.1, 0.8, t, alpha=2.0),
        osc.particular_solution(1.1, 1.1, 0.8, t, alpha=2.0)[:, 0],
        atol=1e-14,
    )
    np.testing.assert_allclose(
        osc.particular_solution_overdamped(1.1, 2.5, 0.8, t, alpha=2.0),
        osc.particular_solution(1.1, 2.5, 0.8, t, alpha=2.0)[:, 0],
        atol=1e-14,
    )


def test_uv_route_loses_digits_near_critical_but_the_stable_form_does_not():
    omega0, w = 1.3, 0.9
    t = np.linspace(0.0, 8.0, 17)
    near = osc.particular_solution(omega0, omega0 * (1 + 1e-14), w, t)[:, 0]
    critical = osc.particular_solution_critical(omega0, w, t)
    uv = osc.particular_solution_overdamped(omega0, omega0 * (1 + 1e-14), w, t)
    assert np.abs(near - critical).max() < 1e-14  # the true difference is O(1e-14 t^2)
    assert np.abs(uv - critical).max() > 1e-11  # U, V ~ 1/sigma cancel


def test_anchored_response_is_the_particular_solution_shifted():
    # drive p cos(w t) + q sin(w t) from rest at t_i equals, in s = t - t_i, the same ODE with
    # the drive rotated; at t_i = 0 and q = 0 it is particular_solution.
    s = np.linspace(0.0, 4.0, 9)
    np.testing.assert_allclose(
        osc.anchored_response(1.2, 0.4, 0.7, 1.5, 0.0, 0.0, s),
        osc.particular_solution(1.2, 0.4, 0.7, s, alpha=1.5),
        atol=1e-15,
    )
    z = osc.anchored_response(1.2, 0.4, 0.7, 1.5, -0.3, np.array([[0.0], [2.5]]), s)
    assert z.shape == (2, 9, 2)
    np.testing.assert_allclose(z[:, 0], 0.0, atol=1e-15)


def test_damped_sine_integrals_small_lag_and_sign_of_eq30():
    # For small t: I1 ~ omega_d t^2 / 2, I2 ~ omega_d w t^3 / 3.
    gamma, wd, w, t = 0.3, 1.1, 0.7, 1e-3
    I1, I2 = osc.damped_sine_integrals(gamma, wd, w, t)
    np.testing.assert_allclose(I1, wd * t**2 / 2, rtol=1e-2)
    np.testing.assert_allclose(I2, wd * w * t**3 / 3, rtol=1e-2)
    assert I2 > 0  # the printed (G(l+) + G(l-))/2 is ~ (1 - e^{-gamma t})/gamma ~ t instead


# --- velocity noise -------------------------------------------------------------------------------


@given(OMEGAS, st.floats(0.05, 4.0), st.floats(0.1, 2.0))
def test_stationary_covariance_solves_lyapunov_and_is_the_long_lag_limit(omega, gamma, s):
    A = osc.drift_matrix(omega, gamma)
    P = osc.stationary_covariance(omega, gamma, s)
    Q = np.diag([0.0, s**2])
    np.testing.assert_allclose(A @ P + P @ A.T + Q, 0.0, atol=1e-13 * max(1.0, np.abs(P).max()))
    lag = 60.0 / min(gamma, omega**2 / (gamma + np.sqrt(max(gamma**2 - omega**2, 0.0))))
    np.testing.assert_allclose(
        osc.velocity_noise_covariance(omega, gamma, s, lag), P, rtol=0, atol=1e-12 * np.abs(P).max()
    )
    np.testing.assert_allclose(osc.velocity_noise_covariance(omega, gamma, s, 0.0), 0.0, atol=0)


def test_velocity_noise_covariance_shapes():
    V = osc.velocity_noise_covariance(2.0, np.array([0.2, 2.0, 6.0]), 0.5, np.array([[0.5], [1.0]]))
    assert V.shape == (2, 3, 2, 2)
    np.testing.assert_allclose(V, np.swapaxes(V, -1, -2))
    assert np.all(np.linalg.eigvalsh(V) > 0)


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: osc.propagator(-1.0, 0.5, 1.0), ValueError, "omega must be >= 0, got min -1"),
        (lambda: osc.propagator(1.0, -0.5, 1.0), ValueError, "gamma must be >= 0"),
        (lambda: osc.propagator(1.0, 0.5, [1.0, np.nan]), ValueError, "t has 1 NaN"),
        (lambda: osc.propagator(1.0, 0.5, "soon"), TypeError, "t must be numeric"),
        (lambda: osc.propagator(1.0, 0.5, 1j), TypeError, "t must be real"),
        (
            lambda: osc.propagator_underdamped([1.0, 1.0], [0.5, 2.0], 1.0),
            ValueError,
            r"gamma must be < omega \(underdamped\), got gamma = 2, omega = 1",
        ),
        (
            lambda: osc.overdamped_transient_coefficients(2.0, 1.0, 0.1, 0.2),
            ValueError,
            "gamma must be > omega0",
        ),
        (
            lambda: osc.steady_state_coefficients(1.0, 0.0, 1.0, 1.0, 0.0),
            ValueError,
            "undamped resonance",
        ),
        (lambda: osc.response_amplitude(1.0, 0.1, -2.0), ValueError, "drive_freq must be >= 0"),
        (
            lambda: osc.transient(1.0, 0.5, [1.0, 2.0, 3.0], 1.0),
            ValueError,
            r"z_ss must have shape \(\.\.\., 2\)",
        ),
        (
            lambda: osc.damped_sine_integrals(0.0, 1.0, 1.0, 2.0),
            ValueError,
            "gamma must be > 0 where drive_freq = omega_d",
        ),
        (lambda: osc.stationary_covariance(1.0, 0.0, 1.0), ValueError, "gamma must be > 0"),
        (lambda: osc.stationary_covariance(0.0, 1.0, 1.0), ValueError, "omega must be > 0"),
        (lambda: osc.velocity_noise_covariance(1.0, 1.0, 1.0, -0.1), ValueError, "t must be >= 0"),
    ],
)
def test_bad_input(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()

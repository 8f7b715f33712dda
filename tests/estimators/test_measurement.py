"""Propagated measurement covariance and lag kernels: properties and bad input.

The registry (`verify/checks/measurement.py`) proves and checks the math; these tests pin the
API: shapes and batching, limits, agreement between the forms, and the errors.
"""

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from estimators.closed_forms import dle
from estimators.closed_forms import measurement as meas
from sde_sim.models import covariance_from_eigen, real_from_eigen
from verify.tools import random_eigensystem, random_spd

S2 = np.array([[1 - 1j, 1 + 1j], [1, 1]])
LAM2 = np.array([-0.1 - 1j, -0.1 + 1j])
C2 = np.array([1.4 - 0.3j, 1.4 + 0.3j])
A2 = real_from_eigen(LAM2, S2)


def _system(seed: int, d: int):
    rng = np.random.default_rng(seed)
    lam, S = random_eigensystem(rng, d)
    assume(np.linalg.cond(S) < 30)
    c = np.ones(d, dtype=complex)
    for k in range(d // 2):
        v = rng.uniform(0.5, 2.0) * np.exp(1j * rng.uniform(-1, 1))
        c[2 * k], c[2 * k + 1] = v, np.conj(v)
    return lam, S, c, random_spd(rng, d), random_spd(rng, d)


@given(st.integers(0, 2**32 - 1), st.integers(2, 5), st.floats(-3, 3))
def test_closed_form_is_symmetric_positive_definite_and_matches_numeric(seed, d, dt):
    lam, S, c, Q, R = _system(seed, d)
    V = meas.eigen_measurement_covariance(lam, S, Q, R, dt, C_eigenvalues=c)
    np.testing.assert_array_equal(V, V.T)
    assert np.linalg.eigvalsh(V).min() > 0  # R > 0: positive definite at every lag (A.1)
    A, C = real_from_eigen(lam, S), real_from_eigen(c, S, name="C")
    numeric = meas.measurement_covariance(A, Q, C, R, dt)
    np.testing.assert_allclose(V, numeric, rtol=1e-9, atol=1e-12 * np.abs(numeric).max())


def test_shapes_and_batching():
    Q, R = random_spd(np.random.default_rng(0), 2), 0.1 * np.eye(2)
    assert meas.eigen_measurement_covariance(LAM2, S2, Q, R, 0.5).shape == (2, 2)
    dt = np.linspace(-2, 2, 12).reshape(3, 4)
    V = meas.eigen_measurement_covariance(LAM2, S2, Q, R, dt, C_eigenvalues=C2)
    assert V.shape == (3, 4, 2, 2)
    C = real_from_eigen(C2, S2, name="C")
    np.testing.assert_allclose(V, meas.measurement_covariance(A2, Q, C, R, dt), rtol=1e-10)
    assert meas.measurement_transition(A2, C, dt).shape == (3, 4, 2, 2)
    assert meas.eigen_measurement_variances(LAM2, [0.3, 0.3], [0.1, 0.1], dt).shape == (3, 4, 2)
    assert meas.isotropic_measurement_variance(-0.2, 0.3, 0.1, dt).shape == (3, 4)
    lag = np.abs(dt)
    assert meas.rfa_lag_variance(lag, mu=0.3, sigma2_tilde=1, eta2=2, gamma2=0.1).shape == (3, 4)
    assert meas.rfa_log_precision(lag, a=1.0, b=0.5, mu=0.3).shape == (3, 4)
    assert meas.rfa_precision(lag, a=-0.2, b=0.5, mu=0.3).shape == (3, 4)
    assert meas.zero_decay_bias(lag, c=1.0, s=0.5, kappa=1.2, nu=8.0).shape == (3, 4)


def test_zero_lag_is_the_measurement_noise():
    Q, R = np.eye(2), np.array([[0.2, 0.05], [0.05, 0.1]])
    C = np.array([[1.0, 0.4], [-0.3, 0.8]])
    np.testing.assert_allclose(meas.measurement_transition(A2, C, 0.0), np.eye(2), atol=1e-15)
    np.testing.assert_allclose(meas.measurement_covariance(A2, Q, C, R, 0.0), R, atol=1e-15)
    closed = meas.eigen_measurement_covariance(LAM2, S2, Q, R, 0.0, C_eigenvalues=C2)
    np.testing.assert_allclose(closed, R, atol=1e-14)


def test_transition_is_the_state_propagator_when_c_commutes():
    C = real_from_eigen(C2, S2, name="C")
    from scipy.linalg import expm

    for dt in (-1.3, 0.7):
        np.testing.assert_allclose(meas.measurement_transition(A2, C, dt), expm(-A2 * dt))


def test_stable_dynamics_attenuate_measurement_noise_causally():
    # seed 000 A.3: causal lags -> |c|^2 q / (2|Re lambda|) per mode, the R term decays away;
    # non-causal lags amplify both.
    q, r = np.array([0.3, 0.3]), np.array([0.5, 0.5])
    causal = meas.eigen_measurement_variances(LAM2, q, r, -200.0, C_eigenvalues=C2)
    np.testing.assert_allclose(causal, np.abs(C2) ** 2 * q / 0.2, rtol=1e-12)
    non_causal = meas.eigen_measurement_variances(LAM2, q, r, 20.0, C_eigenvalues=C2)
    assert np.all(non_causal > 10 * causal)


def test_diagonal_form_matches_full_eigen_form():
    q, r = [0.3, 0.3], [0.1, 0.1]
    Q, R = covariance_from_eigen(S2, q), covariance_from_eigen(S2, r, name="R")
    dt = np.linspace(-2, 2, 7)
    modes = meas.eigen_measurement_variances(LAM2, q, r, dt, C_eigenvalues=C2)
    V = meas.eigen_measurement_covariance(LAM2, S2, Q, R, dt, C_eigenvalues=C2)
    np.testing.assert_allclose(V, ((S2 * modes[:, None, :]) @ S2.conj().T).real, atol=1e-14)


def test_isotropic_kernel_is_continuous_at_alpha_zero_and_matches_rfa():
    dt = np.array([-3.0, -0.1, 0.0, 0.1, 3.0])
    at_zero = meas.isotropic_measurement_variance(0.0, 0.4, 0.2, dt, c_gain=1.5)
    np.testing.assert_allclose(at_zero, 2.25 * 0.4 * np.abs(dt) + 0.2)
    near = meas.isotropic_measurement_variance(1e-12, 0.4, 0.2, dt, c_gain=1.5)
    np.testing.assert_allclose(near, at_zero, rtol=1e-10)
    lag = np.abs(dt)
    mu, sigma2, eta2, gamma2 = 0.3, 0.4, 0.2, 0.05
    k = meas.rfa_kernel_coefficients(mu, sigma2, eta2, gamma2, c_gain=1.5)
    eq9 = meas.rfa_lag_variance(lag, mu=mu, sigma2_tilde=k.sigma2_tilde, eta2=eta2, gamma2=gamma2)
    iso = meas.isotropic_residual_variance(
        lag, mu=mu, sigma2=sigma2, eta2=eta2, gamma2=gamma2, c_gain=1.5
    )
    np.testing.assert_allclose(eq9, iso, rtol=1e-14)
    np.testing.assert_allclose(eq9, k.a * np.exp(-2 * mu * lag) + k.b, rtol=1e-14)
    np.testing.assert_allclose(k.sigma2_tilde, 2.25 * 0.4 / 0.6)


@given(
    st.floats(1e-3, 2.0),
    st.floats(1e-4, 10.0),
    st.floats(0.0, 10.0),
    st.floats(1e-4, 10.0),
)
def test_rfa_kernel_is_positive_and_log_precision_matches(mu, st2, eta2, gamma2):
    lag = np.concatenate([[0.0], np.geomspace(1e-3, 1e3, 25)])
    k = meas.rfa_kernel_coefficients(mu, 2 * mu * st2, eta2, gamma2)
    V = meas.rfa_lag_variance(lag, mu=mu, sigma2_tilde=st2, eta2=eta2, gamma2=gamma2)
    assert np.all(min(k.a + k.b, k.b) * (1 - 1e-14) <= V)  # positive with or without |a| <= b
    logp = meas.rfa_log_precision(lag, a=k.a, b=k.b, mu=mu)
    np.testing.assert_allclose(logp, -np.log(V), rtol=1e-12, atol=1e-12)
    P = meas.rfa_precision(lag, a=k.a, b=k.b, mu=mu)
    np.testing.assert_allclose(P, 1.0 / V, rtol=1e-12)
    steps = np.diff(P)
    if k.a > 0:  # integrative: the gate opens with the lag
        assert np.all(steps >= -1e-15 * P[1:])
    elif k.a < 0:  # diffusive: it closes
        assert np.all(steps <= 1e-15 * P[1:])


def test_regime_forms_stay_finite_at_extreme_lags():
    lag = np.array([0.0, 1e6])
    for a in (5.0, -0.05, 0.0):
        logp = meas.rfa_log_precision(lag, a=a, b=0.1, mu=1.0)
        assert np.all(np.isfinite(logp))
        np.testing.assert_allclose(logp[1], -np.log(0.1))


def test_alibi_slope_is_minus_the_initial_slope_of_the_bias():
    kw = {"c": 0.7, "s": 0.4, "kappa": 1.25, "nu": 64.0}
    h = 1e-5
    b = meas.zero_decay_bias(np.array([0.0, h, 2 * h]), **kw)
    # second-order one-sided difference: truncation ~ h^2 |B'''| ~ 1e-9, round-off ~ u/h ~ 1e-11
    slope = (-3 * b[0] + 4 * b[1] - b[2]) / (2 * h)
    m = meas.alibi_slope(**kw)
    assert m > 0  # a distance penalty, as in ALiBi
    np.testing.assert_allclose(m, -slope, rtol=0, atol=1e-8)
    # large nu: the Brownian term c/s dominates (seed 004 B.4.2)
    np.testing.assert_allclose(meas.alibi_slope(c=0.7, s=0.4, kappa=1.0, nu=1e12), 0.7 / 0.4)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (
            lambda: meas.measurement_transition(A2, [[1.0, 2.0], [2.0, 4.0]], 1.0),
            ValueError,
            "C must be invertible",
        ),
        (
            lambda: meas.measurement_covariance(A2, np.eye(2), np.eye(2), -np.eye(2), 1.0),
            ValueError,
            "R must be positive semidefinite; its smallest eigenvalue is -1",
        ),
        (
            lambda: meas.measurement_covariance(A2, np.eye(2), np.eye(3), np.eye(2), 1.0),
            ValueError,
            r"C must have shape \(2, 2\)",
        ),
        (
            lambda: meas.eigen_measurement_covariance(
                LAM2, S2, np.eye(2), np.eye(2), 1.0, C_eigenvalues=[1.0, 0.0]
            ),
            ValueError,
            "C_eigenvalues must be nonzero",
        ),
        (
            lambda: meas.eigen_measurement_covariance(
                LAM2, S2, np.eye(2), np.eye(2), 1.0, C_eigenvalues=[1.0]
            ),
            ValueError,
            r"C_eigenvalues must have shape \(2,\)",
        ),
        (
            lambda: meas.eigen_measurement_covariance(
                LAM2, S2, np.eye(2), np.eye(2), 1.0, C_eigenvalues=[1.0, 2.0j]
            ),
            ValueError,
            "not real",
        ),
        (
            lambda: meas.eigen_measurement_variances(LAM2, [0.3, 0.3], [0.1, -0.1], 1.0),
            ValueError,
            "measurement_variances must be >= 0",
        ),
        (
            lambda: meas.eigen_measurement_variances(LAM2, [0.3, 0.3], [0.1], 1.0),
            ValueError,
            r"measurement_variances must have shape \(2,\)",
        ),
        (
            lambda: meas.isotropic_measurement_variance(-0.1, -0.3, 0.1, 1.0),
            ValueError,
            "sigma2 must be >= 0",
        ),
        (
            lambda: meas.isotropic_measurement_variance(-0.1, 0.3, 0.1, 1.0, c_gain=0.0),
            ValueError,
            "c_gain must be nonzero",
        ),
        (
            lambda: meas.isotropic_measurement_variance(-0.1, 0.3, 0.1, "x"),
            TypeError,
            "dt must be numeric",
        ),
        (
            lambda: meas.rfa_lag_variance(-1.0, mu=0.1, sigma2_tilde=1, eta2=1, gamma2=1),
            ValueError,
            "lag must be >= 0",
        ),
        (
            lambda: meas.rfa_kernel_coefficients(0.0, 0.3, 0.1, 0.1),
            ValueError,
            "mu must be > 0",
        ),
        (
            lambda: meas.rfa_log_precision(1.0, a=0.5, b=0.0, mu=0.1),
            ValueError,
            "b must be > 0",
        ),
        (
            lambda: meas.rfa_precision(1.0, a=-0.5, b=0.2, mu=0.1),
            ValueError,
            "a \\+ b = eta2 \\+ gamma2 must be > 0",
        ),
        (
            lambda: meas.alibi_slope(c=1.0, s=0.5, kappa=1.0, nu=0.0),
            ValueError,
            "nu must be > 0",
        ),
    ],
)
def test_bad_input(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_uses_dle_state_covariance():
    # V^C = C V C^T + Phi_z R Phi_z^T: with R = 0 and C = I it is dle's V(dt)
    Q = np.array([[0.2, 0.05], [0.05, 0.1]])
    dt = np.array([-1.0, 0.5])
    np.testing.assert_allclose(
        meas.measurement_covariance(A2, Q, np.eye(2), np.zeros((2, 2)), dt),
        dle.propagated_covariance(A2, Q, dt),
    )

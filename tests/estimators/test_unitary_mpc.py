"""Unitary limit (RoPE reading) and the MPC closed forms: properties and bad input.

The registry (`verify/checks/unitary.py`, `verify/checks/mpc.py`) proves and checks the math;
these tests pin the API: shapes and batching, limits, invariances, and the errors.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.polynomial import legendre
from scipy.linalg import expm

from estimators.closed_forms import measurement as meas
from estimators.closed_forms import mpc, unitary
from sde_sim.models import rotation_generator
from verify.problems.mpc import random_problem

W = np.array([0.7, 1.9])


# --- unitary ----------------------------------------------------------------------------------


def test_unitary_variance_is_the_isotropic_kernel_at_alpha_zero():
    dt = np.linspace(-5, 5, 11)
    v = unitary.unitary_measurement_variance(dt, sigma2=0.3, eta2=0.1, c_gain=1.0 + 1.0j)
    np.testing.assert_allclose(
        v, meas.isotropic_measurement_variance(0.0, 0.3, 0.1, dt, c_gain=1 + 1j)
    )
    np.testing.assert_allclose(v, v[::-1])  # causal and non-causal lags alike
    np.testing.assert_allclose(np.diff(v[5:]), 2 * 0.3 * 1.0)  # linear growth: ALiBi's a|i-j|+b


@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 6))
def test_rotation_preserves_norms_is_undone_and_matches_the_generator(seed, m, T):
    rng = np.random.default_rng(seed)
    w = rng.uniform(-3, 3, size=m)
    x = rng.normal(size=(2, T, 2 * m))
    t = rng.uniform(-5, 5, size=T)
    r = unitary.rotate_pairs(x, t, w)
    np.testing.assert_allclose(np.linalg.norm(r, axis=-1), np.linalg.norm(x, axis=-1))
    np.testing.assert_allclose(unitary.rotate_pairs(r, -t, w), x, atol=1e-13)
    expected = np.einsum("tab,htb->hta", expm(-rotation_generator(w) * t[:, None, None]), x)
    np.testing.assert_allclose(r, expected, atol=1e-12)


def test_scores_depend_on_relative_time_only():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(2, 5, 4))
    t = np.array([0.0, 0.3, 1.1, 2.0, 4.5])
    s = unitary.rotary_scores(q, k, t, W)
    assert s.shape == (5, 5)
    np.testing.assert_allclose(unitary.rotary_scores(q, k, t - 7.25, W), s, atol=1e-13)
    np.testing.assert_allclose(np.diag(s), np.sum(q * k, axis=-1))  # no rotation at lag 0
    Om = rotation_generator(W)
    np.testing.assert_allclose(s[1, 3], q[1] @ expm(-Om * (t[3] - t[1])) @ k[3], atol=1e-13)


def test_residuals_and_logits():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(2, 3, 6, 4))  # 3 heads
    t = np.arange(6) * 0.5
    R = unitary.unitary_residual_norms(q, k, t, W)
    assert R.shape == (3, 6, 6) and np.all(R >= -1e-12)
    unit_q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    unit_k = k / np.linalg.norm(k, axis=-1, keepdims=True)
    chordal = unitary.unitary_residual_norms(unit_q, unit_k, t, W)
    np.testing.assert_allclose(chordal, 2 * (1 - unitary.rotary_scores(unit_q, unit_k, t, W)))
    L = unitary.unitary_logits(q, k, t, W, nu=4.0, sigma2=0.2, eta2=0.1)
    lag = np.abs(t[None, :] - t[:, None])
    np.testing.assert_allclose(L, np.log(4.0) - np.log(4.0 * (0.2 * lag + 0.1) + R))


def test_zero_process_noise_temperature():
    # 3.8: sigma^2 = 0 and unit rows at lag 0: exp(L) = nu / (nu eta^2 + 2 - 2x), whose
    # first-order form in x is nu (tau/2) exp(tau x) with tau = 2 / (nu eta^2 + 2)
    tau = unitary.unitary_temperature(nu=4.0, eta2=0.5)
    np.testing.assert_allclose(tau, 2 / (4 * 0.5 + 2))
    q = np.array([[1.0, 0.0], [1.0, 0.0]])
    k = np.array([[np.cos(0.3), np.sin(0.3)], [np.cos(0.3), np.sin(0.3)]])
    x = np.cos(0.3)
    L = unitary.unitary_logits(q, k, [0.0, 0.0], [0.0], nu=4.0, sigma2=0.0, eta2=0.5)
    np.testing.assert_allclose(np.exp(L), 4.0 / (4.0 * 0.5 + 2 - 2 * x))
    first_order = np.log(4.0 * tau / 2) + tau * x
    # L - first_order = -log(1 - y) - y with y = tau x: between 0 and y^2 / (2 (1 - y))
    y = tau * x
    assert 0 < L[0, 0] - first_order < y**2 / (2 * (1 - y))


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (
            lambda: unitary.rotate_pairs(np.ones((3, 5)), np.zeros(3), [1.0, 2.0]),
            ValueError,
            "real pairs",
        ),
        (
            lambda: unitary.rotate_pairs(np.ones((3, 4)), np.zeros(3), [1.0]),
            ValueError,
            r"frequencies must have shape \(2,\)",
        ),
        (
            lambda: unitary.rotate_pairs(np.ones((3, 4)), np.zeros(4), W),
            ValueError,
            "t must broadcast",
        ),
        (
            lambda: unitary.rotary_scores(np.ones((3, 4)), np.ones((2, 4)), np.zeros(3), W),
            ValueError,
            "q and k must have the same shape",
        ),
        (
            lambda: unitary.unitary_logits(
                np.ones((2, 4)), np.ones((2, 4)), np.zeros(2), W, nu=0.0, sigma2=1, eta2=1
            ),
            ValueError,
            "nu must be > 0",
        ),
        (
            lambda: unitary.unitary_logits(
                np.ones((2, 4)), np.ones((2, 4)), np.zeros(2), W, nu=1.0, sigma2=0, eta2=0
            ),
            ValueError,
            "must be > 0",
        ),
        (
            lambda: unitary.unitary_measurement_variance(1.0, sigma2=-1.0, eta2=0.1),
            ValueError,
            "sigma2 must be >= 0",
        ),
        (lambda: unitary.rotate_pairs([[1.0j, 0.0]], [0.0], [1.0]), TypeError, "x must be real"),
    ],
)
def test_unitary_bad_input(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


# --- MPC --------------------------------------------------------------------------------------


def _problem(seed: int, d: int, sign: float = 1.0):
    rng = np.random.default_rng(seed)
    problem, S, *real = random_problem(rng, d, sign)
    return problem, S, tuple(real), rng


@given(
    st.integers(0, 2**32 - 1), st.integers(2, 5), st.sampled_from([1.0, -1.0]), st.floats(0.1, 2.0)
)
def test_modal_form_matches_the_matrix_form(seed, d, sign, t_f):
    problem, S, (A, B, Q_f, R_c), rng = _problem(seed, d, sign)
    x0, x_ref = rng.normal(size=(2, 3, d))
    S_inv = np.linalg.inv(S)
    modal = mpc.mpc_terminal_state(problem, x0 @ S_inv.T, x_ref @ S_inv.T, t_f) @ S.T
    np.testing.assert_allclose(modal.imag, 0.0, atol=1e-10)
    general = mpc.mpc_terminal_state_general(A, B, Q_f, R_c, x0, x_ref, t_f)
    np.testing.assert_allclose(modal.real, general, rtol=1e-8, atol=1e-10)
    beta = mpc.mpc_blend_weights(problem, t_f)
    assert np.all((beta >= 0) & (beta < 1))


def test_blend_weights_limits():
    lam = np.array([-0.5 + 1j, -0.5 - 1j, 0.0])
    b = np.array([1.0 + 0.5j, 1.0 - 0.5j, 2.0])
    cheap = mpc.modal_problem(lam, b, [1e9, 1e9, 1e9], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(mpc.mpc_blend_weights(cheap, 1.0), 1.0, atol=1e-8)  # reach x_ref
    free = mpc.modal_problem(lam, b, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(mpc.mpc_blend_weights(free, 1.0), 0.0)  # free response
    # Re(lam) = 0: g = t_f, so beta = c t_f / (1 + c t_f) with c = q |b|^2 / r = 4
    one = mpc.modal_problem(lam, b, [1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(mpc.mpc_blend_weights(one, 0.5)[2], 2.0 / 3.0)


def test_state_trajectory_endpoints_and_shapes():
    problem, S, _, rng = _problem(3, 4)
    x0, x_ref = rng.normal(size=(2, 5, 4)) + 0j
    tau = np.linspace(0, 1.2, 9)
    x = mpc.mpc_state(problem, x0, x_ref, 1.2, tau)
    u = mpc.mpc_control(problem, x0, x_ref, 1.2, tau)
    assert x.shape == u.shape == (5, 9, 4)
    np.testing.assert_allclose(x[:, 0], x0, atol=1e-14)
    np.testing.assert_allclose(
        x[:, -1], mpc.mpc_terminal_state(problem, x0, x_ref, 1.2), atol=1e-13
    )


def test_general_form_with_a_single_input():
    # B (d, m) with m = 1: the terminal state equals e^{A t_f} x0 + int e^{A(t_f - s)} B u(s) ds
    A = np.array([[-0.2, 1.0], [-1.0, -0.2]])
    B = np.array([[0.0], [1.0]])
    Q_f, R_c = np.diag([4.0, 1.0]), np.array([[0.3]])
    x0, x_ref, t_f = np.array([1.0, -0.5]), np.array([0.0, 2.0]), 1.7
    z, w = legendre.leggauss(40)
    s, w = 0.5 * t_f * (z + 1), 0.5 * t_f * w
    u = mpc.mpc_control_general(A, B, Q_f, R_c, x0, x_ref, t_f, s)
    assert u.shape == (40, 1)
    driven = np.einsum("k,kab,kb->a", w, expm(A * (t_f - s)[:, None, None]) @ B, u)
    terminal = mpc.mpc_terminal_state_general(A, B, Q_f, R_c, x0, x_ref, t_f)
    np.testing.assert_allclose(terminal, expm(A * t_f) @ x0 + driven, rtol=1e-12)


def test_eigen_weight_matrix_is_the_decoupled_cost():
    problem, S, (_, _, Q_f, _), rng = _problem(4, 3)
    x = rng.normal(size=3)
    x_s = np.linalg.solve(S, x)
    np.testing.assert_allclose(x @ Q_f @ x, np.sum(problem.terminal_weights * np.abs(x_s) ** 2))


S2 = np.array([[1 - 1j, 1 + 1j], [1, 1]])
P2 = mpc.modal_problem([-0.1 - 1j, -0.1 + 1j], [1 - 1j, 1 + 1j], [1.0, 1.0], [0.5, 0.5])


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (
            lambda: mpc.modal_problem([-1.0, -2.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]),
            ValueError,
            "control_weights must be > 0",
        ),
        (
            lambda: mpc.modal_problem([-1.0, -2.0], [1.0], [1.0, 1.0], [1.0, 1.0]),
            ValueError,
            r"B_eigenvalues must have shape \(2,\)",
        ),
        (
            lambda: mpc.modal_problem([-1.0, -2.0], [1.0, 1.0], [1.0, -1.0], [1.0, 1.0]),
            ValueError,
            "terminal_weights must be >= 0",
        ),
        (lambda: mpc.mpc_blend_weights(P2, 0.0), ValueError, "t_f must be > 0"),
        (
            lambda: mpc.mpc_control(P2, [1.0, 1.0], [0.0, 0.0], 1.0, [0.5, 1.5]),
            ValueError,
            r"tau must lie in \[0, t_f\]",
        ),
        (
            lambda: mpc.mpc_terminal_state(P2, [1.0, 1.0, 1.0], [0.0, 0.0], 1.0),
            ValueError,
            r"x0 must have shape \(\.\.\., 2\)",
        ),
        (lambda: mpc.eigen_weight_matrix(S2, [1.0, 2.0]), ValueError, "W is not real"),
        (
            lambda: mpc.mpc_terminal_state_general(
                -np.eye(2), np.eye(2), np.eye(2), np.zeros((2, 2)), [1.0, 0.0], [0.0, 0.0], 1.0
            ),
            ValueError,
            "R_c must be positive definite",
        ),
        (
            lambda: mpc.mpc_terminal_state_general(
                -np.eye(2), np.ones((3, 1)), np.eye(2), np.eye(1), [1.0, 0.0], [0.0, 0.0], 1.0
            ),
            ValueError,
            "B must have 2 rows",
        ),
    ],
)
def test_mpc_bad_input(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()

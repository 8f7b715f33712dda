"""Propagated covariance closed forms: properties and bad input (the registry checks the math)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from estimators.closed_forms import dle
from sde_sim.models import covariance_from_eigen, real_from_eigen
from verify.tools import random_eigensystem, random_spd

S2 = np.array([[1 - 1j, 1 + 1j], [1, 1]])
LAM2 = np.array([-0.1 - 1j, -0.1 + 1j])


@given(
    st.integers(0, 2**32 - 1), st.integers(2, 5), st.floats(-3, 3).filter(lambda x: abs(x) > 1e-3)
)
def test_closed_form_is_symmetric_psd_and_matches_van_loan(seed, d, dt):
    rng = np.random.default_rng(seed)
    lam, S = random_eigensystem(rng, d)
    Q = random_spd(rng, d)
    V = dle.eigen_propagated_covariance(lam, S, Q, dt)
    np.testing.assert_allclose(V, V.T)
    assert np.linalg.eigvalsh(V).min() > 0
    A = real_from_eigen(lam, S)
    np.testing.assert_allclose(V, dle.propagated_covariance(A, Q, dt), rtol=1e-9, atol=1e-12)


def test_batched_lags_and_shapes():
    Q = covariance_from_eigen(S2, [0.3, 0.3])
    dt = np.linspace(-2, 2, 9)
    V = dle.diagonal_propagated_covariance(LAM2, S2, Q, dt)
    assert V.shape == (9, 2, 2)
    np.testing.assert_allclose(V, dle.eigen_propagated_covariance(LAM2, S2, Q, dt), atol=1e-14)
    np.testing.assert_allclose(V[4], 0.0, atol=1e-15)  # dt = 0: no uncertainty accumulated
    assert dle.eigen_mode_variances(LAM2, [0.3, 0.3], dt).shape == (9, 2)


def test_non_causal_lags_amplify_and_causal_lags_saturate():
    # Seed 004 Fig. 1 caption: backward propagation against a stable A amplifies the noise.
    q = np.array([1.0, 1.0])
    causal = dle.eigen_mode_variances(LAM2, q, -50.0)
    non_causal = dle.eigen_mode_variances(LAM2, q, 50.0)
    np.testing.assert_allclose(causal, 1 / 0.2, rtol=1e-4)  # q / (2 |Re lambda|)
    assert np.all(non_causal > 1e3)


def test_diagonal_path_rejects_a_q_that_is_not_simultaneously_diagonalizable():
    with pytest.raises(ValueError, match="not simultaneously diagonalizable"):
        dle.diagonal_propagated_covariance(LAM2, S2, np.eye(2), 1.0)


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (
            lambda: dle.eigen_propagated_covariance(LAM2[:1], S2, np.eye(2), 1.0),
            r"eigenvalues must have shape \(2,\)",
        ),
        (
            lambda: dle.eigen_propagated_covariance(LAM2, [[1, 1], [1, 1]], np.eye(2), 1.0),
            "S must be invertible",
        ),
        (
            lambda: dle.eigen_propagated_covariance(LAM2, S2, -np.eye(2), 1.0),
            "Q must be positive semidefinite; its smallest eigenvalue is -1",
        ),
        (
            lambda: dle.eigen_mode_variances(LAM2, [0.3, -0.1], 1.0),
            "process_variances must be >= 0",
        ),
        (lambda: dle.forward_covariance(-np.eye(2), np.eye(2), -1.0), "s must be >= 0"),
        (lambda: dle.eigen_propagated_covariance(LAM2 * [1, 2], S2, np.eye(2), 1.0), "not real"),
        (
            lambda: dle.propagated_covariance(-np.eye(2), np.eye(3), 1.0),
            r"Q must have shape \(2, 2\)",
        ),
    ],
)
def test_bad_input(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()

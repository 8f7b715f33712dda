"""Kernels for stacks of small matrices against numpy and scipy, on both sides of SMALL."""

import numpy as np
import pytest
from scipy.linalg import solve_triangular

from estimators import linear_gaussian as lg
from estimators import stacked

SIZES = [1, 2, 3, stacked.SMALL, stacked.SMALL + 1, 9]


def _spd(rng, n, k):
    A = rng.normal(size=(n, k, k))
    return A @ np.swapaxes(A, -1, -2) + k * np.eye(k)


@pytest.mark.parametrize("k", SIZES)
def test_matmul_equals_numpy_with_broadcasting(k):
    rng = np.random.default_rng(k)
    A, B = rng.normal(size=(7, 3, k)), rng.normal(size=(7, k, 4))
    np.testing.assert_allclose(stacked.matmul(A, B), A @ B, rtol=1e-14, atol=1e-14)
    F = rng.normal(size=(3, k))  # a shared left factor against a stack
    np.testing.assert_allclose(stacked.matmul(F, B), F @ B, rtol=1e-14, atol=1e-14)
    with pytest.raises(ValueError, match="inner dimensions differ"):
        stacked.matmul(A, rng.normal(size=(7, k + 1, 2)))


@pytest.mark.parametrize("k", SIZES)
def test_cholesky_and_forward_substitution_equal_lapack(k):
    rng = np.random.default_rng(10 + k)
    S = _spd(rng, 6, k)
    L = stacked.cholesky(S)
    np.testing.assert_allclose(L, np.linalg.cholesky(S), rtol=1e-13, atol=1e-13)
    B = rng.normal(size=(6, k, 5))
    want = np.stack([solve_triangular(L[i], B[i], lower=True) for i in range(6)])
    np.testing.assert_allclose(stacked.solve_lower(L, B), want, rtol=1e-12, atol=1e-12)
    e = rng.normal(size=(6, k))
    want = np.stack([solve_triangular(L[i], e[i], lower=True) for i in range(6)])
    np.testing.assert_allclose(stacked.solve_lower(L, e), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k", [2, stacked.SMALL + 2])
def test_cholesky_refuses_a_matrix_that_is_not_positive_definite(k):
    S = _spd(np.random.default_rng(3), 4, k)
    S[2] = -S[2]
    with pytest.raises(np.linalg.LinAlgError):
        stacked.cholesky(S)


@pytest.mark.parametrize(("d", "k", "identity"), [(2, 2, True), (3, 2, False), (6, 4, False)])
def test_update_stack_equals_the_update(d, k, identity):
    rng = np.random.default_rng(d + k)
    P = _spd(rng, 5, d)
    C = np.eye(d) if identity else rng.normal(size=(k, d))
    R = _spd(rng, 1, C.shape[0])[0]
    P_new, W, L, logdet = lg.update_stack(P, C, R)
    P_ref, K, Linv, logdet_ref = lg.update(P, C, R)
    np.testing.assert_allclose(P_new, P_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.swapaxes(W, -1, -2) @ np.linalg.inv(L), K, atol=1e-12)
    np.testing.assert_allclose(logdet, logdet_ref, rtol=1e-13)
    assert np.array_equal(P_new, np.swapaxes(P_new, -1, -2))  # exactly symmetric
    active = np.array([True, False, True, False, True])
    P_masked, W_masked, _, _ = lg.update_stack(P, C, R, active=active)
    assert np.array_equal(P_masked[~active], P[~active]) and not np.any(W_masked[~active])
    np.testing.assert_array_equal(P_masked[active], P_new[active])

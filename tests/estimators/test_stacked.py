"""Kernels for stacks of small matrices against numpy, on both sides of SMALL."""

import warnings

import numpy as np
import pytest

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


@pytest.mark.parametrize("k", [*SIZES, 16])
def test_inverse_cholesky_equals_lapack(k):
    rng = np.random.default_rng(10 + k)
    S = _spd(rng, 37, k)  # 37: not a multiple of the transpose's chunk of 16
    Linv, logdet = stacked.inverse_cholesky(S)
    L = np.linalg.cholesky(S)
    np.testing.assert_allclose(Linv, np.linalg.inv(L), rtol=1e-12, atol=1e-13)
    assert np.array_equal(Linv, np.tril(Linv))  # lower triangular, zeros above
    np.testing.assert_allclose(logdet, np.linalg.slogdet(S)[1], rtol=1e-13)
    shift = _spd(rng, 1, k)[0]
    Linv_shift, logdet_shift = stacked.inverse_cholesky(S, shift=shift)
    want, _ = stacked.inverse_cholesky(S + shift)
    np.testing.assert_array_equal(Linv_shift, want)  # the same arithmetic on S + shift
    np.testing.assert_allclose(logdet_shift, np.linalg.slogdet(S + shift)[1], rtol=1e-13)


@pytest.mark.parametrize("k", [2, 8, 16])
def test_inverse_cholesky_of_ill_conditioned_matrices(k):
    # Eigenvalues from 1 down to 1e-8 (cond S = 1e8) in random bases.
    rng = np.random.default_rng(k)
    cond, n = 1e8, 20
    Q, _ = np.linalg.qr(rng.normal(size=(n, k, k)))
    S = Q @ (np.logspace(0, -np.log10(cond), k)[:, None] * np.swapaxes(Q, -1, -2))
    S = 0.5 * (S + np.swapaxes(S, -1, -2))
    Linv, logdet = stacked.inverse_cholesky(S)
    want = np.linalg.inv(np.linalg.cholesky(S))
    # Cholesky is backward stable, L L^T = S + E with |E| <~ k eps |S| (Higham, Accuracy and
    # Stability, Thm 10.3), and so is the triangular inverse (ch. 14). The factors, the
    # residual of L^-1 S L^-T = I and the pivots' logs then move by up to about
    # k eps cond(S) relative, for LAPACK's result as for ours: that is the bound (4e-8 at
    # k = 2 to 4e-7 at 16; seen here: 1e-9 to 1e-8).
    bound = k * np.finfo(float).eps * cond
    scale = np.abs(want).max(axis=(1, 2), keepdims=True)
    assert np.all(np.abs(Linv - want) <= bound * scale)
    eye = Linv @ S @ np.swapaxes(Linv, -1, -2)
    np.testing.assert_allclose(eye, np.broadcast_to(np.eye(k), eye.shape), rtol=0, atol=bound)
    np.testing.assert_allclose(logdet, np.linalg.slogdet(S)[1], rtol=0, atol=bound)


@pytest.mark.parametrize("k", [1, 2, stacked.SMALL + 1, 16])
def test_cholesky_and_solve_lower_equal_numpy(k):
    rng = np.random.default_rng(40 + k)
    S = _spd(rng, 37, k)
    L, logdet = stacked.cholesky(S)
    np.testing.assert_allclose(L, np.linalg.cholesky(S), rtol=1e-12, atol=1e-13)
    assert np.array_equal(L, np.tril(L))  # lower triangular, zeros above
    # log det is a sum of k logs of pivots, each with a relative error of a few eps: an
    # absolute error of about k eps (it can be near 0, so no relative bound).
    np.testing.assert_allclose(logdet, np.linalg.slogdet(S)[1], rtol=0, atol=4 * k * 2.3e-16)
    X = rng.normal(size=(37, k, 3))
    Y = stacked.solve_lower(L, X)
    np.testing.assert_allclose(L @ Y, X, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Y, np.linalg.solve(L, X), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="do not match"):
        stacked.solve_lower(L, rng.normal(size=(37, k + 1, 3)))
    with pytest.raises(ValueError, match="must be a stack"):
        stacked.cholesky(S[:, :, :-1])


def test_cholesky_and_solve_lower_take_read_only_views_without_warning():
    # A broadcast view is read-only; torch tensors are always writable, so it is copied
    # (torch would otherwise warn, and a write through the tensor would be undefined).
    S = np.broadcast_to(_spd(np.random.default_rng(7), 1, 5)[0], (4, 5, 5))
    X = np.broadcast_to(np.arange(10.0).reshape(5, 2), (4, 5, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L, logdet = stacked.cholesky(S)
        Y = stacked.solve_lower(L, X)
    np.testing.assert_allclose(L, np.linalg.cholesky(S), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(L @ Y, X, rtol=1e-12, atol=1e-12)
    assert not S.flags.writeable and not X.flags.writeable  # the inputs are left as they were


@pytest.mark.parametrize("factor", [stacked.inverse_cholesky, stacked.cholesky])
@pytest.mark.parametrize("k", [1, 2, stacked.SMALL + 2])
@pytest.mark.parametrize("bad", ["negative", "zero pivot", "nan"])
def test_factors_refuse_a_matrix_that_is_not_positive_definite(factor, k, bad):
    S = _spd(np.random.default_rng(3), 4, k)
    if bad == "negative":
        S[2] = -S[2]
    elif bad == "zero pivot":
        S[2, -1, :] = S[2, :, -1] = 0.0  # singular: the last pivot is 0
    else:
        S[2, 0, 0] = np.nan
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        factor(S)


UPDATE_CASES = [(2, 2, True), (3, 2, False), (6, 4, False), (6, 6, True), (7, 5, False)]


@pytest.mark.parametrize(("d", "k", "identity"), UPDATE_CASES)
def test_update_stack_equals_the_update(d, k, identity):
    # Both factor forms: L^-1 vectorised (k <= SMALL) and L from LAPACK (k > SMALL).
    rng = np.random.default_rng(d + k)
    P = _spd(rng, 5, d)
    C = np.eye(d) if identity else rng.normal(size=(k, d))
    R = _spd(rng, 1, C.shape[0])[0]
    got = lg.update_stack(P, C, R)
    P_new, W, logdet = got.P, got.W, got.logdet
    assert got.inverse == (k <= stacked.SMALL)
    Linv = got.factor if got.inverse else np.linalg.inv(got.factor)
    P_ref, K, Linv_ref, logdet_ref = lg.update(P, C, R)
    np.testing.assert_allclose(P_new, P_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Linv, Linv_ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.swapaxes(W, -1, -2) @ Linv, K, atol=1e-12)
    np.testing.assert_allclose(logdet, logdet_ref, rtol=1e-13)
    assert np.array_equal(P_new, np.swapaxes(P_new, -1, -2))  # exactly symmetric
    e = rng.normal(size=(5, k))
    want = (Linv_ref @ e[:, :, None])[:, :, 0]
    np.testing.assert_allclose(got.whiten(e), want, rtol=1e-12, atol=1e-12)
    rows = np.array([4, 0, 0, 2])  # innovations taking chosen matrices' factors
    np.testing.assert_allclose(got.whiten(e[rows], rows), want[rows], rtol=1e-12, atol=1e-12)
    active = np.array([True, False, True, False, True])
    P_masked, W_masked, *_ = lg.update_stack(P, C, R, active=active)
    assert np.array_equal(P_masked[~active], P[~active]) and not np.any(W_masked[~active])
    np.testing.assert_array_equal(P_masked[active], P_new[active])


@pytest.mark.parametrize("k", [2, stacked.SMALL + 1, 16])
def test_inverse_cholesky_with_work_buffers_equals_without(k):
    # The buffers are reused across calls of different sizes (as a filter's steps do), so a
    # call must not read what an earlier, larger call left in them.
    rng = np.random.default_rng(20 + k)
    work = stacked.CholeskyWork(k, 40)
    for n in (40, 23, 37):
        S = _spd(rng, n, k)
        shift = _spd(rng, 1, k)[0]
        Linv, logdet = stacked.inverse_cholesky(S, shift=shift, work=work)
        want, want_logdet = stacked.inverse_cholesky(S, shift=shift)
        np.testing.assert_array_equal(Linv, want)
        np.testing.assert_array_equal(logdet, want_logdet)
    with pytest.raises(ValueError, match="work is for up to 40 matrices"):
        stacked.inverse_cholesky(_spd(rng, 41, k), work=work)
    with pytest.raises(ValueError, match="work is for up to 40 matrices"):
        stacked.inverse_cholesky(_spd(rng, 5, k + 1), work=work)


@pytest.mark.parametrize(
    ("d", "k", "identity"), [(2, 2, True), (6, 4, False), (7, 5, False), (16, 16, True)]
)
def test_update_stack_and_predict_with_work_buffers_equal_without(d, k, identity):
    rng = np.random.default_rng(30 + d)
    C = np.eye(d) if identity else rng.normal(size=(k, d))
    R = _spd(rng, 1, C.shape[0])[0]
    F, Q = rng.normal(size=(d, d)), _spd(rng, 1, d)[0]
    work = lg.StackWork(d, C.shape[0], 30)
    for n in (30, 17):
        P = _spd(rng, n, d)
        pred = lg.predict_cov(P, F, Q)
        assert np.array_equal(pred, np.swapaxes(pred, -1, -2))  # exactly symmetric
        out = np.empty_like(P)
        np.testing.assert_array_equal(lg.predict_cov(P, F, Q, out=out, work=work), pred)
        want = lg.update_stack(pred, C, R, identity)
        got = lg.update_stack(out, C, R, identity, work=work, out=out)  # in place
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        assert got[0] is out

"""Kernels for stacks of small matrices: products, inverse Cholesky factors.

The grouped Kalman filter (`estimators.kalman`, per-sequence missing masks) carries one
covariance per group, so each step works on stacks (n, d, d) with n in the thousands and d
small. numpy's stacked routines call BLAS or LAPACK once per matrix; that is efficient for
products at moderate d (about 0.4 us for 16 x 16 x 16) but its overhead dominates at d = 2,
and numpy has no batched triangular solve or inverse at all. The kernels:

* `matmul`: ``A @ B`` over the last two axes. For an inner dimension of at most `SMALL` it is
  a sum of broadcast products (a few whole-stack multiplications instead of n calls); above,
  ``np.matmul`` (one small BLAS call per matrix, single-threaded at these sizes).
* `inverse_cholesky`: ``L^-1`` with ``S = L L^T`` and ``log det S`` per matrix, vectorised
  over the stack (one numpy operation per scalar step of the textbook loops, on rows of
  length n); it raises ``LinAlgError`` for a matrix that is not positive definite. A caller
  then whitens by products with ``L^-1`` instead of triangular solves.

All inputs and outputs are float64 numpy arrays; results equal the textbook products and
factors up to round-off (`tests/estimators/test_stacked.py` checks them against numpy).
"""

from __future__ import annotations

import numpy as np

# Inner dimensions up to this use broadcast sums in `matmul`; larger ones numpy's BLAS loop.
SMALL = 4


def matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``A @ B`` over the last two axes (leading axes broadcast), fast for small matrices."""
    p = A.shape[-1]
    if p != B.shape[-2]:
        raise ValueError(f"matmul: inner dimensions differ, {A.shape} @ {B.shape}")
    if p > SMALL:
        return np.matmul(A, B)
    out = A[..., :, 0, None] * B[..., None, 0, :]
    for j in range(1, p):
        out += A[..., :, j, None] * B[..., None, j, :]
    return out


# Matrices per chunk of the transpose into the stack-last layout (`_stack_last`).
_CHUNK = 16


def _stack_last(S: np.ndarray) -> np.ndarray:
    """A contiguous (k, k, n) copy of a stack (n, k, k), copied in chunks of `_CHUNK` matrices.

    In one pass numpy would read the source with the stride of a whole matrix (2 KB at
    k = 16, a power of two that maps the reads onto few cache sets); chunks keep the reads
    of each pass within a few cache lines per row (3x faster at n = 800, k = 16).
    """
    n, k = S.shape[0], S.shape[-1]
    flat = S.reshape(n, k * k)
    out = np.empty((k * k, n))
    for start in range(0, n, _CHUNK):
        out[:, start : start + _CHUNK] = flat[start : start + _CHUNK].T
    return out.reshape(k, k, n)


def inverse_cholesky(S: np.ndarray, shift=None) -> tuple[np.ndarray, np.ndarray]:
    """Inverse Cholesky factors ``L^-1`` (``S = L L^T``) and ``log det S`` of a stack (n, k, k).

    Vectorised over the stack ("SIMD over matrices"): the stack is copied so that the matrix
    axis is last, and each scalar step of the textbook loops is one numpy operation on rows of
    length n, instead of one LAPACK call per matrix (numpy has no batched triangular inverse;
    its per-matrix ``cholesky`` plus a row-by-row solve cost about 3x more at k = 16):

    * Cholesky, column by column: ``L_jj = sqrt(S_jj - sum_{p<j} L_jp^2)``,
      ``L_ij = (S_ij - sum_{p<j} L_ip L_jp) / L_jj`` for i > j (only the lower triangle of
      ``S`` is read);
    * the inverse ``X = L^-1`` by forward substitution on the identity, row by row:
      ``X_ii = 1 / L_ii``, ``X_ij = -X_ii sum_{j<=p<i} L_ip X_pj`` for j < i;
    * ``log det S = 2 sum_i log L_ii``.

    ``shift`` (k, k), when given, is added to every matrix first (the factors are those of
    ``S + shift``; a Kalman update passes ``P`` and ``R`` instead of forming ``P + R``).
    Returns ``(L^-1, log det S)``, (n, k, k) lower triangular and (n,). A matrix that is not
    positive definite (a pivot <= 0 or NaN) raises ``np.linalg.LinAlgError``.
    """
    n, k = S.shape[0], S.shape[-1]
    if S.shape != (n, k, k):
        raise ValueError(f"inverse_cholesky: S must be a stack (n, k, k), got {S.shape}")
    St = _stack_last(S)
    if shift is not None:
        St += shift[:, :, None]
    L = np.empty((k, k, n))  # only the lower triangle is written and read
    # A pivot <= 0 or NaN gives a NaN or zero L_jj (checked once, at the end), not a warning.
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(k):
            col = St[j:, j]
            if j:
                col = col - np.einsum("ipn,pn->in", L[j:, :j], L[j, :j])
            np.sqrt(col[0], out=L[j, j])
            np.divide(col[1:], L[j, j], out=L[j + 1 :, j])
    diagonal = np.diagonal(L, axis1=0, axis2=1)  # (n, k)
    if not np.all(diagonal > 0):  # also catches NaN
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    X = np.zeros((k, k, n))
    for i in range(k):
        np.divide(1.0, L[i, i], out=X[i, i])
        if i:
            acc = np.einsum("pn,pjn->jn", L[i, :i], X[:i, :i])
            np.multiply(acc, -X[i, i], out=X[i, :i])
    logdet = 2.0 * np.sum(np.log(diagonal), axis=-1)
    return np.ascontiguousarray(X.transpose(2, 0, 1)), logdet

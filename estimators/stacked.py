"""Kernels for stacks of small matrices: products, Cholesky factors, triangular solves.

The grouped Kalman filter (`estimators.kalman`, per-sequence missing masks) carries one
covariance per group, so each step works on stacks (n, d, d) with n in the thousands and d
small. numpy's stacked routines call BLAS or LAPACK once per matrix; that is efficient for
products at moderate d (about 0.4 us for 16 x 16 x 16) but its overhead dominates at d = 2,
and numpy has no batched triangular solve at all. These kernels pick per size:

* `matmul`: ``A @ B`` over the last two axes. For an inner dimension of at most `SMALL` it is
  a sum of broadcast products (a few whole-stack multiplications instead of n calls); above,
  ``np.matmul`` (one small BLAS call per matrix, single-threaded at these sizes).
* `cholesky`: ``S = L L^T`` per matrix: column by column for the whole stack when k <= `SMALL`,
  else LAPACK through ``np.linalg.cholesky`` (both raise ``LinAlgError`` for a matrix that is
  not positive definite).
* `solve_lower`: ``X = L^-1 B`` for lower-triangular ``L`` by forward substitution, one row
  ``x_i = (b_i - sum_{p<i} L_ip x_p) / L_ii`` at a time for the whole stack (k whole-stack
  steps instead of n LAPACK calls). ``B`` may be a stack of matrices (n, k, m) or of vectors
  (n, k).

All inputs and outputs are float64 numpy arrays; results equal the textbook products and
solves up to round-off (`tests/estimators/test_stacked.py` checks them against numpy/scipy).
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


def cholesky(S: np.ndarray) -> np.ndarray:
    """Lower Cholesky factors of a stack (n, k, k) of symmetric positive definite matrices.

    For k <= `SMALL` column by column for the whole stack (``L_jj = sqrt(S_jj - sum_p
    L_jp^2)``, ``L_ij = (S_ij - sum_p L_ip L_jp) / L_jj``), else LAPACK
    (``np.linalg.cholesky``). Either way only the lower triangle is read, and a matrix that
    is not positive definite raises ``np.linalg.LinAlgError``.
    """
    k = S.shape[-1]
    if k > SMALL:
        return np.linalg.cholesky(S)
    L = np.zeros(S.shape)
    for j in range(k):
        col = S[..., j:, j]
        if j:
            col = col - np.einsum("...ip,...p->...i", L[..., j:, :j], L[..., j, :j])
        pivot = col[..., 0]
        if not np.all(pivot > 0):  # also catches NaN
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        root = np.sqrt(pivot)
        L[..., j, j] = root
        L[..., j + 1 :, j] = col[..., 1:] / root[..., None]
    return L


def solve_lower(L: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``L^-1 B`` for a stack of lower-triangular ``L`` (n, k, k) and ``B`` (n, k, m) or (n, k).

    Forward substitution over the k rows, each row for the whole stack at once.
    """
    vector = B.ndim == L.ndim - 1
    X = np.empty(np.broadcast_shapes(B.shape, L.shape[:-1] if vector else B.shape))
    k = L.shape[-1]
    for i in range(k):
        row = B[..., i] if vector else B[..., i, :]
        if i:
            if vector:
                row = row - np.einsum("...p,...p->...", L[..., i, :i], X[..., :i])
            else:
                row = row - np.einsum("...p,...pm->...m", L[..., i, :i], X[..., :i, :])
        if vector:
            np.divide(row, L[..., i, i], out=X[..., i])
        else:
            np.divide(row, L[..., i, i, None], out=X[..., i, :])
    return X

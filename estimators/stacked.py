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
  then whitens by products with ``L^-1`` instead of triangular solves. A filter passes a
  `CholeskyWork` (and ``out`` to `matmul`) so that the per-step arrays are allocated once.
  This is the form for k <= `SMALL`, where the per-matrix calls below would be all overhead.
* `cholesky` and `solve_lower`: ``L`` and ``L^-1 X`` with one LAPACK call per matrix (through
  torch's batched ``cholesky_ex`` and ``solve_triangular``, float64 on the numpy memory). The
  form for larger k: at k = 16 the vectorised loops cost more than the per-matrix calls, and
  unlike numpy's stacked BLAS calls these release the GIL for the whole stack, so that a
  filter's threads run them side by side (measured on 2 cores, 1000 matrices 16 x 16: the
  factor, solve and product of an update 4.6-5.3 ms in one thread, 2.6-3.4 ms in two).

All inputs and outputs are float64 numpy arrays; results equal the textbook products and
factors up to round-off (`tests/estimators/test_stacked.py` checks them against numpy).
"""

from __future__ import annotations

import numpy as np

# Inner dimensions up to this use broadcast sums in `matmul`; larger ones numpy's BLAS loop.
SMALL = 4


def matmul(A: np.ndarray, B: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``A @ B`` over the last two axes (leading axes broadcast), fast for small matrices.

    ``out``, when given, receives the product (it must not overlap ``A`` or ``B``).
    """
    p = A.shape[-1]
    if p != B.shape[-2]:
        raise ValueError(f"matmul: inner dimensions differ, {A.shape} @ {B.shape}")
    if p > SMALL:
        return np.matmul(A, B, out=out)
    out = np.multiply(A[..., :, 0, None], B[..., None, 0, :], out=out)
    for j in range(1, p):
        out += A[..., :, j, None] * B[..., None, j, :]
    return out


# Matrices per chunk of the transposes between the stack-first and stack-last layouts.
_CHUNK = 16


def _stack_last(S: np.ndarray, out: np.ndarray) -> None:
    """Copy a stack (n, k, k) into ``out`` (k * k, n) (the stack-last layout), in chunks.

    In one pass numpy would read the source with the stride of a whole matrix (2 KB at
    k = 16, a power of two that maps the reads onto few cache sets); chunks of `_CHUNK`
    matrices keep the reads of each pass within a few cache lines per row (3x faster at
    n = 800, k = 16).
    """
    n, k = S.shape[0], S.shape[-1]
    flat = S.reshape(n, k * k)
    for start in range(0, n, _CHUNK):
        out[:, start : start + _CHUNK] = flat[start : start + _CHUNK].T


def _stack_first(X: np.ndarray, out: np.ndarray) -> None:
    """The inverse of `_stack_last`: ``X`` (k * k, n) into ``out`` (n, k * k), in chunks."""
    for start in range(0, X.shape[1], _CHUNK):
        out[start : start + _CHUNK] = X[:, start : start + _CHUNK].T


class CholeskyWork:
    """Buffers for `inverse_cholesky` on stacks of up to ``capacity`` (k, k) matrices.

    A filter that factors a stack at every step passes one of these to every call, so that
    the buffers (about 4 k^2 capacity floats) are allocated once. Fresh arrays of a few MB
    are not free: the allocator hands them back to the system when they are freed, and each
    new one then costs a page fault per 4 KB page at its first write (at k = 16, n = 800
    that was most of the call's time on the development machine).
    """

    def __init__(self, k: int, capacity: int):
        self.k, self.capacity = k, capacity
        self.St = np.empty((k * k, capacity))  # S + shift, stack-last
        self.L = np.empty((k * k, capacity))  # Cholesky factor (lower triangle), stack-last
        self.X = np.zeros((k * k, capacity))  # L^-1, stack-last; the upper triangle stays 0
        self.acc = np.empty((k, capacity))  # one column's (or row's) inner products
        self.Linv = np.empty((capacity, k * k))  # L^-1, stack-first
        self.logdet = np.empty(capacity)


def inverse_cholesky(
    S: np.ndarray, shift=None, work: CholeskyWork | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Inverse Cholesky factors ``L^-1`` (``S = L L^T``) and ``log det S`` of a stack (n, k, k).

    Vectorised over the stack ("SIMD over matrices"): the stack is copied so that the matrix
    axis is last, and each scalar step of the textbook loops is one numpy operation on rows of
    length n, instead of one LAPACK call per matrix (numpy has no batched triangular inverse):

    * Cholesky, column by column: ``L_jj = sqrt(S_jj - sum_{p<j} L_jp^2)``,
      ``L_ij = (S_ij - sum_{p<j} L_ip L_jp) / L_jj`` for i > j (only the lower triangle of
      ``S`` is read);
    * the inverse ``X = L^-1`` by forward substitution on the identity, row by row:
      ``X_ii = 1 / L_ii``, ``X_ij = -X_ii sum_{j<=p<i} L_ip X_pj`` for j < i;
    * ``log det S = 2 sum_i log L_ii``.

    ``shift`` (k, k), when given, is added to every matrix first (the factors are those of
    ``S + shift``; a Kalman update passes ``P`` and ``R`` instead of forming ``P + R``).
    ``work`` (a `CholeskyWork` for k and at least n matrices), when given, holds every
    intermediate and the results, which are then views into it, overwritten by its next use;
    each matrix's arithmetic does not depend on n or on the other matrices.
    Returns ``(L^-1, log det S)``, (n, k, k) lower triangular and (n,). A matrix that is not
    positive definite (a pivot <= 0 or NaN) raises ``np.linalg.LinAlgError``.
    """
    n, k = S.shape[0], S.shape[-1]
    if S.shape != (n, k, k):
        raise ValueError(f"inverse_cholesky: S must be a stack (n, k, k), got {S.shape}")
    if work is None:
        work = CholeskyWork(k, n)
    elif work.k != k or work.capacity < n:
        raise ValueError(
            f"inverse_cholesky: work is for up to {work.capacity} matrices ({work.k}, {work.k}),"
            f" S is {S.shape}"
        )
    _stack_last(S, work.St[:, :n])
    St = work.St[:, :n].reshape(k, k, n)
    if shift is not None:
        St += shift[:, :, None]
    L, X = work.L[:, :n].reshape(k, k, n), work.X[:, :n].reshape(k, k, n)
    acc = work.acc[:, :n]
    # A pivot <= 0 or NaN gives a NaN or zero L_jj (checked once, at the end), not a warning.
    with np.errstate(invalid="ignore", divide="ignore"):
        for j in range(k):
            col = St[j:, j]
            if j:
                col = np.einsum("ipn,pn->in", L[j:, :j], L[j, :j], out=acc[: k - j])
                np.subtract(St[j:, j], col, out=col)
            np.sqrt(col[0], out=L[j, j])
            np.divide(col[1:], L[j, j], out=L[j + 1 :, j])
    diagonal = np.diagonal(L, axis1=0, axis2=1).T  # (k, n): rows of n contiguous pivots
    if not np.all(diagonal > 0):  # also catches NaN
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    for i in range(k):
        np.divide(1.0, L[i, i], out=X[i, i])
        if i:
            np.einsum("pn,pjn->jn", L[i, :i], X[:i, :i], out=acc[:i])
            np.multiply(acc[:i], -X[i, i], out=X[i, :i])
    logdet = work.logdet[:n]
    np.sum(np.log(diagonal, out=acc), axis=0, out=logdet)
    logdet *= 2.0
    _stack_first(work.X[:, :n], work.Linv[:n])
    return work.Linv[:n].reshape(n, k, k), logdet


def _torch():
    """torch, imported on first use: only the LAPACK path needs it (importing takes ~1 s)."""
    import torch

    return torch


def _tensor(a: np.ndarray):
    """``a`` as a torch tensor on the same memory; a read-only array (a broadcast view, say)
    is copied first, since torch tensors are always writable."""
    return _torch().from_numpy(a if a.flags.writeable else np.array(a))


def cholesky(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower Cholesky factors ``L`` (``S = L L^T``) and ``log det S`` of a stack (n, k, k).

    One LAPACK ``potrf`` per matrix (``torch.linalg.cholesky_ex`` on the numpy memory, float64);
    only the lower triangle of ``S`` is read; ``log det S = 2 sum_i log L_ii``. A matrix that
    is not positive definite (a pivot <= 0 or NaN) raises ``np.linalg.LinAlgError``, as
    `inverse_cholesky` does.
    Returns ``(L, log det S)``: (n, k, k) lower triangular (zeros above) and (n,).
    """
    n, k = S.shape[0], S.shape[-1]
    if S.shape != (n, k, k):
        raise ValueError(f"cholesky: S must be a stack (n, k, k), got {S.shape}")
    # L comes back in LAPACK's column-major layout (a transposed view per matrix), which is
    # what `solve_lower` hands back to LAPACK without a copy.
    L = _torch().linalg.cholesky_ex(_tensor(S))[0].numpy()
    diagonal = np.diagonal(L, axis1=1, axis2=2)
    if not np.all(diagonal > 0):  # also catches NaN; LAPACK stops at the first bad pivot
        raise np.linalg.LinAlgError("Matrix is not positive definite")
    return L, 2.0 * np.sum(np.log(diagonal), axis=1)


def solve_lower(L: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``L^-1 X`` for lower triangular ``L`` (n, k, k) and ``X`` (n, k, m) (leading axes
    broadcast), one LAPACK ``trsm`` per matrix (``torch.linalg.solve_triangular``, float64).
    """
    if L.shape[-1] != X.shape[-2]:
        raise ValueError(f"solve_lower: L {L.shape} and X {X.shape} do not match")
    # Any layout: torch copies into LAPACK's where it needs to.
    return _torch().linalg.solve_triangular(_tensor(L), _tensor(X), upper=False).numpy()

"""The linear-Gaussian core: what the estimators of a linear SDE share, written once.

Model (seed 000 sections 2.1, 3.9, 3.10): the state follows ``dx = (A x + u) dt + G dw``
(`sde_sim.LinearSDE`) and is measured by ``z_k = C x(t_k + delay) + b + v_k``,
``v_k ~ N(0, R)`` (`sde_sim.LinearMeasurement`). Over a step ``h`` the law is exact
(`sde_sim.linear_transition`): ``x(t + h) = F x(t) + c + w``, ``F = e^{A h}``,
``c = int_0^h e^{A s} ds u``, ``w ~ N(0, Q_d(h))`` (Van Loan).

What lives here, used by `estimators.kalman` (both of its paths: the shared-covariance one and
the grouped one), `estimators.recurrent`, the Fisher pass of `estimators.fit` and
`estimators.mle`:

* model checks: `check_model`, `check_measurement`;
* the state prior: `GaussianPrior`, `prior_moments`;
* the diffuse start (a flat prior: the first measurement alone fixes the state),
  ``P_0 = (C^T R^-1 C)^-1``, ``m_0 = P_0 C^T R^-1 (z_0 - b)``: `diffuse_covariance`,
  `diffuse_mean`, `require_first_observed`;
* step sizes and their exact maps: `step_classes`, `step_maps`;
* one predict/update pair:

      predict   m- = F m + c,   P- = F P F^T + Q_d                       (`predict_mean`,
                                                                           `predict_cov`)
      update    S = C P- C^T + R = L L^T,   W = L^-1 C P-,   K = W^T L^-1,
                P = P- - W^T W,   m = m- + K (z - C m- - b)               (`update`)

  (`update` returns ``P``, ``K``, ``L^-1`` and ``log det S``; the mean correction is one
  product with ``K``, which each caller batches its own way). A reweighted update (the robust
  recursion of `estimators.recurrent`) is this update with ``R / w``: the weight scales the
  measurement's precision only;
* symmetrisation `sym`, the batched transpose `transpose`, and `real_part`, the check that
  an eigenbasis result mapped back to real coordinates is real.

Placement. `estimators.batch_input` stays the model-free input layer (measurements, mask,
times, the prepared `batch_input.Batch`): the radial-tangential estimators use it too, and
they have none of the linear-Gaussian pieces. This module builds on it and knows the model.
`estimators.oracle` deliberately shares none of this: it is the independent check of the
recursions.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_triangular

from estimators import stacked
from sde_sim import LinearMeasurement, LinearSDE, linear_transition, validation

# --------------------------------------------------------------------------------------------
# Linear algebra helpers
# --------------------------------------------------------------------------------------------


def sym(M: np.ndarray) -> np.ndarray:
    """``(M + M^T) / 2`` over the last two axes: removes the round-off asymmetry of a covariance."""
    return 0.5 * (M + np.swapaxes(M, -1, -2))


def transpose(M: np.ndarray) -> np.ndarray:
    """``M^T`` over the last two axes (a view)."""
    return np.swapaxes(M, -1, -2)


# |Im| of a result that should be real, relative to its size: round-off only.
REAL_RTOL = 1e-9


def real_part(y: np.ndarray, name: str) -> np.ndarray:
    """The real part of ``y``, which must be real up to round-off (NaN entries are ignored).

    Eigenbasis results (``S x_s``, ``S diag(v) S^H``) are real when the eigen-data describe
    real matrices; otherwise raise, naming the quantity.
    """
    finite = np.isfinite(y)
    scale = max(1.0, float(np.abs(y[finite]).max(initial=0.0)))
    imag = float(np.abs(y.imag[finite]).max(initial=0.0))
    if imag > REAL_RTOL * scale:
        raise ValueError(
            f"{name} is not real (max |Im| = {imag:.3g}): the eigen-data must describe real "
            "matrices (conjugate pairs with conjugate columns of S)"
        )
    return np.ascontiguousarray(y.real)


# --------------------------------------------------------------------------------------------
# Model checks and the prior
# --------------------------------------------------------------------------------------------


def check_measurement(measurement) -> None:
    """Raise TypeError unless ``measurement`` is a `sde_sim.LinearMeasurement`."""
    if not isinstance(measurement, LinearMeasurement):
        raise TypeError(
            f"measurement must be a sde_sim.LinearMeasurement, got {type(measurement).__name__}"
        )


def check_model(sde, measurement) -> None:
    """Raise unless ``(sde, measurement)`` is a `sde_sim.LinearSDE` and a
    `sde_sim.LinearMeasurement` of the same state dimension."""
    if not isinstance(sde, LinearSDE):
        raise TypeError(f"sde must be a sde_sim.LinearSDE, got {type(sde).__name__}")
    check_measurement(measurement)
    if measurement.dim != sde.dim:
        raise ValueError(f"measurement.C has {measurement.dim} columns; the state has {sde.dim}")


class GaussianPrior(NamedTuple):
    """State prior ``x(time) ~ N(mean, cov)``; ``cov=None`` is diffuse.

    ``time=None`` puts the prior at each sequence's first (delayed) measurement time; a time at
    or before it is propagated there exactly (the usual "initial state at t = 0").
    Public as `estimators.kalman.GaussianPrior`.
    """

    mean: np.ndarray | None = None
    cov: np.ndarray | None = None
    time: float | None = None


def prior_moments(prior, d: int):
    """``(mean (d,), cov (d, d), time)`` of a proper prior; ``(None, None, None)`` if diffuse.

    ``prior`` is a `GaussianPrior` or None (diffuse); a missing mean is 0.
    """
    if prior is not None and not isinstance(prior, GaussianPrior):
        raise TypeError(
            f"prior must be an estimators.kalman.GaussianPrior or None, got {type(prior).__name__}"
        )
    if prior is None or prior.cov is None:
        return None, None, None
    mean = np.zeros(d) if prior.mean is None else validation.vector("prior.mean", prior.mean, d)
    cov = validation.covariance("prior.cov", prior.cov, d)
    time = None if prior.time is None else validation.scalar("prior.time", prior.time)
    return mean, cov, time


def check_prior_time(prior_time: float, first_times: np.ndarray) -> None:
    """A prior given at ``prior_time`` must not be after any first state time (n,)."""
    if np.any(first_times < prior_time):
        raise ValueError(
            f"prior.time ({prior_time:g}) must not be after the first state "
            f"time ({first_times.min():g})"
        )


# --------------------------------------------------------------------------------------------
# The diffuse start
# --------------------------------------------------------------------------------------------


def require_first_observed(observed0: np.ndarray, remedy: str = "give a proper prior") -> None:
    """A diffuse start needs the first measurement of every sequence: ``observed0`` (B,)."""
    if not np.all(observed0):
        raise ValueError(
            "a diffuse prior needs the first measurement of every sequence "
            f"observed (mask[:, 0] all True): {remedy} instead"
        )


def diffuse_covariance(measurement: LinearMeasurement) -> np.ndarray:
    """``P_0 = (C^T R^-1 C)^-1``: the covariance after one measurement under a diffuse prior.

    Needs ``C`` with full column rank and invertible ``R``; raises ValueError otherwise.
    """
    C, R = measurement.C, measurement.R
    d = C.shape[1]
    rank = np.linalg.matrix_rank(C)
    if rank < d:
        raise ValueError(
            f"a diffuse prior needs C with full column rank {d}, got rank {rank}: "
            "give a proper prior instead"
        )
    try:
        L = np.linalg.cholesky(R)
    except np.linalg.LinAlgError:
        raise ValueError(
            "a diffuse prior needs an invertible R (the first measurement alone "
            "fixes the state): give a proper prior instead"
        ) from None
    W = solve_triangular(L, C, lower=True)  # R^-1/2 C
    return sym(np.linalg.inv(W.T @ W))


def diffuse_mean(measurement: LinearMeasurement, z0: np.ndarray, P0: np.ndarray) -> np.ndarray:
    """``m_0 = P_0 C^T R^-1 (z_0 - b)`` for z0 (B, k): the diffuse start's mean (B, d)."""
    return (z0 - measurement.b) @ np.linalg.solve(measurement.R, measurement.C @ P0)


# --------------------------------------------------------------------------------------------
# Step sizes and their maps
# --------------------------------------------------------------------------------------------

# Differences of time stamps such as k * 0.1 vary in their last bits; steps equal to within
# this relative gap (a few hundred ulps, far below any physical resolution) share a transition.
STEP_RTOL = 1e-13


def step_classes(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct step sizes (clustered within `STEP_RTOL`) and each step's class (same shape)."""
    sizes = np.unique(steps)
    if sizes.size > 1:
        new = np.concatenate([[True], np.diff(sizes) > STEP_RTOL * sizes[1:]])
        sizes = sizes[new]
    classes = np.clip(np.searchsorted(sizes, steps * (1 + STEP_RTOL), side="right") - 1, 0, None)
    return sizes, classes


def step_maps(sde: LinearSDE, steps: np.ndarray):
    """Exact maps over steps (any shape): ``(maps, classes)``.

    ``maps`` is `sde_sim.linear_transition` at the distinct sizes (`step_classes`): ``Phi``,
    ``offset``, ``Qd`` (S, d, d), (S, d), (S, d, d); step ``i`` uses row ``classes[i]``.
    """
    sizes, classes = step_classes(steps)
    return linear_transition(sde, sizes), classes


# --------------------------------------------------------------------------------------------
# Predict and update
# --------------------------------------------------------------------------------------------


def predict_mean(m: np.ndarray, F: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """``m- = F m + c`` for rows ``m`` (..., d): ``F`` (d, d) shared or (..., d, d) per row."""
    if F.ndim == 2:
        return m @ F.T + offset
    return np.einsum("...ij,...j->...i", F, m) + offset


def predict_cov(P: np.ndarray, F: np.ndarray, Qd: np.ndarray, out=None, work=None) -> np.ndarray:
    """``P- = F P F^T + Q_d`` (symmetrised), for (..., d, d) stacks that broadcast.

    ``out``, when given, receives ``P-`` and is returned; it may be ``P`` itself (the
    products are formed first), which saves a (G, d, d) array per step in a filter loop.
    ``work``, when given, is a `StackWork` whose buffers hold the products (P a stack of at
    most its capacity); the arithmetic is the same.
    """
    # (M + M^T) / 2 with M = F P F^T + Q_d, as M' + M'^T with M' = F P (F / 2)^T + Q_d / 2:
    # halving is exact (barring underflow to subnormals), so these are the same bits with one
    # pass over the stack less.
    half_Ft, half_Qd = 0.5 * transpose(F), 0.5 * Qd
    if work is None:
        M = stacked.matmul(stacked.matmul(F, P), half_Ft)
    else:
        n = P.shape[0]
        FP = stacked.matmul(F, P, out=work.FP[:n])
        M = stacked.matmul(FP, half_Ft, out=work.M[:n])
    shape = np.broadcast_shapes(M.shape, Qd.shape)
    M = np.add(M, half_Qd, out=M if M.shape == shape else None)
    return np.add(M, transpose(M), out=out)


def predict(m, P, F, offset, Qd):
    """Both halves of the prediction: ``(m-, P-)`` (`predict_mean`, `predict_cov`)."""
    return predict_mean(m, F, offset), predict_cov(P, F, Qd)


def update(P: np.ndarray, C: np.ndarray, R: np.ndarray):
    """Measurement update of covariances P (n, d, d) by ``z = C x + b + v``, ``v ~ N(0, R)``.

    ``S = C P C^T + R = L L^T``, ``W = L^-1 C P``, ``K = P C^T S^-1 = W^T L^-1`` and
    ``P+ = P - K S K^T = P - W^T W``: the subtracted term is a Gram matrix, so ``P+`` is
    symmetric by construction and one Cholesky factor serves the gain, the whitening of the
    innovations and ``log det S``. ``R`` is (k, k), or (n, k, k) per row (a reweighted update
    passes ``R / w``). Returns ``(P+, K, L^-1, log det S)``: (n, d, d), (n, d, k), (n, k, k),
    (n,); the mean update is ``m+ = m + K (z - C m - b)``.
    """
    CP = C @ P
    S = sym(CP @ C.T + R)
    L = np.linalg.cholesky(S)
    Linv = np.linalg.inv(L)
    W = Linv @ CP
    Wt = transpose(W)
    P_new = sym(P - Wt @ W)
    logdet = 2.0 * np.sum(np.log(np.diagonal(L, axis1=-2, axis2=-1)), axis=-1)
    return P_new, Wt @ Linv, Linv, logdet


def is_identity(C: np.ndarray) -> bool:
    """True when ``C`` is exactly the identity (then ``C P = P``: `update_stack` skips it)."""
    return C.shape[0] == C.shape[1] and np.array_equal(C, np.eye(C.shape[0]))


class StackWork:
    """Buffers for `predict_cov` and `update_stack` on stacks of up to ``capacity`` covariances
    (d, d) measured by k components, allocated once and reused at every step of a filter
    (see `stacked.CholeskyWork` for why fresh per-step arrays of a few MB cost time)."""

    def __init__(self, d: int, k: int, capacity: int):
        self.d, self.k, self.capacity = d, k, capacity
        self.FP, self.M = np.empty((capacity, d, d)), np.empty((capacity, d, d))
        self.CP, self.S = np.empty((capacity, k, d)), np.empty((capacity, k, k))
        self.WtW = np.empty((capacity, d, d))
        # The vectorised factor's buffers and W = L^-1 C P; for larger k the factor and W
        # come from LAPACK calls (see `update_stack`).
        small = k <= stacked.SMALL
        self.W = np.empty((capacity, k, d)) if small else None
        self.cholesky = stacked.CholeskyWork(k, capacity) if small else None


class StackUpdate(NamedTuple):
    """Result of `update_stack`: ``P+`` (n, d, d), ``W = L^-1 C P`` (n, k, d), the factor of
    ``S = L L^T`` (n, k, k) and ``log det S`` (n,).

    ``factor`` is ``L^-1`` when ``inverse`` (the vectorised form, k <= `stacked.SMALL`), else
    ``L`` (one LAPACK call per matrix); `whiten` hides the difference.
    """

    P: np.ndarray
    W: np.ndarray
    factor: np.ndarray
    logdet: np.ndarray
    inverse: bool

    def whiten(self, e: np.ndarray, rows=None) -> np.ndarray:
        """``w = L^-1 e`` for innovations e (m, k); ``rows`` (m,) picks each one's matrix
        (default: e's rows are the stack's, in order). Returns (m, k)."""
        factor = self.factor if rows is None else self.factor[rows]
        if self.inverse:
            return np.matmul(factor, e[:, :, None])[:, :, 0]  # one small BLAS call per row
        return stacked.solve_lower(factor, e[:, :, None])[:, :, 0]


def update_stack(
    P: np.ndarray, C: np.ndarray, R: np.ndarray, identity=None, active=None, work=None, out=None
) -> StackUpdate:
    """`update` for a stack of covariances P (n, d, d), returning the whitened gain instead.

    The same algebra, ``S = C P C^T + R = L L^T``, ``W = L^-1 C P``, ``P+ = P - W^T W``, with
    the kernels of `estimators.stacked`, and ``C P = P``, ``S = P + R`` when ``C`` is the
    identity. For k <= `stacked.SMALL` the factor is ``L^-1``, vectorised over the stack
    (`stacked.inverse_cholesky`), and ``W`` a product; for larger k it is ``L``, one LAPACK
    call per matrix (`stacked.cholesky`), and ``W`` a triangular solve (`stacked.solve_lower`).
    Instead of ``K`` it returns ``W``: a caller whitens an innovation by ``w = L^-1 e``
    (`StackUpdate.whiten`) and corrects the mean by ``K e = W^T w``, which saves forming
    ``K``. ``identity`` says whether ``C`` is the identity (`is_identity`; computed when
    None). ``active`` (n,) bool, when given, marks the matrices that are updated: the others
    get ``W = 0``, so ``P+ = P`` (their factor and ``log det S`` are returned but mean nothing).
    ``work`` (a `StackWork` for d, k and at least n matrices), when given, holds the
    intermediates and, for k <= `stacked.SMALL`, ``W``, ``L^-1`` and ``log det S``, which are
    then views into it, valid until its next use (the LAPACK path returns fresh arrays);
    ``out`` (n, d, d), when given, receives ``P+`` and may be ``P`` itself. The arithmetic is
    the same either way.
    """
    if identity is None:
        identity = is_identity(C)
    n, k = P.shape[0], C.shape[0]
    if work is None:
        work = StackWork(P.shape[-1], k, n)
    small = k <= stacked.SMALL
    CP = P if identity else stacked.matmul(C, P, out=work.CP[:n])
    if small and identity:  # S = P + R, added inside the factorisation
        factor, logdet = stacked.inverse_cholesky(P, shift=R, work=work.cholesky)
    else:
        S = work.S[:n]
        if identity:
            np.add(P, R, out=S)
        else:
            stacked.matmul(CP, C.T, out=S)
            S += R
        factor, logdet = (
            stacked.inverse_cholesky(S, work=work.cholesky) if small else stacked.cholesky(S)
        )
    W = stacked.matmul(factor, CP, out=work.W[:n]) if small else stacked.solve_lower(factor, CP)
    if active is not None:
        W *= active[:, None, None]
    # ``W^T W`` comes out exactly symmetric (BLAS syrk for the transposed pair, or equal
    # products summed in the same order), so ``P+`` is as symmetric as ``P``.
    WtW = stacked.matmul(transpose(W), W, out=work.WtW[:n])
    P_new = np.subtract(P, WtW, out=WtW if out is None else out)
    return StackUpdate(P_new, W, factor, logdet, small)

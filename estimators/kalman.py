"""Kalman filter, RTS smoother and innovations log-likelihood for linear SDEs, batched.

The state follows ``dx = (A x + u) dt + G dw`` (`sde_sim.LinearSDE`), discretised exactly
between measurement times (``e^{A h}``, ``int e^{As} ds u`` and Van Loan's ``Q_d(h)``, so steps
may be irregular), and is measured by ``z_k = C x(t_k + delay) + b + v_k``, ``v_k ~ N(0, R)``
(`sde_sim.LinearMeasurement`; seed 000 sections 2.1 and 3.10). Whole measurement vectors may be
missing (``mask``).

Batching: ``z`` is (B, T, k). The covariance recursion does not depend on the data, only on the
model, the time grid and which measurements are missing; sequences that share those share
their covariances, which are computed once per distinct (times, mask) pattern (a "group"),
while the means are updated for all sequences at once. Results therefore hold covariances per
group, (G, T, d, d), with ``group`` (B,) mapping sequences to rows.

Prior: ``x(t_0) ~ N(mean, cov)`` at the first (delayed) measurement time, or a *diffuse* prior
(``cov=None``): then the first observed measurement determines the state alone, which needs
``C`` with full column rank and invertible ``R``, and it contributes no term to the
log-likelihood (the usual diffuse log-likelihood).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_triangular

from sde_sim import LinearMeasurement, LinearSDE, linear_transition, validation

LOG_2PI = float(np.log(2.0 * np.pi))


class GaussianPrior(NamedTuple):
    """State prior at the first measurement time, ``N(mean, cov)``; ``cov=None`` is diffuse."""

    mean: np.ndarray | None = None
    cov: np.ndarray | None = None


class FilterResult(NamedTuple):
    """Output of `kalman_filter` (time on axis 1 for batched arrays).

    means, covs : filtered ``E[x_k | z_0..k]`` (B, T, d) and ``Cov`` (G, T, d, d).
    pred_means, pred_covs : one-step predictions ``E[x_k | z_0..k-1]`` (B, T, d), (G, T, d, d).
    log_likelihood : sum of the innovations' log-densities, (B,).
    group : (B,) row of each sequence in the covariance arrays.
    times : (B, T) the state times (measurement times plus the delay).
    transition : (G, T, d, d) ``e^{A h_k}`` from step k-1 to k (identity at k = 0).
    """

    means: np.ndarray
    covs: np.ndarray
    pred_means: np.ndarray
    pred_covs: np.ndarray
    log_likelihood: np.ndarray
    group: np.ndarray
    times: np.ndarray
    transition: np.ndarray


class SmootherResult(NamedTuple):
    """Output of `rts_smoother`: ``E[x_k | all z]`` (B, T, d), Cov (G, T, d, d), ``group`` (B,)."""

    means: np.ndarray
    covs: np.ndarray
    group: np.ndarray


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


class _Batch(NamedTuple):
    z: np.ndarray  # (B, T, k), zeros where missing
    observed: np.ndarray  # (B, T) bool
    times: np.ndarray  # (B, T) state times
    group: np.ndarray  # (B,)
    group_times: np.ndarray  # (G, T)
    group_observed: np.ndarray  # (G, T)
    squeeze: bool


def _prepare(sde, measurement, z, t, mask) -> _Batch:
    if not isinstance(sde, LinearSDE):
        raise TypeError(f"sde must be a sde_sim.LinearSDE, got {type(sde).__name__}")
    if not isinstance(measurement, LinearMeasurement):
        raise TypeError(
            f"measurement must be a sde_sim.LinearMeasurement, got {type(measurement).__name__}"
        )
    if measurement.dim != sde.dim:
        raise ValueError(f"measurement.C has {measurement.dim} columns; the state has {sde.dim}")
    z = np.asarray(z, dtype=float)
    squeeze = z.ndim == 2
    if squeeze:
        z = z[None]
    if z.ndim != 3 or z.shape[2] != measurement.out_dim:
        raise ValueError(
            f"z must have shape (B, T, {measurement.out_dim}) or "
            f"(T, {measurement.out_dim}), got {np.shape(z)}"
        )
    B, T, _ = z.shape
    if T < 1:
        raise ValueError("z must hold at least one time step")
    if mask is None:
        observed = np.ones((B, T), dtype=bool)
    else:
        observed = np.asarray(mask)
        if observed.dtype != bool:
            raise TypeError(f"mask must be boolean (True = observed), got dtype {observed.dtype}")
        if squeeze and observed.ndim == 1:
            observed = observed[None]
        if observed.shape != (B, T):
            raise ValueError(
                f"mask must have shape {(B, T)[1 - squeeze :]} (one flag per "
                f"measurement vector), got {np.shape(mask)}"
            )
    finite = np.all(np.isfinite(z), axis=2)
    if np.any(observed & ~finite):
        b, k = np.argwhere(observed & ~finite)[0]
        raise ValueError(
            f"z has NaN or infinite entries at observed measurements (first: "
            f"sequence {b}, step {k}); mark missing ones with mask"
        )
    z = np.where(observed[..., None], z, 0.0)

    t = validation.real_array("t", t)
    if t.ndim == 1:
        t = np.broadcast_to(t, (B, T))
    if t.shape != (B, T):
        raise ValueError(f"t must have shape ({T},) or ({B}, {T}), got {t.shape}")
    if T > 1 and np.any(np.diff(t, axis=1) <= 0):
        raise ValueError("t must be strictly increasing along each sequence")
    times = t + measurement.delay

    key = np.concatenate([times, observed.astype(float)], axis=1)
    unique, group = np.unique(key, axis=0, return_inverse=True)
    return _Batch(
        z,
        observed,
        np.ascontiguousarray(times),
        group.ravel(),
        unique[:, :T],
        unique[:, T:].astype(bool),
        squeeze,
    )


def _transitions(sde: LinearSDE, group_times: np.ndarray):
    """Exact step maps per group and step: Phi, Qd (G, T, d, d) and offset (G, T, d)."""
    G, T = group_times.shape
    d = sde.dim
    Phi = np.broadcast_to(np.eye(d), (G, T, d, d)).copy()
    offset = np.zeros((G, T, d))
    Qd = np.zeros((G, T, d, d))
    if T > 1:
        steps = np.diff(group_times, axis=1)
        sizes, inverse = np.unique(steps, return_inverse=True)
        maps = linear_transition(sde, sizes)
        inverse = inverse.reshape(steps.shape)
        Phi[:, 1:], offset[:, 1:] = maps.Phi[inverse], maps.offset[inverse]
        Qd[:, 1:] = maps.Qd[inverse]
    return Phi, offset, Qd


def _prior(sde: LinearSDE, prior: GaussianPrior | None):
    if prior is None or prior.cov is None:
        return None, None
    d = sde.dim
    mean = np.zeros(d) if prior.mean is None else validation.vector("prior.mean", prior.mean, d)
    cov = validation.covariance("prior.cov", prior.cov, d)
    return mean, cov


# --------------------------------------------------------------------------------------------
# Filter
# --------------------------------------------------------------------------------------------


def _sym(P: np.ndarray) -> np.ndarray:
    return 0.5 * (P + np.swapaxes(P, -1, -2))


def kalman_filter(
    sde: LinearSDE,
    measurement: LinearMeasurement,
    z,
    t,
    *,
    prior: GaussianPrior | None = None,
    mask=None,
) -> FilterResult:
    """Kalman filter with exact discretisation and the innovations log-likelihood.

    Predict ``m- = e^{Ah} m + int_0^h e^{As} ds u``, ``P- = e^{Ah} P e^{A^T h} + Q_d(h)``; update
    ``S = C P- C^T + R``, ``K = P- C^T S^-1``, ``m = m- + K (z - C m- - b)``, ``P = (I - K C) P-
    (I - K C)^T + K R K^T`` (Joseph form, symmetric and PSD in floating point);
    ``log p(z_k | z_<k) = -1/2 (e^T S^-1 e + log det S + k log 2 pi)``.

    Parameters
    ----------
    sde, measurement : the model (`sde_sim.LinearSDE`, `sde_sim.LinearMeasurement`).
    z : (B, T, k) or (T, k) measurements; entries of missing ones are ignored.
    t : (T,) shared or (B, T) per-sequence measurement times, strictly increasing; the states are
        estimated at ``t + measurement.delay``.
    prior : state prior at the first time; ``None`` or ``cov=None`` is diffuse.
    mask : (B, T) or (T,) bool, True where the measurement is observed; default all observed.

    Returns
    -------
    FilterResult; with (T, k) input the batch axis of ``means``, ``pred_means``,
    ``log_likelihood`` and ``times`` is dropped.
    """
    batch = _prepare(sde, measurement, z, t, mask)
    prior_mean, prior_cov = _prior(sde, prior)
    Phi, offset, Qd = _transitions(sde, batch.group_times)
    G, T = batch.group_times.shape
    B, d = batch.z.shape[0], sde.dim

    means = np.empty((B, T, d))
    pred_means = np.empty((B, T, d))
    covs = np.empty((G, T, d, d))
    pred_covs = np.empty((G, T, d, d))
    loglik = np.zeros(B)
    group = batch.group
    single = G == 1

    diffuse = prior_cov is None
    if diffuse and not np.all(batch.observed[:, 0]):
        raise ValueError(
            "a diffuse prior needs the first measurement of every sequence "
            "observed (mask[:, 0] all True): give a proper prior instead"
        )
    m = np.broadcast_to(np.zeros(d) if diffuse else prior_mean, (B, d)).copy()
    P = np.broadcast_to(np.zeros((d, d)) if diffuse else prior_cov, (G, d, d)).copy()
    for step in range(T):
        # --- predict --------------------------------------------------------------------------
        if step > 0:
            F = Phi[:, step]
            m = _apply(m, F, group, single) + (offset[0, step] if single else offset[group, step])
            P = _sym(F @ P @ np.swapaxes(F, 1, 2) + Qd[:, step])
        pred_means[:, step], pred_covs[:, step] = m, P
        # --- update ---------------------------------------------------------------------------
        if step == 0 and diffuse:
            # Nothing is known before the first measurement: it fixes the state on its own
            # and adds no term to the (diffuse) log-likelihood.
            pred_means[:, 0], pred_covs[:, 0] = np.nan, np.nan
            m, P = _diffuse_start(batch.z[:, 0], measurement, G)
        else:
            upd = batch.group_observed[:, step]
            if np.any(upd):
                m, P = _update(m, P, upd, batch, step, measurement, loglik, single)
        means[:, step], covs[:, step] = m, P
    result = FilterResult(means, covs, pred_means, pred_covs, loglik, group, batch.times, Phi)
    return _squeezed(result, batch.squeeze)


def _apply(m: np.ndarray, F: np.ndarray, group: np.ndarray, single: bool) -> np.ndarray:
    """``F_g m`` for each sequence: m (B, d), F (G, d, d)."""
    if single:
        return m @ F[0].T
    return np.einsum("bij,bj->bi", F[group], m)


def _update(m, P, upd, batch: _Batch, step: int, measurement, loglik, single: bool):
    """Measurement update of the groups `upd` (G,) and their observed sequences; adds to loglik."""
    C, R, bias = measurement.C, measurement.R, measurement.b
    d, k = C.shape[1], C.shape[0]
    S = _sym(C @ P[upd] @ C.T + R)
    L = np.linalg.cholesky(S)
    PCt = P[upd] @ C.T
    K = np.swapaxes(np.linalg.solve(np.swapaxes(S, 1, 2), np.swapaxes(PCt, 1, 2)), 1, 2)
    IKC = np.eye(d) - K @ C
    P = P.copy()
    P[upd] = _sym(IKC @ P[upd] @ np.swapaxes(IKC, 1, 2) + K @ R @ np.swapaxes(K, 1, 2))
    rows = batch.observed[:, step]
    if not np.any(rows):
        return m, P
    m = m.copy()
    e = batch.z[rows, step] - m[rows] @ C.T - bias
    if single:
        m[rows] += e @ K[0].T
        w = solve_triangular(L[0], e.T, lower=True).T
        logdet = 2.0 * np.sum(np.log(np.diag(L[0])))
    else:
        slot = (np.cumsum(upd) - 1)[batch.group[rows]]  # row of each sequence in K and L
        m[rows] += np.einsum("bij,bj->bi", K[slot], e)
        w = np.linalg.solve(L[slot], e[..., None])[..., 0]
        logdet = 2.0 * np.sum(np.log(np.diagonal(L[slot], axis1=1, axis2=2)), axis=1)
    loglik[rows] -= 0.5 * (np.sum(w * w, axis=1) + logdet + k * LOG_2PI)
    return m, P


def _diffuse_start(z0: np.ndarray, measurement, groups: int):
    """Diffuse start: ``P = (C^T R^-1 C)^-1`` and ``m = P C^T R^-1 (z_0 - b)``."""
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
    P0 = np.linalg.inv(W.T @ W)
    gain = P0 @ W.T @ np.linalg.inv(L)  # P0 C^T R^-1
    m = (z0 - measurement.b) @ gain.T
    return m, np.broadcast_to(_sym(P0), (groups, d, d)).copy()


def _squeezed(result: FilterResult, squeeze: bool) -> FilterResult:
    if not squeeze:
        return result
    return result._replace(
        means=result.means[0],
        pred_means=result.pred_means[0],
        log_likelihood=result.log_likelihood[0],
        times=result.times[0],
    )


# --------------------------------------------------------------------------------------------
# Smoother
# --------------------------------------------------------------------------------------------


def rts_smoother(filtered: FilterResult) -> SmootherResult:
    """Rauch-Tung-Striebel smoother from a `FilterResult` (batched or not).

    Backward pass ``J_k = P_k F_{k+1}^T (P-_{k+1})^-1``, ``m^s_k = m_k + J_k (m^s_{k+1} -
    m-_{k+1})``, ``P^s_k = P_k + J_k (P^s_{k+1} - P-_{k+1}) J_k^T``, with ``F_{k+1}`` the exact
    transition over the step from k to k+1.

    Returns
    -------
    SmootherResult with means (B, T, d) (or (T, d)), covs (G, T, d, d) and group (B,).
    """
    squeeze = filtered.means.ndim == 2
    means = filtered.means[None] if squeeze else filtered.means
    pred_means = filtered.pred_means[None] if squeeze else filtered.pred_means
    covs, pred_covs, Phi, group = (
        filtered.covs,
        filtered.pred_covs,
        filtered.transition,
        filtered.group,
    )
    T = means.shape[1]
    single = covs.shape[0] == 1
    s_means, s_covs = means.copy(), covs.copy()
    for k in range(T - 2, -1, -1):
        P, F, P_next = covs[:, k], Phi[:, k + 1], pred_covs[:, k + 1]
        PFt = P @ np.swapaxes(F, 1, 2)
        J = np.swapaxes(np.linalg.solve(P_next, np.swapaxes(PFt, 1, 2)), 1, 2)  # P_next symmetric
        gap = s_means[:, k + 1] - pred_means[:, k + 1]
        if single:
            s_means[:, k] = means[:, k] + gap @ J[0].T
        else:
            s_means[:, k] = means[:, k] + np.einsum("bij,bj->bi", J[group], gap)
        s_covs[:, k] = _sym(P + J @ (s_covs[:, k + 1] - P_next) @ np.swapaxes(J, 1, 2))
    return SmootherResult(s_means[0] if squeeze else s_means, s_covs, group)

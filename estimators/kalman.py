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

The predict/update pair, the diffuse start, the step classes and `GaussianPrior` are
`estimators.linear_gaussian`'s (shared with `estimators.recurrent` and `estimators.fit`); this
module owns the batching into covariance groups, the two filter paths and the smoother.
`GaussianPrior` is public here, as ``estimators.kalman.GaussianPrior``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from estimators import batch_input
from estimators import linear_gaussian as lg
from estimators.linear_gaussian import GaussianPrior, sym, transpose
from sde_sim import LinearMeasurement, LinearSDE

LOG_2PI = float(np.log(2.0 * np.pi))


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


class _GroupedBatch(NamedTuple):
    z: np.ndarray  # (B, T, k), zeros where missing
    observed: np.ndarray  # (B, T) bool
    times: np.ndarray  # (B, T) state times
    group: np.ndarray  # (B,) covariance group of each sequence
    group_observed: np.ndarray  # (G, T)
    time_group: np.ndarray  # (G,) time grid of each group
    grid_times: np.ndarray  # (Gt, T) distinct time grids
    squeeze: bool


def _unique_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first index, inverse) of the distinct rows of a 2-D float array."""
    key = np.ascontiguousarray(key)
    rows = key.view(np.dtype((np.void, key.dtype.itemsize * key.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def _grouped_batch(sde, measurement, z, t, mask) -> _GroupedBatch:
    """The prepared batch (`batch_input.batch`) and its covariance groups."""
    lg.check_model(sde, measurement)
    data = batch_input.batch(z, t, mask, measurement.out_dim, delay=measurement.delay)
    observed, times = data.observed, data.times
    B = observed.shape[0]
    # Groups share covariances: same time grid and same missing pattern.
    if data.shared:
        grid_times = times[:1]
        if np.all(observed == observed[0]):
            group, group_observed = np.zeros(B, dtype=np.int64), observed[:1]
        else:
            first, group = _unique_rows(observed.astype(float))
            group_observed = observed[first]
        time_group = np.zeros(group_observed.shape[0], dtype=np.int64)
    else:
        first, group = _unique_rows(np.concatenate([times, observed.astype(float)], axis=1))
        group_observed = observed[first]
        grid_first, time_group = _unique_rows(times[first])
        grid_times = times[first][grid_first]
    return _GroupedBatch(
        data.z, observed, times, group, group_observed, time_group, grid_times, data.squeeze
    )


def _transitions(sde: LinearSDE, grid_times: np.ndarray, prior_time: float | None):
    """Exact step maps per time grid and step: Phi, Qd (Gt, T, d, d) and offset (Gt, T, d).

    Step 0 maps the prior from `prior_time` to the first state time (the identity when None).
    """
    Gt, T = grid_times.shape
    d = sde.dim
    if prior_time is None:
        start, steps = 1, np.diff(grid_times, axis=1)
    else:
        lg.check_prior_time(prior_time, grid_times[:, 0])
        start, steps = 0, np.diff(grid_times, axis=1, prepend=prior_time)
    Phi = np.broadcast_to(np.eye(d), (Gt, T, d, d)).copy()
    offset = np.zeros((Gt, T, d))
    Qd = np.zeros((Gt, T, d, d))
    if steps.size:
        maps, classes = lg.step_maps(sde, steps)
        Phi[:, start:], offset[:, start:] = maps.Phi[classes], maps.offset[classes]
        Qd[:, start:] = maps.Qd[classes]
    return Phi, offset, Qd


# --------------------------------------------------------------------------------------------
# Filter
# --------------------------------------------------------------------------------------------


@batch_input.guard
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
    ``S = C P- C^T + R = L L^T``, ``K = P- C^T S^-1``, ``m = m- + K (z - C m- - b)``,
    ``P = P- - K S K^T`` (a Gram form, symmetric by construction; the pair is
    `estimators.linear_gaussian.predict_cov` / `update`); ``log p(z_k | z_<k) = -1/2 (e^T S^-1 e
    + log det S + k log 2 pi)`` with ``e = z - C m- - b``.

    When all sequences share the time grid and the missing pattern, the covariances and gains
    (which do not depend on the data) are computed once, stopping at the steady state, and
    each step of the means is two matrix products on (B, .) arrays. Otherwise covariances are
    kept per group of sequences that share both, and each step updates all groups at once.

    Parameters
    ----------
    sde, measurement : the model (`sde_sim.LinearSDE`, `sde_sim.LinearMeasurement`).
    z : (B, T, k) or (T, k) measurements; entries of missing ones are ignored.
    t : (T,) shared or (B, T) per-sequence measurement times, strictly increasing; the states are
        estimated at ``t + measurement.delay``.
    prior : state prior (see `GaussianPrior`); ``None`` or ``cov=None`` is diffuse.
    mask : (B, T) or (T,) bool, True where the measurement is observed; default all observed.

    Returns
    -------
    FilterResult; with (T, k) input the batch axis of ``means``, ``pred_means``,
    ``log_likelihood`` and ``times`` is dropped.
    """
    batch = _grouped_batch(sde, measurement, z, t, mask)
    prior_mean, prior_cov, prior_time = lg.prior_moments(prior, sde.dim)
    if prior_cov is None:
        lg.require_first_observed(batch.observed[:, 0])
    Phi, offset, Qd = _transitions(sde, batch.grid_times, prior_time)
    G, T = batch.group_observed.shape
    if G == 1:
        g = _shared_covariances(measurement, batch, Phi[0], Qd[0], prior_cov)
        means, pred, loglik = _shared_means(measurement, batch, Phi[0], offset[0], g, prior_mean)
        covs, pred_covs = g.covs[None], g.pred_covs[None]
    else:
        means, pred, loglik, covs, pred_covs = _grouped_filter(
            measurement, batch, Phi, offset, Qd, prior_mean, prior_cov
        )
    if Phi.shape[0] == 1:
        transition = np.broadcast_to(Phi, (G, *Phi.shape[1:]))
    else:
        transition = Phi[batch.time_group]
    result = FilterResult(
        np.moveaxis(means, 0, 1),
        covs,
        np.moveaxis(pred, 0, 1),
        pred_covs,
        loglik,
        batch.group,
        batch.times,
        transition,
    )
    return _squeezed(result, batch.squeeze)


class _Gains(NamedTuple):
    """Data-independent part of the filter for one group: per step."""

    pred_covs: np.ndarray  # (T, d, d)
    covs: np.ndarray  # (T, d, d)
    gains: np.ndarray  # (T, d, k), zero where nothing is observed
    whiten: np.ndarray  # (T, k, k) L^-1 with L L^T = S, zero where nothing is observed
    logdet: np.ndarray  # (T,) log det S


# The covariance recursion is stopped once its map is fixed (same step size and observation
# from there on) and one step changes the covariance by at most this much, relative: further
# steps would only repeat it to round-off.
_STEADY_RTOL = 1e-14


def _fixed_from(times: np.ndarray, observed: np.ndarray) -> int:
    """First step after which the step size and the observation flag stay the same; (T,) inputs."""
    T = times.size
    changes = observed != observed[-1]
    if T > 2:
        classes = lg.step_classes(np.diff(times))[1]
        changes[1:-1] |= classes[:-1] != classes[-1]
    changed = np.flatnonzero(changes)
    return int(changed[-1]) + 1 if changed.size else 1


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.all(np.abs(a - b) <= _STEADY_RTOL * np.abs(b).max()))


def _shared_covariances(measurement, batch: _GroupedBatch, Phi, Qd, prior_cov) -> _Gains:
    """Covariances, gains and innovation whitening of the single group, until steady state.

    With a diffuse prior, step 0 sets ``P = (C^T R^-1 C)^-1``. Once the recursion has reached
    its steady state (see `_STEADY_RTOL`) the remaining steps are copies.
    """
    C, R = measurement.C, measurement.R
    T = Phi.shape[0]
    d, k = C.shape[1], C.shape[0]
    pred_covs, covs = np.empty((T, d, d)), np.empty((T, d, d))
    gains, whiten, logdet = np.zeros((T, d, k)), np.zeros((T, k, k)), np.zeros(T)
    observed = batch.group_observed[0]
    fixed_from = _fixed_from(batch.grid_times[0], observed)
    P = prior_cov
    for step in range(T):
        if P is None:  # diffuse prior: the first measurement alone fixes the state
            pred_covs[0] = np.nan
            P = covs[0] = lg.diffuse_covariance(measurement)
            continue
        F = Phi[step]  # at step 0 this carries a proper prior to the first state time
        P = pred_covs[step] = lg.predict_cov(P, F, Qd[step])
        if observed[step]:
            P, gains[step], whiten[step], logdet[step] = lg.update(P, C, R)
        covs[step] = P
        if (
            step > fixed_from
            and _close(covs[step], covs[step - 1])
            and _close(pred_covs[step], pred_covs[step - 1])
        ):
            for arr in (pred_covs, covs, gains, whiten, logdet):
                arr[step + 1 :] = arr[step]
            break
    return _Gains(pred_covs, covs, gains, whiten, logdet)


def _shared_means(measurement, batch: _GroupedBatch, Phi, offset, g: _Gains, prior_mean):
    """Means, predictions (T, B, d) and log-likelihood (B,) when all sequences share one group.

    All sequences share the gains and the observation pattern, so each step is two matrix
    products on (B, .) arrays that stay in cache: ``m [F^T | F^T C^T]`` gives the prediction
    ``m- = m F^T + c`` and its measurement, so ``e = z - b - c C^T - m F^T C^T``; then
    ``e [K^T | L^-T]`` gives the correction ``m = m- + e K^T`` and the whitened innovation
    ``w = e L^-T`` (``L L^T = S``), whose squares accumulate into the log-likelihood.
    """
    C, bias = measurement.C, measurement.b
    z = batch.z
    B, T, k = z.shape
    d = C.shape[1]
    observed = batch.group_observed[0]
    PhiT = transpose(Phi)
    forward = np.concatenate([PhiT, PhiT @ C.T], axis=2)  # (T, d, d + k)
    update = np.concatenate([transpose(g.gains), transpose(g.whiten)], axis=2)  # (T, k, d + k)
    drift = bool(np.any(offset))
    z_shift = bias + offset @ C.T  # (T, k): b + c C^T
    shift = bool(np.any(z_shift))
    means, pred = np.empty((T, B, d)), np.empty((T, B, d))
    ahead, back = np.empty((B, d + k)), np.empty((B, d + k))
    e = np.empty((B, k))
    squares = np.zeros(B)
    diffuse = prior_mean is None
    for step in range(T):
        if step == 0 and diffuse:
            pred[0] = np.nan
            means[0] = lg.diffuse_mean(measurement, z[:, 0], g.covs[0])
            continue
        if step == 0:
            np.matmul(np.broadcast_to(prior_mean, (B, d)), forward[0], out=ahead)
        else:
            np.matmul(means[step - 1], forward[step], out=ahead)
        if drift:
            np.add(ahead[:, :d], offset[step], out=pred[step])
        else:
            pred[step] = ahead[:, :d]
        if not observed[step]:
            means[step] = pred[step]
            continue
        np.subtract(z[:, step], ahead[:, d:], out=e)
        if shift:
            e -= z_shift[step]
        np.matmul(e, update[step], out=back)
        np.add(pred[step], back[:, :d], out=means[step])
        squares += np.einsum("bi,bi->b", back[:, d:], back[:, d:])
    counted = observed.copy()
    counted[0] &= not diffuse  # the diffuse start adds no log-likelihood term
    constant = np.sum(g.logdet[counted]) + k * LOG_2PI * np.count_nonzero(counted)
    return means, pred, -0.5 * (squares + constant)


def _grouped_filter(measurement, batch: _GroupedBatch, Phi, offset, Qd, prior_mean, prior_cov):
    """Filter with covariances per group (G > 1), all groups and sequences updated per step.

    Returns means, predictions (T, B, d), log-likelihood (B,), covs and pred_covs (G, T, d, d).
    """
    C, R, bias = measurement.C, measurement.R, measurement.b
    z, observed, group = batch.z, batch.observed, batch.group
    B, T, k = z.shape
    G, d = batch.group_observed.shape[0], C.shape[1]
    shared_grid = Phi.shape[0] == 1
    seq_grid = batch.time_group[group]  # (B,) time grid of each sequence
    means, pred = np.empty((T, B, d)), np.empty((T, B, d))
    covs, pred_covs = np.empty((G, T, d, d)), np.empty((G, T, d, d))
    loglik = np.zeros(B)
    if prior_cov is None:
        P = np.broadcast_to(lg.diffuse_covariance(measurement), (G, d, d)).copy()
        m = lg.diffuse_mean(measurement, z[:, 0], P[0])
        pred[0], pred_covs[:, 0], means[0], covs[:, 0] = np.nan, np.nan, m, P
        first = 1
    else:
        P = np.broadcast_to(prior_cov, (G, d, d)).copy()
        m = np.broadcast_to(prior_mean, (B, d))
        first = 0
    for step in range(first, T):
        if shared_grid:
            P = lg.predict_cov(P, Phi[0, step], Qd[0, step])
            m = lg.predict_mean(m, Phi[0, step], offset[0, step])
        else:  # covariances per group, means per sequence
            P = lg.predict_cov(P, Phi[batch.time_group, step], Qd[batch.time_group, step])
            m = lg.predict_mean(m, Phi[seq_grid, step], offset[seq_grid, step])
        pred[step], pred_covs[:, step] = m, P
        upd = batch.group_observed[:, step]
        if np.any(upd):
            P = P.copy()
            P[upd], K, Linv, logdet = lg.update(P[upd], C, R)
            rows = observed[:, step]
            slot = (np.cumsum(upd) - 1)[group[rows]]  # row of each sequence in K, Linv
            e = z[rows, step] - m[rows] @ C.T - bias
            m = m.copy()
            m[rows] += np.einsum("bij,bj->bi", K[slot], e)
            w = np.einsum("bij,bj->bi", Linv[slot], e)
            loglik[rows] -= 0.5 * (np.einsum("bi,bi->b", w, w) + logdet[slot] + k * LOG_2PI)
        means[step], covs[:, step] = m, P
    return means, pred, loglik, covs, pred_covs


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


@batch_input.guard
def rts_smoother(filtered: FilterResult) -> SmootherResult:
    """Rauch-Tung-Striebel smoother from a `FilterResult` (batched or not).

    Backward pass ``J_k = P_k F_{k+1}^T (P-_{k+1})^-1``, ``m^s_k = m_k + J_k (m^s_{k+1} -
    m-_{k+1})``, ``P^s_k = P_k + J_k (P^s_{k+1} - P-_{k+1}) J_k^T``, with ``F_{k+1}`` the exact
    transition over the step from k to k+1. The gains are computed for all steps at once; the
    means' sequential part is one matrix product per step.

    Returns
    -------
    SmootherResult with means (B, T, d) (or (T, d)), covs (G, T, d, d) and group (B,).
    """
    batch_input.filter_result("filtered", filtered)
    squeeze = filtered.means.ndim == 2
    means = filtered.means[None] if squeeze else filtered.means
    pred_means = filtered.pred_means[None] if squeeze else filtered.pred_means
    covs, pred_covs, Phi, group = (
        filtered.covs,
        filtered.pred_covs,
        filtered.transition,
        filtered.group,
    )
    m = np.moveaxis(means, 1, 0)  # (T, B, d)
    mp = np.moveaxis(pred_means, 1, 0)
    T = m.shape[0]
    s_means, s_covs = m.copy(), covs.copy()
    if T > 1:
        PFt = covs[:, :-1] @ transpose(Phi[:, 1:])
        J = transpose(
            np.linalg.solve(pred_covs[:, 1:], transpose(PFt))
        )  # (G, T-1, d, d); P- symmetric
        for step in range(T - 2, -1, -1):
            Jk = J[:, step]
            gap = s_means[step + 1] - mp[step + 1]
            if Jk.shape[0] == 1:
                s_means[step] = m[step] + gap @ Jk[0].T
            else:
                s_means[step] = m[step] + np.einsum("bij,bj->bi", Jk[group], gap)
            s_covs[:, step] = sym(
                covs[:, step] + Jk @ (s_covs[:, step + 1] - pred_covs[:, step + 1]) @ transpose(Jk)
            )
    out = np.moveaxis(s_means, 0, 1)
    return SmootherResult(out[0] if squeeze else out, s_covs, group)

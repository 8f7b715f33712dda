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
group, (G, T, d, d), with ``group`` (B,) mapping sequences to rows (groups are numbered in the
order of their first sequence). They hold the filtered moments only: the one-step predictions
are recomputed from them on access (`FilterResult.pred_means`, `FilterResult.pred_covs`,
`predicted_means`, `predicted_covs`), which halves the memory when every sequence has its own
mask (G = B).

Prior: ``x(t_0) ~ N(mean, cov)`` at the first (delayed) measurement time, or a *diffuse* prior
(``cov=None``): then the first observed measurement determines the state alone, which needs
``C`` with full column rank and invertible ``R``, and it contributes no term to the
log-likelihood (the usual diffuse log-likelihood).

The predict/update pair, the diffuse start, the step classes and `GaussianPrior` are
`estimators.linear_gaussian`'s (shared with `estimators.recurrent` and `estimators.fit`); this
module owns the batching into covariance groups, the filter paths (one group; groups of
small matrices on one time grid, stored group-last; any groups) and the smoother. The stacks
of small matrices go through `estimators.stacked`.
`GaussianPrior` is public here, as ``estimators.kalman.GaussianPrior``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController

from estimators import batch_input, stacked
from estimators import linear_gaussian as lg
from estimators.linear_gaussian import GaussianPrior, sym, transpose
from sde_sim import LinearMeasurement, LinearSDE

LOG_2PI = float(np.log(2.0 * np.pi))
_SMALL_PATH = 4


class FilterResult(NamedTuple):
    """Output of `kalman_filter` (time on axis 1 for batched arrays).

    means, covs : filtered ``E[x_k | z_0..k]`` (B, T, d) and ``Cov`` (G, T, d, d).
    log_likelihood : sum of the innovations' log-densities, (B,).
    group : (B,) row of each sequence in the covariance arrays.
    times : (B, T) the state times (measurement times plus the delay).
    transition : (G, T, d, d) ``e^{A h_k}`` from step k-1 to k (identity at k = 0).
    noise, offset : (G, T, d, d) ``Q_d(h_k)`` and (G, T, d) ``int_0^h e^{As} ds u`` of the
        same steps (zero at k = 0 unless the prior was given at an earlier time).
    prior_mean, prior_cov : the proper prior at ``prior.time`` ((d,), (d, d)); None if diffuse.

    The one-step predictions are not stored (with per-sequence masks they would double the
    memory): `pred_means` and `pred_covs` compute them on access from the fields above, with
    the filter's own predict step (``m- = F m + c``, ``P- = F P F^T + Q_d``), so they equal the
    predictions the filter used. Each access is one pass over the data; keep the array rather
    than reading the property inside a loop.
    """

    means: np.ndarray
    covs: np.ndarray
    log_likelihood: np.ndarray
    group: np.ndarray
    times: np.ndarray
    transition: np.ndarray
    noise: np.ndarray
    offset: np.ndarray
    prior_mean: np.ndarray | None
    prior_cov: np.ndarray | None

    @property
    def pred_means(self) -> np.ndarray:
        """One-step predictions ``E[x_k | z_0..k-1]`` (B, T, d) (or (T, d)); NaN at a diffuse
        start."""
        return predicted_means(self)

    @property
    def pred_covs(self) -> np.ndarray:
        """Their covariances (G, T, d, d); NaN at a diffuse start."""
        return predicted_covs(self)


class SmootherResult(NamedTuple):
    """Output of `rts_smoother`: ``E[x_k | all z]`` (B, T, d), Cov (G, T, d, d), ``group`` (B,)."""

    means: np.ndarray
    covs: np.ndarray
    group: np.ndarray


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


class _GroupedBatch(NamedTuple):
    z: np.ndarray  # (B, T, k), as given: entries of missing measurements are never read
    observed: np.ndarray  # (B, T) bool
    times: np.ndarray  # (B, T) state times
    group: np.ndarray  # (B,) covariance group of each sequence
    group_observed: np.ndarray  # (G, T)
    time_group: np.ndarray  # (G,) time grid of each group
    grid_times: np.ndarray  # (Gt, T) distinct time grids
    squeeze: bool


def _unique_rows(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first index, inverse) of the distinct rows of a 2-D float array, the distinct rows
    numbered in the order of their first occurrence (so distinct rows keep the input order)."""
    key = np.ascontiguousarray(key)
    rows = key.view(np.dtype((np.void, key.dtype.itemsize * key.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    by_first = np.argsort(first)
    rank = np.empty_like(by_first)
    rank[by_first] = np.arange(by_first.size)
    return first[by_first], rank[inverse.ravel()]


def _grouped_batch(sde, measurement, z, t, mask) -> _GroupedBatch:
    """The prepared batch (`batch_input.batch`) and its covariance groups."""
    lg.check_model(sde, measurement)
    # Missing measurements are never read (the grouped path gathers observed rows, the
    # shared one skips missing steps), so z is not copied into a zero-filled array.
    data = batch_input.batch(
        z, t, mask, measurement.out_dim, delay=measurement.delay, zero_fill=False
    )
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
    threads: int | None = None,
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
    kept per group of sequences that share both, and each step predicts all groups at once and
    updates the observed ones at once (`linear_gaussian.update_stack`: one Cholesky factor
    ``S = L L^T`` per group, ``W = L^-1 C P``, ``P = P- - W^T W``; each sequence's mean then
    moves by ``W^T L^-1 e``; for k <= 4 ``L^-1`` is computed for the whole stack at once by
    `stacked.inverse_cholesky`, for larger k with one LAPACK call per matrix). The
    covariances are stored time-major (``covs`` is a (G, T, d, d) view of a (T, G, d, d)
    array), so that each step works on contiguous stacks. For d, k <= 4 on one time grid
    the groups sit on the last axis and every group is updated, a missing one with zero
    gain (`_grouped_filter_small`).
    Otherwise (larger matrices, or several time grids) the groups can be split into up to
    ``threads`` ranges filtered side by side in threads (numpy and torch release the GIL
    inside their array operations; BLAS's own threads are turned off during the call, see
    `_grouped_filter`); each group's recursion is the same arithmetic whatever the split, so
    the result does not depend on ``threads`` beyond round-off.

    Parameters
    ----------
    sde, measurement : the model (`sde_sim.LinearSDE`, `sde_sim.LinearMeasurement`).
    z : (B, T, k) or (T, k) measurements; entries of missing ones are ignored.
    t : (T,) shared or (B, T) per-sequence measurement times, strictly increasing; the states are
        estimated at ``t + measurement.delay``.
    prior : state prior (see `GaussianPrior`); ``None`` or ``cov=None`` is diffuse.
    mask : (B, T) or (T,) bool, True where the measurement is observed; default all observed.
    threads : threads of the grouped path (see above; each thread takes at least 64 groups,
        so smaller batches run in fewer); default ``min(2, usable CPUs)`` (`default_threads`).
        1 runs in the calling thread only. The shared path (one group) and the small-matrix
        path run in the calling thread whatever this is.

    Returns
    -------
    FilterResult; with (T, k) input the batch axis of ``means``, ``log_likelihood`` and
    ``times`` (and of the recomputed ``pred_means``) is dropped.
    """
    threads = _threads(threads)
    batch = _grouped_batch(sde, measurement, z, t, mask)
    prior_mean, prior_cov, prior_time = lg.prior_moments(prior, sde.dim)
    if prior_cov is None:
        lg.require_first_observed(batch.observed[:, 0])
    Phi, offset, Qd = _transitions(sde, batch.grid_times, prior_time)
    G, T = batch.group_observed.shape
    if G == 1:
        g = _shared_covariances(measurement, batch, Phi[0], Qd[0], prior_cov)
        means, loglik = _shared_means(measurement, batch, Phi[0], offset[0], g, prior_mean)
        covs = g.covs[None]
    elif Phi.shape[0] == 1 and max(sde.dim, measurement.out_dim) <= _SMALL_PATH:
        means, loglik, covs = _grouped_filter_small(
            measurement, batch, Phi[0], offset[0], Qd[0], prior_mean, prior_cov
        )
    else:
        means, loglik, covs = _grouped_filter(
            measurement, batch, Phi, offset, Qd, prior_mean, prior_cov, threads
        )
    if Phi.shape[0] == 1:
        per_group = [np.broadcast_to(x, (G, *x.shape[1:])) for x in (Phi, Qd, offset)]
    else:
        per_group = [x[batch.time_group] for x in (Phi, Qd, offset)]
    transition, noise, offset = per_group
    result = FilterResult(
        np.moveaxis(means, 0, 1),
        covs,
        loglik,
        batch.group,
        batch.times,
        transition,
        noise,
        offset,
        prior_mean,
        prior_cov,
    )
    return _squeezed(result, batch.squeeze)


def default_threads() -> int:
    """Threads `kalman_filter` uses by default: ``min(2, CPUs this process may run on)``.

    The cap of 2 is what was measured (on a 2-CPU machine); pass ``threads`` to use more.
    """
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return min(2, usable)


def _threads(threads) -> int:
    if threads is None:
        return default_threads()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f"kalman_filter: threads must be a positive integer, got {threads!r}")
    return int(threads)


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
    """Means (T, B, d) and log-likelihood (B,) when all sequences share one group.

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
    means, pred = np.empty((T, B, d)), np.empty((B, d))
    ahead, back = np.empty((B, d + k)), np.empty((B, d + k))
    e = np.empty((B, k))
    squares = np.zeros(B)
    diffuse = prior_mean is None
    for step in range(T):
        if step == 0 and diffuse:
            means[0] = lg.diffuse_mean(measurement, z[:, 0], g.covs[0])
            continue
        if step == 0:
            np.matmul(np.broadcast_to(prior_mean, (B, d)), forward[0], out=ahead)
        else:
            np.matmul(means[step - 1], forward[step], out=ahead)
        if drift:
            np.add(ahead[:, :d], offset[step], out=pred)
        else:
            pred[:] = ahead[:, :d]
        if not observed[step]:
            means[step] = pred
            continue
        np.subtract(z[:, step], ahead[:, d:], out=e)
        if shift:
            e -= z_shift[step]
        np.matmul(e, update[step], out=back)
        np.add(pred, back[:, :d], out=means[step])
        squares += np.einsum("bi,bi->b", back[:, d:], back[:, d:])
    counted = observed.copy()
    counted[0] &= not diffuse  # the diffuse start adds no log-likelihood term
    constant = np.sum(g.logdet[counted]) + k * LOG_2PI * np.count_nonzero(counted)
    return means, -0.5 * (squares + constant)


def _grouped_filter(
    measurement, batch: _GroupedBatch, Phi, offset, Qd, prior_mean, prior_cov, threads: int
):
    """Filter with covariances per group (G > 1), the groups split into up to ``threads``
    contiguous ranges filtered side by side (`_filter_groups` on each; a range needs at least
    `_GROUPS_PER_THREAD` groups). The groups' recursions are independent, so the split
    changes no covariance; each range writes its own rows of the results.

    Returns means (T, B, d), log-likelihood (B,) and covs (G, T, d, d) (a view of a
    time-major array).
    """
    B, T, _ = batch.z.shape
    G, d = batch.group_observed.shape[0], measurement.C.shape[1]
    # Covariances are stored time-major, (T, G, d, d): each step reads and writes one
    # contiguous stack. Stored group-major, consecutive matrices of a step would lie T d^2
    # floats apart (2 MB at T = 1000, d = 16), a TLB miss and a cache-set conflict per matrix;
    # every stacked product then took twice as long. The result is a (G, T, d, d) view.
    means, covs, loglik = _result_array((T, B, d)), _result_array((T, G, d, d)), np.empty(B)
    parts = max(1, min(threads, G // _GROUPS_PER_THREAD))
    bounds = np.linspace(0, G, parts + 1).round().astype(int)
    ranges = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
    args = (measurement, batch, Phi, offset, Qd, prior_mean, prior_cov, means, covs, loglik)
    # BLAS's own threads are off while the filter runs, so that ``threads`` is what it uses:
    # numpy's OpenBLAS, left with its threads, made two threads' small products no faster
    # than one (they contend for its thread pool: a predict step took 1.1 ms in one thread
    # and in two, 0.6-0.7 ms in two with this limit).
    with _one_blas_thread():
        if parts == 1:
            _filter_groups(*args, 0, G)
        else:
            with ThreadPoolExecutor(parts) as pool:
                for done in [pool.submit(_filter_groups, *args, *r) for r in ranges]:
                    done.result()
    return means, loglik, np.moveaxis(covs, 0, 1)


def _result_array(shape: tuple[int, ...]) -> np.ndarray:
    """``np.empty(shape)`` (float64) without numpy's transparent-huge-page advice.

    numpy asks the kernel for 2 MB pages on large arrays (``madvise(MADV_HUGEPAGE)``). With
    the kernel's default ``defrag=madvise`` the first write to each 2 MB then waits for
    memory compaction when free memory is fragmented: on the development VM, with another 2 GB
    array alive, the first writes to a fresh 2 GB array took 1.0-3.8 s with the advice and
    1.1-1.5 s without, and a filter call at d = 16 (1000 x 1000) 5.2-9.7 s against 4.3-6.4 s.
    The filter writes its covariances once, a contiguous stack per step, so 4 KB pages cost
    it nothing in TLB misses. The advice is numpy's global switch, turned off for this
    allocation only (another thread allocating at that moment may also go without it).
    """
    switch = _huge_page_switch()
    if switch is None:  # not this numpy's API: the plain allocation
        return np.empty(shape)
    advised = switch(False)
    try:
        return np.empty(shape)
    finally:
        switch(advised)


def _huge_page_switch():
    """numpy's ``_set_madvise_hugepage(enabled) -> previous`` (numpy >= 2), or None."""
    multiarray = getattr(getattr(np, "_core", None), "multiarray", None)
    return getattr(multiarray, "_set_madvise_hugepage", None)


@functools.cache
def _blas_threads() -> ThreadpoolController:
    """The thread pools of the loaded BLAS libraries, found once (a search of the loaded
    libraries takes about 0.7 ms; numpy's BLAS is loaded before this module is)."""
    return ThreadpoolController()


_blas_lock = threading.Lock()
_blas_limit = None  # the limiter in force while `_blas_users` > 0
_blas_users = 0


@contextlib.contextmanager
def _one_blas_thread():
    """BLAS limited to one thread while any grouped filter call runs, the user's setting
    restored when the last one ends. The limit is process-wide, so calls from several threads
    share it: each saving and restoring on its own would, when they overlap, leave the
    limit of one in place for good."""
    global _blas_limit, _blas_users
    with _blas_lock:
        if _blas_users == 0:
            _blas_limit = _blas_threads().limit(limits=1, user_api="blas")
        _blas_users += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_users -= 1
            if _blas_users == 0:
                _blas_limit.restore_original_limits()
                _blas_limit = None


# A thread of `_grouped_filter` takes at least this many groups, so that a thread's per-step
# arithmetic outweighs its Python loop and the numpy call overheads (a round guess, not tuned).
_GROUPS_PER_THREAD = 64


def _filter_groups(
    measurement, batch: _GroupedBatch, Phi, offset, Qd, prior_mean, prior_cov,
    means, covs, loglik, g0: int, g1: int,
):  # fmt: skip
    """The filter of `_grouped_filter` on the groups ``g0 <= g < g1`` and their sequences:
    per step the groups are predicted together and the observed ones updated together
    (`linear_gaussian.update_stack`), and the means of the sequences follow with their
    group's factors. Writes the groups' columns of ``covs`` (T, G, d, d) and the sequences' of
    ``means`` (T, B, d) and ``loglik`` (B,); the per-step arrays are allocated once
    (`linear_gaussian.StackWork`) and reused.
    """
    C, R, bias = measurement.C, measurement.R, measurement.b
    z = batch.z
    B, T, k = z.shape
    G, d = g1 - g0, C.shape[1]
    # The sequences of these groups, sorted by group, so that the sequences of the updated
    # groups come in the order of the groups' factors; when every group holds one sequence
    # (per-sequence masks) the factors then need no gather per sequence.
    if g0 == 0 and g1 == batch.group_observed.shape[0]:
        seqs, group = np.arange(B), batch.group
    else:
        seqs = np.flatnonzero((batch.group >= g0) & (batch.group < g1))
        group = batch.group[seqs] - g0
    by_group = np.argsort(group, kind="stable")
    order, sorted_group = seqs[by_group], group[by_group]
    n_seq = order.size
    if np.array_equal(order, np.arange(order[0], order[0] + n_seq)):  # a slice: no gathers
        order = slice(int(order[0]), int(order[0]) + n_seq)
    counts = np.bincount(group, minlength=G)
    singletons = bool(np.all(counts == 1))
    group_observed = batch.group_observed[g0:g1]
    time_group = batch.time_group[g0:g1]
    seq_grid = batch.time_group[g0 + sorted_group]  # (n_seq,) time grid of each sequence
    shared_grid = Phi.shape[0] == 1
    identity = lg.is_identity(C)
    # Small matrices: updating every group (the missing ones with zero gain) costs less than
    # gathering and scattering the observed ones; larger ones gather.
    zero_gain = max(d, k) <= stacked.SMALL
    covs = covs[:, g0:g1]
    work = lg.StackWork(d, k, G)
    gathered = np.empty((G, d, d))  # the covariances of the observed groups
    F_groups = None if shared_grid else np.empty((G, d, d))
    sums = np.zeros(n_seq)  # log-likelihood, sorted order
    # Each step's covariances are predicted straight into their stack of `covs` and updated
    # there (no separate copy per step); `P` is the previous step's.
    if prior_cov is None:
        covs[0] = lg.diffuse_covariance(measurement)
        m = lg.diffuse_mean(measurement, z[order, 0], covs[0, 0])
        means[0, order] = m
        first = 1
    else:
        m = np.broadcast_to(prior_mean, (n_seq, d))
        first = 0
    for step in range(first, T):
        P, new = covs[step - 1] if step else np.broadcast_to(prior_cov, (G, d, d)), covs[step]
        if shared_grid:
            lg.predict_cov(P, Phi[0, step], Qd[0, step], out=new, work=work)
            m = lg.predict_mean(m, Phi[0, step], offset[0, step])
        else:  # covariances per group, means per sequence
            np.take(Phi[:, step], time_group, axis=0, out=F_groups)
            lg.predict_cov(P, F_groups, Qd[time_group, step], out=new, work=work)
            m = lg.predict_mean(m, Phi[seq_grid, step], offset[seq_grid, step])
        P = new
        upd = group_observed[:, step]
        n_upd = int(np.count_nonzero(upd))
        if n_upd:
            every = n_upd == G
            masked = not every and zero_gain
            if every or masked:  # all groups at once; with `masked` the missing get W = 0
                update = lg.update_stack(
                    P, C, R, identity, active=upd if masked else None, work=work, out=P
                )
                rows = slice(None)
                slot = sorted_group
            else:
                index = np.flatnonzero(upd)
                sub = np.take(P, index, axis=0, out=gathered[:n_upd])
                update = lg.update_stack(sub, C, R, identity, work=work, out=sub)
                P[index] = sub
                rows = upd[sorted_group]  # sorted sequences whose group is observed
                slot = np.repeat(np.arange(n_upd), counts[upd])
            W, logdet = update.W, update.logdet
            if not singletons:  # each sequence takes its group's factors
                W, logdet = W[slot], logdet[slot]
            # Innovations of the observed sequences, whitened by their group's factor:
            # w = L^-1 e, m += W^T w (= K e with K = W^T L^-1), -1/2 (|w|^2 + log det S).
            if isinstance(order, slice):
                seen = z[order, step] if isinstance(rows, slice) else z[order, step][rows]
            else:
                seen = z[order if isinstance(rows, slice) else order[rows], step]
            e = seen - (m[rows] if identity else m[rows] @ C.T) - bias
            if masked:  # missing ones (NaN allowed in z) contribute nothing
                observed = upd[sorted_group]
                e = np.where(observed[:, None], e, 0.0)
            w = update.whiten(e, None if singletons else slot)
            correction = np.matmul(w[:, None, :], W)[:, 0]
            if every or masked:
                m = m + correction
            else:
                m = m.copy()
                m[rows] += correction
            terms = np.einsum("ni,ni->n", w, w) + logdet + k * LOG_2PI
            sums[rows] -= 0.5 * (np.where(observed, terms, 0.0) if masked else terms)
        means[step, order] = m
    loglik[order] = sums


def _grouped_filter_small(
    measurement, batch: _GroupedBatch, Phi, offset, Qd, prior_mean, prior_cov
):
    """`_grouped_filter` for small matrices (d, k <= `stacked.SMALL`) on one time grid.

    The same recursion with the group axis last: covariances (d, d, G), means (d, B), so that
    every operation runs over contiguous rows of length G or B (with the group axis first,
    numpy would loop over rows of length 2). The products with the shared ``F`` and ``C`` are
    BLAS calls; the Cholesky factor, the forward substitution and ``W^T W`` go entry by entry
    for the whole stack. Every group is updated at every step, a missing one with zero gain.

    Returns means (T, B, d), log-likelihood (B,) and covs (G, T, d, d).
    """
    C, R, bias = measurement.C, measurement.R, measurement.b
    z, group = batch.z, batch.group
    B, T, k = z.shape
    G, d = batch.group_observed.shape[0], C.shape[1]
    order = np.argsort(group, kind="stable")  # sequences sorted by group, as in _grouped_filter
    sorted_group = group[order]
    if np.array_equal(order, np.arange(B)):  # distinct masks: groups follow the sequences
        order = slice(None)
    singletons = bool(np.all(np.bincount(group, minlength=G) == 1))
    identity = lg.is_identity(C)
    means, covs = _result_array((T, B, d)), _result_array((T, G, d, d))  # as _grouped_filter
    loglik = np.zeros(B)
    if prior_cov is None:
        P0 = lg.diffuse_covariance(measurement)
        m = np.ascontiguousarray(lg.diffuse_mean(measurement, z[order, 0], P0).T)
        means[0, order], covs[0] = m.T, P0
        P, first = np.repeat(P0[:, :, None], G, axis=2), 1
    else:
        P, first = np.repeat(prior_cov[:, :, None], G, axis=2), 0
        m = np.repeat(prior_mean[:, None], B, axis=1)
    noise, bias_col, R_col = Qd[..., None], bias[:, None], R[:, :, None]
    L = np.zeros((k, k, G))
    W = np.empty((k, d, G))
    for step in range(first, T):
        F = Phi[step]
        # P- = F P F^T + Q_d: (F P)[i, j] by one product over the first axis; then F on each
        # (d, G) slice gives (F P F^T)[i, l] = sum_j F[l, j] (F P)[i, j].
        FP = (F @ P.reshape(d, d * G)).reshape(d, d, G)
        P = np.matmul(F, FP) + noise[step]
        P = 0.5 * (P + P.transpose(1, 0, 2))
        m = F @ m + offset[step][:, None]
        upd = batch.group_observed[:, step]
        if np.any(upd):
            every = bool(np.all(upd))
            if identity:
                CP, S = P, P + R_col
            else:
                CP = (C @ P.reshape(d, d * G)).reshape(k, d, G)
                S = np.matmul(C, CP) + R_col  # S[i, j] = sum_b C[j, b] (C P)[i, b]
            for j in range(k):  # Cholesky factor of each S, column by column
                col = S[j:, j]
                if j:
                    col = col - np.einsum("ipg,pg->ig", L[j:, :j], L[j, :j])
                if not np.all(col[0] > 0):
                    raise np.linalg.LinAlgError("innovation covariance not positive definite")
                L[j, j] = np.sqrt(col[0])
                L[j + 1 :, j] = col[1:] / L[j, j]
            for i in range(k):  # W = L^-1 C P
                row = CP[i] if i == 0 else CP[i] - np.einsum("pg,pjg->jg", L[i, :i], W[:i])
                np.divide(row, L[i, i], out=W[i])
            if not every:
                W *= upd  # missing groups: zero gain, P+ = P-
            P = P - np.einsum("pig,pjg->ijg", W, W)
            logdet = 2.0 * np.sum(np.log(np.diagonal(L)), axis=-1)
            Ls, Ws = (L, W) if singletons else (L[..., sorted_group], W[..., sorted_group])
            if not singletons:
                logdet = logdet[sorted_group]
            e = z[order, step].T - C @ m - bias_col  # (k, B)
            if not every:
                seen = upd[sorted_group]
                e = np.where(seen, e, 0.0)  # missing ones (NaN allowed in z) count nothing
            w = np.empty((k, B))
            for i in range(k):  # w = L^-1 e
                row = e[i] if i == 0 else e[i] - np.einsum("pg,pg->g", Ls[i, :i], w[:i])
                np.divide(row, Ls[i, i], out=w[i])
            m = m + np.einsum("kdg,kg->dg", Ws, w)
            terms = np.einsum("ig,ig->g", w, w) + logdet + k * LOG_2PI
            loglik -= 0.5 * (terms if every else np.where(seen, terms, 0.0))
        means[step, order] = m.T
        covs[step] = P.transpose(2, 0, 1)
    out = np.empty(B)
    out[order] = loglik
    return means, out, np.moveaxis(covs, 0, 1)


def _squeezed(result: FilterResult, squeeze: bool) -> FilterResult:
    if not squeeze:
        return result
    return result._replace(
        means=result.means[0],
        log_likelihood=result.log_likelihood[0],
        times=result.times[0],
    )


# --------------------------------------------------------------------------------------------
# Predictions, recomputed from a result
# --------------------------------------------------------------------------------------------


def _step_maps(result: FilterResult, step: int, per_sequence: bool):
    """``(F, Q_d, c)`` of one step: shared (d, d) when every group has the same time grid, else
    per group (G, .) or, with ``per_sequence``, per sequence (B, .)."""
    transition, noise, offset = result.transition, result.noise, result.offset
    if transition.shape[0] == 1 or transition.strides[0] == 0:
        return transition[0, step], noise[0, step], offset[0, step]
    rows = result.group if per_sequence else slice(None)
    return transition[rows, step], noise[rows, step], offset[rows, step]


def predicted_means(result: FilterResult) -> np.ndarray:
    """One-step predictions ``m-_k = F_k m_{k-1} + c_k`` of a `FilterResult`: (B, T, d), or (T, d)
    for an unbatched result; step 0 is the prior carried to the first state time (NaN for a
    diffuse prior). `FilterResult.pred_means` is this function."""
    squeeze = result.means.ndim == 2
    means = result.means[None] if squeeze else result.means
    B, T, d = means.shape
    out = np.empty((B, T, d))
    for step in range(T):
        F, _, c = _step_maps(result, step, per_sequence=True)
        if step:
            out[:, step] = lg.predict_mean(means[:, step - 1], F, c)
        elif result.prior_mean is None:
            out[:, 0] = np.nan
        else:
            out[:, 0] = lg.predict_mean(np.broadcast_to(result.prior_mean, (B, d)), F, c)
    return out[0] if squeeze else out


def predicted_covs(result: FilterResult) -> np.ndarray:
    """Covariances ``P-_k = F_k P_{k-1} F_k^T + Q_d`` of the one-step predictions of a
    `FilterResult`, (G, T, d, d); NaN at step 0 for a diffuse prior. `FilterResult.pred_covs`
    is this function; the arithmetic is the filter's (`linear_gaussian.predict_cov`)."""
    covs = result.covs
    out = np.empty_like(covs)  # the same layout (the filter's store is time-major)
    for step in range(covs.shape[1]):
        F, Q, _ = _step_maps(result, step, per_sequence=False)
        if step:
            out[:, step] = lg.predict_cov(covs[:, step - 1], F, Q)
        elif result.prior_cov is None:
            out[:, 0] = np.nan
        else:
            out[:, 0] = lg.predict_cov(result.prior_cov, F, Q)
    return out


# --------------------------------------------------------------------------------------------
# Smoother
# --------------------------------------------------------------------------------------------


@batch_input.guard
def rts_smoother(filtered: FilterResult) -> SmootherResult:
    """Rauch-Tung-Striebel smoother from a `FilterResult` (batched or not).

    Backward pass ``J_k = P_k F_{k+1}^T (P-_{k+1})^-1``, ``m^s_k = m_k + J_k (m^s_{k+1} -
    m-_{k+1})``, ``P^s_k = P_k + J_k (P^s_{k+1} - P-_{k+1}) J_k^T``, with ``F_{k+1}`` the exact
    transition over the step from k to k+1. The predictions ``m-_{k+1}``, ``P-_{k+1}`` are
    recomputed step by step from the filtered moments (as `predicted_means` and
    `predicted_covs` do), so the pass holds one step of them at a time.

    Returns
    -------
    SmootherResult with means (B, T, d) (or (T, d)), covs (G, T, d, d) and group (B,).
    """
    batch_input.filter_result("filtered", filtered)
    squeeze = filtered.means.ndim == 2
    means = filtered.means[None] if squeeze else filtered.means
    covs, group = filtered.covs, filtered.group
    m = np.moveaxis(means, 1, 0)  # (T, B, d)
    T = m.shape[0]
    s_means, s_covs = m.copy(), covs.copy(order="K")  # keeps the time-major store
    for step in range(T - 2, -1, -1):
        F, Q, _ = _step_maps(filtered, step + 1, per_sequence=False)
        F_seq, _, c_seq = _step_maps(filtered, step + 1, per_sequence=True)
        P = covs[:, step]
        pred_cov = lg.predict_cov(P, F, Q)
        pred_mean = lg.predict_mean(m[step], F_seq, c_seq)
        # J = P F^T (P-)^-1 (P- symmetric), (G, d, d)
        J = transpose(np.linalg.solve(pred_cov, np.broadcast_to(F, P.shape) @ P))
        gap = s_means[step + 1] - pred_mean
        if J.shape[0] == 1:
            s_means[step] = m[step] + gap @ J[0].T
        else:
            s_means[step] = m[step] + np.einsum("bij,bj->bi", J[group], gap)
        s_covs[:, step] = sym(P + J @ (s_covs[:, step + 1] - pred_cov) @ transpose(J))
    out = np.moveaxis(s_means, 0, 1)
    return SmootherResult(out[0] if squeeze else out, s_covs, group)

"""KLA's filter as a chunked scan for the CPU (seed 001, Thms 1-2, Cor. 2.2; ``method="chunked"``).

The sequence of T tokens is cut into L = T // C chunks of C tokens (the last ``T - L C`` tokens
are a tail, filtered by pass 3 as one short chunk after the others). Position c of every chunk
is one strided slice ``(B, L, *S)`` of the token arrays, so each pass below is a loop over the
C positions whose every torch op covers all L chunks at once, on slices small enough to stay in
the cache; no pass sweeps the whole sequence through memory more than once (the outputs are
written slice by slice, in place).

With ``phi_t = k_t^2 Lambda^v_t`` and ``b_t = k_t Lambda^v_t v_t`` the filter step (eqs.
(18)-(19)) is linear on homogeneous coordinates ``(x, y, z)`` with ``lam = x / y``,
``eta = z / y``::

    y' = a_bar^2 y + p_bar x,      x' = x + phi_t y',      z' = a_bar z + b_t y',

the 3x3 matrix ``[[1 + p_bar phi, a_bar^2 phi, 0], [p_bar, a_bar^2, 0], [p_bar b, a_bar^2 b,
a_bar]]`` whose top-left block is Thm 1's Moebius matrix ``M_t`` (Cor. 1.1) and whose last row
carries the information mean (Thm 2, eq. (19)).

1. Summaries: one loop over c applies that step to the columns of every chunk's product (started
   at the identity), divided by the sum of its 2x2 block every ``K`` steps (the map is unchanged;
   ``K`` is bounded from the inputs' magnitudes so that no entry over- or underflows in between).
2. Carries: a loop over the L chunks applies each product to the belief ``(1, var, mu)`` entering
   it (``x = 1``: ``y = 1 / lam``, ``z = eta / lam = mu``), giving every chunk's incoming belief.
3. Filter: a second loop over c runs the step in moment form (Cor. 2.2, eq. (20)) from those
   beliefs, ``P = a_bar^2 var + p_bar``, ``lam = 1 / P + phi``, ``var = 1 / lam``,
   ``mu = a_bar mu + var (b - a_bar phi mu)`` (= ``g mu + u`` with ``g = a_bar (1 - phi var)``,
   ``u = b var``), writing the four readouts of each slice in place.

Work: 17 small ops per position over ``(B, L, *S)`` slices (7 in pass 1, stacked over two
columns where it can, plus a normalisation every K; 10 in pass 3) and 3 per chunk, so
``~17 C + 3 T / C`` torch calls against the token loop's ``~6 T``; every element of an output is
written once and the inputs are read twice. Forward only: the buffers are written in place, so
autograd cannot differentiate it (`chunked_filter` raises).

Shapes: ``k``, ``lam_v``, ``v`` as `kernels.ops.kla.params.prepare` returns them (broadcasting to
the token shape ``(B, T, *S)``, not expanded), ``a_bar``, ``p_bar`` expanded views of the token
shape, ``lam0``, ``eta0`` of ``(B, *S)``. Stride-0 (broadcast) axes are kept compact throughout,
so a time-invariant prior costs no token-sized array.
"""

from __future__ import annotations

import math

import torch


def chunk_length(steps: int) -> int:
    """The default chunk length ``C = ceil(sqrt(T))`` for T = ``steps`` tokens (``1 <= C <= T``).

    It balances the ~17 ops per position (passes 1 and 3) against the 3 per chunk (pass 2).
    Measured on the quiet 2-core machine (the bench_scan workload, width ``B |S| = 256``, 2
    threads, interleaved best of 7): at T = 2^16, C = 256 took 212-236 ms, against 400-424 ms
    for C = 1025 and 340-360 ms for C = 512, which keep pass 1's slices small enough for torch
    to run them on one thread. An earlier rule raised C to that size because, on a heavily
    loaded machine, the intra-op threads made those slices 2-4x slower.
    """
    return math.isqrt(steps - 1) + 1 if steps > 1 else 1


def chunked_filter(k, lam_v, v, a_bar, p_bar, lam0, eta0, shape, *, chunk: int | None = None):
    """Precision, information mean, mean and variance ``(B, T, *S)`` of KLA's filter, chunked.

    See the module docstring for the three passes. ``chunk`` is C (default `chunk_length`);
    ``shape`` the token shape ``(B, T, *S)``.

    Returns
    -------
    (precision, info_mean, mean, variance), new contiguous tensors of the token shape in ``k``'s
    dtype.

    Raises
    ------
    RuntimeError when gradients are required of any input (the passes write in place; use
    ``method="parallel"`` or ``"sequential"`` to differentiate); ValueError for ``chunk < 1``.
    """
    inputs = (k, lam_v, v, a_bar, p_bar, lam0, eta0)
    if torch.is_grad_enabled() and any(x.requires_grad for x in inputs):
        raise RuntimeError(
            "method='chunked' is forward-only (it writes its buffers in place): call it under "
            "torch.no_grad() or use method='parallel' or 'sequential' for gradients"
        )
    steps = shape[1]
    chunk = chunk_length(steps) if chunk is None else chunk
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer, found {chunk!r}")
    chunk = min(chunk, steps)
    rank = len(shape)
    k, lam_v, v, a_bar, p_bar = (_compact(x, rank) for x in (k, lam_v, v, a_bar, p_bar))
    # phi = k^2 lam_v and b = k (lam_v v): one product per position from these compact factors
    inputs = (k * k, lam_v, k, lam_v * v, a_bar, a_bar * a_bar, p_bar)
    outs = tuple(torch.empty(shape, dtype=k.dtype, device=k.device) for _ in range(4))
    var = (1.0 / lam0).unsqueeze(1)  # (B, 1, *S): the belief before the first token
    mu = (eta0 / lam0).unsqueeze(1)
    chunks = steps // chunk
    if chunks > 1:
        every = _normalise_every(k, lam_v, v, a_bar, p_bar, chunk)
        slices = (shape[0], chunks, *shape[2:])  # one position of every chunk
        summaries = _summaries(_Positions(inputs, 0, chunks, chunk), slices, every)
        var, mu = _carries(summaries, var, mu)
    if chunks > 0:
        tokens, views = (_Positions(x, 0, chunks, chunk) for x in (inputs, outs))
        var, mu = _filter(tokens, views, var, mu)
    tail = steps - chunks * chunk  # run by the step from the last chunk's final belief
    if tail:
        tokens, views = (_Positions(x, chunks * chunk, 1, tail) for x in (inputs, outs))
        _filter(tokens, views, var[:, -1:], mu[:, -1:])
    return outs


def _compact(x: torch.Tensor, rank: int) -> torch.Tensor:
    """``x`` with ``rank`` axes, every broadcast (stride-0) axis of size 1: a view, no copy."""
    x = x.reshape((1,) * (rank - x.dim()) + tuple(x.shape)) if x.dim() < rank else x
    size = [1 if st == 0 else n for n, st in zip(x.shape, x.stride(), strict=True)]
    return x.as_strided(size, x.stride())


class _Positions:
    """Position c of every chunk of each tensor: ``self[c]`` is a tuple of ``(B, L, *S)``
    slices (tokens ``start + l C + c``), or the tensor itself where its token axis has size 1."""

    def __init__(self, tensors, start: int, chunks: int, chunk: int):
        self.chunk, self.chunks = chunk, chunks
        self.positions = [
            x.narrow(1, start, chunks * chunk).unflatten(1, (chunks, chunk)).unbind(2)
            if x.shape[1] > 1
            else (x,) * chunk
            for x in tensors
        ]

    def __getitem__(self, c: int) -> tuple:
        return tuple(x[c] for x in self.positions)


def _normalise_every(k, lam_v, v, a_bar, p_bar, chunk: int) -> int:
    """Steps K between normalisations of pass 1, from bounds on the inputs' magnitudes.

    A column ``(x, y, z)`` (x, y >= 0) of a product has ``n = x + y + |z|`` grow by at most
    ``g = max(1, a_bar) + (1 + phi + |b|) max(a_bar^2, p_bar)`` per step, and its 2x2 block's sum
    (1 after a normalisation) shrinks by at most ``a_bar^2`` per step (x never decreases); so K
    steps stay within ``[min(1, a_min^(2K)), g^K]``, kept inside ``1e(+-)30`` in float32
    (``1e(+-)300`` in float64).
    """
    if chunk == 1:
        return 1
    k_max, lv_max, v_max = (float(x.abs().amax()) for x in (k, lam_v, v))
    a_min, a_max, p_max = float(a_bar.amin()), float(a_bar.amax()), float(p_bar.amax())
    growth = max(1.0, a_max) + (1.0 + k_max * k_max * lv_max + k_max * lv_max * v_max) * max(
        a_max * a_max, p_max
    )
    limit = 300.0 if k.dtype == torch.float64 else 30.0  # decades of headroom each way
    if not (math.isfinite(growth) and a_min > 0):
        return 1
    steps = limit * math.log(10) / max(math.log(growth), 2 * -math.log(min(a_min, 1.0)), 1e-300)
    return int(max(1, min(chunk, steps)))


def _summaries(tokens: _Positions, slices: tuple, every: int):
    """Pass 1: each chunk's product, as ``(H, w)``: ``H`` (3, 2, *slices) holds the x, y, z
    rows of the columns fed by x and by y; ``w`` (``slices = (B, L, *S)``) the z-entry of the
    column fed by z."""
    like = tokens[0][0]
    products = torch.zeros((3, 2, *slices), dtype=like.dtype, device=like.device)
    products[0, 0] = 1.0  # the identity: x from x, y from y
    products[1, 1] = 1.0
    w = torch.ones(slices, dtype=like.dtype, device=like.device)
    x, y, z = products
    timed = tokens.positions[4][0] is not tokens.positions[4][-1]  # a_bar varies along T
    since = 0  # steps since w last absorbed a time-invariant a_bar
    for c in range(tokens.chunk):
        k2, lam_v, k, lam_v_v, a_bar, a2, p_bar = tokens[c]
        y.mul_(a2).addcmul_(x, p_bar)
        x.addcmul_(y, k2 * lam_v)
        z.mul_(a_bar).addcmul_(y, k * lam_v_v)
        since += 1
        if timed or (c + 1) % every == 0 or c + 1 == tokens.chunk:
            w.mul_(a_bar if timed else a_bar.pow(since))
            since = 0
        if (c + 1) % every == 0 or c + 1 == tokens.chunk:
            scale = torch.add(x[0], x[1]).add_(y[0]).add_(y[1])  # one slice at a time: serial
            for row in (x, y, z, w):
                row.div_(scale)
    return products, w


def _carries(summaries, var, mu):
    """Pass 2: the belief ``(var, mu)`` entering each chunk, (B, L, *S), from the one before the
    first token (B, 1, *S): ``(x, y, z) = H (1, var, mu)``, then ``var = y / x``, ``mu = z / x``."""
    products, w = summaries
    chunks = w.shape[1]
    # chunk-major copies (7 numbers per chunk and channel) so that each step reads whole rows
    from_x, from_y = (products[:, i].movedim(2, 0).contiguous().unbind(0) for i in (0, 1))
    w = w.movedim(1, 0).unbind(0)
    beliefs = torch.empty((chunks, 2, *var[:, 0].shape), dtype=var.dtype, device=var.device)
    beliefs[0, 0], beliefs[0, 1] = var[:, 0], mu[:, 0]
    pairs, variances, means = beliefs.unbind(0), beliefs[:, 0].unbind(0), beliefs[:, 1].unbind(0)
    for j in range(chunks - 1):
        xyz = torch.addcmul(from_x[j], from_y[j], variances[j])  # (3, B, *S)
        xyz[2].addcmul_(w[j], means[j])
        torch.div(xyz[1:], xyz[0], out=pairs[j + 1])
    return beliefs[:, 0].movedim(0, 1), beliefs[:, 1].movedim(0, 1)


def _filter(tokens: _Positions, views: _Positions, var, mu):
    """Pass 3: the filter in moment form (eq. (20)) from each chunk's incoming belief ``(var,
    mu)``, one position of all chunks at a time, writing the readouts into ``views`` in place;
    returns the belief after each chunk's last token."""
    for c in range(tokens.chunk):
        k2, lam_v, k, lam_v_v, a_bar, a2, p_bar = tokens[c]
        precision, info_mean, mean, variance = views[c]
        phi = k2 * lam_v
        prior = torch.addcmul(p_bar, a2, var)  # P = a_bar^2 var + p_bar
        torch.reciprocal(prior, out=precision).add_(phi)  # lam = 1 / P + phi
        torch.reciprocal(precision, out=variance)
        decayed = a_bar * mu  # mu = a_bar mu + var (b - phi a_bar mu)
        innovation = torch.addcmul(k * lam_v_v, phi, decayed, value=-1.0)
        torch.addcmul(decayed, variance, innovation, out=mean)
        torch.mul(precision, mean, out=info_mean)
        var, mu = variance, mean
    return var, mu

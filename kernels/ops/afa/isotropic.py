"""Isotropic AFA, factorised (seed 000 3.3-3.9, Algorithm 1 of 4.1): ``O(T^2 + T D)`` memory.

One decay ``a``, process variance ``sigma^2`` and measurement variance ``eta^2`` per head
(``A = -a I + Omega``), so the precision ``P(tau) = 1 / V(tau)`` (`kernels.ops.afa.precision`)
and the decay ``E(tau) = e^{-a tau}`` are ``(T, T)`` matrices. With ``Zq~_i = e^{-i w t_i} Zq_i``
(and the same for keys and values; seed 000 3.6, the one rotation of
`kernels.ops.common.rotation`) the squared residual factorises into one matmul::

    |R[i, j]|^2 = |Zq_i|^2 + E_ij^2 |Zk_j|^2 - 2 E_ij Re(Zq~_i^H Zk~_j),
    L[i, j] = log P_v(tau_ij) - temperature * log(1 + P_qk(tau_ij) |R[i, j]|^2 / nu),
    A = softmax_j(L) over visible keys,   A_hat = E_v * A,
    Zbar_i = e^{i w_v t_i} sum_j A_hat[i, j] Zv~_j.

On a uniform grid (``t = None``, or stamps exactly ``t_0 + i h``) every kernel is Toeplitz
(3.3): it is evaluated once per call on the ``2T - 1`` lags. Queries are processed in blocks of
``block_size`` (causal blocks stop at their last query), so at most ``(B, H, block_size, T)``
scores exist at a time. There is no data-dependent control flow while compiling
(``torch.compile`` traces it); in eager mode given stamps are tested for uniformity, and the
bounded inference path, `_attend_bounded`, may fall back to the exact one. The fused kernel
(`kernels.ops.afa.triton`) computes the same without forming the scores.

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``; output ``(B, H, T, Dv)``, weights
``(B, H, T, T)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels.ops.afa import params
from kernels.ops.afa.params import AFAOutput, HeadDynamics
from kernels.ops.afa.precision import log_variance
from kernels.ops.common import complex_pairs
from kernels.ops.common.attention import (
    add_bounded_chunk,
    bounded_output,
    bounded_weights_,
    merge_chunk,
    running_peak,
    tile_scores,
)
from kernels.ops.common.params import Dynamics, Robust
from kernels.ops.common.rotation import Rotation


def isotropic_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t,
    dynamics: Dynamics,
    robust: Robust,
    causal: bool,
    normalized_qk: bool,
    return_weights: bool,
    bias_qk,
    bias_v,
    block_size: int | None,
) -> AFAOutput:
    """The torch isotropic form (module docstring); arguments as `kernels.ops.afa.isotropic_afa`."""
    p = params.prepare(q, k, v, dynamics, robust, per_feature=False, like=q)
    params.check_block_size(block_size)
    block = max(p.steps, 1) if block_size is None else block_size
    b_qk = params.bias("bias_qk", bias_qk, p.heads, q.shape[-1], q)
    b_v = params.bias("bias_v", bias_v, p.heads, v.shape[-1], v)
    temperature = p.temperature.view(1, p.heads, 1, 1)
    options = {"causal": causal, "shared": p.shared_variance, "normalized": normalized_qk}
    positions = params.positions(t, p.steps, q)
    spacing = 1.0 if t is None else params.uniform_spacing(positions)
    if spacing is not None:
        kernels = _ToeplitzKernels(p.steps, q, p.qk, p.vd, p.nu, spacing=spacing, **options)
    else:
        kernels = _IrregularKernels(positions, p.qk, p.vd, p.nu, **options)

    if b_qk is not None:
        q, k = q + b_qk, k + b_qk
    if b_v is not None:
        v = v + b_v
    if normalized_qk:
        q, k = params.unit(q), params.unit(k)
    phase_qk = _phase(positions, p.qk.frequencies)
    phase_v = phase_qk if p.shared_rotation else _phase(positions, p.vd.frequencies)
    q_t, k_t, v_t = _unrotate(q, phase_qk), _unrotate(k, phase_qk), _unrotate(v, phase_v)
    qn = kn = None
    if p.nu is not None and not normalized_qk:
        qn = complex_pairs.squared_modulus_untracked(q).unsqueeze(-1)
        kn = complex_pairs.squared_modulus_untracked(k).unsqueeze(-2)

    output, weights = _attend_blocks(
        kernels,
        q_t,
        k_t,
        v_t,
        qn,
        kn,
        temperature,
        causal=causal,
        block=block,
        want_weights=return_weights,
    )
    if phase_v is not None:
        output = phase_v.apply_(output)  # in place where no graph records it (a new tensor)
    if b_v is not None:
        output = output - b_v
    return AFAOutput(output, weights)


def _phase(positions, frequencies) -> Rotation | None:
    """``e^{i w_k t_i}``, ``t`` measured from the sequence's first stamp (`params.positions`).

    ``(Bt, 1, T)`` positions, ``(H, n)`` frequencies -> ``(Bt, H, T, 2n)`` factors.
    """
    return None if frequencies is None else Rotation.at(positions, frequencies)


def _unrotate(x, phase: Rotation | None):
    """``e^{-i w t} x`` (into the rotating frame); identity without a phase."""
    return x if phase is None else phase.apply(x, sign=-1)


# log2(e): the bounded in-place path exponentiates in base 2 (`_attend_bounded`)
_LOG2E = 1.0 / math.log(2.0)
# Keys per tile when a block's keys are taken in chunks (a multiple of the block): tiles are at
# most (B, H, block, width), so long sequences reuse allocations of a few sizes instead of
# growing a (B, H, block, j1) tile with every causal block (which fragmented the heap at
# T = 65536: RELIABILITY.md). Autograd (training) path: chunks only beyond 4096 keys.
_KEY_CHUNK = 4096
# In-place (no-autograd) causal path: every block is taken in chunks of this many keys, so a
# (B, H, 64, 256) float32 tile (512 KiB at B H = 8) and its in-place passes stay in cache (issue
# 19: with whole rows the passes streamed 8 MiB tiles from memory at T = 4096).
_INFERENCE_KEY_CHUNK = 512
# ... and queries in groups of up to this many rows (whole blocks, and never more scores than
# the documented ``block x T``): fewer, larger tiles, so less per-op overhead (issue 19).
_INFERENCE_ROWS = 128


def _chunk_width(block: int, chunk: int) -> int:
    """Keys per chunk: ``chunk`` rounded down to a multiple of ``block`` (at least ``block``)."""
    return max(block, chunk // block * block)


def _attend_blocks(kernels, q, k, v, qn, kn, temperature, *, causal, block, want_weights):
    """Run `_attend` over blocks of ``block`` queries; causal blocks stop at their last query.

    A block whose keys exceed `_KEY_CHUNK` (and no weights asked for) runs over key chunks of
    that width with an online softmax (`_attend_chunked`). Without autograd (no tensor needs a
    gradient, or grad mode off) a causal call without weights takes every block in chunks of
    `_INFERENCE_KEY_CHUNK` keys, computed in place (`_attend_chunked_inplace`; the same sums
    in another order). Returns ``(output (B, H, T, Dv), weights (B, H, T, T) or None)``.
    """
    batch, heads, steps, _ = q.shape
    flip = kernels.reversed_keys
    if flip:  # keys [j0, j1) in reverse order are then [T - j1, T - j0) of the reversed sequence
        k, v = k.flip(-2), v.flip(-2)
        kn = None if kn is None else kn.flip(-1)

    def keys(x, dim, j0, j1):
        return x.narrow(dim, steps - j1 if flip else j0, j1 - j0)

    def operands(i0, i1, j0, j1):
        return (
            kernels.tile(i0, i1, j0, j1),
            q[..., i0:i1, :],
            keys(k, -2, j0, j1),
            keys(v, -2, j0, j1),
            None if qn is None else qn[..., i0:i1, :],
            None if kn is None else keys(kn, -1, j0, j1),
        )

    inplace = causal and not want_weights and not _needs_grad(kernels, q, k, v, temperature)
    # uniform grid in eager mode: the row maximum is replaced by the prior's (`_attend_bounded`;
    # its fallback is data-dependent control flow, so not while compiling)
    bounded = inplace and kernels.reversed_keys and not torch.compiler.is_compiling()
    rational = bounded and bool((temperature == 1).all())
    width = _chunk_width(block, _INFERENCE_KEY_CHUNK if inplace else _KEY_CHUNK)
    rows = block
    workspace = None
    if inplace:  # scores -Re(Zq~^H Zk~) come out of the matmul with the sign `u` needs
        k = k.neg_() if flip else -k  # (the flipped keys are this call's own copy)
        # whole blocks per group, with rows x width <= block x T scores per tile
        rows = block * max(1, min(_INFERENCE_ROWS // block, steps // width))
        if bounded:  # one score tile for the whole call (`tile_scores`)
            workspace = q.new_empty(batch * heads * min(rows, steps) * min(width, steps))
    outputs, weights = [], []
    for i0 in range(0, steps, rows):
        i1 = min(i0 + rows, steps)
        j1 = i1 if causal else steps
        if inplace:
            spans = [(i0, i1, j0, min(j0 + width, j1)) for j0 in range(0, j1, width)]
            chunks = [operands(*span) for span in spans]
            out = None
            if bounded:
                priors = kernels.bounded_priors(spans, rational=rational)
                out = _attend_bounded(
                    chunks, priors, -_LOG2E * temperature, rational=rational, workspace=workspace
                )
            outputs.append(_attend_chunked_inplace(chunks, -temperature) if out is None else out)
            continue
        if j1 > width and not want_weights:
            chunks = [operands(i0, i1, j0, min(j0 + width, steps)) for j0 in range(0, j1, width)]
            outputs.append(_attend_chunked(chunks, temperature, causal=causal))
            continue
        out, attn = _attend(
            *operands(i0, i1, 0, j1), temperature, causal=causal, want_weights=want_weights
        )
        outputs.append(out)
        if want_weights:
            attn = attn.flip(-1) if flip else attn
            attn = torch.nn.functional.pad(attn, (0, steps - j1))
            weights.append(attn.expand(batch, heads, i1 - i0, steps))
    return torch.cat(outputs, dim=2), torch.cat(weights, dim=2) if want_weights else None


def _needs_grad(kernels, *tensors) -> bool:
    """Whether autograd records this call: grad mode on and some input or parameter needs a
    gradient (then the out-of-place path runs, since in-place passes would break backward)."""
    if not torch.is_grad_enabled():
        return False
    tensors = (*tensors, *kernels.parameters())
    return any(isinstance(x, torch.Tensor) and x.requires_grad for x in tensors)


class _PairKernels(NamedTuple):
    """Lag kernels of the isotropic form on a set of (i, j) pairs (zero / -inf where masked).

    log_prior : ``log P_v(tau)``, -inf on masked pairs.
    value_decay : causal: ``E_v = e^{-a_v tau}``; non-causal: ``log E_v = -a_v tau`` (it grows
        for ``tau < 0`` and is combined with the weights in log space).
    query, key, cross : ``P_qk / nu``, ``P_qk E^2 / nu``, ``2 P_qk E / nu`` (None for
        ``nu = inf``); with normalized queries/keys ``query`` holds ``(P_qk + P_qk E^2) / nu``
        and ``key`` is None.
    """

    log_prior: torch.Tensor
    value_decay: torch.Tensor
    query: torch.Tensor | None
    key: torch.Tensor | None
    cross: torch.Tensor | None


def _flush(factor: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """``factor`` with entries whose decay exponent ``a tau`` exceeds ``2 log(1 / eps)`` set to 0.

    Such entries carry a factor ``e^{-a tau} < eps^2``: their terms are below the rounding of
    the zero-lag ones, and as subnormal numbers they would slow every later product 10-50x.
    """
    limit = -2.0 * math.log(torch.finfo(factor.dtype).eps)
    return torch.where(exponent > limit, torch.zeros((), dtype=factor.dtype), factor)


def _pair_kernels(
    lag, qk: HeadDynamics, vd: HeadDynamics, nu, *, causal: bool, shared: bool, normalized: bool
) -> _PairKernels:
    """Evaluate the lag kernels on ``lag``; the parameters broadcast against it."""
    visible = lag >= 0
    if causal:
        lag = torch.clamp(lag, min=0.0)  # masked pairs: keep every exponential finite
    log_var_v = log_variance(lag, vd.decay, vd.process_var, vd.measurement_var)
    log_prior = -log_var_v
    exponent_v = vd.decay * lag
    if causal:
        log_prior = log_prior.masked_fill(~visible, -math.inf)
        value_decay = _flush(torch.exp(-exponent_v), exponent_v).masked_fill(~visible, 0.0)
    else:
        value_decay = -exponent_v
    if nu is None:
        return _PairKernels(log_prior, value_decay, None, None, None)
    log_var = (
        log_var_v if shared else log_variance(lag, qk.decay, qk.process_var, qk.measurement_var)
    )
    log_p = -torch.log(nu) - log_var  # log(P_qk / nu)
    exponent = qk.decay * lag
    coefficients = [
        torch.exp(log_p),
        _flush(torch.exp(log_p - 2 * exponent), 2 * exponent),
        _flush(2 * torch.exp(log_p - exponent), exponent),
    ]
    if causal:
        coefficients = [c.masked_fill(~visible, 0.0) for c in coefficients]
    query, key, cross = coefficients
    if normalized:
        return _PairKernels(log_prior, value_decay, query + key, None, cross)
    return _PairKernels(log_prior, value_decay, query, key, cross)


class _ToeplitzKernels:
    """Uniform grid ``t_i = i h`` (seed 000 3.3; ``h = 1`` for ``t = None``, else the stamps'
    exact spacing, `params.uniform_spacing`): every kernel depends on ``i - j`` only.

    The kernels are evaluated once per call on the ``2T - 1`` lags ``tau = h (m - (T - 1))``. With
    the keys of a block taken in *reverse* order (``j = j1 - 1 - r``) a tile reads them as the
    Hankel window ``x[T - j1 + i + r]``: a strided view, no copy or gather.
    """

    reversed_keys = True

    def __init__(self, steps: int, like, qk, vd, nu, *, spacing: float = 1.0, **options):
        lag = spacing * torch.arange(1 - steps, steps, dtype=like.dtype, device=like.device)

        def heads(x):
            return None if x is None else x.view(-1, 1)

        self.vectors = _pair_kernels(
            lag, HeadDynamics(*map(heads, qk)), HeadDynamics(*map(heads, vd)), heads(nu), **options
        )
        self.steps = steps
        self._peaks = None  # `bounded_priors`' prefix maxima of log P_v, on first use

    def parameters(self) -> tuple:
        """The per-call tensors the tiles are read from (for `_needs_grad`)."""
        return tuple(self.vectors)

    def tile(self, i0: int, i1: int, j0: int, j1: int) -> _PairKernels:
        """Queries ``[i0, i1)`` against keys ``[j0, j1)`` read in reverse (``j = j1 - 1 - r``):
        the lag index ``i - j + T - 1`` is then ``(T - j1 + i) + r``."""
        # slice before unfolding, so autograd's backward of the window touches only the
        # (i1 - i0) + width - 1 lags this tile reads, not every window of the vector
        return _PairKernels(
            *(
                None if x is None else _lag_window(self._lags(x, i0, i1, j0, j1), i1 - i0, j1 - j0)
                for x in self.vectors
            )
        )

    def bounded_priors(self, spans, *, rational: bool) -> list[torch.Tensor]:
        """The prior relative to its bound for the chunks ``spans = [(i0, i1, j0, j1), ...]``
        of one causal group of queries ``[i0, i1)`` (`_attend_bounded`), as the ``(1, H, rows,
        width)`` windows `tile` reads: ``e^{log P_v - c} = P_v / e^c`` with ``rational``, else
        ``(log P_v - c) log2(e)`` (base 2), where ``c = max log P_v`` over the lags ``0 .. i1 -
        1`` the group sees (a prefix maximum, ``(H, T)``, formed once per call)."""
        if self._peaks is None:
            self._peaks = torch.cummax(self.vectors.log_prior[:, self.steps - 1 :], dim=-1)[0]
        i1 = spans[0][1]
        shifted = self.vectors.log_prior - self._peaks[:, i1 - 1 : i1]  # (H, 2T - 1), <= 0
        shifted = shifted.exp_() if rational else shifted.mul_(_LOG2E)
        return [
            _lag_window(self._lags(shifted, *span), span[1] - span[0], span[3] - span[2])
            for span in spans
        ]

    def _lags(self, x, i0, i1, j0, j1):
        first = self.steps - j1 + i0
        return x[:, first : first + (i1 - i0) + (j1 - j0) - 1]


def _lag_window(lags: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """``(H, rows + width - 1)`` lag values -> the ``(1, H, rows, width)`` Hankel view
    ``lags[h, a + r]`` (a window view, no copy)."""
    return lags.unfold(-1, width, 1).unsqueeze(0)


class _IrregularKernels:
    """Arbitrary time stamps: the kernels are evaluated on each block's lags."""

    reversed_keys = False

    def __init__(self, times, qk, vd, nu, **options):
        def heads(x):
            return None if x is None else x.view(-1, 1, 1)

        self.times = times  # (Bt, 1, T)
        self.qk = HeadDynamics(*map(heads, qk))
        self.vd = HeadDynamics(*map(heads, vd))
        self.nu = heads(nu)
        self.options = options

    def parameters(self) -> tuple:
        """The per-head tensors the tiles are evaluated from (for `_needs_grad`)."""
        return (self.times, *self.qk, *self.vd, self.nu)

    def tile(self, i0: int, i1: int, j0: int, j1: int) -> _PairKernels:
        """Queries ``[i0, i1)`` against keys ``[j0, j1)``."""
        lag = self.times[..., i0:i1].unsqueeze(-1) - self.times[..., j0:j1].unsqueeze(-2)
        return _pair_kernels(lag, self.qk, self.vd, self.nu, **self.options)


def _logits(tile: _PairKernels, q, k, qn, kn, temperature):
    """``L = log P_v - temperature log(1 + P_qk |R|^2 / nu)`` on one tile, with the factorised
    residual ``P_qk |R|^2 / nu = query |Zq_i|^2 + key |Zk_j|^2 - cross Re(Zq~_i^H Zk~_j)``."""
    logits = tile.log_prior
    if tile.query is not None:
        s = tile.query if qn is None else tile.query * qn
        if tile.key is not None:
            s = torch.addcmul(s, tile.key, kn)
        s = torch.addcmul(s, tile.cross, complex_pairs.real_inner(q, k), value=-1.0)
        # |R|^2 >= 0: a negative value is round-off of the cancelling expansion; clamp it.
        s = torch.clamp(s, min=0.0)
        logits = torch.addcmul(logits, temperature, torch.log1p(s), value=-1.0)
    return logits


def _attend(tile: _PairKernels, q, k, v, qn, kn, temperature, *, causal: bool, want_weights: bool):
    """One block of queries: logits (`_logits`), softmax over the keys, value decay, weighted
    values: ``A = softmax_j(L)``, ``A_hat = E_v * A``; returns ``(A_hat Zv~, A or None)``."""
    logits = _logits(tile, q, k, qn, kn, temperature)
    if causal:
        attn = torch.softmax(logits, dim=-1)
        return (attn * tile.value_decay) @ v, attn if want_weights else None
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    out = torch.exp(logits + tile.value_decay - lse) @ v
    return out, torch.exp(logits - lse) if want_weights else None


def _attend_chunked(chunks, temperature, *, causal: bool):
    """`_attend`'s output over key chunks ``(tile, q, k, v, qn, kn)`` with an online softmax.

    With the running maximum ``m`` of the logits, ``s = sum_j e^{L_j - m}`` and ``acc = sum_j
    e^{L_j - m} E_v,j Zv~_j`` (non-causal: ``e^{L_j + log E_v,j - m}``), rescaled by
    ``e^{m_old - m_new}`` when a chunk raises the maximum; the output is ``acc / s``, the same
    sum as `_attend` in another order. The first chunk holds key 0, which every query sees, so
    ``m`` is finite from the first chunk on (a later chunk may be masked entirely for a row).
    """
    peak = total = acc = None
    for tile, q, k, v, qn, kn in chunks:
        logits = _logits(tile, q, k, qn, kn, temperature)
        new_peak = running_peak(peak, logits)
        weights = torch.exp(logits - new_peak)
        if causal:
            values = (weights * tile.value_decay) @ v
        else:
            values = torch.exp(logits + tile.value_decay - new_peak) @ v
        weight_sum = weights.sum(dim=-1, keepdim=True)
        total, acc = merge_chunk(peak, new_peak, total, acc, weight_sum, values)
        peak = new_peak
    return acc / total


def _one_plus_u_(x: torch.Tensor, tile: _PairKernels, qn, kn) -> torch.Tensor:
    """In place on the scores ``x = -Re(Zq~_i^H Zk~_j)``: ``1 + u = 1 + cross x + key |Zk_j|^2
    + query |Zq_i|^2`` (``u = P_qk |R|^2 / nu``; with normalised inputs ``query`` holds both
    squared-modulus terms), three fused multiply-adds on the tile."""
    x = torch.addcmul(x.new_ones(()), x, tile.cross, out=x)  # the 1 folded in
    if tile.key is not None:
        x.addcmul_(tile.key, kn)
    if qn is None:
        x.add_(tile.query)
    else:
        x.addcmul_(tile.query, qn)
    return x


def _attend_chunked_inplace(chunks, neg_temperature):
    """`_attend_chunked` for causal calls without autograd, in place on one tile per chunk.

    The chunks' keys are negated (``-Zk~``), so the matmul gives ``-Re(Zq~_i^H Zk~_j)`` and
    ``1 + u = 1 + cross (-Re) + key |Zk_j|^2 + query |Zq_i|^2`` (``u = P_qk |R|^2 / nu``)
    follows in three fused multiply-adds on the same tile; then ``L = log P_v + (-temperature)
    log(max(1 + u, 1))`` (`_logits`' formula, with ``log(1 + u)`` for its ``log1p(u)``),
    ``p = e^{L - m}`` with the running row maximum ``m``, and ``acc = sum_j p E_v,j Zv~_j``,
    ``s = sum_j p``, rescaled by ``e^{m_old - m_new}`` as in `_attend_chunked`. Eight
    elementwise passes over the tile (two transcendental) besides the two matmuls, the row max
    and the row sum, and no tile-sized temporary beyond the scores. The first chunk holds key
    0, which every query sees, so ``m`` is finite from the first chunk on.
    """
    peak = total = acc = None
    for tile, q, k, v, qn, kn in chunks:
        if tile.query is None:  # nu = inf: L = log P_v
            x = tile.log_prior.expand(*q.shape[:-1], k.shape[-2]).clone()
        else:
            x = torch.matmul(q, k.transpose(-1, -2))  # -Re(Zq~^H Zk~), (B, H, rows, keys)
            x = _one_plus_u_(x, tile, qn, kn)
            # |R|^2 >= 0: 1 + u < 1 is round-off of the cancelling expansion; clamp it. log(1 +
            # u) rather than log1p(u): a quarter cheaper, and its absolute error (what the
            # softmax sees) is one ulp of 1 + u either way.
            x.clamp_min_(1.0).log_()
            x = torch.addcmul(tile.log_prior, x, neg_temperature, out=x)
        new_peak = running_peak(peak, x)
        x.sub_(new_peak).exp_()
        weight_sum = x.sum(dim=-1, keepdim=True)
        values = x.mul_(tile.value_decay) @ v
        total, acc = merge_chunk(peak, new_peak, total, acc, weight_sum, values)
        peak = new_peak
    return acc / total


def _attend_bounded(chunks, priors, neg_temperature, *, rational: bool, workspace):
    """`_attend_chunked_inplace` on the uniform grid with the row maximum replaced by a bound
    from the prior alone; None where that bound loses precision (the caller then runs
    `_attend_chunked_inplace`).

    Since ``u >= 0`` and ``temperature >= 0``, ``L = log P_v - temperature log(1 + u) <= log
    P_v``, so ``c = max log P_v`` over the lags ``0 .. i1 - 1`` that a group of queries
    ``[i0, i1)`` sees is at least every row's maximum, and ``p = e^{L - c} = e^{log P_v - c}
    (1 + u)^{-temperature}`` lies in ``[0, 1]``: no overflow, no tile-sized maximum or
    subtraction, and, ``c`` being one per group, no rescaling between chunks. ``priors`` are
    the chunks' windows of ``log P_v - c`` (`_ToeplitzKernels.bounded_priors`). With
    ``temperature = 1`` (every head) the weight is rational and ``priors`` hold ``e^{log P_v -
    c}``: ``p = e^{log P_v - c} / (1 + u)``, one division for the tile's ``log`` and ``exp``.
    Otherwise the exponential is taken in base 2 (``exp2`` costs half of ``exp`` on CPU):
    ``priors`` hold ``(log P_v - c) log2(e)`` and ``neg_temperature`` is ``-temperature
    log2(e)``.
    Every chunk's scores go to ``workspace`` (`tile_scores`). Sums ``s = sum_j p``, ``acc =
    sum_j p E_v,j Zv~_j`` (accumulated by the matmul); the
    output ``acc / s`` is the softmax's (its rows' common factor ``e^{m - c}`` cancels).

    Precision: a bound above the row maximum scales every term down by ``e^{m - c}``, which is
    harmless until terms reach the subnormal range, where each carries an absolute error up to
    ``tiny eps`` (float32: ``2^-149``) instead of its relative rounding. Over ``n`` keys that
    is at most ``n tiny eps`` in ``s`` and ``n tiny eps max|E_v Zv~|`` in ``acc``; where
    every row has ``s >= n tiny / eps`` these are at most ``eps^2`` of ``s`` (and of the
    output's scale), below the rounding of the sums themselves. A row below that (a decay
    without process noise, whose prior grows by orders over the group; a large temperature
    times a large residual; NaN input) makes this return None.
    """
    total = acc = None
    keys = 0
    for (tile, q, k, v, qn, kn), prior in zip(chunks, priors, strict=True):
        width = k.shape[-2]
        keys += width
        if tile.query is None:  # nu = inf: p = P_v / e^c
            shape = (*q.shape[:-1], width)
            x = workspace[: math.prod(shape)].view(shape).copy_(prior.expand(shape))
            if not rational:
                x.exp2_()
        else:
            x = tile_scores(workspace, q, k)  # -Re(Zq~^H Zk~), as in the exact path
            x = _one_plus_u_(x, tile, qn, kn)
            x.clamp_min_(1.0)  # 1 + u >= 1 (`_attend_chunked_inplace`)
            x = bounded_weights_(x, prior, neg_temperature, rational=rational)
        weight_sum = x.sum(dim=-1, keepdim=True)
        total, acc = add_bounded_chunk(total, acc, weight_sum, x.mul_(tile.value_decay), v)
    return bounded_output(acc, total, keys)

"""RFA's torch form: seed 004 Algorithm 1 in blocks of query rows, ``O(T^2 + T D)`` memory.

Per head (rotations ``Phi^-_i = e^{-i omega t_i}``, the one rotation of
`kernels.ops.common.rotation`; ``E_ij = e^{-mu |t_i - t_j|}``, ``P = 1/V``, ``B = log P``)::

    q~, k~, v~ = Phi^- q, Phi^- k, Phi^- v
    |R_ij|^2   = |q_i|^2 + E_ij^2 |k_j|^2 - 2 E_ij Re(q~_i^H k~_j)    (eq. 10, one matmul)
    L_ij       = B_ij - kappa log(1 + P_ij |R_ij|^2 / nu)              (eq. 11; `params`)
    A          = softmax_j(tau_s L + M_causal) * E,   out_i = Phi^+_i sum_j A_ij v~_j

with the ablation switches of seed 004 E.2 (`kernels.ops.rfa`). Queries are processed in blocks
of ``block_size`` rows, each against the keys it may see (the causal triangle only), so the
``(B, H, block, <= T)`` temporaries stay in cache and the masked half is never computed. With
``t=None`` (``t_i = i``) the lag kernels are Toeplitz: they are evaluated once per call on a
vector of ``T + 2 block`` lags, laid out as one ``(H, block, T + block)`` strip (a window view
with its rows reversed), and each block reads a slice of it. With explicit stamps the lags of
each block are evaluated from ``t``. While compiling there is no data-dependent Python control
flow after the argument checks (the block loop depends on shapes only), so ``torch.compile``
traces it; in eager mode the bounded inference path (`_attend_bounded`) may fall back to the
exact one.

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``; output ``(B, H, T, Dv)``; weights
``(B, H, T, T)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels.ops.common import complex_pairs
from kernels.ops.common.attention import (
    AttentionOutput,
    add_bounded_chunk,
    bounded_output,
    bounded_weights_,
    future_keys,
    merge_chunk,
    running_peak,
    tile_scores,
)
from kernels.ops.common.params import Dynamics, Robust
from kernels.ops.common.rotation import Rotation, from_origin
from kernels.ops.rfa import params
from kernels.ops.rfa.params import Config
from kernels.ops.rfa.precision import lag_variance

# Default query rows per block: about 2^18 elements per (B, H, rows, <= T) temporary (1 MB in
# float32, the L2 size of the benchmark CPU), within [16, 256]: 32 rows at B H = 8, T = 1024,
# measured 10-20 % faster there than 64 or 128 rows.
_BLOCK_ELEMENTS = 2**18
_BLOCK_ROWS = (16, 256)
# In-place (no-autograd) causal path (`_causal_inplace`, issue 19): query rows per tile (whole
# blocks, at most this many unless one block is more) and keys per chunk (online softmax): a
# (B, H, 128, 512) tile, 2 MiB at B H = 8, whatever T (as AFA's in-place path). Not capped at
# block x T scores: at T = 1024 (block 32) that halved the tile, and the 20 tiles instead of 12
# cost 11% of the call in per-op overhead (2 threads).
_INFERENCE_ROWS = 128
_INFERENCE_KEY_CHUNK = 512
# log2(e): the bounded in-place path exponentiates in base 2 (`_attend_bounded`)
_LOG2E = 1.0 / math.log(2.0)


def rfa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t,
    dynamics: Dynamics,
    robust: Robust,
    anchor_var,
    steady_state: bool,
    causal: bool,
    return_weights: bool,
    weight_kernel: str,
    precision_prior: bool,
    precision_gate: bool,
    rotate_qk: bool,
    rotate_values: bool,
    unitary_limit: bool,
    block_size: int | None,
) -> AttentionOutput:
    """The torch form (module docstring); arguments as `kernels.ops.rfa.rfa_attention`."""
    p = params.prepare(
        q,
        k,
        v,
        t,
        dynamics,
        robust,
        anchor_var=anchor_var,
        steady_state=steady_state,
        weight_kernel=weight_kernel,
        precision_prior=precision_prior,
        precision_gate=precision_gate,
        unitary_limit=unitary_limit,
        rotate_values=rotate_values,
        like=q,
    )
    batch, heads, steps, cfg = p.batch, p.heads, p.steps, p.config
    times = from_origin(p.times)
    if block_size is None:
        low, high = _BLOCK_ROWS
        block_size = max(low, min(high, _BLOCK_ELEMENTS // (batch * heads * steps)))
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, found {block_size!r}")

    rotation = Rotation.at(times, p.frequencies)  # (B', H, T, D)
    q_rot = rotation.apply(q, sign=-1) if rotate_qk else q
    k_rot = rotation.apply(k, sign=-1) if rotate_qk else k
    v_rot = rotation.apply(v, sign=-1) if rotate_values else v
    q_norm = complex_pairs.squared_modulus_untracked(q).unsqueeze(
        -1
    )  # (B, H, T, 1), rotation-invariant
    k_norm = complex_pairs.squared_modulus_untracked(k).unsqueeze(-2)  # (B, H, 1, T)

    block = min(block_size, steps)
    if (
        causal
        and not return_weights
        and cfg.penalty == "log"
        and not _needs_grad(q, k, v, p.times, p.frequencies, *cfg)
    ):
        out = _causal_inplace(q_rot, k_rot, v_rot, q_norm, k_norm, times, t is None, cfg, block)
        return AttentionOutput(rotation.apply_(out, sign=1) if rotate_values else out, None)
    width = steps + block - 1 if causal else 2 * steps - 1
    strip = None
    if t is None:
        # Toeplitz: strip[a, m] = f(|a + T - 1 - m|) = w[block - 1 - a + m] for the per-lag
        # values w[y] = f(|T + block - 2 - y|): windows of w (a view), rows reversed.
        count = width + block - 1
        lag_vector = (steps + block - 2 - torch.arange(count, device=q.device)).abs().to(q.dtype)
        reverse = torch.arange(block - 1, -1, -1, device=q.device)
        per_lag = _terms(lag_vector.view(1, 1, -1), cfg)
        strip = _Terms(*(_toeplitz_strip(x, width, reverse) for x in per_lag))
    # additive causal mask of a diagonal block (0 on and below the diagonal, -inf above)
    future = torch.zeros(block, block, dtype=q.dtype, device=q.device).masked_fill(
        future_keys(block, device=q.device), float("-inf")
    )
    weights = q.new_zeros(batch, heads, steps, steps) if return_weights else None

    outputs = []
    for r0 in range(0, steps, block):
        r1 = min(r0 + block, steps)
        cols = r1 if causal else steps
        if strip is None:
            lag_abs = (times[..., r0:r1].unsqueeze(-1) - times[..., :cols].unsqueeze(-2)).abs()
            terms = _terms(lag_abs, cfg)
        else:
            start = steps - 1 - r0
            terms = _Terms(*(_slice(x, r1 - r0, start, cols) for x in strip))
        s = complex_pairs.real_inner(q_rot[:, :, r0:r1], k_rot[:, :, :cols])
        logits = _logits(s, q_norm[:, :, r0:r1], k_norm[..., :cols], terms, cfg)
        if causal:
            logits[..., r0:r1] += future[: r1 - r0, : r1 - r0]
        attention = torch.softmax(logits, dim=-1)
        if terms.decay is not None:
            attention = attention * terms.decay  # post-softmax decay, A = A^ * E
        outputs.append(attention @ v_rot[:, :, :cols])
        if weights is not None:
            weights[:, :, r0:r1, :cols] = attention
    out = torch.cat(outputs, dim=2)
    if rotate_values:
        out = rotation.apply(out, sign=1)
    return AttentionOutput(out, weights)


class _Terms(NamedTuple):
    """Lag-dependent factors of the logits; any may be None (absent)."""

    bias: torch.Tensor | None  # tau log P
    gq: torch.Tensor | None  # coefficient of |q_i|^2 in u
    gk: torch.Tensor | None  # coefficient of |k_j|^2 in u
    gs: torch.Tensor | None  # coefficient of Re(q~_i^H k~_j) in u
    decay: torch.Tensor | None  # E, applied after the softmax


def _terms(lag_abs: torch.Tensor, cfg: Config) -> _Terms:
    """Logit factors at lags ``lag_abs`` (broadcasting against the ``(H, 1, 1)`` parameters).

    The logits are ``bias - tau kappa log(1 + u)`` (Student-t) or ``bias - u`` (linear) with
    ``u = gq |q_i|^2 + gk |k_j|^2 + gs Re(q~_i^H k~_j)``, i.e. ``u = c P |R_ij|^2`` by eq. (10).
    """
    if cfg.unitary_limit:
        return _Terms(None, None, None, -cfg.temperature * cfg.dot_scale, None)
    decay = torch.exp(-cfg.decay * lag_abs)
    bias, gate = None, None
    if cfg.precision_prior:
        variance = lag_variance(
            lag_abs,
            decay=cfg.decay,
            process_var=cfg.process_var,
            measurement_var=cfg.measurement_var,
            anchor_var=cfg.anchor_var,
            steady_state=cfg.steady_state,
        )
        log_precision = -torch.log(variance)
        bias = cfg.temperature * log_precision
        if cfg.precision_gate:
            gate = torch.exp(log_precision)
        else:  # M2.3: the gate frozen at its lag-0 value 1 / (eta^2 + gamma^2)
            gate = 1.0 / (cfg.measurement_var + cfg.anchor_var)
    if cfg.penalty == "none":
        return _Terms(bias, None, None, None, decay)
    g = cfg.gate_scale if gate is None else gate * cfg.gate_scale
    return _Terms(bias, g, g * decay * decay, -2.0 * g * decay, decay)


def _logits(s, qn, kn, terms: _Terms, cfg: Config) -> torch.Tensor:
    """``tau_s L`` of a block: ``s (B, H, r, c)``, ``qn (B, H, r, 1)``, ``kn (B, H, 1, c)``."""
    if terms.gs is None:
        if terms.bias is None:  # flat prior and no penalty: uniform weights
            return torch.zeros_like(s)
        return terms.bias.expand(s.shape).clone()
    if cfg.penalty == "log":
        # w = 1 + u, with the 1 folded into the first product (one pass fewer)
        w = torch.addcmul(s.new_ones(()), s, terms.gs)
        w = torch.addcmul(w, terms.gq, qn)
        w = torch.addcmul(w, terms.gk, kn)
        # |R|^2 is a difference of rounded terms and can dip below 0 by round-off when q_i is
        # close to the transported key; u >= 0 holds exactly, and the clamp keeps w >= 1 > 0.
        # log(1 + u) rather than log1p(u): cheaper, and its absolute error (what the softmax
        # sees) is one ulp of 1 + u either way.
        penalty = torch.log(w.clamp_min_(1))
        if terms.bias is None:
            return penalty * cfg.neg_coef
        return torch.addcmul(terms.bias, penalty, cfg.neg_coef)
    u = s * terms.gs
    if terms.gq is not None:
        u = torch.addcmul(u, terms.gq, qn)
        u = torch.addcmul(u, terms.gk, kn)
    if terms.bias is None:
        return -u
    return terms.bias - u


def _toeplitz_strip(x: torch.Tensor | None, width: int, reverse: torch.Tensor):
    """``(H, 1, L)`` per-lag values -> ``(H, block, width)`` strip ``x[h, 0, block-1-a+m]``."""
    if x is None or x.shape[-1] == 1:
        return x  # absent, or constant along the lags
    return x[:, 0].unfold(-1, width, 1).index_select(-2, reverse)


def _slice(x: torch.Tensor | None, rows: int, start: int, cols: int):
    """Rows ``[0, rows)`` and strip columns ``[start, start + cols)`` of a Toeplitz strip term."""
    if x is None or x.ndim < 2 or x.shape[-1] == 1:
        return x  # absent, or constant along the lags
    return x[..., :rows, start : start + cols]


def _needs_grad(*tensors) -> bool:
    """Whether autograd records this call: grad mode on and an input or parameter needs a
    gradient (then the out-of-place path runs: in-place passes would break backward)."""
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(x, torch.Tensor) and x.requires_grad for x in tensors)


def _causal_inplace(q, k, v, qn, kn, times, toeplitz: bool, cfg: Config, block: int):
    """Causal output ``(B, H, T, Dv)`` (in the rotated frame) without autograd, for the "log"
    penalty: queries in groups of whole blocks (at most `_INFERENCE_ROWS` rows unless one block
    is more), keys in chunks of `_INFERENCE_KEY_CHUNK` (a multiple of the group; `_attend_inplace`,
    `_attend_bounded`).

    Uniform grid (``toeplitz``): the queries of a group are read in reverse order (``i = r1 -
    1 - a``, from one reversed copy of ``q``; the group's output rows are put back in order),
    so every term of a tile is a window view ``y[T - r1 + j0 + a + r]`` of one vector over the
    ``2T - 1`` lags in reverse, ``y[m] = f(T - 1 - m)`` (a few KiB that stay in cache, instead
    of slices of a ``(H, block, T + block)`` strip), and the causal mask is the bias' ``-inf``
    at ``tau < 0``. (Reversing the queries, not the keys and values as AFA's torch form does,
    copies one ``(B, H, T, D)`` tensor instead of two.)
    Explicit stamps: the terms of each chunk from its lags, the mask added to the last chunk.
    """
    steps = q.shape[-2]
    rows = block * max(1, _INFERENCE_ROWS // block)
    chunk = max(rows, _INFERENCE_KEY_CHUNK // rows * rows)
    if toeplitz:
        lag = torch.arange(1 - steps, steps, dtype=q.dtype, device=q.device)
        vectors = _terms(lag.abs().view(1, 1, -1), cfg)
        bias = lag.new_zeros(()) if vectors.bias is None else vectors.bias
        bias = torch.where(lag < 0, float("-inf"), bias).view(-1, 1, lag.numel())
        peaks = torch.cummax(bias[:, 0, steps - 1 :], dim=-1)[0]  # over lags 0 .. T - 1
        # in reverse (the other terms are even in the lag)
        vectors = vectors._replace(bias=bias.flip(-1))
        q, qn = q.flip(-2), qn.flip(-2)
    future = torch.zeros(rows, rows, dtype=q.dtype, device=q.device).masked_fill(
        future_keys(rows, device=q.device), float("-inf")
    )

    def operands(r0, r1, j0, j1):
        queries = slice(r0, r1)
        if toeplitz:  # queries [r0, r1) reversed: [T - r1, T - r0) of the flipped sequence
            first, cols = steps - r1 + j0, j1 - j0
            terms = _Terms(*(_lag_window(x, first, r1 - r0, cols) for x in vectors))
            queries = slice(steps - r1, steps - r0)
        else:
            lag = times[..., r0:r1].unsqueeze(-1) - times[..., j0:j1].unsqueeze(-2)
            terms = _terms(lag.abs(), cfg)
        keys = slice(j0, j1)
        return (
            terms,
            q[:, :, queries],
            k[:, :, keys],
            v[:, :, keys],
            qn[:, :, queries],
            kn[..., keys],
        )

    # uniform grid in eager mode: the row maximum is replaced by the bias' (`_attend_bounded`;
    # its fallback is data-dependent control flow, so not while compiling)
    bounded = toeplitz and not torch.compiler.is_compiling()
    rational = bounded and bool((cfg.neg_coef == -1).all())
    if bounded:  # one score tile for the whole call (`tile_scores`)
        workspace = q.new_empty(q.shape[0] * q.shape[1] * min(rows, steps) * min(chunk, steps))
    outputs = []
    for r0 in range(0, steps, rows):
        r1 = min(r0 + rows, steps)
        spans = [(r0, r1, j0, min(j0 + chunk, r1)) for j0 in range(0, r1, chunk)]
        chunks = [operands(*span) for span in spans]
        out = None
        if bounded:  # bias - c with c its maximum over the lags 0 .. r1 - 1 this group sees
            shifted = vectors.bias[:, 0] - peaks[:, r1 - 1 : r1]
            shifted = shifted.exp_() if rational else shifted.mul_(_LOG2E)  # base 2
            biases = [
                _lag_window(shifted.unsqueeze(1), steps - i1 + j0, i1 - i0, j1 - j0)
                for i0, i1, j0, j1 in spans
            ]
            out = _attend_bounded(chunks, biases, cfg, rational=rational, workspace=workspace)
        if out is None:
            mask = None
            if not toeplitz:  # the last chunk's columns [r0 - its start, ...) hold the diagonal
                mask = (r0 - (r1 - 1) // chunk * chunk, future[: r1 - r0, : r1 - r0])
            out = _attend_inplace(chunks, cfg, mask)
        outputs.append(out.flip(-2) if toeplitz else out)  # rows back in order
    return torch.cat(outputs, dim=2)


def _lag_window(x: torch.Tensor | None, first: int, rows: int, cols: int):
    """``(H, 1, 2T - 1)`` per-lag values -> the ``(H, rows, cols)`` view ``x[first + a + r]``."""
    if x is None or x.shape[-1] == 1:
        return x  # absent, or constant along the lags
    return x[:, 0, first : first + rows + cols - 1].unfold(-1, cols, 1)


def _attend_inplace(chunks, cfg: Config, mask) -> torch.Tensor:
    """One causal block without autograd: the keys in chunks ``(terms, q~, k~, v~, |q|^2,
    |k|^2)`` with an online softmax, in place on one score tile per chunk.

    Per chunk ``w = 1 + gs Re(q~^H k~) + gk |k_j|^2 + gq |q_i|^2`` (fused multiply-adds on
    the matmul's tile), ``tau_s L = bias - tau kappa log(max(w, 1))`` (`_logits`' "log" form),
    ``mask = (diagonal, future)``, if given, the causal mask added to the last chunk's columns
    ``[diagonal, diagonal + rows)``, then with the running row
    maximum ``m``: ``p = e^{L - m}``, ``s = sum_j p``, ``acc = sum_j p E_j v~_j``, both rescaled
    by ``e^{m_old - m_new}`` when ``m`` grows; the output is ``acc / s``, the sum of the
    whole-row softmax in another order. The first chunk holds key 0, which every query sees,
    so ``m`` is finite from the first chunk on.
    """
    peak = total = acc = None
    last = len(chunks) - 1
    for index, (terms, q, k, v, qn, kn) in enumerate(chunks):
        x = torch.matmul(q, k.transpose(-1, -2))  # Re(q~^H k~), (B, H, rows, keys)
        x = torch.addcmul(x.new_ones(()), x, terms.gs, out=x)  # w = 1 + u, the 1 folded in
        x.addcmul_(terms.gk, kn)
        x.addcmul_(terms.gq, qn)
        x.clamp_min_(1.0).log_()  # as in `_logits`
        if terms.bias is None:
            x.mul_(cfg.neg_coef)
        else:
            x = torch.addcmul(terms.bias, x, cfg.neg_coef, out=x)
        if mask is not None and index == last:
            diagonal, future = mask
            x[..., diagonal : diagonal + future.shape[-1]] += future
        new_peak = running_peak(peak, x)
        x.sub_(new_peak).exp_()
        weight_sum = x.sum(dim=-1, keepdim=True)
        if terms.decay is not None:
            x.mul_(terms.decay)  # post-softmax decay, A = A^ * E
        values = x @ v
        total, acc = merge_chunk(peak, new_peak, total, acc, weight_sum, values)
        peak = new_peak
    return acc / total


def _attend_bounded(chunks, biases, cfg: Config, *, rational: bool, workspace):
    """`_attend_inplace` on the uniform grid with the row maximum replaced by a bound from the
    bias alone; None where that bound loses precision (the caller then runs `_attend_inplace`).

    With ``u >= 0`` and ``tau kappa > 0``, ``tau_s L = bias - tau kappa log(1 + u) <= bias``,
    so ``c = max bias`` over the lags ``0 .. r1 - 1`` that a group of queries ``[r0, r1)``
    sees is at least every row's maximum, and ``p = e^{bias - c} (1 + u)^{-tau kappa}`` lies
    in ``[0, 1]``: no overflow, no tile-sized maximum or subtraction, and, ``c`` being one per
    group, no rescaling between chunks. ``biases`` are the chunks' ``(H, rows, width)``
    windows of ``bias - c`` (-inf at ``tau < 0``). With ``tau kappa = 1`` (every head) the
    weight is rational and ``biases`` hold ``e^{bias - c}``: ``p = e^{bias - c} / (1 + u)``,
    one division for the tile's ``log`` and ``exp``; otherwise ``biases`` hold ``(bias - c)
    log2(e)`` and the exponential is taken in base 2 (``exp2`` costs half of ``exp`` on CPU).
    Every chunk's scores go to ``workspace`` (`tile_scores`). The sums and the output are
    `_attend_inplace`'s (the rows' common factor ``e^{m - c}`` cancels in ``acc / s``).

    Precision (as AFA's `kernels.ops.afa.isotropic._attend_bounded`): terms scaled into the
    subnormal range carry an absolute error up to ``tiny eps`` each, at most ``eps^2`` of the
    sums where every row has ``s >= n tiny / eps`` over its ``n`` keys; a row below that (a
    bias growing by orders over the group, a large ``tau kappa`` times a large residual, NaN
    input) makes this return None.
    """
    total = acc = None
    keys = 0
    for (terms, q, k, v, qn, kn), bias in zip(chunks, biases, strict=True):
        keys += k.shape[-2]
        x = tile_scores(workspace, q, k)  # Re(q~^H k~), as in `_attend_inplace`
        x = torch.addcmul(x.new_ones(()), x, terms.gs, out=x)
        x.addcmul_(terms.gk, kn)
        x.addcmul_(terms.gq, qn)
        x.clamp_min_(1.0)
        x = bounded_weights_(x, bias, _LOG2E * cfg.neg_coef, rational=rational)
        weight_sum = x.sum(dim=-1, keepdim=True)
        if terms.decay is not None:
            x.mul_(terms.decay)  # post-softmax decay, A = A^ * E
        total, acc = add_bounded_chunk(total, acc, weight_sum, x, v)
    return bounded_output(acc, total, keys)

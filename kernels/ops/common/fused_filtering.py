"""Fused isotropic filtering attention (AFA, seed 000 Algorithm 1; RFA, seed 004 Algorithm 1).

One kernel family computes both layers flash-style: a program owns a block of queries, streams
the key blocks it may see, and never forms the ``(T, T)`` score matrix, so memory is ``O(T D)``
(the inputs, the output and one float32 log-sum-exp per query). It must equal the torch forms
`kernels.ops.afa.isotropic` and `kernels.ops.rfa.isotropic` (DESIGN.md section 2, link 5;
tolerances in `kernels.tolerances`). This module is the kernel and its autograd wiring only: it
imports no op family. Each family's packer (`kernels.ops.afa.triton`, `kernels.ops.rfa.triton`)
turns that family's prepared parameters (its ``params`` module) into the per-head
`Coefficients` below, rotates the inputs, and calls `attend`.

Math per tile (queries ``i``, keys ``j``, lag ``tau = t_i - t_j``, one head's parameters)::

    inner     = sigma^2 h relax(2 a h) + eta^2 e^{-2 a f} + gamma^2,  relax(x) = (1 - e^{-x})/x
    log V     = 2 a b + log(inner),        log P = -log V,           log E = -a tau_E
    u         = gs (P |q~_i|^2 + P E^2 |k~_j|^2 - 2 P E Re(q~_i^H k~_j))     (= gs P |R_ij|^2)
    L_ij      = bs log P - c log(1 + max(u, 0))      (penalty "log")
              = bs log P - u                         (penalty "linear")
              = bs log P                             (penalty "none")

with, for AFA (signed lags, seed 000 A.3), ``h = |tau|``, ``f = max(tau, 0)``, ``b = max(-tau,
0)`` (the backward covariance of non-causal keys), ``tau_E = tau``, ``gamma^2 = 0``, ``gs =
1/nu``, ``c = temperature``, ``bs = 1``; and for RFA (symmetric lags, eq. (9)-(11)) ``h = f =
tau_E = |tau|``, ``b = 0``, ``gamma^2`` the anchor variance, ``bs = tau_s`` (its temperature),
``gs = 1/nu`` and ``c = tau_s (nu + d)/d`` for a finite ``nu``, the linear penalty with ``gs =
tau_s / d`` at ``nu = inf``. ``P E`` and ``P E^2`` are evaluated as ``exp(log P + log E)`` and
``exp(log P + 2 log E)``, so the backward growth ``e^{2 a |tau|}`` of a non-causal AFA key cancels
in the exponent instead of overflowing. ``q~ = e^{-i w t} q`` (and ``k~``, ``v~``) are rotated
into the frame of each sequence's first stamp (`kernels.ops.common.rotation.from_origin`:
relative phases are unchanged, absolute ones stay small) before the kernel (in float32, one
elementwise pass) and the output is rotated back by ``e^{+i w t_i}`` after it, by the one
rotation the torch forms use
(`kernels.ops.common.rotation`).

Online softmax with the decay after normalisation. The weights are ``A = softmax_j(L)`` and the
output ``out_i = sum_j A_ij E_ij v~_j``: the decay multiplies the normalised weights, it does not
enter the normaliser. A program keeps the running maximum ``m``, the normaliser ``l = sum_j
e^{L_ij - m}`` and the accumulator ``acc = sum_j e^{L_ij - m + log E_ij} v~_j`` (``E`` joins in
log space, so a growing non-causal decay cannot overflow on its own); each key block rescales
both by ``e^{m_old - m_new}``, and ``out = acc / l``, ``lse = m + log l``. Accumulation is in
float32 for every input dtype; the matmul operands are the input dtype (``tl.dot`` with float32
accumulation; ``"ieee"`` precision for float32 inputs, no TF32).

Backward (two Triton kernels, recomputing each tile from the saved ``lse``). With ``Y = p E``,
``dY_ij = do_i . v~_j`` and ``delta_i = do_i . out_i``: ``dL = Y dY - p delta``, ``dv~_j =
sum_i Y_ij do_i``, ``d log E = Y dY + du (2 P E^2 |k~|^2 - 2 P E s) gs``, ``du = -c dL / (1 + u)``
(log) or ``-dL`` (linear), ``dq~_i = sum_j -2 gs P E du k~_j + 2 q~_i sum_j gs P du`` (and
symmetrically ``dk~``). One kernel runs over key blocks (``dk~``, ``dv~`` and the per-head
parameter sums: ``d a, d sigma^2, d eta^2, d gamma^2, d gs, d c, d bs``, written per program and
reduced in torch); the other over query blocks (``dq~``). The packed coefficients are built from
the user's parameters by torch ops, so autograd carries their gradients on to ``decay``,
``process_var``, ``measurement_var``, ``anchor_var``, ``nu``, ``temperature`` and (through the
rotations) ``frequencies``.

Supported (everything else stays with torch, see `kernels.backend.use_triton`): AFA with one set
of dynamics for queries, keys and values (no ``value_*`` dynamics, no drift biases), with or
without frequencies, ``normalized_qk`` either way; RFA with its default ablation switches
(Student-t kernel, precision prior and gate, rotated queries, keys and values, not the unitary
limit, ``steady_state=False``); causal or not; ``t`` None, ``(T,)`` or ``(B, T)``; finite or
infinite ``nu``; per-head parameters; float32, bfloat16 and float16 inputs; no attention weights.

Shape legend: ``B`` batch, ``H`` heads, ``T`` time steps, ``D`` query/key features (real pairs
``[re | im]`` when rotated), ``Dv`` value features, ``Bt`` 1 or ``B`` (time stamps), ``BLOCK``
rows/keys per tile (``block_size``, `kernels.backend.tile`), ``NC = 8`` packed per-head
coefficients ``[a, sigma^2, eta^2, gamma^2, gs, c, bs, unused]``, named in `Coefficients`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels.backend import KERNEL_DTYPES, tile

AFA, RFA = 0, 1  # lag conventions: signed (seed 000 A.3) and symmetric (seed 004 eq. 9)
PENALTY_NONE, PENALTY_LOG, PENALTY_LINEAR = 0, 1, 2
NC = 8  # packed coefficients per head, see the module docstring


class Coefficients(NamedTuple):
    """The per-head coefficients of the kernel, in its packed order (module docstring).

    Each is an ``(H,)`` or ``(H, 1)`` tensor (autograd carries their gradients back to the
    family's parameters) or None for 0.

    decay : ``a`` (AFA's decay, RFA's ``mu``).   process_var : ``sigma^2``.
    measurement_var : ``eta^2``.   anchor_var : ``gamma^2`` (RFA only).
    gate_scale : ``gs``, the factor of ``P |R|^2`` in ``u``: AFA ``1 / nu``; RFA ``1 / nu``
        (Student-t), ``tau_s / d`` (its ``nu = inf`` limit).
    exponent : ``c`` of the log penalty: AFA's temperature, RFA's ``tau_s (nu + d) / d``.
    prior_scale : ``bs``, the factor of ``log P``: 1 (AFA), ``tau_s`` (RFA).
    """

    decay: torch.Tensor | None = None
    process_var: torch.Tensor | None = None
    measurement_var: torch.Tensor | None = None
    anchor_var: torch.Tensor | None = None
    gate_scale: torch.Tensor | None = None
    exponent: torch.Tensor | None = None
    prior_scale: torch.Tensor | None = None

    def pack(self, heads: int, device) -> torch.Tensor:
        """``(H, NC)`` float32 in the kernel's order; missing coefficients are 0."""
        zero = torch.zeros(heads, dtype=torch.float32, device=device)
        cols = [zero if x is None else x.reshape(heads).to(torch.float32) for x in self]
        return torch.stack([*cols, zero], dim=-1)


# ---------------------------------------------------------------------------------------------
# Tile math, shared by the forward and both backward kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _relax(x):
    """``(relax(x), relax'(x))`` for ``x >= 0``, ``relax(x) = (1 - e^{-x}) / x``."""
    # Taylor series below x = 0.1: their truncation errors there are x^5/720 < 2e-8 (relax)
    # and x^5/840 (relax'), while the quotients lose eps/x to cancellation (6e-7 at 0.1, and
    # relax' = (e^{-x} - relax) / x loses that again); the switch keeps both near round-off.
    small = x < 0.1
    xs = tl.where(small, 1.0, x)
    ex = tl.exp(-xs)
    big = (1.0 - ex) / xs
    dbig = (ex - big) / xs
    series = 1.0 + x * (-0.5 + x * (1.0 / 6.0 + x * (-1.0 / 24.0 + x / 120.0)))
    dseries = -0.5 + x * (1.0 / 3.0 + x * (-1.0 / 8.0 + x * (1.0 / 30.0 - x / 144.0)))
    return tl.where(small, series, big), tl.where(small, dseries, dbig)


@triton.jit
def _tile(
    s,
    qn,
    kn,
    ti,
    tj,
    visible,
    a,
    s2,
    e2,
    g2,
    gs,
    c,
    bs,
    FAMILY: tl.constexpr,
    PENALTY: tl.constexpr,
):
    """Logits and their pieces on a ``(BLOCK_M, BLOCK_N)`` tile (module docstring).

    ``s = Re(q~^H k~)``, ``qn = |q~_i|^2 (BLOCK_M,)``, ``kn = |k~_j|^2 (BLOCK_N,)``, ``visible``
    the mask. Returns ``(L, log E, log P, u, u clamped, gq, gk, gc, h, f, b, tau_E, rel, drel,
    decay_f, inner)``; ``L = -inf`` where not visible.
    """
    tau = ti[:, None] - tj[None, :]
    tau = tl.where(visible, tau, 0.0)  # masked pairs: keep every exponential finite
    h = tl.abs(tau)
    if FAMILY == 0:
        fwd = tl.maximum(tau, 0.0)
        back = tl.maximum(-tau, 0.0)
        tau_e = tau
    else:
        fwd = h
        back = tl.zeros_like(h)
        tau_e = h
    rel, drel = _relax(2.0 * a * h)
    decay_f = tl.exp(-2.0 * a * fwd)
    inner = s2 * h * rel + e2 * decay_f + g2
    log_p = -(2.0 * a * back + tl.log(inner))
    log_e = -a * tau_e
    logits = bs * log_p
    u = tl.zeros_like(logits)
    u_pos = u
    gq = u
    gk = u
    gc = u
    if PENALTY != 0:
        gq = gs * tl.exp(log_p)
        gk = gs * tl.exp(log_p + 2.0 * log_e)
        gc = gs * tl.exp(log_p + log_e)
        u = gq * qn[:, None] + gk * kn[None, :] - 2.0 * gc * s
        if PENALTY == 1:
            # |R|^2 >= 0 exactly; a negative u is round-off of the cancelling expansion.
            u_pos = tl.maximum(u, 0.0)
            logits = logits - c * tl.log(1.0 + u_pos)
        else:
            logits = logits - u
    logits = tl.where(visible, logits, float("-inf"))
    return (
        logits,
        log_e,
        log_p,
        u,
        u_pos,
        gq,
        gk,
        gc,
        h,
        fwd,
        back,
        tau_e,
        rel,
        drel,
        decay_f,
        inner,
    )


@triton.jit
def _mm(x, y, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """``x @ y`` with float32 accumulation; ``UPCAST``: multiply the (already rounded)
    operands in float32 (the interpreter's bfloat16 ``tl.dot`` is wrong, see `_launch_options`).
    """
    if UPCAST:
        return tl.dot(x.to(tl.float32), y.to(tl.float32), input_precision="ieee")
    return tl.dot(x, y, input_precision=PRECISION)


@triton.jit
def _visible(offs_m, offs_n, T, CAUSAL: tl.constexpr):
    """``(BLOCK_M, BLOCK_N)`` mask: both indices in range, and ``j <= i`` when causal."""
    mask = (offs_m[:, None] < T) & (offs_n[None, :] < T)
    if CAUSAL:
        mask = mask & (offs_n[None, :] <= offs_m[:, None])
    return mask


@triton.jit
def _coefficients(COEF, head):
    base = COEF + head * 8
    return (
        tl.load(base + 0),
        tl.load(base + 1),
        tl.load(base + 2),
        tl.load(base + 3),
        tl.load(base + 4),
        tl.load(base + 5),
        tl.load(base + 6),
    )


# ---------------------------------------------------------------------------------------------
# Tile set-up, shared by the forward and both backward kernels (grid (cdiv(T, BLOCK), B H))
# ---------------------------------------------------------------------------------------------


@triton.jit
def _program(TIMES, H, stride_tb, BLOCK: tl.constexpr):
    """``(pid, b H + h, offs (BLOCK,), times)``: this program's block of ``BLOCK`` rows or keys
    and the row of time stamps of its batch element."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    return pid, bh, offs, TIMES + (bh // H) * stride_tb


@triton.jit
def _row_pointers(X, bh, offs, T, width, BLOCK_W: tl.constexpr):
    """Pointers and mask of rows ``offs`` of the ``(T, width)`` slice ``bh`` of a contiguous
    ``(B, H, T, width)`` tensor, as a ``(len(offs), BLOCK_W)`` tile; padding is masked."""
    cols = tl.arange(0, BLOCK_W)
    pointers = X + bh * T * width + offs[:, None] * width + cols[None, :]
    return pointers, (offs < T)[:, None] & (cols[None, :] < width)


@triton.jit
def _load_rows(X, bh, offs, T, width, BLOCK_W: tl.constexpr):
    """The `_row_pointers` tile of ``X``; padded entries read 0."""
    pointers, mask = _row_pointers(X, bh, offs, T, width, BLOCK_W)
    return tl.load(pointers, mask=mask, other=0.0)


@triton.jit
def _store_rows(X, bh, offs, T, width, tile, BLOCK_W: tl.constexpr):
    """Write ``tile`` to the `_row_pointers` tile of ``X`` (padded entries are skipped)."""
    pointers, mask = _row_pointers(X, bh, offs, T, width, BLOCK_W)
    tl.store(pointers, tile, mask=mask)


@triton.jit
def _load_block(X, times, bh, offs, T, D, BLOCK_D: tl.constexpr):
    """Rows ``offs`` of ``q~`` (or ``k~``) and their norms and stamps: ``(x, |x|^2, t)``, with
    ``|x|^2`` summed in float32; padding reads 0."""
    x = _load_rows(X, bh, offs, T, D, BLOCK_D)
    xf = x.to(tl.float32)
    stamps = tl.load(times + offs, mask=offs < T, other=0.0)
    return x, tl.sum(xf * xf, axis=1), stamps


@triton.jit
def _load_upstream(DO, LSE, DELTA, bh, offs_m, T, DV, BLOCK_DV: tl.constexpr):
    """Rows ``offs_m`` of the backward's per-query inputs: ``(do, lse, delta)``."""
    do = _load_rows(DO, bh, offs_m, T, DV, BLOCK_DV)
    row_ok = offs_m < T
    lse = tl.load(LSE + bh * T + offs_m, mask=row_ok, other=0.0)
    delta = tl.load(DELTA + bh * T + offs_m, mask=row_ok, other=0.0)
    return do, lse, delta


@triton.jit
def _keys_end(pid_m, T, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """One past the last key that query block ``pid_m`` sees: its last row when causal."""
    return tl.minimum((pid_m + 1) * BLOCK_M, T) if CAUSAL else T


# ---------------------------------------------------------------------------------------------
# Forward kernel: grid (cdiv(T, BLOCK_M), B H)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _forward_kernel(
    Q,  # (B, H, T, D) input dtype, contiguous
    K,  # (B, H, T, D)
    V,  # (B, H, T, Dv)
    TIMES,  # (Bt, T) float32
    COEF,  # (H, NC) float32
    OUT,  # (B, H, T, Dv) float32
    LSE,  # (B, H, T) float32
    H,
    T,
    D,
    DV,
    stride_tb,  # T, or 0 when the stamps are shared by the batch
    FAMILY: tl.constexpr,
    PENALTY: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    pid_m, bh, offs_m, times = _program(TIMES, H, stride_tb, BLOCK_M)
    a, s2, e2, g2, gs, c, bs = _coefficients(COEF, bh % H)
    q, qn, ti = _load_block(Q, times, bh, offs_m, T, D, BLOCK_D)

    # m starts finite: exp(m_old - m_new) is then 0, not NaN, before the first visible key
    m = tl.full((BLOCK_M,), -1.0e30, dtype=tl.float32)
    denom = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    for start_n in range(0, _keys_end(pid_m, T, BLOCK_M, CAUSAL), BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k, kn, tj = _load_block(K, times, bh, offs_n, T, D, BLOCK_D)
        v = _load_rows(V, bh, offs_n, T, DV, BLOCK_DV)
        s = _mm(q, tl.trans(k), PRECISION, UPCAST)
        visible = _visible(offs_m, offs_n, T, CAUSAL)
        terms = _tile(s, qn, kn, ti, tj, visible, a, s2, e2, g2, gs, c, bs, FAMILY, PENALTY)
        logits = terms[0]
        log_e = terms[1]
        m_new = tl.maximum(m, tl.max(logits, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(logits - m_new[:, None])
        weighted = tl.exp(logits - m_new[:, None] + log_e)  # p E, the decay after the softmax
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + _mm(weighted.to(v.dtype), v, PRECISION, UPCAST)
        m = m_new
    # padded rows (i >= T) see no key: keep their (unstored) quotient finite
    denom = tl.where(denom > 0.0, denom, 1.0)
    _store_rows(OUT, bh, offs_m, T, DV, acc / denom[:, None], BLOCK_DV)
    tl.store(LSE + bh * T + offs_m, m + tl.log(denom), mask=offs_m < T)


# ---------------------------------------------------------------------------------------------
# Backward kernels
# ---------------------------------------------------------------------------------------------


@triton.jit
def _tile_gradients(
    q,
    k,
    v,
    do,
    qn,
    kn,
    ti,
    tj,
    lse,
    delta,
    visible,
    a,
    s2,
    e2,
    g2,
    gs,
    c,
    bs,
    FAMILY: tl.constexpr,
    PENALTY: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Recompute a tile from ``lse`` and return ``(Y, dL, du, d log E, terms)``."""
    s = _mm(q, tl.trans(k), PRECISION, UPCAST)
    terms = _tile(s, qn, kn, ti, tj, visible, a, s2, e2, g2, gs, c, bs, FAMILY, PENALTY)
    logits = terms[0]
    log_e = terms[1]
    p = tl.exp(logits - lse[:, None])
    y = tl.exp(logits - lse[:, None] + log_e)
    dy = _mm(do, tl.trans(v), PRECISION, UPCAST)
    d_logits = y * dy - p * delta[:, None]
    if PENALTY == 1:
        du = tl.where(terms[3] >= 0.0, -c * d_logits / (1.0 + terms[4]), 0.0)
    elif PENALTY == 2:
        du = -d_logits
    else:
        du = tl.zeros_like(d_logits)
    d_log_e = y * dy + du * (2.0 * terms[6] * kn[None, :] - 2.0 * terms[7] * s)
    return y, d_logits, du, d_log_e, terms


@triton.jit
def _backward_keys_kernel(
    Q,
    K,
    V,
    DO,  # (B, H, T, Dv) input dtype
    TIMES,
    COEF,
    LSE,  # (B, H, T) float32
    DELTA,  # (B, H, T) float32: do . out
    DK,  # (B, H, T, D) float32
    DV_OUT,  # (B, H, T, Dv) float32
    DCOEF,  # (B H, cdiv(T, BLOCK_N), NC) float32 per-program sums
    H,
    T,
    D,
    DV,
    stride_tb,
    FAMILY: tl.constexpr,
    PENALTY: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """One key block: ``dk~``, ``dv~`` and the parameter sums, over the query blocks."""
    pid_n, bh, offs_n, times = _program(TIMES, H, stride_tb, BLOCK_N)
    a, s2, e2, g2, gs, c, bs = _coefficients(COEF, bh % H)
    k, kn, tj = _load_block(K, times, bh, offs_n, T, D, BLOCK_D)
    kf = k.to(tl.float32)
    v = _load_rows(V, bh, offs_n, T, DV, BLOCK_DV)

    dk = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, BLOCK_DV), dtype=tl.float32)
    dkn = tl.zeros((BLOCK_N,), dtype=tl.float32)
    sum_a = tl.zeros((BLOCK_N,), dtype=tl.float32)
    sum_s2 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    sum_e2 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    sum_g2 = tl.zeros((BLOCK_N,), dtype=tl.float32)
    sum_gs = tl.zeros((BLOCK_N,), dtype=tl.float32)
    sum_c = tl.zeros((BLOCK_N,), dtype=tl.float32)
    sum_bs = tl.zeros((BLOCK_N,), dtype=tl.float32)
    first = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for start_m in range(first, T, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        q, qn, ti = _load_block(Q, times, bh, offs_m, T, D, BLOCK_D)
        do, lse, delta = _load_upstream(DO, LSE, DELTA, bh, offs_m, T, DV, BLOCK_DV)
        visible = _visible(offs_m, offs_n, T, CAUSAL)
        y, d_logits, du, d_log_e, terms = _tile_gradients(
            q, k, v, do, qn, kn, ti, tj, lse, delta, visible,
            a, s2, e2, g2, gs, c, bs, FAMILY, PENALTY, PRECISION, UPCAST,
        )  # fmt: skip
        log_p = terms[2]
        u = terms[3]
        dv += _mm(tl.trans(y.to(do.dtype)), do, PRECISION, UPCAST)
        ds = -2.0 * du * terms[7]
        dk += _mm(tl.trans(ds.to(q.dtype)), q, PRECISION, UPCAST)
        dkn += tl.sum(du * terms[6], axis=0)
        # per-head coefficient sums (module docstring); d log V = -(bs dL + u du)
        d_log_v = -(bs * d_logits + u * du)
        h = terms[8]
        inner = terms[15]
        d_inner = 2.0 * s2 * h * h * terms[13] - 2.0 * terms[9] * e2 * terms[14]
        sum_a += tl.sum(d_log_v * (2.0 * terms[10] + d_inner / inner) - d_log_e * terms[11], 0)
        sum_s2 += tl.sum(d_log_v * h * terms[12] / inner, axis=0)
        sum_e2 += tl.sum(d_log_v * terms[14] / inner, axis=0)
        sum_g2 += tl.sum(d_log_v / inner, axis=0)
        if PENALTY != 0:  # d gs = sum du u / gs (gs > 0 whenever there is a penalty)
            sum_gs += tl.sum(du * u, axis=0) / gs
        if PENALTY == 1:
            sum_c += tl.sum(-d_logits * tl.log(1.0 + terms[4]), axis=0)
        sum_bs += tl.sum(d_logits * log_p, axis=0)
    dk += 2.0 * kf * dkn[:, None]
    _store_rows(DK, bh, offs_n, T, D, dk, BLOCK_D)
    _store_rows(DV_OUT, bh, offs_n, T, DV, dv, BLOCK_DV)
    out = DCOEF + (bh * tl.num_programs(0) + pid_n) * 8
    tl.store(out + 0, tl.sum(sum_a, axis=0))
    tl.store(out + 1, tl.sum(sum_s2, axis=0))
    tl.store(out + 2, tl.sum(sum_e2, axis=0))
    tl.store(out + 3, tl.sum(sum_g2, axis=0))
    tl.store(out + 4, tl.sum(sum_gs, axis=0))
    tl.store(out + 5, tl.sum(sum_c, axis=0))
    tl.store(out + 6, tl.sum(sum_bs, axis=0))
    tl.store(out + 7, 0.0)


@triton.jit
def _backward_queries_kernel(
    Q,
    K,
    V,
    DO,
    TIMES,
    COEF,
    LSE,
    DELTA,
    DQ,  # (B, H, T, D) float32
    H,
    T,
    D,
    DV,
    stride_tb,
    FAMILY: tl.constexpr,
    PENALTY: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    """One query block: ``dq~`` over the key blocks it sees."""
    pid_m, bh, offs_m, times = _program(TIMES, H, stride_tb, BLOCK_M)
    a, s2, e2, g2, gs, c, bs = _coefficients(COEF, bh % H)
    q, qn, ti = _load_block(Q, times, bh, offs_m, T, D, BLOCK_D)
    qf = q.to(tl.float32)
    do, lse, delta = _load_upstream(DO, LSE, DELTA, bh, offs_m, T, DV, BLOCK_DV)

    dq = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    dqn = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for start_n in range(0, _keys_end(pid_m, T, BLOCK_M, CAUSAL), BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k, kn, tj = _load_block(K, times, bh, offs_n, T, D, BLOCK_D)
        v = _load_rows(V, bh, offs_n, T, DV, BLOCK_DV)
        visible = _visible(offs_m, offs_n, T, CAUSAL)
        y, d_logits, du, d_log_e, terms = _tile_gradients(
            q, k, v, do, qn, kn, ti, tj, lse, delta, visible,
            a, s2, e2, g2, gs, c, bs, FAMILY, PENALTY, PRECISION, UPCAST,
        )  # fmt: skip
        ds = -2.0 * du * terms[7]
        dq += _mm(ds.to(k.dtype), k, PRECISION, UPCAST)
        dqn += tl.sum(du * terms[5], axis=1)
    dq += 2.0 * qf * dqn[:, None]
    _store_rows(DQ, bh, offs_m, T, D, dq, BLOCK_D)


# ---------------------------------------------------------------------------------------------
# Launchers and the autograd.Function
# ---------------------------------------------------------------------------------------------


def _launch_options(q, v, block, family, penalty, causal):
    dim, vdim = q.shape[-1], v.shape[-1]
    return dict(
        FAMILY=family,
        PENALTY=penalty,
        CAUSAL=causal,
        # TF32 would round the operands of Re(q~^H k~) to 10 bits, and the residual expansion
        # |q|^2 + E^2 |k|^2 - 2 E s cancels: float32 inputs get IEEE products.
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        # Triton 3.9's interpreter returns garbage (errors ~1e10 on a 16 x 16 product) from
        # tl.dot on bfloat16 operands; there the operands, still rounded to bfloat16, are
        # multiplied in float32 -- the same arithmetic, as bf16 x bf16 products are exact in
        # float32 and tensor cores accumulate in float32.
        UPCAST=not q.is_cuda and q.dtype == torch.bfloat16,
        BLOCK_M=block,
        BLOCK_N=block,
        # tl.dot needs every dimension >= 16; padded features are masked to zero
        BLOCK_D=max(16, triton.next_power_of_2(dim)),
        BLOCK_DV=max(16, triton.next_power_of_2(vdim)),
    )


class _FilteringAttention(torch.autograd.Function):
    """``(q~, k~, v~, times, coef) -> out`` (float32), the rotated-frame core of both layers.

    ``q~, k~, v~`` arrive in float32 and are cast to the kernel's ``dtype`` here, so their
    gradients leave in float32, straight from the kernel's float32 accumulators: a cast outside
    would round them to ``dtype`` first, and the frequency gradient, formed from them weighted by
    the time stamps with much cancellation between queries, keys and values, would inherit that
    rounding magnified.
    """

    @staticmethod
    def forward(ctx, q, k, v, times, coef, family, penalty, causal, block, dtype):
        q, k, v = (x.to(dtype).contiguous() for x in (q, k, v))
        batch, heads, steps, dim = q.shape
        vdim = v.shape[-1]
        out = torch.empty(batch, heads, steps, vdim, dtype=torch.float32, device=q.device)
        lse = torch.empty(batch, heads, steps, dtype=torch.float32, device=q.device)
        stride_tb = steps if times.shape[0] > 1 else 0
        options = _launch_options(q, v, block, family, penalty, causal)
        grid = (triton.cdiv(steps, block), batch * heads)
        _forward_kernel[grid](
            q, k, v, times, coef, out, lse, heads, steps, dim, vdim, stride_tb, **options
        )
        ctx.save_for_backward(q, k, v, times, coef, out, lse)
        ctx.options = options
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, times, coef, out, lse = ctx.saved_tensors
        options = ctx.options
        batch, heads, steps, dim = q.shape
        vdim = v.shape[-1]
        block = options["BLOCK_M"]
        delta = (grad_out.float() * out).sum(-1).contiguous()
        do = grad_out.to(v.dtype).contiguous()
        dq = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        dk = torch.empty(k.shape, dtype=torch.float32, device=q.device)
        dv = torch.empty(v.shape, dtype=torch.float32, device=q.device)
        blocks = triton.cdiv(steps, block)
        partial = torch.empty(batch, heads, blocks, NC, dtype=torch.float32, device=q.device)
        stride_tb = steps if times.shape[0] > 1 else 0
        args = (heads, steps, dim, vdim, stride_tb)
        grid = (blocks, batch * heads)
        _backward_keys_kernel[grid](
            q, k, v, do, times, coef, lse, delta, dk, dv, partial, *args, **options
        )
        _backward_queries_kernel[grid](q, k, v, do, times, coef, lse, delta, dq, *args, **options)
        dcoef = partial.sum(dim=(0, 2))
        return dq, dk, dv, None, dcoef, None, None, None, None, None


def attend(
    q_t, k_t, v_t, times, coefficients: Coefficients, *, family, penalty, causal, block_size, dtype
):
    """Run the kernel on rotated float32 operands cast to the input ``dtype``.

    ``q_t, k_t (B, H, T, D)``, ``v_t (B, H, T, Dv)`` in the rotating frame
    (`from_origin`); ``times`` the lags' clock ``(Bt, 1, T)``; ``family`` `AFA` or
    `RFA`; ``penalty`` one of ``PENALTY_*``; ``block_size`` the tile
    (`kernels.backend.tile`). Returns ``(B, H, T, Dv)`` float32.
    """
    if dtype not in KERNEL_DTYPES:
        raise TypeError(f"q, k, v must be one of {KERNEL_DTYPES} for the kernel, found {dtype}")
    q_t, k_t, v_t = (x.float() for x in (q_t, k_t, v_t))
    times = times.reshape(-1, times.shape[-1]).to(torch.float32).contiguous()
    coef = coefficients.pack(q_t.shape[1], q_t.device).contiguous()
    return _FilteringAttention.apply(
        q_t, k_t, v_t, times, coef, family, penalty, causal, tile(block_size), dtype
    )

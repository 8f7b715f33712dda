"""KLA's per-channel Kalman filter as a chunked Triton scan, forward and backward (seed 001).

Equals `kernels.ops.kla.scan.kla_scan_torch` (the torch form; the model is in the
`kernels.ops.kla` docstring): per channel, with ``phi_t = k_t^2 Lambda^v_t`` and
``b_t = k_t Lambda^v_t v_t``,

* precision (Thm 1, Cor. 1.1): ``(x_t, y_t) ~ M_t (x_{t-1}, y_{t-1})`` with
  ``M_t = [[1 + p_bar phi_t, a_bar^2 phi_t], [p_bar, a_bar^2]]`` and ``(x_{-1}, y_{-1}) ~
  (lam0, 1)``; ``lam_t = x_t / y_t``, ``var_t = y_t / x_t``. Every product is divided by its
  trace (the map is unchanged; entries stay in [0, 1], so ``p_bar = 0`` never overflows);
* mean (Cor. 2.2, eq. (20)): ``mu_t = g_t mu_{t-1} + u_t`` with
  ``g_t = a_bar (1 - phi_t var_t)`` in ``[0, a_bar]`` and ``u_t = b_t var_t``.

Kernel layout. One program per (batch row, block of ``BLOCK_C`` channels) walks the sequence in
chunks of ``CHUNK`` tokens. A chunk is a ``(CHUNK, BLOCK_C)`` tile (channels contiguous, so the
loads coalesce); `tl.associative_scan` runs the Moebius scan down its rows (``log2 CHUNK`` levels),
the carried homogeneous vector ``(x, y)`` of the previous chunks (renormalised to ``x + y = 1``)
turns the chunk prefixes into precisions, then the affine scan gives the means from the carried
``mu``. Rows past ``T`` load ``phi = p_bar = b = 0, a_bar = 1``: the identity of both scans, so the
last row of every tile is the carry. Everything is computed in fp32 whatever the input dtype.
The in-tile `tl.associative_scan` (depth ``2 log2 CHUNK``) was chosen over a sequential
in-register loop over the chunk's rows (depth ``CHUNK``) for its shorter dependency chain; the
choice and the sizes ``CHUNK``, ``BLOCK_C`` are not yet measured on a GPU
(``benchmarks/bench_triton.py --kla-chunks ... --kla-block ...`` sweeps them). Memory: ``phi``,
``b`` and the outputs ``var``, ``mu`` are (B, T, C) fp32 tensors, saved for the backward.

Backward (reverse scans, no recomputation of the forward scans: it reads the saved ``var`` and
``mu``). With ``r_t = 1 - phi_t var_t`` (so ``g_t = a_bar_t r_t`` and ``d var_t / d var_{t-1} =
g_t^2``) and upstream gradients ``dvar_t``, ``dmu_t``:

    mbar_t = dmu_t + g_{t+1} mbar_{t+1}                              (adjoint of mu_t)
    dg_t   = mbar_t mu_{t-1}
    Vbar_t = dvar_t + mbar_t b_t - dg_t a_bar_t phi_t + g_{t+1}^2 Vbar_{t+1}   (adjoint of var_t)
    dphi_t = -var_t^2 Vbar_t - dg_t a_bar_t var_t,     db_t = mbar_t var_t,
    da_t   = 2 a_bar_t var_{t-1} r_t^2 Vbar_t + r_t dg_t,     dp_t = r_t^2 Vbar_t,

with ``var_{-1} = 1 / lam0``, ``mu_{-1} = eta0 / lam0``; then ``d mu_{-1} = g_0 mbar_0`` and
``d var_{-1} = g_0^2 Vbar_0``. Both adjoints are affine reverse scans with gates in ``[0, 1]``
(bounded at any T), run with the same chunked tile walk from the last chunk to the first, rows
reversed in the tile. The derivation is the chain rule through ``var_t = 1 / (1 / (a_bar_t^2
var_{t-1} + p_bar_t) + phi_t)``; the chain ``phi, b -> k, Lambda^v, v`` and the broadcasting
reductions are left to torch autograd.

Shape legend
------------
B batch, T tokens, S the state shape ((D,) or (N, D)), C = prod(S) channels (flattened).
Tokens ``(B, T, *S)``, viewed ``(B, T, C)`` in the kernels; ``lam0``, ``eta0``: ``(B, *S)``.

The public function is `kla_scan_triton`; the entry point `kernels.ops.kla.kla_scan` dispatches
to it with ``backend="triton"`` (or ``"auto"`` on CUDA). This module imports the family's
`kernels.ops.kla.params` (validation, types) and never its torch forms.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.backend import use_triton
from kernels.ops.kla.params import KLAScanResult, KLAState, prepare

CHUNK = 64  # tokens per tile: 2 log2(64) = 12 scan levels at most per chunk (not tuned)
BLOCK_C = 16  # channels per program: small, so B * C / BLOCK_C programs fill a GPU (not tuned)


# --- kernels ------------------------------------------------------------------------------------


@triton.jit
def _mobius_combine(a1, b1, c1, d1, a2, b2, c2, d2):
    """``later @ earlier / trace``: (a1..d1) is the earlier 2x2 prefix, (a2..d2) the later."""
    alpha = a2 * a1 + b2 * c1
    beta = a2 * b1 + b2 * d1
    gamma = c2 * a1 + d2 * c1
    delta = c2 * b1 + d2 * d1
    inv = 1.0 / (alpha + delta)  # > 0: entries >= 0 and alpha >= a2 a1 > 0
    return alpha * inv, beta * inv, gamma * inv, delta * inv


@triton.jit
def _affine_combine(g1, u1, g2, u2):
    """``(g2, u2) o (g1, u1) = (g2 g1, g2 u1 + u2)``: (g1, u1) earlier, (g2, u2) later."""
    return g2 * g1, g2 * u1 + u2


@triton.jit
def _last_row(tile, rows, CHUNK: tl.constexpr):
    """Row ``CHUNK - 1`` of a (CHUNK, BLOCK_C) tile as a (BLOCK_C,) vector."""
    return tl.sum(tl.where(rows[:, None] == CHUNK - 1, tile, 0.0), axis=0)


@triton.jit
def _program(LAM0, MU0, C, BLOCK_C: tl.constexpr):
    """``(b, channels (BLOCK_C,), their mask, lam0, mu0)`` of this program's (B, C) slice."""
    pid_b = tl.program_id(0).to(tl.int64)  # batch offsets may pass 2^31 elements
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    cmask = cols < C
    lam0 = tl.load(LAM0 + pid_b * C + cols, mask=cmask, other=1.0)
    mu0 = tl.load(MU0 + pid_b * C + cols, mask=cmask, other=0.0)
    return pid_b, cols, cmask, lam0, mu0


@triton.jit
def _load_token(X, pid_b, t, c, s_b, s_t, s_c, mask, other: tl.constexpr):
    """Entries ``(pid_b, t, c)`` of a (B, T, C) token input of any strides, in fp32; masked
    entries read ``other``."""
    return tl.load(X + pid_b * s_b + t * s_t + c * s_c, mask=mask, other=other).to(tl.float32)


@triton.jit
def _gate(a, phi, var):
    """``g = a_bar (1 - phi var)``, the mean scan's gate."""
    # 1 - phi var = lam_prior / lam in [0, 1]; rounding may dip below 0 by an ulp: clamp
    return a * tl.maximum(1.0 - phi * var, 0.0)


@triton.jit
def _kla_fwd_kernel(
    PHI, BV, A, P, LAM0, MU0, VAR, MEAN,
    T, C,
    s_phi_b, s_phi_t, s_phi_c, s_bv_b, s_bv_t, s_bv_c,
    s_a_b, s_a_t, s_a_c, s_p_b, s_p_t, s_p_c,
    CHUNK: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    pid_b, cols, cmask, lam0, mu = _program(LAM0, MU0, C, BLOCK_C)
    rows = tl.arange(0, CHUNK)
    x = lam0 / (lam0 + 1.0)  # (lam0, 1) scaled to x + y = 1
    y = 1.0 / (lam0 + 1.0)
    for start in range(0, T, CHUNK):
        t = start + rows
        m = (t < T)[:, None] & cmask[None, :]
        tt = t[:, None]
        cc = cols[None, :]
        phi = _load_token(PHI, pid_b, tt, cc, s_phi_b, s_phi_t, s_phi_c, m, 0.0)
        bv = _load_token(BV, pid_b, tt, cc, s_bv_b, s_bv_t, s_bv_c, m, 0.0)
        a = _load_token(A, pid_b, tt, cc, s_a_b, s_a_t, s_a_c, m, 1.0)
        p = _load_token(P, pid_b, tt, cc, s_p_b, s_p_t, s_p_c, m, 0.0)
        a2 = a * a
        inv = 1.0 / (1.0 + p * phi + a2)  # leaf divided by its trace (> 1): entries in [0, 1]
        m00, m01, m10, m11 = tl.associative_scan(
            ((1.0 + p * phi) * inv, a2 * phi * inv, p * inv, a2 * inv), 0, _mobius_combine
        )
        xt = m00 * x[None, :] + m01 * y[None, :]  # > 0: m00 > 0 and x > 0
        yt = m10 * x[None, :] + m11 * y[None, :]
        var = yt / xt
        g = _gate(a, phi, var)
        gg, uu = tl.associative_scan((g, bv * var), 0, _affine_combine)
        mean = gg * mu[None, :] + uu
        out = pid_b * T * C + tt * C + cc
        tl.store(VAR + out, var, mask=m)
        tl.store(MEAN + out, mean, mask=m)
        x_new = _last_row(xt, rows, CHUNK)
        y_new = _last_row(yt, rows, CHUNK)
        x = x_new / (x_new + y_new)
        y = y_new / (x_new + y_new)
        mu = _last_row(mean, rows, CHUNK)


@triton.jit
def _kla_bwd_kernel(
    PHI, BV, A, P, LAM0, MU0, VAR, MEAN, DVAR, DMEAN,
    DPHI, DBV, DA, DP, DLAM0, DMU0,
    T, C,
    s_phi_b, s_phi_t, s_phi_c, s_bv_b, s_bv_t, s_bv_c,
    s_a_b, s_a_t, s_a_c, s_p_b, s_p_t, s_p_c,
    CHUNK: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    pid_b, cols, cmask, lam0, mu0 = _program(LAM0, MU0, C, BLOCK_C)
    cc = cols[None, :]
    rows = tl.arange(0, CHUNK)
    m_carry = tl.zeros((BLOCK_C,), dtype=tl.float32)  # mbar_{t0 + CHUNK}: 0 past the end
    v_carry = tl.zeros((BLOCK_C,), dtype=tl.float32)  # Vbar_{t0 + CHUNK}
    n_chunks = tl.cdiv(T, CHUNK)
    base = pid_b * T * C
    for i in range(n_chunks):
        t = (n_chunks - 1 - i) * CHUNK + (CHUNK - 1 - rows)  # row 0 is the latest token
        tt = t[:, None]
        m = (t < T)[:, None] & cmask[None, :]
        mn = (t + 1 < T)[:, None] & cmask[None, :]
        mp = (t >= 1)[:, None] & m
        first = (t == 0)[:, None]
        phi = _load_token(PHI, pid_b, tt, cc, s_phi_b, s_phi_t, s_phi_c, m, 0.0)
        bv = _load_token(BV, pid_b, tt, cc, s_bv_b, s_bv_t, s_bv_c, m, 0.0)
        a = _load_token(A, pid_b, tt, cc, s_a_b, s_a_t, s_a_c, m, 1.0)
        var = tl.load(VAR + base + tt * C + cc, mask=m, other=0.0)
        dvar = tl.load(DVAR + base + tt * C + cc, mask=m, other=0.0)
        dmean = tl.load(DMEAN + base + tt * C + cc, mask=m, other=0.0)
        var_prev = tl.load(VAR + base + (tt - 1) * C + cc, mask=mp, other=0.0)
        mean_prev = tl.load(MEAN + base + (tt - 1) * C + cc, mask=mp, other=0.0)
        var_prev = tl.where(first, (1.0 / lam0)[None, :], var_prev)
        mean_prev = tl.where(first, mu0[None, :], mean_prev)
        # g_{t+1}; past the end phi = var = 0, a = 1: gate 1 with zero input is the identity
        phi_n = _load_token(PHI, pid_b, tt + 1, cc, s_phi_b, s_phi_t, s_phi_c, mn, 0.0)
        a_n = _load_token(A, pid_b, tt + 1, cc, s_a_b, s_a_t, s_a_c, mn, 1.0)
        var_n = tl.load(VAR + base + (tt + 1) * C + cc, mask=mn, other=0.0)
        g_n = _gate(a_n, phi_n, var_n)
        # the forward's clamp of 1 - phi var at 0 (rounding) passes no gradient where active
        r_raw = 1.0 - phi * var
        live = r_raw > 0.0
        r = tl.where(live, r_raw, 0.0)
        gm, um = tl.associative_scan((g_n, dmean), 0, _affine_combine)
        mbar = gm * m_carry[None, :] + um
        dg = tl.where(live, mbar * mean_prev, 0.0)
        gv, uv = tl.associative_scan(
            (g_n * g_n, dvar + mbar * bv - dg * a * phi), 0, _affine_combine
        )
        vbar = gv * v_carry[None, :] + uv
        out = base + tt * C + cc
        tl.store(DPHI + out, -var * var * vbar - dg * a * var, mask=m)
        tl.store(DBV + out, mbar * var, mask=m)
        tl.store(DA + out, 2.0 * a * var_prev * r * r * vbar + r * dg, mask=m)
        tl.store(DP + out, r * r * vbar, mask=m)
        m_carry = _last_row(mbar, rows, CHUNK)
        v_carry = _last_row(vbar, rows, CHUNK)
    # token 0 reads the initial belief: d mu_{-1} = g_0 mbar_0, d var_{-1} = g_0^2 Vbar_0
    phi0 = _load_token(PHI, pid_b, 0, cols, s_phi_b, s_phi_t, s_phi_c, cmask, 0.0)
    a0 = _load_token(A, pid_b, 0, cols, s_a_b, s_a_t, s_a_c, cmask, 1.0)
    var0 = tl.load(VAR + base + cols, mask=cmask, other=0.0)
    g0 = _gate(a0, phi0, var0)
    dmu0 = g0 * m_carry
    tl.store(DMU0 + pid_b * C + cols, dmu0, mask=cmask)
    tl.store(DLAM0 + pid_b * C + cols, -g0 * g0 * v_carry / (lam0 * lam0), mask=cmask)


# --- launch and autograd ------------------------------------------------------------------------


def _strides(x: torch.Tensor) -> tuple[int, int, int]:
    return x.stride(0), x.stride(1), x.stride(2)


def _grid(batch: int, channels: int, block_c: int) -> tuple[int, int]:
    return (batch, triton.cdiv(channels, block_c))


class _KLAScan(torch.autograd.Function):
    """``(phi, b, a_bar, p_bar, lam0, mu0) -> (var, mu)``, all fp32 outputs of shape (B, T, C).

    Token inputs are (B, T, C) views of any strides (stride 0 for broadcast ones), ``lam0`` and
    ``mu0`` contiguous (B, C) fp32.
    """

    @staticmethod
    def forward(ctx, phi, bv, a_bar, p_bar, lam0, mu0, chunk, block_c):
        B, T, C = phi.shape
        var = torch.empty((B, T, C), dtype=torch.float32, device=phi.device)
        mean = torch.empty_like(var)
        _kla_fwd_kernel[_grid(B, C, block_c)](
            phi, bv, a_bar, p_bar, lam0, mu0, var, mean, T, C,
            *_strides(phi), *_strides(bv), *_strides(a_bar), *_strides(p_bar),
            CHUNK=chunk, BLOCK_C=block_c,
        )  # fmt: skip
        ctx.save_for_backward(phi, bv, a_bar, p_bar, lam0, mu0, var, mean)
        ctx.chunk, ctx.block_c = chunk, block_c
        return var, mean

    @staticmethod
    def backward(ctx, dvar, dmean):
        phi, bv, a_bar, p_bar, lam0, mu0, var, mean = ctx.saved_tensors
        B, T, C = var.shape
        # an output that did not reach the loss has gradient None: it contributes zero
        dvar = torch.zeros_like(var) if dvar is None else dvar.float().contiguous()
        dmean = torch.zeros_like(mean) if dmean is None else dmean.float().contiguous()
        grads = [torch.empty_like(var) for _ in range(4)]
        dlam0, dmu0 = torch.empty_like(lam0), torch.empty_like(mu0)
        _kla_bwd_kernel[_grid(B, C, ctx.block_c)](
            phi, bv, a_bar, p_bar, lam0, mu0, var, mean, dvar, dmean,
            *grads, dlam0, dmu0, T, C,
            *_strides(phi), *_strides(bv), *_strides(a_bar), *_strides(p_bar),
            CHUNK=ctx.chunk, BLOCK_C=ctx.block_c,
        )  # fmt: skip
        return (*grads, dlam0, dmu0, None, None)


# --- public function ----------------------------------------------------------------------------


def _check(k, chunk: int, block_channels: int) -> None:
    if not isinstance(k, torch.Tensor):
        raise TypeError(f"k must be a torch.Tensor, found {type(k).__name__}")
    use_triton("triton", k, {})  # raises for an unsupported dtype or device
    for name, size in (("chunk", chunk), ("block_channels", block_channels)):
        if not isinstance(size, int) or size < 2 or size & (size - 1):
            raise ValueError(f"{name} must be a power of two >= 2, found {size!r}")


def kla_scan_triton(
    k,
    value_precision,
    v,
    a_bar,
    p_bar,
    *,
    q=None,
    lam0=1.0,
    eta0=0.0,
    chunk: int = CHUNK,
    block_channels: int = BLOCK_C,
) -> KLAScanResult:
    """`kernels.ops.kla.kla_scan` as a chunked Triton scan (forward and backward).

    Same arguments, broadcasting, validation and result as `kla_scan` (seed 001 Thms 1-2,
    Cors 1.1, 2.1-2.2). Inputs of dtype float32, bfloat16 or float16 are upcast to fp32, the
    filter runs in fp32, and every result is returned in ``k``'s dtype. Differentiable w.r.t.
    every tensor argument (k, value_precision, v, a_bar, p_bar, q, lam0, eta0).

    Parameters
    ----------
    k, value_precision, v : tokens (B, T, *S) or broadcasting there.
    a_bar, p_bar, q : broadcasting to the token shape. lam0, eta0 : broadcasting to (B, *S).
    chunk : tokens per scanned tile (power of two). block_channels : channels per program
        (power of two).

    Returns
    -------
    KLAScanResult of (B, T, *S) tensors in ``k``'s dtype; ``state`` is (B, *S).

    Raises
    ------
    ValueError
        Everything `kla_scan` rejects; a dtype other than float32/bfloat16/float16; tensors not
        on CUDA without ``TRITON_INTERPRET=1``; ``chunk``/``block_channels`` not powers of two.
    """
    _check(k, chunk, block_channels)
    out_dtype = k.dtype

    def up(x):  # upcast before broadcasting, so broadcast gradients are summed in fp32
        return x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    k, lam_v, v, a_bar, p_bar, q, lam0, eta0, shape = prepare(
        up(k), up(value_precision), up(v), up(a_bar), up(p_bar), up(q), up(lam0), up(eta0)
    )
    B, T = shape[:2]
    C = math.prod(shape[2:])
    k_lam_v = k * lam_v
    phi = (k_lam_v * k).expand(shape).reshape(B, T, C)
    bv = (k_lam_v * v).expand(shape).reshape(B, T, C)
    lam0_flat = lam0.reshape(B, C).contiguous()
    mu0 = (eta0 / lam0).reshape(B, C).contiguous()
    variance, mean = _KLAScan.apply(
        phi,
        bv,
        a_bar.reshape(B, T, C),
        p_bar.reshape(B, T, C),
        lam0_flat,
        mu0,
        chunk,
        block_channels,
    )
    variance, mean = variance.view(shape), mean.view(shape)
    precision = 1.0 / variance  # = x / y of the reference: inf where var underflows to 0
    info_mean = precision * mean
    output = output_variance = None
    if q is not None:
        output, output_variance = (q * mean).to(out_dtype), (q * q * variance).to(out_dtype)
    precision, info_mean = precision.to(out_dtype), info_mean.to(out_dtype)
    state = KLAState(precision[:, -1], info_mean[:, -1])
    return KLAScanResult(
        precision,
        info_mean,
        mean.to(out_dtype),
        variance.to(out_dtype),
        output,
        output_variance,
        state,
    )

"""Robust Filter Attention, isotropic (seed 004 Algorithm 1, eqs. 9-11, B.3, D.1).

Each head models its (complex) features as eigen-coordinates of a linear SDE with isotropic
decay and per-feature rotation, ``lambda_k = -mu + i omega_k``, process noise ``sigma^2``,
key-side measurement noise ``eta^2`` and query-side (anchor) noise ``gamma^2``. A key ``k_j`` is
transported to the query time ``t_i`` by ``e^{lambda (t_i - t_j)}``; its residual against the
query has the lag-dependent variance of eq. (9),

    V(tau) = sigma~^2 (1 - e^{-2 mu tau}) + eta^2 e^{-2 mu tau} + gamma^2,   tau = |t_i - t_j|,
           = a e^{-2 mu tau} + b,   a = eta^2 - sigma~^2,  b = gamma^2 + sigma~^2,

with ``sigma~^2 = sigma^2 / (2 mu)`` (``|lambda_C| = 1``: the gain is absorbed by the
projections). ``a > 0`` is the integrative regime (precision rising with the lag), ``a < 0``
the diffusive one. Given ``sigma^2`` (the default, what the paper's runs learned, D.2 Note) the
``mu -> 0`` limit is the Brownian ``sigma^2 tau + eta^2 + gamma^2`` (B.4.2, the ALiBi limit);
given ``sigma~^2`` (``steady_state=True``, Algorithm 1) it is the constant ``eta^2 + gamma^2``.
``V`` is evaluated from its non-negative parts, never as ``a e^{-2 mu tau} + b``, which cancels
when ``sigma~^2 >> eta^2 + gamma^2`` (see `estimators.closed_forms.measurement`); ``a + b =
eta^2 + gamma^2 > 0`` is all positivity needs (the paper's ``|a| <= b`` is not required).

Per head (rotations ``Phi^-_i = e^{-i omega t_i}``, ``E_ij = e^{-mu |t_i - t_j|}``,
``P = 1/V``, ``B = log P``; Algorithm 1)::

    q~, k~, v~ = Phi^- q, Phi^- k, Phi^- v                       (RoPE-type rotation)
    |R_ij|^2   = |q_i|^2 + E_ij^2 |k_j|^2 - 2 E_ij Re(q~_i^H k~_j)  (eq. 10, one matmul)
    L_ij       = B_ij - kappa log(1 + P_ij |R_ij|^2 / nu),  kappa = (nu + d)/d   (eq. 11)
    A^         = softmax_j(tau_s L + M_causal),   A = A^ * E        (post-softmax decay)
    out_i      = Phi^+_i sum_j A_ij v~_j = sum_j A^_ij e^{lambda (t_i - t_j)} v_j

``d`` is the number of complex features per head, ``D / 2`` (the public code's count; E.1's
"d_k = 64" counts reals): with features that are the eigen-coordinates of a real d-dimensional
system this is the dimension of the residual, so ``kappa = (nu + d)/d`` is the Student-t
exponent of `estimators.irls` (family ``"power"``). Two facts the paper leaves implicit:

* ``nu -> inf`` does not give the Gaussian estimator: ``kappa log(1 + x/nu) -> x/d``, so the
  limit logit is ``B - P |R|^2 / d`` (pass ``nu=math.inf`` for it). The plain precision-weighted
  average, eq. (4), is the exponential kernel (M2.1) at ``nu = inf``: ``L = B``.
* The anchor of the residual is the query itself, so one call is one IRLS step from the
  measurement initialisation (seed 004 C.3, ``z^(1)_ii = z_i``), not the fixed point.

Ablations of seed 004 E.2 (each relative to the full model; flags are keyword options):

* M2.1 ``weight_kernel="exponential"``: ``L = B - P |R|^2 / nu`` (weight ``exp(-d^2/nu)``).
* M2.2 ``precision_prior=False``: noise removed, ``P = 1`` and ``B = 0`` at every lag (the
  decay ``E`` and the rotations stay).
* M2.3 ``precision_gate=False``: the gate ``P`` inside the log is frozen at its lag-0 value
  ``1 / (eta^2 + gamma^2)``; the additive ``B`` is kept. (The paper says only "a constant"; the
  public code uses ``1/sqrt(d)``. The lag-0 value makes M2.3 differ from M2 only through the
  lag dependence of the gate.)
* M2.4 ``rotate_values=False``: values are neither rotated nor counter-rotated (``E`` kept).
* M2.5 ``rotate_qk=False, rotate_values=False``: no rotation anywhere (decay-only dynamics).
* M2.6 ``unitary_limit=True``: no decay, no noise, no magnitude terms: ``L = Re(q~^H k~) /
  sqrt(D)``, ``A = A^``, values rotated and counter-rotated (phase-only, RoPER-like). The
  ``1/sqrt(D)`` scale is the dot-product convention; the paper gives none.

SC-RFA (M2) differs from RFA (M1) only in the frequencies and decays: pass a
`kernels.functional.positional.SpectralCoupling` as ``frequencies`` (decay ``b max omega_h``).

Cost: ``O(T^2 D)`` time, ``O(T^2 + T D)`` memory (the forward pass alone, without weights or
autograd, holds ``O(block T + T D)``). Queries are processed in blocks of ``block_size`` rows,
each against the keys it may see (the causal triangle only), so the ``(B, H, block, <= T)``
temporaries stay in cache and the masked half is never computed. With ``t=None`` (``t_i = i``)
the lag kernels are Toeplitz: they are evaluated once per call on a vector of ``T + 2 block``
lags, laid out as one ``(H, block, T + block)`` strip (a window view with its rows reversed),
and each block reads a slice of it. With explicit stamps the lags of each block are evaluated
from ``t``. There is no data-dependent Python control flow after the argument checks (the
block loop depends on shapes only), so ``torch.compile`` traces it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels import _validation
from kernels.backend import use_triton
from kernels.functional import baselines, complex_pairs, lags, positional

WEIGHT_KERNELS = ("student-t", "exponential")
# Default query rows per block: about 2^18 elements per (B, H, rows, <= T) temporary (1 MB in
# float32, the L2 size of the benchmark CPU), within [16, 256]: 32 rows at B H = 8, T = 1024,
# measured 10-20 % faster there than 64 or 128 rows.
_BLOCK_ELEMENTS = 2**18
_BLOCK_ROWS = (16, 256)


class LagKernel(NamedTuple):
    """Eq. (9) at given lags: ``E = e^{-mu tau}``, ``B = log P = -log V``, ``P = 1/V``."""

    decay: torch.Tensor
    log_precision: torch.Tensor
    precision: torch.Tensor


def lag_variance(
    lag_abs: torch.Tensor,
    *,
    decay,
    process_var,
    measurement_var,
    anchor_var,
    steady_state: bool = False,
) -> torch.Tensor:
    """Seed 004 eq. (9) residual variance ``V(tau)`` at lags ``tau >= 0`` (any broadcast shape).

    ``steady_state=False``: ``process_var`` is ``sigma^2`` and ``V = sigma^2 tau (1 -
    e^{-2 mu tau}) / (2 mu tau) + eta^2 e^{-2 mu tau} + gamma^2`` with its ``mu -> 0`` limit
    ``sigma^2 tau + eta^2 + gamma^2`` (`kernels.functional.lags.isotropic_variance`).
    ``steady_state=True``: ``process_var`` is ``sigma~^2`` and ``V = sigma~^2 (1 -
    e^{-2 mu tau}) + eta^2 e^{-2 mu tau} + gamma^2`` (Algorithm 1), ``1 - e^{-x}`` as
    ``-expm1(-x)``.
    """
    if steady_state:
        x = 2 * decay * lag_abs
        return -process_var * torch.expm1(-x) + measurement_var * torch.exp(-x) + anchor_var
    return lags.isotropic_variance(lag_abs, decay, process_var, measurement_var) + anchor_var


def rfa_lag_kernel(
    lag_abs: torch.Tensor,
    *,
    decay,
    process_var=0.0,
    measurement_var=1.0,
    anchor_var=0.0,
    steady_state: bool = False,
) -> LagKernel:
    """`LagKernel` (E, log P, P) of eq. (9) at lags ``tau = |t_i - t_j| >= 0``.

    ``log P = -log V`` is the additive bias and ``P`` the multiplicative gate of eq. (11). In
    the integrative regime (``a > 0``) it equals the paper's ``-log b - softplus(log(a/b) -
    2 mu tau)``, in the diffusive one ``-log b - log(1 - (|a|/b) e^{-2 mu tau})`` (B.4.1);
    the parameters broadcast against ``lag_abs``.
    """
    variance = lag_variance(
        lag_abs,
        decay=decay,
        process_var=process_var,
        measurement_var=measurement_var,
        anchor_var=anchor_var,
        steady_state=steady_state,
    )
    log_precision = -torch.log(variance)
    return LagKernel(torch.exp(-decay * lag_abs), log_precision, torch.exp(log_precision))


class _Config(NamedTuple):
    """Static choices and per-head ``(H, 1, 1)`` parameters of one call."""

    decay: torch.Tensor
    process_var: torch.Tensor
    measurement_var: torch.Tensor
    anchor_var: torch.Tensor
    temperature: torch.Tensor
    penalty: str  # "log": tau kappa log(1 + u); "linear": u; "none"
    neg_coef: torch.Tensor | None  # -tau kappa ("log" only; otherwise folded into the gate)
    gate_scale: torch.Tensor | None  # 1/nu (log), tau/nu or tau/d (linear)
    steady_state: bool
    precision_prior: bool
    precision_gate: bool
    unitary_limit: bool
    dot_scale: float


class _Terms(NamedTuple):
    """Lag-dependent factors of the logits; any may be None (absent)."""

    bias: torch.Tensor | None  # tau log P
    gq: torch.Tensor | None  # coefficient of |q_i|^2 in u
    gk: torch.Tensor | None  # coefficient of |k_j|^2 in u
    gs: torch.Tensor | None  # coefficient of Re(q~_i^H k~_j) in u
    decay: torch.Tensor | None  # E, applied after the softmax


def _terms(lag_abs: torch.Tensor, cfg: _Config) -> _Terms:
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


def _logits(s, qn, kn, terms: _Terms, cfg: _Config) -> torch.Tensor:
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


def _config(
    heads: int,
    n: int,
    like,
    *,
    decay,
    process_var,
    measurement_var,
    anchor_var,
    steady_state,
    nu,
    temperature,
    weight_kernel,
    precision_prior,
    precision_gate,
    unitary_limit,
) -> _Config:
    if weight_kernel not in WEIGHT_KERNELS:
        raise ValueError(f"weight_kernel must be one of {WEIGHT_KERNELS}, found {weight_kernel!r}")
    mu = baselines.head_parameter("decay", decay, heads, like)
    sigma2 = baselines.head_parameter("process_var", process_var, heads, like)
    eta2 = baselines.head_parameter("measurement_var", measurement_var, heads, like)
    gamma2 = baselines.head_parameter("anchor_var", anchor_var, heads, like)
    tau = baselines.head_parameter("temperature", temperature, heads, like, positive=True)
    if precision_prior and not unitary_limit:
        zero_lag = (eta2 + gamma2).detach()
        if (zero_lag <= 0).any():
            raise ValueError(
                "measurement_var + anchor_var must be > 0 (the lag-0 variance), found "
                f"{zero_lag.flatten().tolist()}"
            )
    infinite = isinstance(nu, (int, float)) and not isinstance(nu, bool) and math.isinf(nu)
    if infinite and nu < 0:
        raise ValueError(f"nu must be > 0, found {nu!r}")
    dof = None if infinite else baselines.head_parameter("nu", nu, heads, like, positive=True)
    if unitary_limit:  # L = tau Re(q~^H k~) / sqrt(D), carried by the gs term
        penalty, coef, gate_scale = "linear", None, None
    elif weight_kernel == "student-t" and dof is not None:
        penalty, coef, gate_scale = "log", -tau * (dof + n) / n, 1.0 / dof  # -tau kappa, 1/nu
    elif weight_kernel == "student-t":  # kappa log(1 + x/nu) -> x/d
        penalty, coef, gate_scale = "linear", None, tau / n
    elif dof is not None:
        penalty, coef, gate_scale = "linear", None, tau / dof
    else:  # exponential kernel at nu = inf: weights P, eq. (4)
        penalty, coef, gate_scale = "none", None, None
    return _Config(
        mu,
        sigma2,
        eta2,
        gamma2,
        tau,
        penalty,
        coef,
        gate_scale,
        steady_state,
        precision_prior,
        precision_gate,
        unitary_limit,
        1.0 / math.sqrt(2 * n),
    )


@_validation.overflow_warning
def rfa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    frequencies,
    decay=None,
    t=None,
    process_var=0.0,
    measurement_var=1.0,
    anchor_var=0.0,
    steady_state: bool = False,
    nu=math.inf,
    temperature=1.0,
    causal: bool = True,
    return_weights: bool = False,
    weight_kernel: str = "student-t",
    precision_prior: bool = True,
    precision_gate: bool = True,
    rotate_qk: bool = True,
    rotate_values: bool = True,
    unitary_limit: bool = False,
    block_size: int | None = None,
    backend: str = "auto",
) -> baselines.AttentionOutput:
    """Isotropic Robust Filter Attention (seed 004 Algorithm 1); see the module docstring.

    Parameters
    ----------
    q, k : (B, H, T, D) real pairs ``[re | im]`` of ``n = D/2`` complex features.
    v : (B, H, T, Dv), ``Dv`` even; ``Dv = D`` when ``rotate_values`` (the values share the
        frequencies).
    frequencies : (n,) or (H, n) rotation frequencies ``omega_k`` (``lambda_k = -mu + i
        omega_k``), or a `kernels.functional.positional.SpectralCoupling` (SC-RFA), which also
        sets the decay.
    decay : ``mu >= 0`` per head, scalar or (H,); required unless ``frequencies`` is a coupling.
    t : (T,) or (B, T) strictly increasing time stamps; default ``t_i = i`` (Toeplitz kernels).
    process_var : ``sigma^2 >= 0`` (or ``sigma~^2`` if ``steady_state``), scalar or (H,).
    measurement_var, anchor_var : ``eta^2, gamma^2 >= 0`` with ``eta^2 + gamma^2 > 0``.
    steady_state : read ``process_var`` as the steady-state ``sigma~^2 = sigma^2 / (2 mu)``.
    nu : Student-t degrees of freedom ``> 0`` (scalar or (H,)), or ``math.inf`` (limit).
    temperature : inverse temperature ``tau_s > 0`` of Algorithm 1 (scalar or (H,)).
    causal : keys ``j <= i`` only (default) or all keys.
    return_weights : also return ``A = A^ * E`` (B, H, T, T).
    weight_kernel, precision_prior, precision_gate, rotate_qk, rotate_values, unitary_limit :
        the ablations M2.1-M2.6 (module docstring).
    block_size : query rows per block (memory/speed only; the result does not depend on it);
        default about ``2^18 / (B H T)`` rows, within [16, 256].
    backend : ``"auto"`` (the fused kernel `kernels.triton.filtering_attention` for CUDA inputs
        when it supports the options, else torch), ``"torch"`` or ``"triton"`` (unsupported
        options raise ValueError; see `kernels.backend.use_triton`).

    Returns
    -------
    AttentionOutput(output (B, H, T, Dv) ``Phi^+_i sum_j A_ij v~_j``, weights (B, H, T, T) the
    decayed ``A = A^ * E`` applied to the rotated values (rows do not sum to 1 when ``mu > 0``)
    or None).
    """
    unsupported = {
        "return_weights": return_weights,
        "steady_state": steady_state,
        f"weight_kernel={weight_kernel!r}": weight_kernel != "student-t",
        "precision_prior=False": not precision_prior,
        "precision_gate=False": not precision_gate,
        "rotate_qk=False": not rotate_qk,
        "rotate_values=False": not rotate_values,
        "unitary_limit": unitary_limit,
    }
    if use_triton(backend, q, unsupported):
        from kernels.triton.filtering_attention import rfa_attention_triton

        output = rfa_attention_triton(
            q,
            k,
            v,
            frequencies=frequencies,
            decay=decay,
            t=t,
            process_var=process_var,
            measurement_var=measurement_var,
            anchor_var=anchor_var,
            nu=nu,
            temperature=temperature,
            causal=causal,
        )
        return baselines.AttentionOutput(output, None)
    batch, heads, steps, dim, vdim = _validation.check_qkv(q, k, v, even=True)
    n = dim // 2
    if rotate_values and vdim != dim:
        raise ValueError(
            f"v must have the feature size of q (D = {dim}) to be rotated with the same "
            f"frequencies, found {vdim}; pass rotate_values=False for other sizes"
        )
    if block_size is None:
        low, high = _BLOCK_ROWS
        block_size = max(low, min(high, _BLOCK_ELEMENTS // (batch * heads * steps)))
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, found {block_size!r}")
    times = _validation.check_times(t, steps, like=q)
    if times.shape[0] not in (1, batch):
        raise ValueError(f"t batch size must be 1 or {batch}, found {times.shape[0]}")
    freq, decay = positional.head_spectrum(
        frequencies, decay, heads=heads, num_frequencies=n, like=q
    )
    if decay is None:
        raise TypeError("decay is required unless frequencies is a SpectralCoupling")
    cfg = _config(
        heads,
        n,
        q,
        decay=decay,
        process_var=process_var,
        measurement_var=measurement_var,
        anchor_var=anchor_var,
        steady_state=steady_state,
        nu=nu,
        temperature=temperature,
        weight_kernel=weight_kernel,
        precision_prior=precision_prior,
        precision_gate=precision_gate,
        unitary_limit=unitary_limit,
    )

    rotation = positional.Rotation.at(times, freq)  # (B', H, T, D)
    q_rot = rotation.apply(q, sign=-1) if rotate_qk else q
    k_rot = rotation.apply(k, sign=-1) if rotate_qk else k
    v_rot = rotation.apply(v, sign=-1) if rotate_values else v
    q_norm = complex_pairs.squared_modulus(q).unsqueeze(-1)  # (B, H, T, 1), rotation-invariant
    k_norm = complex_pairs.squared_modulus(k).unsqueeze(-2)  # (B, H, 1, T)

    block = min(block_size, steps)
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
        baselines.future_keys(block, device=q.device), float("-inf")
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
    return baselines.AttentionOutput(out, weights)


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

"""Radial-tangential adaptive filter attention, RT-AFA (seed 000 section 5.4, Algorithm 2).

One RT-AFA layer is one iteration of the RT-Kalman IRLS of seed 000 section 5.3, vectorised as
attention. Features are eigen-coordinates stored as real pairs ``[re | im]`` (``D = 2n`` for
``n`` complex features, :mod:`kernels.ops.common.complex_pairs`) and rotate as
``e^{i omega_k t}``; with ``frequencies=None`` they are plain real features (no rotation, any
``D``). The geometry is that of ``R^D`` (seed 003 digest section 8 item 7): the radial
coordinate of ``x`` along a unit ``u`` is ``u . x = Re(u^H x)`` and ``P_T(u) = I - u u^T``.

For query ``i`` and key ``j`` with lag ``s_ij = t_i - t_j``, decay ``a >= 0`` and
``E_ij = e^{-a s_ij}``, the key and value pulled forward to ``t_i`` are
``k^_ij = E_ij e^{i omega s_ij} k_j`` and ``v^_ij = E_ij e^{i omega s_ij} v_j``. The frame of
query ``i`` is its value direction ``u_i = v_i / |v_i|`` (the current state estimate). Then

    r_ij = q_i - k^_ij,   l_ij = u_i . r_ij,   |d_ij|^2 = |P_T(u_i) r_ij|^2 = |r_ij|^2 - l_ij^2,
    A_r[i, j] = softmax_j(log P_r(s_ij) - tau_r log(1 + P_r(s_ij) l_ij^2 / nu_r)),
    A_t[i, j] = softmax_j(log P_t(s_ij) - tau_t log(1 + P_t(s_ij) |d_ij|^2 / nu_t)),
    m_i = u_i . sum_j A_r[i, j] v^_ij,                  (radial weighted average)
    w_i = P_T(u_i) sum_j A_t[i, j] v^_ij,               (tangential weighted average)
    u_i' = Norm(v_i + w_i) = Norm(u_i + w_i / |v_i|)   (first-order geodesic step), or
    u_i' = cos(th) u_i + sin(th) w_i / |w_i|,  th = |w_i| / |v_i|   (exact geodesic step),
    output_i = m_i u_i',

with the precisions ``P = 1 / V`` of the radial and tangential propagated variances (seed 000
5.2, corrected as in ``estimators.closed_forms.radial_tangential``: the covariance is
``V_r P_R(u_i) + V_t P_T(u_i)`` in the query's frame, digest 003 section 8 item 2)

    V_r(s) = sigma_r^2 (1 - e^{-2 a s}) / (2 a) + eta_r^2 e^{-2 a s},   s >= 0   (likewise V_t),

:func:`kernels.ops.common.lags.isotropic_variance` (``sigma^2 s + eta^2`` at ``a = 0``). At
``tau = 1`` the weight ``P / (1 + P l^2 / nu)`` is the precision times the Student-t weight of
section 5.3; ``nu = inf`` gives the Gaussian weights (precision only). So with
``q = k = v = S^-1 z`` (the measurements in eigen-coordinates) and the true dynamics the layer
is one iteration of ``estimators.rt_irls.rt_irls(..., init="query", max_iter=1)``: with
``step="first-order"``, or ``"geodesic"`` when ``exact_geodesic=True``.

Deviations from Algorithm 2 as printed, each forced by consistency with section 5.3:

* Keys are counter-rotated with ``Phi^-`` like queries (Algorithm 1). The printed
  ``Z~_k = Phi^+ . Z_k`` makes ``Re(Z~_q^H Z~_k)`` depend on ``t_i + t_j``, not on the lag, so
  it is neither the pulled-forward estimate of 3.5-3.6 nor invariant to a time shift.
  ``Z~_v`` (used, never defined) is ``Phi^- . Z_v`` as in Algorithm 1.
* Residuals and values are split in the *query's* frame ``u_i`` (5.3: ``l = u_i^H r_ij``,
  ``d = P_T(u_i) r_ij``, ``v_bar = P_T(u_i) sum w z^_ij``). The printed per-token split, each
  token in its own value frame (``m~_k = U_v^H Z~_k`` column by column), makes the value's
  tangential part ``Z~_v - U_v m~_v`` identically zero, so the layer could never turn a
  direction. The query-frame split costs one extra ``(T, T)`` Gram matrix
  ``Re(u~_i^H k~_j)``; memory stays ``O(T^2 + T D)``.
* The radial coordinate is real, ``Re(u^H x)``. The printed ``m~ = U^H Z~`` is complex; its
  imaginary part is the phase direction ``i u``, which is tangent to the sphere in ``R^{2n}``.
* The exact geodesic step turns by ``|w| / |v_i|``: ``w`` is a Cartesian offset at radius
  ``|v_i|`` (seed 000 5.3 prints the angle ``|w|``, which disagrees with its own first-order
  step; ``estimators.rt_irls`` docstring, check ``rt_irls.seed000-geodesic-angle``).
* The printed logits ``tau (-log(V + R^2 + eps))`` are the case ``nu = 1`` (4.1 absorbs ``nu``
  into the other parameters) with the temperature on the whole logit, i.e. the prior ``P^tau``.
  As in `kernels.ops.afa.isotropic_afa`, the temperature here sharpens the robust term
  only (4.1's exponential-log form ``exp(-tau log(1 + r^2/nu))``), so ``tau = 1`` is exactly
  the weight of 5.3 and, at equal radial and tangential noise, the weights are isotropic AFA's.

Non-causal keys (``causal=False``, ``s_ij < 0``) are pulled back with the same dynamics,
``E_ij = e^{a |s_ij|}``, and the backward variance (seed 000 A.3, as in isotropic AFA and
``rt_irls(causal=False)``):

    V(s) = e^{2 a |s|} (sigma^2 (1 - e^{-2 a |s|}) / (2 a) + eta^2),   s < 0.

Numerics. Every ``(T, T)`` quantity comes from two Gram matrices, ``Re(u~_i^H k~_j)`` and
``Re(q~_i^H k~_j)``, the lags and row norms; values enter through two ``(T, T) x (T, D)``
products. The residuals are formed already scaled by the precision, with coefficients
``sqrt(P / nu)``, ``sqrt(P / nu) E``, ``P E^2 / nu``, ... evaluated in log space, which stay
bounded where ``E`` grows (non-causal) because ``P`` decays as ``E^-2``; the non-causal value
decay joins the weights in log space. So float32 is stable at long sequences and as
``a -> 0``. On the uniform grid ``t = None`` the lag kernels are Toeplitz: they are evaluated
once per call on the ``2T - 1`` lags, and each block of (reversed) query rows reads them as
strided windows. Cost: ``O(T^2 D)`` time, ``O(T^2 + T D)`` memory (``O(block_size T + T D)``
without weights and gradients).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels._validation import check_qkv, check_times, overflow_warning
from kernels.ops.common.lags import isotropic_variance
from kernels.ops.common.rotation import Rotation
from kernels.ops.rt import params

# Below this squared angle the exact geodesic step uses the Taylor series of cos(th) and
# sin(th)/th (to th^4): their truncation errors th^6/720 and th^6/5040 are < 2e-21 there, and the
# series keeps the gradient finite at th = 0, where sqrt(th^2) is not differentiable.
_SERIES_BELOW = 1e-6


class RTAFAOutput(NamedTuple):
    """Result of :func:`rt_afa`.

    output : (B, H, T, D) the updated states ``m_i u_i'``.
    radial_weights, tangential_weights : (B, H, T, T) ``A_r``, ``A_t`` (rows sum to 1 over the
        visible keys, before the value decay ``E``), or None unless ``return_weights``.
    """

    output: torch.Tensor
    radial_weights: torch.Tensor | None
    tangential_weights: torch.Tensor | None


class _Kernels(NamedTuple):
    """Lag kernels of one block, each broadcasting against ``(B, H, C, K)``.

    prior : (2, ...) ``log P_r``, ``log P_t`` (``-inf`` on hidden keys).
    rad_q, rad_k : ``sqrt(P_r / nu_r)`` and ``sqrt(P_r / nu_r) E`` (0 on hidden keys).
    tan_q, tan_k : the same with ``P_t, nu_t``.
    tan_qq, tan_kk, tan_qk : ``P_t / nu_t``, ``P_t E^2 / nu_t``, ``2 P_t E / nu_t``.
    decay : causal ``E`` (0 on hidden keys); non-causal ``log E``.
    """

    prior: torch.Tensor
    rad_q: torch.Tensor
    rad_k: torch.Tensor
    tan_q: torch.Tensor
    tan_k: torch.Tensor
    tan_qq: torch.Tensor
    tan_kk: torch.Tensor
    tan_qk: torch.Tensor
    decay: torch.Tensor


def _floored_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``max(|x|, eps)`` over the last axis, keepdim; differentiable everywhere (also at 0)."""
    return (x * x).sum(-1, keepdim=True).clamp_min(eps * eps).sqrt()


def _geodesic(u: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``exp_u(x) = cos|x| u + sin|x| x / |x|`` for tangent ``x``; smooth at ``x = 0``."""
    th2 = (x * x).sum(-1, keepdim=True)
    small = th2 < _SERIES_BELOW
    th = torch.where(small, torch.ones_like(th2), th2).sqrt()  # unused branch kept finite
    cos = torch.where(small, 1 - th2 / 2 + th2 * th2 / 24, torch.cos(th))
    sinc = torch.where(small, 1 - th2 / 6 + th2 * th2 / 120, torch.sin(th) / th)
    return cos * u + sinc * x


def _log_variance(lag, decay, process_var, measurement_var, *, causal: bool):
    """``log V(s)`` of the module docstring; forward for ``s >= 0``, backward for ``s < 0``.

    The backward form is ``2 a |s| + log(V_fwd(|s|) - eta^2 expm1(-2 a |s|))`` (both terms of
    the sum are >= 0), so its growth stays in the exponent. Causal calls skip it (their
    ``s < 0`` entries are hidden).
    """
    span = lag.abs()
    forward = isotropic_variance(span, decay, process_var, measurement_var)
    if causal:
        return forward.log()
    x = 2 * decay * span
    backward = x + (forward - measurement_var * torch.expm1(-x)).log()
    return torch.where(lag < 0, backward, forward.log())


def _kernels(lag, hidden, a, process_var, measurement_var, log_nu, *, causal: bool) -> _Kernels:
    """Lag kernels at lags ``lag`` (``(Bt, 1, C, K)`` or a vector); ``hidden``: keys ``j > i``."""
    if causal:
        lag = lag.clamp_min(0)  # hidden (future) pairs: every exponential stays finite
    log_v = _log_variance(lag, a, process_var, measurement_var, causal=causal)  # (2, ...)
    log_e = -a * lag
    half = -0.5 * (log_v + log_nu)  # log sqrt(P / nu)
    scale, scale_e = half.exp(), (half + log_e).exp()
    prior = -log_v
    decay = log_e
    if causal:
        prior = prior.masked_fill(hidden, -math.inf)
        scale, scale_e = scale.masked_fill(hidden, 0), scale_e.masked_fill(hidden, 0)
        decay = log_e.exp().masked_fill(hidden, 0)
    tan_q, tan_k = scale[1], scale_e[1]
    return _Kernels(
        prior,
        scale[0],
        scale_e[0],
        tan_q,
        tan_k,
        tan_q * tan_q,
        tan_k * tan_k,
        2 * tan_q * tan_k,
        decay,
    )


@overflow_warning
def rt_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t=None,
    decay,
    frequencies,
    sigma_r2,
    sigma_t2,
    eta_r2,
    eta_t2,
    temperatures=1.0,
    nu=math.inf,
    causal: bool = True,
    return_weights: bool = False,
    exact_geodesic: bool = False,
    eps: float = 1e-12,
    block_size: int | None = 256,
) -> RTAFAOutput:
    """Radial-tangential adaptive filter attention (seed 000 Algorithm 2; module docstring).

    Parameters
    ----------
    q, k, v : (B, H, T, D) queries, keys and values (eigen-coordinates; real pairs ``[re | im]``
        when ``frequencies`` is given). ``v`` is the current state: its directions are the
        frames of the radial/tangential split.
    t : None (``t_i = i``), (T,) or (B, T) strictly increasing time stamps.
    decay : scalar or (H,), ``a >= 0``: ``Re(lambda) = -a`` (Algorithm 2's ``alpha^2``).
    frequencies : (H, D/2) rotation frequencies ``omega``, or None for real features without
        rotation (then any ``D``).
    sigma_r2, sigma_t2 : scalar or (H,), >= 0: radial and tangential process variances
        (``|lambda_C|^2`` absorbed).
    eta_r2, eta_t2 : scalar or (H,), > 0: measurement variances (the zero-lag variances; a
        noiseless measurement would have infinite precision).
    temperatures : ``tau`` or ``(tau_r, tau_t)``, each scalar or (H,), >= 0: exponents of the
        robust terms (``tau = 1``: the Student-t weight of 5.3; 0: precision weights only).
    nu : ``nu`` or ``(nu_r, nu_t)``, each scalar or (H,), > 0; ``inf`` (default) gives the
        Gaussian weights, 1 Algorithm 2's printed logits.
    causal : keys ``j <= i`` only (default) or all keys (module docstring).
    return_weights : also return ``A_r`` and ``A_t`` (B, H, T, T).
    exact_geodesic : exact spherical step instead of the first-order ``Norm(v_i + w_i)``.
    eps : > 0, floor on ``|v_i|`` and ``|v_i + w_i|`` in the normalisations, so a zero value
        (which has no direction) gives a finite output; exact for norms above it.
    block_size : query rows processed at once (None: all). Bounds the ``(rows, T)`` working
        set; a causal block reads only the keys up to its last row.

    Returns
    -------
    RTAFAOutput with ``output`` (B, H, T, D) and the weights (or None).
    """
    batch, heads, steps, dim, dim_v = check_qkv(q, k, v, even=frequencies is not None)
    if dim_v != dim:
        raise ValueError(
            f"v must have the feature size of q and k (its directions frame their residuals): "
            f"expected {dim}, found {dim_v}"
        )
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, found {type(causal).__name__}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        raise ValueError(f"eps must be a positive number, found {eps!r}")
    if block_size is not None and (
        isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1
    ):
        raise ValueError(f"block_size must be a positive integer or None, found {block_size!r}")
    times = check_times(t, steps, like=q)
    a = params.per_head("decay", decay, heads, q)
    # Radial and tangential parameters stacked on a leading axis of 2: one kernel evaluation.
    process_var = torch.stack(
        (
            params.per_head("sigma_r2", sigma_r2, heads, q),
            params.per_head("sigma_t2", sigma_t2, heads, q),
        )
    ).unsqueeze(1)  # (2, 1, H, 1, 1)
    measurement_var = torch.stack(
        (
            params.per_head("eta_r2", eta_r2, heads, q, positive=True),
            params.per_head("eta_t2", eta_t2, heads, q, positive=True),
        )
    ).unsqueeze(1)
    log_nu = (
        torch.stack(
            [
                params.per_head(f"nu[{i}]", x, heads, q, positive=True, inf_ok=True)
                for i, x in enumerate(params.pair("nu", nu))
            ]
        )
        .log()
        .unsqueeze(1)
    )
    tau_r, tau_t = (
        params.per_head(f"temperatures[{i}]", x, heads, q)
        for i, x in enumerate(params.pair("temperatures", temperatures))
    )

    # Counter-rotate into the co-rotating frame: x~_j = e^{-i omega (t_j - t_0)} x_j. Measuring
    # time from the first stamp keeps the phases small; only their differences matter.
    qt, kt, vt = q, k, v
    phase = None
    if frequencies is not None:
        omega = params.as_tensor(frequencies, q)
        if omega.shape != (heads, dim // 2):
            raise ValueError(
                f"frequencies must have shape (H, D/2) = ({heads}, {dim // 2}), "
                f"found {tuple(omega.shape)}"
            )
        if not torch.compiler.is_compiling() and not torch.isfinite(omega.detach()).all():
            raise ValueError("frequencies must be finite, found NaN or inf")
        phase = Rotation.at(times - times[..., :1], omega)  # (B|1, H, T, D)
        qt, kt, vt = (phase.apply(x, sign=-1) for x in (q, k, v))
    v_norm = _floored_norm(v, eps)
    ut = vt / v_norm
    q_rad = (v * q).sum(-1, keepdim=True) / v_norm  # u_i . q_i, (B, H, T, 1)
    q_sq = (q * q).sum(-1, keepdim=True)
    k_sq = (k * k).sum(-1).unsqueeze(-2)  # (B, H, 1, T)

    lag_model = (a, process_var, measurement_var, log_nu)
    # Rows of a block are processed in reverse order, so that with t_i = i the lag kernels of
    # the block, Toeplitz in (i, j), are Hankel in (reversed i, j): windows (unfold views) of
    # one vector over the 2T - 1 lags s = T - 1, ..., -(T - 1), evaluated once per call.
    if t is None:
        lag_vec = (steps - 1) - torch.arange(2 * steps - 1, device=q.device, dtype=q.dtype)
        lag_vec = lag_vec.view(1, 1, 1, -1)
        table = _kernels(lag_vec, lag_vec < 0, *lag_model, causal=causal)
        table = _Kernels(*(x.squeeze(-2) for x in table))  # (..., H, 2T - 1)
    rows = steps if block_size is None else block_size
    outs, weights_r, weights_t = [], [], []
    for start in range(0, steps, rows):
        stop = min(start + rows, steps)
        keys = stop if causal else steps
        if t is None:
            # Reversed row 0 is i = stop - 1, lag index T - 1 - i. Slicing the vector before
            # unfolding keeps the backward pass O(rows * keys), not O(T * keys) per block.
            first = steps - stop
            span = slice(first, first + stop - start + keys - 1)
            kern = _Kernels(*(x[..., span].unfold(-1, keys, 1) for x in table))
        else:
            lag = times[..., start:stop].flip(-1)[..., :, None] - times[..., None, :keys]
            hidden = lag < 0
            kern = _kernels(lag, hidden, *lag_model, causal=causal)
        q_rad_b, q_sq_b, u_b, qt_b, vt_b, v_norm_b = (
            x[..., start:stop, :].flip(-2) for x in (q_rad, q_sq, ut, qt, vt, v_norm)
        )
        key_t = kt[..., :keys, :].mT
        gram_u = u_b @ key_t  # Re(u~_i^H k~_j)
        gram_q = qt_b @ key_t  # Re(q~_i^H k~_j)
        # Precision-scaled residuals; the sign of l is immaterial (only l^2 enters). Contiguous
        # (B, H, C, K) operands come first: the kernels may be strided windows, and an output
        # takes the layout of its first full-size operand.
        ell_r = torch.addcmul(gram_u * kern.rad_k, kern.rad_q, q_rad_b, value=-1)
        ell_t = torch.addcmul(gram_u * kern.tan_k, kern.tan_q, q_rad_b, value=-1)
        neg_r_sq = torch.addcmul(gram_q * kern.tan_qk, kern.tan_qq, q_sq_b, value=-1)
        neg_r_sq = torch.addcmul(neg_r_sq, kern.tan_kk, k_sq[..., :keys], value=-1)  # -P|r|^2/nu
        # P |d|^2 / nu = P (|r|^2 - l^2) / nu >= 0 exactly (Pythagoras); round-off can make the
        # difference slightly negative.
        d_sq = torch.addcmul(neg_r_sq, ell_t, ell_t).neg().clamp_min(0)
        logit_r = torch.log1p(ell_r * ell_r).mul_(-tau_r).add_(kern.prior[0])
        logit_t = torch.log1p(d_sq).mul_(-tau_t).add_(kern.prior[1])
        values = vt[..., :keys, :]
        attn = []
        for logit in (logit_r, logit_t):
            if causal:
                weight = torch.softmax(logit, dim=-1)
                attn.append((weight, (weight * kern.decay) @ values))
            else:  # E = e^{a |s|} grows for s < 0: combine it with the weights in log space
                norm = torch.logsumexp(logit, dim=-1, keepdim=True)
                weight = torch.exp(logit - norm) if return_weights else None
                attn.append((weight, torch.exp(logit + kern.decay - norm) @ values))
        (attn_r, y_r), (attn_t, y_t) = attn  # y: sum_j A v^_ij in the co-rotating frame
        m = (u_b * y_r).sum(-1, keepdim=True)
        w = y_t - u_b * (u_b * y_t).sum(-1, keepdim=True)
        step = _geodesic(u_b, w / v_norm_b) if exact_geodesic else vt_b + w
        # exp_u keeps |u| = 1 only to round-off: renormalise both steps.
        direction = step / _floored_norm(step, eps)
        outs.append((m * direction).flip(-2))
        if return_weights:
            pad = (0, steps - keys)
            for store, weight in ((weights_r, attn_r), (weights_t, attn_t)):
                weight = weight.expand(batch, heads, stop - start, keys)
                store.append(torch.nn.functional.pad(weight.flip(-2), pad))
    output = torch.cat(outs, dim=-2)
    if phase is not None:
        output = phase.apply(output)
    if not return_weights:
        return RTAFAOutput(output, None, None)
    return RTAFAOutput(output, torch.cat(weights_r, dim=-2), torch.cat(weights_t, dim=-2))

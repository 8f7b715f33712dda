"""The Gaussian unrolled AFA (``nu = inf``, no damping) as causal linear attention, chunked.

At ``nu = inf`` every robust weight is 1 and the recursion of
:func:`kernels.ops.unrolled.unrolled_afa` is the Kalman filter of the isotropic model
per head (seed 000 B.2 with ``w = 1``; seed 000 3.1 for the model). Its variance then does not
depend on the data, and its mean is linear in the measurements, so the loop over time can be
replaced by a few whole-sequence operations. Per head, with steps ``h_i = t_i - t_{i-1}``,
``s_i = e^{-2 a h_i}``, ``q_i = sigma^2 (1 - e^{-2 a h_i}) / (2 a)`` and ``r = eta^2``:

1. Variance (the Riccati recursion ``v_i = (s_i v_{i-1} + q_i) r / (s_i v_{i-1} + q_i + r)``) is
   a Moebius map of ``v_{i-1}`` with matrix ``M_i = [[s_i r, q_i r], [s_i, q_i + r]]``; the
   prefix products ``M_i ... M_1`` come from KLA's scan of Moebius maps
   (`kernels.ops.kla.scan.prefix_scan` with `mobius_combine`, Hillis-Steele, each
   product divided by its trace, which a Moebius map does not see).
2. Gains ``g_i = v_i^- / (v_i^- + r)`` with ``v_i^- = s_i v_{i-1} + q_i``; the mean recursion
   ``x_i = (1 - g_i) e^{-a h_i} e^{i omega h_i} x_{i-1} + g_i z_i`` unrolls to

       x_i = e^{i omega t_i} sum_{j <= i} D_ij e^{-i omega t_j} u_j,
       D_ij = prod_{k = j+1}^{i} (1 - g_k) e^{-a h_k} = exp(S_i - S_j),   S_i = sum_{k<=i} log(.)

   with ``u_j = g_j z_j`` and ``u_0 = m_0 + g_0 (z_0 - m_0)`` (prior mean ``m_0``; the diffuse
   start has ``g_0 = 1``). Only ``D_ij <= 1`` is formed (``j <= i``; the other entries are masked
   before the exponential) and only unit-modulus rotations, so nothing grows with ``t``;
   ``S`` is accumulated in float64.

Cost per chunk of ``C`` steps: ``O(C^2 D)`` time and ``O(C^2)`` memory per sequence and head
(the ``(C, C)`` matrix ``D``); chunks of `CHUNK` steps carry the filter's prediction to the
next chunk as its prior, so a sequence of ``T`` steps costs ``O(T C D)`` and never a
``(T, T)`` matrix. Equal to the loop to round-off (``tests/kernels/test_kalman_attention.py``).
"""

from __future__ import annotations

import math

import torch

from kernels._validation import check_kalman_attention, overflow_warning
from kernels.ops.common import complex_pairs
from kernels.ops.common.lags import isotropic_variance, relaxation
from kernels.ops.kla.scan import mobius_combine, prefix_scan

# Steps per chunk: the (C, C) decay matrix per sequence and head bounds the memory.
CHUNK = 256


def _finite_by_design(result) -> tuple:
    """`kalman_attention`'s outputs less the first prediction variance, which is infinite by
    design under a diffuse prior (nothing is known before the first measurement)."""
    output, variance, prediction, prediction_variance = result
    return output, variance, prediction, prediction_variance[..., 1:]


@overflow_warning(outputs=_finite_by_design)
def kalman_attention(
    values: torch.Tensor,
    times: torch.Tensor,
    *,
    decay: torch.Tensor,
    frequencies: torch.Tensor,
    process_var: torch.Tensor,
    measurement_var: torch.Tensor,
    gain_scale: torch.Tensor | None = None,
    prior_mean: torch.Tensor | None = None,
    prior_variance: torch.Tensor | None = None,
    chunk: int = CHUNK,
):
    """The Kalman filter of the isotropic model per head, by chunked causal attention.

    values : (B, H, T, D) eigen-coordinates ``[re | im]``, ``D = 2n``.
    times : (B or 1, 1, T) strictly increasing time stamps (checked by the caller).
    decay, process_var, measurement_var : (H,) ``a >= 0``, ``sigma^2 >= 0``, ``eta^2 > 0``.
    frequencies : (H, n) ``omega``.
    gain_scale : (H,) ``c`` in (0, 1] or None (1): the mean uses the gain ``c g_i`` (``K`` damped
        inner iterations of a fixed target give ``c = 1 - (1 - delta)^K``); the variance does not.
    prior_mean, prior_variance : (B, H, D) and (B, H) at ``t_0``, or both None (diffuse).

    Returns ``(output, variance, prediction, prediction_variance)``: (B, H, T, D), (B', H, T),
    (B, H, T, D), (B', H, T), the fields of
    :class:`~kernels.ops.unrolled.UnrolledAFAResult` before inversion (``B'`` is 1
    when the times are shared and no prior variance is given per sequence).
    """
    check_kalman_attention(values, times, decay=decay, frequencies=frequencies,
                           process_var=process_var, measurement_var=measurement_var,
                           gain_scale=gain_scale, prior_mean=prior_mean,
                           prior_variance=prior_variance)  # fmt: skip
    steps = values.shape[2]
    pieces = []
    mean, variance = prior_mean, prior_variance
    for start in range(0, steps, chunk):
        stop = min(start + chunk, steps)
        if start > 0:  # the previous chunk's last estimate, predicted to this chunk's t_0
            h = times[..., start] - times[..., start - 1]  # (B', 1)
            mean, variance = _predict(
                pieces[-1][0][:, :, -1], pieces[-1][1][:, :, -1], h, decay, frequencies, process_var
            )
        pieces.append(
            _chunk(
                values[:, :, start:stop],
                times[..., start:stop],
                decay,
                frequencies,
                process_var,
                measurement_var,
                gain_scale,
                mean,
                variance,
            )
        )
    return tuple(torch.cat(parts, dim=2) for parts in zip(*pieces, strict=True))


def _predict(x, v, h, decay, frequencies, process_var):
    """One prediction step ``(B, H, D), (B', H)`` over steps ``h`` (B', 1)."""
    ah = decay * h  # (B', H)
    angle = frequencies * h.unsqueeze(-1)  # (B', H, n)
    x = complex_pairs.rotate(x, torch.cos(angle), torch.sin(angle)) * torch.exp(-ah).unsqueeze(-1)
    return x, isotropic_variance(h, decay, process_var, v)


def _chunk(values, times, decay, frequencies, process_var, r, scale, prior_mean, prior_variance):
    batch, heads, steps, dim = values.shape
    r_ = r.view(1, heads, 1)
    h = (times[..., 1:] - times[..., :-1]).expand(-1, heads, -1)  # (B', H, C-1)
    ah = decay.view(1, heads, 1) * h
    s = torch.exp(-2 * ah)
    q = process_var.view(1, heads, 1) * h * relaxation(2 * ah)

    # 1. variances: v_0 from the prior (diffuse: r), then the Moebius prefix products
    if prior_mean is None:
        v0 = r.view(1, heads).expand(times.shape[0], heads)
        pred_v0 = torch.full_like(v0, math.inf)
    else:
        pred_v0 = prior_variance
        v0 = pred_v0 * r / (pred_v0 + r)

    # the entries of M_i, each (B', C-1, H): prefix_scan runs along axis 1
    entries = tuple(x.transpose(1, 2) for x in (s * r_, q * r_, s, q + r_))
    alpha, beta, gamma, delta = (
        x.transpose(1, 2) for x in prefix_scan(mobius_combine, entries, algorithm="hillis-steele")
    )
    v0_ = v0.unsqueeze(-1)
    later = (alpha * v0_ + beta) / (gamma * v0_ + delta)
    variance = torch.cat((v0_, later), dim=-1)  # (B', H, C)
    pred_variance = torch.cat((pred_v0.unsqueeze(-1), s * variance[..., :-1] + q), dim=-1)

    # 2. gains c g_i and the causal decay matrix D_ij = exp(S_i - S_j), j <= i, from
    # 1 - c g = ((1 - c) v^- + r) / (v^- + r)
    c = torch.ones_like(r_) if scale is None else scale.view(1, heads, 1)
    later_v = pred_variance[..., 1:]
    log_keep = torch.log((1 - c) * later_v + r_) - torch.log(later_v + r_) - ah
    cumulative = torch.cumsum(log_keep.double(), dim=-1)
    cumulative = torch.nn.functional.pad(cumulative, (1, 0))  # S_0 = 0
    exponent = cumulative.unsqueeze(-1) - cumulative.unsqueeze(-2)  # (B', H, C, C)
    causal = torch.ones(steps, steps, dtype=torch.bool, device=values.device).tril()
    weights = exponent.masked_fill(~causal, -math.inf).exp().to(values.dtype)

    gain = c * later_v / (later_v + r_)  # (B', H, C-1)
    first = values[:, :, :1]
    if prior_mean is not None:
        g0 = (c.view(1, heads) * pred_v0 / (pred_v0 + r)).view(*pred_v0.shape, 1, 1)
        first = prior_mean.unsqueeze(2) + g0 * (first - prior_mean.unsqueeze(2))
    inputs = torch.cat((first, gain.unsqueeze(-1) * values[:, :, 1:]), dim=2)

    elapsed = (times - times[..., :1]).unsqueeze(-1)  # (B', 1, C, 1)
    angle = frequencies.view(1, heads, 1, -1) * elapsed  # (B', H, C, n)
    cos, sin = torch.cos(angle), torch.sin(angle)
    output = complex_pairs.rotate(
        _causal_sum(weights, complex_pairs.rotate(inputs, cos, -sin)), cos, sin
    )

    # the one-step predictions x_i^- = e^{(-a + i omega) h_i} x_{i-1}
    step_angle = frequencies.view(1, heads, 1, -1) * h.unsqueeze(-1)
    shrink = torch.exp(-ah).unsqueeze(-1)
    later_pred = complex_pairs.rotate(
        output[:, :, :-1], torch.cos(step_angle) * shrink, torch.sin(step_angle) * shrink
    )
    first_pred = torch.zeros_like(values[:, :, :1]) if prior_mean is None else prior_mean
    prediction = torch.cat(
        (first_pred.view(batch, heads, 1, dim).expand(batch, heads, 1, dim), later_pred), dim=2
    )
    return output, variance, prediction, pred_variance


def _causal_sum(weights: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """``weights (B', H, C, C) @ inputs (B, H, C, D)``; shared weights (``B' = 1``) multiply all
    sequences in one ``(C, C) @ (C, B D)`` product per head instead of a broadcast copy."""
    batch, heads, steps, dim = inputs.shape
    if weights.shape[0] == batch:
        return weights @ inputs
    stacked = inputs.permute(1, 2, 0, 3).reshape(heads, steps, batch * dim)
    return (weights[0] @ stacked).view(heads, steps, batch, dim).permute(2, 0, 1, 3)


__all__ = ["CHUNK", "kalman_attention"]

"""Positional softmax-attention baselines on ``(B, H, T, D)`` (seed 004 E.2; seed 000 4.2).

* `softmax_attention`: plain scaled dot-product attention (the seed 000 Fig. 3 baseline adds a
  positional embedding to its input, `kernels.layers.baselines.SoftmaxAttention`).
* `rope_attention` (B1): rotary embedding, ``q_i e^{i omega t_i}``, ``k_j e^{i omega t_j}`` on
  the ``[re | im]`` halves of each head (the "rotate-half" pairing), so the score
  ``Re(conj(q_i) k_j e^{-i omega (t_i - t_j)})`` depends on the lag only (Su et al.).
* `alibi_attention` (B2): ``q_i . k_j / sqrt(D) - m_h |t_i - t_j|`` with ALiBi's slopes
  (`kernels.ops.common.positional.alibi_slopes`); on causal pairs the bias is
  ``-m_h (t_i - t_j)``.
* `decayed_rope_attention` (B3; B4 = SC-RoPE with a `positional.SpectralCoupling`): RoPE with a
  per-head exponential decay ``E_ij = e^{-mu_h |t_i - t_j|}``. The paper says only "decay
  applied to attention scores ... as in RFA"; ``decay_mode="post-softmax"`` (default) is RFA's
  ``A = softmax(.) * E`` (also the public code's choice), ``"logit"`` adds ``-mu_h |t_i - t_j|``
  to the scores instead.

Every function takes real time stamps ``t`` ((T,) or (B, T), strictly increasing; default
``t_i = i``) and returns `AttentionOutput`. Without weights and post-softmax decay the work is
done by ``torch.nn.functional.scaled_dot_product_attention``; otherwise by an explicit softmax.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels import _validation
from kernels.ops.baselines.params import lag_abs, rotary, scale_of
from kernels.ops.common import positional
from kernels.ops.common.attention import AttentionOutput, future_keys, head_parameter

DECAY_MODES = ("post-softmax", "logit")


def _attend(q, k, v, *, scale, causal, return_weights, bias=None, post=None) -> AttentionOutput:
    """``softmax(q k^T scale + bias + M) * post @ v``; ``bias``/``post`` broadcast to (B,H,T,T)."""
    steps = q.shape[-2]
    if post is None and not return_weights:
        if bias is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        else:
            mask = bias
            if causal:
                mask = bias.masked_fill(future_keys(steps, device=q.device), float("-inf"))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), scale=scale)
        return AttentionOutput(out, None)
    scores = (q @ k.transpose(-1, -2)) * scale
    if bias is not None:
        scores = scores + bias
    if causal:
        scores = scores.masked_fill(future_keys(steps, device=q.device), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if post is not None:
        weights = weights * post
    return AttentionOutput(weights @ v, weights if return_weights else None)


@_validation.overflow_warning
def softmax_attention(
    q, k, v, *, scale=None, causal: bool = True, return_weights: bool = False
) -> AttentionOutput:
    """Plain ``softmax(q k^T / sqrt(D) + M) v`` (no positional information).

    Shapes: q, k (B, H, T, D); v (B, H, T, Dv) -> output (B, H, T, Dv), weights (B, H, T, T).
    """
    _, _, _, dim, _ = _validation.check_qkv(q, k, v)
    return _attend(
        q, k, v, scale=scale_of(scale, dim), causal=causal, return_weights=return_weights
    )


@_validation.overflow_warning
def rope_attention(
    q,
    k,
    v,
    *,
    t=None,
    frequencies=None,
    base: float = 10000.0,
    scale=None,
    causal: bool = True,
    return_weights: bool = False,
) -> AttentionOutput:
    """Rotary attention (B1): ``softmax(Re(q~_i^H k~_j) / sqrt(D) + M) v``, ``x~ = x e^{iwt}``.

    Parameters
    ----------
    q, k : (B, H, T, D) with D even, ``[re | im]`` halves (feature ``k`` pairs with ``k + D/2``).
    v : (B, H, T, Dv).
    t : (T,) or (B, T) time stamps; angles ``omega_k t_i``.
    frequencies : (D/2,) or (H, D/2); default `positional.rope_frequencies` with ``base``.
    scale : score scale, default ``1/sqrt(D)``.
    """
    q_rot, k_rot, _, _, _, dim = rotary(q, k, v, t, frequencies, None, base)
    return _attend(
        q_rot, k_rot, v, scale=scale_of(scale, dim), causal=causal, return_weights=return_weights
    )


@_validation.overflow_warning
def alibi_attention(
    q,
    k,
    v,
    *,
    t=None,
    slopes=None,
    scale=None,
    causal: bool = True,
    return_weights: bool = False,
) -> AttentionOutput:
    """ALiBi (B2): ``softmax(q_i . k_j / sqrt(D) - m_h |t_i - t_j| + M) v``.

    ``slopes`` (H,) default `positional.alibi_slopes`; shapes as in `softmax_attention`.
    """
    _, heads, steps, dim, _ = _validation.check_qkv(q, k, v)
    times = _validation.check_times(t, steps, like=q)
    if times.shape[0] not in (1, q.shape[0]):
        raise ValueError(f"t batch size must be 1 or {q.shape[0]}, found {times.shape[0]}")
    if slopes is None:
        slopes = positional.alibi_slopes(heads, dtype=q.dtype, device=q.device)
    m = head_parameter("slopes", slopes, heads, q)
    bias = -m * lag_abs(times)
    return _attend(
        q, k, v, scale=scale_of(scale, dim), causal=causal, return_weights=return_weights, bias=bias
    )


@_validation.overflow_warning
def decayed_rope_attention(
    q,
    k,
    v,
    *,
    decay=None,
    frequencies=None,
    t=None,
    decay_mode: str = "post-softmax",
    base: float = 10000.0,
    scale=None,
    causal: bool = True,
    return_weights: bool = False,
) -> AttentionOutput:
    """Decayed RoPE (B3) and SC-RoPE (B4): RoPE scores with a per-head decay ``mu_h >= 0``.

    ``decay_mode="post-softmax"``: ``A = softmax(s + M) * e^{-mu |t_i - t_j|}`` (rows no longer
    sum to 1, as RFA's ``A^ * E``); ``"logit"``: ``softmax(s - mu |t_i - t_j| + M)``. Pass a
    `positional.SpectralCoupling` as ``frequencies`` for SC-RoPE (it sets the decay too).
    Other arguments as in `rope_attention`; ``decay`` is a scalar or (H,).
    """
    if decay_mode not in DECAY_MODES:
        raise ValueError(f"decay_mode must be one of {DECAY_MODES}, found {decay_mode!r}")
    if decay is None and not isinstance(frequencies, positional.SpectralCoupling):
        raise TypeError("decay is required unless frequencies is a SpectralCoupling")
    q_rot, k_rot, times, decay, heads, dim = rotary(q, k, v, t, frequencies, decay, base)
    mu = head_parameter("decay", decay, heads, q)
    lags = lag_abs(times)
    kwargs = {"scale": scale_of(scale, dim), "causal": causal, "return_weights": return_weights}
    if decay_mode == "logit":
        return _attend(q_rot, k_rot, v, bias=-mu * lags, **kwargs)
    return _attend(q_rot, k_rot, v, post=torch.exp(-mu * lags), **kwargs)

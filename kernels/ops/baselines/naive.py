"""The positional baselines' float64 oracle: one ``(b, h, i, j)`` at a time.

The reference the baselines (`kernels.ops.baselines`) are tested against
(`tests/kernels/test_oracles.py`). Scores in complex arithmetic, no rotation of the inputs, no
``scaled_dot_product_attention``:

    softmax   s_ij = q_i . k_j / sqrt(D)
    RoPE      s_ij = Re(sum_k conj(q_i,k) k_j,k e^{-i omega_k (t_i - t_j)}) / sqrt(D)
    ALiBi     s_ij = q_i . k_j / sqrt(D) - m_h |t_i - t_j|
    decayed   RoPE's s_ij; ``"logit"``: s_ij - mu_h |t_i - t_j|; ``"post-softmax"``: the weights
              times e^{-mu_h |t_i - t_j|}

``A_ij = softmax_j(s_ij)`` over the visible keys, ``out_i = sum_j A_ij v_j``. The real pairs
``[re | im]`` of a head are its complex features (``D = 2n``) for the rotary forms.

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``, ``t (B, T)``; returns ``(out (B, H, T, Dv),
weights (B, H, T, T))``.
"""

from __future__ import annotations

import math

import torch

F64 = torch.float64


def attention_loop(
    q,
    k,
    v,
    t,
    *,
    frequencies=None,
    slopes=None,
    decay=None,
    decay_mode: str = "post-softmax",
    scale: float | None = None,
    causal: bool = True,
):
    """The baseline chosen by the arguments (module docstring): ``frequencies (H, n)`` for
    RoPE, ``slopes (H,)`` for ALiBi, ``decay (H,)`` with frequencies for decayed RoPE, none
    for plain softmax attention."""
    B, H, T, D = q.shape
    n = D // 2
    scale = 1 / math.sqrt(D) if scale is None else scale
    out = torch.zeros(B, H, T, v.shape[-1], dtype=F64)
    weights = torch.zeros(B, H, T, T, dtype=F64)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                keys = range(i + 1) if causal else range(T)
                scores, post = [], []
                for j in keys:
                    lag = float(t[b, i] - t[b, j])
                    if frequencies is None:
                        score = float(q[b, h, i] @ k[b, h, j])
                    else:
                        qc = torch.complex(q[b, h, i, :n], q[b, h, i, n:])
                        kc = torch.complex(k[b, h, j, :n], k[b, h, j, n:])
                        phase = torch.exp(-1j * frequencies[h] * lag)
                        score = float((qc.conj() * kc * phase).real.sum())
                    score *= scale
                    factor = 1.0
                    if slopes is not None:
                        score -= float(slopes[h]) * abs(lag)
                    if decay is not None and decay_mode == "logit":
                        score -= float(decay[h]) * abs(lag)
                    if decay is not None and decay_mode == "post-softmax":
                        factor = math.exp(-float(decay[h]) * abs(lag))
                    scores.append(score)
                    post.append(factor)
                a = torch.softmax(torch.tensor(scores, dtype=F64), 0) * torch.tensor(
                    post, dtype=F64
                )
                for col, j in enumerate(keys):
                    out[b, h, i] += a[col] * v[b, h, j]
                    weights[b, h, i, j] = a[col]
    return out, weights


__all__ = ["attention_loop"]

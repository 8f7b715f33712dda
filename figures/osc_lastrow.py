"""The last row of OsciFormer attention, for the seed 002 figures that read one query time.

Seed 002's App. E.2 classifier and App. F forecaster read the attention output at one query
time only (the last stamp ``T`` of a sequence). `kernels.layers.osciformer.OscillatorAttention`
computes all ``T x T`` pairs; on the 2-core machine that makes training the figures' models
cost about a second per step. `last_row` evaluates the same layer's output at the last row only,
with the layer's own parameters and the kernel family's pieces (`kernels.ops.oscillator`):

    y_T = out_proj( sum_j softmax_j(alpha_Tj / sqrt(D)) v_j(T) ),   j = 1..T (readout endpoint)
    alpha_Tj = (1/Delta_j) int_0^{Delta_j} <q_T(t_j + s), k_j(t_j + s)> ds,  Delta_j = T - t_j,

with the closed form of `kernels.ops.oscillator.closed_form` (its module docstring):
``Delta alpha = sum_{m,c} Re(a_mc e^{i omega_m t_j} [w_mc . z_jc + 1/2 sum_n (beta_njc
L(omega_m + w_n) + conj(beta_njc) L(omega_m - w_n))])`` and ``alpha_TT = <q_T(T), K_T>``. The
query ``q_T`` is the ridge fit of all ``T`` projected queries, which is the causal fit of the last
row. `tests/figures/test_osc_lastrow.py` holds it equal to the layer's last row.

Cost: ``O(B T J (M + D))`` instead of ``O(B T^2 J (M + D))``. Shapes: ``x (B, T, E)``, ``t (B, T)``;
output ``(B, E)``. One head or several (heads are split as in the layer).
"""

from __future__ import annotations

import math

import torch

from kernels.layers.heads import merge_heads, split_heads
from kernels.layers.osciformer import OscillatorAttention
from kernels.ops.oscillator.closed_form import (
    _anchor_state,
    _homogeneous_logits,
    _steady_logits,
    _value_paths,
)
from kernels.ops.oscillator.query import fit_query, query_at


def _lags(t: torch.Tensor) -> torch.Tensor:
    """``Delta_j = t_T - t_j`` as ``(B, 1, 1, T)``: one row (non-negative: stamps increase)."""
    return (t[:, -1:] - t)[:, None, None, :]


def last_row_logits(layer: OscillatorAttention, q, k, t) -> torch.Tensor:
    """``alpha_Tj`` ``(B, H, T)`` of the projected, head-split ``q, k (B, H, T, D)``, by the
    closed form's own sums (`_homogeneous_logits`, `_steady_logits`) on one query row."""
    p = layer.oscillator_params("key")
    freqs = layer.freqs
    coef_cos, coef_sin = fit_query(q, t, freqs, ridge=layer.ridge, causal=False)
    a_cos, a_sin = coef_cos[:, :, -1:], coef_sin[:, :, -1:]  # (B, H, 1, J, D): the last row
    amp = torch.complex(a_cos, -a_sin)
    lag = _lags(t)  # (B, 1, 1, T)
    beta, z0, z1 = _anchor_state(k, p)  # (B, H, T, M, D), (B, H, T, D) x 2
    times = t[:, None, :]  # (B, 1, T)
    total = _homogeneous_logits(amp, z0, z1, p, freqs, times[..., -1:], lag)
    total = (total + _steady_logits(amp, beta, p, freqs, times, lag))[:, :, 0]  # (B, H, T)
    lag3 = lag[:, :, 0]  # (B, 1, T)
    diag = lag3 == 0
    q_now = query_at(a_cos[:, :, 0], a_sin[:, :, 0], freqs, t[:, -1:].expand(-1, q.shape[1]))
    on_diag = (q_now[:, :, None, :] * k).sum(-1)  # <q_T(T), K_j>, used only where Delta = 0
    safe = torch.where(diag, torch.ones_like(lag3), lag3)
    return torch.where(diag, on_diag, total / safe)


def last_row_values(layer: OscillatorAttention, v, t) -> torch.Tensor:
    """Endpoint value read-outs ``v_j(T)`` ``(B, H, T, D)`` (seed 002 App. E.2), by the closed
    form's own `_value_paths` on one row."""
    p = layer.oscillator_params("value")
    return _value_paths(*_anchor_state(v, p), p, _lags(t), "endpoint")[:, :, 0]


def last_row(layer: OscillatorAttention, x, t, *, need_weights: bool = False):
    """The layer's output at the last row, ``(B, E)`` (and the weights ``(B, H, T)``).

    ``layer.readout`` must be ``"endpoint"``; ``t`` is ``(B, T)`` or ``(T,)`` strictly
    increasing. Equal to ``layer(x, t)[0][:, -1]`` (module docstring).
    """
    if layer.readout != "endpoint":
        raise ValueError(f"layer.readout must be 'endpoint', found {layer.readout!r}")
    t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
    if t.ndim == 1:
        t = t.expand(x.shape[0], -1)
    if t.shape != x.shape[:2]:
        raise ValueError(f"t must have shape (T,) or {tuple(x.shape[:2])}, found {tuple(t.shape)}")
    heads = layer.num_heads
    q = split_heads(layer.q_proj(x), heads)
    k = split_heads(layer.k_proj(x), heads)
    v = split_heads(layer.v_proj(x), heads)
    logits = last_row_logits(layer, q, k, t) / math.sqrt(q.shape[-1])
    weights = torch.softmax(logits, dim=-1)  # (B, H, T)
    y = (weights[..., None] * last_row_values(layer, v, t)).sum(2, keepdim=True)  # (B, H, 1, D)
    out = layer.out_proj(merge_heads(y))[:, 0]
    return (out, weights) if need_weights else out


class LastQueryModel(torch.nn.Module):
    """``inputs (N, T, c)``, ``t (N, T)`` -> ``(N, T, outputs)``: the head on the last row.

    ``h = embed(inputs)``; ``y_T = last_row(layer, h, t)`` (one-head OsciFormer, endpoint
    values); output ``head(h_T + y_T)`` with ``head`` a linear map or, with ``hidden``, a
    two-layer ReLU MLP (seed 002 App. E.2: 64 hidden units). The output is broadcast over the
    ``T`` positions so that `verify.tasks`' read-out at position ``T - 1`` picks it; every row
    holds the last row's value. ``t`` None means the positions ``0..T-1``.
    ``layer_options`` go to `OscillatorAttention` (``num_modes``, ``freq_range``, ...).
    """

    def __init__(self, features, width, outputs, *, hidden=None, generator=None, **layer_options):
        super().__init__()
        from kernels.layers.parameters import seeded_linear

        self.embed = seeded_linear(features, width, generator=generator)
        self.layer = OscillatorAttention(
            width, 1, readout="endpoint", generator=generator, **layer_options
        )
        if hidden is None:
            self.head = seeded_linear(width, outputs, generator=generator)
        else:
            self.head = torch.nn.Sequential(
                seeded_linear(width, hidden, generator=generator),
                torch.nn.ReLU(),
                seeded_linear(hidden, outputs, generator=generator),
            )

    def last(self, inputs, t=None, *, need_weights=False):
        """``(N, outputs)`` (and the attention weights ``(N, T)`` of the last row)."""
        h = self.embed(inputs)
        if t is None:
            t = torch.arange(inputs.shape[1], dtype=h.dtype, device=h.device)
        y, w = last_row(self.layer, h, t, need_weights=True)
        out = self.head(h[:, -1] + y)
        return (out, w[:, 0]) if need_weights else out

    def forward(self, inputs, t=None):
        return self.last(inputs, t)[:, None, :].expand(-1, inputs.shape[1], -1)

"""Tensor-form AFA (seed 000 3.1): per-feature dynamics and precision tensors, ``O(T^2 D)``.

For every feature ``k``, query ``i`` and key ``j`` (``tau = t_i - t_j``)::

    Zhat_k[k, i, j] = e^{lambda_k tau} Zk[k, j],        R = Zq[k, i] - Zhat_k[k, i, j],
    P_qk[k, i, j] = 1 / V_qk,k(tau),                    P_v[k, i, j] = 1 / V_v,k(tau),
    W[i, j] = (1 + sum_k P_qk |R|^2 / nu)^(-temperature),
    A[k, i, j] = W P_v / sum_{j' visible} W P_v,
    Zbar[k, i] = sum_j A[k, i, j] e^{lambda_v,k tau} Zv[k, j],

all ``(B, H, T, T, n)`` tensors (`kernels.ops.afa.precision` gives ``V``; ``precision=
"separable"`` uses B.1's ``P~`` instead). The reference the other forms are tested against; it
is itself tested against the complex loop `kernels.ops.afa.naive`.

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)`` (real pairs with frequencies), ``t`` None,
``(T,)`` or ``(B, T)``; output ``(B, H, T, Dv)``, weights ``(B, H, T, T, n_v)``.
"""

from __future__ import annotations

import math

import torch

from kernels.ops.afa import params, precision
from kernels.ops.afa.params import AFAOutput
from kernels.ops.common import complex_pairs
from kernels.ops.common.lags import lags
from kernels.ops.common.params import Dynamics, Robust
from kernels.ops.common.rotation import Rotation


def tensor_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t,
    dynamics: Dynamics,
    robust: Robust,
    causal: bool,
    precision_form: str,
    return_weights: bool,
) -> AFAOutput:
    """The tensor form (module docstring); arguments as `kernels.ops.afa.tensor_afa`."""
    if precision_form not in params.PRECISIONS:
        raise ValueError(f"precision must be one of {params.PRECISIONS}, found {precision_form!r}")
    if precision_form == "separable" and not causal:
        raise ValueError("precision='separable' is defined for causal lags only (seed 000 B.1)")
    p = params.prepare(q, k, v, dynamics, robust, per_feature=True, like=q)
    lag = lags(params.relative_times(t, p.steps, q)).unsqueeze(-1)  # (Bt, 1, T, T, 1)
    visible = lag >= 0 if causal else torch.ones_like(lag, dtype=torch.bool)
    lag = torch.where(visible, lag, torch.zeros_like(lag))  # masked pairs: keep exp finite
    if precision_form == "separable":
        log_prec = precision.log_separable_precision
    else:
        log_prec = precision.neg_log_variance

    a_v, w_v, s2_v, e2_v = _feature_view(p.vd)
    logits = log_prec(lag, a_v, s2_v, e2_v)  # log P_v, (Bt, H, T, T, n_v)
    if p.nu is not None:
        a, w, s2, e2 = _feature_view(p.qk)
        pulled = _transport(a, w, lag).apply(k.unsqueeze(2))  # Zhat_k, (B, H, T, T, D)
        residual = _modulus2(q.unsqueeze(3) - pulled, p.rotate_qk)  # |R|^2 per feature
        d2 = (torch.exp(log_prec(lag, a, s2, e2)) * residual).sum(-1)
        heads = p.heads
        scale = torch.reciprocal(p.nu).view(1, heads, 1, 1)
        log_w = -p.temperature.view(1, heads, 1, 1) * torch.log1p(d2 * scale)
        logits = logits + log_w.unsqueeze(-1)
    logits = logits.masked_fill(~visible, -math.inf)
    log_attn = torch.log_softmax(logits, dim=3)
    # A e^{lambda_v tau} Zv: the decay joins the log-weights (it grows for tau < 0).
    coef = torch.exp(log_attn - a_v * lag)
    moved = _Transport(coef, w_v, lag).apply(v.unsqueeze(2))  # (B, H, T, T, Dv)
    output = moved.sum(3)
    weights = None
    if return_weights:
        weights = torch.exp(log_attn).expand(p.batch, p.heads, p.steps, p.steps, p.n_v)
    return AFAOutput(output, weights)


def _feature_view(d: params.HeadDynamics):
    """``(H, n)`` dynamics as ``(1, H, 1, 1, n)`` against ``(Bt, 1, T, T, 1)`` lags."""
    view = [None if x is None else x[None, :, None, None, :] for x in d]
    return view[0], view[1], view[2], view[3]


class _Transport:
    """``m e^{i w tau}`` on real pairs (a `Rotation`), or ``m`` on real features (no ``w``)."""

    def __init__(self, magnitude, frequency, lag):
        self.magnitude = magnitude
        self.rotation = None
        if frequency is not None:
            angle = frequency * lag
            self.rotation = Rotation.of(magnitude * torch.cos(angle), magnitude * torch.sin(angle))

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return self.magnitude * x if self.rotation is None else self.rotation.apply(x)


def _transport(decay, frequency, lag) -> _Transport:
    """``e^{lambda tau}``, ``lambda = -a + i w``: the pull-forward of seed 000 3.1."""
    return _Transport(torch.exp(-decay * lag), frequency, lag)


def _modulus2(r: torch.Tensor, is_complex: bool) -> torch.Tensor:
    """``|r_k|^2`` per (complex or real) feature: ``(..., 2n) -> (..., n)`` or ``(..., n)``."""
    if not is_complex:
        return r * r
    re, im = complex_pairs.split(r)
    return re * re + im * im

"""Oscillator attention (OsciFormer), seed 002: keys and values as damped driven oscillators.

Every channel ``c`` of key ``j`` is a damped driven oscillator started at its anchor ``t_j``
(seed 002 eqs. 2/7, 62, section 7 drive; digest 002 sections 1.2-1.9)::

    x'' + 2 gamma_c x' + omega_c^2 x = sum_n (g_nc cos(w_n s) + h_nc sin(w_n s)) K_jc,
    x(t_j) = K_jc,   x'(t_j) = (U K_j)_c,   s = t - t_j,

the query of row ``i`` is the ridge fit of ``Q_1..Q_i`` on the bank ``cos/sin(omega_m t)``
(eqs. 48-49), and the logit is the interval average (Def. 1, eqs. 71-75)

    alpha_ij = (1/Delta) int_0^Delta <q_i(t_j + s), k_j(t_j + s)> ds,   Delta = t_i - t_j,

with ``alpha_ii = <q_i(t_i), K_i>``; values are read out as interval averages or endpoints and
``y_i = sum_{j <= i} softmax_j(alpha_ij / sqrt(D)) vbar_ij`` (eq. 79, Def. 2). The exact
evaluation, with the seed's errors avoided, is in `closed_form`'s docstring.

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``; time stamps ``t`` None (``t_i = i``),
``(T,)`` or ``(B, T)``, strictly increasing; per-head, per-channel parameters (`OscillatorParams`).

The op folder (the house plan of ``kernels/ops``):

* `naive`: the float64 loop over pairs (matrix exponentials and quadrature), the oracle the
  closed form is tested against;
* `params`: the parameter object `OscillatorParams` and its check;
* `propagator` (``e^{A t}`` in every damping regime) and `query` (the ridge fit): the pieces;
* `closed_form`: the torch form (`oscillator_logits`, `oscillator_values`,
  `oscillator_attention`);
* this module: the entry points. There is no fused kernel, so no ``backend``.
"""

from __future__ import annotations

from kernels.ops.oscillator.closed_form import (
    oscillator_attention,
    oscillator_logits,
    oscillator_values,
)
from kernels.ops.oscillator.naive import (
    naive_oscillator_attention,
    naive_oscillator_logits,
    naive_oscillator_values,
)
from kernels.ops.oscillator.params import OscillatorParams
from kernels.ops.oscillator.propagator import damped_cos_sinc, propagator
from kernels.ops.oscillator.query import fit_query, query_at

__all__ = [
    "OscillatorParams",
    "damped_cos_sinc",
    "fit_query",
    "naive_oscillator_attention",
    "naive_oscillator_logits",
    "naive_oscillator_values",
    "oscillator_attention",
    "oscillator_logits",
    "oscillator_values",
    "propagator",
    "query_at",
]

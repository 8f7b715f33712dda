"""Unrolled AFA: the recurrent ``O(K T D)`` form of isotropic AFA (seed 000 B.2, Algorithm 4).

Batch AFA (seed 000 3.1, 3.6, Algorithm 1) compares every query with every pulled-forward key,
``O(T^2)`` pairs per layer, and approaches the robust batch estimate of 2.3 when iterated. B.2
keeps the recursion of a Kalman filter instead: it carries one estimate and its precision
forward, and gives each new measurement a robust weight refined by ``K`` inner iterations. Per
head, on the eigen-coordinates ``z_i`` of an isotropic system ``A = -a I + Omega``
(``lambda_k = -a + i omega_k``, process noise ``sigma^2`` and measurement noise ``eta^2`` per
mode), with the estimate ``x`` (complex ``n``-vector, ``[re | im]`` real pairs, ``D = 2n``) and a
scalar variance ``v`` shared by the ``n`` modes (isotropy keeps it shared):

    predict   x^- = e^{-a h} e^{i omega h} x_{i-1},      h = t_i - t_{i-1} (any step > 0),
              v^- = e^{-2 a h} v_{i-1} + sigma^2 (1 - e^{-2 a h}) / (2 a)   (sigma^2 h at a = 0),
    iterate   x^(0) = x^-;  for k = 0..K-1:
              m = |z_i - x^(k)|^2 / eta^2,          w = w(m),
              g = w v^- / (w v^- + eta^2),        x_* = x^- + g (z_i - x^-),
              x^(k+1) = x^(k) + delta (x_* - x^(k)),
    carry     x_i = x^(K),   v_i = v^- eta^2 / (w v^- + eta^2)   (precision p_i = 1/v^- + w/eta^2),

with the robust weight (temperature ``tau``: seed 000 4.1's ``exp(-tau log(1 + m/nu))``)

    "rational"   w(m) = (1 + m/nu)^-tau                (Algorithm 1's weight; at tau = 1 B.2's)
    "student-t"  w(m) = ((1 + n/nu) / (1 + m/nu))^tau  (A.4's E-step weight at tau = 1)

and ``w = 1`` at ``nu = inf`` (the Kalman filter). The first step has no prior (a diffuse start):
``x_0 = z_0``, ``v_0 = eta^2 / w(0)``, unless ``prior_mean``/``prior_variance`` are given at
``t_0``. This is `estimators.recurrent.eigen_recurrent_filter` for the isotropic model, per head,
without learned projections (the layer adds ``L_V`` and ``L_P``), and it equals it to round-off
(``tests/kernels/test_unrolled_afa.py``). As ``K`` grows it converges (geometrically, measured)
to the recursive fixed point, where each measurement is weighted once, at its own time; B.2
hopes this approximates batch IRLS. It does not reach it: without process noise a gap of a few
percent remains (two different robust estimators; at ``nu = inf`` both are then the Kalman
filter and agree to round-off), and with process noise the recursive filter is a different,
better estimator than the batch form, which discards the cross-time correlation of the process
noise (`estimators.mle` docstring; numbers in the test's docstring).

Seed inconsistencies (the consistent reading of `estimators.recurrent`, its items 1-7, is
implemented): Algorithm 4 weights the new measurement with the one-step propagated precision
``1/sigma_V^2`` (item 1; a measurement at lag 0 has precision ``1/eta^2``); propagates with
``+ sigma^2`` (item 2; the step accumulates ``sigma^2 h relaxation``); replaces the prior by the
iterate and its precision by the updated one at every inner iteration (items 3 and 5; the prior
then counts the measurement ``K`` times and the estimate drifts to the measurement: here each
inner iteration updates from the fixed prediction and the iterate enters only the weight and the
damping); measures the residual with the posterior precision (item 4; here with ``1/eta^2``, the
precision of the term it reweights); multiplies the innovation by the log-weight ``w <= 0``
instead of ``exp(tau w)`` (item 6; the update would move away from the measurement); carries the
unweighted precision (item 7; here the weighted one, so a rejected outlier does not raise it).
Algorithm 4 also recomputes queries and keys from the iterate, ``y_qk = z_q,i - L_K(x^(k))``, but
its weight uses only the value innovation ``y_v``; so does this function (no ``L_Q``, ``L_K``).
Algorithm 1 writes the decay ``-alpha^2``; here ``decay = a >= 0`` directly (the layer maps its
parameter through softplus).

Cost: ``O(K T D)`` time and ``O(T D)`` memory per sequence and head, no ``(T, T)`` matrix. The
time loop is a Python loop over ``T`` (inherent to the robust recurrent form); the per-step
transition factors are computed for all steps at once before it, and each step is a few
elementwise operations on ``(B, H, D)`` tensors. At ``nu = inf`` the loop is replaced by chunked
causal attention (`kernels.ops.unrolled.chunked`; ``method="loop"`` keeps the loop):
``O(T C D)`` time for chunks of ``C = 256`` steps, 2-4 x faster to train at ``T ~ 100``
(`benchmarks/bench_unrolled_afa.py`). Causal by construction: step ``i`` reads ``z_0..z_i`` only.
Numerics: only per-step factors ``e^{-a h} <= 1`` appear (never ``e^{a t}``); the carried
variance satisfies ``0 <= v_i <= min(v_i^-, eta^2 / w)``; the weight is one power
``(base + slope |z - x|^2)^-tau`` of a positive quantity (it underflows to 0 for a huge outlier,
which is then ignored). So fp32 is stable at any ``T`` and as ``a -> 0``.

The op folder: `naive` (the recursion in complex128, one step and one head at a time: the
oracle), `params` (the argument preparation), `loop` (the recursion vectorised over batch and
heads) and `chunked` (the Gaussian filter as chunked causal attention), and this module, the
entry point that takes the parameter objects (`Dynamics`, `Robust`) or their keywords and
dispatches on ``method``. Shapes: ``values (B, H, T, D)``, ``t`` None, ``(T,)`` or ``(B, T)``.
"""

from __future__ import annotations

import torch

from kernels._validation import overflow_warning
from kernels.ops.common.params import NOT_GIVEN, Dynamics, Robust
from kernels.ops.unrolled import loop as _loop
from kernels.ops.unrolled import params as _params
from kernels.ops.unrolled.chunked import CHUNK, kalman_attention
from kernels.ops.unrolled.params import METHODS, WEIGHTS, UnrolledAFAResult


@overflow_warning
def unrolled_afa(
    values: torch.Tensor,
    *,
    t=None,
    dynamics: Dynamics | None = None,
    robust: Robust | None = None,
    decay=NOT_GIVEN,
    frequencies=NOT_GIVEN,
    process_var=NOT_GIVEN,
    measurement_var=NOT_GIVEN,
    nu=NOT_GIVEN,
    iterations: int = 1,
    temperature=NOT_GIVEN,
    damping=1.0,
    weight: str = "student-t",
    prior_mean: torch.Tensor | None = None,
    prior_variance=None,
    method: str = "auto",
) -> UnrolledAFAResult:
    """Iteratively reweighted recursive filter per head: unrolled AFA (seed 000 B.2, Alg. 4).

    The recursion of the module docstring, vectorised over batch and heads.

    Parameters
    ----------
    values : (B, H, T, D) measurements in the eigenbasis, real pairs ``[re | im]``, ``D = 2n``
        (the layer's ``z_v = L_V(z)``).
    t : None (``t_i = i``), (T,) or (B, T) strictly increasing time stamps; only the steps
        ``t_i - t_{i-1}`` enter.
    dynamics : a `Dynamics` (per head), or its keywords:
    decay : (H,) or scalar ``a >= 0``, the eigenvalues' real part is ``-a``.
    frequencies : (H, n) or (n,) ``omega``, the eigenvalues' imaginary parts.
    process_var : (H,) or scalar ``sigma^2 >= 0`` per mode.
    measurement_var : (H,) or scalar ``eta^2 > 0`` per mode.
    robust : a `Robust`, or its keywords:
    nu : (H,) or scalar robust scale ``> 0``; ``inf`` (default) gives ``w = 1``, the Kalman filter.
    temperature : (H,) or scalar ``tau > 0`` (seed 000 4.1); 1 (the default) gives B.2's weight.
    iterations : the number ``K >= 1`` of inner iterations per step (exactly ``K``; with
        ``nu = inf`` and ``damping = 1`` they all coincide and one is run).
    damping : (H,) or scalar ``delta`` in (0, 1] (the seed's residual weight ``sigmoid(delta)``);
        1 is plain reweighting.
    weight : ``"student-t"`` (default: ``w ~ 1`` for an inlier, as in `estimators.recurrent`) or
        ``"rational"`` (Algorithm 1's form; a constant factor of the weight does not cancel in
        the recursion as it does in batch AFA's normalisation, so the two filters differ).
    prior_mean : (B, H, D) (or broadcastable) prior mean at ``t_0``, with ``prior_variance``
        (B, H) (or broadcastable, >= 0); both None (default) for the diffuse start.
    method : ``"auto"`` (default): at ``nu = inf`` every weight is 1 and the recursion is the
        Kalman filter, linear in the data, run as chunked causal attention
        (:func:`kernels.ops.unrolled.chunked.kalman_attention`, no loop over time);
        otherwise, or when ``values`` holds a non-finite entry, the loop. ``"loop"``: always
        the loop (the reference form).

    Returns
    -------
    UnrolledAFAResult (output, precision, prediction, prediction_precision, weight); dtype and
    device follow ``values``.

    Raises
    ------
    ValueError / TypeError naming the argument: shapes, odd ``D``, non-increasing ``t``, a
    parameter out of range, ``iterations < 1``, an unknown ``weight``.
    """
    dynamics = Dynamics.resolve(
        dynamics,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
    )
    robust = Robust.resolve(robust, nu=nu, temperature=temperature)
    p = _params.prepare(
        values,
        t,
        dynamics,
        robust,
        iterations=iterations,
        damping=damping,
        weight=weight,
        method=method,
        prior_mean=prior_mean,
        prior_variance=prior_variance,
    )
    # w = 1: the Kalman filter, as chunked attention. Its masked product would spread a
    # non-finite measurement to earlier outputs (0 x NaN), so such input keeps the loop,
    # which is causal in IEEE arithmetic too.
    if p.gaussian and method == "auto" and bool(torch.isfinite(values).all()):
        mean, variance = (None, None) if p.prior is None else p.prior
        output, variance, prediction, pred_variance = kalman_attention(
            values,
            p.times,
            decay=p.decay,
            frequencies=p.frequencies,
            process_var=p.process_var,
            measurement_var=p.measurement_var,
            gain_scale=None if p.plain else 1 - (1 - p.damping) ** p.inner,
            prior_mean=mean,
            prior_variance=variance,
        )
        full = (p.batch, p.heads, p.steps)
        return UnrolledAFAResult(
            output,
            (1 / variance).expand(full),
            prediction,
            (1 / pred_variance).expand(full),
            torch.ones(full, dtype=values.dtype, device=values.device),
        )
    return _loop.run(values, p)


__all__ = [
    "CHUNK",
    "METHODS",
    "WEIGHTS",
    "Dynamics",
    "Robust",
    "UnrolledAFAResult",
    "kalman_attention",
    "unrolled_afa",
]

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
causal attention (`kernels.functional.kalman_attention`; ``method="loop"`` keeps the loop):
``O(T C D)`` time for chunks of ``C = 256`` steps, 2-4 x faster to train at ``T ~ 100``
(`benchmarks/bench_unrolled_afa.py`). Causal by construction: step ``i`` reads ``z_0..z_i`` only.
Numerics: only per-step factors ``e^{-a h} <= 1`` appear (never ``e^{a t}``); the carried
variance satisfies ``0 <= v_i <= min(v_i^-, eta^2 / w)``; the weight is one power
``(base + slope |z - x|^2)^-tau`` of a positive quantity (it underflows to 0 for a huge outlier,
which is then ignored). So fp32 is stable at any ``T`` and as ``a -> 0``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels._validation import (
    as_parameter,
    check_data,
    check_finite,
    check_times,
    overflow_warning,
)
from kernels.functional.kalman_attention import kalman_attention
from kernels.functional.lags import relaxation

WEIGHTS = ("rational", "student-t")
# "auto": the chunked attention form where it applies (nu = inf), the loop otherwise.
METHODS = ("auto", "loop")


class UnrolledAFAResult(NamedTuple):
    """Output of :func:`unrolled_afa`.

    output : (B, H, T, D) filtered estimates ``x_i = E[z^C_i | z_0..z_i]`` (real pairs).
    precision : (B, H, T) posterior precision ``p_i = 1/v_i`` per mode (the seed's ``p_i^+``).
    prediction : (B, H, T, D) one-step predictions ``x_i^-`` from ``z_0..z_{i-1}``; at ``i = 0``
        the prior mean (zeros for the diffuse start).
    prediction_precision : (B, H, T) ``1/v_i^-``; at ``i = 0`` the prior precision (0: diffuse).
    weight : (B, H, T) robust weight ``w`` of each measurement at the last inner iteration.
    """

    output: torch.Tensor
    precision: torch.Tensor
    prediction: torch.Tensor
    prediction_precision: torch.Tensor
    weight: torch.Tensor


def _per_head(name, value, heads: int, like: torch.Tensor, *, low, strict, high=None, inf=False):
    """A scalar or ``(H,)`` parameter as an ``(H,)`` tensor, range checked (NaN rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a float or a tensor of shape ({heads},), found {value!r}")
    value = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if value.shape not in ((), (heads,)):
        raise ValueError(
            f"{name} must be a scalar or have shape ({heads},) (one per head), "
            f"found {tuple(value.shape)}"
        )
    detached = value.detach()
    bad = torch.isnan(detached) | (detached <= low if strict else detached < low)
    if not inf:  # only nu may be infinite (the Gaussian limit)
        bad = bad | torch.isinf(detached)
    if high is not None:
        bad = bad | (detached > high)
    if bad.any():
        bound = f"> {low}" if strict else f">= {low}"
        if high is not None:
            bound = f"in ({low}, {high}]"
        found = detached[bad].flatten()[0].item()
        raise ValueError(f"{name} must be {bound}, found {found}")
    return value.expand(heads)


def _is_one(damping) -> bool:
    """``delta = 1`` exactly and no gradient wanted: the inner update is then ``x = x_*``."""
    if isinstance(damping, torch.Tensor):
        return not damping.requires_grad and bool((damping == 1).all())
    return isinstance(damping, (int, float)) and not isinstance(damping, bool) and damping == 1


def _check_values(values) -> tuple[int, int, int, int]:
    return check_data("values", values, even=True)


@overflow_warning
def unrolled_afa(
    values: torch.Tensor,
    *,
    t=None,
    decay,
    frequencies,
    process_var,
    measurement_var,
    nu=math.inf,
    iterations: int = 1,
    temperature=1.0,
    damping=1.0,
    weight: str = "student-t",
    prior_mean: torch.Tensor | None = None,
    prior_variance=None,
    method: str = "auto",
) -> UnrolledAFAResult:
    """Iteratively reweighted recursive filter per head: unrolled AFA (seed 000 B.2, Alg. 4).

    The recursion of the module docstring, vectorised over batch and heads, a loop over time.

    Parameters
    ----------
    values : (B, H, T, D) measurements in the eigenbasis, real pairs ``[re | im]``, ``D = 2n``
        (the layer's ``z_v = L_V(z)``).
    t : None (``t_i = i``), (T,) or (B, T) strictly increasing time stamps; only the steps
        ``t_i - t_{i-1}`` enter.
    decay : (H,) or scalar ``a >= 0``, the eigenvalues' real part is ``-a``.
    frequencies : (H, n) or (n,) ``omega``, the eigenvalues' imaginary parts.
    process_var : (H,) or scalar ``sigma^2 >= 0`` per mode.
    measurement_var : (H,) or scalar ``eta^2 > 0`` per mode.
    nu : (H,) or scalar robust scale ``> 0``; ``inf`` (default) gives ``w = 1``, the Kalman filter.
    iterations : the number ``K >= 1`` of inner iterations per step (exactly ``K``; with
        ``nu = inf`` and ``damping = 1`` they all coincide and one is run).
    temperature : (H,) or scalar ``tau > 0`` (seed 000 4.1); 1 gives B.2's weight.
    damping : (H,) or scalar ``delta`` in (0, 1] (the seed's residual weight ``sigmoid(delta)``);
        1 is plain reweighting.
    weight : ``"student-t"`` (default: ``w ~ 1`` for an inlier, as in `estimators.recurrent`) or
        ``"rational"`` (Algorithm 1's form; a constant factor of the weight does not cancel in
        the recursion as it does in batch AFA's normalisation, so the two filters differ).
    prior_mean : (B, H, D) (or broadcastable) prior mean at ``t_0``, with ``prior_variance``
        (B, H) (or broadcastable, >= 0); both None (default) for the diffuse start.
    method : ``"auto"`` (default): at ``nu = inf`` every weight is 1 and the recursion is the
        Kalman filter, linear in the data, run as chunked causal attention
        (:func:`kernels.functional.kalman_attention.kalman_attention`, no loop over time);
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
    batch, heads, steps, dim = _check_values(values)
    n = dim // 2
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an integer K >= 1, found {iterations!r}")
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {WEIGHTS}, found {weight!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, found {method!r}")
    times = check_times(t, steps, like=values)  # (B or 1, 1, T)
    a = _per_head("decay", decay, heads, values, low=0.0, strict=False)
    q = _per_head("process_var", process_var, heads, values, low=0.0, strict=False)
    r = _per_head("measurement_var", measurement_var, heads, values, low=0.0, strict=True)
    nu_h = _per_head("nu", nu, heads, values, low=0.0, strict=True, inf=True)
    tau = _per_head("temperature", temperature, heads, values, low=0.0, strict=True)
    plain = _is_one(damping)
    delta = _per_head("damping", damping, heads, values, low=0.0, strict=True, high=1.0)
    omega = check_finite("frequencies", as_parameter("frequencies", frequencies, values))
    if omega.shape not in ((n,), (heads, n)):
        raise ValueError(
            f"frequencies must have shape ({heads}, {n}) or ({n},) (one per complex feature, "
            f"D/2 = {n}), found {tuple(omega.shape)}"
        )
    omega = omega.expand(heads, n)
    gaussian = bool(torch.isinf(nu_h.detach()).all())
    inner = 1 if gaussian and plain else iterations  # all K updates coincide: w = 1, delta = 1

    if (prior_mean is None) != (prior_variance is None):
        raise ValueError("prior_mean and prior_variance must be given together (or neither)")
    shape = (batch, heads)
    if prior_mean is not None:
        x, v = _prior(prior_mean, prior_variance, values)
    # w = 1: the Kalman filter, as chunked attention. Its masked product would spread a
    # non-finite measurement to earlier outputs (0 x NaN), so such input keeps the loop,
    # which is causal in IEEE arithmetic too.
    if gaussian and method == "auto" and bool(torch.isfinite(values).all()):
        output, variance, prediction, pred_variance = kalman_attention(
            values,
            times,
            decay=a,
            frequencies=omega,
            process_var=q,
            measurement_var=r,
            gain_scale=None if plain else 1 - (1 - delta) ** inner,
            prior_mean=None if prior_mean is None else x,
            prior_variance=None if prior_mean is None else v,
        )
        full = (batch, heads, steps)
        return UnrolledAFAResult(
            output,
            (1 / variance).expand(full),
            prediction,
            (1 / pred_variance).expand(full),
            torch.ones(full, dtype=values.dtype, device=values.device),
        )

    # Per-step factors for all steps at once, (B or 1, H, T-1[, D]), then split per step.
    # The rotation-decay e^{(-a + i omega) h} acts on [re | im] as x * [c | c] + swap(x) * [-s | s]
    # with c = e^{-a h} cos(omega h), s = e^{-a h} sin(omega h), swap(x) = [im | re].
    steps_h = (times[..., 1:] - times[..., :-1]).expand(-1, heads, -1)
    a_, q_ = a.view(1, heads, 1), q.view(1, heads, 1)
    shrink = torch.exp(-a_ * steps_h)  # e^{-a h} <= 1: no growing factor anywhere
    added = q_ * steps_h * relaxation(2 * a_ * steps_h)  # sigma^2 (1 - e^{-2ah}) / (2a)
    angle = omega.view(1, heads, 1, n) * steps_h.unsqueeze(-1)
    c, s = shrink.unsqueeze(-1) * torch.cos(angle), shrink.unsqueeze(-1) * torch.sin(angle)
    keep = torch.cat((c, c), dim=-1).unbind(2)
    turn = torch.cat((-s, s), dim=-1).unbind(2)
    shrink2, added = (shrink * shrink).unbind(2), added.unbind(2)
    measurements = values.unbind(2)

    # w = (base + slope |z - x|^2)^-tau: "rational" base 1, slope 1/(eta^2 nu); "student-t"
    # divides both by 1 + n/nu. At nu = inf, slope = 0 and w = 1 exactly.
    r_b, tau_b = r.view(1, heads), tau.view(1, heads)
    scale = 1 + n / nu_h if weight == "student-t" else torch.ones_like(nu_h)
    base = (1 / scale).view(1, heads)
    slope = (1 / (r * nu_h * scale)).view(1, heads)
    delta_b = delta.view(1, heads, 1)
    ones = torch.ones(shape, dtype=values.dtype, device=values.device)

    def robust_weight(residual):
        if gaussian:
            return ones
        return torch.addcmul(base, torch.linalg.vecdot(residual, residual), slope).pow(-tau_b)

    outputs, variances, predictions, pred_variances, weights = [], [], [], [], []
    if prior_mean is None:
        # Diffuse start: the measurement alone; its residual is 0, so v = eta^2 / w(0).
        w = (ones * base).pow(-tau_b)
        x, v = measurements[0], r_b / w
        predictions.append(torch.zeros_like(x))
        pred_variances.append(torch.full(shape, math.inf, dtype=x.dtype, device=x.device))
        outputs.append(x)
        variances.append(v)
        weights.append(w)
    for i in range(len(outputs), steps):
        if i > 0:
            x = torch.addcmul(x * keep[i - 1], x.roll(n, dims=-1), turn[i - 1])
            v = torch.addcmul(added[i - 1], shrink2[i - 1], v)
        z = measurements[i]
        predictions.append(x)
        pred_variances.append(v)
        innovation = z - x
        estimate = x
        for k in range(inner):
            w = robust_weight(innovation if k == 0 else z - estimate)
            wv = w * v
            denom = wv + r_b
            target = torch.addcmul(x, (wv / denom).unsqueeze(-1), innovation)
            estimate = target if plain else torch.lerp(estimate, target, delta_b)
        x, v = estimate, v * r_b / denom
        outputs.append(x)
        variances.append(v)
        weights.append(w)
    return UnrolledAFAResult(
        torch.stack(outputs, dim=2),
        1 / torch.stack(variances, dim=2),
        torch.stack(predictions, dim=2),
        1 / torch.stack(pred_variances, dim=2),
        torch.stack(weights, dim=2),
    )


def _prior(prior_mean, prior_variance, values: torch.Tensor):
    """``(B, H, D)`` mean and ``(B, H)`` variance from broadcastable inputs, checked."""
    batch, heads, _, dim = values.shape
    x = torch.as_tensor(prior_mean, dtype=values.dtype, device=values.device)
    v = torch.as_tensor(prior_variance, dtype=values.dtype, device=values.device)
    try:
        x = x.expand(batch, heads, dim)
        v = v.expand(batch, heads)
    except RuntimeError:
        raise ValueError(
            f"prior_mean must broadcast to ({batch}, {heads}, {dim}) and prior_variance to "
            f"({batch}, {heads}), found {tuple(x.shape)} and {tuple(v.shape)}"
        ) from None
    if bool((torch.isnan(v.detach()) | (v.detach() < 0)).any()):
        raise ValueError("prior_variance must be >= 0, found a negative or NaN entry")
    return x, v


__all__ = ["METHODS", "WEIGHTS", "UnrolledAFAResult", "unrolled_afa"]

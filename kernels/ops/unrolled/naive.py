"""Unrolled AFA's float64 oracle: the recursion of seed 000 B.2, one head, one step at a time.

The reference the vectorised loop (`kernels.ops.unrolled.loop`) is tested against
(`tests/kernels/test_oracles.py`; the loop is also tested against `estimators.recurrent`, and the
chunked Gaussian form against the loop). Written in complex numbers with numpy, one sequence and
one head, no real pairs and no precomputed factors. Per step ``i`` (``h = t_i - t_{i-1}``):

    predict   x^- = e^{(-a + i omega) h} x_{i-1},
              v^- = e^{-2 a h} v_{i-1} + sigma^2 (1 - e^{-2 a h}) / (2 a)   (sigma^2 h at a = 0),
    iterate   x^(0) = x^-;  for k = 0..K-1:
              m = |z_i - x^(k)|^2 / eta^2,   w = w(m),   g = w v^- / (w v^- + eta^2),
              x^(k+1) = x^(k) + delta (x^- + g (z_i - x^-) - x^(k)),
    carry     x_i = x^(K),   v_i = v^- eta^2 / (w v^- + eta^2),

with ``w(m) = (1 + m/nu)^-tau`` ("rational") or ``((1 + n/nu) / (1 + m/nu))^tau``
("student-t"), ``w = 1`` at ``nu = inf``; the first step starts from the prior, or (diffuse)
takes ``x_0 = z_0``, ``v_0 = eta^2 / w(0)``.

Shapes: ``z (T, n)`` complex, ``t (T,)``, ``frequencies (n,)``; the other parameters numbers.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class NaiveResult(NamedTuple):
    """``output (T, n)``, ``variance (T,)``, ``prediction (T, n)``, ``prediction_variance (T,)``,
    ``weight (T,)`` (complex estimates, float variances; ``inf`` for a diffuse prediction)."""

    output: np.ndarray
    variance: np.ndarray
    prediction: np.ndarray
    prediction_variance: np.ndarray
    weight: np.ndarray


def unrolled_loop(
    z,
    t,
    *,
    decay: float,
    frequencies,
    process_var: float,
    measurement_var: float,
    nu: float = math.inf,
    iterations: int = 1,
    temperature: float = 1.0,
    damping: float = 1.0,
    weight: str = "student-t",
    prior: tuple | None = None,
) -> NaiveResult:
    """The recursion of the module docstring for one sequence and one head.

    ``prior``: ``(mean (n,) complex, variance)`` at ``t_0``, or None for the diffuse start.
    """
    z = np.asarray(z, dtype=complex)
    t = np.asarray(t, dtype=float)
    omega = np.asarray(frequencies, dtype=float)
    steps, n = z.shape
    a, q, r = float(decay), float(process_var), float(measurement_var)

    def robust_weight(residual) -> float:
        if math.isinf(nu):
            return 1.0
        m = float(np.sum(np.abs(residual) ** 2)) / r
        if weight == "rational":
            return (1 + m / nu) ** -temperature
        return ((1 + n / nu) / (1 + m / nu)) ** temperature

    out = np.zeros((steps, n), dtype=complex)
    pred = np.zeros((steps, n), dtype=complex)
    var, pred_var, weights = np.zeros(steps), np.zeros(steps), np.zeros(steps)
    x, v = None, None
    for i in range(steps):
        if i == 0 and prior is None:
            w = robust_weight(np.zeros(n))
            x, v = z[0].copy(), r / w
            pred_var[0] = math.inf
            out[0], var[0], weights[0] = x, v, w
            continue
        if i == 0:
            x_pred, v_pred = np.asarray(prior[0], dtype=complex), float(prior[1])
        else:
            h = t[i] - t[i - 1]
            x_pred = np.exp((-a + 1j * omega) * h) * x
            grow = h if a == 0 else -math.expm1(-2 * a * h) / (2 * a)
            v_pred = math.exp(-2 * a * h) * v + q * grow
        pred[i], pred_var[i] = x_pred, v_pred
        estimate = x_pred
        for _ in range(iterations):
            w = robust_weight(z[i] - estimate)
            gain = w * v_pred / (w * v_pred + r)
            target = x_pred + gain * (z[i] - x_pred)
            estimate = estimate + damping * (target - estimate)
        x, v = estimate, v_pred * r / (w * v_pred + r)
        out[i], var[i], weights[i] = x, v, w
    return NaiveResult(out, var, pred, pred_var, weights)


__all__ = ["NaiveResult", "unrolled_loop"]

"""The unitary limit ``alpha = 0`` and its rotary (RoPE) reading (seed 000 3.6-3.8; seed 004 B.4.2).

With ``A = alpha I + Omega`` and ``alpha = 0`` the propagation is a pure rotation and the
isotropic propagated measurement variance of seed 000 (end of A.3) becomes linear in the lag,

    sigma_V^2(dt) = |lambda_C|^2 sigma^2 |dt| + eta^2        (seed 000 3.8: |dt| = Delta t tau),

the ``alpha -> 0`` limit of ``(1 - e^{2 alpha |dt|}) / (-2 alpha) = |dt|``: an additive
``a |i - j| + b`` in the denominator of the score, as in ALiBi.

Rotary reading. For a skew ``Omega`` made of 2x2 blocks ``[[0, -w_k], [w_k, 0]]`` acting on the
pairs ``(x_{2k}, x_{2k+1})`` (`sde_sim.models.rotation_generator`; complex ``x_{2k} + i x_{2k+1}``
is multiplied by ``e^{i w_k t}``), the rotated vectors ``x~_i = e^{-Omega t_i} x_i`` are the
seed's ``Phi~^- (.) Z`` and

    <q~_i, k~_j> = Re(Q~_i^H K~_j) = <q_i, e^{-Omega (t_j - t_i)} k_j>,

the query against the key pulled forward to ``t_i``: it depends on ``t_j - t_i`` only (RoPE).
The pulled-forward residual is ``|q_i - e^{-Omega (t_j - t_i)} k_j|^2 = |q_i|^2 + |k_j|^2 -
2 <q~_i, k~_j>``, which is ``2 (1 - <q~_i, k~_j>)`` for unit vectors (seed 000 3.8).

Shapes: vectors ``(..., T, 2m)`` with time on rows, times ``(T,)`` or ``(..., T)``, frequencies
``(m,)``; pairwise results ``(..., T, T)`` indexed ``[i, j]`` (query ``i``, key ``j``).
"""

from __future__ import annotations

import numpy as np

from sde_sim import validation


def unitary_measurement_variance(dt, *, sigma2, eta2, c_gain=1.0) -> np.ndarray:
    """``sigma_V^2(dt) = |c|^2 sigma2 |dt| + eta2``: the ``alpha = 0`` kernel (seed 000 3.8).

    ``dt`` is the signed lag ``t_j - t_i`` (seed 000's ``Delta t tau``); both signs give the
    same variance, since ``sign(dt) phi(i w, dt) = |dt|`` (end of A.3). Equals
    `measurement.isotropic_measurement_variance` at ``alpha = 0``.

    Shapes: dt any shape -> dt.shape.
    """
    dt = validation.real_array("dt", dt)
    sigma2 = validation.scalar("sigma2", sigma2, minimum=0.0)
    eta2 = validation.scalar("eta2", eta2, minimum=0.0)
    c = complex(validation.complex_array("c_gain", c_gain, ndim=0))
    if c == 0:
        raise ValueError("c_gain must be nonzero (C must be invertible), got 0")
    return abs(c) ** 2 * sigma2 * np.abs(dt) + eta2


def _pairs(name: str, x) -> np.ndarray:
    x = validation.real_array(name, x)
    if x.ndim < 2 or x.shape[-1] % 2:
        raise ValueError(
            f"{name} must have shape (..., T, 2m) (real pairs on the last axis), got {x.shape}"
        )
    return x


def _angles(x: np.ndarray, t, frequencies) -> np.ndarray:
    w = validation.vector("frequencies", frequencies)
    if 2 * w.size != x.shape[-1]:
        raise ValueError(
            f"frequencies must have shape ({x.shape[-1] // 2},) (one per pair), got {w.shape}"
        )
    t = validation.real_array("t", t)
    try:
        t = np.broadcast_to(t, x.shape[:-1])
    except ValueError:
        raise ValueError(
            f"t must broadcast to {x.shape[:-1]} (one time per row), got shape {t.shape}"
        ) from None
    return t[..., None] * w


def rotate_pairs(x, t, frequencies) -> np.ndarray:
    """``x~_i = e^{-Omega t_i} x_i``: each pair turned by ``-w_k t_i`` (seed 000 3.6 ``Phi~^-``).

    In complex form ``x_{2k} + i x_{2k+1}`` is multiplied by ``e^{-i w_k t_i}``, so
    ``rotate_pairs(x, -t, w)`` undoes it (``Phi~^+``).

    Shapes: x (..., T, 2m); t (T,) or broadcastable to (..., T); frequencies (m,) -> x.shape.
    """
    x = _pairs("x", x)
    theta = _angles(x, t, frequencies)
    cos, sin = np.cos(theta), np.sin(theta)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = cos * even + sin * odd
    out[..., 1::2] = cos * odd - sin * even
    return out


def rotary_scores(q, k, t, frequencies) -> np.ndarray:
    """``<q~_i, k~_j> = Re(Q~_i^H K~_j) = <q_i, e^{-Omega (t_j - t_i)} k_j>`` (seed 000 3.6-3.8).

    Depends on the times through ``t_j - t_i`` only (the relative, rotary position encoding).

    Shapes: q, k (..., T, 2m); t (T,) or (..., T); frequencies (m,) -> (..., T, T).
    """
    q, k = _pairs("q", q), _pairs("k", k)
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape, got {q.shape} and {k.shape}")
    return rotate_pairs(q, t, frequencies) @ np.swapaxes(rotate_pairs(k, t, frequencies), -1, -2)


def unitary_residual_norms(q, k, t, frequencies) -> np.ndarray:
    """``|q_i - e^{-Omega (t_j - t_i)} k_j|^2 = |q_i|^2 + |k_j|^2 - 2 <q~_i, k~_j>``.

    The squared residual ``|R_qk[i, j]|^2`` of seed 000 3.6 at ``alpha = 0``; ``2 (1 - <q~_i,
    k~_j>)`` for unit-norm rows (3.8).

    Shapes: q, k (..., T, 2m) -> (..., T, T).
    """
    scores = rotary_scores(q, k, t, frequencies)
    q_energy = np.sum(np.asarray(q, dtype=float) ** 2, axis=-1)
    k_energy = np.sum(np.asarray(k, dtype=float) ** 2, axis=-1)
    return q_energy[..., :, None] + k_energy[..., None, :] - 2.0 * scores


def unitary_logits(q, k, t, frequencies, *, nu, sigma2, eta2, c_gain=1.0) -> np.ndarray:
    """Seed 000's score ``L = log P - log(1 + P |R|^2 / nu)`` at ``alpha = 0``.

    ``P = 1 / sigma_V^2(t_j - t_i)`` with the linear `unitary_measurement_variance`, so
    ``L = -log(sigma_V^2 + |R|^2 / nu) = log nu - log(nu sigma_V^2 + |R|^2)``: the 3.8 form
    ``-log(nu V^C + 2 - 2 Re(Z~_q^H Z~_k))`` for unit rows, up to the constant ``log nu`` that
    the softmax cancels. No causal mask is applied.

    Shapes: q, k (..., T, 2m); t (T,) -> (..., T, T).
    """
    nu = validation.scalar("nu", nu, minimum=0.0, strict=True)
    residual = unitary_residual_norms(q, k, t, frequencies)
    t = validation.real_array("t", t)
    lag = t[..., None, :] - t[..., :, None]
    variance = unitary_measurement_variance(lag, sigma2=sigma2, eta2=eta2, c_gain=c_gain)
    total = variance + residual / nu
    if np.any(total <= 0):
        raise ValueError(
            "sigma_V^2 + |R|^2 / nu must be > 0; with sigma2 = eta2 = 0 a zero residual makes "
            "the score infinite"
        )
    return -np.log(total)


def unitary_temperature(*, nu, eta2) -> float:
    """``tau = 2 / (nu eta2 + 2)`` (seed 000 3.8, zero process noise).

    With ``sigma2 = 0`` and unit rows, ``exp(L) ~ (tau / 2) exp(tau <q~_i, k~_j>)`` to first
    order in the score (times ``nu``): softmax attention at inverse temperature ``tau`` with
    RoPE-rotated queries and keys.
    """
    nu = validation.scalar("nu", nu, minimum=0.0, strict=True)
    eta2 = validation.scalar("eta2", eta2, minimum=0.0)
    return 2.0 / (nu * eta2 + 2.0)

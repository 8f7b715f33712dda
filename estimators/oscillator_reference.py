"""Numerical reference for oscillator attention (seed 002, ContiFormer-style; digest Alg. D).

A float64 test oracle for ``kernels.ops.oscillator`` and the peer of
``benchmarks/bench_oscillator.py``: no closed form is used. For every key ``j`` the driven
oscillator ODE (seed 002 eqs. 2/7, 62, with the section 7 drive in ``t - t_j``)

    x'' + 2 gamma x' + omega^2 x = sum_n (g_n cos(w_n (t - t_j)) + h_n sin(w_n (t - t_j))) K_j,
    x(t_j) = K_j,   x'(t_j) = U K_j,

is integrated with ``scipy.integrate.solve_ivp`` (DOP853) together with the attention
integrals ``I_ij(t) = int_{t_j}^t <q_i(tau), x(tau)> dtau`` of every later query ``i`` (quadrature
as extra ODE components, so the solver's error control covers it) and ``int v``; the logit is
``I_ij(t_i)/(t_i - t_j)`` (Def. 1, eqs. 71-75), ``alpha_ii = <q_i(t_i), K_i>``.
The query ``q_i`` is the ridge fit of ``Q_1..Q_i`` on ``cos/sin(omega_m t)`` (eqs. 48-49),
solved here with ``numpy.linalg.solve`` per row.

Shapes are per head: ``q, k: (T, D)``, ``v: (T, Dv)``, ``t: (T,)``; parameters ``omega, gamma:
(D,)``, ``velocity: (D, D)``, ``drive_cos, drive_sin: (M, D)``, ``drive_freqs: (M,)``.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

__all__ = ["fit_query", "oscillator_logits", "oscillator_values", "oscillator_attention"]


def _as_params(omega, gamma, velocity, drive_cos, drive_sin, drive_freqs):
    arrs = [np.asarray(a, dtype=float) for a in (omega, gamma, velocity, drive_cos, drive_sin)]
    return (*arrs, np.asarray(drive_freqs, dtype=float))


def fit_query(q, t, freqs, *, ridge=1e-3, causal=True):
    """Per-row ridge fit ``(A, B)``, each ``(T, J, D)`` (seed 002 A.4, section 7)."""
    q, t, freqs = (np.asarray(a, dtype=float) for a in (q, t, freqs))
    n_modes = freqs.size
    phi = np.concatenate([np.cos(np.outer(t, freqs)), np.sin(np.outer(t, freqs))], axis=1)
    coef = np.empty((t.size, 2 * n_modes, q.shape[1]))
    for i in range(t.size):
        rows = slice(0, i + 1) if causal else slice(None)
        P = phi[rows]
        coef[i] = np.linalg.solve(P.T @ P + ridge * np.eye(2 * n_modes), P.T @ q[rows])
    return coef[:, :n_modes], coef[:, n_modes:]


def _solve_key(x0, t, j, omega, gamma, velocity, dcos, dsin, dfreq, extra, rtol, atol):
    """Integrate key/value ``j`` from ``t_j`` with extra quadrature components ``extra(tau, x)``."""
    dim = x0.size
    if j == t.size - 1:  # no later time: only the anchor value (a zero-length solve fails)
        return np.zeros((extra(t[j], x0).size, 1))
    state0 = np.concatenate([x0, velocity @ x0, np.zeros(extra(t[j], x0).size)])
    gain_c, gain_s = dcos * x0, dsin * x0  # (M, D)

    def rhs(tau, state):
        x, xd = state[:dim], state[dim : 2 * dim]
        s = tau - t[j]
        force = np.cos(dfreq * s) @ gain_c + np.sin(dfreq * s) @ gain_s
        acc = -(omega**2) * x - 2.0 * gamma * xd + force
        return np.concatenate([xd, acc, extra(tau, x)])

    sol = solve_ivp(rhs, (t[j], t[-1]), state0, method="DOP853", t_eval=t[j:], rtol=rtol, atol=atol)
    if not sol.success:
        raise RuntimeError(f"solve_ivp failed for key {j}: {sol.message}")
    return sol.y[2 * dim :]  # (n_extra, T - j)


def oscillator_logits(
    q, k, t, *, omega, gamma, velocity, drive_cos, drive_sin, drive_freqs, freqs,
    ridge=1e-3, causal_fit=True, rtol=1e-12, atol=1e-14,
):  # fmt: skip
    """Logits ``(T, T)`` (entries ``j > i`` are NaN) by ODE integration plus quadrature."""
    q, k, t, freqs = (np.asarray(a, dtype=float) for a in (q, k, t, freqs))
    omega, gamma, velocity, dcos, dsin, dfreq = _as_params(
        omega, gamma, velocity, drive_cos, drive_sin, drive_freqs
    )
    A, B = fit_query(q, t, freqs, ridge=ridge, causal=causal_fit)
    steps = t.size
    out = np.full((steps, steps), np.nan)
    for j in range(steps):
        Aj, Bj = A[j:], B[j:]  # queries of rows i >= j: (T - j, J, D)

        def extra(tau, x, Aj=Aj, Bj=Bj):
            qt = np.einsum("m,imd->id", np.cos(freqs * tau), Aj) + np.einsum(
                "m,imd->id", np.sin(freqs * tau), Bj
            )
            return qt @ x

        integ = _solve_key(k[j], t, j, omega, gamma, velocity, dcos, dsin, dfreq, extra, rtol, atol)
        rows = np.arange(j, steps)
        lag = t[j:] - t[j]
        out[rows[1:], j] = integ[np.arange(1, rows.size), np.arange(1, rows.size)] / lag[1:]
        qj = np.cos(freqs * t[j]) @ A[j] + np.sin(freqs * t[j]) @ B[j]
        out[j, j] = qj @ k[j]
    return out


def oscillator_values(
    v, t, *, omega, gamma, velocity, drive_cos, drive_sin, drive_freqs,
    readout="average", rtol=1e-12, atol=1e-14,
):  # fmt: skip
    """Value read-outs ``(T, T, Dv)`` (``vbar_ij``; entries ``j > i`` NaN), numerically."""
    v, t = np.asarray(v, dtype=float), np.asarray(t, dtype=float)
    params = _as_params(omega, gamma, velocity, drive_cos, drive_sin, drive_freqs)
    steps, dim = v.shape
    out = np.full((steps, steps, dim), np.nan)
    for j in range(steps):
        if readout == "average":
            integ = _solve_key(v[j], t, j, *params, lambda tau, x: x, rtol, atol)  # (D, T - j)
            lag = t[j + 1 :] - t[j]
            out[j + 1 :, j] = (integ[:, 1:] / lag).T
            out[j, j] = v[j]
        elif readout == "endpoint":
            out[j:, j] = _endpoint(v[j], t, j, *params, rtol, atol)
        else:
            raise ValueError(f"readout must be 'average' or 'endpoint', found {readout!r}")
    return out


def _endpoint(x0, t, j, omega, gamma, velocity, dcos, dsin, dfreq, rtol, atol):
    dim = x0.size
    gain_c, gain_s = dcos * x0, dsin * x0

    def rhs(tau, state):
        x, xd = state[:dim], state[dim:]
        s = tau - t[j]
        force = np.cos(dfreq * s) @ gain_c + np.sin(dfreq * s) @ gain_s
        return np.concatenate([xd, -(omega**2) * x - 2.0 * gamma * xd + force])

    state0 = np.concatenate([x0, velocity @ x0])
    if j == t.size - 1:  # no later time: the anchor value (a zero-length solve fails)
        return x0[None, :]
    sol = solve_ivp(rhs, (t[j], t[-1]), state0, method="DOP853", t_eval=t[j:], rtol=rtol, atol=atol)
    return sol.y[:dim].T


def oscillator_attention(q, k, v, t, *, key, value, freqs, ridge=1e-3, causal_fit=True,
                         readout="average", scale=None, rtol=1e-12, atol=1e-14):  # fmt: skip
    """``(out (T, Dv), weights (T, T))``: masked softmax of ``scale alpha`` over ``vbar``.

    ``key`` and ``value`` are dicts of the parameters of `oscillator_logits`.
    """
    alpha = oscillator_logits(
        q, k, t, freqs=freqs, ridge=ridge, causal_fit=causal_fit, rtol=rtol, atol=atol, **key
    )
    vbar = oscillator_values(v, t, readout=readout, rtol=rtol, atol=atol, **value)
    scale = 1.0 / np.sqrt(np.shape(q)[1]) if scale is None else scale
    logits = np.where(np.isnan(alpha), -np.inf, alpha * scale)
    logits -= logits.max(axis=1, keepdims=True)
    w = np.exp(logits)
    w /= w.sum(axis=1, keepdims=True)
    return np.einsum("ij,ijd->id", w, np.nan_to_num(vbar)), w

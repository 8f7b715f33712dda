"""OsciFormer's float64 oracle: a loop over (query, key) pairs with no closed-form kernel.

The reference the closed form (`kernels.ops.oscillator.closed_form`) is tested against; it is
itself tested against the ODE-plus-quadrature reference `estimators.oscillator_reference`
(``tests/kernels/test_osciformer.py``). It shares none of the closed form's algebra: no damped
``(c, s)`` pair, no resolvent ``(A + i omega)^{-1}``, no steady-state amplitudes, no box
integrals. For every head, key ``j`` and channel ``c`` the driven oscillator (seed 002 eqs.
2/7, 62, section 7 drive in ``s = t - t_j``)

    x'' + 2 gamma x' + omega^2 x = sum_n (g_n cos(w_n s) + h_n sin(w_n s)) K_jc,
    x(t_j) = K_jc,   x'(t_j) = (U K_j)_c,

is written as one homogeneous linear system of size ``2 + 2M``: ``(x, x', C_1..C_M,
S_1..S_M)`` with ``C_n' = -w_n S_n``, ``S_n' = w_n C_n`` (``C_n(0) = 1``, ``S_n(0) = 0``, so
``C_n = cos(w_n s)``, ``S_n = sin(w_n s)``), and propagated exactly by `torch.linalg.matrix_exp`.
Then, per pair ``j <= i`` with ``Delta = t_i - t_j``:

* logit (Def. 1, eqs. 71-75): ``alpha_ij = (1/Delta) int_0^Delta <q_i(t_j + s), k_j(t_j + s)>
  ds`` by composite Gauss-Legendre quadrature (panels of length <= `PANEL`, `NODES` nodes each:
  the integrand is a sum of damped sinusoids, resolved far below float64 rounding at the
  frequencies and lags of the tests), ``alpha_ii = <q_i(t_i), K_i>``;
* value: ``"average"`` ``(1/Delta) int_0^Delta v_j(t_j + s) ds`` exactly, by one more state
  (the integral of ``x``) in the same matrix exponential, ``vbar_ii = V_i``; ``"endpoint"``
  ``v_j(t_i)``;
* query: ``q_i`` is the ridge fit of ``Q_1..Q_i`` (all rows with ``causal_fit=False``) on
  ``cos/sin(omega_m t)``, one ``2J x 2J`` solve per row (eqs. 48-49);
* output: ``y_i = sum_{j <= i} softmax_j(scale alpha_ij) vbar_ij`` (eq. 79, Def. 2).

Everything is float64, one pair at a time: slow, meant for tests at small shapes. Shapes as the
closed form: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``, ``t`` None (``t_i = i``), ``(T,)`` or
``(B, T)``; parameters `OscillatorParams` (``(H, D)``, ``(H, D, D)``, ``(H, M, D)``, ``(M,)``).
It validates nothing: give it what the closed form accepts.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from kernels.ops.oscillator.params import OscillatorParams

F64 = torch.float64
PANEL = 0.25  # longest quadrature panel, in units of t
NODES = 16  # Gauss-Legendre nodes per panel (exact for polynomials of degree 31)


def _times(t, batch: int, steps: int) -> torch.Tensor:
    if t is None:
        return torch.arange(steps, dtype=F64).expand(batch, steps)
    return torch.as_tensor(t, dtype=F64).expand(batch, steps)


def _params(p: OscillatorParams) -> OscillatorParams:
    return OscillatorParams(*(torch.as_tensor(x, dtype=F64) for x in p))


def _system(p: OscillatorParams, head: int, x_j: torch.Tensor):
    """The driven oscillator of every channel of one key as ``z' = G z``: the ``(D, n, n)``
    system matrices and the ``(D, n)`` start vectors, ``n = 3 + 2M``, states
    ``(x, x', C_1..C_M, S_1..S_M, int x)``."""
    drive = p.drive_freqs
    m = drive.shape[0]
    dim = x_j.shape[0]
    n = 3 + 2 * m
    cos, sin = slice(2, 2 + m), slice(2 + m, 2 + 2 * m)
    g = torch.zeros(dim, n, n, dtype=F64)
    g[:, 0, 1] = 1.0
    g[:, 1, 0] = -(p.omega[head] ** 2)
    g[:, 1, 1] = -2.0 * p.gamma[head]
    g[:, 1, cos] = (p.drive_cos[head] * x_j).T  # forcing g_n cos(w_n s) K_jc
    g[:, 1, sin] = (p.drive_sin[head] * x_j).T  # and h_n sin(w_n s) K_jc
    g[:, cos, sin] = -torch.diag(drive)  # C_n' = -w_n S_n
    g[:, sin, cos] = torch.diag(drive)  # S_n' = w_n C_n
    g[:, n - 1, 0] = 1.0  # (int x)' = x
    start = torch.zeros(dim, n, dtype=F64)
    start[:, 0], start[:, 1], start[:, cos] = x_j, p.velocity[head] @ x_j, 1.0
    return g, start


def _trajectory(p: OscillatorParams, head: int, x_j: torch.Tensor, lags: torch.Tensor):
    """``(x(s), int_0^s x)`` of every channel of one key: lags (K,) -> two (K, D) tensors."""
    g, start = _system(p, head, x_j)
    state = torch.linalg.matrix_exp(g[:, None] * lags[:, None, None]) @ start[:, None, :, None]
    return state[..., 0, 0].T, state[..., -1, 0].T


def _quadrature_trajectory(p: OscillatorParams, head: int, x_j: torch.Tensor, length: float):
    """Composite Gauss-Legendre on ``[0, length]`` (equal panels of length ``h <= PANEL``,
    `NODES` each): ``(nodes (K,), weights (K,), x(nodes) (K, D))``. The state at the panel
    starts is carried by ``e^{G h}`` (the semigroup), the nodes inside a panel by ``e^{G s}``
    at the panel's local nodes: two matrix exponentials per channel."""
    panels = max(1, math.ceil(length / PANEL))
    h = length / panels
    x, w = (torch.from_numpy(a) for a in np.polynomial.legendre.leggauss(NODES))
    local, weights = h * (x + 1) / 2, h * w / 2
    g, state = _system(p, head, x_j)
    inside = torch.linalg.matrix_exp(g[:, None] * local[:, None, None])  # (D, NODES, n, n)
    step = torch.linalg.matrix_exp(g * h)  # (D, n, n)
    values = []
    for _ in range(panels):
        values.append((inside @ state[:, None, :, None])[..., 0, 0])  # (D, NODES)
        state = (step @ state[..., None])[..., 0]
    offsets = h * torch.arange(panels, dtype=F64)
    nodes = (offsets[:, None] + local).reshape(-1)
    return nodes, weights.repeat(panels), torch.cat(values, dim=1).T


def _query_coefficients(q_bh, t_b, freqs, ridge, causal_fit):
    """Per row ``i``: ``coef (2J, D)`` of the ridge fit on ``[cos | sin](freqs t)``."""
    phi = torch.cat([torch.cos(t_b[:, None] * freqs), torch.sin(t_b[:, None] * freqs)], dim=1)
    eye = torch.eye(phi.shape[1], dtype=F64)
    coefs = []
    for i in range(q_bh.shape[0]):
        rows = slice(0, i + 1) if causal_fit else slice(None)
        a, y = phi[rows], q_bh[rows]
        coefs.append(torch.linalg.solve(a.T @ a + ridge * eye, a.T @ y))
    return coefs


def _query_at(coef, freqs, times):
    """``q(times) = [cos | sin](freqs times) @ coef``: times (K,) -> (K, D)."""
    return (
        torch.cat([torch.cos(times[:, None] * freqs), torch.sin(times[:, None] * freqs)], 1) @ coef
    )


def naive_oscillator_logits(q, k, t=None, *, params, freqs, ridge=1e-3, causal_fit=True):
    """Logits ``alpha_ij`` ``(B, H, T, T)`` by quadrature of the propagated keys (float64);
    entries ``j > i`` are 0. Arguments as `kernels.ops.oscillator.oscillator_logits`."""
    q, k = torch.as_tensor(q, dtype=F64), torch.as_tensor(k, dtype=F64)
    batch, heads, steps, _ = q.shape
    t = _times(t, batch, steps)
    p = _params(params)
    freqs = torch.as_tensor(freqs, dtype=F64)
    logits = torch.zeros(batch, heads, steps, steps, dtype=F64)
    for b in range(batch):
        for h in range(heads):
            coefs = _query_coefficients(q[b, h], t[b], freqs, ridge, causal_fit)
            for i in range(steps):
                now = t[b, i].reshape(1)
                logits[b, h, i, i] = (_query_at(coefs[i], freqs, now)[0] * k[b, h, i]).sum()
                for j in range(i):
                    lag = float(t[b, i] - t[b, j])
                    nodes, weights, keys = _quadrature_trajectory(p, h, k[b, h, j], lag)
                    query = _query_at(coefs[i], freqs, t[b, j] + nodes)
                    logits[b, h, i, j] = (weights * (query * keys).sum(-1)).sum() / lag
    return logits


def naive_oscillator_values(v, t=None, *, params, readout="average"):
    """Read-out values ``vbar_ij`` ``(B, H, T, T, Dv)`` (float64); entries ``j > i`` are 0.
    Arguments as `kernels.ops.oscillator.oscillator_values`."""
    v = torch.as_tensor(v, dtype=F64)
    batch, heads, steps, dim = v.shape
    t = _times(t, batch, steps)
    p = _params(params)
    values = torch.zeros(batch, heads, steps, steps, dim, dtype=F64)
    for b in range(batch):
        for h in range(heads):
            for j in range(steps):
                lags = t[b, j:] - t[b, j]  # keys i = j, j + 1, ...
                x, integral = _trajectory(p, h, v[b, h, j], lags)
                if readout == "endpoint":
                    values[b, h, j:, j] = x
                else:
                    values[b, h, j, j] = v[b, h, j]
                    values[b, h, j + 1 :, j] = integral[1:] / lags[1:, None]
    return values


def naive_oscillator_attention(
    q,
    k,
    v,
    t=None,
    *,
    key_params,
    value_params,
    freqs,
    ridge=1e-3,
    causal_fit=True,
    readout="average",
    scale=None,
):
    """``(out (B, H, T, Dv), weights (B, H, T, T))`` in float64, from `naive_oscillator_logits`
    and `naive_oscillator_values` (eq. 79, Def. 2; ``scale`` defaults to ``1/sqrt(D)``).
    Arguments as `kernels.ops.oscillator.oscillator_attention`."""
    logits = naive_oscillator_logits(
        q, k, t, params=key_params, freqs=freqs, ridge=ridge, causal_fit=causal_fit
    )
    values = naive_oscillator_values(v, t, params=value_params, readout=readout)
    steps = logits.shape[-1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = torch.zeros_like(logits)
    out = torch.zeros(*values.shape[:3], values.shape[-1], dtype=F64)
    for i in range(steps):
        w = torch.softmax(scale * logits[..., i, : i + 1], dim=-1)  # causal: keys j <= i
        weights[..., i, : i + 1] = w
        out[..., i, :] = (w[..., None] * values[..., i, : i + 1, :]).sum(-2)
    return out, weights

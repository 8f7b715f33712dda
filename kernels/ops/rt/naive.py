"""The radial-tangential forms' float64 oracles: every ``(i, j)`` in complex arithmetic.

* `rt_afa_loop`: seed 000 Algorithm 2 in the corrected form of `kernels.ops.rt.afa` (query-
  frame radial/tangential split, lag-invariant keys), with the pulled-forward keys and values
  ``e^{(-a + i omega) s_ij} x_j`` formed as ``(B, H, T, T, n)`` complex tensors: no Gram trick,
  no co-rotating frame, no log-space scaling. Tested against it: `tests/kernels/test_rt_afa.py`.
* `rt_rfa_loop`: seed 003 Algorithm 1 (`kernels.ops.rt.rfa`) with every switch, one
  ``(b, h, i, j)`` at a time, with explicit ``(D, D)`` radial-tangential precision matrices
  (Sherman-Morrison, ``slogdet``) and the Student-t logit written out (seed 004 eq. 11,
  ``log P - ((nu + n)/n) log1p(d^2/nu)``, its ``nu = inf`` limit ``log P - d^2/n``). Tested
  against it: `tests/kernels/test_rt_rfa.py`.

Shapes: ``q, k, v (B, H, T, D)`` real pairs ``[re | im]`` (``D = 2n``).
"""

from __future__ import annotations

import math

import numpy as np
import torch


def _phi(mu, lag):
    """``(1 - e^{-2 mu lag}) / (2 mu)``, and ``lag`` at ``mu = 0`` (seed 003 eq. 7)."""
    if mu == 0:
        return lag
    return -math.expm1(-2 * mu * lag) / (2 * mu)


def _rank_one_inverse(a, b, u):
    """Sherman-Morrison: ``(a I + b u u^T)^-1 = (I - b u u^T / (a + b |u|^2)) / a``."""
    outer = np.outer(u, u)
    return (np.eye(u.size) - b * outer / (a + b * (u @ u))) / a


def _student_t_logit(d2, nu, n, *, log_precision):
    """``log P - ((nu + n)/n) log1p(d2/nu)``; at ``nu = inf`` the limit ``log P - d2/n``."""
    if math.isinf(nu):
        return log_precision - d2 / n
    return log_precision - (1.0 + nu / n) * math.log1p(d2 / nu)


def rt_afa_loop(q, k, v, t, p, *, tau, nu, causal, exact):
    """Seed 000 Algorithm 2 in the form of `kernels.ops.rt.afa`, ``torch.complex`` over every
    ``(i, j)`` (module docstring).

    ``q, k, v`` (B, H, T, D) float64 real pairs; ``t`` (T,) stamps; ``p`` a dict of per-head
    (H,) tensors ``decay, frequencies (H, n), sigma_r2, sigma_t2, eta_r2, eta_t2``; ``tau`` and
    ``nu`` the ``(radial, tangential)`` temperatures and robust scales; ``exact`` the exact
    geodesic step. Returns ``(output (B, H, T, D), [A_r, A_t] each (B, H, T, T))``.
    """
    qc, kc, vc = (torch.complex(*x.chunk(2, -1)) for x in (q, k, v))
    a = p["decay"].view(-1, 1, 1)
    lag = (t[:, None] - t[None, :]).view(1, 1, *2 * t.shape)  # s_ij
    visible = lag >= 0 if causal else lag == lag
    omega = p["frequencies"].view(1, -1, 1, 1, q.shape[-1] // 2)
    transport = torch.exp((-a * lag)[..., None] + 1j * lag[..., None] * omega)
    k_hat = transport * kc[:, :, None]
    v_hat = transport * vc[:, :, None]
    u = vc / vc.abs().pow(2).sum(-1, keepdim=True).sqrt()
    r = qc[:, :, :, None] - k_hat
    ell = (u[:, :, :, None].conj() * r).sum(-1).real
    d = r - ell[..., None] * u[:, :, :, None]
    d_sq = d.abs().pow(2).sum(-1)

    def variance(s2, e2):
        s2, e2 = s2.view(-1, 1, 1), e2.view(-1, 1, 1)
        phi = -torch.expm1(-2 * a * lag.abs()) / (2 * a)
        forward = s2 * phi + e2 * torch.exp(-2 * a * lag)
        backward = torch.exp(2 * a * lag.abs()) * (s2 * phi + e2)  # seed 000 A.3, s < 0
        return torch.where(lag >= 0, forward, backward)

    weights = []
    for var, res, temp, nu_x in (
        (variance(p["sigma_r2"], p["eta_r2"]), ell**2, tau[0], nu[0]),
        (variance(p["sigma_t2"], p["eta_t2"]), d_sq, tau[1], nu[1]),
    ):
        logit = -torch.log(var) - temp * torch.log1p(res / (var * nu_x))
        weights.append(torch.softmax(logit.masked_fill(~visible, -math.inf), -1))
    y_r = (weights[0][..., None] * v_hat).sum(-2)
    y_t = (weights[1][..., None] * v_hat).sum(-2)
    m = (u.conj() * y_r).sum(-1, keepdim=True).real
    w = y_t - (u.conj() * y_t).sum(-1, keepdim=True).real * u
    v_norm = vc.abs().pow(2).sum(-1, keepdim=True).sqrt()
    if exact:
        theta = w.abs().pow(2).sum(-1, keepdim=True).sqrt() / v_norm
        step = torch.cos(theta) * u + torch.sinc(theta / math.pi) * w / v_norm
    else:
        step = vc + w
    out = m * step / step.abs().pow(2).sum(-1, keepdim=True).sqrt()
    return torch.cat((out.real, out.imag), -1), weights


def rt_rfa_loop(q, k, v, t, freqs, p, *, causal, magnitude_precision, normalize_qkv, tangent):
    """Seed 003 Alg. 1 with every switch, one (b, h, i, j) at a time, complex numbers and explicit
    (D, D) precision matrices (`_rank_one_inverse`, ``slogdet``); float64 numpy.

    ``q, k, v`` (B, H, T, D) tensors; ``t`` (B, T); ``freqs`` (H, n); ``p`` the keywords of
    `kernels.ops.rt.rfa` as numbers or (H,) tensors, every radial one and ``tangential_decay``
    given. Returns ``(output (B, H, T, D), weights (B, H, T, T))`` tensors.
    """
    q, k, v, t, freqs = (x.numpy() for x in (q, k, v, t, freqs))
    B, H, T, D = q.shape
    n = D // 2

    def cplx(x):
        return x[..., :n] + 1j * x[..., n:]

    def real(z):
        return np.concatenate([z.real, z.imag])

    def head(name, h):
        x = p[name]
        return float(x[h]) if isinstance(x, torch.Tensor) else float(x)

    out = np.zeros((B, H, T, D))
    weights = np.zeros((B, H, T, T))
    for b in range(B):
        for h in range(H):
            mu, mu_t = head("decay", h), head("tangential_decay", h)
            sig, eta, gam = (head(x, h) for x in ("process_var", "measurement_var", "query_var"))
            sig_r, eta_r, gam_r = (
                head(f"radial_{x}", h) for x in ("process_var", "measurement_var", "query_var")
            )
            floor, eps, nu, beta = (head(x, h) for x in ("angular_var", "eps", "nu", "temperature"))
            mags = np.linalg.norm(v[b, h], axis=-1)
            qs, ks, vs = (cplx(x[b, h]) for x in (q, k, v))
            if normalize_qkv:
                qs, ks, vs = (x / np.linalg.norm(x, axis=-1, keepdims=True) for x in (qs, ks, vs))
            for i in range(T):
                logits = np.full(T, -np.inf)
                terms = []
                for j in range(T):
                    if causal and j > i:
                        terms.append(0)
                        continue
                    s = t[b, i] - t[b, j]
                    tau = abs(s)
                    rot = np.exp(1j * freqs[h] * s)
                    c = 1.0 if normalize_qkv else np.exp(-mu * tau)
                    r = real(qs[i] - c * rot * ks[j])
                    var_t = sig * _phi(mu_t, tau) + eta * np.exp(-2 * mu_t * tau) + gam
                    if magnitude_precision:
                        mhat2 = (mags[j] * np.exp(-mu * tau)) ** 2
                        kappa = 1 / (
                            (eta + gam) / (mags[i] ** 2 + eps) + var_t / (mhat2 + eps) + floor
                        )
                        d2, bias = kappa * r @ r, np.log(kappa)
                    else:
                        var_r = sig_r * _phi(mu, tau) + eta_r * np.exp(-2 * mu * tau) + gam_r
                        u = real(qs[i]) / np.linalg.norm(qs[i])
                        P = _rank_one_inverse(var_t, var_r - var_t, u)
                        d2, bias = r @ P @ r, np.linalg.slogdet(P)[1] / D
                    logits[j] = beta * _student_t_logit(d2, nu, n, log_precision=bias)
                    terms.append(c * rot * vs[j])
                a = np.exp(logits - logits.max())
                a /= a.sum()
                weights[b, h, i] = a
                y = real(sum(a[j] * terms[j] for j in range(T)))
                if tangent:
                    own = real(vs[i])
                    y = y - (own @ y) / (own @ own) * own
                out[b, h, i] = y
    return torch.tensor(out), torch.tensor(weights)


__all__ = ["rt_afa_loop", "rt_rfa_loop"]

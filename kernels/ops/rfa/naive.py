"""RFA's float64 oracle: seed 004 Algorithm 1 pair by pair in complex arithmetic.

The reference the torch form and (through it) the fused kernel are tested against
(`tests/kernels/test_rfa.py`). For query ``i`` and key ``j`` (lag ``tau = t_i - t_j``), per head:

    E = e^{-mu |tau|},   V = sigma^2 (1 - E^2) / (2 mu) + eta^2 E^2 + gamma^2  (eq. 9),
    r2 = |q_i - E e^{i omega tau} k_j|^2,                                        (eq. 10)
    L_ij = tau_s (log P - kappa log(1 + P r2 / nu)),   kappa = (nu + n) / n       (eq. 11),
    A_ij = softmax_j(L_ij) E,   out_i = sum_j A_ij e^{i omega tau} v_j,

with every ablation switch of seed 004 E.2 written out (the exponential kernel, a flat prior, a
frozen gate, unrotated values or queries/keys, the unitary limit). Nothing is shared with the
forms but the real-pair conversion: no factorised residual, no Toeplitz strip, no co-rotating
frame.

Shapes: ``q, k, v (B, H, T, D)`` (``D = 2n``), ``t (B, T)``.
"""

from __future__ import annotations

import math

import torch

from kernels.ops.common import complex_pairs

F64 = torch.float64


def rfa_loop(q, k, v, t, p, *, causal=True, **flags):
    """Seed 004 Algorithm 1 pair by pair (module docstring), every ablation switch.

    ``q, k, v`` (B, H, T, D) float64 real pairs; ``t`` (B, T) stamps; ``p`` a dict of per-head
    (H,) tensors ``decay, frequencies (H, n), process_var, measurement_var, anchor_var, nu,
    temperature``; ``flags`` the switches of `kernels.ops.rfa.rfa_attention`. Returns
    ``(output (B, H, T, D) real pairs, weights (B, H, T, T))``.
    """
    kernel = flags.get("weight_kernel", "student-t")
    prior = flags.get("precision_prior", True)
    gate_on = flags.get("precision_gate", True)
    rot_qk = flags.get("rotate_qk", True)
    rot_v = flags.get("rotate_values", True)
    unitary = flags.get("unitary_limit", False)
    B, H, T, D = q.shape
    n = D // 2
    qc, kc, vc = (complex_pairs.to_complex(x) for x in (q, k, v))
    out = torch.zeros(B, H, T, n, dtype=torch.complex128)
    weights = torch.zeros(B, H, T, T, dtype=F64)
    for b in range(B):
        for h in range(H):
            mu, nu, tau_s = p["decay"][h], p["nu"][h], p["temperature"][h]
            s2, e2, g2 = p["process_var"][h], p["measurement_var"][h], p["anchor_var"][h]
            omega = p["frequencies"][h]
            for i in range(T):
                keys = range(i + 1) if causal else range(T)
                logits, decays, values = [], [], []
                for j in keys:
                    lag = t[b, i] - t[b, j]
                    phase = torch.exp(1j * omega * lag)
                    rot = phase if rot_qk else torch.ones_like(phase)
                    values.append((phase if rot_v else 1.0) * vc[b, h, j])
                    if unitary:
                        score = (qc[b, h, i].conj() * rot * kc[b, h, j]).real.sum() / math.sqrt(D)
                        logits.append(tau_s * score)
                        decays.append(torch.tensor(1.0, dtype=F64))
                        continue
                    e = torch.exp(-mu * lag.abs())
                    if mu > 0:
                        var = s2 * (1 - e**2) / (2 * mu) + e2 * e**2 + g2
                    else:
                        var = s2 * lag.abs() + e2 + g2
                    P, bias = (1 / var, -torch.log(var)) if prior else (1.0, 0.0)
                    gate = P if (gate_on or not prior) else 1 / (e2 + g2)
                    r2 = (qc[b, h, i] - e * rot * kc[b, h, j]).abs().pow(2).sum()
                    if kernel == "student-t":
                        pen = (nu + n) / n * torch.log1p(gate * r2 / nu)
                    else:
                        pen = gate * r2 / nu
                    logits.append(tau_s * (bias - pen))
                    decays.append(e)
                a = torch.softmax(torch.stack(logits), 0) * torch.stack(decays)
                for jj, j in enumerate(keys):
                    out[b, h, i] += a[jj] * values[jj]
                    weights[b, h, i, j] = a[jj]
    return complex_pairs.from_complex(out), weights


__all__ = ["rfa_loop"]

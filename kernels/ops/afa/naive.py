"""AFA's float64 oracle: seed 000 3.1 written out, one head, a complex loop over ``(i, j)``.

This is the reference every AFA form is tested against (`tests/kernels/test_afa.py`: the tensor
form equals it, and the isotropic and separable forms equal the tensor form; the AFA
Transformer block's two attentions equal it too, `tests/kernels/test_afa_transformer.py`). It
shares no code with the forms: no real pairs, no factorised residual, no log space, no
Toeplitz tables, no rotation into a co-rotating frame. For query ``i`` and key ``j``
(``tau = t_i - t_j``), per complex feature ``k``:

    Zhat[k] = e^{lambda_k tau} Zk_j[k],     R[k] = Zq_i[k] - Zhat[k],
    w_ij = (1 + sum_k |R[k]|^2 / (nu V_qk,k(tau)))^(-temperature),
    A[i, j, k] = w_ij / V_v,k(tau) / sum_{j' visible} (w_ij' / V_v,k(tau')),
    Zbar_i[k] = sum_j A[i, j, k] e^{lambda_v,k tau} Zv_j[k],

with the propagated variance of seed 000 A.3 (`propagated_variance`, both signs of ``tau``) or
any other given as ``variance``. Real features are complex ones with zero imaginary part and
``omega = 0``.

Shapes: ``zq, zk (T, n)``, ``zv (T, nv)`` complex; ``t (T,)``; dynamics as ``(lambda (n,),
sigma^2 (n,), eta^2 (n,))``. Returns ``(out (T, nv) complex128, attn (T, T, nv) float64)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def propagated_variance(lam, process_var, measurement_var, lag) -> np.ndarray:
    """Seed 000 A.3: ``V(tau)`` of the eigen-mode ``lambda = -a + i omega`` at lag ``tau``.

    ``tau >= 0``: ``sigma^2 phi + eta^2 e^{-2 a tau}``; ``tau < 0`` (a key after the query,
    pulled back): ``e^{2 a |tau|} (sigma^2 phi + eta^2)``; ``phi = (1 - e^{-2 a |tau|}) / (2 a)``
    (``|tau|`` at ``a = 0``). Arguments broadcast (numpy).
    """
    a = -np.real(np.asarray(lam, dtype=complex))
    s2 = np.asarray(process_var, dtype=float)
    e2 = np.asarray(measurement_var, dtype=float)
    size = abs(float(lag))
    safe = np.where(a == 0, 1.0, a)
    phi = np.where(a == 0, size, -np.expm1(-2 * safe * size) / (2 * safe))
    if lag >= 0:
        return s2 * phi + e2 * np.exp(-2 * a * size)
    return np.exp(2 * a * size) * (s2 * phi + e2)


def afa_loop(zq, zk, zv, t, qk, vd, *, nu, temperature, causal, variance=propagated_variance):
    """Seed 000 3.1 for one head in ``torch.complex128``, a loop over ``(i, j)`` (module doc).

    Parameters
    ----------
    zq, zk : (T, n) complex (torch or numpy); zv : (T, nv) complex.
    t : (T,) time stamps.
    qk, vd : ``(lambda (n,), sigma^2 (n,), eta^2 (n,))`` of the queries/keys and of the values
        (``nv`` entries), numpy.
    nu : robust scale (``math.inf``: weight 1); temperature : the weight's exponent.
    causal : keys ``j <= i`` only, or all keys (backward variance for ``tau < 0``).
    variance : ``(lambda, sigma^2, eta^2, tau) -> V(tau)`` per feature; default A.3.

    Returns
    -------
    ``(out (T, nv) complex128, attn (T, T, nv) float64)``: the estimates and the weights
    ``A[i, j, k]`` (0 on hidden keys).
    """
    zq, zk, zv = (torch.as_tensor(np.asarray(x), dtype=torch.complex128) for x in (zq, zk, zv))
    t = [float(x) for x in np.asarray(t, dtype=float)]
    lam_qk = torch.as_tensor(np.asarray(qk[0], dtype=complex))
    lam_v = torch.as_tensor(np.asarray(vd[0], dtype=complex))

    def precision(dyn, tau):
        return torch.as_tensor(1 / np.asarray(variance(*dyn, tau), dtype=float))

    steps, nv = zv.shape
    out = torch.zeros(steps, nv, dtype=torch.complex128)
    attn = torch.zeros(steps, steps, nv, dtype=torch.float64)
    for i in range(steps):
        keys = [j for j in range(steps) if j <= i or not causal]
        tilde = torch.zeros(len(keys), nv, dtype=torch.float64)
        for col, j in enumerate(keys):
            tau = t[i] - t[j]
            residual = zq[i] - torch.exp(lam_qk * tau) * zk[j]
            d2 = torch.sum(precision(qk, tau) * residual.abs() ** 2)
            weight = 1.0 if math.isinf(nu) else (1 + d2 / nu) ** -temperature
            tilde[col] = weight * precision(vd, tau)
        a = tilde / tilde.sum(dim=0)
        for col, j in enumerate(keys):
            out[i] += a[col] * torch.exp(lam_v * (t[i] - t[j])) * zv[j]
            attn[i, j] = a[col]
    return out, attn


__all__ = ["afa_loop", "propagated_variance"]

"""KLA's float64 oracle: the scalar Kalman filter, token by token, in moment form (seed 001).

This is the reference the fast forms are tested against (the scans of `kernels.ops.kla.scan`
and the Triton kernel of `kernels.ops.kla.triton` through them); it is itself tested against
the numpy information filter `estimators.scan.kla_filter` (``tests/kernels/test_kla_layer.py``).
It shares no algebra with the fast forms: no Moebius maps, no information mean, no scan, no
renormalisation; every channel is the textbook predict/update of the model (seed 001 eqs.
(7)-(9))

    z_t | z_{t-1} ~ N(a_bar_t z_{t-1}, p_bar_t),      v_t | z_t ~ N(k_t z_t, 1 / Lambda^v_t),

from the belief ``N(eta0 / lam0, 1 / lam0)`` before the first token:

    predict:  m_t = a_bar_t mu_{t-1},           P_t = a_bar_t^2 / lam_{t-1} + p_bar_t,
    update:   lam_t = 1 / P_t + k_t^2 Lambda^v_t,
              mu_t = (m_t / P_t + k_t Lambda^v_t v_t) / lam_t,

(``Lambda^v_t = 0``: a missing token, a pure prediction), with the readouts ``q_t mu_t`` and
``q_t^2 / lam_t``. Everything runs in float64 whatever the input dtype, one token at a time, so
it is slow (``T`` Python steps) and meant for tests at small shapes. It validates nothing beyond
broadcasting: give it what `kernels.ops.kla.kla_scan` accepts (``a_bar > 0``, ``p_bar >= 0``,
``lam0 > 0``, ``value_precision >= 0``).

Shapes: tokens ``(B, T, *S)``; ``a_bar``, ``p_bar``, ``q`` broadcast to the token shape;
``lam0``, ``eta0`` to ``(B, *S)``. The result is a `KLAScanResult` of float64 tensors.
"""

from __future__ import annotations

import torch

from kernels.ops.kla.params import KLAScanResult, KLAState

F64 = torch.float64


def naive_kla(k, value_precision, v, a_bar, p_bar, *, q=None, lam0=1.0, eta0=0.0) -> KLAScanResult:
    """The per-channel Kalman filter as a float64 loop over tokens (the module docstring).

    Parameters
    ----------
    k, value_precision, v : tokens (B, T, *S) or broadcasting there (tensors or numbers).
    a_bar, p_bar, q : broadcasting to the token shape; ``q`` optional.
    lam0, eta0 : belief before the first token, broadcasting to (B, *S).

    Returns
    -------
    KLAScanResult of float64 (B, T, *S) tensors; ``state`` is the final (B, *S) belief.
    """
    k, value_precision, v, a_bar, p_bar = (
        torch.as_tensor(x, dtype=F64) for x in (k, value_precision, v, a_bar, p_bar)
    )
    k, value_precision, v, a_bar, p_bar = torch.broadcast_tensors(
        k, value_precision, v, a_bar, p_bar
    )
    batch, steps, *state_shape = k.shape
    lam = torch.as_tensor(lam0, dtype=F64).expand(batch, *state_shape)
    mu = torch.as_tensor(eta0, dtype=F64).expand(batch, *state_shape) / lam
    precisions, means = [], []
    for t in range(steps):
        prior_var = a_bar[:, t] ** 2 / lam + p_bar[:, t]
        lam_v = value_precision[:, t]
        lam = 1.0 / prior_var + k[:, t] ** 2 * lam_v
        mu = (a_bar[:, t] * mu / prior_var + k[:, t] * lam_v * v[:, t]) / lam
        precisions.append(lam)
        means.append(mu)
    precision, mean = torch.stack(precisions, dim=1), torch.stack(means, dim=1)
    variance = 1.0 / precision
    output = output_variance = None
    if q is not None:
        q = torch.as_tensor(q, dtype=F64)
        output, output_variance = q * mean, q * q * variance
    info_mean = precision * mean
    state = KLAState(precision[:, -1], info_mean[:, -1])
    return KLAScanResult(precision, info_mean, mean, variance, output, output_variance, state)

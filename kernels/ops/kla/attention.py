"""KLA's equivalent attention matrix: the scan's readout as weights on the values (seed 001 E.4).

Once the precision path ``lam_t`` is known (it depends on the keys and value precisions, never on
the values), the mean is affine in the values. Unrolling the moment-form step of Cor. 2.2,
eq. (20), ``mu_t = g_t mu_{t-1} + c_t v_t`` with

    g_t = a_bar_t (1 - phi_t / lam_t)  (in [0, a_bar_t]),    c_t = k_t Lambda^v_t / lam_t,

gives, per state element,

    q_t mu_t = sum_{s <= t} W[t, s] v_s + I_t mu_0,
    W[t, s] = q_t (g_{s+1} ... g_t) c_s,        I_t = q_t (g_1 ... g_t),    mu_0 = eta_0 / lam_0.

This is the paper's ``M_seq = diag(q lam^{-1}) W_E4`` with ``W_E4[t, s] = (f_{s+1} ... f_t) k_s
Lambda^v_s`` (App. E.4, Fig. 10; ``f`` the information-form gates of eq. (19)): since
``g_r = f_r lam_{r-1} / lam_r`` the product of moment gates telescopes to
``(f_{s+1} ... f_t) lam_s / lam_t``, and the two forms agree entry by entry. The moment form is
used because its gates are bounded by ``a_bar`` while ``f = 1 / a_bar > 1`` with ``p_bar = 0``,
whose products overflow fp32 after ``~88 / (a dt)`` tokens (digest C11). The products are exact
cumulative products (no division by a prefix product, no log-space differences), so the
weights keep full relative precision.

Shapes: tokens ``(B, T, *S)`` as in `kernels.ops.kla.kla_scan`; ``weights`` is
``(B, *S, T, T)`` (rows: the readout step t, columns: the value step s; zero above the
diagonal), ``initial`` is ``(B, T, *S)``. The state-expanded layer (N slots by D channels, values
(B, T, 1, D)) sums ``weights`` over the slot axis to one (T, T) matrix per channel. Cost: time
and memory ``O(B T^2 prod(S))``; a diagnostic for figures and tests, not a forward path.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels.ops.kla.params import prepare
from kernels.ops.kla.scan import kla_scan_torch


class KLAAttention(NamedTuple):
    """weights : (B, *S, T, T), lower triangular; initial : (B, T, *S), the coefficient of the
    starting mean ``eta0 / lam0`` (zero contribution with the default ``eta0 = 0``)."""

    weights: torch.Tensor
    initial: torch.Tensor


def kla_attention_matrix(
    k, value_precision, a_bar, p_bar, *, q=None, lam0=1.0, method: str = "parallel"
) -> KLAAttention:
    """The weights ``W`` with ``output_t = sum_s W[t, s] v_s + initial_t eta0 / lam0`` exactly.

    Parameters
    ----------
    k, value_precision : keys and value precisions, (B, T, *S) or broadcasting there (the
        values play no part: the weights do not depend on them).
    a_bar, p_bar, q, lam0 : as in `kernels.ops.kla.kla_scan` (``q`` None: the weights of the
        mean ``mu_t`` itself).
    method : the scan that gives the precision path (`kla_scan`'s torch methods).

    Returns
    -------
    KLAAttention: ``weights`` (B, *S, T, T) and ``initial`` (B, T, *S), in ``k``'s dtype.

    Raises
    ------
    The errors of `kla_scan` for the same arguments.
    """
    zero = torch.zeros((), dtype=k.dtype if isinstance(k, torch.Tensor) else None)
    k, lam_v, _, a_bar, p_bar, q, lam0, _, shape = prepare(
        k, value_precision, zero, a_bar, p_bar, q, lam0, 0.0
    )
    variance = kla_scan_torch(k, lam_v, 0.0, a_bar, p_bar, lam0=lam0, method=method).variance
    phi = (k * lam_v * k).expand(shape)
    # 1 - phi / lam = lam_prior / lam in [0, 1]: clamp an ulp of rounding below 0 (as the scan)
    gate = a_bar * (1.0 - phi * variance).clamp_min(0.0)  # (B, T, *S)
    coef = (k * lam_v).expand(shape) * variance  # c_s
    steps = shape[1]
    r = torch.arange(steps, device=k.device)
    later = (r[:, None] > r[None, :]).view(1, steps, steps, *([1] * (len(shape) - 2)))
    # factors[b, r, s] = g_r for r > s, else 1; their cumulative product over r is
    # prod_{s < r <= t} g_r at row t (the empty product 1 on and above the diagonal)
    factors = torch.where(later, gate[:, :, None], torch.ones_like(gate[:, :1, None]))
    products = torch.cumprod(factors, dim=1)  # (B, T_t, T_s, *S)
    causal = (r[:, None] >= r[None, :]).view(1, steps, steps, *([1] * (len(shape) - 2)))
    weights = torch.where(causal, products * coef[:, None], torch.zeros_like(products))
    initial = torch.cumprod(gate, dim=1)
    if q is not None:
        weights = weights * q[:, :, None]
        initial = initial * q
    order = (0, *range(3, weights.ndim), 1, 2)  # (B, *S, T, T)
    return KLAAttention(weights.permute(order), initial)


__all__ = ["KLAAttention", "kla_attention_matrix"]

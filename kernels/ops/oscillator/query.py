"""The query function of OsciFormer: the ridge fit on a sinusoidal bank (seed 002 A.4, 7).

`fit_query` fits ``q(t) = sum_m A_m cos(omega_m t) + B_m sin(omega_m t)`` (eq. 49) to the
projected queries (causal prefix or all rows), `query_at` evaluates it. Shapes: queries
``(B, H, T, D)``, times ``(Bt, 1, T)``, bank ``(J,)``, coefficients ``(B, H, T, J, D)``.
"""

from __future__ import annotations

import torch

from kernels._validation import check_positive, check_query_fit


def _design(t: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """``Phi = [cos(omega_m t) | sin(omega_m t)]``: ``(Bt, 1, T) -> (Bt, 1, T, 2J)``."""
    phase = t.unsqueeze(-1) * freqs
    return torch.cat([torch.cos(phase), torch.sin(phase)], dim=-1)


def fit_query(q, t, freqs, *, ridge: float = 1e-3, causal: bool = True):
    """Ridge fit of the queries on the sinusoidal bank (seed 002 eqs. 48-49, A.4; section 7).

    ``[A; B] = (Phi^T Phi + ridge I)^{-1} Phi^T Q`` with ``Phi_n = [cos(omega_m t_n) |
    sin(omega_m t_n)]``. ``causal=True`` fits row ``i`` on ``Q_1..Q_i`` only (prefix sums of
    ``Phi^T Phi`` and ``Phi^T Q``, one ``2J x 2J`` solve per row; the seed leaves this choice
    open, digest 1.6); ``causal=False`` fits one query function on all ``T`` rows.

    Parameters
    ----------
    q : ``(B, H, T, D)``.  t : ``(Bt, 1, T)`` from `check_times`.  freqs : ``(J,)``.
    ridge : ``> 0``; also makes the first rows (fewer points than ``2J``) well posed.

    Returns
    -------
    ``(A, B)``, each ``(B, H, T, J, D)`` (``T`` copies of one fit when ``causal=False``).
    """
    check_positive("ridge", ridge)
    t = check_query_fit(q, t, freqs)
    n_modes = freqs.shape[0]
    phi = _design(t, freqs)  # (Bt, 1, T, 2J)
    gram = phi.unsqueeze(-1) * phi.unsqueeze(-2)  # (Bt, 1, T, 2J, 2J)
    rhs = phi.unsqueeze(-1) * q.unsqueeze(-2)  # (B, H, T, 2J, D)
    if causal:
        gram, rhs = gram.cumsum(dim=2), rhs.cumsum(dim=2)
    else:
        gram, rhs = gram.sum(dim=2, keepdim=True), rhs.sum(dim=2, keepdim=True)
    eye = torch.eye(2 * n_modes, dtype=q.dtype, device=q.device)
    coef = torch.linalg.solve(gram + ridge * eye, rhs)  # (B, H, T or 1, 2J, D)
    coef = coef.expand(q.shape[0], q.shape[1], q.shape[2], 2 * n_modes, q.shape[3])
    return coef[..., :n_modes, :], coef[..., n_modes:, :]


def query_at(coef_cos, coef_sin, freqs, times) -> torch.Tensor:
    """``q_i(t) = sum_m A_im cos(omega_m t) + B_im sin(omega_m t)`` (eq. 49).

    coef_* : ``(B, H, T, J, D)``; times : broadcastable to ``(B, H, T)``; returns ``(B, H, T, D)``.
    """
    phase = times.unsqueeze(-1) * freqs  # (.., T, J)
    return (torch.cos(phase).unsqueeze(-1) * coef_cos).sum(-2) + (
        torch.sin(phase).unsqueeze(-1) * coef_sin
    ).sum(-2)

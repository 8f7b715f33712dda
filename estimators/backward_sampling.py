"""Trajectories drawn from the smoothing posterior by RTS backward sampling (seed 000 B.3.1).

Seed 000 B.3.1 samples a temporally consistent trajectory by going backward from the last
step, drawing each state given the one already drawn after it and the filtered estimate. For a
linear-Gaussian model that conditional law is exact (forward filtering, backward sampling):

    x_T ~ N(m_T, P_T)
    x_k | x_{k+1} ~ N(m_k + J_k (x_{k+1} - m-_{k+1}),  P_k - J_k P-_{k+1} J_k^T),
    J_k = P_k F_{k+1}^T (P-_{k+1})^-1,

with ``m_k, P_k`` the filtered and ``m-_{k+1}, P-_{k+1}`` the predicted moments and ``F_{k+1}``
the exact transition of `estimators.kalman.kalman_filter`. The draws are then distributed as
the states given every measurement: each marginal is the RTS smoother's ``N(m^s_k, P^s_k)``
and consecutive states have ``Cov(x_k, x_{k+1}) = J_k P^s_{k+1}``.

`rts_sample` maps given standard normal draws to trajectories (an affine map, so its law can
be computed exactly: tests compare it with the dense oracle's joint posterior); `sample_paths`
draws the normals from a seed.

Shapes: ``noise`` and the result (N, B, T, d), or (N, T, d) for an unbatched filter result.
"""

from __future__ import annotations

import numpy as np

from estimators import batch_input
from estimators.linear_gaussian import sym, transpose


def _psd_factor(cov: np.ndarray) -> np.ndarray:
    """``L`` with ``L L^T = cov`` for symmetric PSD stacks (..., d, d), by the eigenvalue
    decomposition with round-off negatives set to zero (a conditional covariance may be
    singular, e.g. without process noise)."""
    values, vectors = np.linalg.eigh(sym(cov))
    return vectors * np.sqrt(np.clip(values, 0.0, None))[..., None, :]


@batch_input.guard
def rts_sample(filtered, noise) -> np.ndarray:
    """Trajectories from the smoothing posterior, driven by standard normal ``noise``.

    Parameters
    ----------
    filtered : the `estimators.kalman.kalman_filter` result of the sequences.
    noise : (N, B, T, d) (or (N, T, d) for an unbatched result) independent standard normals;
        draw n uses ``noise[n]``.

    Returns
    -------
    (N, B, T, d) (or (N, T, d)) trajectories: ``x_T = m_T + L_T e_T`` and, going backward,
    ``x_k = m_k + J_k (x_{k+1} - m-_{k+1}) + L_k e_k`` with ``L_k L_k^T`` the conditional
    covariance (module docstring).
    """
    batch_input.filter_result("filtered", filtered)
    squeeze = filtered.means.ndim == 2
    means = filtered.means[None] if squeeze else filtered.means
    pred_means = filtered.pred_means[None] if squeeze else filtered.pred_means
    B, T, d = means.shape
    noise = np.asarray(noise, dtype=float)
    want = (B, T, d)[1:] if squeeze else (B, T, d)
    if noise.ndim != len(want) + 1 or noise.shape[1:] != want:
        raise ValueError(
            f"noise must have shape (N, {', '.join(map(str, want))}) for this filter result, got "
            f"{noise.shape}"
        )
    if not np.all(np.isfinite(noise)):
        raise ValueError("noise must be finite")
    eps = noise[:, None] if squeeze else noise  # (N, B, T, d)
    covs, pred_covs, group = filtered.covs, filtered.pred_covs, filtered.group
    Phi = filtered.transition
    out = np.empty(eps.shape)
    out[:, :, -1] = means[:, -1] + np.einsum(
        "bij,nbj->nbi", _psd_factor(covs[group, -1]), eps[:, :, -1]
    )
    if T > 1:
        PFt = covs[:, :-1] @ transpose(Phi[:, 1:])  # (G, T-1, d, d)
        J = transpose(np.linalg.solve(pred_covs[:, 1:], transpose(PFt)))  # P- symmetric
        factor = _psd_factor(covs[:, :-1] - J @ pred_covs[:, 1:] @ transpose(J))
        for k in range(T - 2, -1, -1):
            gap = out[:, :, k + 1] - pred_means[:, k + 1]
            out[:, :, k] = (
                means[:, k]
                + np.einsum("bij,nbj->nbi", J[group, k], gap)
                + np.einsum("bij,nbj->nbi", factor[group, k], eps[:, :, k])
            )
    return out[:, 0] if squeeze else out


def sample_paths(filtered, draws: int, *, seed=None) -> np.ndarray:
    """``draws`` trajectories from the smoothing posterior (`rts_sample`), standard normals from
    ``numpy.random.default_rng(seed)``; (draws, B, T, d) or (draws, T, d)."""
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 1:
        raise ValueError(f"draws must be an integer >= 1, got {draws!r}")
    batch_input.filter_result("filtered", filtered)
    shape = (int(draws), *filtered.means.shape)
    return rts_sample(filtered, np.random.default_rng(seed).standard_normal(shape))

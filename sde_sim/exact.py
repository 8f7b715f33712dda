"""Exact discretisation: the reference sampler for linear SDEs (and the frozen-frame RT-SDE).

For ``dx = (A x + u) dt + G dw`` the transition over a step ``h`` is Gaussian,

    x(t+h) = e^{Ah} x(t) + Gamma(h) u + N(0, Q_d(h)),
    Gamma(h) = int_0^h e^{As} ds,   Q_d(h) = int_0^h e^{As} Q e^{A^T s} ds,

(seed 000 sections 2.1 and 3.9). ``Gamma u`` is the last column of ``expm([[A, u], [0, 0]] h)``
and ``Q_d`` comes from Van Loan's block exponential
``expm([[-A, Q], [0, A^T]] h) = [[., F12], [0, F22]]``, ``Q_d = F22^T F12``, taken over a step
short enough that the block stays well conditioned, then doubled (`van_loan`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from scipy.linalg import expm

from sde_sim import validation
from sde_sim.euler_maruyama import _check_batch
from sde_sim.models import LinearSDE, RadialTangentialSDE, radial_tangential_split, unit_rows
from sde_sim.recursion import AffineSteps, run_affine_recursion


class LinearTransition(NamedTuple):
    """Exact transition over steps ``h`` (n,).

    ``Phi`` (n, d, d), ``offset`` (n, d) and ``Qd`` (n, d, d).
    """

    Phi: np.ndarray
    offset: np.ndarray
    Qd: np.ndarray


# Van Loan's block holds e^{-Ah} and e^{A^T h} together, so its round-off grows like
# u e^{2 |Re(lambda)| h}; on a step with ||A h||_1 <= 1/2 it is a few u.
_VAN_LOAN_MAX_NORM = 0.5


def van_loan(A: np.ndarray, Q: np.ndarray, h) -> tuple[np.ndarray, np.ndarray]:
    """``(e^{Ah}, Q_d(h))`` for each step in `h` (n,), ``Q_d(h) = int_0^h e^{As} Q e^{A^T s} ds``.

    Van Loan's block exponential on ``h / 2^k`` with ``||A h / 2^k||_1 <= 1/2``, then ``k``
    doublings ``Q_d(2s) = Q_d(s) + e^{As} Q_d(s) e^{A^T s}``, ``e^{2As} = (e^{As})^2``: each
    doubling adds terms of one sign for PSD ``Q``, so the relative error stays a small multiple
    of ``k u`` where the plain block exponential over ``h`` loses ``e^{2 |Re(lambda)| h}``.

    Shapes: A, Q (d, d); h (n,) >= 0 -> (n, d, d), (n, d, d).
    """
    h = np.atleast_1d(np.asarray(h, dtype=float))
    d = A.shape[0]
    k = _halvings(A, h)
    block = np.zeros((2 * d, 2 * d))
    block[:d, :d], block[:d, d:], block[d:, d:] = -A, Q, A.T
    F = expm(block * (h / 2.0**k)[:, None, None])
    E = np.swapaxes(F[:, d:, d:], 1, 2)
    V = E @ F[:, :d, d:]
    for _ in range(k):
        V = V + E @ V @ np.swapaxes(E, 1, 2)
        E = E @ E
    return E, 0.5 * (V + np.swapaxes(V, 1, 2))


def _halvings(A: np.ndarray, h: np.ndarray) -> int:
    """``k`` with ``||A h / 2^k||_1 <= 1/2`` for every step in `h`."""
    reach = float(np.max(h, initial=0.0)) * float(np.linalg.norm(A, 1))
    return int(np.ceil(np.log2(reach / _VAN_LOAN_MAX_NORM))) if reach > _VAN_LOAN_MAX_NORM else 0


def linear_transition(sde: LinearSDE, h) -> LinearTransition:
    """Exact mean map and covariance of `sde` over each step in `h` (scalar or (n,))."""
    h = np.atleast_1d(validation.nonnegative("h", h))
    d = sde.dim
    drift = np.zeros((d + 1, d + 1))
    drift[:d, :d], drift[:d, d] = sde.A, sde.u
    # Gamma(h) u on h / 2^k, then doubled, Gamma(2s) u = Gamma(s) u + e^{As} Gamma(s) u, as in
    # `van_loan`: expm of the whole step returns NaN or a wrong finite offset once ||A h||
    # passes ~1e16 (scaling and squaring of the augmented block).
    k = _halvings(sde.A, h)
    augmented = expm(drift * (h / 2.0**k)[:, None, None])
    E, offset = augmented[:, :d, :d], augmented[:, :d, d]
    for _ in range(k):
        offset = offset + np.einsum("nij,nj->ni", E, offset)
        E = E @ E
    Phi, Qd = van_loan(sde.A, sde.Q, h)
    return LinearTransition(Phi, offset, Qd)


def exact_affine_steps(sde: LinearSDE, step_sizes: np.ndarray, step_class: np.ndarray):
    """Per-class exact maps; the noise factor chol(Q_d)/sqrt(h) takes increments of variance h."""
    step_sizes = np.asarray(step_sizes, dtype=float)
    Phi, offset, Qd = linear_transition(sde, step_sizes)
    B = validation.psd_factor(Qd) / np.sqrt(step_sizes)[:, None, None]
    return AffineSteps(Phi, offset, B, step_class)


def ou_variance_factor(mu, h):
    """``phi(mu, h) = (1 - e^{-2 mu h}) / (2 mu)``, with the ``mu -> 0`` limit ``h``.

    Computed as ``-expm1(-2 mu h) / (2 mu)``, which keeps full relative precision as ``mu h``
    goes to zero; ``mu == 0`` exactly takes the limit.
    """
    mu, h = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(h, dtype=float))
    out = np.array(h, dtype=float, copy=True)
    nz = mu != 0
    out[nz] = -np.expm1(-2.0 * mu[nz] * h[nz]) / (2.0 * mu[nz])
    return out


def simulate_exact(
    system: LinearSDE | RadialTangentialSDE,
    x0: np.ndarray,
    noise,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Sample paths from the exact transition law on the grid of `noise`.

    The increments of `noise` are used after scaling by ``1/sqrt(h)`` as the standard normal
    draws of the d-dimensional transition noise ``N(0, Q_d)``; ``Q_d`` has full rank even when
    ``G`` has fewer columns than rows, so the noise has dimension d (the state's), not m.

    Parameters
    ----------
    system : a `LinearSDE`, or a `RadialTangentialSDE` in ``"frozen-frame"`` mode (which is
        linear time-varying and exactly solvable in the co-rotating frame).
    x0 : (P, d) initial states.
    noise : `BrownianPath` or `ArrayNoise` with increments (K, P, d).

    Returns
    -------
    (P, K+1, d) array in the noise's dtype.
    """
    x0 = validation.numeric_array("x0", x0).astype(noise.dtype)
    _check_batch(system, x0, noise, noise_dim=system.dim)
    if isinstance(system, LinearSDE):
        sizes, classes = noise.grid.step_classes()
        maps = exact_affine_steps(system, sizes, classes)
        return run_affine_recursion(x0, maps, noise, progress=progress)
    if isinstance(system, RadialTangentialSDE) and system.mode == "frozen-frame":
        return _frozen_frame_exact(system, x0, noise, progress)
    raise ValueError(
        "method 'exact' needs a linear SDE or a frozen-frame radial-tangential SDE; the "
        "literal radial-tangential SDE has state-dependent noise: use method 'euler'"
    )


def _frozen_frame_exact(sde: RadialTangentialSDE, x0, noise, progress) -> np.ndarray:
    """Frozen-frame RT-SDE sampled exactly.

    In the co-rotating frame ``y = e^{-Omega (t - t0)} x`` the projectors are constant
    (``e^{-Omega s} P(u(s)) e^{Omega s} = P(u0)``), so ``u0 . y`` is an OU process with rate
    ``mu_r`` and noise ``sigma_r`` and ``P_T(u0) y`` one with ``mu_t`` and ``sigma_t``. The
    rotated Brownian increment ``e^{-Omega s} dW`` is again standard, so ``dW`` is used as is.
    """
    if np.any(np.linalg.norm(x0, axis=1) == 0):
        raise ValueError("x0 must be nonzero: the frozen frame starts at x0's direction")
    grid, dtype = noise.grid, noise.dtype
    u0 = unit_rows(x0.astype(float))
    sizes, classes = grid.step_classes()
    decay_r, decay_t = np.exp(-sde.mu_r * sizes), np.exp(-sde.mu_t * sizes)
    scale_r = sde.sigma_r * np.sqrt(ou_variance_factor(sde.mu_r, sizes) / sizes)
    scale_t = sde.sigma_t * np.sqrt(ou_variance_factor(sde.mu_t, sizes) / sizes)
    radial, tangential = radial_tangential_split(u0, x0.astype(float))
    a = np.sum(radial * u0, axis=1, keepdims=True)
    y = np.empty((x0.shape[0], grid.n_steps + 1, x0.shape[1]))
    y[:, 0] = x0
    for start, stop, dW in noise.chunks():
        for k in range(start, stop):
            c = classes[k]
            dw_r, dw_t = radial_tangential_split(u0, dW[k - start].astype(float))
            a = decay_r[c] * a + scale_r[c] * np.sum(dw_r * u0, axis=1, keepdims=True)
            tangential = decay_t[c] * tangential + scale_t[c] * dw_t
            y[:, k + 1] = a * u0 + tangential
        if progress is not None:
            progress(stop, noise.n_steps)
    rotations = expm(sde.Omega * (grid.t - grid.start)[:, None, None])
    return np.einsum("kde,pke->pkd", rotations, y).astype(dtype, copy=False)

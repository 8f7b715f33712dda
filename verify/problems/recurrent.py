"""Problems of the iteratively reweighted recursive filter (seed 000 B.2, Algorithm 4): random
systems, eigen-data, the dense batch MLE of seed 000 2.2 and the per-mode recursion with the
printed forms, shared by `verify.checks.recurrent` and the tests of `estimators.recurrent`.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import expm

from sde_sim import (
    LinearMeasurement,
    LinearSDE,
    linear_transition,
)
from sde_sim.models import covariance_from_eigen, real_from_eigen
from verify.tools import (
    random_eigensystem,
    random_spd,
)

# The afa-2d system of seed 000 section 4.2 (its eigenbasis is not unitary).
AFA_LAM = np.array([-0.1 - 1j, -0.1 + 1j])


AFA_S = np.array([[1 - 1j, 1 + 1j], [1, 1]])


def random_problem(rng: np.random.Generator, d: int, k: int, *, B: int, T: int):
    """A stable system with correlated Q, a (k, d) measurement, per-sequence irregular times.

    Returns ``(sde, measurement, z, t, x)`` with Student-t(2) measurement noise (heavy tails) on
    a simulated-by-hand exact path; used by checks and tests that need generic data.
    """
    lam, S = random_eigensystem(rng, d)
    A = real_from_eigen(lam, S)
    sde = LinearSDE.from_covariance(A, random_spd(rng, d, floor=0.05), rng.normal(size=d) * 0.3)
    C = rng.normal(size=(k, d))
    R = random_spd(rng, k, floor=0.1)
    meas = LinearMeasurement(C, R, rng.normal(size=k) * 0.2)
    t = np.cumsum(rng.uniform(0.02, 0.6, size=(B, T)), axis=1)
    x = np.empty((B, T, d))
    x[:, 0] = rng.normal(size=(B, d)) * 2
    for s in range(1, T):
        h = t[:, s] - t[:, s - 1]
        maps = linear_transition(sde, h)
        noise = np.einsum("bij,bj->bi", np.linalg.cholesky(maps.Qd), rng.normal(size=(B, d)))
        x[:, s] = np.einsum("bij,bj->bi", maps.Phi, x[:, s - 1]) + maps.offset + noise
    v = rng.standard_t(2.0, size=(B, T, k)) @ np.linalg.cholesky(R).T
    z = x @ C.T + meas.b + v
    return sde, meas, z, t, x


def eigen_problem(rng: np.random.Generator, d: int):
    """Eigen-data with mode variances equal on conjugate pairs: ``(lam, S, q, r, sde, meas)``."""
    lam, S = random_eigensystem(rng, d)
    q, r = rng.uniform(0.05, 1.0, d), rng.uniform(0.1, 1.0, d)
    for i in range(0, d - d % 2, 2):
        q[i + 1], r[i + 1] = q[i], r[i]
    sde = LinearSDE.from_covariance(real_from_eigen(lam, S), covariance_from_eigen(S, q))
    meas = LinearMeasurement(np.eye(d), covariance_from_eigen(S, r, name="R"))
    return lam, S, q, r, sde, meas


def batch_mle(A, Q, C, R, z, t) -> np.ndarray:
    """Seed 000 2.2's causal batch MLE of ``C x(t_i)``: ``(sum_j P^C_ij)^-1 sum_j P^C_ij z_hat_ij``.

    Dense and independent of the filter: ``z_hat_ij = C e^{A(t_i - t_j)} C^-1 z_j`` and
    ``V^C_ij = C V_F(t_i - t_j) C^T + Phi R Phi^T`` with ``V_F`` from Van Loan's block
    exponential in a single `expm` (lags here are short; no doubling as in `sde_sim.exact`).
    z (T, d), t (T,) -> (T, d).
    """
    T, d = z.shape
    C_inv = np.linalg.inv(C)
    out = np.empty((T, d))
    for i in range(T):
        info, vec = np.zeros((d, d)), np.zeros(d)
        for j in range(i + 1):
            lag = t[i] - t[j]
            Phi = C @ expm(A * lag) @ C_inv
            block = expm(np.block([[-A, Q], [np.zeros((d, d)), A.T]]) * lag)
            V = block[d:, d:].T @ block[:d, d:]
            VC = C @ V @ C.T + Phi @ R @ Phi.T
            P = np.linalg.inv(0.5 * (VC + VC.T))
            info += P
            vec += P @ Phi @ z[j]
        out[i] = np.linalg.solve(info, vec)
    return out


def mode_recursion(lam, q, r, zs, h, n_iter, prior_x, prior_v, printed=()):
    """Seed 000 Algorithm 4 / B.2 per mode with ``nu -> inf`` (weight 1), uniform step ``h``.

    ``printed`` switches on printed forms (items of `estimators.recurrent`'s docstring):
    ``"measurement-precision"`` (1: ``1/sigma_V^2``, the one-step propagated precision),
    ``"process-noise"`` (2: ``+ sigma^2`` instead of ``+ sigma^2 kappa``), ``"inner-iteration"``
    (3: prior replaced by the iterate), ``"precision-accumulation"`` (5: the prior precision
    absorbs the measurement at every inner iteration). None of them: the consistent recursion.
    zs (B, T, d) complex modes; returns the posterior mode means (B, T, d).
    """
    growth = np.exp(lam * h)
    decay2 = np.abs(growth) ** 2
    kappa = -np.expm1(2 * lam.real * h) / (-2 * lam.real)  # Re(lam) < 0 here
    one_step = q * kappa + r * decay2  # sigma_V^2 of Algorithm 4
    meas_var = one_step if "measurement-precision" in printed else r
    added = q if "process-noise" in printed else q * kappa
    B, T, d = zs.shape
    x = np.broadcast_to(prior_x, (B, d)).astype(complex)
    v = np.broadcast_to(prior_v, (B, d)).astype(float)
    out = np.empty((B, T, d), dtype=complex)
    for i in range(T):
        if i > 0:
            x, v = growth * x, decay2 * v + added
        prior_mean, p_minus = x, 1.0 / v
        xk, pk = x, p_minus
        for _ in range(n_iter):
            p_tilde = pk + 1.0 / meas_var
            base = xk if "inner-iteration" in printed else prior_mean
            xk = base + (zs[:, i] - base) / (p_tilde * meas_var)
            if "precision-accumulation" in printed:
                pk = p_tilde
        x, v = xk, 1.0 / p_tilde
        out[:, i] = x
    return out

"""Dense joint-Gaussian conditioning over a whole trajectory: the test oracle, O((T d)^3).

The states at the measurement times and the measurements are jointly Gaussian; this module
builds that joint law explicitly and conditions it with dense linear algebra, sharing no code
with the recursive filter it checks (only the exact one-step transition, which is itself
checked against quadrature). Use it for T of a few tens.

Joint law (one sequence): ``x_0 ~ N(m0, P0)``, ``x_k = F_k x_{k-1} + c_k + w_k``, ``w_k ~ N(0,
Q_k)``, so ``E x_k = mu_k`` and ``Cov(x_i, x_j) = F_i ... F_{j+1} Sigma_j`` for ``i >= j``;
``z_k = C x_k + b + v_k``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from estimators import batch_input
from sde_sim import LinearMeasurement, LinearSDE, linear_transition, validation


class JointGaussian(NamedTuple):
    """Stacked states (T d,) and measurements (T k,): means, covariances and cross-covariance."""

    x_mean: np.ndarray
    x_cov: np.ndarray
    z_mean: np.ndarray
    z_cov: np.ndarray
    xz_cov: np.ndarray


def joint_gaussian(sde: LinearSDE, measurement: LinearMeasurement, t, prior_mean, prior_cov):
    """The joint law of states at ``t + delay`` and measurements at ``t`` (t: (T,))."""
    t = validation.real_array("t", t, ndim=1) + measurement.delay
    d, T = sde.dim, t.size
    mean = validation.vector("prior_mean", prior_mean, d)
    cov = validation.covariance("prior_cov", prior_cov, d)
    maps = linear_transition(sde, np.diff(t)) if T > 1 else None
    means, marg, trans = [mean], [cov], [np.eye(d)]
    for s in range(1, T):
        F, c, Q = maps.Phi[s - 1], maps.offset[s - 1], maps.Qd[s - 1]
        means.append(F @ means[-1] + c)
        marg.append(F @ marg[-1] @ F.T + Q)
        trans.append(F)
    x_cov = np.zeros((T * d, T * d))
    for j in range(T):
        block = marg[j]
        for i in range(j, T):
            if i > j:
                block = trans[i] @ block
            x_cov[i * d : (i + 1) * d, j * d : (j + 1) * d] = block
            x_cov[j * d : (j + 1) * d, i * d : (i + 1) * d] = block.T
    H = np.kron(np.eye(T), measurement.C)
    x_mean = np.concatenate(means)
    z_mean = H @ x_mean + np.tile(measurement.b, T)
    xz = x_cov @ H.T
    z_cov = H @ x_cov @ H.T + np.kron(np.eye(T), measurement.R)
    return JointGaussian(x_mean, x_cov, z_mean, 0.5 * (z_cov + z_cov.T), xz)


def condition(joint: JointGaussian, z, observed) -> tuple[np.ndarray, np.ndarray]:
    """Mean (T d,) and covariance (T d, T d) of the states given the observed measurements.

    ``observed`` (T,) bool selects whole measurement vectors.
    """
    k = joint.z_mean.size // observed.size
    sel = np.repeat(np.asarray(observed, dtype=bool), k)
    if not np.any(sel):
        return joint.x_mean.copy(), joint.x_cov.copy()
    zo = np.asarray(z, dtype=float).reshape(-1)[sel]
    S = joint.z_cov[np.ix_(sel, sel)]
    Kxz = joint.xz_cov[:, sel]
    gain = np.linalg.solve(S, Kxz.T).T
    mean = joint.x_mean + gain @ (zo - joint.z_mean[sel])
    cov = joint.x_cov - gain @ Kxz.T
    return mean, 0.5 * (cov + cov.T)


def log_density(joint: JointGaussian, z, observed) -> float:
    """``log N(z_obs; mean, cov)`` of the observed measurements under the joint law."""
    k = joint.z_mean.size // observed.size
    sel = np.repeat(np.asarray(observed, dtype=bool), k)
    if not np.any(sel):
        return 0.0
    r = np.asarray(z, dtype=float).reshape(-1)[sel] - joint.z_mean[sel]
    S = joint.z_cov[np.ix_(sel, sel)]
    sign, logdet = np.linalg.slogdet(S)
    return float(-0.5 * (r @ np.linalg.solve(S, r) + logdet + r.size * np.log(2 * np.pi)))


def dense_filter_smoother(sde, measurement, z, t, prior_mean, prior_cov, observed=None):
    """Filtered and smoothed means/covariances of one sequence by dense conditioning.

    Returns ``(filtered_means (T, d), filtered_covs (T, d, d), smoothed_means, smoothed_covs,
    log_likelihood)``; the filter at step k conditions on the observed measurements 0..k.
    """
    checked = batch_input.measurements(z, observed, measurement.out_dim)  # names z, observed
    z, observed = checked.z[0], checked.observed[0]
    batch_input.times(t, 1, z.shape[0])  # t (T,), as long as z
    T, d = z.shape[0], sde.dim
    joint = joint_gaussian(sde, measurement, t, prior_mean, prior_cov)
    f_means, f_covs = np.empty((T, d)), np.empty((T, d, d))
    for step in range(T):
        upto = observed & (np.arange(T) <= step)
        mean, cov = condition(joint, z, upto)
        block = slice(step * d, (step + 1) * d)
        f_means[step], f_covs[step] = mean[block], cov[block, block]
    mean, cov = condition(joint, z, observed)
    s_means = mean.reshape(T, d)
    s_covs = np.stack([cov[i * d : (i + 1) * d, i * d : (i + 1) * d] for i in range(T)])
    return f_means, f_covs, s_means, s_covs, log_density(joint, z, observed)

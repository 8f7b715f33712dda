"""Checks of the robust IRLS (seed 000 2.3, A.4; seed 004 A.5; `estimators.irls`).

The Gaussian limit against the batch MLE, the fixed point against the weighted normal
equations recomputed from the closed forms, the outlier rejection on contaminated simulations,
and the printed ``P <- P / w`` rescaling of seed 000 2.3, which makes it worse.
"""

from __future__ import annotations

import numpy as np

from estimators.closed_forms import drift
from estimators.closed_forms import measurement as meas_cf
from estimators.closed_forms import robust_weights as rw
from estimators.irls import irls
from estimators.mle import batch_mle
from sde_sim import LinearMeasurement, LinearSDE
from verify.problems.irls import (
    NU,
    OUTLIER_RMSE_BOUND,
    contaminated,
    outlier_rmse_ratios,
    rmse,
)
from verify.registry import Outcome, check, seed
from verify.tools import random_eigensystem, random_spd, relative_error


def _problem(rng: np.random.Generator, d: int, T: int):
    lam, S = random_eigensystem(rng, d)
    A = ((S * lam) @ np.linalg.inv(S)).real
    sde = LinearSDE.from_covariance(A, random_spd(rng, d), rng.normal(size=d))
    meas = LinearMeasurement(
        np.eye(d) + 0.2 * rng.normal(size=(d, d)), random_spd(rng, d, floor=0.1)
    )
    t = np.cumsum(rng.uniform(0.05, 0.3, size=T))
    z = 2.0 * rng.normal(size=(2, T, d))
    z[:, T // 2] += 25.0  # a gross outlier per sequence
    return sde, meas, t, z


@check(
    "irls.gaussian-limit",
    title="nu = inf: every weight is 1 and IRLS (Student-t, rational, exponential, started "
    "from the measurements) returns the batch MLE",
    source=seed(0, "2.3, A.4 (nu -> inf)"),
    kind="numeric",
    tolerance=1e-12,
)
def _gaussian_limit(quick: bool) -> float:
    # The last IRLS step solves the same weighted system as the MLE: equal to round-off.
    rng = np.random.default_rng(91)
    worst = 0.0
    for n in range(2 if quick else 8):
        sde, meas, t, z = _problem(rng, 2 + n % 2, 10)
        for causal in (True, False):
            mle = batch_mle(sde, meas, z, t, causal=causal)
            for family in ("student-t", "rational", "exponential"):
                robust = irls(
                    sde, meas, z, t, nu=np.inf, family=family, causal=causal, init="measurement"
                )
                worst = max(worst, relative_error(robust.outputs, mle.outputs))
    return worst


@check(
    "irls.normal-equations",
    title="the IRLS fixed point solves sum_j w(d_ij^2) P^C_ij (x_i - z_hat_ij) = 0, with P^C, "
    "z_hat and w recomputed from the closed forms (Student-t, nu = 3, damping 0.7)",
    source=seed(0, "2.3 (IRLS), A.4; seed 004 A.5, C.3"),
    kind="numeric",
    tolerance=1e-12,
)
def _normal_equations(quick: bool) -> float:
    # Relative to sum_j w |P| |z_hat|: the last step is below 1e-14 max(1, |x|) and the sum
    # carries ~10 u; measured ~3e-14; tolerance 1e-12.
    rng = np.random.default_rng(92)
    worst = 0.0
    for n in range(1 if quick else 6):
        d = 2 + n % 2
        sde, meas, t, z = _problem(rng, d, 8)
        for causal in (True, False):
            robust = irls(
                sde, meas, z, t, nu=3.0, causal=causal, damping=0.7, tol=1e-14, max_iter=3000
            )
            if not robust.converged:
                return float("inf")
            for b in range(z.shape[0]):
                for i in range(t.size):
                    js = np.arange(i + 1) if causal else np.arange(t.size)
                    dt = t[js] - t[i]
                    V = meas_cf.measurement_covariance(sde.A, sde.Q, meas.C, meas.R, dt)
                    P = np.linalg.inv(V)
                    z_hat = drift.pulled_back_measurement(
                        sde.A, meas.C, sde.u, meas.b, z[b, js], dt
                    )
                    r = robust.outputs[b, i] - z_hat
                    w = rw.student_t_weight(np.einsum("jk,jkl,jl->j", r, P, r), 3.0, d)
                    normal = np.einsum("j,jkl,jl->k", w, P, r)
                    scale = np.einsum("j,jkl,jl->k", w, np.abs(P), np.abs(z_hat)).max()
                    worst = max(worst, float(np.abs(normal).max() / scale))
    return worst


@check(
    "irls.outliers",
    title="10% Cauchy outliers (scale 10) on afa-2d b: RMSE(IRLS, Student-t nu = 4) / "
    "RMSE(batch MLE on the inliers only, the oracle that knows the outliers), non-causal, "
    f"steps >= 10; <= {OUTLIER_RMSE_BOUND} (the Student-t efficiency 1.044 plus the outliers' "
    "residual pull; one reweighting gives 1.5)",
    source=seed(0, "2.3 (corrected P <- w P), A.4; seed 004 A.5"),
    kind="numeric",
    tolerance=OUTLIER_RMSE_BOUND,
)
def _outliers(quick: bool) -> Outcome:
    ratio, mle_ratio, iterations = outlier_rmse_ratios(quick)
    return Outcome(
        ratio,
        f"IRLS {ratio:.3f} x the inlier oracle, batch MLE {mle_ratio:.1f} x; "
        f"{iterations} iterations",
    )


def _weight_ratio(result, outlier) -> float:
    """Median weight of pairs whose source measurement is an outlier over that of the others."""
    used = result.weights > 0
    source = np.broadcast_to(outlier[:, None, :], used.shape)
    w = result.weights / result.weights.max(axis=2, keepdims=True)  # rows on one scale
    return float(np.median(w[used & source]) / np.median(w[used & ~source]))


@check(
    "irls.outlier-weights",
    title="corrected P <- w P (Student-t, nu = 4) on the data of irls.outliers: median weight "
    "of pairs from an outlier / median weight of the others, at the fixed point (<= 1: "
    "outliers are down-weighted)",
    source=seed(0, "2.3 (corrected), A.4"),
    kind="numeric",
    tolerance=1.0,
)
def _outlier_weights(quick: bool) -> Outcome:
    sc, sim, _ = contaminated(quick)
    robust = irls(sc.system, sc.measurement, sim.z, sim.t_obs, nu=NU, causal=False)
    return Outcome(_weight_ratio(robust, sim.outlier), "relative weights, one scale per row")


@check(
    "irls.printed-sec2.3-rescaling",
    title="printed (2.3): P <- P / w, w = 1/(1 + m/nu), i.e. weights 1 + m/nu, iterated 20 "
    "times on the data of irls.outliers: pairs from an outlier end with *larger* median "
    "weight than the others (ratio > 1)",
    source=seed(0, "2.3 (P^C_ij <- P^C_ij / w_ij)"),
    kind="numeric",
    tolerance=1.0,
    expect="fails",
    printed=r"P^C_{ij} \leftarrow P^C_{ij}/w_{ij},\qquad w_{ij} = \frac{1}{1 + m_{ij}/\nu}",
    corrected=r"P^C_{ij} \leftarrow w_{ij}\,P^C_{ij}",
    correction="irls.outlier-weights",
)
def _printed(quick: bool) -> Outcome:
    sc, sim, mle = contaminated(quick)
    printed = irls(
        sc.system,
        sc.measurement,
        sim.z,
        sim.t_obs,
        family=lambda m: 1.0 + m / NU,
        causal=False,
        max_iter=20,
    )
    a, b = rmse(printed.states, sim.x_obs), rmse(mle.states, sim.x_obs)
    return Outcome(_weight_ratio(printed, sim.outlier), f"RMSE printed form {a:.3f}, MLE {b:.3f}")

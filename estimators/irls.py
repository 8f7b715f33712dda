"""Robust trajectory estimation by iteratively reweighted least squares (IRLS).

Seed 000 sections 2.3 and A.4; seed 004 eqs. (10)-(11), A.5 and C.3. The batch MLE of
`estimators.mle` weighs each pulled-forward estimate ``z_hat_ij`` by its model precision
``P^C_ij``; an outlier among the measurements then drags every estimate it reaches. IRLS
rescales each precision by a weight of how far the estimate lies from the current one,

    P^C_ij  <-  w_ij P^C_ij,     w_ij = w(d_ij^2),   d_ij^2 = r_ij^T P^C_ij r_ij,
    r_ij = x_i - z_hat_ij                                 (x_i the current estimate of z^C_i),

and iterates

    x_i^MLE(k) = (sum_j w_ij^(k) P^C_ij)^-1 sum_j w_ij^(k) P^C_ij z_hat_ij,
    x_i^(k+1) = (1 - delta) x_i^(k) + delta x_i^MLE(k)          (damping, seed 000 2.3),

to a fixed point, which satisfies the weighted normal equations
``sum_j w(d_ij^2) P^C_ij (x_i - z_hat_ij) = 0`` (for any ``delta`` in (0, 1]; ``delta < 1``
only slows the steps, like the seed's "residual connection"). Seed 000 2.3 prints the rescaling
as ``P <- P / w``, which *up*-weights large residuals; the corrected ``P <- w P`` is what its
own IRLS update, A.4's E-step and seed 004 A.5 use (registered as
``robust_weights.printed-sec2.3-rescaling``).

Weight families (`log_weights`; ``m = d^2``, ``d`` the measurement dimension), from
`estimators.closed_forms.robust_weights`:

* ``"student-t"``: ``(nu + d) / (nu + m)``, the EM weight of a Student-t with ``nu`` degrees
  of freedom (A.4 with ``alpha = beta = nu/2``);
* ``"rational"`` (Cauchy-type): ``1 / (1 + m/nu)``, seed 000's normalised form; it is the
  Student-t weight divided by the constant ``1 + d/nu``, so it gives the same estimates;
* ``"exponential"``: ``exp(-m/nu)`` (seed 000 A.4's approximation, seed 004's exponential
  kernel, softmax with temperature ``nu``);
* ``"power"``: ``(1 + m/nu)^-kappa``, seed 004's power law; ``kappa`` defaults to RFA's
  ``(nu + d)/d`` (eq. 11).

As ``nu -> inf`` the first three weights tend to 1 and IRLS returns the batch MLE (exactly at
``nu = inf``). The power form with RFA's ``kappa = (nu + d)/d`` does not: its limit is
``exp(-m/d)``, a softmax-type reweighting of the Gaussian residuals, so RFA's layer is not the
MLE in the Gaussian limit unless the exponent is held fixed.

Only the relative weights of one target's pairs matter (each estimate is invariant to scaling
its row of weights), so the weights are computed as logarithms and each row is shifted by its
maximum before exponentiating: the exponential and power forms cannot underflow to an all-zero
row however large the residuals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from estimators import batch_input
from estimators.closed_forms import robust_weights as rw
from estimators.mle import (
    DiagonalizableModel,
    PairwiseTerms,
    eigen_pairwise_terms,
    finish,
    pairwise_terms,
    solve_weighted,
)
from sde_sim import LinearMeasurement, LinearSDE, validation

FAMILIES = ("student-t", "rational", "exponential", "power")
INITS = ("mle", "measurement")


class IRLSResult(NamedTuple):
    """Output of `irls` / `eigen_irls` (time on axis 1 for batched arrays).

    outputs, states, covs, state_covs, predictions, n_used, times : as in
        `estimators.mle.MLEResult`, at the fixed point; ``covs = (sum_j w_ij P^C_ij)^-1``
        with the final weights (a nominal covariance, not a posterior one).
    weights : (B, T, T) ``w(d_ij^2)`` at the returned estimate (0 on unused pairs).
    iterations : reweighting steps taken.
    final_change : ``max |x^(k+1) - x^(k)|`` of the last step (units of ``z``).
    converged : whether ``final_change <= tol * max(1, max |x|)`` within ``max_iter``.
    """

    outputs: np.ndarray
    states: np.ndarray
    covs: np.ndarray
    state_covs: np.ndarray
    predictions: np.ndarray
    n_used: np.ndarray
    times: np.ndarray
    weights: np.ndarray
    iterations: int
    final_change: float
    converged: bool


def log_weights(mahalanobis_sq, *, family: str, nu, dim: int, kappa=None) -> np.ndarray:
    """``log w(m)`` of a weight family at squared Mahalanobis distances ``m`` (any shape).

    Parameters
    ----------
    mahalanobis_sq : ``m = r^T P r >= 0``.
    family : one of ``FAMILIES`` (see the module docstring).
    nu : > 0, or ``inf`` (the Gaussian limit: weight 1, except the power form with the
        default ``kappa``, whose limit is ``exp(-m/d)``).
    dim : the dimension ``d`` of the residual.
    kappa : exponent of the ``"power"`` family, > 0; default ``(nu + d)/d`` (seed 004 eq. 11).
    """
    family = validation.choice("family", family, FAMILIES)
    d = validation.count("dim", dim)
    nu = batch_input.robust_scale("nu", nu)
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    if family == "student-t":
        return np.log(rw.student_t_weight(m, nu, d))
    if family == "rational":
        return -np.log1p(m / nu)  # log rational_weight, without rounding 1/(1 + m/nu) first
    if family == "exponential":
        if np.isinf(nu):
            return np.zeros(m.shape)
        return rw.gaussian_logit(m, nu)
    if kappa is None:
        return rw.student_t_logit(m, nu, d)
    kappa = validation.scalar("kappa", kappa, minimum=0.0, strict=True)
    return rw.power_log_weight(m, nu, kappa=kappa)


def _row_weights(log_w: np.ndarray, used: np.ndarray) -> np.ndarray:
    """``exp(log w - max_j log w)`` per target row, 0 on unused pairs (scale-free weights)."""
    log_w = np.where(used, log_w, -np.inf)
    top = np.max(log_w, axis=2, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)  # rows without a used pair stay all 0
    return np.exp(log_w - top)


def robust_estimate(
    terms: PairwiseTerms,
    *,
    nu=None,
    family: str | Callable = "student-t",
    kappa=None,
    damping: float = 1.0,
    init="mle",
    tol: float = 1e-12,
    max_iter: int = 500,
) -> IRLSResult:
    """IRLS on precomputed pairwise terms (`estimators.mle.pairwise_terms` or
    `estimators.mle.eigen_pairwise_terms`); the arguments are those of `irls`."""
    damping = validation.scalar("damping", damping, minimum=0.0, strict=True)
    if damping > 1:
        raise ValueError(f"damping must be in (0, 1], got {damping:g}")
    tol = validation.scalar("tol", tol, minimum=0.0, strict=True)
    max_iter = validation.count("max_iter", max_iter)
    d = terms.z.shape[-1]
    weight_fn = _weight_function(family, nu, kappa, d)
    z_hat = terms.z_hat()
    pz = terms.weighted_z_hat(z_hat)
    x = _initial(terms, init, pz)
    change, converged, iterations = np.inf, False, 0
    while iterations < max_iter:
        iterations += 1
        w = weight_fn(terms.mahalanobis(x, z_hat), terms.used)
        target, _ = solve_weighted(terms, w, weighted_z_hat=pz)
        step = damping * (target - x)
        x = x + step
        finite = np.isfinite(step)
        change = float(np.abs(step[finite]).max(initial=0.0))
        scale = max(1.0, float(np.abs(x[finite]).max(initial=0.0)))
        if change <= tol * scale:
            converged = True
            break
    w = weight_fn(terms.mahalanobis(x, z_hat), terms.used)
    _, cov = solve_weighted(terms, w, weighted_z_hat=pz)
    result = finish(terms, x, cov)
    weights = np.where(terms.used, w, 0.0)
    return IRLSResult(
        *result,
        weights[0] if terms.squeeze else weights,
        iterations,
        change,
        converged,
    )


def _weight_function(family, nu, kappa, d: int):
    """``(m, used) -> w`` with each target's row scaled to a largest weight of 1."""
    if callable(family):

        def custom(m, used):
            w = np.asarray(family(m), dtype=float)
            if w.shape != m.shape or np.any(~np.isfinite(w[used])) or np.any(w[used] < 0):
                raise ValueError(
                    "family (a callable) must return finite weights >= 0 of the shape of its "
                    f"argument {m.shape}"
                )
            return np.where(used, w, 0.0)

        return custom
    if nu is None:
        raise TypeError("nu is required for the named weight families")
    validation.choice("family", family, FAMILIES)
    nu = batch_input.robust_scale("nu", nu)
    if kappa is not None:
        validation.scalar("kappa", kappa, minimum=0.0, strict=True)

    def named(m, used):
        return _row_weights(log_weights(m, family=family, nu=nu, dim=d, kappa=kappa), used)

    return named


def _initial(terms: PairwiseTerms, init, pz: np.ndarray) -> np.ndarray:
    """Starting estimate in working coordinates: the MLE, the measurements, or given."""
    mle, _ = solve_weighted(terms, 1.0, weighted_z_hat=pz)
    if isinstance(init, str):
        validation.choice("init", init, INITS)
        if init == "mle":
            return mle
        observed = np.any(terms.used & np.eye(terms.used.shape[1], dtype=bool), axis=2)
        # the seed's z_hat_ii^(1) = z_i; a missing z_i starts from the MLE instead
        return np.where(observed[..., None], terms.z, mle)
    x0 = validation.real_array("init", init)
    if terms.squeeze:
        x0 = x0[None]
    if x0.shape != terms.z.shape:
        want = terms.z.shape[1:] if terms.squeeze else terms.z.shape
        raise ValueError(f"init must have shape {want} (estimates of z), got {np.shape(init)}")
    if terms.diagonal:
        x0 = x0 @ np.linalg.inv(terms.basis).T
    return np.where(np.isnan(mle), np.nan, x0)


@batch_input.guard
def irls(
    sde: LinearSDE,
    measurement: LinearMeasurement,
    z,
    t,
    *,
    nu=None,
    family: str | Callable = "student-t",
    kappa=None,
    mask=None,
    causal: bool = True,
    damping: float = 1.0,
    init="mle",
    tol: float = 1e-12,
    max_iter: int = 500,
) -> IRLSResult:
    """Robust batch estimate by IRLS, general matrix form (seed 000 2.3, A.4; seed 004 A.5).

    Iterates ``x_i <- (1 - delta) x_i + delta (sum_j w_ij P^C_ij)^-1 sum_j w_ij P^C_ij
    z_hat_ij`` with ``w_ij = w(d_ij^2)``, ``d_ij^2 = (x_i - z_hat_ij)^T P^C_ij (x_i -
    z_hat_ij)``, until the step is below ``tol * max(1, max |x|)`` or ``max_iter`` steps.

    Parameters
    ----------
    sde, measurement, z, t, mask, causal : as in `estimators.mle.batch_mle`.
    nu : scale / degrees of freedom of the weight (> 0, or inf); required for named families.
    family : ``"student-t"`` (default), ``"rational"``, ``"exponential"``, ``"power"``, or a
        callable ``m (B, T, T) -> w >= 0`` (used as given, e.g. to test other rescalings).
    kappa : exponent of the power family; default ``(nu + d)/d``.
    damping : ``delta`` in (0, 1] (seed 000 2.3); 1 is plain IRLS.
    init : ``"mle"`` (default: start from the batch MLE), ``"measurement"`` (the seed's
        ``z_hat_ii^(1) = z_i``; the MLE where ``z_i`` is missing) or an array of estimates of
        ``z`` of shape (B, T, d) / (T, d).
    tol, max_iter : stopping rule; the result reports whether it was met.

    Returns
    -------
    IRLSResult (outputs, states, ..., weights, iterations, final_change, converged).
    """
    terms = pairwise_terms(sde, measurement, z, t, mask=mask, causal=causal)
    return robust_estimate(
        terms,
        nu=nu,
        family=family,
        kappa=kappa,
        damping=damping,
        init=init,
        tol=tol,
        max_iter=max_iter,
    )


@batch_input.guard
def eigen_irls(
    model: DiagonalizableModel,
    z,
    t,
    *,
    nu=None,
    family: str | Callable = "student-t",
    kappa=None,
    mask=None,
    causal: bool = True,
    damping: float = 1.0,
    init="mle",
    tol: float = 1e-12,
    max_iter: int = 500,
) -> IRLSResult:
    """IRLS in the eigenbasis (seed 000 2.3's tensor form), per-mode precisions.

    ``d_ij^2 = sum_k lambda_P,ijk |x_s,ik - z_hat_s,ijk|^2`` (equal to ``r^T P^C r``), one
    scalar weight per pair, per-mode weighted means; equal to `irls` on ``model.sde()``,
    ``model.measurement()``. Arguments as in `irls`.
    """
    terms = eigen_pairwise_terms(model, z, t, mask=mask, causal=causal)
    return robust_estimate(
        terms,
        nu=nu,
        family=family,
        kappa=kappa,
        damping=damping,
        init=init,
        tol=tol,
        max_iter=max_iter,
    )


__all__ = [
    "FAMILIES",
    "IRLSResult",
    "eigen_irls",
    "irls",
    "log_weights",
    "robust_estimate",
]

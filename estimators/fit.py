"""Parameter MLE: maximise the Kalman innovations log-likelihood over a model family.

For a family ``theta -> (sde, measurement)`` (a `sde_sim.LinearSDE` ``dx = (A x + u) dt + G dw``
and a `sde_sim.LinearMeasurement` ``z = C x + b + v``, ``v ~ N(0, R)``; seed 000 section 2.1)
and measurements ``z`` (B, T, k) of B independent sequences, the estimate maximises

    log L(theta) = sum_b sum_k log N(z_bk; C m-_bk + b, S_k),   S_k = C P-_k C^T + R,

the innovations (prediction-error) decomposition of the exact likelihood that
`estimators.kalman.kalman_filter` returns per sequence (``log_likelihood``, summed here).

This module is the entry point: `fit`, `log_likelihood`, `score` and their results, with the
optimiser and the standard errors. Its parts, whose public names are importable from here too:

* `estimators.fit_families`: the families `IsotropicFamily` (seed 000 section 3.6), `OUFamily`
  (seed 001 eqs. (7)-(8)) and `CustomFamily` (any ``params -> (sde, measurement)``; `fit` also
  takes a plain callable), and the parameterisation: unconstrained coordinates ``phi``
  (``theta = phi``, ``exp(phi)`` or ``-exp(phi)`` for real, positive and negative parameters;
  `to_unconstrained`, `from_unconstrained`);
* `estimators.fit_likelihood`: the objective, ``-log L(phi)``, and its gradient by Fisher's
  identity (one filter and smoother pass per gradient), with the choice of the prior on the
  first state (``"diffuse"`` is biased for many short sequences that start from a proper law:
  see that module's docstring).

Standard errors. With ``H`` the Hessian of ``-log L`` in ``phi`` at the optimum (the observed
information, a numerical Hessian), ``Cov(phi_hat) ~ H^-1`` and, by the delta method,
``Cov(theta_hat) ~ J H^-1 J`` with ``J = diag(d theta / d phi)`` (1 for real parameters,
``theta`` for positive and negative ones): ``se(theta) = |theta| se(phi)`` for those.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize

from estimators import batch_input
from estimators import linear_gaussian as lg
from estimators.fit_families import (
    CONSTRAINTS,
    NOISES,
    ROTATIONS,
    CustomFamily,
    IsotropicFamily,
    OUFamily,
    _jacobian_diag,
    as_family,
    check_theta,
    from_unconstrained,
    to_unconstrained,
)
from estimators.fit_likelihood import GRADIENTS, PRIORS, Likelihood
from sde_sim import LinearMeasurement, LinearSDE, validation

_EPS = np.finfo(float).eps
# Second differences of the log-likelihood from its values: u^(1/4) balances h^2 and u / h^2.
_VALUE_HESSIAN_STEP = _EPS**0.25
# Longest first step of a BFGS round in the unconstrained coordinates (a factor e^2 in a positive
# parameter), and how many times a round that ends short of the optimum is restarted.
_MAX_FIRST_STEP = 2.0
_MAX_RESTARTS = 3


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


class Convergence(NamedTuple):
    """How the optimisation ended.

    success, status, message : scipy.optimize's flag, code and message.
    iterations : optimiser iterations.   evaluations : Kalman-filter passes in total.
    grad_norm : ``max |d(-log L)/d phi|`` at the estimate (unconstrained coordinates).
    newton_step : ``max_i |(H^-1 g)_i| / se(phi_i)``: the distance to the optimum of the local
        quadratic model, in standard errors (a converged fit has it << 1).
    hessian_pd : whether the numerical Hessian is positive definite (else the SEs are NaN).
    converged : ``hessian_pd`` and ``newton_step <= step_tol``.
    gradient : ``"score"`` (Fisher's identity) or ``"numeric"`` (central differences).
    """

    success: bool
    status: int
    message: str
    iterations: int
    evaluations: int
    grad_norm: float
    newton_step: float
    hessian_pd: bool
    converged: bool
    gradient: str


class FitResult(NamedTuple):
    """Output of `fit`; n parameters.

    params, se : (n,) estimate and standard errors (delta method).   cov : (n, n).
    names, constraints : (n,) labels and constraint kinds.
    unconstrained, se_unconstrained, cov_unconstrained : the same in ``phi`` coordinates.
    hessian : (n, n) numerical Hessian of ``-log L`` in ``phi`` (observed information).
    log_likelihood : the maximum, summed over sequences.   n_obs : observed scalar measurements.
    sde, measurement : the model at the estimate.   convergence : `Convergence`.
    """

    params: np.ndarray
    se: np.ndarray
    cov: np.ndarray
    names: tuple[str, ...]
    constraints: tuple[str, ...]
    unconstrained: np.ndarray
    se_unconstrained: np.ndarray
    cov_unconstrained: np.ndarray
    hessian: np.ndarray
    log_likelihood: float
    n_obs: int
    sde: LinearSDE
    measurement: LinearMeasurement
    convergence: Convergence

    def as_dict(self) -> dict[str, tuple[float, float]]:
        """``{name: (estimate, se)}``."""
        return {
            n: (float(p), float(s))
            for n, p, s in zip(self.names, self.params, self.se, strict=True)
        }


# --------------------------------------------------------------------------------------------
# fit
# --------------------------------------------------------------------------------------------


def fit(
    family,
    theta0,
    z,
    t,
    *,
    mask=None,
    prior="diffuse",
    gradient: str = "auto",
    gtol: float = 1e-6,
    max_iter: int = 200,
    hessian_step: float = 1e-5,
    step_tol: float = 1e-2,
) -> FitResult:
    """Maximum-likelihood parameters of a linear SDE family from batched measurements.

    Maximises ``sum_b log L_b(theta)`` (the innovations log-likelihood of
    `estimators.kalman.kalman_filter`, seed 000 section 2.1 model) with scipy's BFGS over the
    unconstrained ``phi`` (`estimators.fit_families`), the objective scaled by ``1 / n_obs`` so that
    ``gtol`` is per observation; then the numerical Hessian ``H`` of ``-log L`` in ``phi``
    (forward differences of the gradient, step ``hessian_step * max(1, |phi_i|)``; from values
    if the gradient is numeric), ``Cov(phi) = H^-1`` and the delta method for ``theta``.

    Parameters
    ----------
    family : `IsotropicFamily`, `OUFamily`, `CustomFamily`, or a callable
        ``theta -> (LinearSDE, LinearMeasurement)`` (all parameters real).
    theta0 : (n,) initial guess in natural parameters; must satisfy the constraints.
    z : (B, T, k) or (T, k) measurements (NaN allowed only where ``mask`` is False).
    t : (T,) shared or (B, T) per-sequence times, strictly increasing.
    mask : (B, T) or (T,) bool, True where observed; default all observed.
    prior : ``"diffuse"`` (the first measurement fixes the state; needs C of full column rank
        and invertible R; biased for many short sequences that start from a proper law: see
        `estimators.fit_likelihood`), ``"stationary"`` (the stationary law of the current
        parameters, which then also informs the fit; needs a stable A) or a fixed
        `GaussianPrior` (the law of the state at its ``time``, carried by the model to each
        sequence's first state time, or at that first time when ``time`` is None).
    gradient : ``"auto"`` (Fisher's identity, numeric where it cannot be used), ``"score"`` or
        ``"numeric"``.
    gtol : BFGS tolerance on ``max |gradient| / n_obs``.
    max_iter : BFGS iteration limit (the fit never loops longer).
    hessian_step : relative step of the numerical Hessian.
    step_tol : `Convergence.converged` needs the Newton step below this many standard errors.

    Returns
    -------
    FitResult
    """
    family = as_family(family, theta0)
    theta0 = check_theta(theta0, family)
    validation.choice("gradient", gradient, GRADIENTS)
    gtol = validation.scalar("gtol", gtol, minimum=0.0, strict=True)
    max_iter = validation.count("max_iter", max_iter)
    hessian_step = validation.scalar("hessian_step", hessian_step, minimum=0.0, strict=True)
    step_tol = validation.scalar("step_tol", step_tol, minimum=0.0, strict=True)
    problem = Likelihood(family, z, t, mask, prior)
    phi0 = to_unconstrained(theta0, family.constraints)

    # Validates z, t and mask against the model at theta0 (the errors name them).
    meas0 = problem.model(phi0)[1]
    kind0 = problem.nll_and_grad(phi0, gradient)[2]
    n_obs = int(problem.counted().sum()) * meas0.out_dim
    if n_obs == 0:
        raise ValueError("z has no observed measurement that enters the likelihood")
    scale = 1.0 / n_obs

    def objective(phi):
        try:
            value, grad, _ = problem.nll_and_grad(phi, gradient)
        except (ValueError, np.linalg.LinAlgError, FloatingPointError):
            # A trial point outside where the model is defined (e.g. an unstable A with a
            # stationary prior, or overflow): infinitely unlikely; the line search backs off.
            return np.inf, np.zeros_like(phi)
        if not np.isfinite(value):
            return np.inf, np.zeros_like(phi)
        return value * scale, grad * scale

    # Each round of BFGS starts from the inverse of the numerical Hessian at its start point
    # (eigenvalues made positive, first step capped at `_MAX_FIRST_STEP`): near the optimum it
    # then needs a handful of iterations instead of a few per parameter. The Hessian at the
    # end of a round gives the standard errors, or, if the round stopped short of the optimum
    # (a line search that failed far from it), the start of the next round.
    phi, kind = phi0, kind0
    H = _hessian(problem, phi, kind, hessian_step)
    iterations, rounds = 0, 0
    while True:
        grad = problem.nll_and_grad(phi, gradient)[1]
        opt = minimize(
            objective,
            phi,
            jac=True,
            method="BFGS",
            options={
                "gtol": gtol,
                "maxiter": max_iter - iterations,
                "hess_inv0": _modified_inverse(H * scale, grad * scale),
            },
        )
        iterations += int(opt.nit)
        rounds += 1
        phi = np.asarray(opt.x, dtype=float)
        value, grad, kind = problem.nll_and_grad(phi, gradient)
        H = _hessian(problem, phi, kind, hessian_step)
        cov_phi, pd = _covariance(H)
        se_phi = np.sqrt(np.diag(cov_phi))
        newton = float(np.max(np.abs(cov_phi @ grad) / se_phi)) if pd else float("nan")
        done = pd and newton <= step_tol
        if done or iterations >= max_iter or rounds > _MAX_RESTARTS:
            break
    theta = from_unconstrained(phi, family.constraints)
    J = _jacobian_diag(theta, family.constraints)
    cov = cov_phi * np.outer(J, J)
    sde, meas = problem.model(phi)
    conv = Convergence(
        success=bool(opt.success),
        status=int(opt.status),
        message=str(opt.message),
        iterations=iterations,
        evaluations=problem.evaluations,
        grad_norm=float(np.max(np.abs(grad))),
        newton_step=newton,
        hessian_pd=pd,
        converged=bool(done),
        gradient=kind,
    )
    return FitResult(
        params=theta,
        se=np.sqrt(np.diag(cov)),
        cov=cov,
        names=tuple(family.names),
        constraints=tuple(family.constraints),
        unconstrained=phi,
        se_unconstrained=se_phi,
        cov_unconstrained=cov_phi,
        hessian=H,
        log_likelihood=-value,
        n_obs=n_obs,
        sde=sde,
        measurement=meas,
        convergence=conv,
    )


def _hessian(problem: Likelihood, phi: np.ndarray, kind: str, step: float) -> np.ndarray:
    """Numerical Hessian of ``-log L`` at ``phi``, symmetrised.

    From the score: forward differences ``(g(phi + h e_i) - g(phi)) / h`` with ``h = step *
    max(1, |phi_i|)`` (n gradients; ``g(phi)`` is already known). The score is accurate to
    ~1e-10 relative (central differences of the model pieces), so with the default step 1e-5
    truncation (``h |f'''| / |f''|``) and round-off (``1e-10 / h``) are both ~1e-5 relative:
    standard errors to ~1e-4 (measured against central differences: 2e-5 to 5e-5). From values
    (numeric gradient): the central four-point formula with step ``u^(1/4) max(1, |phi_i|)``.
    """
    n = phi.size
    H = np.empty((n, n))
    if kind == "score":
        h = step * np.maximum(1.0, np.abs(phi))
        g0 = problem.nll_and_grad(phi, "score")[1]
        for i in range(n):
            e = np.zeros(n)
            e[i] = h[i]
            H[i] = (problem.nll_and_grad(phi + e, "score")[1] - g0) / h[i]
        return lg.sym(H)
    h = _VALUE_HESSIAN_STEP * np.maximum(1.0, np.abs(phi))
    f0 = problem.nll(phi)
    for i in range(n):
        ei = np.zeros(n)
        ei[i] = h[i]
        H[i, i] = (problem.nll(phi + ei) - 2 * f0 + problem.nll(phi - ei)) / h[i] ** 2
        for j in range(i):
            ej = np.zeros(n)
            ej[j] = h[j]
            value = (
                problem.nll(phi + ei + ej)
                - problem.nll(phi + ei - ej)
                - problem.nll(phi - ei + ej)
                + problem.nll(phi - ei - ej)
            ) / (4 * h[i] * h[j])
            H[i, j] = H[j, i] = value
    return H


def _modified_inverse(H: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """``V diag(1 / max(|lambda|, floor)) V^T`` for ``H = V diag(lambda) V^T``: an SPD inverse.

    The floor, ``max(1e-6 max|lambda|, |grad| / _MAX_FIRST_STEP)``, keeps the first BFGS step
    ``-H^-1 grad`` at most `_MAX_FIRST_STEP` long where H is flat or negative (far from the
    optimum the quadratic model is poor, and a step of e^10 in a rate leaves the region where
    the model is usable); near the optimum, where ``|grad|`` is small, it has no effect. An H
    that is not finite gives the identity.
    """
    if not np.all(np.isfinite(H)) or not np.all(np.isfinite(grad)):
        return np.eye(H.shape[0])
    lam, V = np.linalg.eigh(lg.sym(H))
    top = float(np.max(np.abs(lam)))
    if top == 0.0:
        return np.eye(H.shape[0])
    floor = max(1e-6 * top, float(np.linalg.norm(grad)) / _MAX_FIRST_STEP)
    lam = np.maximum(np.abs(lam), floor)
    inv = (V / lam) @ V.T
    return lg.sym(inv)


def _covariance(H: np.ndarray) -> tuple[np.ndarray, bool]:
    """``H^-1`` via Cholesky; NaN and False if H is not positive definite."""
    try:
        L = np.linalg.cholesky(H)
    except np.linalg.LinAlgError:
        return np.full_like(H, np.nan), False
    Linv = np.linalg.inv(L)
    return Linv.T @ Linv, True


@batch_input.guard
def log_likelihood(family, theta, z, t, *, mask=None, prior="diffuse") -> float:
    """``sum_b log L_b(theta)``: the objective `fit` maximises, at natural parameters ``theta``.

    Same arguments as `fit`; ``theta`` (n,) must satisfy the family's constraints.
    """
    family = as_family(family, theta)
    theta = check_theta(theta, family, "theta")
    problem = Likelihood(family, z, t, mask, prior)
    return -problem.nll(to_unconstrained(theta, family.constraints))


def score(family, theta, z, t, *, mask=None, prior="diffuse") -> np.ndarray:
    """``d log L / d phi`` (n,) at ``theta`` by Fisher's identity, in unconstrained coordinates.

    Needs invertible ``Q_d``, ``R`` and prior covariance; raises ValueError otherwise.
    """
    family = as_family(family, theta)
    theta = check_theta(theta, family, "theta")
    problem = Likelihood(family, z, t, mask, prior)
    return -problem.nll_and_grad(to_unconstrained(theta, family.constraints), "score")[1]


__all__ = [
    "CONSTRAINTS",
    "GRADIENTS",
    "NOISES",
    "PRIORS",
    "ROTATIONS",
    "Convergence",
    "CustomFamily",
    "FitResult",
    "IsotropicFamily",
    "OUFamily",
    "fit",
    "from_unconstrained",
    "log_likelihood",
    "score",
    "to_unconstrained",
]

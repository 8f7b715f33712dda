"""Robust weights: the Student-t / Gamma scale mixture and its attention logits.

Seed 000 A.4 (the variational E-step). A measurement residual ``r`` (d,) is Gaussian given a
latent precision scale ``tau``, with a Gamma prior (shape ``alpha``, rate ``beta``):

    tau ~ Gamma(alpha, beta),   r | tau ~ N(0, (tau P)^-1),   m := r^T P r,

so the posterior is ``Gamma(alpha + d/2, beta + m/2)`` and the E-step weight on the precision
``P`` is the posterior mean

    w(m) = E[tau | r] = (alpha + d/2) / (beta + m/2).

The marginal of ``r`` is a multivariate Student-t with ``2 alpha`` degrees of freedom and scale
matrix ``(beta/alpha) P^-1``; minus its log density is, up to a constant, the M-estimator loss
``rho(m) = (alpha + d/2) log(beta + m/2)``, and the IRLS weight is ``2 drho/dm = w``. With
``alpha = beta = nu/2`` (a Student-t of ``nu`` degrees of freedom and scale ``P^-1``) the weight
is the classic ``(nu + d) / (nu + m)``; the seed drops its constant factor and keeps
``1 / (1 + m/nu)`` (``nu = 2 beta``), which normalisation cancels.

Seed 004 (RFA, eq. 11 and A.6.1) uses the power form ``(1 + m/nu)^-kappa`` with
``kappa = (nu + d)/d`` as attention logits ``log P - kappa log(1 + m/nu)``: ``2/d`` times the
Student-t log density plus a constant (a tempered likelihood, not the IRLS weight, which is the
power ``-1``); its derivative in ``m`` is ``-w/d``. As ``nu -> inf`` it tends to the Gaussian
(softmax) logit ``log P - m/d`` (seed 003 eq. 14, its digest's C25), and every weight above
tends to a constant (the Gaussian estimator).

Every function is elementwise and broadcasts its array arguments; ``nu`` may be ``inf`` (the
Gaussian limit, taken by an explicit branch). Logarithms use ``log1p`` so that ``m << nu``
keeps full relative precision.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import gammaln

from sde_sim import validation

# Below this argument lgamma differences are taken directly (each lgamma is O(x log x) <= 60,
# so the difference keeps ~1e-14 absolute accuracy); above it the Stirling form avoids
# subtracting two large lgamma values.
_STIRLING_MIN = 20.0
# Stirling series of the Binet remainder mu(z) = lgamma(z) - ((z - 1/2) log z - z + log(2 pi)/2):
# B_2n / (2n (2n - 1)) for n = 1..6; the first omitted term is below 1e-3 / z^13 (1e-19 at 20).
_STIRLING_COEFFS = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360)


# Series branch of `_log1p_excess`: for y < 0.1 the term after y^19 is below 1e-19 y^2 / 342.
_SERIES_MAX = 0.1
_SERIES_TERMS = 19


class GammaPosterior(NamedTuple):
    """``Gamma(shape, rate)`` posterior of the precision scale ``tau`` (arrays, broadcast)."""

    shape: np.ndarray
    rate: np.ndarray


def _positive(name: str, value, *, allow_inf: bool = False) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise TypeError(f"{name} must be a real number or array, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} has NaN entries")
    if not allow_inf and np.any(np.isinf(arr)):
        raise ValueError(f"{name} must be finite, got inf")
    if np.any(arr <= 0):
        raise ValueError(f"{name} must be > 0, got min {arr.min():.6g}")
    return arr


def _dim(dim) -> float:
    return validation.scalar("dim", dim, minimum=0.0, strict=True)


def gamma_posterior(mahalanobis_sq, dim, *, shape, rate) -> GammaPosterior:
    """The posterior ``Gamma(alpha + d/2, beta + m/2)`` of ``tau`` (seed 000 A.4).

    Prior ``Gamma(alpha, beta)`` times the likelihood ``N(r; 0, (tau P)^-1)``.
    ``mahalanobis_sq`` is ``m = r^T P r >= 0`` (any shape); ``dim`` is the dimension ``d`` of
    ``r``; ``shape``, ``rate`` > 0 broadcast against ``m``.
    """
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    d = _dim(dim)
    alpha, beta = _positive("shape", shape), _positive("rate", rate)
    post_shape, post_rate = np.broadcast_arrays(alpha + 0.5 * d, beta + 0.5 * m)
    return GammaPosterior(post_shape.copy(), post_rate.copy())


def variational_weight(mahalanobis_sq, dim, *, shape, rate) -> np.ndarray:
    """``w = E[tau | r] = (alpha + d/2) / (beta + m/2)`` (seed 000 A.4, the E-step).

    The expected precision is ``E[Sigma^-1] = w P``; ``w = 2 drho/dm`` for the loss
    ``rho = (alpha + d/2) log(beta + m/2)``. Shapes: broadcast of the arguments.
    """
    post = gamma_posterior(mahalanobis_sq, dim, shape=shape, rate=rate)
    return post.shape / post.rate


def log_variational_weight(mahalanobis_sq, dim, *, shape, rate) -> np.ndarray:
    """``log w = log(alpha + d/2) - log(beta) - log1p(m / (2 beta))`` (seed 000 A.4)."""
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    d = _dim(dim)
    alpha, beta = _positive("shape", shape), _positive("rate", rate)
    return np.log(alpha + 0.5 * d) - np.log(beta) - np.log1p(m / (2.0 * beta))


def student_t_loss(mahalanobis_sq, dim, *, shape, rate) -> np.ndarray:
    """The M-estimator loss ``rho(m) = (alpha + d/2) log(beta + m/2)`` (seed 000 A.4).

    Minus the log marginal density of ``r`` up to an additive constant; written as
    ``(alpha + d/2) (log(beta) + log1p(m / (2 beta)))``.
    """
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    d = _dim(dim)
    alpha, beta = _positive("shape", shape), _positive("rate", rate)
    return (alpha + 0.5 * d) * (np.log(beta) + np.log1p(m / (2.0 * beta)))


def student_t_weight(mahalanobis_sq, nu, dim) -> np.ndarray:
    """The EM / IRLS weight of a Student-t with ``nu`` degrees of freedom: ``(nu + d)/(nu + m)``.

    The E-step weight with ``alpha = beta = nu/2``; ``nu = inf`` gives 1 (the Gaussian MLE).
    Evaluated as ``(1 + d/nu) / (1 + m/nu)`` so that a large ``nu`` does not overflow.
    """
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    nu = _positive("nu", nu, allow_inf=True)
    d = _dim(dim)
    return (1.0 + d / nu) / (1.0 + m / nu)  # d/inf = m/inf = 0: the nu -> inf limit exactly


def rational_weight(mahalanobis_sq, nu) -> np.ndarray:
    """Seed 000's normalised weight ``1 / (1 + m/nu)`` (A.4, 2.3); ``nu = inf`` gives 1.

    Proportional to `variational_weight` with ``rate = nu/2`` for any shape: the constant
    ``(alpha + d/2)/beta`` cancels once weights are normalised.
    """
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    nu = _positive("nu", nu, allow_inf=True)
    return 1.0 / (1.0 + m / nu)


def student_t_exponent(nu, dim) -> np.ndarray:
    """``kappa = (nu + d) / d`` (seed 004 eq. 11, A.6.1); ``inf`` for ``nu = inf``."""
    nu = _positive("nu", nu, allow_inf=True)
    return (nu + _dim(dim)) / _dim(dim)


def power_log_weight(mahalanobis_sq, nu, *, kappa) -> np.ndarray:
    """``log (1 + m/nu)^-kappa = -kappa log1p(m/nu)`` (seed 004 A.5, the power-law family).

    ``kappa`` > 0 finite; ``nu = inf`` gives 0 (weight 1) at fixed ``kappa``. For the
    Student-t exponent ``kappa = (nu + d)/d``, whose ``nu -> inf`` limit is not 0, use
    `student_t_logit`.
    """
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    nu = _positive("nu", nu, allow_inf=True)
    kappa = _positive("kappa", kappa)
    return -kappa * np.log1p(m / nu)


def student_t_logit(mahalanobis_sq, nu, dim, *, log_precision=0.0) -> np.ndarray:
    """RFA's logit ``log P - ((nu + d)/d) log1p(m/nu)`` (seed 004 eq. 11, A.6.1).

    With ``m = P ||R||^2`` the squared Mahalanobis distance and ``log_precision = log P`` it is
    ``(2/d) log t_nu(r; 0, P^-1 I) + const``. Its derivative in ``m`` is ``-w/d`` with ``w``
    the `student_t_weight`. ``nu = inf`` takes the limit ``log P - m/d`` (the Gaussian /
    softmax logit, seed 003 eq. 14); for finite ``nu`` the ``log1p`` form keeps full relative
    precision however small ``m/nu`` is. Shapes: broadcast of the arguments.
    """
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    nu = _positive("nu", nu, allow_inf=True)
    d = _dim(dim)
    log_p = validation.real_array("log_precision", log_precision)
    m, nu = np.broadcast_arrays(m, nu)
    penalty = np.array(m / d)  # the nu -> inf limit of kappa log1p(m/nu)
    finite = np.isfinite(nu)
    penalty[finite] = (1.0 + nu[finite] / d) * np.log1p(m[finite] / nu[finite])
    return log_p - penalty


def gaussian_logit(mahalanobis_sq, temperature, *, log_precision=0.0) -> np.ndarray:
    """``log P - m / temperature``: the exponential kernel ``exp(-d^2/nu)`` (seed 004 A.5).

    Seed 000 A.4 reaches the same form as the first-order expansion of ``1/(1 + m/nu)`` with
    ``temperature = nu``; the `student_t_logit` limit is ``temperature = d``.
    """
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    temperature = _positive("temperature", temperature)
    return validation.real_array("log_precision", log_precision) - m / temperature


def _binet(z: np.ndarray) -> np.ndarray:
    """Stirling remainder ``lgamma(z) - (z - 1/2) log z + z - log(2 pi)/2`` for ``z >= 20``."""
    inv, inv2 = 1.0 / z, 1.0 / (z * z)
    out = np.zeros_like(z)
    for coeff in reversed(_STIRLING_COEFFS):
        out = out * inv2 + coeff
    return out * inv


def _log1p_excess(y: np.ndarray) -> np.ndarray:
    """``(1 + y) log1p(y) - y = sum_{n>=2} (-1)^n y^n / (n (n - 1))`` for ``y >= 0``.

    The series for ``y < 0.1`` (the direct form would cancel: it is ``y^2/2`` to leading
    order); the direct form above, where the cancellation costs at most a factor 20.
    """
    out = (1.0 + y) * np.log1p(y) - y
    small = y < _SERIES_MAX
    ys = y[small]
    acc = np.zeros_like(ys)
    for n in range(_SERIES_TERMS + 1, 1, -1):
        acc = acc * (-ys) + 1.0 / (n * (n - 1))
    out[small] = acc * ys * ys
    return out


def log_gamma_ratio(x, a) -> np.ndarray:
    """``lgamma(x + a) - lgamma(x) - a log x`` for ``x, a > 0``, accurate for large ``x``.

    For ``x >= 20`` the Stirling form ``(x + a - 1/2) log1p(a/x) - a + mu(x + a) - mu(x)``
    (``mu`` the Binet remainder, series to ``z^-11``), written as
    ``x [(1 + y) log1p(y) - y] - log1p(y)/2 + mu(x + a) - mu(x)`` with ``y = a/x``, avoids
    subtracting two lgamma values of size ``x log x`` and keeps relative precision as the
    result tends to ``a (a - 1) / (2x)``. Shapes: broadcast of ``x`` and ``a``.
    """
    x, a = np.broadcast_arrays(_positive("x", x), _positive("a", a))
    out = np.empty(x.shape)
    big = x >= _STIRLING_MIN
    xb, ab = x[big], a[big]
    y = ab / xb
    out[big] = xb * _log1p_excess(y) - 0.5 * np.log1p(y) + _binet(xb + ab) - _binet(xb)
    xs, as_ = x[~big], a[~big]
    out[~big] = gammaln(xs + as_) - gammaln(xs) - as_ * np.log(xs)
    return out


def gamma_mixture_log_density(
    mahalanobis_sq, dim, *, shape, rate, logdet_precision=0.0
) -> np.ndarray:
    """``log int N(r; 0, (tau P)^-1) Gamma(tau; alpha, beta) dtau`` (seed 000 A.4's marginal).

    A multivariate Student-t with ``2 alpha`` degrees of freedom and scale ``(beta/alpha) P^-1``:

        (1/2) log det P - (d/2) log(2 pi) + (d/2) log(alpha/beta)
        + [lgamma(alpha + d/2) - lgamma(alpha) - (d/2) log alpha]
        - (alpha + d/2) log1p(m / (2 beta)).

    ``m = r^T P r``; ``logdet_precision = log det P``. Shapes: broadcast of the arguments.
    """
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    d = _dim(dim)
    alpha, beta = _positive("shape", shape), _positive("rate", rate)
    logdet = validation.real_array("logdet_precision", logdet_precision)
    return (
        0.5 * logdet
        - 0.5 * d * np.log(2.0 * np.pi)
        + 0.5 * d * np.log(alpha / beta)
        + log_gamma_ratio(alpha, 0.5 * d)
        - (alpha + 0.5 * d) * np.log1p(m / (2.0 * beta))
    )


def student_t_log_density(mahalanobis_sq, nu, dim, *, logdet_precision=0.0) -> np.ndarray:
    """Log density of the ``d``-variate Student-t with ``nu`` dof and scale ``P^-1`` at ``r``.

    ``lgamma((nu + d)/2) - lgamma(nu/2) - (d/2) log(nu pi) + (1/2) log det P
    - ((nu + d)/2) log1p(m/nu)``: `gamma_mixture_log_density` with ``alpha = beta = nu/2``.
    ``nu = inf`` gives the Gaussian ``N(0, P^-1)``. Shapes: broadcast of the arguments.
    """
    m = validation.nonnegative("mahalanobis_sq", mahalanobis_sq)
    nu = _positive("nu", nu, allow_inf=True)
    d = _dim(dim)
    logdet = validation.real_array("logdet_precision", logdet_precision)
    m, nu, logdet = np.broadcast_arrays(m, nu, logdet)
    out = np.array(0.5 * logdet - 0.5 * d * np.log(2.0 * np.pi) - 0.5 * m)  # nu = inf limit
    finite = np.isfinite(nu)
    if np.any(finite):
        out[finite] = gamma_mixture_log_density(
            m[finite],
            d,
            shape=0.5 * nu[finite],
            rate=0.5 * nu[finite],
            logdet_precision=logdet[finite],
        )
    return out

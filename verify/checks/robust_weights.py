"""Checks of the robust weights: the Student-t / Gamma scale mixture (seed 000 A.4, 2.3) and the
power-law logits of RFA (seed 004 eq. 11, A.5, A.6.1; seed 003 eq. 14).

Notation: ``tau ~ Gamma(alpha, beta)`` (shape, rate), ``r | tau ~ N(0, (tau P)^-1)`` in ``d``
dimensions, ``m = r^T P r``; a Student-t with ``nu`` degrees of freedom is ``alpha = beta =
nu/2``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import sympy as sp
from scipy import stats
from scipy.integrate import quad

from estimators.closed_forms import robust_weights as rw
from sde_sim import Contamination
from verify.registry import Outcome, check, seed
from verify.tools import random_spd, symbolic_residual

SIGMA_LEVEL = 5.0


@functools.cache
def _generic_gamma_integral():
    k, b, tau = sp.symbols("k b tau", positive=True)
    return k, b, sp.integrate(tau ** (k - 1) * sp.exp(-b * tau), (tau, 0, sp.oo), conds="none")


def _gamma_integral(shape, rate):
    """SymPy: ``int_0^inf tau^(shape-1) e^(-rate tau) dtau`` (``= Gamma(shape) / rate^shape``),
    integrated once for symbols ``k, b > 0`` and substituted (both arguments are positive)."""
    k, b, integral = _generic_gamma_integral()
    return integral.subs({k: shape, b: rate})


# --- symbolic ---------------------------------------------------------------------------------


@check(
    "robust_weights.e-step-weight",
    title="Gamma(alpha, beta) prior x N(r; 0, (tau P)^-1) = Gamma(alpha + d/2, beta + m/2) "
    "kernel; its mean (by integration) is w = (alpha + d/2)/(beta + m/2) = const/(1 + m/nu), "
    "nu = 2 beta; alpha = beta = nu/2 gives (nu + d)/(nu + m)",
    source=seed(0, "A.4 (q*(tau), W = E[tau] P, nu = 2 beta)"),
    kind="symbolic",
    tolerance=0.0,
)
def _e_step(quick: bool) -> float:
    alpha, beta, m, d, tau, nu = sp.symbols("alpha beta m d tau nu", positive=True)
    log_prior = (alpha - 1) * sp.log(tau) - beta * tau  # up to tau-free constants
    log_lik = d / 2 * sp.log(tau) - tau * m / 2  # log det(tau P)^{1/2} - tau m / 2
    shape, rate = alpha + d / 2, beta + m / 2
    log_post = (shape - 1) * sp.log(tau) - rate * tau
    mean = _gamma_integral(shape + 1, rate) / _gamma_integral(shape, rate)
    weight = shape / rate
    return max(
        symbolic_residual(sp.diff(log_prior + log_lik - log_post, tau)),
        symbolic_residual(sp.gammasimp(mean) - weight),
        symbolic_residual(weight - (shape / beta) / (1 + m / (2 * beta))),
        symbolic_residual(weight.subs({alpha: nu / 2, beta: nu / 2}) - (nu + d) / (nu + m)),
    )


@check(
    "robust_weights.scale-mixture-marginal",
    title="int N(r; 0, (tau P)^-1) Gamma(tau; alpha, beta) dtau = the closed-form log density "
    "(Student-t, 2 alpha dof, scale (beta/alpha) P^-1); rho = (alpha + d/2) log(beta + m/2) "
    "is minus its log up to a constant and 2 drho/dm = w (IRLS)",
    source=seed(0, "A.4 (marginal Student-t, M-estimator loss)"),
    kind="symbolic",
    tolerance=0.0,
)
def _mixture(quick: bool) -> float:
    alpha, beta, m, d, tau, logdet, nu = sp.symbols("alpha beta m d tau L nu", positive=True)
    gauss = (tau / (2 * sp.pi)) ** (d / 2) * sp.exp(logdet / 2) * sp.exp(-tau * m / 2)
    prior = beta**alpha / sp.gamma(alpha) * tau ** (alpha - 1) * sp.exp(-beta * tau)
    K = sp.exp(logdet / 2) * (2 * sp.pi) ** (-d / 2) * beta**alpha / sp.gamma(alpha)
    shape, rate = alpha + d / 2, beta + m / 2
    kernel = K * tau ** (shape - 1) * sp.exp(-rate * tau)
    marginal = K * _gamma_integral(shape, rate)
    # The closed form of `gamma_mixture_log_density`, transcribed.
    closed = (
        logdet / 2
        - d / 2 * sp.log(2 * sp.pi)
        + d / 2 * sp.log(alpha / beta)
        + (sp.log(sp.gamma(shape)) - sp.log(sp.gamma(alpha)) - d / 2 * sp.log(alpha))
        - shape * sp.log(1 + m / (2 * beta))
    )
    loss = shape * sp.log(rate)
    t_density = (
        sp.gamma((nu + d) / 2)
        / (sp.gamma(nu / 2) * (nu * sp.pi) ** (d / 2))
        * sp.exp(logdet / 2)
        * (1 + m / nu) ** (-(nu + d) / 2)
    )
    at_nu = {alpha: nu / 2, beta: nu / 2}
    return max(
        symbolic_residual(sp.expand_log(sp.log(gauss * prior) - sp.log(kernel), force=True)),
        symbolic_residual(sp.simplify(sp.expand_log(sp.log(marginal) - closed, force=True))),
        symbolic_residual(sp.diff(sp.log(marginal) + loss, m)),
        symbolic_residual(2 * sp.diff(loss, m) - shape / rate),
        symbolic_residual(sp.simplify(marginal.subs(at_nu) / t_density) - 1),
    )


@check(
    "robust_weights.limits",
    title="nu -> inf: (nu + d)/(nu + m) -> 1 and 1/(1 + m/nu) -> 1 (Gaussian MLE); "
    "(1 + m/nu)^{-(nu + d)/d} -> e^{-m/d} (softmax, 003 C25); kappa = (nu + d)/d -> 1 as d -> inf",
    source=seed(4, "eq. 11, A.6.1; seed 003 eq. 14; seed 000 A.4"),
    kind="symbolic",
    tolerance=0.0,
)
def _limits(quick: bool) -> float:
    nu, d, m = sp.symbols("nu d m", positive=True)
    return max(
        symbolic_residual(sp.limit((nu + d) / (nu + m), nu, sp.oo) - 1),
        symbolic_residual(sp.limit(1 / (1 + m / nu), nu, sp.oo) - 1),
        symbolic_residual(sp.limit((1 + m / nu) ** (-(nu + d) / d), nu, sp.oo) - sp.exp(-m / d)),
        symbolic_residual(sp.limit(-(nu + d) / d * sp.log(1 + m / nu), nu, sp.oo) + m / d),
        symbolic_residual(sp.limit((nu + d) / d, d, sp.oo) - 1),
    )


@check(
    "robust_weights.logit-vs-irls-weight",
    title="RFA logit l = log P - kappa log(1 + m/nu), kappa = (nu + d)/d: dl/dm = -w/d with "
    "w = (nu + d)/(nu + m) the IRLS weight, and l - (2/d) log t_nu(r; 0, P^-1 I) is free of "
    "m and P (a tempered likelihood)",
    source=seed(4, "eq. 11, A.6.1"),
    kind="symbolic",
    tolerance=0.0,
)
def _logit_vs_irls(quick: bool) -> float:
    nu, d, m, P = sp.symbols("nu d m P", positive=True)
    kappa = (nu + d) / d
    logit = sp.log(P) - kappa * sp.log(1 + m / nu)
    w = (nu + d) / (nu + m)
    # isotropic scale P^-1 I: log det(P I) = d log P; m = P ||r||^2.
    log_t = (
        sp.loggamma((nu + d) / 2)
        - sp.loggamma(nu / 2)
        - d / 2 * sp.log(nu * sp.pi)
        + d / 2 * sp.log(P)
        - (nu + d) / 2 * sp.log(1 + m / nu)
    )
    gap = logit - 2 / d * log_t
    return max(
        symbolic_residual(sp.diff(logit, m) + w / d),
        symbolic_residual(sp.diff(gap, m)),
        symbolic_residual(sp.diff(gap, P)),
    )


@check(
    "robust_weights.exponential-approximation",
    title="seed 000's 1/(1 + x) ~ e^{-x}: they agree to first order (difference x^2/2 + "
    "O(x^3)) and e^{-x} <= 1/(1 + x) ((1 + x) e^{-x} falls from 1), the stronger down-weighting",
    source=seed(0, "A.4 (log(1 + x) ~ x)"),
    kind="symbolic",
    tolerance=0.0,
)
def _exponential_approximation(quick: bool) -> float:
    x = sp.symbols("x", positive=True)
    series = sp.series(1 / (1 + x) - sp.exp(-x), x, 0, 3).removeO()
    product = (1 + x) * sp.exp(-x)
    return max(
        symbolic_residual(series - x**2 / 2),
        symbolic_residual(product.subs(x, 0) - 1),
        symbolic_residual(sp.diff(product, x) + x * sp.exp(-x)),  # <= 0 for x >= 0
    )


# --- numeric ----------------------------------------------------------------------------------


def _mixture_integrand(alpha: float, beta: float, d: int, m: float, logdet: float):
    """Gamma(alpha, beta) density times N(r; 0, (tau P)^-1), written from the two densities
    (not from the posterior); with ``r^T P r = m``, ``log det P = logdet``."""
    log_norm = alpha * math.log(beta) - math.lgamma(alpha) + 0.5 * logdet
    log_norm -= 0.5 * d * math.log(2 * math.pi)

    def integrand(tau: float) -> float:
        log_prior = (alpha - 1) * math.log(tau) - beta * tau  # + alpha log beta - lgamma(alpha)
        log_gauss = 0.5 * d * math.log(tau) - 0.5 * tau * m  # + logdet/2 - (d/2) log(2 pi)
        return math.exp(log_norm + log_prior + log_gauss)

    return integrand


def _quad(fn, scale: float) -> float:
    # Split at the posterior's bulk (~ `scale`) so quad resolves the peak; epsrel 1e-13.
    first = quad(fn, 0.0, scale, epsabs=0.0, epsrel=1e-13, limit=200)[0]
    return first + quad(fn, scale, np.inf, epsabs=0.0, epsrel=1e-13, limit=200)[0]


def _mixture_cases(quick: bool, seed_: int):
    rng = np.random.default_rng(seed_)
    for _ in range(2 if quick else 40):
        d = int(rng.integers(1, 6))
        alpha, beta = rng.uniform(0.6, 6.0), rng.uniform(0.2, 5.0)
        P = random_spd(rng, d)
        r = rng.normal(size=d) * rng.uniform(0.1, 4.0)
        yield alpha, beta, d, P, r


# Quadrature at epsrel 1e-13 on smooth Gamma-type integrands (split at the peak): each
# integral to ~1e-13, a ratio or a log to ~3e-13; tolerance 1e-10 leaves a factor ~300 for
# quad's error estimate being optimistic near tau = 0 (tau^{alpha + d/2 - 1}, exponent > -1).
_QUAD_TOL = 1e-10


@check(
    "robust_weights.posterior-mean-quadrature",
    title="w = (alpha + d/2)/(beta + m/2) = int tau p(tau) N(r|tau) / int p(tau) N(r|tau) by "
    "quadrature (prior x likelihood, not the posterior form), random alpha, beta, d, P, r",
    source=seed(0, "A.4 (W = E_q*[tau] P)"),
    kind="numeric",
    tolerance=_QUAD_TOL,
)
def _posterior_mean(quick: bool) -> float:
    worst = 0.0
    for alpha, beta, d, P, r in _mixture_cases(quick, 71):
        m = float(r @ P @ r)
        logdet = float(np.linalg.slogdet(P)[1])
        integrand = _mixture_integrand(alpha, beta, d, m, logdet)
        peak = (alpha + d / 2) / (beta + m / 2)
        mean = _quad(lambda t, f=integrand: t * f(t), peak) / _quad(integrand, peak)
        weight = float(rw.variational_weight(m, d, shape=alpha, rate=beta))
        worst = max(worst, abs(weight - mean) / mean)
        log_weight = float(rw.log_variational_weight(m, d, shape=alpha, rate=beta))
        worst = max(worst, abs(log_weight - np.log(mean)))
    return worst


@check(
    "robust_weights.scale-mixture-density",
    title="int N(r; 0, (tau P)^-1) Gamma(tau; alpha, beta) dtau (quadrature) = "
    "gamma_mixture_log_density = scipy multivariate_t(df 2 alpha, shape (beta/alpha) P^-1); "
    "student_t_log_density = scipy t / multivariate_t at alpha = beta = nu/2",
    source=seed(0, "A.4 (marginal likelihood is a Student-t)"),
    kind="numeric",
    tolerance=_QUAD_TOL,
)
def _mixture_density(quick: bool) -> Outcome:
    worst_quad, worst_scipy = 0.0, 0.0
    for alpha, beta, d, P, r in _mixture_cases(quick, 72):
        m = float(r @ P @ r)
        logdet = float(np.linalg.slogdet(P)[1])
        peak = (alpha + d / 2) / (beta + m / 2)
        log_mix = np.log(_quad(_mixture_integrand(alpha, beta, d, m, logdet), peak))
        closed = float(
            rw.gamma_mixture_log_density(m, d, shape=alpha, rate=beta, logdet_precision=logdet)
        )
        shape_matrix = (beta / alpha) * np.linalg.inv(P)
        ref = stats.multivariate_t(loc=np.zeros(d), shape=shape_matrix, df=2 * alpha).logpdf(r)
        worst_quad = max(worst_quad, abs(closed - log_mix))
        worst_scipy = max(worst_scipy, abs(closed - ref))
        nu = 2 * alpha
        t_closed = float(rw.student_t_log_density(m, nu, d, logdet_precision=logdet))
        mvt = stats.multivariate_t(loc=np.zeros(d), shape=np.linalg.inv(P), df=nu).logpdf(r)
        worst_scipy = max(worst_scipy, abs(t_closed - mvt))
        if d == 1:
            s = np.sqrt(P[0, 0])
            worst_scipy = max(worst_scipy, abs(t_closed - stats.t(nu).logpdf(r[0] * s) - np.log(s)))
    return Outcome(
        max(worst_quad, worst_scipy),
        f"|log error| vs quadrature {worst_quad:.1e}, vs scipy {worst_scipy:.1e}",
    )


@check(
    "robust_weights.logit-tempered-likelihood",
    title="student_t_logit(P |r|^2, nu, d, log P) - (2/d) scipy multivariate_t(df nu, shape "
    "I/P).logpdf(r) is one constant over random r and P (seed 004 A.6.1)",
    source=seed(4, "eq. 11, A.6.1"),
    kind="numeric",
    tolerance=1e-11,
)
def _tempered(quick: bool) -> Outcome:
    # scipy's logpdf and the logit are O(10) numbers each good to ~1e-14 absolute; the spread
    # of their difference over the cases is round-off, ~1e-13; tolerance 1e-11.
    rng = np.random.default_rng(73)
    worst = 0.0
    for _ in range(4 if quick else 40):
        d = int(rng.integers(1, 9))
        nu = float(np.exp(rng.uniform(np.log(0.5), np.log(200))))
        gaps = []
        for _ in range(6):
            P = float(np.exp(rng.uniform(-2, 2)))
            r = rng.normal(size=d) * rng.uniform(0.1, 3.0)
            logit = rw.student_t_logit(P * (r @ r), nu, d, log_precision=np.log(P))
            dist = stats.multivariate_t(loc=np.zeros(d), shape=np.eye(d) / P, df=nu)
            gaps.append(float(logit) - 2.0 / d * dist.logpdf(r))
        worst = max(worst, max(gaps) - min(gaps))
    return Outcome(worst, "spread of logit - (2/d) log t over r and P, per (nu, d)")


@check(
    "robust_weights.log-space-precision",
    title="logits, log weights and log densities in log1p / Stirling form against 50-digit "
    "mpmath for m/nu in 1e-30..1e30, nu up to 1e20 and nu = inf (the Gaussian branch)",
    source=seed(4, "eq. 11; seed 000 A.4"),
    kind="numeric",
    tolerance=1e-13,
)
def _log_space(quick: bool) -> Outcome:
    # Each form is a handful of correctly rounded operations (log1p, log, products) with no
    # cancellation beyond the few-term sums of the log density: relative error <= ~10 u
    # ~ 2e-15; the lgamma differences below x = 20 are taken directly and carry ~1e-14
    # absolute. Tolerance 1e-13 (relative, or absolute where the reference is below 1).
    import mpmath

    mpmath.mp.dps = 50
    mf = mpmath.mpf
    worst, naive_worst = 0.0, 0.0
    for d in (1, 3, 64):
        for nu in (0.7, 30.0, 1e8, 1e15, 1e20):
            for x in (1e-30, 1e-10, 0.3, 1e10, 1e30):  # m / nu
                m = x * nu
                D, N, M = mf(d), mf(nu), mf(m)
                refs = {
                    "logit": -(N + D) / D * mpmath.log1p(M / N),
                    "log w": mpmath.log((N / 2 + D / 2) / (N / 2 + M / 2)),
                    "log t": mpmath.loggamma((N + D) / 2)
                    - mpmath.loggamma(N / 2)
                    - D / 2 * mpmath.log(N * mpmath.pi)
                    - (N + D) / 2 * mpmath.log1p(M / N),
                }
                values = {
                    "logit": rw.student_t_logit(m, nu, d),
                    "log w": rw.log_variational_weight(m, d, shape=nu / 2, rate=nu / 2),
                    "log t": rw.student_t_log_density(m, nu, d),
                }
                for key, ref in refs.items():
                    err = abs(mf(float(values[key])) - ref) / max(abs(ref), mf(1))
                    worst = max(worst, float(err))
                naive = -(nu + d) / d * np.log(1 + m / nu)
                naive_err = abs(mf(naive) - refs["logit"]) / abs(refs["logit"])
                naive_worst = max(naive_worst, float(naive_err))
        # The nu = inf branch against its limit, exactly.
        m = 2.5
        gauss = -0.5 * d * np.log(2 * np.pi) - 0.5 * m
        worst = max(worst, abs(float(rw.student_t_log_density(m, np.inf, d)) - gauss))
        worst = max(worst, abs(float(rw.student_t_logit(m, np.inf, d)) + m / d))
    return Outcome(worst, f"naive log(1 + m/nu) logit's relative error: {naive_worst:.1e}")


# The printed rescaling of seed 000 2.3 and the E-step of A.4 compared by their relative weights
# w(m) / w(m0), which is all that normalised weights depend on (alpha = beta = nu/2).


@functools.cache
def _posterior_means(quick: bool) -> tuple:
    """``(nu, m (4,), E[tau | m] (4,))`` cases by quadrature, shared by the two checks."""
    rng = np.random.default_rng(74)
    cases = []
    for _ in range(1 if quick else 20):
        d = int(rng.integers(1, 5))
        nu = float(rng.uniform(1.0, 10.0))
        ms = rng.uniform(0.0, 40.0, size=4)
        means = []
        for m in ms:
            integrand = _mixture_integrand(nu / 2, nu / 2, d, float(m), 0.0)
            peak = (nu / 2 + d / 2) / (nu / 2 + m / 2)
            means.append(_quad(lambda t, f=integrand: t * f(t), peak) / _quad(integrand, peak))
        cases.append((nu, ms, np.array(means)))
    return tuple(cases)


def _relative_weight_error(form, quick: bool) -> float:
    worst = 0.0
    for nu, ms, means in _posterior_means(quick):
        reference = np.log(means / means[0])
        scales = np.log(form(ms, nu) / form(ms[0], nu))
        worst = max(worst, float(np.max(np.abs(scales - reference))))
    return worst


@check(
    "robust_weights.printed-sec2.3-rescaling",
    title="printed (2.3): P <- P / w with w = 1/(1 + m/nu) up-weights outliers; its relative "
    "weights are the inverse of the E-step's E[tau | m] (quadrature)",
    source=seed(0, "2.3 (P^C_ij <- P^C_ij / w_ij)"),
    kind="numeric",
    tolerance=_QUAD_TOL,
    expect="fails",
    printed=r"P^C_{ij} \leftarrow P^C_{ij}/w_{ij},\qquad w_{ij} = \frac{1}{1 + m_{ij}/\nu}",
    corrected=(
        r"P^C_{ij} \leftarrow w_{ij}\,P^C_{ij},\qquad \frac{w(m)}{w(m_0)} = "
        r"\frac{\mathbb{E}[\tau\mid m]}{\mathbb{E}[\tau\mid m_0]}"
    ),
    correction="robust_weights.corrected-sec2.3-rescaling",
)
def _printed_rescaling(quick: bool) -> float:
    return _relative_weight_error(lambda m, nu: 1.0 / rw.rational_weight(m, nu), quick)


@check(
    "robust_weights.corrected-sec2.3-rescaling",
    title="corrected (as in A.4 and the 2.3 IRLS update): P <- w P; relative weights "
    "w(m)/w(m0) = E[tau|m]/E[tau|m0] by quadrature",
    source=seed(0, "2.3, A.4"),
    kind="numeric",
    tolerance=_QUAD_TOL,
)
def _corrected_rescaling(quick: bool) -> float:
    return _relative_weight_error(rw.rational_weight, quick)


# --- statistical --------------------------------------------------------------------------------


def _bin_scores(values: np.ndarray, bins: np.ndarray) -> np.ndarray:
    """z-scores of each bin's mean of `values` against 0 (standard error from the bin)."""
    out = []
    for b in np.unique(bins):
        v = values[bins == b]
        out.append(v.mean() / (v.std(ddof=1) / np.sqrt(v.size)))
    return np.array(out)


@check(
    "robust_weights.posterior-mean-monte-carlo",
    title="Monte Carlo of the Gamma-Normal hierarchy (alpha = 1.5, beta = 0.7, d = 3): in 10 "
    "bins of m, mean of tau - w(m) = 0 and of (tau - w)^2 - Var(tau | m) = 0",
    source=seed(0, "A.4 (q*(tau) and its mean)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _posterior_monte_carlo(quick: bool) -> Outcome:
    # E[tau - w(m) | m] = 0 exactly, so binning m adds no bias; each bin mean is a z-score.
    rng = np.random.default_rng(75)
    n = 20_000 if quick else 400_000
    alpha, beta, d = 1.5, 0.7, 3
    P = random_spd(rng, d)
    tau = rng.gamma(alpha, 1.0 / beta, size=n)
    L = np.linalg.cholesky(np.linalg.inv(P))
    r = (rng.normal(size=(n, d)) @ L.T) / np.sqrt(tau)[:, None]
    m = np.einsum("ni,ij,nj->n", r, P, r)
    bins = np.searchsorted(np.quantile(m, np.linspace(0, 1, 11)[1:-1]), m)
    post = rw.gamma_posterior(m, d, shape=alpha, rate=beta)
    w = rw.variational_weight(m, d, shape=alpha, rate=beta)
    z = np.concatenate(
        [
            _bin_scores(tau - w, bins),
            _bin_scores((tau - w) ** 2 - post.shape / post.rate**2, bins),
        ]
    )
    wrong = (alpha + d) / (beta + m / 2)  # d where d/2 belongs
    z_wrong = _bin_scores(tau - wrong, bins)
    return Outcome(
        float(np.max(np.abs(z))),
        f"{n} draws; max |z| with (alpha + d) instead of (alpha + d/2): "
        f"{np.max(np.abs(z_wrong)):.0f}",
    )


@check(
    "robust_weights.scale-mixture-sampling",
    title="sde_sim's Student-t outliers (Contamination: xi / sqrt(chi2_nu / nu)) against the "
    "closed-form density: 20 bins of m = |r|^2 (multinomial z) and a KS test of m/d vs "
    "F(d, nu) (p-value as a two-sided z), nu = 3, d = 4",
    source=seed(0, "A.4; seed 004 A.5 (Student-t residuals)"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _mixture_sampling(quick: bool) -> Outcome:
    from scipy.special import gammaln

    rng = np.random.default_rng(76)
    n = 20_000 if quick else 400_000
    nu, d = 3.0, 4
    xi = rng.normal(size=(1, n, d))
    outlier, _ = Contamination(
        outlier_fraction=1.0, outlier_df=nu, outlier_scale=1.0
    ).corrupt_draws(xi, rng)
    if not outlier.all():
        raise RuntimeError("Contamination with outlier_fraction=1 left some draws Gaussian")
    m = np.sum(xi[0] ** 2, axis=1)

    def radial_density(x):
        # density of m = |r|^2 for r with density p(m): pi^{d/2}/Gamma(d/2) m^{d/2-1} p(m).
        log_shell = 0.5 * d * np.log(np.pi) - gammaln(0.5 * d) + (0.5 * d - 1) * np.log(x)
        return np.exp(log_shell + rw.student_t_log_density(x, nu, d))

    edges = np.concatenate([[0.0], stats.f(d, nu).ppf(np.linspace(0, 1, 21)[1:-1]) * d, [np.inf]])
    counts = np.histogram(m, edges)[0]

    def scores(p: np.ndarray) -> np.ndarray:
        return (counts - n * p) / np.sqrt(n * p * (1 - p))

    # Bin probabilities from the closed-form density: 64-point Gauss-Legendre on each finite bin
    # (the integrand m (1 + m/nu)^{-7/2} is smooth on each: error far below 1e-12), quad on the
    # tail bin [e, inf). Their sum is not forced to 1: it checks the density's normalisation.
    nodes, weights = np.polynomial.legendre.leggauss(64)
    lo, hi = edges[:-2, None], edges[1:-1, None]
    x = 0.5 * (hi - lo) * nodes + 0.5 * (hi + lo)
    finite = 0.5 * (hi[:, 0] - lo[:, 0]) * (radial_density(x) @ weights)
    tail = quad(lambda v: float(radial_density(v)), edges[-2], np.inf, epsrel=1e-10)[0]
    p = np.append(finite, tail)
    total = p.sum()
    z = scores(p)
    ks = stats.kstest(m / d, stats.f(d, nu).cdf)
    z_ks = float(stats.norm.isf(ks.pvalue / 2))
    z_gauss = scores(np.diff(stats.chi2(d).cdf(edges)))  # power: a Gaussian model of r
    return Outcome(
        max(float(np.max(np.abs(z))), z_ks),
        f"{n} draws; max |z| bins {np.max(np.abs(z)):.2f}, KS {z_ks:.2f}; sum p - 1 = "
        f"{total - 1:.1e}; Gaussian density: max |z| {np.max(np.abs(z_gauss)):.0f}",
    )

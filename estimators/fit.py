"""Parameter MLE: maximise the Kalman innovations log-likelihood over a model family.

For a family ``theta -> (sde, measurement)`` (a `sde_sim.LinearSDE` ``dx = (A x + u) dt + G dw``
and a `sde_sim.LinearMeasurement` ``z = C x + b + v``, ``v ~ N(0, R)``; seed 000 section 2.1)
and measurements ``z`` (B, T, k) of B independent sequences, the estimate maximises

    log L(theta) = sum_b sum_k log N(z_bk; C m-_bk + b, S_k),   S_k = C P-_k C^T + R,

the innovations (prediction-error) decomposition of the exact likelihood that
`estimators.kalman.kalman_filter` returns per sequence (``log_likelihood``, summed here).

Parameterisation. The optimiser works on unconstrained coordinates ``phi``, one per parameter:
a ``"real"`` parameter is ``theta = phi``, a ``"positive"`` one ``theta = exp(phi)`` and a
``"negative"`` one ``theta = -exp(phi)``. (The suite's default map for positive parameters is
softplus; here log is used because the likelihood of a variance or a rate is much closer to
quadratic in its logarithm, which is what the Hessian-based standard errors assume, and because
``d theta / d phi = theta`` makes the delta method exact to first order and easy to read.)

Standard errors. With ``H`` the Hessian of ``-log L`` in ``phi`` at the optimum (the observed
information, a numerical Hessian), ``Cov(phi_hat) ~ H^-1`` and, by the delta method,
``Cov(theta_hat) ~ J H^-1 J`` with ``J = diag(d theta / d phi)`` (1 for real parameters,
``theta`` for positive and negative ones): ``se(theta) = |theta| se(phi)`` for those.

Gradient. ``d log L / d phi`` is computed with Fisher's identity: the score of the observed
data is the posterior expectation of the complete-data score,
``E[d/dphi log p(x, z; phi) | z]``, and for a linear-Gaussian model that expectation needs
only the RTS-smoothed means and covariances (`estimators.kalman.rts_smoother`), the lag-one
smoothed cross-covariances and the derivatives of the step maps ``e^{Ah}``, ``int e^{As} ds u``,
``Q_d(h)`` and of ``C, b, R`` and the prior. Those model derivatives are cheap central
differences of the model map (no filtering); the expensive part, the filter and smoother, is
run once per gradient instead of twice per parameter. Where a covariance the identity inverts
(``Q_d``, ``R``, the prior covariance) is singular, the gradient falls back to central
differences of the log-likelihood (``gradient="auto"``).

Prior on the first state. ``"stationary"`` and a fixed `GaussianPrior` give the exact
likelihood when the data start from that law. ``"diffuse"`` (the filter's flat prior: the first
measurement fixes the state and adds no term) is the usual choice for one long sequence, but it
is not the likelihood of data whose first states come from a proper law: it takes ``x_0 | z_0``
to be ``N(P0 C^T R^-1 (z_0 - b), P0)``, the posterior under a flat prior, so the expected score
under the data is not zero. With many short sequences the estimate is then biased by an amount
fixed as the number of sequences grows (growing like its square root in standard errors) and
shrinking only with their length. Measured here: for ``A = -0.3 I + J``, ``sigma2 = 0.3``,
``eta2 = 0.5``, stationary starts, 200 sequences of 31 steps of 0.1, the diffuse estimate of
``log(-alpha)`` lies +4.4 standard errors from the truth on average over 20 datasets; the
stationary-prior estimate lies within 0.1 standard errors of it over 100. Give the initial law
when it is known.

Families: `IsotropicFamily` (seed 000 section 3.6), `OUFamily` (seed 001 eqs. (7)-(8)) and
`CustomFamily` (any ``params -> (sde, measurement)``); `fit` takes any of them or a plain
callable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_continuous_lyapunov
from scipy.optimize import minimize

from estimators import batch_input
from estimators.kalman import GaussianPrior, kalman_filter, rts_smoother
from sde_sim import LinearMeasurement, LinearSDE, linear_transition, validation
from sde_sim.models import rotation_generator, skew_from_vector

CONSTRAINTS = ("real", "positive", "negative")
PRIORS = ("diffuse", "stationary")
GRADIENTS = ("auto", "score", "numeric")
ROTATIONS = ("rope", "vector", "none")
NOISES = ("shared", "per-channel")

_EPS = np.finfo(float).eps
# Central differences of a function computed to relative accuracy ~u: the step u^(1/3) balances
# truncation (h^2) against round-off (u / h), both ~ u^(2/3) ~ 4e-11 relative.
_MODEL_STEP = _EPS ** (1.0 / 3.0)
# Second differences of the log-likelihood from its values: u^(1/4) balances h^2 and u / h^2.
_VALUE_HESSIAN_STEP = _EPS**0.25
# A covariance counts as singular for Fisher's identity (which inverts it) below this ratio of
# its smallest to largest eigenvalue: the identity's terms then cancel catastrophically.
_SINGULAR_RTOL = 1e-12
# Longest first step of a BFGS round in the unconstrained coordinates (a factor e^2 in a positive
# parameter), and how many times a round that ends short of the optimum is restarted.
_MAX_FIRST_STEP = 2.0
_MAX_RESTARTS = 3
# Points whose (value, gradient) `_Problem` remembers.
_CACHE_SIZE = 64


# --------------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------------


def _fixed_C(C, d: int) -> np.ndarray:
    if C is None:
        return np.eye(d)
    C = validation.real_array("C", C, ndim=2)
    if C.shape[1] != d:
        raise ValueError(f"C must have {d} columns (the state dimension), got shape {C.shape}")
    return C


@dataclass(frozen=True, eq=False)
class IsotropicFamily:
    """Isotropic decay plus rotation, isotropic noise (seed 000 section 3.6).

    ``A = alpha I + Omega(omega)``, ``Q = sigma2 I``, ``z = C x + v``, ``R = eta2 I``, with
    parameters ``theta = (alpha, omega..., sigma2, eta2)``:

    * ``alpha < 0`` (the shared real part of every eigenvalue: decay);
    * ``omega``: for ``rotation="rope"`` one frequency per 2x2 block ``[[0, -w], [w, 0]]``
      (RoPE pairs, d even, d/2 values); for ``"vector"`` a 3-D rotation vector (d = 3,
      ``Omega = [omega]_x``, rotation about ``omega`` at ``|omega|`` rad per unit time); for
      ``"none"`` no rotation (no omega parameters);
    * ``sigma2 > 0``, ``eta2 > 0``: process and measurement noise variances per coordinate.

    Identifiability. ``Omega`` is skew and commutes with ``alpha I``, so
    ``Q_d(h) = sigma2 (1 - e^{2 alpha h}) / (-2 alpha) I`` does not depend on ``omega``, which
    enters only through the rotation ``e^{Omega h}``. On a regular grid of step ``h`` a RoPE
    frequency is therefore identified only modulo ``2 pi / h`` (aliasing), and a rotation vector
    only up to the rotation it generates over ``h``; irregular steps remove the aliases. The
    estimate is the maximum nearest the initial guess: start ``omega`` below the Nyquist
    frequency ``pi / h``. With ``C = I`` the sign of each frequency is identified.

    Parameters
    ----------
    dim : state dimension d.
    rotation : ``"rope"``, ``"vector"`` or ``"none"``.
    C : (k, d) fixed measurement matrix; default ``I`` (k = d).
    """

    dim: int
    rotation: str = "rope"
    C: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        d = validation.count("dim", self.dim)
        validation.choice("rotation", self.rotation, ROTATIONS)
        if self.rotation == "rope" and d % 2:
            raise ValueError(f"rotation 'rope' needs an even dim (2x2 blocks), got dim={d}")
        if self.rotation == "vector" and d != 3:
            raise ValueError(f"rotation 'vector' (a 3-D rotation vector) needs dim=3, got {d}")
        object.__setattr__(self, "C", validation.readonly(_fixed_C(self.C, d)))

    @property
    def n_omega(self) -> int:
        return {"rope": self.dim // 2, "vector": 3, "none": 0}[self.rotation]

    @property
    def names(self) -> tuple[str, ...]:
        omega = (
            ("omega",) if self.n_omega == 1 else tuple(f"omega[{i}]" for i in range(self.n_omega))
        )
        return ("alpha", *omega, "sigma2", "eta2")

    @property
    def constraints(self) -> tuple[str, ...]:
        return ("negative", *("real",) * self.n_omega, "positive", "positive")

    def pack(self, *, alpha, omega=(), sigma2, eta2) -> np.ndarray:
        """The parameter vector from named values (``omega`` scalar or (n_omega,))."""
        omega = np.atleast_1d(np.asarray(omega, dtype=float))
        if omega.shape != (self.n_omega,):
            raise ValueError(f"omega must have {self.n_omega} entries, got shape {omega.shape}")
        return np.concatenate([[alpha], omega, [sigma2, eta2]]).astype(float)

    def unpack(self, theta) -> dict[str, float | np.ndarray]:
        """Named values of a parameter vector (inverse of `pack`)."""
        theta = validation.vector("theta", theta, len(self.names))
        return {
            "alpha": float(theta[0]),
            "omega": theta[1 : 1 + self.n_omega].copy(),
            "sigma2": float(theta[-2]),
            "eta2": float(theta[-1]),
        }

    def build(self, theta) -> tuple[LinearSDE, LinearMeasurement]:
        """``(LinearSDE(alpha I + Omega, sqrt(sigma2) I), LinearMeasurement(C, eta2 I))``."""
        p = self.unpack(theta)
        d = self.dim
        if self.rotation == "rope":
            Omega = rotation_generator(p["omega"])
        elif self.rotation == "vector":
            Omega = skew_from_vector(p["omega"])
        else:
            Omega = np.zeros((d, d))
        A = p["alpha"] * np.eye(d) + Omega
        sde = LinearSDE(A, np.sqrt(p["sigma2"]) * np.eye(d))
        return sde, LinearMeasurement(self.C, p["eta2"] * np.eye(self.C.shape[0]))


@dataclass(frozen=True, eq=False)
class OUFamily:
    """Independent Ornstein-Uhlenbeck channels, KLA's prior (seed 001 eqs. (7)-(8)).

    ``dx_i = -a_i x_i dt + p_i dw_i`` (``A = -diag(a)``, ``G = diag(p)``), measured by
    ``z = C x + v``, ``R = eta2 I`` (``noise="shared"``) or ``diag(eta2)``
    (``"per-channel"``, one variance per measurement component). Parameters
    ``theta = (a_1..a_n, p_1..p_n, eta2...)``, all positive. Over a step ``h`` the law is
    eq. (8): ``x(t+h) = a_bar x(t) + N(0, p_bar)``, ``a_bar = e^{-a h}``,
    ``p_bar = p^2 (1 - e^{-2 a h}) / (2 a)``; p is the diffusion coefficient (Q = p^2), as in
    the paper's eq. (8).

    Identifiability. The law of the observed sequence depends on ``(a, p)`` only through
    ``(a_bar, p_bar)`` at the observed steps. KLA learns a step ``Delta`` too, but ``a`` and
    ``Delta`` enter only as ``a Delta``: ``(a, p, Delta)`` and ``(c a, sqrt(c) p, Delta / c)``
    give the same ``a_bar`` and ``p_bar`` for every ``c > 0``, so the triple is not
    identifiable. Here the time stamps are given (Delta is known), and then
    ``a = -log(a_bar) / Delta`` and ``p^2 = 2 a p_bar / (1 - a_bar^2)`` are identified. Also:
    ``p`` enters only as ``p^2`` (its sign is not identified, so ``p > 0`` is imposed); if ``C``
    were free, ``(p, C)`` and ``(c p, C / c)`` would agree, so ``C`` is fixed; and when
    ``a Delta >> 1`` the steps are nearly independent (``a_bar ~ 0``) and only the stationary
    variance ``p^2 / (2a)`` is well determined: the standard errors of ``a`` and ``p`` then
    grow like ``e^{a Delta}``.

    Parameters
    ----------
    channels : number of channels n (the state dimension).
    noise : ``"shared"`` (one eta2) or ``"per-channel"`` (k values).
    C : (k, n) fixed measurement matrix; default ``I``.
    """

    channels: int
    noise: str = "shared"
    C: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        n = validation.count("channels", self.channels)
        validation.choice("noise", self.noise, NOISES)
        object.__setattr__(self, "C", validation.readonly(_fixed_C(self.C, n)))

    @property
    def n_noise(self) -> int:
        return 1 if self.noise == "shared" else self.C.shape[0]

    @property
    def names(self) -> tuple[str, ...]:
        n = self.channels
        eta = ("eta2",) if self.n_noise == 1 else tuple(f"eta2[{i}]" for i in range(self.n_noise))
        return (*(f"a[{i}]" for i in range(n)), *(f"p[{i}]" for i in range(n)), *eta)

    @property
    def constraints(self) -> tuple[str, ...]:
        return ("positive",) * len(self.names)

    def pack(self, *, a, p, eta2) -> np.ndarray:
        """The parameter vector from ``a`` (n,), ``p`` (n,) and ``eta2`` (scalar or (k,))."""
        n = self.channels
        a = np.broadcast_to(np.asarray(a, dtype=float), (n,))
        p = np.broadcast_to(np.asarray(p, dtype=float), (n,))
        eta2 = np.broadcast_to(np.asarray(eta2, dtype=float), (self.n_noise,))
        return np.concatenate([a, p, eta2])

    def unpack(self, theta) -> dict[str, np.ndarray]:
        theta = validation.vector("theta", theta, len(self.names))
        n = self.channels
        return {"a": theta[:n].copy(), "p": theta[n : 2 * n].copy(), "eta2": theta[2 * n :].copy()}

    def build(self, theta) -> tuple[LinearSDE, LinearMeasurement]:
        """``(LinearSDE(-diag(a), diag(p)), LinearMeasurement(C, eta2 I or diag(eta2)))``."""
        q = self.unpack(theta)
        k = self.C.shape[0]
        R = np.diag(np.broadcast_to(q["eta2"], (k,)))
        return LinearSDE(-np.diag(q["a"]), np.diag(q["p"])), LinearMeasurement(self.C, R)


@dataclass(frozen=True)
class CustomFamily:
    """Any user model: ``build(theta) -> (LinearSDE, LinearMeasurement)``.

    Parameters
    ----------
    build : the model map; called with a float64 vector (n,) of natural parameters.
    constraints : per parameter ``"real"``, ``"positive"`` or ``"negative"`` (n,).
    names : optional labels (n,); default ``theta[i]``.
    """

    build: Callable[[np.ndarray], tuple[LinearSDE, LinearMeasurement]]
    constraints: tuple[str, ...]
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not callable(self.build):
            raise TypeError(f"build must be callable, got {type(self.build).__name__}")
        cons = tuple(self.constraints)
        if not cons:
            raise ValueError("constraints must list at least one parameter")
        for i, c in enumerate(cons):
            validation.choice(f"constraints[{i}]", c, CONSTRAINTS)
        names = tuple(f"theta[{i}]" for i in range(len(cons))) if self.names is None else self.names
        names = tuple(str(s) for s in names)
        if len(names) != len(cons):
            raise ValueError(f"names has {len(names)} entries; constraints has {len(cons)}")
        object.__setattr__(self, "constraints", cons)
        object.__setattr__(self, "names", names)


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
# Parameter maps
# --------------------------------------------------------------------------------------------


def to_unconstrained(theta, constraints) -> np.ndarray:
    """``phi``: identity for real, ``log theta`` for positive, ``log(-theta)`` for negative."""
    theta = np.asarray(theta, dtype=float)
    kinds = np.asarray(constraints)
    out = theta.copy()
    pos, neg = kinds == "positive", kinds == "negative"
    out[pos] = np.log(theta[pos])
    out[neg] = np.log(-theta[neg])
    return out


def from_unconstrained(phi, constraints) -> np.ndarray:
    """``theta``: identity for real, ``exp phi`` for positive, ``-exp phi`` for negative."""
    phi = np.asarray(phi, dtype=float)
    kinds = np.asarray(constraints)
    out = phi.copy()
    pos, neg = kinds == "positive", kinds == "negative"
    out[pos] = np.exp(phi[pos])
    out[neg] = -np.exp(phi[neg])
    return out


def _jacobian_diag(theta: np.ndarray, constraints) -> np.ndarray:
    """``d theta / d phi``: 1 for real parameters, theta for positive and negative ones."""
    return np.where(np.asarray(constraints) == "real", 1.0, theta)


# --------------------------------------------------------------------------------------------
# The problem: data, model pieces, log-likelihood and score
# --------------------------------------------------------------------------------------------


class _Pieces(NamedTuple):
    """A model at one parameter point, on the step sizes of the data."""

    sde: LinearSDE
    measurement: LinearMeasurement
    Phi: np.ndarray  # (S, d, d)
    offset: np.ndarray  # (S, d)
    Qd: np.ndarray  # (S, d, d)
    prior_mean: np.ndarray | None  # (d,) or (B, d) (diffuse: per sequence)
    prior_cov: np.ndarray | None  # (d, d)


class _Problem:
    def __init__(self, family, z, t, mask, prior):
        self.family = family
        self.constraints = tuple(family.constraints)
        self.prior = prior
        self.z = z
        self.t = t
        self.mask = mask
        self.evaluations = 0
        # Recent nll_and_grad results by point: BFGS and the Hessians revisit points.
        self._cache: dict = {}
        self._maps: dict = {}  # step maps by model and step sizes (see `pieces`)

    # --- model -----------------------------------------------------------------------------

    def model(self, phi) -> tuple[LinearSDE, LinearMeasurement]:
        theta = from_unconstrained(phi, self.constraints)
        out = self.family.build(theta)
        if (
            not isinstance(out, tuple)
            or len(out) != 2
            or not isinstance(out[0], LinearSDE)
            or not isinstance(out[1], LinearMeasurement)
        ):
            raise TypeError(
                "the family's build(theta) must return (sde_sim.LinearSDE, "
                f"sde_sim.LinearMeasurement), got {type(out).__name__}"
            )
        return out

    def filter_prior(self, sde: LinearSDE) -> GaussianPrior | None:
        if isinstance(self.prior, GaussianPrior):
            return self.prior
        if self.prior == "diffuse":
            return None
        return GaussianPrior(*_stationary(sde))

    def run_filter(self, phi):
        sde, meas = self.model(phi)
        self.evaluations += 1
        fr = kalman_filter(sde, meas, self.z, self.t, prior=self.filter_prior(sde), mask=self.mask)
        return sde, meas, fr

    def nll(self, phi) -> float:
        return -float(np.sum(self.run_filter(phi)[2].log_likelihood))

    def pieces(self, phi, sizes: np.ndarray) -> _Pieces:
        sde, meas = self.model(phi)
        d = sde.dim
        if sizes.size:
            # Perturbing a measurement-only parameter leaves the SDE, and its step maps, as
            # they were: the maps are remembered by (A, Q, u, sizes).
            key = b"".join(a.tobytes() for a in (sde.A, sde.Q, sde.u, sizes))
            if key not in self._maps:
                if len(self._maps) >= _CACHE_SIZE:
                    self._maps.pop(next(iter(self._maps)))
                self._maps[key] = linear_transition(sde, sizes)
            Phi, offset, Qd = self._maps[key]
        else:
            Phi, offset, Qd = np.zeros((0, d, d)), np.zeros((0, d)), np.zeros((0, d, d))
        if isinstance(self.prior, GaussianPrior):
            mean, cov = self.propagated_prior(sde, meas)
        elif self.prior == "diffuse":
            mean, cov = _diffuse_prior(meas, self.z[:, 0])
        else:
            mean, cov = _stationary(sde, check=False)  # the filter at phi has checked A
        return _Pieces(sde, meas, Phi, offset, Qd, mean, cov)

    def propagated_prior(self, sde: LinearSDE, meas: LinearMeasurement):
        """A fixed prior ``N(mu, S)`` at ``prior.time``, carried to each first state time.

        ``N(F mu + c, F S F^T + Q_d)`` over ``h_b = t_b0 + delay - time`` per sequence: means
        (B, d) and covariances (B, d, d). (None, None) when the prior sits at the first state
        times (``time=None``, or ``h = 0``): it does not depend on the parameters then.
        """
        if self.prior.time is None:
            return None, None
        t = np.asarray(self.t, dtype=float)
        first = t[..., 0] if t.ndim == 2 else np.full(self.z.shape[0], t[0])
        h = np.broadcast_to(first + meas.delay - float(self.prior.time), (self.z.shape[0],))
        if not np.any(h):
            return None, None
        sizes, cls = _step_classes(h)
        Phi, offset, Qd = linear_transition(sde, sizes)
        d = sde.dim
        mu = np.zeros(d) if self.prior.mean is None else np.asarray(self.prior.mean, float)
        S = np.asarray(self.prior.cov, dtype=float)
        mean = Phi @ mu + offset
        cov = Phi @ S @ np.swapaxes(Phi, -1, -2) + Qd
        return mean[cls], 0.5 * (cov + np.swapaxes(cov, -1, -2))[cls]

    # --- derivatives ------------------------------------------------------------------------

    def nll_and_grad(self, phi, mode: str) -> tuple[float, np.ndarray, str]:
        key = (np.asarray(phi, dtype=float).tobytes(), mode)
        if key not in self._cache:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))  # oldest first
            self._cache[key] = self._nll_and_grad(phi, mode)
        value, grad, kind = self._cache[key]
        return value, grad.copy(), kind

    def _nll_and_grad(self, phi, mode: str) -> tuple[float, np.ndarray, str]:
        sde, meas, fr = self.run_filter(phi)
        value = -float(np.sum(fr.log_likelihood))
        if mode != "numeric":
            score = self.score(phi, fr)
            if score is not None:
                return value, -score, "score"
            if mode == "score":
                raise ValueError(
                    "gradient='score' needs invertible Q_d, R and prior covariance "
                    "(Fisher's identity inverts them); use gradient='numeric' or 'auto'"
                )
        return value, self.numeric_grad(phi), "numeric"

    def numeric_grad(self, phi) -> np.ndarray:
        h = _MODEL_STEP * np.maximum(1.0, np.abs(phi))
        g = np.empty(phi.size)
        for i in range(phi.size):
            e = np.zeros(phi.size)
            e[i] = h[i]
            g[i] = (self.nll(phi + e) - self.nll(phi - e)) / (2 * h[i])
        return g

    def score(self, phi, fr) -> np.ndarray | None:
        """``d log L / d phi`` by Fisher's identity, or None where a covariance is singular.

        With ``e_k = x_k - F_k x_{k-1} - c_k`` (``F_k = e^{A h_k}``, ``c_k`` the offset, ``W_k =
        Q_d(h_k)^-1``), ``r_k = z_k - C x_k - b`` (``V = R^-1``), the prior ``N(mu0, S0)``
        (``U = S0^-1``) and ``E`` the smoothed expectation, each derivative ``d`` is

            sum_k 1/2 tr(dQ_k (W E[e e^T] W - W)) + tr(dF_k^T W E[e x_{k-1}^T]) + dc_k^T W E[e]
          + sum_obs 1/2 tr(dR (V E[r r^T] V - V)) + tr(dC^T V E[r x^T]) + db^T V E[r]
          + 1/2 tr(dS0 (U E[(x_0 - mu0)(.)^T] U - U)) + dmu0^T U E[x_0 - mu0],

        ``E[e e^T] = e_bar e_bar^T + P_k - F P_{k,k-1}^T - P_{k,k-1} F^T + F P_{k-1} F^T``,
        ``E[e x_{k-1}^T] = e_bar m_{k-1}^T + P_{k,k-1} - F P_{k-1}``, ``E[r r^T] = r_bar
        r_bar^T + C P_k C^T``, ``E[r x^T] = r_bar m_k^T - C P_k``, with smoothed means ``m``,
        covariances ``P`` and lag-one cross-covariances ``P_{k,k-1} = P_k (P-_k)^-1 F_k
        Pf_{k-1}`` (the RTS gain). The diffuse start is the prior ``N(P0 C^T V (z_0 - b),
        P0)``, ``P0 = (C^T V C)^-1``, with the first measurement's term left out, as in the
        filter; a fixed prior at an earlier time is carried to the first state, ``N(F mu + c,
        F S F^T + Q_d)`` per sequence (`propagated_prior`). The sums run over the distinct
        step sizes (the terms are linear in the expectations, which are summed per step size
        first) and over sequences.
        """
        sr = rts_smoother(fr)
        B, T, d = sr.means.shape
        group = fr.group
        G = sr.covs.shape[0]
        counts = np.bincount(group, minlength=G).astype(float)
        first = np.unique(group, return_index=True)[1]
        if T > 1:
            sizes, sid = _step_classes(np.diff(fr.times[first], axis=1))  # (S,), (G, T-1)
        else:
            sizes, sid = np.zeros(0), np.zeros((G, 0), dtype=int)
        n = phi.size
        base = self.pieces(phi, sizes)
        h = _MODEL_STEP * np.maximum(1.0, np.abs(phi))
        deriv = []
        for i in range(n):
            e = np.zeros(n)
            e[i] = h[i]
            deriv.append(
                _difference(self.pieces(phi + e, sizes), self.pieces(phi - e, sizes), h[i])
            )
        inverse = _inverses(base)
        if inverse is None:
            return None
        W, V, U = inverse

        m = sr.means
        Ps = sr.covs
        score = np.zeros(n)
        # --- transitions x_{k-1} -> x_k, k >= 1 ---------------------------------------------
        if T > 1:
            S = sizes.size
            F = base.Phi[sid]  # (G, T-1, d, d)
            Pk, Pk1 = Ps[:, 1:], Ps[:, :-1]
            # Cov(x_k, x_{k-1} | all z) = Ps_k (P-_k)^-1 F_k Pf_{k-1} (RTS gain transposed)
            cross = Pk @ np.linalg.solve(
                fr.pred_covs[:, 1:], fr.transition[:, 1:] @ fr.covs[:, :-1]
            )
            Ft = np.swapaxes(F, -1, -2)
            cov_e = Pk - F @ np.swapaxes(cross, -1, -2) - cross @ Ft + F @ Pk1 @ Ft
            labels_b = sid[group]  # (B, T-1)
            Fb = F[group]
            ebar = m[:, 1:] - np.einsum("btij,btj->bti", Fb, m[:, :-1]) - base.offset[labels_b]
            cw = counts[:, None, None, None]
            M = _sum_by(labels_b, ebar[..., :, None] * ebar[..., None, :], S)
            M += _sum_by(sid, cw * cov_e, S)
            X = _sum_by(labels_b, ebar[..., :, None] * m[:, :-1, None, :], S)
            X += _sum_by(sid, cw * (cross - F @ Pk1), S)
            E = _sum_by(labels_b, ebar, S)
            cnt = _sum_by(sid, np.broadcast_to(counts[:, None], sid.shape), S)
            WMW = W @ M @ W
            WX, WE = W @ X, np.einsum("sij,sj->si", W, E)
            for i, dv in enumerate(deriv):
                score[i] += 0.5 * np.sum(dv.Qd * (WMW - cnt[:, None, None] * W))
                score[i] += np.sum(dv.Phi * WX) + np.sum(dv.offset * WE)
        # --- measurements ---------------------------------------------------------------------
        meas = base.measurement
        C, bias = meas.C, meas.b
        observed = np.ones((B, T), dtype=bool) if self.mask is None else self.mask.copy()
        if self.prior == "diffuse":
            observed[:, 0] = False  # the first measurement is the diffuse start, no term
        zc = np.where(observed[..., None], np.nan_to_num(self.z), 0.0)
        r = np.where(observed[..., None], zc - m @ C.T - bias, 0.0)  # (B, T, k)
        gobs = observed[first]  # (G, T)
        SP = np.einsum("g,gt,gtij->ij", counts, gobs.astype(float), Ps)
        rows = r.reshape(-1, r.shape[-1])
        mrows = np.where(observed[..., None], m, 0.0).reshape(-1, d)
        Mr = rows.T @ rows + C @ SP @ C.T
        Xr = rows.T @ mrows - C @ SP
        Er = rows.sum(axis=0)
        nr = float(observed.sum())
        VMV, VX, VE = V @ Mr @ V, V @ Xr, V @ Er
        for i, dv in enumerate(deriv):
            score[i] += 0.5 * np.sum(dv.R * (VMV - nr * V))
            score[i] += np.sum(dv.C * VX) + np.sum(dv.b * VE)
        # --- prior on x_0 -------------------------------------------------------------------
        if U is not None and U.ndim == 2:  # one prior covariance for all sequences
            dev = m[:, 0] - base.prior_mean
            M0 = dev.T @ dev + np.einsum("g,gij->ij", counts, Ps[:, 0])
            UMU = U @ M0 @ U
            Udev = dev @ U
            for i, dv in enumerate(deriv):
                score[i] += 0.5 * np.sum(dv.prior_cov * (UMU - B * U))
                score[i] += np.sum(np.broadcast_to(dv.prior_mean, dev.shape) * Udev)
        elif U is not None:  # per sequence (a prior carried from its own time): U (B, d, d)
            dev = m[:, 0] - base.prior_mean
            M0 = dev[:, :, None] * dev[:, None, :] + Ps[group, 0]
            core = U @ M0 @ U - U
            Udev = np.einsum("bij,bj->bi", U, dev)
            for i, dv in enumerate(deriv):
                score[i] += 0.5 * np.sum(dv.prior_cov * core)
                score[i] += np.sum(dv.prior_mean * Udev)
        return score


class _Derivative(NamedTuple):
    Phi: np.ndarray
    offset: np.ndarray
    Qd: np.ndarray
    C: np.ndarray
    b: np.ndarray
    R: np.ndarray
    prior_mean: np.ndarray | None
    prior_cov: np.ndarray | None


def _difference(plus: _Pieces, minus: _Pieces, h: float) -> _Derivative:
    def diff(a, b):
        return None if a is None else (a - b) / (2.0 * h)

    mp, mm = plus.measurement, minus.measurement
    return _Derivative(
        diff(plus.Phi, minus.Phi),
        diff(plus.offset, minus.offset),
        diff(plus.Qd, minus.Qd),
        diff(mp.C, mm.C),
        diff(mp.b, mm.b),
        diff(mp.R, mm.R),
        diff(plus.prior_mean, minus.prior_mean),
        diff(plus.prior_cov, minus.prior_cov),
    )


def _inv_spd(M: np.ndarray) -> np.ndarray | None:
    """Inverse of a stack of SPD matrices, or None if one is (numerically) singular."""
    if M.size == 0:
        return M.copy()
    eigs = np.linalg.eigvalsh(M)
    if np.any(eigs[..., 0] <= _SINGULAR_RTOL * np.abs(eigs[..., -1])):
        return None
    inv = np.linalg.inv(M)
    return 0.5 * (inv + np.swapaxes(inv, -1, -2))


def _inverses(base: _Pieces):
    W = _inv_spd(base.Qd)
    V = _inv_spd(base.measurement.R)
    U = None if base.prior_cov is None else _inv_spd(base.prior_cov)
    if W is None or V is None or (base.prior_cov is not None and U is None):
        return None
    return W, V, U


# Time stamps such as k * 0.1 give steps that differ in their last bits; steps within this
# relative gap (a few hundred ulps) share one transition, as in the filter.
_STEP_RTOL = 1e-13


def _step_classes(steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct step sizes (clustered within `_STEP_RTOL`) and each step's class (same shape)."""
    sizes = np.unique(steps)
    if sizes.size > 1:
        new = np.concatenate([[True], np.diff(sizes) > _STEP_RTOL * sizes[1:]])
        sizes = sizes[new]
    classes = np.searchsorted(sizes, steps * (1 + _STEP_RTOL), side="right") - 1
    return sizes, np.clip(classes, 0, None)


def _sum_by(labels: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Sum of ``values`` (labels.shape + tail) over entries with equal label -> (size,) + tail."""
    tail = values.shape[labels.ndim :]
    if size == 1:
        return values.reshape(-1, *tail).sum(axis=0)[None]
    out = np.zeros((size, *tail))
    np.add.at(out, labels.ravel(), values.reshape(-1, *tail))
    return out


def _stationary(sde: LinearSDE, *, check: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Stationary law ``N(-A^-1 u, P)``, ``A P + P A^T + Q = 0`` (needs a Hurwitz A)."""
    growth = float(np.max(np.linalg.eigvals(sde.A).real)) if check else -1.0
    if growth >= 0:
        raise ValueError(
            f"prior='stationary' needs a stable A (every eigenvalue's real part < 0); the "
            f"largest real part is {growth:.4g}"
        )
    P = solve_continuous_lyapunov(sde.A, -sde.Q)
    return -np.linalg.solve(sde.A, sde.u), 0.5 * (P + P.T)


def _diffuse_prior(meas: LinearMeasurement, z0: np.ndarray):
    """The diffuse start as a prior: ``N(P0 C^T R^-1 (z_0 - b), P0)``, ``P0 = (C^T R^-1 C)^-1``.

    Returns (B, d) means (one per sequence) and P0 (d, d); None, None if R or C^T R^-1 C is
    singular (the filter itself rejects that input).
    """
    C, R = meas.C, meas.R
    try:
        Rinv_C = np.linalg.solve(R, C)
        P0 = np.linalg.inv(C.T @ Rinv_C)
    except np.linalg.LinAlgError:
        return None, None
    P0 = 0.5 * (P0 + P0.T)
    return (np.nan_to_num(z0) - meas.b) @ Rinv_C @ P0, P0


# --------------------------------------------------------------------------------------------
# fit
# --------------------------------------------------------------------------------------------


def _as_family(family, theta0):
    if isinstance(family, (IsotropicFamily, OUFamily, CustomFamily)):
        return family
    if all(hasattr(family, a) for a in ("build", "constraints", "names")):
        return family
    if callable(family):
        n = np.size(theta0)
        return CustomFamily(family, ("real",) * n)
    raise TypeError(
        "family must be an IsotropicFamily, OUFamily, CustomFamily or a callable "
        f"theta -> (LinearSDE, LinearMeasurement); got {type(family).__name__}"
    )


def _check_theta0(theta0, family, label: str = "theta0") -> np.ndarray:
    names, cons = tuple(family.names), tuple(family.constraints)
    theta0 = validation.vector(label, theta0)
    if theta0.size != len(cons):
        raise ValueError(
            f"{label} must have {len(cons)} entries ({', '.join(names)}), got {theta0.size}"
        )
    for i, (name, kind, value) in enumerate(zip(names, cons, theta0, strict=True)):
        if kind == "positive" and not value > 0:
            raise ValueError(
                f"{label}[{i}] ({name}) must be > 0 (a positive parameter), got {value:g}"
            )
        if kind == "negative" and not value < 0:
            raise ValueError(
                f"{label}[{i}] ({name}) must be < 0 (a negative parameter), got {value:g}"
            )
    return theta0


def _check_data(z, mask, prior):
    try:
        z = np.asarray(z, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"z must be a numeric array, got {type(z).__name__}") from exc
    if z.ndim == 2:
        z = z[None]
        if mask is not None:
            mask = np.asarray(mask)[None] if np.ndim(mask) == 1 else mask
    if z.ndim != 3:
        raise ValueError(f"z must have shape (B, T, k) or (T, k), got {np.shape(z)}")
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise TypeError(f"mask must be boolean (True = observed), got dtype {mask.dtype}")
        if mask.shape != z.shape[:2]:
            raise ValueError(f"mask must have shape {z.shape[:2]}, got {mask.shape}")
    if isinstance(prior, GaussianPrior):
        if prior.cov is None:
            prior = "diffuse"
    elif prior not in PRIORS:
        raise ValueError(f"prior must be 'diffuse', 'stationary' or a GaussianPrior; got {prior!r}")
    return z, mask, prior


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
    unconstrained ``phi`` (module docstring), the objective scaled by ``1 / n_obs`` so that
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
    mask : (B, T) bool, True where observed; default all observed.
    prior : ``"diffuse"`` (the first measurement fixes the state; needs C of full column rank
        and invertible R; biased for many short sequences that start from a proper law: see
        the module docstring), ``"stationary"`` (the stationary law of the current parameters,
        which then also informs the fit; needs a stable A) or a fixed `GaussianPrior` (the law
        of the state at its ``time``, carried by the model to each sequence's first state
        time, or at that first time when ``time`` is None).
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
    family = _as_family(family, theta0)
    theta0 = _check_theta0(theta0, family)
    validation.choice("gradient", gradient, GRADIENTS)
    gtol = validation.scalar("gtol", gtol, minimum=0.0, strict=True)
    max_iter = validation.count("max_iter", max_iter)
    hessian_step = validation.scalar("hessian_step", hessian_step, minimum=0.0, strict=True)
    step_tol = validation.scalar("step_tol", step_tol, minimum=0.0, strict=True)
    z, mask, prior = _check_data(z, mask, prior)
    problem = _Problem(family, z, t, mask, prior)
    phi0 = to_unconstrained(theta0, family.constraints)

    # Validates z, t and mask against the model at theta0 (the errors name them).
    meas0 = problem.model(phi0)[1]
    kind0 = problem.nll_and_grad(phi0, gradient)[2]
    B, T = z.shape[:2]
    observed = np.ones((B, T), dtype=bool) if mask is None else mask.copy()
    if prior == "diffuse":
        observed[:, 0] = False
    n_obs = int(observed.sum()) * meas0.out_dim
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


def _hessian(problem: _Problem, phi: np.ndarray, kind: str, step: float) -> np.ndarray:
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
        return 0.5 * (H + H.T)
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
    lam, V = np.linalg.eigh(0.5 * (H + H.T))
    top = float(np.max(np.abs(lam)))
    if top == 0.0:
        return np.eye(H.shape[0])
    floor = max(1e-6 * top, float(np.linalg.norm(grad)) / _MAX_FIRST_STEP)
    lam = np.maximum(np.abs(lam), floor)
    inv = (V / lam) @ V.T
    return 0.5 * (inv + inv.T)


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
    family = _as_family(family, theta)
    theta = _check_theta0(theta, family, "theta")
    z, mask, prior = _check_data(z, mask, prior)
    problem = _Problem(family, z, t, mask, prior)
    return -problem.nll(to_unconstrained(theta, family.constraints))


def score(family, theta, z, t, *, mask=None, prior="diffuse") -> np.ndarray:
    """``d log L / d phi`` (n,) at ``theta`` by Fisher's identity, in unconstrained coordinates.

    Needs invertible ``Q_d``, ``R`` and prior covariance; raises ValueError otherwise.
    """
    family = _as_family(family, theta)
    theta = _check_theta0(theta, family, "theta")
    z, mask, prior = _check_data(z, mask, prior)
    problem = _Problem(family, z, t, mask, prior)
    return -problem.nll_and_grad(to_unconstrained(theta, family.constraints), "score")[1]

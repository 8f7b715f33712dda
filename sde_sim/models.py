"""What the simulator integrates: linear and radial-tangential SDEs, measurements, initial states.

All arrays are float64 and read-only once a record is built. Batched states have shape
``(P, d)`` (paths on rows); the papers write states as columns, so ``A x`` there is
``x @ A.T`` here.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import expm

from sde_sim import validation
from sde_sim._record import Record, register


class UnstableSystemWarning(UserWarning):
    """The drift has an eigenvalue with positive real part: paths grow without bound."""


# An eigenvalue counts as unstable when its real part exceeds this multiple of ||A||: the
# eigenvalues of a skew (purely rotational) generator come back with round-off real parts.
_STABILITY_RTOL = 1e-10


def _warn_if_unstable(name: str, growth_rate: float, scale: float) -> None:
    if growth_rate > _STABILITY_RTOL * max(1.0, scale):
        warnings.warn(
            f"{name} is unstable (largest real part of its eigenvalues is {growth_rate:.4g}); "
            "paths will grow without bound",
            UnstableSystemWarning,
            stacklevel=4,
        )


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


# --------------------------------------------------------------------------------------------
# Linear SDE and linear measurement (seed 000 sections 2.1, 3.9, 3.10)
# --------------------------------------------------------------------------------------------


@register
@dataclass(frozen=True, eq=False)
class LinearSDE(Record):
    """Linear Ito SDE ``dx = (A x + u) dt + G dw``, ``Q = G G^T`` (seed 000 sections 2.1, 3.9).

    Parameters
    ----------
    A : (d, d) real drift matrix; any real matrix (an unstable one is warned about).
    G : (d, m) real diffusion matrix driving an m-dimensional standard Wiener process.
    u : (d,) constant drift (the inhomogeneous case of seed 000 section 3.9); default zero.
    """

    A: np.ndarray
    G: np.ndarray
    u: np.ndarray | None = None

    def __post_init__(self) -> None:
        A = validation.square_matrix("A", self.A)
        d = A.shape[0]
        G = validation.real_array("G", self.G, ndim=2)
        if G.shape[0] != d:
            raise ValueError(f"G must have {d} rows (one per state of A), got shape {G.shape}")
        u = np.zeros(d) if self.u is None else validation.vector("u", self.u, d)
        for name, arr in (("A", A), ("G", G), ("u", u)):
            _set(self, name, validation.readonly(arr))
        if d:
            growth = float(np.max(np.linalg.eigvals(A).real))
            _warn_if_unstable("A", growth, float(np.linalg.norm(A)))

    @classmethod
    def from_covariance(cls, A, Q, u=None) -> LinearSDE:
        """Build from the process-noise covariance ``Q`` (any PSD factor gives the same law)."""
        A = validation.square_matrix("A", A)
        Q = validation.covariance("Q", Q, A.shape[0])
        return cls(A, validation.psd_factor(Q), u)

    @property
    def dim(self) -> int:
        return self.A.shape[0]

    @property
    def noise_dim(self) -> int:
        return self.G.shape[1]

    @property
    def Q(self) -> np.ndarray:
        """Process-noise covariance ``G G^T``, (d, d)."""
        return self.G @ self.G.T

    def drift(self, t: float, x: np.ndarray) -> np.ndarray:
        """``A x + u`` for a batch ``x`` of shape (P, d)."""
        return x @ self.A.T + self.u

    def diffusion(self, t: float, x: np.ndarray, dW: np.ndarray) -> np.ndarray:
        """``G dW`` for increments ``dW`` of shape (P, m); returns (P, d)."""
        return dW @ self.G.T


@register
@dataclass(frozen=True, eq=False)
class LinearMeasurement(Record):
    """``z(t_k) = C x(t_k + delay) + b + v``, ``v ~ N(0, R)`` (seed 000 sections 2.1, 3.10).

    Parameters
    ----------
    C : (k, d) measurement matrix.
    R : (k, k) PSD measurement-noise covariance.
    b : (k,) measurement bias; default zero.
    delay : the measurement at ``t_k`` sees the state at ``t_k + delay`` (phi_t in 3.10).
    """

    C: np.ndarray
    R: np.ndarray
    b: np.ndarray | None = None
    delay: float = 0.0
    _noise_factor: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        C = validation.real_array("C", self.C, ndim=2)
        R = validation.covariance("R", self.R, C.shape[0])
        b = np.zeros(C.shape[0]) if self.b is None else validation.vector("b", self.b, C.shape[0])
        for name, arr in (("C", C), ("R", R), ("b", b)):
            _set(self, name, validation.readonly(arr))
        _set(self, "delay", validation.scalar("delay", self.delay))
        _set(self, "_noise_factor", validation.readonly(validation.psd_factor(R)))

    @classmethod
    def identity(cls, dim: int, variance: float, **kwargs) -> LinearMeasurement:
        """``C = I``, ``R = variance * I`` (the isotropic measurement of seed 000 section 3.6)."""
        dim = validation.count("dim", dim)
        variance = validation.scalar("variance", variance, minimum=0.0)
        return cls(np.eye(dim), variance * np.eye(dim), **kwargs)

    @property
    def dim(self) -> int:
        """Dimension of the state the measurement reads."""
        return self.C.shape[1]

    @property
    def out_dim(self) -> int:
        return self.C.shape[0]

    def observe(self, x: np.ndarray, xi: np.ndarray) -> np.ndarray:
        """Measurements of states ``x`` (..., d) given standard normal draws ``xi`` (..., k)."""
        return x @ self.C.T + self.b + xi @ self._noise_factor.T


# --------------------------------------------------------------------------------------------
# Constructors from eigen-data (seed 000 sections 2.2, 3.6, A.3; seed 004 A.1)
# --------------------------------------------------------------------------------------------

# |Im| of a product S Lambda S^-1 that should be real, relative to its size: round-off only.
_REAL_RTOL = 1e-10


def _real_part_checked(name: str, product: np.ndarray, hint: str) -> np.ndarray:
    scale = max(1.0, float(np.max(np.abs(product), initial=0.0)))
    imag = float(np.max(np.abs(product.imag), initial=0.0))
    if imag > _REAL_RTOL * scale:
        raise ValueError(
            f"the eigen-data do not give a real {name} (max |Im {name}| = {imag:.3g}): {hint}"
        )
    return np.ascontiguousarray(product.real)


def real_from_eigen(eigenvalues, S, *, name: str = "A") -> np.ndarray:
    """The real matrix ``S diag(eigenvalues) S^-1`` (seed 000 sections 2.2, 4.2).

    Parameters
    ----------
    eigenvalues : (d,) complex eigenvalues; complex ones must come in conjugate pairs.
    S : (d, d) complex invertible matrix whose columns are the eigenvectors; the column of a
        conjugate eigenvalue must be the conjugate column.

    Raises
    ------
    ValueError
        If `S` is singular or the product is not real (eigenvalues not closed under conjugation,
        or columns not paired with their conjugates).
    """
    S = validation.invertible("S", S)
    lam = validation.complex_array("eigenvalues", eigenvalues, ndim=1)
    if lam.shape != (S.shape[0],):
        raise ValueError(f"eigenvalues must have shape ({S.shape[0]},), got {lam.shape}")
    product = (S * lam) @ np.linalg.inv(S)
    hint = (
        "complex eigenvalues must come in conjugate pairs whose columns of S are "
        "complex conjugates of each other"
    )
    return _real_part_checked(name, product, hint)


def covariance_from_eigen(S, variances, *, name: str = "Q") -> np.ndarray:
    """The real PSD covariance ``S diag(variances) S^H`` (seed 000 A.3, seed 004 A.1).

    A covariance of this form is simultaneously diagonalised with ``A = S Lambda S^-1``, which
    is what the papers' closed forms assume. It is real only when conjugate columns of `S` carry
    equal variances.
    """
    S = validation.complex_array("S", S, ndim=2)
    if S.shape[0] != S.shape[1] or not S.size:
        raise ValueError(f"S must be a non-empty square matrix, got shape {S.shape}")
    lam = validation.nonnegative(f"variances of {name}", variances)
    if lam.shape != (S.shape[0],):
        raise ValueError(f"variances of {name} must have shape ({S.shape[0]},), got {lam.shape}")
    product = (S * lam) @ S.conj().T
    hint = "conjugate columns of S must carry equal variances"
    return validation.covariance(name, _real_part_checked(name, product, hint))


def skew_from_vector(omega) -> np.ndarray:
    """3-D cross-product generator ``[omega]_x``: rotation about ``omega`` at ``|omega|`` rad/s."""
    w = validation.vector("omega", omega, 3)
    return np.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def rotation_generator(frequencies) -> np.ndarray:
    """Block-diagonal skew generator, 2x2 blocks ``[[0, -w], [w, 0]]`` (RoPE pairs); (2k, 2k)."""
    w = validation.vector("frequencies", frequencies)
    out = np.zeros((2 * w.size, 2 * w.size))
    for k, wk in enumerate(w):
        out[2 * k, 2 * k + 1] = -wk
        out[2 * k + 1, 2 * k] = wk
    return out


def skew_matrix(name: str, value, dim: int | None = None) -> np.ndarray:
    """Validate a real skew-symmetric matrix (returned exactly skew)."""
    arr = validation.square_matrix(name, value, dim)
    gap = float(np.max(np.abs(arr + arr.T), initial=0.0))
    if gap > 1e-12 * max(1.0, float(np.max(np.abs(arr), initial=0.0))):
        raise ValueError(
            f"{name} must be skew-symmetric ({name}^T = -{name}); "
            f"max |{name} + {name}^T| = {gap:.3g}"
        )
    return 0.5 * (arr - arr.T)


def isotropic_sde(alpha: float, Omega, sigma2: float, u=None) -> LinearSDE:
    """The isotropic family ``A = alpha I + Omega``, ``Q = sigma2 I`` (seed 000 sections 3.6, 5.1).

    Parameters
    ----------
    alpha : real part shared by every eigenvalue (negative: decay).
    Omega : (d, d) real skew-symmetric rotation generator, any d (3-D included).
    sigma2 : process-noise variance per coordinate.
    """
    alpha = validation.scalar("alpha", alpha)
    Omega = skew_matrix("Omega", Omega)
    sigma2 = validation.scalar("sigma2", sigma2, minimum=0.0)
    d = Omega.shape[0]
    return LinearSDE(alpha * np.eye(d) + Omega, np.sqrt(sigma2) * np.eye(d), u)


# --------------------------------------------------------------------------------------------
# Radial-tangential SDE (seed 000 section 5.1; seed 003 eq. 3 and its digest, section 3)
# --------------------------------------------------------------------------------------------

RT_MODES = ("literal", "frozen-frame")


def unit_rows(x: np.ndarray) -> np.ndarray:
    """``x / |x|`` row-wise; a zero row maps to zero (its direction is undefined).

    The origin is reached with probability zero in continuous time, but a discretised path can
    land on it; a zero direction there makes both projectors act as ``P_R = 0, P_T = I``.
    """
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def radial_tangential_split(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(P_R(u) v, P_T(u) v)`` with ``P_R = u u^T``, ``P_T = I - u u^T``, row-wise."""
    radial = np.sum(u * v, axis=-1, keepdims=True) * u
    return radial, v - radial


@register
@dataclass(frozen=True, eq=False)
class RadialTangentialSDE(Record):
    """Radial-tangential SDE in real eigen-coordinates ``x_s`` (seed 003 eq. 3, seed 000 5.1).

    ``dx_s = (-mu_r P_R(u) - mu_t P_T(u) + Omega) x_s dt + sigma_r P_R(u) dw + sigma_t P_T(u) dw``
    with ``P_R(u) = u u^T`` and ``P_T(u) = I - u u^T``. The ambient state is ``x = basis @ x_s``.
    One d-dimensional Wiener process drives both parts: ``P_R dw`` and ``P_T dw`` are
    independent, so this equals the papers' separate ``dw_r`` and ``dw_t`` in law.

    Two readings of ``u`` (seed 003 digest, sections 3 and 8.1):

    * ``"literal"``: ``u = x_s / |x_s|``, the current state's direction. Then ``P_T(u) x_s = 0``
      identically, the drift is exactly ``(-mu_r I + Omega) x_s`` and ``mu_t`` has no effect;
      tangential noise adds the Ito drift ``(d-1) sigma_t^2 / (2|x_s|)`` to the magnitude.
    * ``"frozen-frame"``: ``u(t) = exp(Omega (t - t0)) u0`` is the nominal direction carried by
      the rotation from ``u0 = x_s(t0) / |x_s(t0)|``. The SDE is then linear time-varying,
      ``mu_t`` sets the tangential decay, and seed 003 Proposition 1 is exact for it.

    Parameters
    ----------
    Omega : (d, d) real skew-symmetric generator (d >= 2; in 3-D, ``skew_from_vector``).
    mu_r, mu_t : radial and tangential decay rates (negative mu_r: growth, warned about).
    sigma_r, sigma_t : radial and tangential noise scales, >= 0.
    mode : ``"literal"`` or ``"frozen-frame"``.
    basis : (d, d) real invertible map from eigen-coordinates to ambient ones; default I.
    """

    Omega: np.ndarray
    mu_r: float
    mu_t: float
    sigma_r: float
    sigma_t: float
    mode: str = "literal"
    basis: np.ndarray | None = None

    def __post_init__(self) -> None:
        Omega = skew_matrix("Omega", self.Omega)
        d = Omega.shape[0]
        if d < 2:
            raise ValueError(f"Omega must be at least 2x2 for a radial-tangential split, got {d}")
        basis = np.eye(d)
        if self.basis is not None:
            basis = validation.square_matrix("basis", self.basis, d)
        validation.invertible("basis", basis)
        _set(self, "Omega", validation.readonly(Omega))
        _set(self, "basis", validation.readonly(basis))
        for name in ("mu_r", "mu_t"):
            _set(self, name, validation.scalar(name, getattr(self, name)))
        for name in ("sigma_r", "sigma_t"):
            _set(self, name, validation.scalar(name, getattr(self, name), minimum=0.0))
        validation.choice("mode", self.mode, RT_MODES)
        _warn_if_unstable("the radial decay (mu_r < 0)", -self.mu_r, 1.0)

    @property
    def dim(self) -> int:
        return self.Omega.shape[0]

    @property
    def noise_dim(self) -> int:
        return self.dim

    def with_mode(self, mode: str) -> RadialTangentialSDE:
        return dataclasses.replace(self, mode=mode)

    def drift(self, t: float, x: np.ndarray) -> np.ndarray:
        """Literal-mode drift ``(-mu_r I + Omega) x`` for a batch ``x`` (P, d).

        This is ``(-mu_r P_R - mu_t P_T + Omega) x`` with ``P_T(x/|x|) x = 0`` used exactly.
        """
        return x @ self.Omega.T - self.mu_r * x

    def diffusion(self, t: float, x: np.ndarray, dW: np.ndarray) -> np.ndarray:
        """Literal-mode ``sigma_r P_R(u) dW + sigma_t P_T(u) dW`` with ``u = x/|x|``; (P, d)."""
        radial, tangential = radial_tangential_split(unit_rows(x), dW)
        return self.sigma_r * radial + self.sigma_t * tangential

    def frozen_frame(self, t0: float, u0: np.ndarray) -> FrozenFrameRT:
        """The linear time-varying system of the frozen-frame reading, anchored at ``(t0, u0)``."""
        return FrozenFrameRT(self, float(t0), unit_rows(np.asarray(u0, dtype=float)))


class FrozenFrameRT:
    """Frozen-frame RT-SDE: ``u(t) = exp(Omega (t - t0)) u0`` per path, a linear time-varying SDE.

    Drift ``A(t) x = (-mu_r P_R(u(t)) - mu_t P_T(u(t)) + Omega) x`` and diffusion
    ``sigma_r P_R(u(t)) + sigma_t P_T(u(t))``; ``u0`` has shape (P, d), one frame per path.
    """

    def __init__(self, sde: RadialTangentialSDE, t0: float, u0: np.ndarray) -> None:
        self.sde, self.t0, self.u0 = sde, t0, u0
        self.dim = self.noise_dim = sde.dim
        self._last: tuple[float, np.ndarray] | None = None

    def direction(self, t: float) -> np.ndarray:
        """Nominal direction ``u(t)`` of every path, (P, d)."""
        if self._last is None or self._last[0] != t:
            self._last = (t, self.u0 @ expm(self.sde.Omega * (t - self.t0)).T)
        return self._last[1]

    def drift(self, t: float, x: np.ndarray) -> np.ndarray:
        s = self.sde
        radial, tangential = radial_tangential_split(self.direction(t), x)
        return -s.mu_r * radial - s.mu_t * tangential + x @ s.Omega.T

    def diffusion(self, t: float, x: np.ndarray, dW: np.ndarray) -> np.ndarray:
        s = self.sde
        radial, tangential = radial_tangential_split(self.direction(t), dW)
        return s.sigma_r * radial + s.sigma_t * tangential


RT_MEASUREMENT_MODELS = ("additive", "geodesic")


@register
@dataclass(frozen=True, eq=False)
class RadialTangentialMeasurement(Record):
    """Radial-tangential measurement noise in eigen-coordinates (seed 000 5.1, seed 003 3.2).

    * ``"additive"``: ``z_s = x_s + v_r u + P_T(u) v_t`` with ``v_r ~ N(0, eta_r^2)`` and
      ``v_t ~ N(0, eta_t^2 I)``: covariance ``eta_r^2 P_R(u) + eta_t^2 P_T(u)``. The frame ``u``
      is the state's direction (literal mode) or the nominal frame (frozen-frame mode).
    * ``"geodesic"``: ``z_s = (m + v_r) exp_u(P_T(u) v_t / m)`` with ``m = |x_s|`` and the
      spherical exponential map ``exp_u(v) = cos|v| u + sin|v| v/|v|`` (seed 000 section 5.1),
      around the state's own direction. The measured direction then lies exactly on the sphere.

    The ambient measurement is ``z = basis @ z_s``.
    """

    eta_r: float
    eta_t: float
    model: str = "additive"

    def __post_init__(self) -> None:
        for name in ("eta_r", "eta_t"):
            _set(self, name, validation.scalar(name, getattr(self, name), minimum=0.0))
        validation.choice("model", self.model, RT_MEASUREMENT_MODELS)

    def observe(self, x_s: np.ndarray, frame: np.ndarray, xi: np.ndarray) -> np.ndarray:
        """Measurements in eigen-coordinates of states ``x_s`` (..., d).

        ``frame`` (..., d) is the unit direction defining the radial axis for the additive
        model; ``xi`` (..., d) are standard normal draws.
        """
        if self.model == "additive":
            radial, tangential = radial_tangential_split(frame, xi)
            return x_s + self.eta_r * radial + self.eta_t * tangential
        u = unit_rows(x_s)
        m = np.linalg.norm(x_s, axis=-1, keepdims=True)
        radial, tangential = radial_tangential_split(u, xi)
        v_r = np.sum(radial * u, axis=-1, keepdims=True)
        step = np.divide(self.eta_t * tangential, m, out=np.zeros_like(tangential), where=m > 0)
        return (m + self.eta_r * v_r) * spherical_exp(u, step)


def spherical_exp(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Spherical exponential map ``cos|v| u + sin|v| v/|v|`` for tangent ``v`` at unit ``u``."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    # sin(n)/n -> 1 as n -> 0: np.sinc(x) = sin(pi x)/(pi x) is the stable form.
    return np.cos(n) * u + np.sinc(n / np.pi) * v


# --------------------------------------------------------------------------------------------
# Initial states
# --------------------------------------------------------------------------------------------


@register
@dataclass(frozen=True, eq=False)
class GaussianInitial(Record):
    """``x0 ~ N(mean, cov)`` per path; ``cov=None`` gives the fixed state ``mean``."""

    mean: np.ndarray
    cov: np.ndarray | None = None
    _factor: np.ndarray | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        mean = validation.vector("mean", self.mean)
        _set(self, "mean", validation.readonly(mean))
        if self.cov is None:
            _set(self, "_factor", None)
        else:
            cov = validation.covariance("cov", self.cov, mean.size)
            _set(self, "cov", validation.readonly(cov))
            _set(self, "_factor", validation.psd_factor(cov))

    @property
    def dim(self) -> int:
        return self.mean.size

    def sample(self, rng: np.random.Generator, n_paths: int) -> np.ndarray:
        """(n_paths, d) initial states."""
        if self._factor is None:
            return np.tile(self.mean, (n_paths, 1))
        return self.mean + rng.standard_normal((n_paths, self.dim)) @ self._factor.T


@register
@dataclass(frozen=True)
class SphericalShellInitial(Record):
    """``x0 = r w`` with ``w`` uniform on the unit sphere in R^dim and ``r ~ U[r_min, r_max]``."""

    dim: int
    r_min: float
    r_max: float

    def __post_init__(self) -> None:
        validation.count("dim", self.dim, minimum=1)
        validation.scalar("r_min", self.r_min, minimum=0.0)
        if validation.scalar("r_max", self.r_max) < self.r_min:
            raise ValueError(f"r_max must be >= r_min ({self.r_min:g}), got {self.r_max:g}")

    def sample(self, rng: np.random.Generator, n_paths: int) -> np.ndarray:
        w = unit_rows(rng.standard_normal((n_paths, self.dim)))
        r = rng.uniform(self.r_min, self.r_max, size=(n_paths, 1))
        return r * w

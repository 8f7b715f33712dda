"""Model families of the parameter MLE (`estimators.fit`) and their parameterisation.

A family maps a parameter vector ``theta`` (n,) to a model ``(sde, measurement)``: a
`sde_sim.LinearSDE` ``dx = (A x + u) dt + G dw`` and a `sde_sim.LinearMeasurement`
``z = C x + b + v``, ``v ~ N(0, R)`` (seed 000 section 2.1), and declares a constraint per
parameter. Families: `IsotropicFamily` (seed 000 section 3.6), `OUFamily` (seed 001 eqs.
(7)-(8)) and `CustomFamily` (any ``params -> (sde, measurement)``); `as_family` also takes any
object with ``build``, ``constraints`` and ``names``, or a plain callable.

Parameterisation. The optimiser works on unconstrained coordinates ``phi``, one per parameter:
a ``"real"`` parameter is ``theta = phi``, a ``"positive"`` one ``theta = exp(phi)`` and a
``"negative"`` one ``theta = -exp(phi)`` (`to_unconstrained`, `from_unconstrained`). (The
suite's default map for positive parameters is softplus; here log is used because the
likelihood of a variance or a rate is much closer to quadratic in its logarithm, which is what
the Hessian-based standard errors assume, and because ``d theta / d phi = theta`` makes the
delta method exact to first order and easy to read: `_jacobian_diag`.)

The names are public as ``estimators.fit.<name>``, the entry point of the parameter MLE.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sde_sim import LinearMeasurement, LinearSDE, validation
from sde_sim.models import rotation_generator, skew_from_vector

CONSTRAINTS = ("real", "positive", "negative")
ROTATIONS = ("rope", "vector", "none")
NOISES = ("shared", "per-channel")

# --------------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------------


def _fixed_C(C, d: int) -> np.ndarray:
    """The fixed measurement matrix of a family: (k, d), default ``I``."""
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
# Checks
# --------------------------------------------------------------------------------------------


def as_family(family, theta0):
    """``family`` as a family: one of ours, any object with ``build``, ``constraints`` and
    ``names``, or a callable ``theta -> (LinearSDE, LinearMeasurement)`` (then every one of the
    ``size(theta0)`` parameters is real)."""
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


def check_theta(theta0, family, label: str = "theta0") -> np.ndarray:
    """``theta0`` as a float vector (n,) of the family's length that meets its constraints."""
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

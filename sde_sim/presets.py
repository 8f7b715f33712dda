"""Named systems from the papers, each with the seed and section its numbers come from.

A preset has one or more variants (a figure's panels, a damping regime); each variant builds a
`Scenario`. Parameters the seeds leave open are chosen here and say so in the variant's summary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sde_sim.models import (
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    SphericalShellInitial,
    isotropic_sde,
    real_from_eigen,
    skew_from_vector,
)
from sde_sim.observe import EveryKSteps, FixedTimes
from sde_sim.scenario import Scenario


@dataclass(frozen=True)
class Variant:
    name: str
    summary: str
    build: Callable[[], Scenario]


@dataclass(frozen=True)
class Preset:
    """A named system: `summary` (one line), `source` (seed and section), its variants."""

    name: str
    summary: str
    source: str
    variants: tuple[Variant, ...]

    @property
    def default_variant(self) -> str:
        return self.variants[0].name

    def variant(self, name: str | None = None) -> Variant:
        name = self.default_variant if name is None else name
        for v in self.variants:
            if v.name == name:
                return v
        known = ", ".join(v.name for v in self.variants)
        raise ValueError(f"unknown variant {name!r} of {self.name}; known: {known}")

    def scenario(self, variant: str | None = None) -> Scenario:
        return self.variant(variant).build()


# --- afa-2d: seed 000 section 4.2 --------------------------------------------------------------

AFA_EIGENVALUES = np.array([-0.1 - 1j, -0.1 + 1j])
AFA_BASIS = np.array([[1 - 1j, 1 + 1j], [1, 1]])


def _afa_2d(sigma2: float, eta2: float) -> Callable[[], Scenario]:
    def build() -> Scenario:
        A = real_from_eigen(AFA_EIGENVALUES, AFA_BASIS)
        return Scenario(
            system=LinearSDE(A, np.sqrt(sigma2) * np.eye(2)),
            measurement=LinearMeasurement.identity(2, eta2),
            # "a random initial condition": radius U[17, 23], uniform angle, as in the public
            # AFA demo code; the seed gives no distribution.
            initial=SphericalShellInitial(2, 17.0, 23.0),
            dt=0.01,
            n_steps=1000,
            observations=EveryKSteps(10),
        )

    return build


# --- rotation-3d: seed 000 sections 3.6 and 5.1 -----------------------------------------------


def _rotation_3d() -> Scenario:
    axis = np.array([1.0, 2.0, 2.0]) / 3.0
    return Scenario(
        system=isotropic_sde(-0.1, skew_from_vector(1.0 * axis), 0.1),
        measurement=LinearMeasurement.identity(3, 0.25),
        initial=SphericalShellInitial(3, 4.0, 6.0),
        dt=0.01,
        n_steps=1500,
        observations=EveryKSteps(10),
    )


# --- rt-sphere-3d: seed 003 Fig. 1 --------------------------------------------------------------

RT_SIGMA_T = 0.3


def _rt_sphere(rotation: float) -> Callable[[], Scenario]:
    def build() -> Scenario:
        # mu_r = (d-1) sigma_t^2 / (2 m0^2) with m0 = 1 balances the Ito drift of tangential
        # noise, so with sigma_r = 0 the magnitude stays at 1: a random walk on the unit sphere
        # (seed 003 digest, C6).
        mu = (3 - 1) * RT_SIGMA_T**2 / 2.0
        axis = np.array([0.0, 0.3, 1.0]) / np.hypot(0.3, 1.0)
        return Scenario(
            system=RadialTangentialSDE(
                skew_from_vector(rotation * axis),
                mu_r=mu,
                mu_t=mu,
                sigma_r=0.0,
                sigma_t=RT_SIGMA_T,
            ),
            # Tangential measurement noise well above the process noise of one step (eta_t^2
            # = 0.04 against sigma_t^2 dt = 0.0009) and a measurement every step: the regime in
            # which pooling transported past measurements improves on the raw direction (with
            # eta_t = 0.05 every 10 steps the mean-field RT estimators do worse than raw).
            measurement=RadialTangentialMeasurement(eta_r=0.05, eta_t=0.2),
            initial=SphericalShellInitial(3, 1.0, 1.0),
            dt=0.01,
            n_steps=1000,
            observations=EveryKSteps(1),
        )

    return build


# --- oscillator: seed 002 eq. (7), App. A.1 ---------------------------------------------------

OSC_OMEGA = 2.0


def _oscillator(zeta: float) -> Callable[[], Scenario]:
    def build() -> Scenario:
        gamma = zeta * OSC_OMEGA
        A = np.array([[0.0, 1.0], [-(OSC_OMEGA**2), -2.0 * gamma]])
        return Scenario(
            system=LinearSDE(A, np.array([[0.0], [0.5]])),
            measurement=LinearMeasurement.identity(2, 0.01),
            initial=GaussianInitial(np.array([1.0, 0.0])),
            dt=0.01,
            n_steps=1000,
            observations=EveryKSteps(10),
        )

    return build


# --- ou: seed 001 eqs. (7)-(8) ---------------------------------------------------------------

OU_RATES = np.array([0.5, 1.0, 2.0, 4.0])


def _ou() -> Scenario:
    p = np.ones(OU_RATES.size)
    return Scenario(
        system=LinearSDE(np.diag(-OU_RATES), np.diag(p)),
        measurement=LinearMeasurement.identity(OU_RATES.size, 0.1),
        # Started from the stationary law N(0, p^2 / (2a)).
        initial=GaussianInitial(np.zeros(OU_RATES.size), np.diag(p**2 / (2 * OU_RATES))),
        dt=0.01,
        n_steps=1000,
        observations=EveryKSteps(10),
    )


# --- rfa-ensemble-2d: seed 004 Fig. 1 ---------------------------------------------------------


def _rfa_ensemble() -> Scenario:
    A = real_from_eigen(AFA_EIGENVALUES, AFA_BASIS)
    return Scenario(
        system=LinearSDE.from_covariance(A, 0.01 * np.array([[1.0, 0.5], [0.5, 1.0]])),
        measurement=LinearMeasurement(np.eye(2), 0.25 * np.array([[1.0, 0.3], [0.3, 1.0]])),
        initial=GaussianInitial(np.array([5.0, 0.0])),
        dt=0.01,
        n_steps=1500,
        observations=FixedTimes(np.linspace(0.0, 15.0, 200)),
    )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "afa-2d",
            "2-D spiral A = S diag(-0.1-i, -0.1+i) S^-1 = [[0.9,-2],[1,-1.1]], Q = s2 I, R = e2 I",
            "seed 000 section 4.2 (Fig. 1 panels a-c)",
            (
                Variant("a", "measurement noise only: sigma^2 = 0, eta^2 = 1", _afa_2d(0.0, 1.0)),
                Variant("b", "sigma^2 = 0.3, eta^2 = 0.5", _afa_2d(0.3, 0.5)),
                Variant("c", "higher noise: sigma^2 = 0.5, eta^2 = 2", _afa_2d(0.5, 2.0)),
            ),
        ),
        Preset(
            "rotation-3d",
            "isotropic decay plus a 3-D rotation: A = -0.1 I + [w]x, |w| = 1 about (1,2,2)/3",
            "seed 000 sections 3.6 (isotropic family) and 5.1 (real skew generator); "
            "parameters chosen here",
            (Variant("default", "sigma^2 = 0.1, eta^2 = 0.25, |x0| in [4, 6]", _rotation_3d),),
        ),
        Preset(
            "rt-sphere-3d",
            "radial-tangential SDE on and near the unit sphere in 3-D (literal mode)",
            "seed 003 Fig. 1 (no parameters given; mu_r balances the Ito drift, digest C6)",
            (
                Variant("a", "pure tangential noise: random walk on the sphere", _rt_sphere(0.0)),
                Variant("b", "tangential noise plus rotation at 0.6 rad/s", _rt_sphere(0.6)),
            ),
        ),
        Preset(
            "oscillator",
            "damped harmonic oscillator x'' + 2 g x' + w^2 x = noise, w = 2, velocity noise 0.5",
            "seed 002 eq. (7) and App. A.1 (three damping regimes); noise on the velocity",
            (
                Variant("under", "underdamped, zeta = g/w = 0.1", _oscillator(0.1)),
                Variant("critical", "critically damped, zeta = 1", _oscillator(1.0)),
                Variant("over", "overdamped, zeta = 3", _oscillator(3.0)),
            ),
        ),
        Preset(
            "ou",
            "4 independent OU channels dz = -a z dt + p dW, a = (0.5, 1, 2, 4), p = 1",
            "seed 001 section 4.1, eqs. (7)-(8) (zero-mean OU prior of KLA)",
            (Variant("default", "stationary start, eta^2 = 0.1", _ou),),
        ),
        Preset(
            "rfa-ensemble-2d",
            "the afa-2d spiral with correlated Q, R: x0 = (5, 0), T = 15, 200 measurements",
            "seed 004 Fig. 1; Q, R, x0 and times from the public RFA notebook (seed 004 "
            "digest section 4.1)",
            (
                Variant(
                    "default", "Q = 0.01[[1,.5],[.5,1]], R = 0.25[[1,.3],[.3,1]]", _rfa_ensemble
                ),
            ),
        ),
    )
}


def get(name: str) -> Preset:
    """The preset called `name`; the error lists the known ones."""
    if name not in PRESETS:
        raise ValueError(f"unknown system {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]

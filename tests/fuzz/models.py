"""Raw inputs of a linear-Gaussian problem (model, data, prior), valid or with one spoilt.

A `Problem` holds plain arrays and numbers, the way a user passes them; `build` turns them into
``LinearSDE``/``LinearMeasurement``/``GaussianPrior`` *inside* the fuzzed call, so a spoilt
matrix is refused by the constructor or the estimator, either of which must name it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from estimators.kalman import GaussianPrior
from sde_sim import LinearMeasurement, LinearSDE, linear_transition
from tests import strategies as S
from tests.fuzz.contract import naming

# The words an error about each raw input may use for it.
NAMES = {
    "A": ("A",),
    "Q": ("Q",),
    "u": ("u",),
    "C": ("C", "measurement.C"),
    "R": ("R", "measurement.R"),
    "b": ("b",),
    "delay": ("delay", "measurement.delay"),
    "z": ("z",),
    "t": ("t",),
    "mask": ("mask",),
    "prior_mean": ("prior.mean", "mean", "prior_mean"),
    "prior_cov": ("prior.cov", "cov", "prior_cov"),
    "prior_time": ("prior.time", "time"),
}
# What each input's shape is checked against (an error may name either).
PARTNERS = {
    "A": ("Q", "u", "C", "prior_mean", "prior_cov"),
    "Q": ("A",),
    "u": ("A",),
    "C": ("A", "R", "b", "z"),
    "R": ("C",),
    "b": ("C",),
    "z": ("t", "mask", "C"),
    "t": ("z", "mask", "prior_time"),
    "mask": ("z", "t"),
    "prior_mean": ("prior_cov", "A"),
    "prior_cov": ("prior_mean", "A"),
    "delay": ("prior_time",),  # t + delay must not precede the prior's time
    "prior_time": ("delay",),
}
ARRAYS = ("A", "Q", "u", "C", "R", "b", "z", "t", "prior_mean", "prior_cov")
SCALARS = ("delay", "prior_time")


@dataclass
class Problem:
    A: Any
    Q: Any
    u: Any
    C: Any
    R: Any
    b: Any
    delay: Any
    z: Any
    t: Any
    mask: Any
    prior_mean: Any
    prior_cov: Any
    prior_time: Any
    spoilt: str | None = None  # the raw input made bad, if any
    kind: str | None = None  # how
    extra: dict = field(default_factory=dict)

    def replace(self, **changes) -> Problem:
        return dataclasses.replace(self, **changes)

    def sde(self) -> LinearSDE:
        return LinearSDE.from_covariance(self.A, self.Q, self.u)

    def measurement(self) -> LinearMeasurement:
        return LinearMeasurement(self.C, self.R, self.b, self.delay)

    def prior(self) -> GaussianPrior:
        return GaussianPrior(self.prior_mean, self.prior_cov, self.prior_time)

    @property
    def names(self) -> tuple[str, ...]:
        # t, delay and prior.time are checked against each other: any change may name either
        kind = "relation" if self.spoilt in ("delay", "prior_time", "t") else self.kind
        return naming(self.spoilt, kind, NAMES, PARTNERS)

    def describe(self) -> str:
        return f"{self.spoilt} spoilt ({self.kind})" if self.spoilt else "valid"


@st.composite
def problems(draw, *, square: bool = False, max_T: int = 8, max_B: int = 3, drift=True):
    """A valid stable problem: d <= 3 states, k <= 3 measurements (k = d with `square`)."""
    A = draw(S.hurwitz_matrices(dims=st.integers(1, 3)))
    d = A.shape[0]
    Q = draw(S.spd_matrices(d, min_eig=0.05))
    k = d if square else draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    C = np.eye(d) + 0.3 * rng.normal(size=(d, d)) if square else rng.normal(size=(k, d))
    R = draw(S.spd_matrices(k, min_eig=0.1))
    u = rng.normal(size=d) if drift and draw(st.booleans()) else None
    b = rng.normal(size=k) if drift and draw(st.booleans()) else None
    delay = draw(st.sampled_from([0.0, 0.0, 0.05, -0.1]))
    T = draw(st.integers(1, max_T))
    B = draw(st.integers(1, max_B))
    steps = rng.uniform(0.02, 0.5, size=T - 1)
    t = draw(st.floats(-3, 3)) + np.concatenate([[0.0], np.cumsum(steps)])
    z = rng.normal(size=(B, T, k)) * draw(st.sampled_from([0.5, 1.0, 3.0]))
    mask = None
    if draw(st.booleans()):
        mask = rng.uniform(size=(B, T)) > 0.25
        mask[:, 0] = True
        z = np.where(mask[..., None], z, np.nan)
    prior_mean = rng.normal(size=d)
    prior_cov = draw(S.spd_matrices(d, min_eig=0.1))
    prior_time = None
    if draw(st.booleans()):
        prior_time = float(t[0] + delay - draw(st.sampled_from([0.0, 0.3, 1.0])))
    return Problem(A, Q, u, C, R, b, delay, z, t, mask, prior_mean, prior_cov, prior_time)


@st.composite
def spoilt_problems(draw, *, square: bool = False, spoil_p: float = 0.85, inputs=None, **kw):
    """A valid problem, then (with probability `spoil_p`) one raw input spoilt."""
    problem = draw(problems(square=square, **kw))
    if draw(st.floats(0, 1)) > spoil_p:
        return problem
    inputs = inputs or (*ARRAYS, *SCALARS, "mask")
    name = draw(st.sampled_from(inputs))
    value = getattr(problem, name)
    if name in SCALARS:
        kind, bad = "scalar", draw(S.scalar_spoils())
    elif name == "mask":
        kind = draw(st.sampled_from(["float", "shape", "all-false", "string", "int"]))
        B, T = np.shape(problem.z)[:2]
        bad = {
            "float": np.ones((B, T)),
            "shape": np.ones((B, T + 1), dtype=bool),
            "all-false": np.zeros((B, T), dtype=bool),
            "string": "all",
            "int": np.ones((B, T), dtype=np.int64),
        }[kind]
    else:
        if value is None:
            value = np.zeros(problem.A.shape[0] if name == "u" else np.shape(problem.C)[0])
        kind, bad = draw(S.spoilt(value))
    return problem.replace(**{name: bad, "spoilt": name, "kind": kind})


def oracle_prior(problem: Problem):
    """The proper prior carried to the first state time (the dense oracle's convention)."""
    sde = problem.sde()
    mean, cov = np.asarray(problem.prior_mean, float), np.asarray(problem.prior_cov, float)
    if problem.prior_time is None:
        return mean, cov
    h = float(problem.t[0] + problem.delay - problem.prior_time)
    if h == 0:
        return mean, cov
    maps = linear_transition(sde, np.array([h]))
    F = maps.Phi[0]
    return F @ mean + maps.offset[0], F @ cov @ F.T + maps.Qd[0]


def observed(problem: Problem) -> np.ndarray:
    B, T = np.shape(problem.z)[:2]
    return np.ones((B, T), bool) if problem.mask is None else np.asarray(problem.mask)

"""When measurements are taken, and how they are corrupted (outliers, missing values).

Schedules return measurement times on the simulated span; the scenario runner inserts any
off-grid time into the integration grid, so a measurement always reads the path's exact state
at its time (seed 001 and seed 002 work with irregular time stamps).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sde_sim import validation
from sde_sim._record import Record, register
from sde_sim.grids import TimeGrid


@register
@dataclass(frozen=True)
class EveryKSteps(Record):
    """A measurement at grid steps ``start, start + every, ...`` (seed 000 4.2: every 10)."""

    every: int
    start: int = 0

    def __post_init__(self) -> None:
        validation.count("every", self.every)
        validation.count("start", self.start, minimum=0)

    def draw(self, grid: TimeGrid, rng: np.random.Generator) -> np.ndarray:
        if self.start > grid.n_steps:
            raise ValueError(f"start ({self.start}) is beyond the grid's {grid.n_steps} steps")
        return grid.t[self.start :: self.every].copy()


@register
@dataclass(frozen=True)
class PoissonTimes(Record):
    """Measurement times of a Poisson process with ``rate`` events per unit time on ``(t0, T]``.

    Drawn as a Poisson count and sorted uniform times (the process conditioned on its count);
    one set of times is shared by all paths of a simulation.
    """

    rate: float

    def __post_init__(self) -> None:
        validation.scalar("rate", self.rate, minimum=0.0, strict=True)

    def draw(self, grid: TimeGrid, rng: np.random.Generator) -> np.ndarray:
        span = grid.end - grid.start
        n = rng.poisson(self.rate * span)
        return np.sort(grid.start + span * (1.0 - rng.random(n)))


@register
@dataclass(frozen=True, eq=False)
class FixedTimes(Record):
    """Measurements at given increasing times."""

    times: np.ndarray

    def __post_init__(self) -> None:
        t = validation.real_array("times", self.times, ndim=1)
        if np.any(np.diff(t) <= 0):
            raise ValueError("times must be strictly increasing")
        object.__setattr__(self, "times", validation.readonly(t))

    def draw(self, grid: TimeGrid, rng: np.random.Generator) -> np.ndarray:
        return self.times.copy()


Schedule = EveryKSteps | PoissonTimes | FixedTimes
"""A schedule's ``draw(grid, rng)`` returns increasing measurement times (M,) on the grid's span."""


@register
@dataclass(frozen=True)
class Contamination(Record):
    """Outliers and missing values.

    Each measurement is an outlier with probability ``outlier_fraction``: its standard normal
    noise draw ``xi`` is replaced by ``outlier_scale * xi / sqrt(chi2_df / df)``, a Student-t
    draw with ``outlier_df`` degrees of freedom (heavy-tailed; df = 1 is Cauchy) pushed through
    the same noise map. This is the contaminated model ``(1-f) N(0, R) + f t_df(0, s^2 R)`` that
    seed 000 section 2.3 and seed 004 motivate robust weights with. Independently, each
    measurement is missing (NaN) with probability ``missing_fraction``.
    """

    outlier_fraction: float = 0.0
    outlier_df: float = 1.0
    outlier_scale: float = 10.0
    missing_fraction: float = 0.0

    def __post_init__(self) -> None:
        for name in ("outlier_fraction", "missing_fraction"):
            value = validation.scalar(name, getattr(self, name), minimum=0.0)
            if value > 1:
                raise ValueError(f"{name} must be in [0, 1], got {value:g}")
        validation.scalar("outlier_df", self.outlier_df, minimum=0.0, strict=True)
        validation.scalar("outlier_scale", self.outlier_scale, minimum=0.0, strict=True)

    @property
    def active(self) -> bool:
        return self.outlier_fraction > 0 or self.missing_fraction > 0

    def corrupt_draws(self, xi: np.ndarray, rng: np.random.Generator):
        """Replace outlier draws in ``xi`` (P, M, k) in place; return the (P, M) masks.

        Returns ``(outlier, missing)``.
        """
        shape = xi.shape[:2]
        outlier = rng.random(shape) < self.outlier_fraction
        n_out = int(outlier.sum())
        if n_out:
            chi2 = rng.chisquare(self.outlier_df, size=n_out)
            xi[outlier] *= (self.outlier_scale / np.sqrt(chi2 / self.outlier_df))[:, None]
        missing = rng.random(shape) < self.missing_fraction
        return outlier, missing

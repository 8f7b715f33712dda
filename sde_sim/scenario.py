"""A scenario (system, measurement, initial state, grid, schedule) and the one call that runs it.

`simulate` turns one integer seed into every random draw through independent SeedSequence
children (initial states, Brownian path, measurement times, measurement noise, contamination),
so the same seed gives the same arrays, and changing one part of a scenario does not reshuffle
the randomness of the others. The per-path draws are made per fixed block of `PATH_BLOCK` paths
(`plan`, `SimulationPlan.block`), so a chunked run (`sde_sim.chunked`) gives the same bits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.linalg import expm

from sde_sim import validation
from sde_sim._record import Record, record_from_dict, register
from sde_sim.brownian import BrownianPath
from sde_sim.euler_maruyama import simulate_euler
from sde_sim.exact import simulate_exact
from sde_sim.grids import TimeGrid
from sde_sim.models import (
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    SphericalShellInitial,
    unit_rows,
)
from sde_sim.observe import Contamination, EveryKSteps, FixedTimes, PoissonTimes
from sde_sim.plumbing import package_version

METHODS = ("euler", "exact")
DTYPES = ("float64", "float32")


@register
@dataclass(frozen=True, eq=False)
class Scenario(Record):
    """Everything needed to simulate one system and measure it.

    Parameters
    ----------
    system : `LinearSDE` or `RadialTangentialSDE`.
    measurement : `LinearMeasurement` (linear systems) or `RadialTangentialMeasurement` (RT).
    initial : `GaussianInitial` or `SphericalShellInitial`; for an RT system it gives the
        eigen-coordinates ``x_s(t0)``.
    dt, n_steps, t0 : the uniform grid ``t_k = t0 + k dt``, ``k = 0..n_steps``.
    observations : `EveryKSteps`, `PoissonTimes` or `FixedTimes`.
    contamination : outliers and missing values; default none.
    """

    system: LinearSDE | RadialTangentialSDE
    measurement: LinearMeasurement | RadialTangentialMeasurement
    initial: GaussianInitial | SphericalShellInitial
    dt: float
    n_steps: int
    observations: EveryKSteps | PoissonTimes | FixedTimes
    contamination: Contamination = field(default_factory=Contamination)
    t0: float = 0.0

    def __post_init__(self) -> None:
        _expect("system", self.system, (LinearSDE, RadialTangentialSDE))
        _expect("initial", self.initial, (GaussianInitial, SphericalShellInitial))
        _expect("observations", self.observations, (EveryKSteps, PoissonTimes, FixedTimes))
        _expect("contamination", self.contamination, (Contamination,))
        d = self.system.dim
        if isinstance(self.system, LinearSDE):
            _expect("measurement", self.measurement, (LinearMeasurement,))
            if self.measurement.dim != d:
                raise ValueError(
                    f"measurement.C must have {d} columns (the state dimension), "
                    f"got shape {self.measurement.C.shape}"
                )
        else:
            _expect("measurement", self.measurement, (RadialTangentialMeasurement,))
        if self.initial.dim != d:
            raise ValueError(f"initial state has dimension {self.initial.dim}; the system has {d}")
        object.__setattr__(self, "dt", validation.scalar("dt", self.dt, minimum=0.0, strict=True))
        object.__setattr__(self, "n_steps", validation.count("n_steps", self.n_steps))
        object.__setattr__(self, "t0", validation.scalar("t0", self.t0))
        if self.contamination.outlier_fraction > 0 and _noise_free(self.measurement):
            raise ValueError(
                "outlier contamination scales the measurement noise, which is zero "
                "here: give the measurement a nonzero noise"
            )

    def grid(self) -> TimeGrid:
        return TimeGrid.uniform(self.dt, self.n_steps, self.t0)

    def replace(self, **changes: Any) -> Scenario:
        return dataclasses.replace(self, **changes)


def _expect(name: str, value: object, types: tuple[type, ...]) -> None:
    if not isinstance(value, types):
        names = " or ".join(t.__name__ for t in types)
        raise TypeError(f"{name} must be a {names}, got {type(value).__name__}")


def _noise_free(measurement) -> bool:
    if isinstance(measurement, LinearMeasurement):
        return not np.any(measurement.R)
    return measurement.eta_r == 0 and measurement.eta_t == 0


@dataclass(frozen=True, eq=False)
class Simulation:
    """Simulated paths and measurements (time on rows, paths first).

    Attributes
    ----------
    t : (T,) regular grid times.           x : (P, T, d) latent states on it.
    t_obs : (M,) measurement times.        z : (P, M, k) measurements (NaN where missing).
    x_obs : (P, M, d) latent state at each measurement time (before any delay).
    outlier, missing : (P, M) bool masks.  meta : JSON-compatible record of how it was made.
    """

    t: np.ndarray
    x: np.ndarray
    t_obs: np.ndarray
    z: np.ndarray
    x_obs: np.ndarray
    outlier: np.ndarray
    missing: np.ndarray
    meta: dict

    ARRAYS = ("t", "x", "t_obs", "z", "x_obs", "outlier", "missing")

    @property
    def scenario(self) -> Scenario:
        """The scenario recorded in `meta`, rebuilt (and re-validated)."""
        return record_from_dict(self.meta["scenario"])


def simulate(
    scenario: Scenario,
    n_paths: int,
    *,
    seed: int = 0,
    method: str = "euler",
    dtype: str = "float64",
    progress: Callable[[int, int], None] | None = None,
    meta: dict | None = None,
) -> Simulation:
    """Simulate `n_paths` paths of `scenario` and measure them.

    Parameters
    ----------
    scenario : what to simulate.
    n_paths : number of independent paths P.
    seed : non-negative int; every random draw derives from it (seed section: `plan`).
    method : ``"euler"`` (Euler-Maruyama) or ``"exact"`` (exact discretisation).
    dtype : ``"float64"`` or ``"float32"`` for the paths and measurements.
    progress : called with (steps done, total steps) while integrating.
    meta : extra JSON-compatible entries for the record (e.g. the preset name); it may not
        set the entries recorded here (`RECORDED_KEYS`: seed, n_paths, method, ...).

    Returns
    -------
    Simulation with ``x`` (P, n_steps+1, d) and ``z`` (P, M, k). The paths are computed in
    blocks of `PATH_BLOCK` (`SimulationPlan.block`), exactly as a chunked run computes them, so
    a Zarr store written by `sde_sim.chunked` holds the same bits.
    """
    p = plan(scenario, n_paths, seed=seed, method=method, dtype=dtype, meta=meta)
    blocks = p.n_blocks
    if blocks == 1:
        arrays = p.block(0, progress=progress)
    else:
        arrays = None
        for b in range(blocks):
            step = None
            if progress is not None:

                def step(done, total, b=b):
                    progress(b * total + done, blocks * total)

            part = p.block(b, progress=step)
            if arrays is None:
                arrays = {k: np.empty((n_paths, *v.shape[1:]), v.dtype) for k, v in part.items()}
            start, stop = p.block_paths(b)
            for name, value in part.items():
                arrays[name][start:stop] = value
    return Simulation(t=p.grid.t.copy(), t_obs=p.t_obs.copy(), meta=p.meta, **arrays)


# Paths are seeded and computed in fixed blocks of this many (the last block may be shorter):
# the bits of a path depend only on the seed and its block, never on how many blocks a run
# computes at once, so chunked runs on any number of workers reproduce `simulate`. 4096 paths
# keep a block's working set (about 4 copies of its states) near 0.5 GB for 2000 steps in 2-D.
PATH_BLOCK = 4096
# meta["seeding"]: 2 = per path block (block 0 on the streams of scheme 1, so a simulation of up
# to PATH_BLOCK paths keeps the bits of files written before blocks existed). Files without the
# entry used scheme 1: one stream per part for all paths at once.
SEEDING = 2


@dataclass(frozen=True, eq=False)
class SimulationPlan:
    """What every block of a simulation shares: the grids, the measurement times and the seeds.

    Built by `plan`; ``block(b)`` simulates path block ``b`` (paths ``block_paths(b)``) alone.
    Picklable, so Dask workers can run blocks (`sde_sim.chunked`).
    """

    scenario: Scenario
    n_paths: int
    method: str
    dtype: str
    t_obs: np.ndarray
    merged: TimeGrid
    regular_index: np.ndarray
    obs_index: np.ndarray
    sample_index: np.ndarray
    seeds: (
        tuple  # SeedSequences of (initial states, Brownian path, measurement noise, contamination)
    )
    meta: dict

    @property
    def grid(self) -> TimeGrid:
        return self.scenario.grid()

    @property
    def n_blocks(self) -> int:
        return -(-self.n_paths // PATH_BLOCK)

    def block_paths(self, b: int) -> tuple[int, int]:
        """The paths ``[start, stop)`` of block `b`."""
        if not 0 <= b < self.n_blocks:
            raise ValueError(f"block must be in [0, {self.n_blocks}), got {b}")
        return b * PATH_BLOCK, min((b + 1) * PATH_BLOCK, self.n_paths)

    def block(self, b: int, *, progress=None) -> dict[str, np.ndarray]:
        """Simulate path block `b`: ``x`` (B, T, d), ``z`` (B, M, k), ``x_obs`` (B, M, d),
        ``outlier`` and ``missing`` (B, M), with B the block's paths."""
        start, stop = self.block_paths(b)
        n = stop - start
        s_init, s_noise, s_meas, s_cont = (_block_seed(s, b) for s in self.seeds)
        scenario, system, measurement = (
            self.scenario,
            self.scenario.system,
            self.scenario.measurement,
        )
        grid = scenario.grid()
        delay = measurement.delay if isinstance(measurement, LinearMeasurement) else 0.0

        x0 = scenario.initial.sample(np.random.default_rng(s_init), n)
        # The exact transition's noise N(0, Q_d) spans the whole state even when G has fewer
        # columns.
        noise_dim = system.noise_dim if self.method == "euler" else system.dim
        noise = BrownianPath(s_noise, self.merged, n, noise_dim, dtype=self.dtype)
        sampler = simulate_euler if self.method == "euler" else simulate_exact
        path = sampler(system, x0, noise, progress=progress)

        x_sample = path[:, self.sample_index].astype(float)
        xi = np.random.default_rng(s_meas).standard_normal(
            (n, self.t_obs.size, _measurement_dim(measurement, system))
        )
        outlier, missing = scenario.contamination.corrupt_draws(xi, np.random.default_rng(s_cont))
        if isinstance(system, RadialTangentialSDE):
            frame = _rt_frame(system, x0, x_sample, self.t_obs + delay, grid.start)
            z = measurement.observe(x_sample, frame, xi) @ system.basis.T
            path = path @ system.basis.T.astype(path.dtype)
        else:
            z = measurement.observe(x_sample, xi)
        z[missing] = np.nan
        x = path if self.merged.t.size == grid.t.size else path[:, self.regular_index]
        return {
            "x": x,
            "z": z.astype(self.dtype),
            "x_obs": path[:, self.obs_index],
            "outlier": outlier,
            "missing": missing,
        }


def _block_seed(seq: np.random.SeedSequence, b: int) -> np.random.SeedSequence:
    """Block `b`'s stream of one part: block 0 the part's own (seeding scheme 1), block b > 0
    the child key ``(*spawn_key, b)`` (which no other draw uses: the Brownian path's time
    blocks hang one level below the key they are given)."""
    if b == 0:
        return seq
    return np.random.SeedSequence(seq.entropy, spawn_key=(*seq.spawn_key, b))


def plan(
    scenario: Scenario,
    n_paths: int,
    *,
    seed: int = 0,
    method: str = "euler",
    dtype: str = "float64",
    meta: dict | None = None,
) -> SimulationPlan:
    """Check the arguments of `simulate` and draw what all paths share.

    Seeds: one integer seed gives five independent SeedSequence children (initial states,
    Brownian path, measurement times, measurement noise, contamination), so changing one part
    of a scenario does not reshuffle the others. The measurement times are drawn once for all
    paths; the four per-path parts are drawn per block of `PATH_BLOCK` paths from the block's
    child of each (`_block_seed`), recorded as ``meta["seeding"] = SEEDING``.
    """
    if not isinstance(scenario, Scenario):
        raise TypeError(f"scenario must be a Scenario, got {type(scenario).__name__}")
    n_paths = validation.count("n_paths", n_paths)
    seed = validation.count("seed", seed, minimum=0)
    validation.choice("method", method, METHODS)
    validation.choice("dtype", dtype, DTYPES)
    _check_meta(meta)
    s_init, s_noise, s_times, s_meas, s_cont = np.random.SeedSequence(seed).spawn(5)
    measurement = scenario.measurement
    grid = scenario.grid()

    t_obs = scenario.observations.draw(grid, np.random.default_rng(s_times))
    delay = measurement.delay if isinstance(measurement, LinearMeasurement) else 0.0
    t_obs = _measurable_times(t_obs, delay, grid, scenario.observations)

    # Off-grid measurement (and delayed sampling) times become grid points of the integration.
    merged = grid.insert(t_obs)[0].insert(t_obs + delay)[0]
    record = {
        "filtersuite_version": package_version(),
        "seed": seed,
        "method": method,
        "dtype": dtype,
        "n_paths": n_paths,
        "seeding": SEEDING,
        "path_block": PATH_BLOCK,
        **(meta or {}),
        "scenario": scenario.to_dict(),
    }
    return SimulationPlan(
        scenario=scenario,
        n_paths=n_paths,
        method=method,
        dtype=dtype,
        t_obs=t_obs,
        merged=merged,
        regular_index=merged.insert(grid.t)[1],
        obs_index=merged.insert(t_obs)[1],
        sample_index=merged.insert(t_obs + delay)[1],
        seeds=(s_init, s_noise, s_meas, s_cont),
        meta=record,
    )


# Entries `simulate` records itself; caller metadata may not replace them (a file would then
# claim a seed or a path count it was not simulated with).
RECORDED_KEYS = (
    "filtersuite_version",
    "seed",
    "method",
    "dtype",
    "n_paths",
    "seeding",
    "path_block",
    "scenario",
)


def _check_meta(meta) -> None:
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise TypeError(f"meta must be a dict or None, got {type(meta).__name__}")
    clashes = sorted(key for key in meta if key in RECORDED_KEYS)
    if clashes:
        raise ValueError(
            f"meta must not set {', '.join(map(repr, clashes))}: simulate records "
            f"{', '.join(RECORDED_KEYS)} itself"
        )


def _measurable_times(t_obs, delay, grid: TimeGrid, schedule) -> np.ndarray:
    """Keep the times whose sampled state ``t + delay`` lies in the simulated span."""
    t_obs = np.asarray(t_obs, dtype=float)
    if isinstance(schedule, FixedTimes):
        bad = (t_obs + delay < grid.start) | (t_obs + delay > grid.end)
        if np.any(bad):
            raise ValueError(
                f"observation times plus delay must lie in the simulated span [{grid.start:g}, "
                f"{grid.end:g}]; {int(bad.sum())} of {t_obs.size} do not (first: "
                f"{t_obs[bad][0]:g})"
            )
        return t_obs
    span = grid.steps[0] * 1e-9
    keep = (t_obs + delay >= grid.start - span) & (t_obs + delay <= grid.end + span)
    return np.clip(t_obs[keep] + delay, grid.start, grid.end) - delay


def _measurement_dim(measurement, system) -> int:
    if isinstance(measurement, LinearMeasurement):
        return measurement.out_dim
    return system.dim


def _rt_frame(system: RadialTangentialSDE, x0, x_sample, times, t0) -> np.ndarray:
    """Radial axis of the measurement noise: the state's direction (literal) or nominal frame."""
    if system.mode == "literal":
        return unit_rows(x_sample)
    rotations = expm(system.Omega * (np.asarray(times) - t0)[:, None, None])
    return np.einsum("mde,pe->pmd", rotations, unit_rows(np.asarray(x0, dtype=float)))

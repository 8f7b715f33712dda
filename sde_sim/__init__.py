"""Simulation of linear and radial-tangential SDEs and their measurements.

Quick start::

    from sde_sim import presets, simulate
    sim = simulate(presets.get("afa-2d").scenario("b"), n_paths=8, seed=0)
    sim.x      # (8, 1001, 2) latent paths
    sim.z      # (8, 101, 2) measurements at sim.t_obs

Modules: `models` (systems), `presets` (named systems from the papers), `brownian` (seeded
Brownian paths that share noise across step sizes), `euler_maruyama` and `exact` (samplers),
`observe` (measurement schedules, outliers, missing values), `scenario` (`simulate`), `io`
(``.npz`` files).
"""

from sde_sim.brownian import ArrayNoise, BrownianPath
from sde_sim.euler_maruyama import euler_maruyama_step, simulate_euler
from sde_sim.exact import linear_transition, simulate_exact
from sde_sim.grids import TimeGrid
from sde_sim.models import (
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    SphericalShellInitial,
    UnstableSystemWarning,
)
from sde_sim.observe import Contamination, EveryKSteps, FixedTimes, PoissonTimes
from sde_sim.scenario import Scenario, Simulation, simulate

__all__ = [
    "ArrayNoise",
    "BrownianPath",
    "Contamination",
    "EveryKSteps",
    "FixedTimes",
    "GaussianInitial",
    "LinearMeasurement",
    "LinearSDE",
    "PoissonTimes",
    "RadialTangentialMeasurement",
    "RadialTangentialSDE",
    "Scenario",
    "Simulation",
    "SphericalShellInitial",
    "TimeGrid",
    "UnstableSystemWarning",
    "euler_maruyama_step",
    "linear_transition",
    "simulate",
    "simulate_euler",
    "simulate_exact",
]

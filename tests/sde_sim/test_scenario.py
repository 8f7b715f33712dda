"""`simulate`: determinism, measurement times, delay, noise law, contamination."""

import numpy as np
import pytest
from scipy import stats

from sde_sim import (
    Contamination,
    EveryKSteps,
    FixedTimes,
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    PoissonTimes,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    Scenario,
    linear_transition,
    presets,
    simulate,
)
from sde_sim.models import skew_from_vector
from tests.sde_sim.reference import SIGMA, whitened_scores

SPIRAL = np.array([[-0.3, -2.0], [1.5, -0.1]])


def _scenario(**changes):
    base = Scenario(
        system=LinearSDE(SPIRAL, 0.3 * np.eye(2)),
        measurement=LinearMeasurement.identity(2, 0.25),
        initial=GaussianInitial([3.0, -1.0]),
        dt=0.01,
        n_steps=400,
        observations=EveryKSteps(10),
    )
    return base.replace(**changes)


@pytest.mark.parametrize("method", ["euler", "exact"])
def test_same_seed_same_arrays(method):
    scenario = _scenario(
        observations=PoissonTimes(8.0),
        contamination=Contamination(outlier_fraction=0.1, missing_fraction=0.1),
    )
    a, b = (simulate(scenario, 5, seed=3, method=method) for _ in range(2))
    c = simulate(scenario, 5, seed=4, method=method)
    for name in a.ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.meta == b.meta
    assert not np.array_equal(a.x, c.x)


def test_regular_schedule_reads_the_grid():
    sim = simulate(_scenario(), 4, seed=0)
    assert sim.x.shape == (4, 401, 2) and sim.z.shape == (4, 41, 2)
    np.testing.assert_array_equal(sim.t_obs, sim.t[::10])
    np.testing.assert_array_equal(sim.x_obs, sim.x[:, ::10])
    assert not sim.outlier.any() and not sim.missing.any()


def test_measurement_noise_has_covariance_r():
    R = np.array([[0.5, 0.2], [0.2, 0.3]])
    scenario = _scenario(measurement=LinearMeasurement(np.eye(2), R, b=[1.0, -2.0]))
    sim = simulate(scenario, 2000, seed=1)
    residuals = (sim.z - sim.x_obs - np.array([1.0, -2.0])).reshape(-1, 2)
    assert np.max(np.abs(whitened_scores(residuals, R))) < SIGMA


def test_poisson_times_count_and_uniformity():
    scenario = _scenario(observations=PoissonTimes(50.0), n_steps=1000)
    sim = simulate(scenario, 1, seed=2)
    expected = 50.0 * 10.0  # rate x span; the count is Poisson, sd sqrt(500) ~ 22
    assert abs(sim.t_obs.size - expected) < SIGMA * np.sqrt(expected)
    assert np.all(np.diff(sim.t_obs) > 0) and sim.t_obs[0] > 0 and sim.t_obs[-1] <= 10.0
    # Given the count, the times are i.i.d. uniform: Kolmogorov-Smirnov at p > 1e-6.
    assert stats.kstest(sim.t_obs / 10.0, "uniform").pvalue > 1e-6


def test_off_grid_measurements_read_the_exact_state():
    # No process noise, no measurement noise: the exact sampler must put every off-grid
    # measurement at e^{A t} x0, which needs the measurement times inside the integration grid.
    times = np.sort(np.random.default_rng(0).uniform(0, 4, 30))
    scenario = _scenario(
        system=LinearSDE(SPIRAL, np.zeros((2, 1))),
        measurement=LinearMeasurement.identity(2, 0.0),
        observations=FixedTimes(times),
    )
    sim = simulate(scenario, 2, seed=0, method="exact")
    Phi = linear_transition(scenario.system, times).Phi
    expected = Phi @ np.array([3.0, -1.0])
    np.testing.assert_allclose(sim.x_obs[0], expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sim.z[1], expected, rtol=1e-10, atol=1e-12)
    assert sim.x.shape == (2, 401, 2)  # inserted points do not appear in the regular output


def test_measurement_delay_reads_the_later_state():
    # Seed 000 section 3.10: z(t_k) = C x(t_k + phi) + b. Off-grid delay, deterministic system.
    C, b, phi = np.array([[1.0, 0.5]]), np.array([0.7]), 0.123
    scenario = _scenario(
        system=LinearSDE(SPIRAL, np.zeros((2, 1))),
        measurement=LinearMeasurement(C, np.zeros((1, 1)), b=b, delay=phi),
    )
    sim = simulate(scenario, 1, seed=0, method="exact")
    # Times whose delayed state falls after the end (t = 4.0) are not measured.
    np.testing.assert_allclose(sim.t_obs, np.arange(0, 4.0 - phi, 0.1), atol=1e-12)
    Phi = linear_transition(scenario.system, sim.t_obs + phi).Phi
    expected = (Phi @ np.array([3.0, -1.0])) @ C.T + b
    np.testing.assert_allclose(sim.z[0], expected, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match=r"plus delay must lie in the simulated span"):
        simulate(scenario.replace(observations=FixedTimes([1.0, 3.95])), 1)


def test_contamination_rates_and_the_outlier_law():
    f_out, f_miss, df, scale = 0.2, 0.1, 2.0, 10.0
    scenario = _scenario(
        measurement=LinearMeasurement.identity(2, 1.0),
        contamination=Contamination(f_out, df, scale, f_miss),
    )
    sim = simulate(scenario, 500, seed=5)
    n = sim.outlier.size
    for mask, f in ((sim.outlier, f_out), (sim.missing, f_miss)):
        assert abs(mask.sum() - f * n) < SIGMA * np.sqrt(n * f * (1 - f))  # binomial count
    assert np.all(np.isnan(sim.z[sim.missing])) and not np.isnan(sim.z[~sim.missing]).any()
    residual = (sim.z - sim.x_obs)[:, :, 0]
    inlier = residual[~sim.outlier & ~sim.missing]
    outlier = residual[sim.outlier & ~sim.missing] / scale
    assert stats.kstest(inlier, "norm").pvalue > 1e-6
    assert stats.kstest(outlier, stats.t(df).cdf).pvalue > 1e-6
    assert stats.kstest(outlier, "norm").pvalue < 1e-6  # heavy tails are visible


def test_rt_scenario_basis_maps_eigen_coordinates_to_ambient():
    sde = RadialTangentialSDE(skew_from_vector([0, 0, 1.0]), 0.2, 0.2, 0.1, 0.1)
    base = Scenario(
        sde,
        RadialTangentialMeasurement(0.05, 0.05),
        GaussianInitial([1.0, 0, 0]),
        0.01,
        100,
        EveryKSteps(5),
    )
    B = np.array([[2.0, 0.0, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 3.0]])
    plain = simulate(base, 3, seed=1)
    mapped = simulate(
        base.replace(system=RadialTangentialSDE(sde.Omega, 0.2, 0.2, 0.1, 0.1, basis=B)), 3, seed=1
    )
    np.testing.assert_allclose(mapped.x, plain.x @ B.T, rtol=1e-13)
    np.testing.assert_allclose(mapped.z, plain.z @ B.T, rtol=1e-13)


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"measurement": LinearMeasurement.identity(3, 1.0)}, "measurement.C must have 2 columns"),
        (
            {"measurement": RadialTangentialMeasurement(0.1, 0.1)},
            "measurement must be a LinearMeasurement",
        ),
        ({"initial": GaussianInitial([1.0, 2.0, 3.0])}, "initial state has dimension 3"),
        ({"dt": 0.0}, "dt must be > 0"),
        ({"n_steps": 0}, "n_steps must be >= 1"),
        (
            {
                "measurement": LinearMeasurement.identity(2, 0.0),
                "contamination": Contamination(outlier_fraction=0.1),
            },
            "measurement noise, which is zero",
        ),
        ({"observations": "every 10"}, "observations must be a EveryKSteps"),
    ],
)
def test_scenario_errors(changes, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        _scenario(**changes)


def test_simulate_argument_errors():
    with pytest.raises(ValueError, match="method must be one of 'euler', 'exact'"):
        simulate(_scenario(), 2, method="rk4")
    with pytest.raises(ValueError, match="n_paths must be >= 1"):
        simulate(_scenario(), 0)
    with pytest.raises(TypeError, match="seed must be an integer"):
        simulate(_scenario(), 2, seed=1.5)
    with pytest.raises(ValueError, match="literal radial-tangential"):
        simulate(presets.get("rt-sphere-3d").scenario("a"), 2, method="exact")


def test_caller_metadata_cannot_replace_the_recorded_seed_or_path_count():
    """A file must not claim a seed or a path count it was not simulated with: `meta` may add
    entries, not replace the ones `simulate` records."""
    sim = simulate(_scenario(), 2, seed=3, meta={"preset": "mine"})
    assert sim.meta["seed"] == 3 and sim.meta["n_paths"] == 2 and sim.meta["preset"] == "mine"
    for key in ("seed", "n_paths", "method", "scenario"):
        with pytest.raises(ValueError, match=f"meta must not set '{key}'"):
            simulate(_scenario(), 2, meta={key: 7})
    with pytest.raises(TypeError, match="meta must be a dict or None"):
        simulate(_scenario(), 2, meta=[("seed", 1)])


def test_paths_are_seeded_per_block_of_paths():
    """Seeding scheme 2: a path's bits depend on its seed and its block of `PATH_BLOCK` paths,
    not on how many paths the run has; the first block keeps the single-stream bits of
    scheme 1 (its draws are exactly those of a run of `PATH_BLOCK` paths)."""
    from sde_sim.scenario import PATH_BLOCK, SEEDING

    sc = _scenario().replace(n_steps=5)
    small = simulate(sc, PATH_BLOCK, seed=8)
    big = simulate(sc, 2 * PATH_BLOCK + 3, seed=8)
    bigger = simulate(sc, 3 * PATH_BLOCK, seed=8)
    assert big.meta["seeding"] == SEEDING and big.meta["path_block"] == PATH_BLOCK
    for name in ("x", "z", "x_obs", "outlier", "missing"):
        a, b, c = (getattr(s, name) for s in (small, big, bigger))
        assert np.array_equal(a, b[:PATH_BLOCK], equal_nan=True), name
        assert np.array_equal(b[: 2 * PATH_BLOCK], c[: 2 * PATH_BLOCK], equal_nan=True), name
    # blocks are independent draws, not copies of one another
    assert not np.array_equal(big.x[:PATH_BLOCK], big.x[PATH_BLOCK : 2 * PATH_BLOCK])

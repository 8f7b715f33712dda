"""Presets: every variant runs, and each carries the numbers of the seed it cites."""

import numpy as np
import pytest

from sde_sim import LinearSDE, linear_transition, presets, simulate
from sde_sim.exact import ou_variance_factor
from tests.sde_sim.reference import SIGMA, whitened_scores

ALL_VARIANTS = [(p.name, v.name) for p in presets.PRESETS.values() for v in p.variants]


@pytest.mark.parametrize(("name", "variant"), ALL_VARIANTS)
def test_every_variant_simulates(name, variant):
    preset = presets.get(name)
    assert "seed 00" in preset.source
    scenario = preset.scenario(variant)
    methods = ["euler", "exact"] if isinstance(scenario.system, LinearSDE) else ["euler"]
    for method in methods:
        sim = simulate(scenario, 3, seed=0, method=method)
        assert sim.x.shape == (3, scenario.n_steps + 1, scenario.system.dim)
        assert np.all(np.isfinite(sim.x)) and np.all(np.isfinite(sim.z))
        assert sim.meta["scenario"] == scenario.to_dict()


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ValueError, match="unknown system 'nope'; known: afa-2d, rotation-3d"):
        presets.get("nope")
    with pytest.raises(ValueError, match="unknown variant 'z' of afa-2d; known: a, b, c"):
        presets.get("afa-2d").scenario("z")


@pytest.mark.parametrize(
    ("variant", "sigma2", "eta2"), [("a", 0.0, 1.0), ("b", 0.3, 0.5), ("c", 0.5, 2.0)]
)
def test_afa_2d_matches_seed_000_section_4_2(variant, sigma2, eta2):
    s = presets.get("afa-2d").scenario(variant)
    np.testing.assert_allclose(s.system.A, [[0.9, -2.0], [1.0, -1.1]], atol=1e-14)
    np.testing.assert_allclose(s.system.Q, sigma2 * np.eye(2), atol=1e-15)
    np.testing.assert_allclose(s.measurement.R, eta2 * np.eye(2))
    assert (s.dt, s.n_steps, s.observations.every) == (0.01, 1000, 10)


def test_rfa_ensemble_matches_the_seed_004_digest():
    s = presets.get("rfa-ensemble-2d").scenario()
    np.testing.assert_allclose(s.system.Q, 0.01 * np.array([[1, 0.5], [0.5, 1]]), atol=1e-15)
    np.testing.assert_allclose(s.measurement.R, 0.25 * np.array([[1, 0.3], [0.3, 1]]))
    sim = simulate(s, 1, seed=0)
    np.testing.assert_allclose(sim.t_obs, np.linspace(0, 15, 200))
    np.testing.assert_array_equal(sim.x[0, 0], [5.0, 0.0])


def test_oscillator_regimes():
    # Seed 002 App. A.1: eigenvalues -g +- sqrt(g^2 - w^2): complex, repeated, real.
    eig = {
        v: np.linalg.eigvals(presets.get("oscillator").scenario(v).system.A)
        for v in ("under", "critical", "over")
    }
    assert np.all(np.abs(eig["under"].imag) > 1.0)
    np.testing.assert_allclose(eig["critical"], [-2.0, -2.0], atol=1e-6)
    assert np.all(eig["over"].imag == 0) and abs(eig["over"][0] - eig["over"][1]) > 1.0


def test_ou_starts_and_stays_stationary():
    # Seed 001 eq. (8): the stationary variance of dz = -a z dt + p dW is p^2 / (2a).
    s = presets.get("ou").scenario()
    sim = simulate(s, 10_000, seed=0, method="exact")
    a = -np.diag(s.system.A)
    stationary = np.diag(1.0 / (2 * a))
    for k in (0, -1):
        assert np.max(np.abs(whitened_scores(sim.x[:, k], stationary))) < SIGMA
    # One exact step has variance p^2 phi(a, dt), the transition variance of eq. (8).
    Qd = linear_transition(s.system, s.dt).Qd[0]
    np.testing.assert_allclose(
        np.diag(Qd), np.diag(s.system.Q) * ou_variance_factor(a, s.dt), rtol=1e-12
    )
    np.testing.assert_allclose(Qd - np.diag(np.diag(Qd)), 0.0, atol=1e-16)


def test_rt_sphere_stays_on_the_unit_sphere():
    # mu_r = (d-1) sigma_t^2 / 2 balances the Ito drift (seed 003 digest, C6). Under Euler
    # without rotation, E m^2 has the fixed point (d-1) sigma_t^2 / (2 mu_r - mu_r^2 h) =
    # 1.00045 (approached from 1), and the spread of m^2 is about sigma_t^2 sqrt((d-1) h / mu_r)
    # ~ 0.04. (With rotation, Euler's |I + h Omega| > 1 inflates m^2 by ~ w^2 h / (2 mu_r):
    # test_radial_tangential bounds that case.)
    sim = simulate(presets.get("rt-sphere-3d").scenario("a"), 400, seed=0)
    m2 = np.sum(sim.x[:, -1] ** 2, axis=-1)
    assert abs(m2.mean() - 1.0) < SIGMA * m2.std(ddof=1) / np.sqrt(m2.size) + 5e-4
    assert m2.std() < 0.1

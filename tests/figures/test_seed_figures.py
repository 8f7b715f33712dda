"""The seed 003 / 004 figures: the extra contract (SEED, CHECKS) and registration."""

from __future__ import annotations

import pytest

import figures
from verify import registry

MODULES = ("rt_sphere_trajectories", "rfa_ensemble", "rfa_regimes", "rfa_damping", "rope_spectra")


@pytest.mark.parametrize("name", MODULES)
def test_seed_and_checks(name):
    module = figures.get(name)
    assert name == module.NAME
    assert module.SEED in {"003", "004"}
    assert isinstance(module.CHECKS, tuple)
    checks = registry.select()
    for ref in module.CHECKS:
        matches = [c for c in checks if c.id == ref or c.id.startswith(ref)]
        assert matches, f"{name}: CHECKS entry {ref!r} names no registered check"
        # Each referenced check cites the figure's seed (its source names the seed file or
        # "seed NNN").
        assert any(
            f"{module.SEED}_" in c.source or f"seed {module.SEED}" in c.source for c in matches
        ), f"{name}: {ref!r} is not a check of seed {module.SEED}"
    cfg_q, cfg_f = module.Config.quick(), module.Config.full()
    assert type(cfg_q) is module.Config and type(cfg_f) is module.Config


def test_registered_at_the_end_in_order():
    assert figures.names()[-len(MODULES) :] == list(MODULES)

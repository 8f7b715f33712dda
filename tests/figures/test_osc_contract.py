"""The seed 002 figures' module contract: registered, SEED and CHECKS that name real checks."""

from __future__ import annotations

import pytest

import figures
from verify.registry import SEED_FILES, select

OSC = ("osc_trajectories", "osc_irregular_rotation", "osc_resonance_map", "osc_logistic_map")


@pytest.mark.parametrize("name", OSC)
def test_registered_with_seed_and_checks(name):
    module = figures.get(name)
    assert name in figures.names() and name == module.NAME
    assert module.SEED == "002"
    assert isinstance(module.CHECKS, tuple)
    for prefix in module.CHECKS:
        found = [c for c in select() if c.id.startswith(prefix)]
        assert found, f"{name}: no check id starts with {prefix!r}"
        assert all(c.source.startswith(SEED_FILES[2]) for c in found), prefix
    for attr in ("TITLE", "SOURCE", "Config", "compute", "plot", "caption", "main"):
        assert hasattr(module, attr)
    assert module.Config.quick() != module.Config.full()

"""Each top-level package resolves to this repository (the names collide with PyPI projects)."""

import importlib.util
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PACKAGES = ["sde_sim", "estimators", "kernels", "verify", "figures"]


@pytest.mark.parametrize("name", PACKAGES)
def test_package_comes_from_this_repository(name):
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).resolve().parent == REPO_ROOT / name

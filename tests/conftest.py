"""Shared test configuration: hypothesis profiles and the repository root."""

import os
from pathlib import Path

from hypothesis import HealthCheck, settings

REPO_ROOT = Path(__file__).resolve().parent.parent

# `ci`: derandomized and without an example database, so a run is reproducible and leaves no
# files; `dev` explores more examples.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

"""Shared test configuration: hypothesis profiles and the repository root."""

import os
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings

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
# The fuzz suite (tests/fuzz) sets each target's number of inputs itself; these two profiles
# hold the rest: `fuzz` is what its CI variants run under (fixed seed, no database, no deadline),
# `fuzz-slow` what its `slow` variants run under (`HYPOTHESIS_PROFILE=fuzz-slow pytest -m slow
# tests/fuzz`; also derandomized, so the recorded counts in RELIABILITY.md reproduce).
_FUZZ_HEALTH = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.data_too_large,
    HealthCheck.function_scoped_fixture,
]
settings.register_profile(
    "fuzz",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=25,
    print_blob=True,
    suppress_health_check=_FUZZ_HEALTH,
)
settings.register_profile(
    "fuzz-slow",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=200,
    print_blob=True,
    suppress_health_check=_FUZZ_HEALTH,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # report a failure unshrunk, at once
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

"""Shared test configuration: hypothesis profiles, the repository root, a Dask cluster."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
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


@pytest.fixture
def dask_commands_cluster(tmp_path):
    """The address of a cluster started as on real machines: a ``dask scheduler`` process and
    one ``dask worker`` process (one thread), both ended after the test. Skips without the
    ``distributed`` extra."""
    pytest.importorskip("distributed")
    address_file = tmp_path / "scheduler.json"
    common = ["--scheduler-file", str(address_file), "--no-dashboard"]
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", "0", *common],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = None
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(address_file.read_text())["address"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", "--nthreads", "1", *common],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        yield address
    finally:
        for process in (worker, scheduler):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)

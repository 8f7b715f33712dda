"""The benchmark scripts run (smoke sizes only: tests are not timers)."""

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.parametrize(
    "argv",
    [
        ["benchmarks/bench_sde.py", "--quick", "--skip-peers"],
        ["benchmarks/bench_backends.py", "--paths", "64", "--steps", "50", "--repeats", "1"],
    ],
)
def test_benchmark_script_runs(argv):
    run = subprocess.run(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "float64" in run.stdout

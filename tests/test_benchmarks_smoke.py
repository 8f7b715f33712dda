"""The benchmark scripts run (smoke sizes only: tests are not timers)."""

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["benchmarks/bench_sde.py", "--quick", "--skip-peers"], "float64"),
        (
            ["benchmarks/bench_backends.py", "--paths", "64", "--steps", "50", "--repeats", "1"],
            "float64",
        ),
        (
            ["benchmarks/bench_kalman.py", "--quick", "--skip-peers", "--skip-scan"],
            "ours: kalman_filter",
        ),
        (["benchmarks/bench_scan.py", "--quick"], "blelloch"),
        (["benchmarks/bench_attention.py", "--quick", "--no-memory"], "isotropic AFA"),
        (["benchmarks/bench_oscillator.py", "--quick"], "closed"),
        (["benchmarks/bench_unrolled_afa.py", "--quick", "--repeats", "1"], "rotation-3d"),
        (
            ["benchmarks/bench_training.py", "--cases", "afa-2d-b", "--seeds", "0", "--steps", "3"],
            "afa-2d-b: ratio",
        ),
        (["benchmarks/bench_attention.py", "--probe-memory", "isotropic AFA", "32"], "peak_mib"),
    ],
)
def test_benchmark_script_runs(argv, expected):
    run = subprocess.run(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert expected in run.stdout

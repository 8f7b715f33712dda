"""benchmarks/bench_triton.py without a GPU: the exit path and its arithmetic helpers."""

import importlib.util
import math
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "bench_triton.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_triton", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_cuda_exits_2_with_one_line():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # hides any GPU from torch
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert run.returncode == 2
    assert run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a CUDA device" in lines[0], run.stderr


def test_attention_flops(bench):
    # causal forward: two T x T x D matmuls at 2 FLOPs per multiply-add, half of them masked
    assert bench.attention_flops(2, 8, 1024, 64) == 2 * 8 * 2 * 1024**2 * 64
    assert bench.attention_flops(1, 1, 10, 4, causal=False) == 4 * 100 * 4
    # forward + backward: 1 + 2.5 forwards
    assert bench.attention_flops(1, 1, 10, 4, backward=True) == 3.5 * 2 * 100 * 4


def test_tflops_and_speedup(bench):
    assert bench.tflops(3e12, 1.5) == pytest.approx(2.0)
    assert bench.speedup(2.0, 0.5) == pytest.approx(4.0)
    assert bench.speedup(0.5, 2.0) == pytest.approx(0.25)


def test_memory_slope(bench):
    lengths = [1024, 2048, 4096, 8192]
    assert bench.memory_slope(lengths, [3.0 * t for t in lengths]) == pytest.approx(1.0)
    assert bench.memory_slope(lengths, [t * t / 7 for t in lengths]) == pytest.approx(2.0)
    assert bench.memory_slope(lengths, [5.0] * 4) == pytest.approx(0.0, abs=1e-12)
    # a + b T with a dominant at small T: between 0 and 1
    slope = bench.memory_slope(lengths, [1e4 + t for t in lengths])
    assert 0.0 < slope < 1.0
    with pytest.raises(ValueError, match="two distinct lengths"):
        bench.memory_slope([64, 64], [1.0, 2.0])
    assert math.isfinite(bench.memory_slope([1, 2], [1.0, 2.0]))

"""The good properties, kept under test (issue 14, "What to build" 4), where tests/ lacked them:

* kill -9 of a ``python -m verify train`` process mid-run, then ``--resume``: the same
  parameters, optimizer state and metrics as an uninterrupted run (the existing test stops the
  run with an exception inside the process, not a kill);
* kill -9 of a writer that *replaces* an existing file: the target keeps its old bytes and the
  next write leaves no stray temporary file (tests/sde_sim/test_io.py covers a new target);
* finite float32 output at T = 65536 for every layer with an O(T) or O(T x block) path (slow:
  the attention layers are O(T^2) in time; KLA's scan is in tests/kernels/test_kla_layer.py).

Same seed, same bits is held by the fuzz references (`simulate`, `BrownianPath`, datasets) and
by tests/verify/test_training.py (training) and tests/sde_sim/test_scenario.py.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.fuzz.contract import record
from verify.cli import main as verify_main

TRAIN = [
    "train",
    "--layer",
    "afa",
    "--preset",
    "afa-2d",
    "--variant",
    "b",
    "--paths",
    "8",
    "--holdout-paths",
    "2",
    "--batch-size",
    "4",
    "--n-steps",
    "60",
    "--eval-every",
    "1",
    "--checkpoint-every",
    "1",
    "--quiet",
]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _step(run: Path) -> int:
    """The step of the run's checkpoint (-1 while there is none or it is being replaced)."""
    try:
        return int(torch.load(run / "checkpoint.pt", weights_only=False)["step"])
    except Exception:
        return -1


def _state(run: Path) -> dict:
    return torch.load(run / "checkpoint.pt", weights_only=False)


def _same(a, b, path="checkpoint") -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{path}: keys differ"
        for key in a:
            if key in ("elapsed_s", "elapsed"):  # wall-clock time, not state
                continue
            _same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{i}]")
    else:
        assert a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)), path


def _metrics(run: Path) -> list[str]:
    import json

    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in m.items() if k != "elapsed_s"} for m in lines]


# The child process: `python -m verify train ...`, each optimizer step slowed by 50 ms (the
# sleep changes no bits) so that the kill lands mid-run on any machine.
_SLOW_TRAIN = (
    "import sys, time, torch\n"
    "step = torch.optim.Adam.step\n"
    "def slow(self, *a, **k):\n"
    "    time.sleep(0.05)\n"
    "    return step(self, *a, **k)\n"
    "torch.optim.Adam.step = slow\n"
    "from verify.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def test_kill_9_during_verify_train_then_resume_equals_an_uninterrupted_run(tmp_path):
    steps = "30"
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_TRAIN, *TRAIN, "--steps", steps, "--out", str(cut)],
        cwd=REPO_ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    killed_at = -1
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and child.poll() is None:
            killed_at = _step(cut)
            if killed_at >= 3:
                break
            time.sleep(0.05)
        assert child.poll() is None, f"the run ended before it could be killed: {child.stderr}"
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    interrupted = _step(cut)
    assert 3 <= interrupted < int(steps)
    # Resume in this process, and run the same configuration uninterrupted.
    assert verify_main([*TRAIN, "--steps", steps, "--out", str(cut), "--resume"]) == 0
    assert verify_main([*TRAIN, "--steps", steps, "--out", str(whole)]) == 0
    _same(_state(cut), _state(whole))
    assert _metrics(cut) == _metrics(whole)
    assert sorted(p.name for p in cut.iterdir()) == sorted(p.name for p in whole.iterdir())
    record("property: kill -9 during verify train, then --resume", "agreed")


def test_kill_9_while_replacing_a_file_keeps_the_old_bytes_and_leaves_no_stray_file(tmp_path):
    target = tmp_path / "data.npz"
    target.write_bytes(b"the old contents")
    script = (
        "import time\n"
        "from sde_sim import io\n"
        "def slow(fh):\n"
        "    fh.write(b'new' * 100000); fh.flush(); time.sleep(60)\n"
        f"io.atomic_write({str(target)!r}, slow, overwrite=True)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, env=_env())
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".data.npz.*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # let the writer put its bytes into the temporary file
    finally:
        child.kill()
        child.wait()
    assert target.read_bytes() == b"the old contents"
    assert len(list(tmp_path.glob(".data.npz.*.tmp"))) == 1  # the killed writer's orphan
    from sde_sim import io

    io.atomic_write(target, lambda fh: fh.write(b"replaced"), overwrite=True)
    assert target.read_bytes() == b"replaced"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.npz"]
    record("property: kill -9 during a write", "agreed")


# ---- T = 65536 in float32 ---------------------------------------------------------------------


def _long_layers():
    from kernels.layers.afa import AdaptiveFilterAttention
    from kernels.layers.afa_transformer import AFATransformerBlock
    from kernels.layers.kla import KalmanLinearAttention
    from kernels.layers.rfa import RobustFilterAttention
    from kernels.layers.rt_afa import RTAdaptiveFilterAttention
    from kernels.layers.rt_transformer import RTRobustFilterAttention
    from kernels.layers.unrolled_afa import UnrolledAdaptiveFilterAttention

    g = torch.Generator().manual_seed(0)
    E = 4
    return {
        # O(T) scans and the chunked Kalman attention: cheap
        "KalmanLinearAttention": lambda: KalmanLinearAttention(E, num_slots=2, generator=g),
        "UnrolledAdaptiveFilterAttention(nu=inf)": lambda: UnrolledAdaptiveFilterAttention(
            E, 1, nu=math.inf, generator=g
        ),
        # O(T x block) memory, O(T^2) time
        "UnrolledAdaptiveFilterAttention(nu=4)": lambda: UnrolledAdaptiveFilterAttention(
            E, 1, nu=4.0, generator=g
        ),
        "AdaptiveFilterAttention": lambda: AdaptiveFilterAttention(E, 1, generator=g),
        "AFATransformerBlock": lambda: AFATransformerBlock(E, 1, generator=g),
        "RobustFilterAttention": lambda: RobustFilterAttention(E, 1, generator=g),
        "RTAdaptiveFilterAttention": lambda: RTAdaptiveFilterAttention(E, 1, generator=g),
        "RTRobustFilterAttention": lambda: RTRobustFilterAttention(E, 1, generator=g),
    }


# In CI: KLA's O(T) scan (about 5 s on the shared machine). The unrolled AFA at nu = inf is
# O(T x chunk) but took 42 s there: `slow`, with the O(T x block) layers.
CHEAP = ("KalmanLinearAttention",)


def _finite_at_65536(name: str) -> None:
    layer = _long_layers()[name]().eval()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 65536, layer.embed_dim, generator=g)
    t = torch.cumsum(0.5 + torch.rand(65536, generator=g), 0)  # irregular, up to ~65536
    with torch.no_grad():
        out = layer(x, t)[0]
    assert out.dtype == torch.float32 and torch.isfinite(out).all(), name
    record(f"property: T = 65536 float32 finite ({name})", "agreed")


@pytest.mark.parametrize("name", CHEAP)
def test_finite_at_T_65536_in_float32_linear_paths(name):
    _finite_at_65536(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in _long_layers() if n not in CHEAP])
def test_finite_at_T_65536_in_float32_blocked_paths(name):
    """O(T x block) memory; O(T^2) time (the unrolled AFA at nu = inf: O(T x chunk)): from
    tens of seconds to minutes each on two cores, so `slow`."""
    _finite_at_65536(name)

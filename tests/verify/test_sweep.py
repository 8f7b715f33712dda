"""`python -m verify sweep` (issue 18, part 2): a grid of tiny trainings, serially and on a real
Dask `LocalCluster` (2 worker processes), with a worker killed mid-run, resumed and skipped
points, and one-line usage errors."""

import json
import os
import subprocess
import sys

import pytest
import torch

from verify import sweep
from verify.cli import main
from verify.training import TrainConfig, load_checkpoint, train

# Four tiny runs: two cases x two seeds, 4 optimizer steps on 16 paths of 21 measurements,
# checkpoints every 2 steps (so a run killed after its first checkpoint has 2 steps to redo).
SETTINGS = {
    "steps": 4,
    "n_steps": 20,
    "n_paths": 16,
    "holdout_paths": 4,
    "batch_size": 4,
    "eval_every": 2,
    "checkpoint_every": 2,
}
GRID = ["--cases", "afa-2d-b", "ou", "--seeds", "0-1", "--quiet"]
GRID += [arg for key, value in SETTINGS.items() for arg in ("--set", f"{key}={value}")]
RUNS = ["afa-2d-b/afa/seed-0", "afa-2d-b/afa/seed-1", "ou/afa/seed-0", "ou/afa/seed-1"]


def _sweep(out, *extra):
    return main(["sweep", *GRID, "--out", str(out), *extra])


def _table(out) -> tuple[bytes, bytes]:
    return (out / "results.csv").read_bytes(), (out / "results.json").read_bytes()


def _attempts(out, run) -> list[dict]:
    lines = (out / run / sweep.ATTEMPTS).read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The grid trained serially in this process: the reference table."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("serial") / "sweep"
    assert _sweep(out) == 0
    return out


def test_serial_sweep_writes_a_table_of_train_runs(serial):
    rows = json.loads((serial / "results.json").read_text())["rows"]
    assert [r["run"] for r in rows] == RUNS  # grid order: case, layer, seed
    for row in rows:
        assert row["status"] == "ok" and row["steps"] == 4 and row["reference"] == "kalman"
        assert row["heldout"] > 0 and row["ratio"] == row["heldout"] / row["reference_mse"]
        run = serial / row["run"]
        assert {"config.json", "metrics.jsonl", "checkpoint.pt"} <= {p.name for p in run.iterdir()}
        # the run directory is `verify train`'s: the same config trains to the same metrics
        config = TrainConfig(**json.loads((run / "config.json").read_text()))
        again = train(config, quiet=True).metrics[-1]
        assert again["heldout_mse"] == row["heldout"]
        assert again["train_mse"] == row["train_loss"]
    # negative control: the seeds differ, so equal tables below are not a constant's
    assert len({r["heldout"] for r in rows}) == 4
    assert (serial / "results.csv").read_text().count("\n") == 5


def test_two_workers_give_the_serial_table(serial, tmp_path):
    pytest.importorskip("distributed")
    out = tmp_path / "parallel"
    assert _sweep(out, "--workers", "2") == 0
    assert _table(out) == _table(serial)  # bit-identical: CSV and JSON bytes


def test_a_killed_worker_loses_nothing(serial, tmp_path, monkeypatch):
    """The first attempt of one point exits its worker process (``os._exit``) right after its
    first checkpoint; the scheduler reruns it on the restarted worker, which resumes from that
    checkpoint, and the table is the uninterrupted serial one. The cluster is reached by its
    address (``--scheduler``), as a cluster started elsewhere would be."""
    distributed = pytest.importorskip("distributed")
    marker = tmp_path / "killed"
    monkeypatch.setenv(sweep.CRASH_VARIABLE, f"ou/afa/seed-0={marker}")  # before the spawn
    out = tmp_path / "killed-sweep"
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        assert _sweep(out, "--scheduler", cluster.scheduler_address) == 0
    assert marker.read_text().strip() == "2"  # the worker died with the step-2 checkpoint
    starts = [a["start_step"] for a in _attempts(out, "ou/afa/seed-0")]
    assert starts == [0, 2]  # retried once, from the checkpoint
    assert len({a["pid"] for a in _attempts(out, "ou/afa/seed-0")}) == 2
    assert _table(out) == _table(serial)


def test_rerun_skips_every_finished_point(serial, tmp_path, capsys):
    out = tmp_path / "again"
    assert _sweep(out) == 0
    stamps = {run: os.stat(out / run / "checkpoint.pt").st_mtime_ns for run in RUNS}
    capsys.readouterr()
    assert _sweep(out) == 0
    assert "0 trained, 4 already complete, 0 failed" in capsys.readouterr().out
    assert {run: os.stat(out / run / "checkpoint.pt").st_mtime_ns for run in RUNS} == stamps
    assert all(len(_attempts(out, run)) == 1 for run in RUNS)  # nothing started again
    assert _table(out) == _table(serial)


def test_an_interrupted_point_resumes_from_its_checkpoint(serial, tmp_path):
    """A point cut after its step-2 checkpoint (as Ctrl-C leaves it) continues from step 2."""
    (point,) = [
        p for p in sweep.plan(["ou"], None, [1], overrides=SETTINGS) if p.run == "ou/afa/seed-1"
    ]
    out = tmp_path / "cut"

    def stop(step, model):
        if step == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(point.config, out / point.run, quiet=True, callback=stop)
    (out / sweep.MARKER).write_text("{}")
    assert load_checkpoint(out / point.run / "checkpoint.pt")["step"] == 2
    assert _sweep(out) == 0
    assert [a["start_step"] for a in _attempts(out, point.run)] == [2]
    assert _table(out) == _table(serial)


def test_another_configuration_needs_force(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "--cases", "ou", "--seeds", "0", "--quiet", "--out", str(out)]
    small = [arg for k, v in SETTINGS.items() for arg in ("--set", f"{k}={v}")]
    assert main([*argv, *small]) == 0
    capsys.readouterr()
    assert main([*argv, *small, "--set", "lr=0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another configuration" in err[0] and "--force" in err[0]
    assert main([*argv, *small, "--set", "lr=0.5", "--force"]) == 0
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    saved = json.loads((out / "ou/afa/seed-0/config.json").read_text())
    assert saved["lr"] == 0.5 and row["status"] == "ok"


@pytest.mark.parametrize(
    "text, seeds",
    [("0-9", tuple(range(10))), ("0,2,5", (0, 2, 5)), ("0-3,7", (0, 1, 2, 3, 7)), ("4", (4,))],
)
def test_seeds(text, seeds):
    assert sweep.parse_seeds(text) == seeds


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--seeds", "0-x"], "--seeds expects"),
        (["--seeds", "5-2"], "runs backwards"),
        (["--seeds", "-1"], "--seeds expects"),
        (["--seeds", "1,1"], "more than once"),
        (["--seeds", ""], "--seeds expects"),
        (["--seeds", "0", "--cases", "no-such-case"], "--cases: unknown 'no-such-case'"),
        (["--seeds", "0", "--cases", "ou,ou"], "--cases: 'ou' given twice"),
        (["--seeds", "0", "--layers", "no-such-layer"], "--layers: unknown 'no-such-layer'"),
        (["--seeds", "0", "--set", "seed=3"], "--set seed"),
        (["--seeds", "0", "--set", "nonsense=3"], "not a training setting"),
        (["--seeds", "0", "--set", "steps=0"], "steps must be an integer >= 1"),
        (["--seeds", "0", "--set", "steps"], "KEY=VALUE"),
        (["--seeds", "0", "--workers", "0"], "--workers must be >= 1"),
        (["--seeds", "0", "--workers", "2", "--scheduler", "tcp://x:1"], "not allowed with"),
        (["--seeds", "0", "--threads", "0"], "--threads must be >= 1"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, extra, words):
    out = tmp_path / "never"
    assert main(["sweep", "--cases", "ou", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert not out.exists()  # refused before anything is written


def test_a_folder_that_is_not_a_sweep_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["sweep", "--cases", "ou", "--seeds", "0", "--out", str(tmp_path)]) == 2
    assert "sweep.json" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_serial_sweep_imports_no_dask(tmp_path):
    """Without --workers/--scheduler the sweep runs in-process and Dask stays unimported."""
    code = (
        "import sys; from verify.cli import main; "
        f"status = main(['sweep', *{GRID[:2]!r}, '--seeds', '0', '--set', 'steps=1', "
        f"'--set', 'n_steps=20', '--set', 'n_paths=4', '--set', 'batch_size=4', "
        f"'--set', 'holdout_paths=2', '--quiet', '--out', {str(tmp_path / 's')!r}]); "
        "assert status == 0, status; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_without_dask_one_line_says_how_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    argv = ["sweep", "--cases", "ou", "--seeds", "0", "--workers", "2", "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "filtersuite[distributed]" in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_a_failing_point_gets_a_failed_row_and_exit_1(tmp_path, capsys):
    """KLA takes no ``nu``: its points fail (row and exit status say so), the others train."""
    out = tmp_path / "sweep"
    small = [arg for k, v in SETTINGS.items() for arg in ("--set", f"{k}={v}")]
    argv = ["sweep", "--cases", "ou", "--layers", "afa", "kla", "--seeds", "0", "--quiet"]
    assert main([*argv, *small, "--set", 'layer_options={"nu": 1.0}', "--out", str(out)]) == 1
    assert "FAILED ou/kla/seed-0: layer_options do not fit layer 'kla'" in capsys.readouterr().out
    afa, kla = json.loads((out / "results.json").read_text())["rows"]
    assert afa["status"] == "ok" and afa["heldout"] > 0
    assert kla["status"] == "failed" and kla["heldout"] is None and "kla" in kla["error"]

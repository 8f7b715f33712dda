"""The error contract of the command-line interfaces (`sde_sim.plumbing.run_cli`) and the
shared output checks: exit 2 and one line for bad usage, 1 and one line for a failure at run
time, 130 on Ctrl-C; a traceback only with ``FILTERSUITE_DEBUG=1``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sde_sim import cli, plumbing
from sde_sim.plumbing import UsageError, json_options, run_cli
from tests.conftest import REPO_ROOT

PROG = "python -m demo"


def _raising(exc: BaseException):
    def run(argv):
        raise exc

    return run


def _call(capsys, run, argv=()):
    code = run_cli(run, list(argv), prog=PROG)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv(plumbing.DEBUG_VARIABLE, raising=False)


@pytest.mark.parametrize(
    "exc",
    [
        UsageError("--steps must be >= 1"),
        ValueError("dt must be > 0, got 0"),
        TypeError("seed must be an int, got str"),
        FileExistsError("out.npz exists; pass --force to overwrite it"),
        FileNotFoundError("in.npz does not exist"),
    ],
)
def test_bad_usage_is_one_line_and_status_2(capsys, exc):
    code, out, err = _call(capsys, _raising(exc))
    assert code == 2 and out == ""
    assert err == f"{PROG}: error: {exc}\n"


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (RuntimeError("CUDA error:\n  out of memory"), "RuntimeError: CUDA error: out of memory"),
        (KeyError("step"), "KeyError: 'step'"),
        (MemoryError(), "MemoryError"),
        (OSError(28, "No space left on device"), "[Errno 28] No space left on device"),
        (PermissionError(13, "Permission denied"), "[Errno 13] Permission denied"),
    ],
)
def test_a_failure_at_run_time_is_one_line_and_status_1(capsys, exc, line):
    code, out, err = _call(capsys, _raising(exc))
    assert code == 1 and out == ""
    assert err == f"{PROG}: error: {line}\n"
    assert "Traceback" not in err


def test_interrupted_is_status_130_with_its_line(capsys):
    code, _, err = _call(capsys, _raising(KeyboardInterrupt()))
    assert code == 130 and err == f"{PROG}: interrupted\n"
    code = run_cli(_raising(KeyboardInterrupt()), [], prog=PROG, interrupted="stopped; resume")
    assert code == 130 and capsys.readouterr().err == f"{PROG}: stopped; resume\n"


@pytest.mark.parametrize(("value", "shown"), [("1", True), ("0", False), ("", False)])
def test_filtersuite_debug_shows_the_traceback(capsys, monkeypatch, value, shown):
    monkeypatch.setenv(plumbing.DEBUG_VARIABLE, value)
    for exc, status in ((ValueError("bad dt"), 2), (RuntimeError("kaput"), 1)):
        code, _, err = _call(capsys, _raising(exc))
        assert code == status
        assert ("Traceback (most recent call last)" in err) is shown
        assert err.endswith(f"{PROG}: error: {plumbing.one_line(exc)}\n")
        if not shown:
            assert err.count("\n") == 1


def test_status_and_arguments_pass_through(capsys):
    seen = []
    assert run_cli(lambda argv: seen.append(argv), ["a", "b"], prog=PROG) == 0
    assert seen == [["a", "b"]]
    assert run_cli(lambda argv: 1, [], prog=PROG) == 1  # e.g. a check failed
    with pytest.raises(SystemExit):  # --help exits through argparse, untouched
        run_cli(
            lambda argv: plumbing.OneLineParser(prog=PROG).parse_args(["--help"]), [], prog=PROG
        )
    assert "usage:" in capsys.readouterr().out


def test_each_cli_reports_a_failure_at_run_time_as_status_1(capsys, monkeypatch):
    """The contract holds for the sde_sim CLI's own `main`: a run-time failure inside the
    command (here an injected RuntimeError) is one line and status 1."""

    def boom(args):
        raise RuntimeError("the integrator broke")

    monkeypatch.setattr(cli, "_simulate", boom)
    assert cli.main(["simulate", "--system", "afa-2d"]) == 1
    err = capsys.readouterr().err
    assert err == "python -m sde_sim: error: RuntimeError: the integrator broke\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["sde_sim", "simulate", "--system", "nope"],
        ["verify", "train", "--out", "{tmp}/unused", "--steps", "0"],
        ["figures", "fig9"],
    ],
)
def test_module_entry_points_hold_the_contract(tmp_path, argv):
    """``python -m PACKAGE``: one line and status 2 for bad usage; with FILTERSUITE_DEBUG=1 the
    same status after the traceback."""
    env = {k: v for k, v in os.environ.items() if k != plumbing.DEBUG_VARIABLE}
    command = [sys.executable, "-m", *(a.format(tmp=tmp_path) for a in argv)]
    # from the repository root, so that -m runs this checkout's packages
    plain = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT)
    assert plain.returncode == 2, plain.stderr
    assert plain.stderr.count("\n") == 1 and f"python -m {argv[0]}" in plain.stderr
    assert "Traceback" not in plain.stderr
    env[plumbing.DEBUG_VARIABLE] = "1"
    debug = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT)
    assert debug.returncode == 2
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.endswith(plain.stderr)
    assert not (tmp_path / "unused").exists()


def test_check_target_refuses_before_anything_is_written(tmp_path):
    plumbing.check_target(None, "--out", force=False)
    plumbing.check_target(tmp_path / "new" / "deeper" / "a.npz", "--out", force=False)
    existing = tmp_path / "a.npz"
    existing.write_text("mine")
    with pytest.raises(UsageError, match="a.npz exists; pass --force to overwrite it"):
        plumbing.check_target(existing, "--out", force=False)
    plumbing.check_target(existing, "--out", force=True)
    with pytest.raises(UsageError, match=r"--plot must end in \.png"):
        plumbing.check_target(tmp_path / "p.jpg", "--plot", force=False, suffix=".png")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(UsageError, match="is not a writable folder"):
        plumbing.check_target(blocker / "sub" / "x.json", "--json", force=False)
    assert existing.read_text() == "mine"


def test_package_version_is_recorded():
    assert isinstance(plumbing.package_version(), str) and plumbing.package_version()


def test_json_options_parse_key_value_items_and_name_the_flag():
    assert json_options(["nu=1.0", "learn_nu=true", 'name="x"'], "--opt") == {
        "nu": 1.0,
        "learn_nu": True,
        "name": "x",
    }
    for item, words in (("nu", "--opt expects KEY=VALUE"), ("nu=one", "--opt nu: VALUE")):
        with pytest.raises(UsageError, match=words):
            json_options([item], "--opt")

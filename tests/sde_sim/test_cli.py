"""``python -m sde_sim``: listing, simulating, writing files, and one-line errors with status 2."""

import subprocess
import sys

import numpy as np
import pytest

from sde_sim import io, presets
from sde_sim.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_every_preset_and_variant(capsys):
    code, out, _ = run(capsys, "list")
    assert code == 0
    for preset in presets.PRESETS.values():
        assert preset.name in out and preset.source in out
        for variant in preset.variants:
            assert f"--variant {variant.name}" in out


def test_simulate_writes_data_and_plot(tmp_path, capsys):
    out_file, plot = tmp_path / "osc.npz", tmp_path / "osc.png"
    code, out, err = run(
        capsys,
        "simulate",
        "--system",
        "oscillator",
        "--variant",
        "over",
        "--paths",
        "3",
        "--steps",
        "200",
        "--obs-rate",
        "20",
        "--missing",
        "0.2",
        "--method",
        "exact",
        "--seed",
        "9",
        "--out",
        str(out_file),
        "--plot",
        str(plot),
    )
    assert code == 0, err
    assert "oscillator (over): 3 paths x 201 points in 2-D" in out
    sim = io.load(out_file)
    assert sim.x.shape == (3, 201, 2)
    assert sim.meta["preset"] == "oscillator" and sim.meta["variant"] == "over"
    assert sim.meta["method"] == "exact" and sim.meta["seed"] == 9
    assert sim.meta["scenario"]["observations"] == {"type": "PoissonTimes", "rate": 20.0}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rt_mode_and_dtype(tmp_path, capsys):
    out_file = tmp_path / "rt.npz"
    code, _, err = run(
        capsys,
        "simulate",
        "--system",
        "rt-sphere-3d",
        "--variant",
        "b",
        "--mode",
        "frozen-frame",
        "--method",
        "exact",
        "--dtype",
        "float32",
        "--paths",
        "2",
        "--out",
        str(out_file),
    )
    assert code == 0, err
    sim = io.load(out_file)
    assert sim.x.dtype == np.float32
    assert sim.meta["scenario"]["system"]["mode"] == "frozen-frame"


def test_force_is_needed_to_overwrite(tmp_path, capsys):
    out_file = tmp_path / "a.npz"
    assert run(capsys, "simulate", "--system", "ou", "--out", str(out_file))[0] == 0
    before = out_file.read_bytes()
    code, _, err = run(capsys, "simulate", "--system", "ou", "--seed", "1", "--out", str(out_file))
    assert code == 2 and "exists; pass --force" in err
    assert out_file.read_bytes() == before
    assert (
        run(capsys, "simulate", "--system", "ou", "--seed", "1", "--out", str(out_file), "--force")[
            0
        ]
        == 0
    )
    assert out_file.read_bytes() != before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "--system", "nope"], "unknown system 'nope'; known: afa-2d"),
        (["simulate", "--system", "afa-2d", "--variant", "q"], "unknown variant 'q' of afa-2d"),
        (["simulate", "--system", "afa-2d", "--dt", "-0.1"], "dt must be > 0, got -0.1"),
        (["simulate", "--system", "afa-2d", "--dt", "nan"], "dt must be finite"),
        (["simulate", "--system", "afa-2d", "--steps", "0"], "n_steps must be >= 1"),
        (["simulate", "--system", "afa-2d", "--obs-every", "0"], "every must be >= 1"),
        (["simulate", "--system", "afa-2d", "--paths", "0"], "n_paths must be >= 1"),
        (["simulate", "--system", "afa-2d", "--outliers", "2"], "outlier_fraction must be in"),
        (["simulate", "--system", "afa-2d", "--mode", "literal"], "--mode applies to radial"),
        (
            ["simulate", "--system", "rt-sphere-3d", "--method", "exact"],
            "--method exact needs a linear system or --mode frozen-frame",
        ),
        (["simulate", "--system", "afa-2d", "--out", "x.txt"], "--out must end in .npz"),
        (["simulate", "--system", "afa-2d", "--plot", "x.npz"], "--plot must end in .png"),
        (["simulate"], "the following arguments are required: --system"),
        (
            ["simulate", "--system", "afa-2d", "--obs-every", "3", "--obs-rate", "2"],
            "not allowed with argument",
        ),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["simulate", "--system", "afa-2d", "--steps", "1000000000000"], "GiB"),
        (["simulate", "--system", "afa-2d", "--paths", "1000000000000"], "GiB"),
        (["simulate", "--system", "afa-2d", "--obs-rate", "1e12"], "more than this machine"),
    ],
)
def test_errors_are_one_line_with_status_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("python -m sde_sim: error: ")
    assert message in err


@pytest.mark.parametrize("dt", ["10", "1e20"])
def test_paths_that_overflow_are_refused_and_nothing_is_written(tmp_path, capsys, dt):
    """An Euler step far past the stable one (dt < 0.198 for afa-2d) overflows the paths: one
    line naming the step and the stable bound, exit 2, no file; a stable step still writes."""
    out, plot = tmp_path / "x.npz", tmp_path / "x.png"
    argv = ["simulate", "--system", "afa-2d", "--paths", "2", "--out", str(out)]
    code, _, err = run(capsys, *argv, "--dt", dt, "--plot", str(plot))
    assert code == 2 and err.count("\n") == 1
    assert "the simulated paths overflowed" in err and f"dt = {float(dt):g}" in err
    assert "dt < 0.198" in err
    assert not out.exists() and not plot.exists()
    assert run(capsys, *argv, "--dt", "0.01")[0] == 0 and out.exists()  # control


def test_simulate_all_writes_every_variant(tmp_path, capsys):
    code, out, err = run(capsys, "simulate-all", "--out", str(tmp_path), "--paths", "2")
    assert code == 0, err
    expected = {
        f"{p.name}-{v.name}{ext}"
        for p in presets.PRESETS.values()
        for v in p.variants
        for ext in (".npz", ".png")
    }
    assert {f.name for f in tmp_path.iterdir()} == expected
    code, _, err = run(capsys, "simulate-all", "--out", str(tmp_path), "--paths", "2")
    assert code == 2 and "exists; pass --force" in err


def test_module_entry_point_help_and_error():
    help_run = subprocess.run(
        [sys.executable, "-m", "sde_sim", "simulate", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert help_run.returncode == 0 and "--obs-rate" in help_run.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "sde_sim", "simulate", "--system", "x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


def test_a_failing_command_leaves_nothing_behind(tmp_path, capsys):
    """An unwritable --plot target (here under a regular file, which no user can write into)
    is found before the .npz is written; simulate-all checks every target before it
    simulates, so a clash with its last variant writes none of the others."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    out = tmp_path / "a.npz"
    plot = blocker / "sub" / "p.png"
    code, _, err = run(capsys, "simulate", "--system", "ou", "--out", str(out), "--plot", str(plot))
    assert code == 2 and "is not a writable folder" in err and not out.exists()
    gallery = tmp_path / "gallery"
    gallery.mkdir()
    last = [f"{p.name}-{v.name}.png" for p in presets.PRESETS.values() for v in p.variants][-1]
    (gallery / last).write_text("mine")
    code, _, err = run(capsys, "simulate-all", "--out", str(gallery), "--paths", "2")
    assert code == 2 and "exists; pass --force" in err
    assert [f.name for f in gallery.iterdir()] == [last] and (gallery / last).read_text() == "mine"

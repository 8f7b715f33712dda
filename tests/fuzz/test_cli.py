"""Fuzz the command-line interfaces in-process through their ``main(argv)``: ``python -m
sde_sim list/simulate/simulate-all``, ``python -m verify`` (``--only``, ``--list``, ``--json``,
``--table``, ``--html``), ``python -m verify train`` (with ``--resume`` over corrupt run files) and
``python -m figures``. Each run happens in a fresh folder holding a user's file; see
`tests.fuzz.cli` for what each exit status must come with."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import strategies as st

from figures.cli import main as figures_main
from sde_sim import io as sio
from sde_sim.cli import main as sde_main
from tests.fuzz.cli import cli_expect
from verify.cli import main as verify_main

MINE = b"the user's own bytes"
NUMBERS = [
    "0",
    "-1",
    "1",
    "2",
    "3",
    "1.5",
    "abc",
    "",
    "1e12",
    "nan",
    "inf",
    "-inf",
    "1e-300",
    "1e300",
    "99999999999999999999",
]


def _folder(tmp: str) -> Path:
    folder = Path(tmp)
    (folder / "mine.npz").write_bytes(MINE)
    (folder / "mine.png").write_bytes(MINE)
    (folder / "sub").mkdir()
    (folder / "sub" / "notes.txt").write_bytes(MINE)
    (folder / "afile").write_bytes(MINE)
    return folder


def _path(draw, folder: Path, suffix: str) -> str:
    choice = draw(
        st.sampled_from(
            [
                f"new{suffix}",
                f"mine{suffix}",
                f"nested/deeper/new{suffix}",
                "sub",
                "new.txt",
                f"afile/x{suffix}",
                f"ro/new{suffix}",
                "",
                f"sub/new{suffix}",
            ]
        )
    )
    if choice.startswith("ro/"):
        (folder / "ro").mkdir(exist_ok=True)
        os.chmod(folder / "ro", 0o500)
    return str(folder / choice) if choice else ""


# ---- python -m sde_sim ---------------------------------------------------------------------

SYSTEMS = [
    "afa-2d",
    "ou",
    "oscillator",
    "rotation-3d",
    "rt-sphere-3d",
    "rfa-ensemble-2d",
    "nope",
    "",
    "AFA-2D",
]


@st.composite
def simulate_argv(draw, folder: Path):
    argv = ["simulate", "--system", draw(st.sampled_from(SYSTEMS))]
    options = {
        "--variant": ["a", "b", "c", "under", "zz", ""],
        "--mode": ["literal", "frozen-frame", "other"],
        "--paths": NUMBERS + ["2"] * 4,
        "--steps": NUMBERS + ["20"] * 4,
        "--dt": NUMBERS + ["0.01"] * 3,
        "--obs-every": NUMBERS + ["2"] * 3,
        "--obs-rate": NUMBERS + ["5"] * 3,
        "--outliers": ["0.1", "1.5", "-0.1", "nan", "1", "0"],
        "--missing": ["0.2", "1.5", "-0.1", "nan", "1", "0"],
        "--method": ["euler", "exact", "rk4"],
        "--dtype": ["float32", "float64", "float16"],
        "--seed": ["0", "3", "-1", "1.5", "x"],
    }
    for flag in draw(st.lists(st.sampled_from(sorted(options)), max_size=5, unique=True)):
        argv += [flag, draw(st.sampled_from(options[flag]))]
    if "--steps" not in argv:  # keep valid runs small
        argv += ["--steps", "30"]
    if draw(st.booleans()):  # a .zarr store a quarter of the time, written block by block
        suffix = draw(st.sampled_from([".npz", ".npz", ".npz", ".zarr"]))
        argv += ["--out", _path(draw, folder, suffix)]
    if draw(st.integers(0, 5)) == 0:
        argv += ["--chunk-paths", draw(st.sampled_from(["4096", "8192", "100", "0", "x"]))]
    if draw(st.integers(0, 5)) == 0:
        argv += ["--plot", _path(draw, folder, ".png")]
    if draw(st.booleans()):
        argv.append("--force")
    if draw(st.integers(0, 9)) == 0:
        argv.append(draw(st.sampled_from(["--bogus", "extra", "--paths"])))
    return argv


def test_sde_sim_simulate(fuzz):
    def body(data):
        with tempfile.TemporaryDirectory() as tmp:
            folder = _folder(tmp)
            argv = data.draw(simulate_argv(folder))
            try:
                code = cli_expect(
                    "python -m sde_sim simulate",
                    sde_main,
                    argv,
                    folder,
                    protected=["mine.npz", "mine.png"],
                )
                if code == 0 and "--out" in argv:
                    out = argv[argv.index("--out") + 1]
                    loaded = sio.load(out)  # what simulate wrote reads back
                    assert np.all(np.isfinite(loaded.x)), "non-finite paths written"
            finally:
                if (folder / "ro").exists():
                    os.chmod(folder / "ro", 0o700)

    fuzz.run("cli_sde_sim_simulate", st.data(), body, ci=30, slow=500)


def test_sde_sim_list_and_usage(fuzz):
    argvs = st.sampled_from(
        [
            ["list"],
            ["list", "x"],
            [],
            ["--help-me"],
            ["simulate"],
            ["simulate-all"],
            ["bogus"],
            ["simulate", "--system"],
            ["simulate-all", "--out"],
        ]
    )

    def body(argv):
        with tempfile.TemporaryDirectory() as tmp:
            folder = _folder(tmp)
            cli_expect("python -m sde_sim (usage)", sde_main, argv, folder)

    fuzz.run("cli_sde_sim_usage", argvs, body, ci=9, slow=30)


def test_sde_sim_simulate_all_refusals(fuzz):
    """simulate-all refuses before writing anything: an existing target, a file as --out, bad
    --paths/--seed, an unwritable folder."""

    @st.composite
    def cases(draw):
        kind = draw(st.sampled_from(["existing", "file", "paths", "seed", "readonly"]))
        if kind == "readonly" and os.geteuid() == 0:  # root writes anywhere: a full, slow run
            kind = "file"
        value = draw(st.sampled_from(["-1", "abc", "1.5"]))  # bad for --paths and --seed
        return kind, value

    def body(case):
        kind, value = case
        with tempfile.TemporaryDirectory() as tmp:
            folder = _folder(tmp)
            gallery = folder / "gallery"
            gallery.mkdir()
            (gallery / "ou-default.npz").write_bytes(MINE)
            argv = ["simulate-all", "--out", str(gallery), "--paths", "1"]
            if kind == "file":
                argv[2] = str(folder / "afile")
            elif kind == "paths":
                argv[4] = value
            elif kind == "seed":
                argv += ["--seed", value]
            elif kind == "readonly":
                argv[2] = str(folder / "ro" / "gallery")
                (folder / "ro").mkdir()
                os.chmod(folder / "ro", 0o500)
            if kind != "existing":
                (gallery / "ou-default.npz").unlink()
            try:
                # every case here must fail before simulating (a valid run is `slow`, below)
                names = [p.name for p in gallery.iterdir()] if gallery.exists() else []
                cli_expect("python -m sde_sim simulate-all", sde_main, argv, folder)
                assert [p.name for p in gallery.iterdir()] == names
            finally:
                if (folder / "ro").exists():
                    os.chmod(folder / "ro", 0o700)

    fuzz.run("cli_sde_sim_all", cases(), body, ci=8, slow=60)


@pytest.mark.slow
def test_sde_sim_simulate_all_writes_every_variant_once(tmp_path):
    """A valid gallery run (about 25 s: every variant simulated and plotted), then again
    without --force: refused, nothing changed."""
    folder = _folder(str(tmp_path))
    gallery = folder / "gallery"
    cli_expect(
        "python -m sde_sim simulate-all",
        sde_main,
        ["simulate-all", "--out", str(gallery), "--paths", "1"],
        folder,
        must_succeed=True,
    )
    names = sorted(p.name for p in gallery.iterdir())
    assert names and all(n.endswith((".npz", ".png")) for n in names)
    cli_expect(
        "python -m sde_sim simulate-all",
        sde_main,
        ["simulate-all", "--out", str(gallery), "--paths", "1"],
        folder,
    )


# ---- corrupt .npz files through sde_sim.io.load ---------------------------------------------


def test_io_load_corrupt_files(fuzz):
    """`sde_sim.io.load` on damaged files: truncated, garbage, a wrong entry, a missing file, a
    folder: a clean error (ValueError, FileNotFoundError, ...) naming the file or entry."""
    from sde_sim import presets, simulate
    from tests.fuzz.contract import FILE_ERRORS, expect

    sim = simulate(presets.get("ou").scenario(), 2, seed=0)

    @st.composite
    def cases(draw):
        kind = draw(
            st.sampled_from(["truncate", "garbage", "empty", "missing", "folder", "entry", "valid"])
        )
        return (
            kind,
            draw(st.integers(1, 10**6)),
            draw(st.sampled_from(["t", "x", "z", "t_obs", "x_obs", "meta", "missing", "outlier"])),
        )

    def body(case):
        kind, cut, entry = case
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "sim.npz"
            sio.save(sim, path)
            data = path.read_bytes()
            if kind == "truncate":
                path.write_bytes(data[: cut % len(data)])
            elif kind == "garbage":
                path.write_bytes(bytes(range(256)) * (cut % 7 + 1))
            elif kind == "empty":
                path.write_bytes(b"")
            elif kind == "missing":
                path.unlink()
            elif kind == "folder":
                path.unlink()
                path.mkdir()
            elif kind == "entry":
                arrays = dict(np.load(path))
                arrays[entry] = [
                    np.array("text"),
                    np.zeros((2, 2, 2, 2)),
                    np.array([]),
                    np.array([np.nan]),
                ][cut % 4]
                np.savez(path, **arrays)

            def reference(loaded):
                np.testing.assert_array_equal(loaded.x, sim.x)

            expect(
                "sde_sim.io.load",
                lambda: sio.load(path),
                allowed=FILE_ERRORS,
                names=("sim.npz", entry, str(path)),
                valid=kind == "valid",
                finite=lambda r: [("x", r.x), ("t", r.t)],
                reference=reference if kind == "valid" else None,
                describe=kind,
            )

    fuzz.run("io_load", cases(), body, ci=25, slow=300)


# ---- python -m verify ------------------------------------------------------------------------

FAST_CHECK = "dle.mode-solution"


@st.composite
def verify_argv(draw, folder: Path):
    argv = ["--quick"] if draw(st.booleans()) else []
    argv += [
        "--only",
        draw(
            st.sampled_from(
                [FAST_CHECK, "dle.mode-sol*", "zzz*", "[", "dle.mode-s?lution", "nothing-matches"]
            )
        ),
    ]
    if draw(st.integers(0, 4)) == 0:
        argv.append("--list")
    for flag, suffix in (("--json", ".json"), ("--table", ".txt"), ("--html", ".html")):
        if draw(st.booleans()):
            argv += [flag, _path(draw, folder, suffix)]
    if "--json" in argv and "--table" in argv and draw(st.integers(0, 3)) == 0:
        argv[argv.index("--table") + 1] = argv[argv.index("--json") + 1]
    if draw(st.booleans()):
        argv.append("--force")
    if draw(st.integers(0, 9)) == 0:
        argv.append("--nope")
    return argv


def test_verify(fuzz):
    def body(data):
        with tempfile.TemporaryDirectory() as tmp:
            folder = _folder(tmp)
            (folder / "mine.json").write_bytes(MINE)
            (folder / "mine.txt").write_bytes(MINE)
            (folder / "mine.html").write_bytes(MINE)
            argv = data.draw(verify_argv(folder))
            try:
                cli_expect(
                    "python -m verify",
                    verify_main,
                    argv,
                    folder,
                    protected=["mine.json", "mine.txt", "mine.html"],
                )
            finally:
                if (folder / "ro").exists():
                    os.chmod(folder / "ro", 0o700)

    fuzz.run("cli_verify", st.data(), body, ci=15, slow=200)


# ---- python -m verify train --------------------------------------------------------------------

TRAIN = [
    "train",
    "--layer",
    "afa",
    "--preset",
    "afa-2d",
    "--variant",
    "b",
    "--steps",
    "2",
    "--paths",
    "4",
    "--holdout-paths",
    "2",
    "--batch-size",
    "2",
    "--n-steps",
    "40",
    "--eval-every",
    "1",
    "--checkpoint-every",
    "1",
    "--quiet",
]


def _set(argv: list[str], flag: str, value: str) -> list[str]:
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    return argv


TRAIN_SPOILS = {
    "--layer": ["kla", "softmax", "nope", ""],
    "--preset": ["ou", "nope"],
    "--variant": ["zz"],
    "--steps": ["0", "-1", "abc", "1e3"],
    "--lr": ["0", "-1", "nan", "inf", "true", "1e300"],
    "--paths": ["0", "-2", "1"],
    "--holdout-paths": ["0", "-1"],
    "--batch-size": ["0", "100", "-1"],
    "--heads": ["0", "3", "-1"],
    "--embed-dim": ["0", "3", "-4"],
    "--dtype": ["float16", "int", "float64"],
    "--device": ["cuda", "meta", "xyz", "cuda:7"],
    "--schedule": ["cosine", "linear"],
    "--loss": ["nll", "l1"],
    "--sim-method": ["exact", "rk4"],
    "--seed": ["-1", "x"],
    "--eval-every": ["0", "-1"],
    "--checkpoint-every": ["0", "-1"],
    "--layer-option": [
        "nu=1.0",
        "bogus=1",
        "nu=abc",
        "=1",
        "nu",
        "nu=-1",
        "embed_dim=4",
        'gate="nope"',
    ],
}


def test_verify_train_options(fuzz):
    """Bad options refused before anything is written (the run folder stays empty or absent);
    valid ones train."""

    @st.composite
    def cases(draw):
        argv = list(TRAIN)
        for flag in draw(st.lists(st.sampled_from(sorted(TRAIN_SPOILS)), max_size=2, unique=True)):
            argv = _set(argv, flag, draw(st.sampled_from(TRAIN_SPOILS[flag])))
        return argv, draw(st.sampled_from(["absent", "empty", "mine"]))

    def body(case):
        argv, where = case
        with tempfile.TemporaryDirectory() as tmp:
            folder = _folder(tmp)
            run = folder / "run"
            if where != "absent":
                run.mkdir()
            if where == "mine":
                (run / "notes.txt").write_bytes(MINE)
            cli_expect(
                "python -m verify train",
                verify_main,
                [*argv, "--out", str(run)],
                folder,
                protected=["run/notes.txt"],
            )

    fuzz.run("cli_train_options", cases(), body, ci=10, slow=200)


_TRAINED: dict[str, dict[str, bytes]] = {}


def _trained_run() -> dict[str, bytes]:
    """The files of one finished 2-step run (made once per session)."""
    if not _TRAINED:
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            assert verify_main([*TRAIN, "--out", str(run)]) == 0
            _TRAINED.update({p.name: p.read_bytes() for p in run.iterdir()})
    return _TRAINED


CORRUPTIONS = {
    "checkpoint.pt": [
        b"",
        b"garbage",
        b"PK\x03\x04truncated zip",
        "keyless",
        "truncate",
        "wrong-step",
    ],
    "metrics.jsonl": [
        b"",
        b"{not json\n",
        b"[1, 2]\n",
        b'{"step": "x"}\n',
        "truncate",
        b"\x00\xff\xfe",
    ],
    "config.json": [
        b"",
        b"{",
        b"[]",
        b"42",
        b'{"layer": "afa"}',
        "other-lr",
        "nan-lr",
        b'{"lr": "fast"}',
    ],
}


def test_verify_train_resume_with_corrupt_files(fuzz):
    """``--resume`` over a finished run with one file damaged (empty, garbage, truncated,
    keyless, a config of another run, NaN): refused naming the file, or a run that resumes
    cleanly; never a traceback, and a refused resume leaves every file as it was."""

    @st.composite
    def cases(draw):
        name = draw(st.sampled_from(sorted(CORRUPTIONS)))
        return name, draw(st.sampled_from(CORRUPTIONS[name])), draw(st.sampled_from(["2", "3"]))

    def body(case):
        name, damage, steps = case
        files = _trained_run()
        with tempfile.TemporaryDirectory() as tmp:
            folder = _folder(tmp)
            run = folder / "run"
            run.mkdir()
            for fname, data in files.items():
                (run / fname).write_bytes(data)
            if isinstance(damage, bytes):
                (run / name).write_bytes(damage)
            elif damage == "truncate":
                (run / name).write_bytes(files[name][: len(files[name]) // 2])
            elif damage == "keyless":
                torch.save({"nothing": 1}, run / name)
            elif damage == "wrong-step":
                state = torch.load(run / name, weights_only=False)
                state["step"] = "two"
                torch.save(state, run / name)
            elif damage in ("other-lr", "nan-lr"):
                config = json.loads(files[name])
                config["lr"] = 0.5 if damage == "other-lr" else float("nan")
                (run / name).write_text(json.dumps(config))
            argv = _set([*TRAIN, "--out", str(run), "--resume"], "--steps", steps)
            cli_expect("python -m verify train --resume", verify_main, argv, folder)

    fuzz.run("cli_train_resume", cases(), body, ci=12, slow=200)


# ---- python -m figures -------------------------------------------------------------------------


def test_figures_refusals(fuzz):
    """Unknown names, --out a file, existing outputs without --force, --list: all decided
    before any figure is computed."""
    import figures

    names = figures.names()

    @st.composite
    def argvs(draw, folder: Path):
        argv = draw(st.lists(st.sampled_from([*names[:2], "nope", ""]), max_size=2))
        argv += [
            "--quick",
            "--out",
            draw(
                st.sampled_from(
                    [str(folder / "afile"), str(folder), str(folder / "sub" / "notes.txt")]
                )
            ),
        ]
        if draw(st.integers(0, 3)) == 0:
            argv.append("--list")
        if draw(st.integers(0, 9)) == 0:
            argv.append("--bogus")
        return argv

    def body(data):
        with tempfile.TemporaryDirectory() as tmp:
            folder = _folder(tmp)
            existing = folder / "figures"
            existing.mkdir()
            for name in names:
                (existing / f"{name}.png").write_bytes(MINE)
            argv = data.draw(argvs(folder))
            if (
                "--list" not in argv
                and str(folder) in argv
                and "nope" not in argv
                and "" not in argv
                and "--bogus" not in argv
            ):
                argv.append("--bogus")  # a run that would compute figures: kept for `slow`
            cli_expect(
                "python -m figures",
                figures_main,
                argv,
                folder,
                protected=[f"figures/{n}.png" for n in names],
            )

    fuzz.run("cli_figures", st.data(), body, ci=10, slow=100)

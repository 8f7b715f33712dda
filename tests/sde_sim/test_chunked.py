"""``python -m sde_sim simulate --out FILE.zarr`` (issue 18, part 1): path blocks written into a
Zarr store here or by Dask workers (real worker processes, not a mock) hold the in-memory
`simulate`'s bits for any number of workers and any chunking; a store resumes, refuses other
arguments, and the default run never imports Dask."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from sde_sim import io
from sde_sim.cli import main
from sde_sim.scenario import PATH_BLOCK

zarr = pytest.importorskip("zarr")

# Three path blocks (the last one short), few steps: every array of the layout, Poisson times,
# outliers and missing values, in well under a second per run.
PATHS = 2 * PATH_BLOCK + 37
BASE = [
    "simulate", "--system", "oscillator", "--paths", str(PATHS), "--steps", "12",
    "--obs-rate", "20", "--outliers", "0.1", "--missing", "0.1", "--seed", "5",
]  # fmt: skip


def _run(capsys, *argv):
    code = main([*BASE, *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same command's in-memory simulation, written to .npz."""
    path = tmp_path_factory.mktemp("ref") / "ref.npz"
    assert main([*BASE, "--out", str(path)]) == 0
    return io.load(path)


@pytest.fixture(scope="module")
def two_workers():
    """A LocalCluster of two single-threaded worker processes, shared by this module."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


def _same_bits(store, reference):
    sim = io.load(store)
    assert sim.meta == reference.meta
    for name in sim.ARRAYS:
        got, want = np.asarray(getattr(sim, name)), getattr(reference, name)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got, want, equal_nan=True), name


def test_a_store_written_here_holds_the_in_memory_bits(tmp_path, capsys, reference):
    store = tmp_path / "here.zarr"
    code, out, err = _run(capsys, "--out", str(store))
    assert code == 0, err
    assert "3 blocks" in out
    _same_bits(store, reference)
    sim = io.load(store)  # lazy: zarr arrays, read by the chunk
    assert isinstance(sim.x, zarr.Array) and isinstance(sim.t, np.ndarray)
    assert sim.x.chunks[0] == PATH_BLOCK  # one chunk row per seeded block


@pytest.mark.parametrize(
    "where",
    [
        ["--workers", "1", "--chunk-paths", str(2 * PATH_BLOCK)],
        ["--workers", "2"],
        ["SCHEDULER", "--chunk-paths", str(PATH_BLOCK)],
        ["SCHEDULER", "--chunk-paths", str(3 * PATH_BLOCK)],
    ],
    ids=["1-worker-2-blocks-a-task", "2-workers-1-block-a-task", "2-workers", "2-workers-one-task"],
)
def test_workers_and_chunkings_give_the_same_bits(tmp_path, capsys, reference, where, request):
    if where[0] == "SCHEDULER":
        where = ["--scheduler", request.getfixturevalue("two_workers"), *where[1:]]
    store = tmp_path / "workers.zarr"
    code, _, err = _run(capsys, "--out", str(store), *where)
    assert code == 0, err
    _same_bits(store, reference)


def _lose_blocks(store, blocks):
    """What a crash leaves: the blocks' marks gone and their data half written (x clobbered)."""
    group = zarr.open_group(str(store), mode="r+")
    for b in blocks:
        (store / "complete" / "c" / str(b)).unlink()
        group["x"][b * PATH_BLOCK : (b + 1) * PATH_BLOCK] = -1.0
    return group


def test_an_interrupted_store_resumes_only_its_missing_blocks(tmp_path, capsys, reference):
    store = tmp_path / "resume.zarr"
    assert _run(capsys, "--out", str(store))[0] == 0
    group = _lose_blocks(store, [1, 2])
    group["x"][0, 0, 0] = 1234.5  # block 0 stays marked complete: a rerun must not redo it
    with pytest.raises(ValueError, match="incomplete"):
        io.load(store)
    code, out, err = _run(capsys, "--out", str(store))
    assert code == 0, err
    assert "1 of 3 blocks already complete" in out and "2 blocks now" in out
    x = zarr.open_group(str(store), mode="r")["x"]
    assert x[0, 0, 0] == 1234.5  # not recomputed
    assert np.array_equal(x[PATH_BLOCK:], reference.x[PATH_BLOCK:])


def test_a_store_resumed_on_workers_is_the_uninterrupted_one(
    tmp_path, capsys, reference, two_workers
):
    store = tmp_path / "resume.zarr"
    assert _run(capsys, "--out", str(store))[0] == 0
    _lose_blocks(store, [0, 2])
    code, _, err = _run(capsys, "--out", str(store), "--scheduler", two_workers)
    assert code == 0, err
    _same_bits(store, reference)


def test_other_arguments_and_complete_stores_are_refused(tmp_path, capsys):
    store = tmp_path / "s.zarr"
    assert _run(capsys, "--out", str(store))[0] == 0
    before = np.asarray(zarr.open_group(str(store), mode="r")["x"][:])
    code, _, err = _run(capsys, "--out", str(store))
    assert code == 2 and "is complete; pass --force" in err and len(err.splitlines()) == 1
    _lose_blocks(store, [1])  # incomplete, but a different seed must not fill it
    code, _, err = _run(capsys, "--out", str(store), "--seed", "6")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "other arguments (differing: seed)" in err
    code, _, err = _run(capsys, "--out", str(store), "--steps", "13")
    assert code == 2 and "differing: n_paths" not in err and "scenario" in err
    after = zarr.open_group(str(store), mode="r")
    assert np.array_equal(after["x"][:PATH_BLOCK], before[:PATH_BLOCK])
    assert not after["complete"][1]  # untouched
    code, _, err = _run(capsys, "--out", str(store), "--seed", "6", "--force")
    assert code == 0, err
    assert io.load(store).meta["seed"] == 6


def test_a_folder_that_is_not_a_store_is_never_replaced(tmp_path, capsys):
    folder = tmp_path / "mine.zarr"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    code, _, err = _run(capsys, "--out", str(folder), "--force")
    assert code == 2 and "not a filtersuite simulation store" in err
    assert (folder / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--out", "a.zarr", "--chunk-paths", "100"], "--chunk-paths must be a positive multiple"),
        (["--out", "a.zarr", "--workers", "0"], "--workers must be >= 1"),
        (["--out", "a.npz", "--workers", "2"], "--workers needs --out FILE.zarr"),
        (["--chunk-paths", str(PATH_BLOCK)], "--chunk-paths needs --out FILE.zarr"),
        (["--out", "a.zarr", "--workers", "2", "--scheduler", "x"], "not allowed with"),
    ],
)
def test_bad_options_are_one_line_usage_errors(tmp_path, capsys, argv, message):
    argv = [str(tmp_path / a) if a.startswith("a.") else a for a in argv]
    code, _, err = _run(capsys, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("module", "argv"),
    [("distributed", ["--workers", "2"]), ("zarr", [])],
)
def test_a_missing_extra_is_one_line_saying_how_to_install(
    tmp_path, capsys, monkeypatch, module, argv
):
    monkeypatch.setitem(sys.modules, module, None)  # import -> ImportError
    store = tmp_path / "s.zarr"
    code, _, err = _run(capsys, "--out", str(store), *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "pip install 'filtersuite[distributed]'" in err
    assert not store.exists()


def test_without_workers_dask_is_not_imported(tmp_path):
    """The default run, to .npz and to .zarr, in a fresh interpreter."""
    npz, store = tmp_path / "a.npz", tmp_path / "a.zarr"
    code = (
        "import sys\n"
        "from sde_sim.cli import main\n"
        f"base = {BASE!r}\n"
        f"assert main(base + ['--out', {str(npz)!r}]) == 0\n"
        f"assert main(base + ['--out', {str(store)!r}]) == 0\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
        "print('dask modules:', loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "dask modules: []" in done.stdout
    assert npz.is_file() and (store / "zarr.json").is_file()


def test_a_cluster_started_by_the_dask_commands(tmp_path, capsys, reference, dask_commands_cluster):
    """`dask scheduler` and `dask worker` processes, as on a cluster; `--scheduler` reaches them
    and the worker writes the store itself."""
    store = tmp_path / "remote.zarr"
    code, _, err = _run(capsys, "--out", str(store), "--scheduler", dask_commands_cluster)
    assert code == 0, err
    _same_bits(store, reference)


def test_load_reads_a_store_like_its_npz(tmp_path, capsys, reference):
    store = tmp_path / "s.zarr"
    assert _run(capsys, "--out", str(store))[0] == 0
    sim = io.load(store)
    assert sim.scenario.to_dict() == reference.scenario.to_dict()
    assert np.array_equal(sim.x[5:7, 3], reference.x[5:7, 3])  # reads two paths' chunk only
    da = pytest.importorskip("dask.array")  # the README's way to a dask array
    x = da.from_zarr(str(store), component="x")
    assert x.chunks[0][0] == PATH_BLOCK
    assert np.array_equal(x[PATH_BLOCK:].compute(), reference.x[PATH_BLOCK:])
    attrs = json.loads((store / "zarr.json").read_text())["attributes"]
    assert attrs["meta"] == reference.meta  # the .npz's meta, as a Zarr attribute
    shutil.rmtree(store / "t_obs")
    with pytest.raises(ValueError, match="missing"):
        io.load(store)


def test_a_store_larger_than_the_free_disk_is_refused(tmp_path, capsys, monkeypatch):
    import shutil as shutil_module

    usage = shutil_module.disk_usage(tmp_path)
    monkeypatch.setattr(shutil_module, "disk_usage", lambda p: usage._replace(free=10**6))
    code, _, err = _run(capsys, "--out", str(tmp_path / "big.zarr"))
    assert code == 2 and "free on" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "big.zarr").exists()


def test_a_killed_run_resumes_to_the_same_bits(tmp_path):
    """`kill -9` while blocks are being written (after the first is marked complete), then
    the same command again: the store equals the .npz of an uninterrupted in-memory run."""
    import os
    import signal
    import time

    argv = [a for a in BASE]
    argv[argv.index("--paths") + 1] = str(4 * PATH_BLOCK)
    argv[argv.index("--steps") + 1] = "200"
    npz, store = tmp_path / "ref.npz", tmp_path / "killed.zarr"
    command = [sys.executable, "-m", "sde_sim", *argv]
    victim = subprocess.Popen([*command, "--out", str(store)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (store / "complete" / "c" / "0").exists() and victim.poll() is None:
        assert time.monotonic() < deadline, "no block was completed"
        time.sleep(0.01)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    marked = len(list((store / "complete" / "c").iterdir()))
    if marked == 4:  # the machine was too quick for the kill: nothing left to resume
        pytest.skip("the run finished before it was killed")
    resumed = subprocess.run([*command, "--out", str(store)], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{marked} of 4 blocks already complete" in resumed.stdout
    assert main([*argv, "--out", str(npz)]) == 0
    _same_bits(store, io.load(npz))


def test_input_refused_while_simulating_leaves_no_store(tmp_path, capsys, monkeypatch):
    """A value the library refuses only inside a block (here: any block) fails the command
    with one line, and the store it had just made is removed; a store with complete blocks
    is kept for the rerun."""
    from sde_sim.scenario import SimulationPlan

    store = tmp_path / "s.zarr"

    def refuse(self, b, progress=None):
        raise ValueError("x0 must be nonzero")

    with monkeypatch.context() as patch:
        patch.setattr(SimulationPlan, "block", refuse)
        code, _, err = _run(capsys, "--out", str(store))
    assert code == 2 and "x0 must be nonzero" in err
    assert not store.exists()
    assert _run(capsys, "--out", str(store))[0] == 0
    _lose_blocks(store, [1])
    with monkeypatch.context() as patch:
        patch.setattr(SimulationPlan, "block", refuse)
        assert _run(capsys, "--out", str(store))[0] == 2
    assert store.exists() and zarr.open_group(str(store), mode="r")["complete"][0]


@pytest.mark.parametrize("dt", ["10", "1e20"])
def test_a_store_whose_paths_overflow_is_refused_and_not_left_behind(tmp_path, capsys, dt):
    """The .zarr path refuses overflowed paths as the .npz path does: one line naming the step
    and the stable bound (dt < 0.198 for afa-2d), exit 2, no store; a stable step writes."""
    store = tmp_path / "x.zarr"
    argv = ["simulate", "--system", "afa-2d", "--paths", "2", "--out", str(store)]
    code = main([*argv, "--dt", dt])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1
    assert "the simulated paths overflowed (block 0" in err and f"dt = {float(dt):g}" in err
    assert "dt < 0.198" in err
    assert not store.exists()
    assert main([*argv, "--dt", "0.01"]) == 0 and store.exists()  # control
    assert np.all(np.isfinite(np.asarray(io.load(store).x)))

"""``.npz`` files: round trip, no clobbering, atomic writes, clear errors."""

import json
import os

import numpy as np
import pytest

from sde_sim import io, plumbing, presets, simulate
from sde_sim._record import record_from_dict


@pytest.fixture(scope="module")
def sim():
    return simulate(
        presets.get("rfa-ensemble-2d").scenario(),
        3,
        seed=4,
        meta={"preset": "rfa-ensemble-2d", "variant": "default"},
    )


def test_round_trip(tmp_path, sim):
    path = io.save(sim, tmp_path / "run.npz")
    loaded = io.load(path)
    for name in sim.ARRAYS:
        np.testing.assert_array_equal(getattr(loaded, name), getattr(sim, name))
        assert getattr(loaded, name).dtype == getattr(sim, name).dtype
    assert loaded.meta == sim.meta
    assert loaded.scenario.to_dict() == sim.scenario.to_dict()
    # Re-simulating the loaded scenario with the recorded seed reproduces the file.
    again = simulate(loaded.scenario, loaded.meta["n_paths"], seed=loaded.meta["seed"])
    np.testing.assert_array_equal(again.z, sim.z)


def test_plain_numpy_can_read_the_file(tmp_path, sim):
    path = io.save(sim, tmp_path / "run.npz")
    with np.load(path, allow_pickle=False) as data:
        assert set(data.files) == {*sim.ARRAYS, "meta"}
        meta = json.loads(str(data["meta"]))
    assert meta["seed"] == 4 and meta["method"] == "euler"
    assert meta["filtersuite_version"]
    assert record_from_dict(meta["scenario"]).n_steps == 1500


def test_existing_file_is_never_clobbered(tmp_path, sim):
    path = tmp_path / "run.npz"
    path.write_bytes(b"precious")
    with pytest.raises(FileExistsError, match="run.npz exists; pass overwrite=True"):
        io.save(sim, path)
    assert path.read_bytes() == b"precious"
    io.save(sim, path, overwrite=True)
    assert io.load(path).z.shape == sim.z.shape
    assert sorted(os.listdir(tmp_path)) == ["run.npz"]  # no temporary files left behind


def test_failed_write_leaves_nothing(tmp_path):
    def explode(fh):
        fh.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        plumbing.atomic_write(tmp_path / "x.bin", explode)
    assert os.listdir(tmp_path) == []


def test_bad_paths(tmp_path, sim):
    with pytest.raises(ValueError, match="path must end in .npz"):
        io.save(sim, tmp_path / "run.npy")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        io.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a filtersuite simulation: missing"):
        io.load(tmp_path / "other.npz")


def _corrupted(tmp_path, sim, name, **changes):
    """`sim` saved with some entries replaced (raw numpy, bypassing `io.save`)."""
    arrays = {k: getattr(sim, k) for k in sim.ARRAYS}
    arrays["meta"] = np.array(json.dumps(sim.meta))
    arrays.update(changes)
    path = tmp_path / f"{name}.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"meta": np.array("[1, 2]")}, "meta must be a JSON object"),
        ({"meta": np.array("3")}, "meta must be a JSON object"),
        ({"meta": np.array("{not json")}, "meta is not valid JSON"),
        ({"x": np.zeros(5)}, "x must be 3-D"),
        ({"x": np.full((3, 4, 2), "a")}, "x must hold real floats"),
        ({"t_obs": np.arange(2.0)}, "z must have shape"),
        ({"t": np.zeros(0)}, "t must have shape"),
        ({"missing": np.zeros((3, 1), dtype=int)}, "missing must be a boolean mask"),
    ],
)
def test_malformed_files_are_refused_naming_the_entry(tmp_path, sim, changes, words):
    path = _corrupted(tmp_path, sim, "bad", **changes)
    with pytest.raises(ValueError, match=words):
        io.load(path)


def test_non_increasing_times_and_a_non_npz_file_are_refused(tmp_path, sim):
    t = sim.t.copy()
    t[3] = t[2]
    with pytest.raises(ValueError, match="t must be finite and strictly increasing"):
        io.load(_corrupted(tmp_path, sim, "flat", t=t))
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file at all")
    with pytest.raises(ValueError, match="not a readable .npz file"):
        io.load(garbage)
    assert io.load(_corrupted(tmp_path, sim, "fine")).meta == sim.meta


def test_kill_9_during_a_write_leaves_the_target_and_the_next_write_removes_the_orphan(tmp_path):
    """A writer killed mid-write leaves the target as it was (absent here) and its temporary
    file; the next write to that target removes the orphan (its writer process is gone) and
    keeps a live writer's temporary file."""
    import subprocess
    import sys
    import time

    target = tmp_path / "big.npz"
    script = (
        "import time, sys\n"
        "from sde_sim import plumbing\n"
        "def slow(fh):\n"
        "    fh.write(b'x' * 1000); fh.flush(); time.sleep(60)\n"
        f"plumbing.atomic_write({str(target)!r}, slow)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob(".big.npz.*.tmp")) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    orphans = list(tmp_path.glob(".big.npz.*.tmp"))
    assert len(orphans) == 1 and not target.exists()
    live = tmp_path / f".big.npz.{os.getpid()}.concurrent.tmp"
    live.write_bytes(b"another writer in this process")
    plumbing.atomic_write(target, lambda fh: fh.write(b"complete"))
    assert target.read_bytes() == b"complete"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, target.name])

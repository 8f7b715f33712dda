"""``.npz`` files: round trip, no clobbering, atomic writes, clear errors."""

import json
import os

import numpy as np
import pytest

from sde_sim import io, presets, simulate
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
        io.atomic_write(tmp_path / "x.bin", explode)
    assert os.listdir(tmp_path) == []


def test_bad_paths(tmp_path, sim):
    with pytest.raises(ValueError, match="path must end in .npz"):
        io.save(sim, tmp_path / "run.npy")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        io.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="not a filtersuite simulation: missing"):
        io.load(tmp_path / "other.npz")

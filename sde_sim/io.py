"""``.npz`` files of simulations: arrays plus a JSON ``meta`` record; atomic, never clobbering.

Layout: ``t`` (T,), ``x`` (P, T, d), ``t_obs`` (M,), ``z`` (P, M, k), ``x_obs`` (P, M, d),
``outlier`` and ``missing`` (P, M) bool, and ``meta``: a 0-d string array holding JSON (every
parameter of the scenario, the seed, method, dtype and package version). Files load with
``numpy.load`` without pickle. Writes go through `sde_sim.plumbing.atomic_write` (temporary file
+ rename, never clobbering without ``overwrite``).

A ``.zarr`` store written by ``python -m sde_sim simulate --out FILE.zarr`` (`sde_sim.chunked`)
holds the same arrays and meta; `load` opens it lazily.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from sde_sim.plumbing import atomic_write
from sde_sim.scenario import Simulation


def save(simulation: Simulation, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Save `simulation` to `path` (must end in ``.npz``); returns the path written."""
    if not isinstance(simulation, Simulation):
        raise TypeError(f"simulation must be a Simulation, got {type(simulation).__name__}")
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"path must end in .npz, got {str(path)!r}")
    arrays = {name: getattr(simulation, name) for name in Simulation.ARRAYS}
    arrays["meta"] = np.array(json.dumps(simulation.meta, sort_keys=True))
    return atomic_write(path, lambda fh: np.savez(fh, **arrays), overwrite=overwrite)


def load(path: str | os.PathLike) -> Simulation:
    """Load a file written by `save`, or a ``.zarr`` store, checking its layout (module docstring).

    A ``.npz`` is read into numpy arrays. A ``.zarr`` store (`sde_sim.chunked`; needs the
    ``distributed`` extra) is opened lazily: ``t`` and ``t_obs`` are numpy arrays, ``x``, ``z``,
    ``x_obs``, ``outlier`` and ``missing`` are ``zarr.Array``s, numpy-like (``shape``, ``dtype``,
    indexing reads only the chunks it touches and returns numpy; ``np.asarray`` reads all),
    which ``dask.array.from_zarr`` turns into dask arrays. An incomplete store is refused.

    Raises FileNotFoundError for a missing file and ValueError, naming the file and the entry,
    for anything else: not an ``.npz``, missing entries, ``meta`` not a JSON object, arrays of
    the wrong rank, dtype or size, non-finite or non-increasing times, non-boolean masks.
    """
    path = Path(path)
    if path.suffix == ".zarr":
        from sde_sim.chunked import open_arrays

        arrays, meta = open_arrays(path)
        _check_layout(path, arrays)
        return Simulation(**arrays, meta=meta)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    try:  # numpy reads anything that is not a zip archive as a pickle, which it refuses
        data = np.load(path, allow_pickle=False)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path} is not a readable .npz file ({exc})") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} is not a readable .npz file (a single .npy array)")
    with data:
        missing = [k for k in (*Simulation.ARRAYS, "meta") if k not in data.files]
        if missing:
            raise ValueError(f"{path} is not a filtersuite simulation: missing {missing}")
        arrays = {name: data[name] for name in Simulation.ARRAYS}
        meta_text = data["meta"]
    try:
        meta = json.loads(str(meta_text))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: meta is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: meta must be a JSON object, found {type(meta).__name__}")
    _check_layout(path, arrays)
    return Simulation(**arrays, meta=meta)


def _check_layout(path: Path, arrays: dict) -> None:
    """The shapes and dtypes of the module docstring's layout, one entry at a time."""
    ranks = {"t": 1, "x": 3, "t_obs": 1, "z": 3, "x_obs": 3, "outlier": 2, "missing": 2}
    for name, rank in ranks.items():
        a = arrays[name]
        if a.ndim != rank:
            raise ValueError(f"{path}: {name} must be {rank}-D, found shape {a.shape}")
        masks = name in ("outlier", "missing")
        if masks and a.dtype != np.bool_:
            raise ValueError(f"{path}: {name} must be a boolean mask, found dtype {a.dtype}")
        if not masks and a.dtype.kind != "f":
            raise ValueError(f"{path}: {name} must hold real floats, found dtype {a.dtype}")
    P, T, d = arrays["x"].shape
    M = arrays["t_obs"].shape[0]
    expected = {
        "t": (T,),
        "z": (P, M, arrays["z"].shape[2]),
        "x_obs": (P, M, d),
        "outlier": (P, M),
        "missing": (P, M),
    }
    for name, shape in expected.items():
        if arrays[name].shape != shape:
            raise ValueError(
                f"{path}: {name} must have shape {shape} (x is {(P, T, d)}, t_obs has {M} "
                f"times), found {arrays[name].shape}"
            )
    for name in ("t", "t_obs"):
        times = arrays[name]
        if not np.all(np.isfinite(times)) or np.any(np.diff(times) <= 0):
            raise ValueError(f"{path}: {name} must be finite and strictly increasing")

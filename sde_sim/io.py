"""``.npz`` files of simulations: arrays plus a JSON ``meta`` record; atomic, never clobbering.

Layout: ``t`` (T,), ``x`` (P, T, d), ``t_obs`` (M,), ``z`` (P, M, k), ``x_obs`` (P, M, d),
``outlier`` and ``missing`` (P, M) bool, and ``meta``: a 0-d string array holding JSON (every
parameter of the scenario, the seed, method, dtype and package version). Files load with
``numpy.load`` without pickle.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sde_sim.scenario import Simulation


def atomic_write(path: str | os.PathLike, write: Callable, *, overwrite: bool = False) -> Path:
    """Write a file through ``write(file_object)`` into a temporary file, then move it to `path`.

    Readers never see a partial file. Without `overwrite`, an existing `path` is left untouched
    and `FileExistsError` is raised (the final link refuses to replace a file that appeared
    meanwhile).
    """
    path = Path(path)
    if not overwrite and path.exists():
        raise FileExistsError(f"{path} exists; pass overwrite=True (CLI: --force) to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates the file private (0600); give it the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise FileExistsError(
                    f"{path} exists; pass overwrite=True (CLI: --force) to replace it"
                ) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def save(simulation: Simulation, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Save `simulation` to `path` (must end in ``.npz``); returns the path written."""
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"path must end in .npz, got {str(path)!r}")
    arrays = {name: getattr(simulation, name) for name in Simulation.ARRAYS}
    arrays["meta"] = np.array(json.dumps(simulation.meta, sort_keys=True))
    return atomic_write(path, lambda fh: np.savez(fh, **arrays), overwrite=overwrite)


def load(path: str | os.PathLike) -> Simulation:
    """Load a file written by `save`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    with np.load(path, allow_pickle=False) as data:
        missing = [k for k in (*Simulation.ARRAYS, "meta") if k not in data.files]
        if missing:
            raise ValueError(f"{path} is not a filtersuite simulation: missing {missing}")
        arrays = {name: data[name] for name in Simulation.ARRAYS}
        meta = json.loads(str(data["meta"]))
    return Simulation(**arrays, meta=meta)

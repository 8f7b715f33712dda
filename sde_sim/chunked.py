"""Simulations larger than memory: blocks of paths written into a Zarr store, here or on Dask.

A simulation is computed in fixed blocks of `sde_sim.scenario.PATH_BLOCK` paths, each seeded on
its own (`sde_sim.scenario.plan`), so the store holds the bits of the in-memory `simulate` for
the same seed and paths whoever computed which block: this process (`write_store` without a
client) or the workers of a Dask cluster (with one), in any order, any number at a time.

Store layout (a Zarr v3 group; names, shapes and dtypes as in the ``.npz`` of `sde_sim.io`):

* ``t`` (T,), ``t_obs`` (M,): written once, when the store is created;
* ``x`` (P, T, d), ``z`` (P, M, k), ``x_obs`` (P, M, d), ``outlier`` and ``missing`` (P, M):
  chunked by one path block along the paths and at most `CHUNK_BYTES` per chunk along time,
  with dimension names (``path``, ``time``, ``obs``, ``state``, ``meas``) for xarray; the real
  arrays are stored uncompressed (Gaussian noise does not compress: zstd saved 7% of the disk
  for 8x the write time), the masks with Zarr's default compressor;
* ``complete`` (n_blocks,) bool, one chunk per block: set once every array of the block is
  written, so a block interrupted half-way is computed again;
* attributes: ``meta`` (the ``.npz``'s meta record) and ``filtersuite_store`` (layout version).

Each block is written by the process that computed it, straight into the store (nothing passes
through the client); a worker holds one block in memory at a time. The store's path must be
reachable under the same name from every worker (one machine, or a shared file system).

Rerunning the same simulation on an incomplete store computes only the blocks not marked
complete (`open_store`); a store made with other arguments is refused, never mixed.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from sde_sim import validation
from sde_sim.distributed import INSTALL_HINT, DistributedUnavailable
from sde_sim.scenario import PATH_BLOCK, SimulationPlan, _measurement_dim

STORE_FORMAT = 1
FORMAT_ATTR = "filtersuite_store"
# Target size of one chunk: small enough to read a few paths cheaply and to keep a writer's
# buffers small, large enough that a chunk costs far more than its file.
CHUNK_BYTES = 8 << 20
BLOCK_ARRAYS = ("x", "z", "x_obs", "outlier", "missing")


def require_zarr():
    """The ``zarr`` module, or `DistributedUnavailable` saying how to install it."""
    try:
        import zarr
    except ImportError:
        raise DistributedUnavailable(f"--out FILE.zarr needs zarr: {INSTALL_HINT}") from None
    return zarr


def layout(plan: SimulationPlan) -> dict[str, tuple[tuple[int, ...], np.dtype, tuple[str, ...]]]:
    """``name -> (shape, dtype, dimension names)`` of the block arrays of `plan`'s store."""
    sc = plan.scenario
    P, T, M, d = plan.n_paths, sc.n_steps + 1, plan.t_obs.size, sc.system.dim
    k = _measurement_dim(sc.measurement, sc.system)
    real = np.dtype(plan.dtype)
    return {
        "x": ((P, T, d), real, ("path", "time", "state")),
        "z": ((P, M, k), real, ("path", "obs", "meas")),
        "x_obs": ((P, M, d), real, ("path", "obs", "state")),
        "outlier": ((P, M), np.dtype(bool), ("path", "obs")),
        "missing": ((P, M), np.dtype(bool), ("path", "obs")),
    }


def store_bytes(plan: SimulationPlan) -> int:
    """The size of `plan`'s store in bytes, uncompressed (its real arrays are stored so)."""
    total = (plan.scenario.n_steps + 1 + plan.t_obs.size) * 8
    for shape, dtype, _ in layout(plan).values():
        total += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return total


def _chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """One path block by as many time (or measurement) points as fit `CHUNK_BYTES`."""
    rows = min(PATH_BLOCK, shape[0])
    inner = int(np.prod(shape[2:], dtype=np.int64)) if len(shape) > 2 else 1
    along = max(1, min(shape[1], CHUNK_BYTES // (rows * inner * itemsize)))
    return (rows, along, *shape[2:])


def _normal(meta: dict) -> dict:
    """`meta` as it reads back from JSON (tuples as lists, keys sorted)."""
    return json.loads(json.dumps(meta, sort_keys=True))


def _differences(stored: dict, wanted: dict) -> list[str]:
    keys = sorted(set(stored) | set(wanted))
    return [k for k in keys if stored.get(k) != wanted.get(k)]


def _is_store(path: Path) -> bool:
    zarr = require_zarr()
    try:
        group = zarr.open_group(str(path), mode="r")
    except Exception:  # not a Zarr group at all
        return False
    return FORMAT_ATTR in group.attrs


def open_store(path: str | Path, plan: SimulationPlan, *, force: bool = False):
    """The store at `path` for `plan`, created if needed; returns ``(group, done)``, ``done``
    the (n_blocks,) bool marks of blocks already complete.

    An existing store of the same simulation (same ``meta``) that is incomplete is resumed.
    Refused with ``FileExistsError`` without `force`: a complete store, or one made with other
    arguments (the message names the entries that differ); with `force` either is replaced.
    Something at `path` that is not a filtersuite store is refused even with `force`.
    """
    zarr = require_zarr()
    path = Path(path)
    wanted = _normal(plan.meta)
    if path.exists():
        if not _is_store(path):
            raise FileExistsError(
                f"{path} exists and is not a filtersuite simulation store; remove it yourself "
                "or choose another --out"
            )
        group = zarr.open_group(str(path), mode="r+")
        done = np.asarray(group["complete"][:], dtype=bool)
        differ = _differences(dict(group.attrs.get("meta", {})), wanted)
        if not force:
            if differ:
                raise FileExistsError(
                    f"{path} holds a simulation made with other arguments (differing: "
                    f"{', '.join(differ)}); pass --force to replace it, or choose another --out"
                )
            if done.all():
                raise FileExistsError(
                    f"{path} exists and is complete; pass --force to overwrite it"
                )
            return group, done
        shutil.rmtree(path)
    return _create(zarr, path, plan, wanted), np.zeros(plan.n_blocks, dtype=bool)


def _create(zarr, path: Path, plan: SimulationPlan, meta: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    group = zarr.open_group(str(path), mode="w-")
    for name, values, dim in (("t", plan.grid.t, "time"), ("t_obs", plan.t_obs, "obs")):
        array = group.create_array(
            name, shape=values.shape, dtype=values.dtype, chunks=(max(1, values.size),),
            dimension_names=(dim,),
        )  # fmt: skip
        array[...] = values
    for name, (shape, dtype, dims) in layout(plan).items():
        group.create_array(
            name, shape=shape, dtype=dtype, chunks=_chunks(shape, dtype.itemsize),
            dimension_names=dims, fill_value=np.nan if dtype.kind == "f" else False,
            compressors=None if dtype.kind == "f" else "auto",
        )  # fmt: skip
    group.create_array(
        "complete", shape=(plan.n_blocks,), dtype=bool, chunks=(1,), fill_value=False,
        dimension_names=("block",),
    )  # fmt: skip
    group.attrs.update({"meta": meta, FORMAT_ATTR: {"format": STORE_FORMAT}})
    return group


def any_complete(path: str | Path) -> bool:
    """Whether the store at `path` has at least one block marked complete."""
    zarr = require_zarr()
    return bool(np.any(zarr.open_group(str(path), mode="r")["complete"][:]))


def write_blocks(path: str, plan: SimulationPlan, blocks: Sequence[int]) -> int:
    """Simulate `blocks` of `plan` one at a time and write each into the store at `path`,
    marking it complete after its arrays (the task a worker runs). Returns how many."""
    zarr = require_zarr()
    group = zarr.open_group(str(path), mode="r+")
    arrays = {name: group[name] for name in BLOCK_ARRAYS}
    complete = group["complete"]
    for b in blocks:
        start, stop = plan.block_paths(b)
        block = plan.block(b)
        check_finite_block(plan, b, block["x"])
        for name, values in block.items():
            arrays[name][start:stop] = values
        complete[b] = True
    return len(blocks)


def check_finite_block(plan: SimulationPlan, b: int, x: np.ndarray) -> None:
    """Refuse block `b`'s states `x` if they overflowed to inf or NaN, before any of it is
    written (as `python -m sde_sim simulate` refuses such paths for ``.npz``): an Euler step
    past the stable one for the system's rates makes paths grow geometrically. The
    ValueError names the block, the count and, for Euler, the stable step."""
    bad = int(x.size - np.count_nonzero(np.isfinite(x)))
    if not bad:
        return
    why = None
    if plan.method == "euler":
        # the steps the integrator takes (measurement times inserted), as its own warning
        why = validation.euler_instability(plan.scenario.system, plan.merged.steps)
    advice = why or "the step is too large for the system's rates; use a smaller one"
    raise ValueError(
        f"the simulated paths overflowed (block {b}: {bad} of {x.size} state values are inf "
        f"or NaN; nothing of it was written): {advice}"
    )


def tasks(missing: Sequence[int], chunk_paths: int) -> list[list[int]]:
    """The missing blocks grouped by chunk of `chunk_paths` paths (a multiple of PATH_BLOCK):
    chunk ``c`` holds blocks ``c*K/B .. (c+1)*K/B - 1``, whichever of them are missing."""
    per = chunk_paths // PATH_BLOCK
    groups: dict[int, list[int]] = {}
    for b in missing:
        groups.setdefault(b // per, []).append(int(b))
    return [groups[c] for c in sorted(groups)]


def write_store(
    path: str | Path,
    plan: SimulationPlan,
    missing: Sequence[int],
    *,
    client=None,
    chunk_paths: int = PATH_BLOCK,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Compute and write the `missing` blocks of `plan` into the store at `path` (opened by
    `open_store`): in this process without `client`, else one Dask task per chunk of
    `chunk_paths` paths. `progress` is called with the number of blocks each time some are
    written. Returns the number of blocks written."""
    groups = tasks(missing, chunk_paths)
    path = Path(path).resolve()  # workers may run elsewhere: give them the absolute path
    written = 0
    if client is None:
        for group in groups:
            for b in group:
                written += write_blocks(str(path), plan, [b])
                if progress is not None:
                    progress(1)
        return written
    from distributed import as_completed

    shared = client.scatter(plan, broadcast=True)
    futures = [client.submit(write_blocks, str(path), shared, g, pure=False) for g in groups]
    for future in as_completed(futures):
        n = future.result()
        written += n
        if progress is not None:
            progress(n)
    return written


def open_arrays(path: str | Path) -> tuple[dict, dict]:
    """The arrays and meta of a complete store: ``t`` and ``t_obs`` as numpy arrays, the block
    arrays as lazy ``zarr.Array``s (numpy-like: indexing reads only the chunks it touches and
    returns numpy; ``dask.array.from_zarr`` makes dask arrays of them). ValueError for a store
    that is not a filtersuite simulation or not complete."""
    zarr = require_zarr()
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    if not _is_store(path):
        raise ValueError(f"{path} is not a filtersuite simulation store (a Zarr group)")
    group = zarr.open_group(str(path), mode="r")
    names = ("t", "t_obs", *BLOCK_ARRAYS, "complete")
    absent = [name for name in names if name not in group]
    if absent:
        raise ValueError(f"{path} is not a filtersuite simulation: missing {absent}")
    done = np.asarray(group["complete"][:], dtype=bool)
    if not done.all():
        raise ValueError(
            f"{path} is incomplete ({int((~done).sum())} of {done.size} path blocks not "
            "written); rerun the command that made it to finish it"
        )
    meta = group.attrs.get("meta")
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: meta must be a JSON object, found {type(meta).__name__}")
    arrays = {"t": np.asarray(group["t"][...]), "t_obs": np.asarray(group["t_obs"][...])}
    arrays.update({name: group[name] for name in BLOCK_ARRAYS})
    return arrays, dict(meta)

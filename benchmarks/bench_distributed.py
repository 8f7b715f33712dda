"""Dask workers against one: a chunked simulation to a Zarr store (issue 18, part 6).

Workload (simulation part): the preset ``afa-2d`` variant ``b`` (2-D linear SDE, Euler),
``--paths`` paths (default 4 x 10^5) x ``--steps`` steps (default 250), written block by block
into a fresh Zarr store (`sde_sim.chunked`) exactly as ``python -m sde_sim simulate --out
FILE.zarr --workers N`` does. Contestants: a ``LocalCluster`` of 1 and of 2 single-threaded
worker processes (`sde_sim.distributed.cluster_client`), each started once, before any timing;
a timed call creates the store and has the workers simulate and write every block (one task
per ``--chunk-paths`` paths). The repeats are interleaved (`_harness.run_all`) and the best
counts. Metric: path-steps/s; the ratio is 1-worker time / 2-worker time (target >= 1.6x on
2 cores). Both stores are checked to hold the same bits (first and last block of ``x``).

The largest run (``--largest``) is not a timing: it runs ``python -m sde_sim simulate --system
afa-2d --variant b --paths 1000000 --steps 2000 --out DIR/largest.zarr --workers 2`` (about
32 GB of ``x``) and samples the resident memory of that command and all its child processes
(client, scheduler, workers) every half second, printing the peak of their sum (target < 2 GB:
each worker holds one block of `PATH_BLOCK` paths at a time, whatever the total).

Run::

    python benchmarks/bench_distributed.py                 # 4e5 paths x 250 steps, 3 repeats
    python benchmarks/bench_distributed.py --quick         # smoke run: 2 blocks x 20 steps
    python benchmarks/bench_distributed.py --largest --dir /big/disk   # ~32 GB, long

Needs the extra ``distributed`` (``pip install -c constraints.txt -e .[distributed]``).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _harness import Column, Contestant, machine_lines, print_table, run_all

from sde_sim import chunked, presets
from sde_sim.distributed import cluster_client
from sde_sim.scenario import PATH_BLOCK, plan


def simulate_rows(args, folder: Path, stack: contextlib.ExitStack) -> list[Contestant]:
    """One row per cluster size; the clusters stay up (in `stack`) until the timing is done."""
    scenario = presets.get("afa-2d").scenario("b").replace(n_steps=args.steps)
    p = plan(scenario, args.paths, seed=0, meta={"preset": "afa-2d", "variant": "b"})
    rows = []
    for workers in (1, 2):
        store = folder / f"workers-{workers}.zarr"
        client = stack.enter_context(cluster_client(workers, None))
        client.wait_for_workers(workers)

        def run(store=store, client=client):
            shutil.rmtree(store, ignore_errors=True)
            _, done = chunked.open_store(store, p)
            chunked.write_store(
                store, p, np.flatnonzero(~done), client=client, chunk_paths=args.chunk_paths
            )
            return store

        row = Contestant(f"{workers} worker{'s' if workers > 1 else ''}", run=run)
        row.items = float(args.paths) * args.steps
        rows.append(row)
    return rows


def bench_simulate(args) -> None:
    print(f"simulation to Zarr: afa-2d (b), {args.paths} paths x {args.steps} steps, "
          f"tasks of {args.chunk_paths} paths, best of {args.repeats}")  # fmt: skip
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, contextlib.ExitStack() as stack:
        rows = simulate_rows(args, Path(tmp), stack)
        run_all(rows, args.repeats)
        import zarr

        one, two = (zarr.open_group(str(r.output), mode="r")["x"] for r in rows)
        last = (args.paths - 1) // PATH_BLOCK * PATH_BLOCK
        same = all(
            np.array_equal(one[s : s + PATH_BLOCK], two[s : s + PATH_BLOCK]) for s in (0, last)
        )
    columns = [Column("contestant", 10), Column("best s", 8, ">"), Column("path-steps/s", 13, ">")]
    print_table(columns, [(r.name, f"{r.best:.3f}", f"{r.rate:.3g}") for r in rows])
    ratio = rows[0].best / rows[1].best
    verdict = "met" if ratio >= 1.6 else "not met"
    print(f"simulate: ratio 1 worker / 2 workers = {ratio:.2f}x (target >= 1.6x: {verdict})")
    print(f"simulate: same bits from 1 and 2 workers: {same}")


def _tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total


def bench_largest(args) -> None:
    store = Path(args.dir or ".") / "largest.zarr"
    cmd = [
        sys.executable, "-m", "sde_sim", "simulate", "--system", "afa-2d", "--variant", "b",
        "--paths", str(args.largest_paths), "--steps", "2000", "--out", str(store),
        "--workers", "2", "--chunk-paths", str(args.chunk_paths),
    ]  # fmt: skip
    print("largest:", " ".join(cmd))
    start = time.perf_counter()
    process = subprocess.Popen(cmd)
    peak = [0]

    def sample():
        while process.poll() is None:
            peak[0] = max(peak[0], _tree_rss(process.pid))
            time.sleep(0.5)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    status = process.wait()
    watcher.join()
    seconds = time.perf_counter() - start
    size = sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) if store.exists() else 0
    print(f"largest: exit {status}, {seconds:.0f} s, store {size / 1e9:.1f} GB on disk, "
          f"peak resident memory (command + children) {peak[0] / 2**30:.2f} GiB "
          f"(target < 2 GB: {'met' if peak[0] < 2e9 else 'not met'})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--paths", type=int, default=400_000)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--chunk-paths", type=int, default=PATH_BLOCK)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", help="folder for the stores (default: the system's temp)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, 1 repeat")
    parser.add_argument("--largest", action="store_true", help="the 10^6 x 2000 run instead")
    parser.add_argument("--largest-paths", type=int, default=1_000_000)
    args = parser.parse_args()
    if args.quick:
        args.paths, args.steps, args.repeats = 2 * PATH_BLOCK, 20, 1
    for line in machine_lines(packages=("dask", "distributed", "zarr")):
        print(line)
    if args.largest:
        bench_largest(args)
    else:
        bench_simulate(args)


if __name__ == "__main__":
    main()

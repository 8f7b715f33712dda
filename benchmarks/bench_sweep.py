"""A training sweep on Dask: 2 worker processes against 1 (issue 18, target >= 1.7 x).

Workload: ``python -m verify sweep``'s grid of 8 trainings, by default the case ``afa-2d-b``
(the robust AFA on ``afa-2d`` b) with seeds 0-7 and ``--steps`` (default 100) optimizer steps
each, one torch thread per training (`verify.sweep.run_sweep`, ``threads=1``). Contestants:
`run_sweep` against a ``LocalCluster`` of 1 and of 2 single-threaded worker processes, each
started before the timing (cluster start-up, printed separately, is not in the time) and warmed
up by one tiny training on every worker. Each timed call sweeps into a fresh folder,
so every point trains; the time is the sweep's wall time, the best of ``--repeats`` interleaved
rounds (`_harness.interleaved_best`). Ratio: ``time(1 worker) / time(2 workers)``. The
workers' CPU seconds of the last sweep are printed beside it: equal CPU with a ratio under 2
means the cores were busy with other work, not that the sweep did more.

A sweep is embarrassingly parallel, so with 8 equal points and 2 free cores the ratio is near 2,
less the scheduling and the load of other processes on the machine (`machine_lines` records
the load average). The two tables must be bit-identical, which the script checks.

Run::

    python benchmarks/bench_sweep.py                 # 8 trainings of 100 steps, 1 round
    python benchmarks/bench_sweep.py --steps 500     # the case's quick length
    python benchmarks/bench_sweep.py --quick         # smoke run: 2 seeds x 2 steps, tiny data
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from _harness import Column, interleaved_best, load_text, machine_lines, print_table

from verify.sweep import TABLE_CSV, plan, run_sweep

QUICK = {"n_paths": 16, "holdout_paths": 4, "batch_size": 4, "n_steps": 20}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["afa-2d-b"])
    parser.add_argument("--seeds", type=int, default=8, help="seeds 0..N-1 (default 8)")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps per training")
    parser.add_argument("--repeats", type=int, default=1, help="interleaved rounds (best of)")
    parser.add_argument("--quick", action="store_true", help="smoke sizes (2 seeds, 2 steps)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)  # the scheduler's INFO lines

    seeds, overrides = range(args.seeds), {"steps": args.steps}
    if args.quick:
        seeds, overrides = range(2), {"steps": 2, **QUICK}
    points = plan(args.cases, None, list(seeds), overrides=overrides)
    print(f"# sweep of {len(points)} trainings: {', '.join(args.cases)}, {overrides}")
    extra = [f"before    : {load_text()}"]
    for line in machine_lines(extra, packages=("torch", "dask", "distributed")):
        print(f"# {line}")

    clusters, clients, startup, cpu = {}, {}, {}, {}
    try:
        for n in (1, 2):
            start = time.perf_counter()
            clusters[n] = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            clients[n] = Client(clusters[n])
            for case in args.cases:
                clients[n].run(_warm, case)
            startup[n] = time.perf_counter() - start
        with tempfile.TemporaryDirectory() as tmp:
            counter = iter(range(10**6))

            def sweep(n):
                out = Path(tmp) / f"w{n}-{next(counter)}"
                address = clusters[n].scheduler_address
                before = clients[n].run(_cpu_seconds)
                result = run_sweep(points, out, scheduler=address, quiet=True)
                after = clients[n].run(_cpu_seconds)
                cpu[n] = sum(after[w] - before[w] for w in after)
                assert result.failed == 0, result.rows
                return (out / TABLE_CSV).read_bytes()

            best, tables = interleaved_best(
                {"1 worker": lambda: sweep(1), "2 workers": lambda: sweep(2)}, args.repeats
            )
    finally:
        for n in clients:
            clients[n].close()
        for n in clusters:
            clusters[n].close()
    same = tables["1 worker"] == tables["2 workers"]
    columns = [Column("workers", 10), Column("start-up s", 10, ">"), Column("sweep s", 9, ">")]
    columns += [Column("vs 1 worker", 11, ">"), Column("workers' CPU s", 14, ">")]
    rows = [
        (
            name,
            f"{startup[n]:.1f}",
            f"{best[name]:.2f}",
            f"{best['1 worker'] / best[name]:.2f} x",
            f"{cpu[n]:.1f}",
        )
        for n, name in ((1, "1 worker"), (2, "2 workers"))
    ]
    print_table(columns, rows)
    ratio = best["1 worker"] / best["2 workers"]
    print(f"speed-up 2 workers / 1 worker: {ratio:.2f} x (target >= 1.7 x)")
    print(f"tables bit-identical: {'yes' if same else 'NO'}; after: {load_text()}")
    return 0 if same else 1


def _cpu_seconds() -> float:
    """This worker process's CPU seconds so far (user + system)."""
    return time.process_time()


def _warm(case: str) -> None:
    """One tiny untimed training of `case` on a worker: imports and first calls out of the
    timed sweep."""
    import torch

    from verify.mle_convergence import CASES
    from verify.training import TrainConfig, train

    torch.set_num_threads(1)
    base = CASES[case].config(quick=True).to_dict()
    train(TrainConfig(**{**base, **QUICK, "steps": 1}), quiet=True)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m verify sweep``: train a grid of cases x layers x seeds, one run directory a point.

A *point* is one training run: a trained system of `verify.mle_convergence.CASES` (its preset,
variant, optimizer and training length, ``--quick`` for the quick length), optionally with
another layer of `verify.training.LAYERS` (the case's ``layer_options`` are kept only for the
case's own layer; another layer gets its defaults), and a seed. ``--set KEY=VALUE`` overrides
`verify.training.TrainConfig` fields for every point (``steps`` alone also sets
``eval_every = max(steps // 8, 1)``, as `Case.config` does).

Layout of ``--out DIR``::

    DIR/sweep.json                       marker: this folder holds a sweep
    DIR/<case>/<layer>/seed-<s>/         a `verify.training.train` run directory (config.json,
                                         metrics.jsonl, checkpoint.pt), plus
        sweep-row.json                   the point's finished row (written last, atomically)
        sweep-attempts.jsonl             one line per attempt: the step it started from
    DIR/results.csv, DIR/results.json    the table, one row per point in grid order

A point whose ``sweep-row.json`` holds its configuration is complete and is skipped; any other
point is (re)trained with ``resume=True``, so an attempt that died (a killed worker, Ctrl-C)
continues from its last checkpoint. Training is deterministic given the configuration and the
torch thread count, and a resumed run reproduces the uninterrupted one bit for bit
(`verify.training.train`); every point runs with ``threads`` torch threads (default 1) wherever it
runs, so the table does not depend on where or in how many attempts each point ran. The table
holds the last metrics line's values (train loss, held-out metric; the elapsed time is left out)
and, for the held-out MSE, its ratio to the case's reference predictor
(`verify.mle_convergence.reference_mses`, with the true parameters on the same held-out paths).

Where: serially in this process (Dask is then not imported), or with ``--workers N`` /
``--scheduler ADDRESS`` as one Dask task per point (`sde_sim.distributed.cluster_client`). A task
whose worker dies is rescheduled by the scheduler (up to its ``allowed-failures``, 3 by
default) and an exception is retried (``retries=2``); both resume from the checkpoint. A point
that still fails gets a ``failed`` row with the error, and the exit status is 1. With
``--scheduler`` the workers write the run directories themselves: ``DIR`` must be a path they
all reach (a shared file system).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import socket
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sde_sim.plumbing import (
    OneLineParser,
    UsageError,
    atomic_write,
    json_options,
    one_line,
    run_cli,
)

PROG = "python -m verify sweep"
MARKER = "sweep.json"
ROW = "sweep-row.json"
ATTEMPTS = "sweep-attempts.jsonl"
TABLE_CSV, TABLE_JSON = "results.csv", "results.json"
COLUMNS = (
    "case",
    "layer",
    "seed",
    "run",
    "steps",
    "loss",
    "train_loss",
    "heldout_metric",
    "heldout",
    "reference",
    "reference_mse",
    "ratio",
    "status",
    "error",
)
RETRIES = 2
# Test hook: "RUN=MARKER" makes the first attempt of point RUN (its run path relative to DIR)
# exit its process (os._exit) right after its first checkpoint is on disk, and write MARKER
# (the checkpoint's step) so that the next attempt runs through: a worker killed mid-run.
CRASH_VARIABLE = "FILTERSUITE_SWEEP_CRASH_ONCE"


@dataclass(frozen=True)
class Point:
    """One run of the grid: the case, the layer, the seed, its full configuration
    (`verify.training.TrainConfig`), its run directory relative to the sweep's folder, and the
    case's reference predictor (a key of `verify.mle_convergence.reference_mses`)."""

    case: str
    layer: str
    seed: int
    config: object  # TrainConfig (imported lazily: the parser needs no torch)
    run: str
    reference: str


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-9"`` -> 0..9, ``"0,2,5"`` -> (0, 2, 5), ``"0-3,7"``: seeds >= 0 in the given order;
    a ValueError naming ``--seeds`` for anything else (empty, reversed range, repeated seed)."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            if not low.isdigit() or (dash and not high.isdigit()):
                raise ValueError
            first, last = int(low), int(high) if dash else int(low)
        except ValueError:
            raise ValueError(
                f"--seeds expects integers >= 0 and ranges A-B separated by commas (0-9, "
                f"0,2,5); found {text!r}"
            ) from None
        if last < first:
            raise ValueError(f"--seeds range {part!r} runs backwards")
        seeds.extend(range(first, last + 1))
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ValueError(f"--seeds names seed {repeated[0]} more than once ({text!r})")
    return tuple(seeds)


def _names(values: Sequence[str]) -> list[str]:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]`` (names given space- or comma-separated)."""
    return [name for value in values for name in value.split(",") if name]


def plan(
    cases: Sequence[str],
    layers: Sequence[str] | None,
    seeds: Sequence[int],
    *,
    quick: bool = False,
    overrides: dict | None = None,
) -> list[Point]:
    """The grid's points in order (case, then layer, then seed); every configuration is built
    (and so checked) here. ``layers`` None: each case's own layer."""
    from verify.mle_convergence import CASES
    from verify.training import LAYERS, TrainConfig

    overrides = dict(overrides or {})
    fields = list(TrainConfig.__dataclass_fields__)
    for key in overrides:
        if key in ("layer", "seed"):
            raise ValueError(f"--set {key}: the grid sets it (use --layers / --seeds)")
        if key not in fields:
            raise ValueError(f"--set {key}: not a training setting (one of {', '.join(fields)})")
    for flag, names, known in (("--cases", cases, CASES), ("--layers", layers, LAYERS)):
        if names is None:
            continue
        if not names:
            raise ValueError(f"{flag}: none given; known: {', '.join(known)}")
        for k, name in enumerate(names):
            if name not in known:
                raise ValueError(f"{flag}: unknown {name!r}; known: {', '.join(known)}")
            if name in names[:k]:
                raise ValueError(f"{flag}: {name!r} given twice")
    if not seeds:
        raise ValueError("--seeds: no seed given")
    steps = overrides.get("steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and "eval_every" not in overrides:
        overrides["eval_every"] = max(steps // 8, 1)  # as Case.config does
    points = []
    for name in cases:
        case = CASES[name]
        for layer in layers or (case.base["layer"],):
            for seed in seeds:
                fields_ = case.config(quick=quick, seed=seed).to_dict()
                if layer != fields_["layer"]:
                    fields_.update(layer=layer, layer_options={})
                fields_.update(overrides)
                try:
                    config = TrainConfig(**fields_)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{name}/{layer}/seed {seed}: {exc}") from None
                run = f"{name}/{layer}/seed-{seed}"
                points.append(Point(name, layer, seed, config, run, case.reference))
    return points


def point_state(point: Point, out: Path) -> str:
    """``"done"`` (its row is there, for this configuration), ``"new"`` (no run files),
    ``"partial"`` (this configuration, unfinished: resumed) or ``"other"`` (a run directory
    with another configuration)."""
    from verify.training import CONFIG

    run = out / point.run
    wanted = _as_saved(point.config)
    row = _read_json(run / ROW)
    if isinstance(row, dict) and row.get("config") == wanted:
        return "done"
    if not run.exists() or not any(run.iterdir()):
        return "new"
    saved = _read_json(run / CONFIG)
    return "partial" if saved == wanted else "other"


def _as_saved(config) -> dict:
    """``config.to_dict()`` as it reads back from JSON (tuples as lists), for comparisons with
    the files."""
    return json.loads(json.dumps(config.to_dict()))


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_point(point: Point, out: str, threads: int = 1) -> dict:
    """Train `point` in ``out/point.run`` (resuming any checkpoint there) with `threads` torch
    threads; write and return its row (an already written row is returned as it is). Runs on a
    worker, or in the sweep's process."""
    import torch

    from verify.mle_convergence import reference_mses
    from verify.training import CHECKPOINT, heldout_name, load_checkpoint, read_metrics, train

    run = Path(out) / point.run
    done = _read_json(run / ROW)
    if isinstance(done, dict) and done.get("config") == _as_saved(point.config):
        return done["row"]  # a task rerun after its result was lost with its worker
    start = load_checkpoint(run / CHECKPOINT)["step"] if (run / CHECKPOINT).exists() else 0
    attempt = {"start_step": start, "host": socket.gethostname(), "pid": os.getpid()}
    run.mkdir(parents=True, exist_ok=True)
    with open(run / ATTEMPTS, "a") as fh:
        fh.write(json.dumps(attempt) + "\n")
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        train(point.config, run, resume=True, quiet=True, callback=_crash_hook(point, run))
        config = point.config
        last = read_metrics(run)[-1]
        metric = heldout_name(config)
        row = {
            "case": point.case,
            "layer": point.layer,
            "seed": point.seed,
            "run": point.run,
            "steps": last["step"],
            "loss": config.loss,
            "train_loss": last[f"train_{config.loss}"],
            "heldout_metric": metric,
            "heldout": last[metric],
            "reference": None,
            "reference_mse": None,
            "ratio": None,
            "status": "ok",
            "error": None,
        }
        if metric == "heldout_mse" and config.task is None:
            reference = reference_mses(config).get(point.reference)
            if reference is not None:
                row.update(
                    reference=point.reference,
                    reference_mse=reference,
                    ratio=last[metric] / reference,
                )
    finally:
        torch.set_num_threads(before)
    text = json.dumps({"config": point.config.to_dict(), "row": row}, indent=2).encode()
    atomic_write(run / ROW, lambda fh: fh.write(text), overwrite=True)
    return row


def _crash_hook(point: Point, run: Path) -> Callable | None:
    """The test hook of `CRASH_VARIABLE` for this point (None when it does not name it)."""
    target, _, marker = os.environ.get(CRASH_VARIABLE, "").partition("=")
    if target != point.run or not marker or Path(marker).exists():
        return None
    from verify.training import CHECKPOINT, load_checkpoint

    def crash(step, model):
        if (run / CHECKPOINT).exists():
            saved = load_checkpoint(run / CHECKPOINT)["step"]
            Path(marker).write_text(f"{saved}\n")
            os._exit(17)  # no cleanup, no exception: as a killed process

    return crash


def failed_row(point: Point, error: BaseException | str) -> dict:
    """The row of a point that could not be trained."""
    message = error if isinstance(error, str) else one_line(error)
    row = dict.fromkeys(COLUMNS)
    row.update(case=point.case, layer=point.layer, seed=point.seed, run=point.run)
    row.update(loss=point.config.loss, status="failed", error=message)
    return row


@dataclass(frozen=True)
class SweepResult:
    """The table's rows (grid order) and how many points were trained, skipped and failed."""

    rows: list
    trained: int
    skipped: int
    failed: int


def prepare(points: Sequence[Point], out: Path, *, force: bool = False) -> dict[str, str]:
    """Check ``out`` and every point's run directory before anything runs; returns each point's
    state (`point_state`). A run directory with another configuration is an error naming it,
    unless `force`, which removes that directory's run files (nothing else in it)."""
    from verify.training import RUN_FILES

    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ValueError(
            f"--out {str(out)!r} is a non-empty folder without {MARKER} (not a sweep's); "
            "choose a new or empty folder"
        )
    states = {p.run: point_state(p, out) for p in points}
    others = [run for run, state in states.items() if state == "other"]
    if others and not force:
        raise ValueError(
            f"{out / others[0]} holds a run with another configuration ({len(others)} such "
            "run directories); pass --force to retrain them from scratch"
        )
    for run in others:
        for name in (*RUN_FILES, ROW, ATTEMPTS):
            (out / run / name).unlink(missing_ok=True)
        states[run] = "new"
    atomic_write(out / MARKER, lambda fh: fh.write(b'{"format": 1}\n'), overwrite=True)
    return states


def run_sweep(
    points: Sequence[Point],
    out: str | os.PathLike,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    threads: int = 1,
    force: bool = False,
    quiet: bool = False,
) -> SweepResult:
    """Train every point not yet complete (serially, or on Dask with `workers` / `scheduler`),
    then write the table (``results.csv``, ``results.json``) into `out`; see the module
    docstring. ``threads``: torch threads of each training."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1; found {threads!r}")
    if workers is not None and (isinstance(workers, bool) or workers < 1):
        raise ValueError(f"--workers must be >= 1, got {workers}")
    out = Path(out)
    states = prepare(points, out, force=force)
    rows: dict[str, dict] = {}
    for p in points:
        if states[p.run] == "done":
            rows[p.run] = _read_json(out / p.run / ROW)["row"]
    pending = [p for p in points if p.run not in rows]
    skipped = len(rows)
    progress = _progress_bar(len(points), skipped, quiet)
    try:
        if workers is None and scheduler is None:
            for p in pending:
                try:
                    rows[p.run] = run_point(p, str(out), threads)
                except Exception as exc:  # the sweep goes on; the row says what failed
                    rows[p.run] = failed_row(p, exc)
                progress.update(1)
        elif pending:
            rows.update(_run_on_dask(pending, out, workers, scheduler, threads, progress))
    finally:
        progress.close()
    table = [rows[p.run] for p in points]
    write_table(out, table)
    failed = sum(row["status"] != "ok" for row in table)
    return SweepResult(table, len(pending) - failed, skipped, failed)


def _run_on_dask(points, out: Path, workers, scheduler, threads: int, progress) -> dict:
    """One Dask task per point; rows by run path (a failed point's row says why)."""
    from sde_sim.distributed import cluster_client

    with cluster_client(workers, scheduler) as client:
        from distributed import as_completed

        # a fresh key per sweep: a cluster may still hold an earlier sweep's results
        token = uuid.uuid4().hex[:12]
        futures = {
            client.submit(
                run_point,
                p,
                str(out.resolve()),
                threads,
                key=f"sweep-{p.run}-{token}",
                pure=False,
                retries=RETRIES,
            ): p
            for p in points
        }
        rows = {}
        for future in as_completed(futures):
            point = futures[future]
            if future.status == "finished":
                rows[point.run] = future.result()
            else:
                rows[point.run] = failed_row(point, future.exception())
            progress.update(1)
        return rows


def _progress_bar(total: int, initial: int, quiet: bool):
    from tqdm.auto import tqdm

    disable = quiet or not sys.stderr.isatty()
    return tqdm(
        total=total, initial=initial, disable=disable, unit="run", desc="sweep", file=sys.stderr
    )


def write_table(out: Path, rows: Sequence[dict]) -> None:
    """``out/results.csv`` (floats as Python's shortest round-trip text, missing values empty)
    and ``out/results.json`` (``{"columns": [...], "rows": [...]}``), atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row[k]) for k in COLUMNS})
    text = buffer.getvalue().encode()
    atomic_write(out / TABLE_CSV, lambda fh: fh.write(text), overwrite=True)
    payload = {"columns": list(COLUMNS), "rows": [{k: row.get(k) for k in COLUMNS} for row in rows]}
    data = (json.dumps(payload, indent=2, allow_nan=True) + "\n").encode()
    atomic_write(out / TABLE_JSON, lambda fh: fh.write(data), overwrite=True)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Train a grid of cases x layers x seeds, one `verify train` run directory "
        "per point; skip finished points, resume unfinished ones from their checkpoints, and "
        "write the table DIR/results.csv and DIR/results.json.",
    )
    parser.add_argument(
        "--cases",
        nargs="+",
        required=True,
        metavar="CASE",
        help="trained systems of verify.mle_convergence.CASES (space- or comma-separated)",
    )
    parser.add_argument(
        "--layers",
        nargs="+",
        default=None,
        metavar="LAYER",
        help="layers to train on each case (default: the case's own layer, with its options)",
    )
    parser.add_argument(
        "--seeds", required=True, help="seeds: 0-9, 0,2,5 or 0-3,7 (each trains once)"
    )
    parser.add_argument("--quick", action="store_true", help="the cases' quick training length")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a training setting for every point, VALUE in JSON (e.g. steps=50, n_paths=64); "
        "repeatable",
    )
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="sweep folder")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per training (default 1)"
    )
    parser.add_argument(
        "--force", action="store_true", help="retrain run directories with another configuration"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="train on N local Dask worker processes (needs filtersuite[distributed])",
    )
    where.add_argument(
        "--scheduler", metavar="ADDRESS", help="train on the Dask cluster at ADDRESS"
    )
    return parser


def _sweep(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    if args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    try:
        seeds = parse_seeds(args.seeds)
        points = plan(
            _names(args.cases),
            None if args.layers is None else _names(args.layers),
            seeds,
            quick=args.quick,
            overrides=json_options(args.set, "--set"),
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    from verify.distributed import INSTALL_HINT, DistributedUnavailable  # imports no Dask

    if args.workers is not None or args.scheduler is not None:
        try:  # before anything is written
            import distributed  # noqa: F401
        except ImportError:
            raise UsageError(
                f"--workers and --scheduler need Dask distributed: {INSTALL_HINT}"
            ) from None
    try:
        result = run_sweep(
            points,
            args.out,
            workers=args.workers,
            scheduler=args.scheduler,
            threads=args.threads,
            force=args.force,
            quiet=args.quiet,
        )
    except DistributedUnavailable as exc:
        raise UsageError(str(exc)) from None
    print(
        f"{len(points)} runs: {result.trained} trained, {result.skipped} already complete, "
        f"{result.failed} failed; table in {args.out / TABLE_CSV} and {args.out / TABLE_JSON}"
    )
    for row in result.rows:
        if row["status"] != "ok":
            print(f"FAILED {row['run']}: {row['error']}")
    return 1 if result.failed else 0


def main(argv: list[str]) -> int:
    """``python -m verify sweep ...``: exit 0 when every point is trained, 1 when one failed,
    2 on bad usage, 130 when interrupted (rerun the same command to continue)."""
    return run_cli(
        _sweep, argv, prog=PROG, interrupted="interrupted; rerun the same command to continue"
    )

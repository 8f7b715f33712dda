"""``python -m verify``: run the registered checks, print a table, optionally write JSON.

Exit status: 0 when every selected check passes, 1 when any fails or errors (or the run fails),
2 for bad usage (including an ``--only`` pattern that matches nothing), under the suite's error
contract (`sde_sim.plumbing.run_cli`: one line on stderr, no traceback unless
``FILTERSUITE_DEBUG=1``).

``python -m verify train ...`` trains a layer on simulated data (`verify.training`); see
``python -m verify train --help``. ``python -m verify sweep ...`` trains a grid of them
(`verify.sweep`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sde_sim.plumbing import (
    OneLineParser,
    UsageError,
    atomic_write,
    check_target,
    json_options,
    package_version,
    run_cli,
)
from verify.registry import Result, run_all, select

PROG = "python -m verify"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Prove and check every closed form of the papers: "
        "symbolically (SymPy), numerically and by Monte Carlo.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer random cases and paths (what CI runs)"
    )
    parser.add_argument(
        "--only", metavar="PATTERN", help="checks whose id matches (glob with *?[ , else substring)"
    )
    parser.add_argument("--list", action="store_true", help="list the checks without running")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    parser.add_argument(
        "--table", type=Path, metavar="FILE", help="also write the printed table to FILE"
    )
    parser.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write a browsable report (verify.report_html)",
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite --json/--table/--html files"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="run the checks on N local Dask worker processes (needs filtersuite[distributed])",
    )
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run the checks on the Dask cluster at ADDRESS (e.g. tcp://host:8786)",
    )
    return parser


def _row(r: Result) -> str:
    c = r.check
    return (
        f"{c.id:<46} {c.kind:<11} {r.shown_residual:>11}  {c.bound():<9} "
        f"{r.seconds:>6.2f}s  {r.status}"
    )


HEADER = f"{'check':<46} {'kind':<11} {'residual':>11}  {'needs':<9} {'time':>7}  status"


def _details(results: list[Result]) -> list[str]:
    lines = []
    for r in results:
        c = r.check
        lines.append(f"{c.id}: {c.title}")
        lines.append(f"    source: {c.source}")
        if r.detail:
            lines.append(f"    {r.detail}")
        if r.error:
            lines.append(f"    error: {r.error}")
    return lines


def build_train_parser() -> argparse.ArgumentParser:
    from verify.tasks import TASKS
    from verify.training import LAYERS, TrainConfig

    default = TrainConfig()
    parser = OneLineParser(
        prog=f"{PROG} train",
        description="Train one attention layer on simulated measurements with a one-step "
        "prediction loss (MSE, or the Gaussian NLL of the layer's own predictive law), or on a "
        "synthetic task (--task); writes config.json, metrics.jsonl and checkpoint.pt into "
        "--out.",
    )
    parser.add_argument("--layer", default=default.layer, help=f"one of {', '.join(LAYERS)}")
    parser.add_argument(
        "--preset", default=None, help=f"sde_sim preset name (default {default.preset})"
    )
    parser.add_argument(
        "--task",
        default=None,
        help=f"train on a synthetic task instead of a preset: one of {', '.join(TASKS)} "
        "(classification tasks: cross-entropy loss, held-out accuracy; regression: MSE)",
    )
    parser.add_argument(
        "--task-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword option of the task's generator, VALUE in JSON (e.g. train_length=8, "
        "test_lengths=[16]); repeatable",
    )
    parser.add_argument("--variant", default=None, help="preset variant (default: its first)")
    parser.add_argument(
        "--n-steps", type=int, default=None, help="integration steps per path (default: preset's)"
    )
    parser.add_argument(
        "--sim-method", default=default.sim_method, help="euler or exact (linear systems)"
    )
    parser.add_argument("--steps", type=int, default=default.steps, help="optimizer steps")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="run directory")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    parser.add_argument("--force", action="store_true", help="start afresh in an existing DIR")
    parser.add_argument("--seed", type=int, default=default.seed)
    parser.add_argument("--device", default=default.device, help="torch device (default cpu)")
    parser.add_argument("--lr", type=float, default=default.lr, help="Adam learning rate")
    parser.add_argument(
        "--paths",
        type=int,
        default=default.n_paths,
        help="training paths (a task: training sequences)",
    )
    parser.add_argument(
        "--holdout-paths",
        type=int,
        default=default.holdout_paths,
        help="held-out paths (a task: held-out sequences)",
    )
    parser.add_argument("--batch-size", type=int, default=default.batch_size)
    parser.add_argument(
        "--embed-dim", type=int, default=None, help="layer width (default d; a task: 16)"
    )
    parser.add_argument("--heads", type=int, default=default.num_heads)
    parser.add_argument("--eval-every", type=int, default=default.eval_every)
    parser.add_argument("--checkpoint-every", type=int, default=default.checkpoint_every)
    parser.add_argument("--dtype", default=default.dtype, help="float32 or float64")
    parser.add_argument(
        "--schedule", default=default.schedule, help="learning rate: constant, cosine or tail"
    )
    parser.add_argument(
        "--loss",
        default=None,
        help="mse (default), or nll: the Gaussian negative log-likelihood of the one-step "
        "predictions under the layer's predictive law (unrolled-afa); a task's own loss by "
        "default (ce or mse)",
    )
    parser.add_argument(
        "--layer-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a keyword option of the layer, VALUE in JSON (e.g. nu=1.0, learn_nu=true); "
        "repeatable",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _json_options(items: list[str], flag: str = "--layer-option") -> dict:
    """`sde_sim.plumbing.json_options`, by default for ``--layer-option``."""
    return json_options(items, flag)


def _train(argv: list[str]) -> int:
    from verify import tasks
    from verify.training import TrainConfig, train

    args = build_train_parser().parse_args(argv)
    if args.task is not None and args.preset is not None:
        raise UsageError("pass --preset or --task, not both")
    if args.task is None and args.task_option:
        raise UsageError("--task-option needs --task")
    loss = args.loss
    if loss is None:
        loss = tasks.TASKS[args.task].loss if args.task in tasks.TASKS else "mse"
    preset = {} if args.preset is None else {"preset": args.preset}
    config = TrainConfig(
        layer=args.layer,
        **preset,
        variant=args.variant,
        sim_method=args.sim_method,
        n_steps=args.n_steps,
        steps=args.steps,
        seed=args.seed,
        lr=args.lr,
        n_paths=args.paths,
        holdout_paths=args.holdout_paths,
        batch_size=args.batch_size,
        embed_dim=args.embed_dim,
        num_heads=args.heads,
        eval_every=args.eval_every,
        checkpoint_every=args.checkpoint_every,
        dtype=args.dtype,
        device=args.device,
        schedule=args.schedule,
        loss=loss,
        layer_options=_json_options(args.layer_option),
        task=args.task,
        task_options=_json_options(args.task_option, "--task-option"),
    )
    result = train(config, args.out, resume=args.resume, force=args.force, quiet=args.quiet)
    if config.task is None:
        on, metric = f"{config.preset}/{config.variant or 'default'}", "held-out one-step MSE"
    else:
        on, metric = f"task {config.task}", "held-out " + ("accuracy" if loss == "ce" else "MSE")
    (value,) = result.heldout.values()
    print(
        f"{config.layer} on {on}: step {result.step}, train {config.loss.upper()} "
        f"{result.train_loss:.4g}, {metric} {value:.4g}; run in {args.out}"
    )
    return 0


def train_main(argv: list[str]) -> int:
    """``python -m verify train ...``: exit 0 when trained, 2 on bad usage or input, 1 when
    training fails, 130 when interrupted (continue with ``--resume``)."""
    return run_cli(
        _train, argv, prog=f"{PROG} train", interrupted="interrupted; continue with --resume"
    )


def _check_html_target(args: argparse.Namespace) -> None:
    """``--html FILE``: a new ``.html`` file (or ``--force``), not the --json/--table file."""
    check_target(args.html, "--html", force=args.force, suffix=".html")
    for flag, other in (("--json", args.json), ("--table", args.table)):
        if args.html is not None and other is not None and args.html.resolve() == other.resolve():
            raise UsageError(f"{flag} and --html name the same file {other}")


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    checks = select(args.only)
    if not checks:
        raise UsageError(f"--only {args.only!r} matches no check (see --list)")
    if args.list:
        for c in checks:
            print(f"{c.id:<46} {c.kind:<11} {c.source}")
        return 0
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    check_target(args.json, "--json", force=args.force)
    check_target(args.table, "--table", force=args.force)
    both = args.json is not None and args.table is not None
    if both and args.json.resolve() == args.table.resolve():
        raise UsageError(f"--json and --table name the same file {args.json}")
    _check_html_target(args)

    mode = "quick" if args.quick else "full"
    print(f"filtersuite {package_version()}: {len(checks)} checks ({mode})")
    print(HEADER)
    start = time.perf_counter()
    show = lambda r: print(_row(r), flush=True)  # noqa: E731
    if args.workers is None and args.scheduler is None:
        results = run_all(checks, quick=args.quick, on_result=show)
    else:
        from verify.distributed import DistributedUnavailable, run_distributed

        try:
            results = run_distributed(
                checks,
                quick=args.quick,
                workers=args.workers,
                scheduler=args.scheduler,
                on_result=show,
            )
        except DistributedUnavailable as exc:
            raise UsageError(str(exc)) from None
    total = time.perf_counter() - start
    failed = [r for r in results if not r.passed]
    summary = (
        f"{len(results) - len(failed)} of {len(results)} checks passed in {total:.1f} s "
        f"({mode})" + (f"; FAILED: {', '.join(r.check.id for r in failed)}" if failed else "")
    )
    print(summary)
    if args.table is not None:
        text = "\n".join([HEADER, *map(_row, results), summary, "", *_details(results), ""])
        atomic_write(args.table, lambda fh: fh.write(text.encode()), overwrite=args.force)
    if args.html is not None:
        from verify.report_html import write_html

        write_html(
            args.html,
            results,
            header=f"filtersuite {package_version()} ({mode})",
            overwrite=args.force,
        )
    if args.json is not None:
        payload = {
            "filtersuite_version": package_version(),
            "mode": mode,
            "seconds": round(total, 2),
            "passed": not failed,
            "checks": [r.to_dict() for r in results],
        }
        data = json.dumps(payload, indent=2).encode()
        atomic_write(args.json, lambda fh: fh.write(data), overwrite=args.force)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m verify [train] ...`` under the error contract; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "train":
        return train_main(argv[1:])
    if argv and argv[0] == "sweep":
        from verify.sweep import main as sweep_main

        return sweep_main(argv[1:])
    return run_cli(_run, argv, prog=PROG)

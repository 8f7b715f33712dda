"""Trained layers against the optimal predictors: held-out one-step MSE ratios and CPU time.

For each `verify.mle_convergence.CASES` entry and seed: train the layer (full length, or the
quick length with ``--quick``, or ``--steps``), then print the held-out one-step MSE as a ratio
to each reference predictor (the Kalman filter with the true parameters for linear systems, the
batch MLE with the true parameters (the AFA layer's estimator where the eigenbasis is unitary),
the mean-field RT estimator for the radial-tangential system, and the last measurement), with
the wall and CPU seconds of the training. The peers here are estimators, not libraries: the
question is how close a layer that sees only measurements gets to the optimum, and at what cost.

Issue 7's target: a one-layer isotropic AFA on ``afa-2d`` b within 1.10 x the Kalman optimum in
under 2 CPU minutes. torch uses ``--threads`` threads (default 1, so CPU seconds are one core's).

Run::

    python benchmarks/bench_training.py                         # every case, seeds 0 1 2
    python benchmarks/bench_training.py --cases afa-2d-b --seeds 0 1 2 3
    python benchmarks/bench_training.py --quick --json out/training.json
    python benchmarks/bench_training.py --cases unrolled-afa-ou-nll --parameters
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import platform
import sys
from pathlib import Path

import numpy as np
import torch

from verify.mle_convergence import CASES, parameter_recovery, prediction_ratio


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="the quick training length")
    parser.add_argument("--steps", type=int, default=None, help="override the training length")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument(
        "--parameters",
        action="store_true",
        help="also fit the parameter MLE on the training paths and print the learned "
        "parameters' largest distance to it in standard errors (and the log-likelihood gap)",
    )
    return parser


def run(case: str, seed: int, *, quick: bool, steps: int | None, parameters: bool) -> dict:
    """Train one case and seed; the row of the table."""
    config = CASES[case].config(quick=quick, seed=seed)
    if steps is not None:
        config = dataclasses.replace(config, steps=steps, eval_every=max(steps // 8, 1))
    report = prediction_ratio(config)
    recovery = None
    if parameters:
        try:
            recovery = parameter_recovery(report)
        except ValueError:  # a layer or preset without a parameter MLE table
            recovery = None
    return {
        "case": case,
        "seed": seed,
        "steps": report.steps,
        "reference": CASES[case].reference,
        "ratio": report.ratios[CASES[case].reference],
        "ratios": report.ratios,
        "wall_s": report.wall_s,
        "cpu_s": report.cpu_s,
        "curve": [
            m["heldout_mse"] / report.references[CASES[case].reference] for m in report.metrics
        ],
        "max_z": math.nan if recovery is None else recovery.max_z,
        "loglik_gap": math.nan if recovery is None else recovery.loglik_gap,
        "parameters": None if recovery is None else recovery.summary(),
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.steps is not None and args.steps < 1:
        print("bench_training.py: error: --steps must be >= 1", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    print(
        f"# {datetime.date.today()} {platform.machine()} {platform.python_version()} "
        f"torch {torch.__version__}, {args.threads} thread(s), "
        + (f"{args.steps} steps" if args.steps else f"{'quick' if args.quick else 'full'} length")
    )
    header = f"{'case':16s} {'seed':>4s} {'steps':>6s} {'reference':>9s} {'ratio':>7s}"
    print(f"{header} {'x mle':>7s} {'x last':>7s} {'wall s':>7s} {'CPU s':>7s}")
    rows = []
    for case in args.cases:
        for seed in args.seeds:
            row = run(case, seed, quick=args.quick, steps=args.steps, parameters=args.parameters)
            rows.append(row)
            ratios = row["ratios"]
            mle = ratios.get("mle", np.nan)
            print(
                f"{case:16s} {seed:4d} {row['steps']:6d} {row['reference']:>9s} "
                f"{row['ratio']:7.3f} {mle:7.3f} {ratios['last']:7.3f} {row['wall_s']:7.1f} "
                f"{row['cpu_s']:7.1f}",
                flush=True,
            )
            if row["parameters"] is not None:
                print(f"    parameters: {row['parameters']}", flush=True)
    for case in args.cases:
        values = np.array([r["ratio"] for r in rows if r["case"] == case])
        cpu = np.array([r["cpu_s"] for r in rows if r["case"] == case])
        print(
            f"{case}: ratio {values.min():.3f}-{values.max():.3f} over {values.size} seed(s), "
            f"CPU {cpu.min():.0f}-{cpu.max():.0f} s"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

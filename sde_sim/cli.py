"""``python -m sde_sim``: list the presets, simulate one, or simulate them all.

Errors follow the suite's contract (`sde_sim.plumbing.run_cli`): bad arguments or a system the
library refuses print one line on stderr and exit with status 2, before anything is simulated or
written; a failure while running exits with status 1.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np

from sde_sim import io, presets
from sde_sim.models import RT_MODES, LinearSDE, RadialTangentialSDE
from sde_sim.observe import Contamination, EveryKSteps, PoissonTimes
from sde_sim.plumbing import (
    OneLineParser,
    UsageError,
    atomic_write,
    check_folder,
    check_target,
    physical_memory,
    run_cli,
)
from sde_sim.scenario import DTYPES, METHODS, PATH_BLOCK, Scenario, Simulation, plan, simulate
from sde_sim.validation import EulerStabilityWarning

PROG = "python -m sde_sim"
# Show a progress bar once a run integrates at least this many path-steps (about a second).
PROGRESS_THRESHOLD = 20_000_000


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Simulate the linear and radial-tangential SDEs of "
        "the filtering-attention papers.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    sub.add_parser("list", help="list the preset systems and their variants")

    sim = sub.add_parser(
        "simulate",
        help="simulate one preset system",
        description="Simulate paths of a preset system and measure them.",
    )
    sim.add_argument("--system", required=True, help="preset name (see `list`)")
    sim.add_argument("--variant", help="preset variant (default: the first listed)")
    sim.add_argument(
        "--mode",
        choices=RT_MODES,
        help="radial-tangential presets: 'literal' or 'frozen-frame' reading",
    )
    sim.add_argument("--paths", type=int, default=4, help="number of paths (default 4)")
    sim.add_argument("--steps", type=int, help="number of integration steps (default: preset's)")
    sim.add_argument("--dt", type=float, help="step size (default: preset's)")
    obs = sim.add_mutually_exclusive_group()
    obs.add_argument("--obs-every", type=int, metavar="K", help="a measurement every K steps")
    obs.add_argument(
        "--obs-rate", type=float, metavar="R", help="measurements at Poisson times, R per unit time"
    )
    sim.add_argument(
        "--outliers",
        type=float,
        default=0.0,
        metavar="F",
        help="fraction of measurements with heavy-tailed (Cauchy, 10x) noise",
    )
    sim.add_argument(
        "--missing",
        type=float,
        default=0.0,
        metavar="F",
        help="fraction of measurements missing (NaN)",
    )
    sim.add_argument(
        "--method",
        choices=METHODS,
        default="euler",
        help="euler (Euler-Maruyama, default) or exact (exact discretisation)",
    )
    sim.add_argument("--dtype", choices=DTYPES, default="float64")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sim.add_argument(
        "--out",
        type=Path,
        help="write the simulation to this .npz file, or to a .zarr store block by block "
        "(larger than memory; resumable; see --workers)",
    )
    where = sim.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="with --out FILE.zarr: simulate on N local Dask worker processes "
        "(needs filtersuite[distributed])",
    )
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="with --out FILE.zarr: simulate on the Dask cluster at ADDRESS "
        "(e.g. tcp://host:8786; the store's path must be reachable from every worker)",
    )
    sim.add_argument(
        "--chunk-paths",
        type=int,
        metavar="K",
        help=f"with --out FILE.zarr: paths per task, a multiple of {PATH_BLOCK} "
        f"(default {PATH_BLOCK}); a worker holds {PATH_BLOCK} paths in memory at a time",
    )
    sim.add_argument("--plot", type=Path, help="write a plot of the paths to this .png file")
    sim.add_argument("--force", action="store_true", help="overwrite existing output files")

    gallery = sub.add_parser(
        "simulate-all",
        help="simulate every preset variant into a folder",
        description="Simulate every variant of every preset with its "
        "defaults; write NAME-VARIANT.npz and .png into --out.",
    )
    gallery.add_argument("--out", type=Path, required=True, help="output folder")
    gallery.add_argument("--paths", type=int, default=16, help="paths per variant (default 16)")
    gallery.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gallery.add_argument("--force", action="store_true", help="overwrite existing files")
    return parser


def _list() -> None:
    for preset in presets.PRESETS.values():
        print(f"{preset.name:<16} {preset.summary}")
        print(f"{'':<16}   source: {preset.source}")
        for variant in preset.variants:
            print(f"{'':<16}   --variant {variant.name:<9} {variant.summary}")


def _scenario_from_args(args) -> Scenario:
    preset = presets.get(args.system)
    scenario = preset.scenario(args.variant)
    changes = {}
    if args.steps is not None:
        changes["n_steps"] = args.steps
    if args.dt is not None:
        changes["dt"] = args.dt
    if args.obs_every is not None:
        changes["observations"] = EveryKSteps(args.obs_every)
    if args.obs_rate is not None:
        changes["observations"] = PoissonTimes(args.obs_rate)
    if args.outliers or args.missing:
        changes["contamination"] = Contamination(
            outlier_fraction=args.outliers, missing_fraction=args.missing
        )
    if args.mode is not None:
        if not isinstance(scenario.system, RadialTangentialSDE):
            raise UsageError(
                f"--mode applies to radial-tangential presets; {args.system} is linear"
            )
        changes["system"] = scenario.system.with_mode(args.mode)
    return scenario.replace(**changes) if changes else scenario


def _progress_bar(total_work: int):
    if total_work < PROGRESS_THRESHOLD:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=1, unit="step", file=sys.stderr, leave=False, disable=None)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    return update, bar


def _summary(name: str, sim: Simulation) -> str:
    P, T, d = sim.x.shape
    meta, M = sim.meta, sim.t_obs.size
    return "\n".join(
        [
            f"{name}: {P} path{'s' if P != 1 else ''} x {T} points in {d}-D, t in "
            f"[{sim.t[0]:g}, {sim.t[-1]:g}] ({meta['method']}, {meta['dtype']}, seed "
            f"{meta['seed']})",
            f"  x: shape {sim.x.shape}, values in [{sim.x.min():.3g}, {sim.x.max():.3g}]",
            f"  z: shape {sim.z.shape}, {M} measurement times, {int(sim.missing.sum())} missing, "
            f"{int(sim.outlier.sum())} outliers",
        ]
    )


def _check_finite_paths(sim: Simulation, scenario: Scenario, method: str, caught) -> None:
    """Refuse, before anything is written, paths that overflowed to inf or NaN: an
    Euler-Maruyama step too large for the system's rates (``|1 + lambda dt| > 1``) makes them
    grow geometrically. The message carries the simulator's `EulerStabilityWarning` (the
    stable step) when it gave one."""
    bad = int(sim.x.size - np.count_nonzero(np.isfinite(sim.x)))
    if not bad:
        return
    why = [str(w.message) for w in caught if issubclass(w.category, EulerStabilityWarning)]
    exact = method == "euler" and isinstance(scenario.system, LinearSDE)
    advice = (
        why[0]
        if why
        else (
            f"the step dt = {scenario.dt:g} is too large for the system's rates; use a smaller "
            f"--dt{' or --method exact' if exact else ''}"
        )
    )
    raise UsageError(
        f"the simulated paths overflowed ({bad} of {sim.x.size} state values are inf or NaN): "
        f"{advice}"
    )


def _check_targets(out: Path | None, plot: Path | None, force: bool) -> None:
    """Before anything is simulated or written (`sde_sim.plumbing.check_target`), so that a
    failing command leaves nothing behind."""
    check_target(out, "--out", force=force, suffix=".npz")
    check_target(plot, "--plot", force=force, suffix=".png")


def _memory_bytes(scenario: Scenario, paths: int, dtype: str) -> float:
    """A lower estimate of what `simulate` allocates: the measurement times, then per path the
    states and Brownian increments on the grid with the measurement times inserted, and the
    measurements (the integrator holds a few such arrays at once)."""
    points = scenario.n_steps + 1
    rate = getattr(scenario.observations, "rate", None)
    times = rate * scenario.n_steps * scenario.dt if rate is not None else points
    itemsize = np.dtype(dtype).itemsize
    k = getattr(scenario.measurement, "out_dim", scenario.system.dim)
    per_path = (points + times) * (2 * scenario.system.dim + k)
    return 8.0 * times + float(paths) * per_path * itemsize


def _check_memory(scenario: Scenario, paths: int, dtype: str) -> None:
    """Refuse a run that cannot fit this machine's memory, with the numbers."""
    total = physical_memory()
    if total is None:  # not a POSIX system: no estimate
        return
    need = _memory_bytes(scenario, paths, dtype)
    if need > total:
        raise UsageError(
            f"this run needs at least {need / 2**30:.3g} GiB ({paths} paths x "
            f"{scenario.n_steps} steps in {scenario.system.dim}-D), more than this machine's "
            f"{total / 2**30:.3g} GiB: fewer --paths or --steps, or a lower measurement rate"
        )


def _simulate_and_write(
    scenario: Scenario,
    name: str,
    variant: str,
    args,
    *,
    out,
    plot,
    method="euler",
    dtype="float64",
    report=False,
) -> Simulation:
    _check_targets(out, plot, args.force)
    _check_memory(scenario, args.paths, dtype)
    update, bar = _progress_bar(args.paths * scenario.n_steps)
    try:
        # held back: paths that overflow are refused below in one line that says why
        with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
            warnings.simplefilter("always")
            sim = simulate(
                scenario,
                args.paths,
                seed=args.seed,
                method=method,
                dtype=dtype,
                progress=update,
                meta={"preset": name, "variant": variant},
            )
    finally:
        if bar is not None:
            bar.close()
    _check_finite_paths(sim, scenario, method, caught)
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if report:
        print(_summary(f"{name} ({variant})", sim))
    if out is not None:
        written = io.save(sim, out, overwrite=args.force)
        print(f"  wrote {written} ({written.stat().st_size / 1e3:.1f} kB)")
    if plot is not None:
        from sde_sim.plotting import plot_simulation

        fig = plot_simulation(sim, title=f"{name} ({variant})")
        atomic_write(plot, lambda fh: fig.savefig(fh, format="png", dpi=110), overwrite=args.force)
        print(f"  wrote {plot}")
    return sim


def _simulate(args) -> None:
    scenario = _scenario_from_args(args)
    preset = presets.get(args.system)
    variant = preset.variant(args.variant).name
    if args.method == "exact" and not (
        isinstance(scenario.system, LinearSDE) or scenario.system.mode == "frozen-frame"
    ):
        raise UsageError("--method exact needs a linear system or --mode frozen-frame")
    if args.out is not None and args.out.suffix not in (".npz", ".zarr"):
        raise UsageError(f"--out must end in .npz or .zarr, got {str(args.out)!r}")
    if args.out is not None and args.out.suffix == ".zarr":
        _simulate_to_store(scenario, args.system, variant, args)
        return
    for flag, value in (
        ("--workers", args.workers),
        ("--scheduler", args.scheduler),
        ("--chunk-paths", args.chunk_paths),
    ):
        if value is not None:
            raise UsageError(f"{flag} needs --out FILE.zarr (a store written block by block)")
    _simulate_and_write(
        scenario,
        args.system,
        variant,
        args,
        out=args.out,
        plot=args.plot,
        method=args.method,
        dtype=args.dtype,
        report=True,
    )
    if args.out is None and args.plot is None:
        print("  (nothing written: pass --out FILE.npz and/or --plot FILE.png)")


def _check_disk(out: Path, need: int) -> None:
    """Refuse a new store larger than the free space where it goes, with the numbers."""
    folder = out.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if need > free:
        raise UsageError(
            f"--out {out} needs about {need / 1e9:.3g} GB, more than the {free / 1e9:.3g} GB "
            f"free on {folder}: fewer --paths or --steps, or another folder"
        )


def _simulate_to_store(scenario: Scenario, name: str, variant: str, args) -> None:
    """``--out FILE.zarr``: the blocks not yet complete, computed here or on Dask workers and
    written by whoever computed them (`sde_sim.chunked`); every check runs before the store is
    created or changed."""
    from sde_sim import chunked
    from sde_sim.distributed import DistributedUnavailable, require_distributed

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    chunk_paths = PATH_BLOCK if args.chunk_paths is None else args.chunk_paths
    if chunk_paths < 1 or chunk_paths % PATH_BLOCK:
        raise UsageError(
            f"--chunk-paths must be a positive multiple of {PATH_BLOCK} (the block of paths "
            f"seeded together), got {chunk_paths}"
        )
    check_folder(args.out.parent, "--out", shown=args.out)
    check_target(args.plot, "--plot", force=args.force, suffix=".png")
    on_cluster = args.workers is not None or args.scheduler is not None
    try:
        chunked.require_zarr()
        if on_cluster:
            require_distributed()
    except DistributedUnavailable as exc:
        raise UsageError(str(exc)) from None
    p = plan(
        scenario,
        args.paths,
        seed=args.seed,
        method=args.method,
        dtype=args.dtype,
        meta={"preset": name, "variant": variant},
    )
    fresh = not args.out.exists()
    if fresh:
        _check_disk(args.out, chunked.store_bytes(p))
    _group, done = chunked.open_store(args.out, p, force=args.force)
    fresh = fresh or not done.any()  # a replaced or empty store: nothing to keep on failure
    missing = np.flatnonzero(~done)
    P, T, d = p.n_paths, scenario.n_steps + 1, scenario.system.dim
    print(
        f"{name} ({variant}): {P} path{'s' if P != 1 else ''} x {T} points in {d}-D "
        f"({args.method}, {args.dtype}, seed {args.seed}), {p.n_blocks} block"
        f"{'s' if p.n_blocks != 1 else ''} of up to {PATH_BLOCK} paths"
    )
    if done.any():
        print(f"  resuming {args.out}: {int(done.sum())} of {done.size} blocks already complete")
    bar = None
    if P * scenario.n_steps >= PROGRESS_THRESHOLD:
        from tqdm import tqdm

        bar = tqdm(total=missing.size, unit="block", file=sys.stderr, leave=False, disable=None)
    update = None if bar is None else bar.update
    try:
        if not on_cluster:
            written = chunked.write_store(
                args.out, p, missing, chunk_paths=chunk_paths, progress=update
            )
        else:
            from sde_sim.distributed import cluster_client

            with cluster_client(args.workers, args.scheduler) as client:
                written = chunked.write_store(
                    args.out, p, missing, client=client, chunk_paths=chunk_paths, progress=update
                )
    except (UsageError, ValueError, TypeError):
        # Input the library refuses only while simulating (the first block fails): a store this
        # command made and could not fill one block of is removed, so bad input leaves nothing.
        if fresh and not chunked.any_complete(args.out):
            shutil.rmtree(args.out, ignore_errors=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(f"  wrote {args.out} ({written} blocks now, {size / 1e6:.1f} MB in all)")
    if args.plot is not None:
        from sde_sim.plotting import plot_simulation

        sim = io.load(args.out)
        n = min(3, P)
        head = Simulation(
            t=sim.t,
            t_obs=sim.t_obs,
            meta=sim.meta,
            **{
                k: np.asarray(getattr(sim, k)[:n])
                for k in ("x", "z", "x_obs", "outlier", "missing")
            },
        )
        fig = plot_simulation(head, title=f"{name} ({variant})")
        atomic_write(
            args.plot, lambda fh: fig.savefig(fh, format="png", dpi=110), overwrite=args.force
        )
        print(f"  wrote {args.plot}")


def _simulate_all(args) -> None:
    variants = [(p, v) for p in presets.PRESETS.values() for v in p.variants]
    for preset, variant in variants:  # every target first: a clash writes nothing at all
        stem = args.out / f"{preset.name}-{variant.name}"
        _check_targets(stem.with_suffix(".npz"), stem.with_suffix(".png"), args.force)
    for preset, variant in variants:
        stem = args.out / f"{preset.name}-{variant.name}"
        print(f"{preset.name} ({variant.name}): {variant.summary}")
        _simulate_and_write(
            variant.build(),
            preset.name,
            variant.name,
            args,
            out=stem.with_suffix(".npz"),
            plot=stem.with_suffix(".png"),
        )


def run(argv: list[str]) -> None:
    """The command itself; raises on bad usage or failure (see `main`)."""
    args = build_parser().parse_args(argv)
    if args.command == "list":
        _list()
    elif args.command == "simulate":
        _simulate(args)
    else:
        _simulate_all(args)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI under the error contract (`sde_sim.plumbing.run_cli`); returns the exit
    status: 0 done, 2 bad usage, 1 a failure while running."""
    return run_cli(run, argv, prog=PROG)

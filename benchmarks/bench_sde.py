"""Throughput of our Euler-Maruyama simulator against peers, side by side in one run.

Workload (fixed by the project's issue): the preset ``afa-2d`` variant ``b`` (a 2-D linear SDE
``dx = A x dt + G dw``), 4096 paths x 2000 steps of ``dt = 0.01`` from ``x0 = (1, 1)``, in
float64 and float32. Metric: path-steps per second, ``paths * steps / seconds``, where seconds
is the best (minimum) of ``--repeats`` timed calls. Every contestant returns or writes the
whole path, all ``steps + 1`` time points.

Contestants
-----------
ours
    ``sde_sim.simulate_euler`` with a fresh seeded ``BrownianPath`` per call (drawing the noise
    is part of the time); ``simulate_exact`` (exact discretisation) is timed as an extra row.
floor
    One ``np.random.default_rng(seed).standard_normal((P, K, d))`` call plus one copy of the
    draws into an output array of shape (P, K+1, d) that was allocated and touched before the
    timer starts: the least any simulator that returns the path must do.
torchsde
    ``torchsde.sdeint(sde, y0, ts, method="euler", dt=dt)`` with additive noise, Ito, ``ts`` the
    ``steps + 1`` grid points, and the default Brownian motion (the ``BrownianInterval`` that
    ``sdeint`` builds when no ``bm`` is passed), under ``torch.no_grad()`` and torch's default
    thread count.
sdeint
    ``sdeint.itoEuler(f, G, y0, tspan)``, which simulates one path per call in Python; it is
    timed on ``--sdeint-paths`` paths (same steps) and reported in path-steps/s. float64 only.

The repeats are interleaved (each round runs every contestant once, in a rotating order) so
that machine noise hits all of them alike; every contestant gets one untimed warm-up call
first (ours starts its noise thread pool there). Ratios: for a peer, ``ours / peer`` in
path-steps/s (how many times faster we are); for the floor, ``ours time / floor time`` (how
many times slower than the floor we are). A light check prints the sample covariance of the
final state for ours and torchsde next to the exact and Euler-discretised covariances.

Run::

    python benchmarks/bench_sde.py              # the full workload (about a minute or two)
    python benchmarks/bench_sde.py --quick      # smoke run: 64 paths x 100 steps, 1 repeat
    python benchmarks/bench_sde.py --skip-peers # ours and the floor only

The peers are in the optional extra ``bench``: ``pip install -c constraints.txt -e .[bench]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from _harness import NOT_INSTALLED, Column, machine_lines, optional_import, print_table, run_all
from _harness import Contestant as Row

from sde_sim import (
    BrownianPath,
    TimeGrid,
    linear_transition,
    presets,
    simulate_euler,
    simulate_exact,
)

PRESET, VARIANT = "afa-2d", "b"
DTYPES = ("float64", "float32")


@dataclass
class Contestant(Row):
    """One row of the table (`_harness.Contestant`): ``run(seed)`` does one timed call and
    returns its output; ``rate`` is path-steps per second."""

    dtype: str = "float64"
    paths: int = 0
    steps: int = 0
    drift_calls: list[int] | None = None  # torchsde: drift evaluations in the last call

    def __post_init__(self) -> None:
        self.items = self.paths * self.steps  # rate: path-steps per second

    def label(self) -> str:
        return f"{self.name:<22} {self.dtype}"


# --- contestants ------------------------------------------------------------------------------


def make_ours(sampler, system, dtype: str, paths: int, steps: int, dt: float) -> Callable:
    grid = TimeGrid.uniform(dt, steps)
    x0 = np.ones((paths, system.dim))

    def run(seed: int) -> np.ndarray:
        noise = BrownianPath(seed, grid, paths, system.noise_dim, dtype=dtype)
        return sampler(system, x0, noise)

    return run


def make_floor(dtype: str, paths: int, steps: int, dim: int) -> Callable:
    out = np.empty((paths, steps + 1, dim), dtype=dtype)
    out.fill(0.0)  # allocate and touch the pages before any timing

    def run(seed: int) -> np.ndarray:
        draws = np.random.default_rng(seed).standard_normal((paths, steps, dim), dtype=dtype)
        out[:, 1:] = draws
        return out

    return run


def make_torchsde(torch, torchsde, A, G, dtype: str, paths: int, steps: int, dt: float):
    """`sdeint` on an additive-noise Ito SDE; also returns a counter of drift evaluations."""
    tdtype = getattr(torch, dtype)
    calls = [0]

    class LinearAdditiveSDE(torch.nn.Module):
        noise_type = "additive"
        sde_type = "ito"

        def __init__(self):
            super().__init__()
            self.register_buffer("AT", torch.tensor(A.T, dtype=tdtype))
            self.register_buffer("G", torch.tensor(G, dtype=tdtype))

        def f(self, t, y):
            calls[0] += 1
            return y @ self.AT

        def g(self, t, y):
            return self.G.expand(y.shape[0], *self.G.shape)

    sde = LinearAdditiveSDE()
    y0 = torch.ones(paths, A.shape[0], dtype=tdtype)
    ts = torch.linspace(0.0, steps * dt, steps + 1, dtype=tdtype)

    def run(seed: int):  # the default Brownian motion draws its own entropy: seed unused
        calls[0] = 0
        with torch.no_grad():
            return torchsde.sdeint(sde, y0, ts, method="euler", dt=dt)

    return run, calls


def make_sdeint(sdeint, A, G, paths: int, steps: int, dt: float) -> Callable:
    tspan = np.linspace(0.0, steps * dt, steps + 1)
    y0 = np.ones(A.shape[0])

    def drift(y, t):
        return A @ y

    def diffusion(y, t):
        return G

    def run(seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return np.stack(
            [sdeint.itoEuler(drift, diffusion, y0, tspan, generator=rng) for _ in range(paths)]
        )

    return run


def build_contestants(args, system) -> list[Contestant]:
    A, G = np.asarray(system.A), np.asarray(system.G)
    P, K, dt = args.paths, args.steps, args.dt
    torch = torchsde = sdeint = None
    if not args.skip_peers:
        torchsde = optional_import("torchsde")
        torch = optional_import("torch") if torchsde else None
        sdeint = optional_import("sdeint")
    peer_status = "skipped (--skip-peers)" if args.skip_peers else NOT_INSTALLED

    rows = []
    for dtype in DTYPES:
        size = {"dtype": dtype, "paths": P, "steps": K}
        ours = Contestant("ours: simulate_euler", **size)
        ours.run = make_ours(simulate_euler, system, dtype, P, K, dt)
        exact = Contestant("ours: simulate_exact", note="extra row", **size)
        exact.run = make_ours(simulate_exact, system, dtype, P, K, dt)
        floor = Contestant("floor: rng + one copy", **size)
        floor.run = make_floor(dtype, P, K, system.dim)

        ts = Contestant("torchsde euler", status=peer_status, **size)
        if torchsde is not None:
            ts.run, ts.drift_calls = make_torchsde(torch, torchsde, A, G, dtype, P, K, dt)
            ts.status, ts.note = "", "default BrownianInterval"

        sd = Contestant(
            "sdeint itoEuler", status=peer_status, dtype=dtype, paths=args.sdeint_paths, steps=K
        )
        if dtype != "float64":
            sd.status = "n/a (float64 only)"
        elif sdeint is not None:
            sd.run = make_sdeint(sdeint, A, G, args.sdeint_paths, K, dt)
            sd.status, sd.note = "", f"{args.sdeint_paths} paths, 1 per call"
        rows += [ours, exact, floor, ts, sd]
    return rows


# --- report -----------------------------------------------------------------------------------


def ratio_text(c: Contestant, ours: Contestant, floor: Contestant) -> str:
    if c is ours:
        return "-"
    if c is floor:
        return f"ours {ours.best / c.best:.2f}x floor time"
    if c.name.startswith("ours"):
        return f"{c.best / floor.best:.2f}x floor time"
    return f"ours {ours.rate / c.rate:.1f}x faster"


COLUMNS = (
    Column("contestant", 22),
    Column("dtype", 8),
    Column("paths x steps", 13, ">"),
    Column("best s", 9, ">"),
    Column("path-steps/s", 13, ">"),
    Column("ratio", 26, gap="  "),
    Column("note"),
)


def table_rows(contestants: list[Contestant]) -> list[tuple]:
    rows = []
    for dtype in DTYPES:
        group = [c for c in contestants if c.dtype == dtype]
        ours, floor = group[0], group[2]
        for c in group:
            size = f"{c.paths} x {c.steps}"
            if c.run is None:
                rows.append((c.name, dtype, size, "-", "-", c.status))
                continue
            ratio = ratio_text(c, ours, floor)
            rows.append((c.name, dtype, size, f"{c.best:.3f}", f"{c.rate:.3e}", ratio, c.note))
    return rows


def print_targets(contestants: list[Contestant], quick: bool = False) -> None:
    print("\nTargets: ours >= 5x torchsde at equal dtype; ours within 2x of the floor.")
    if quick:
        print("  (--quick sizes: overheads dominate; these are not the benchmark's figures)")
    for dtype in DTYPES:
        group = {c.name: c for c in contestants if c.dtype == dtype}
        ours, floor, ts = (
            group["ours: simulate_euler"],
            group["floor: rng + one copy"],
            group["torchsde euler"],
        )
        if ts.run is None:
            print(f"  {dtype}: vs torchsde: {ts.status}")
        else:
            speedup = ours.rate / ts.rate
            print(
                f"  {dtype}: vs torchsde {speedup:6.1f}x  -> {'MET' if speedup >= 5 else 'NOT MET'}"
            )
        slowdown = ours.best / floor.best
        print(
            f"  {dtype}: vs floor    {slowdown:6.2f}x time -> "
            f"{'MET' if slowdown <= 2 else 'NOT MET'}"
        )


def final_covariance(c: Contestant) -> np.ndarray:
    """Sample covariance of the state at the last time point, (d, d), in float64."""
    out = c.output
    x = out[-1] if c.name.startswith("torchsde") else out[:, -1]
    return np.cov(np.asarray(x, dtype=np.float64), rowvar=False)


def check_outputs(contestants: list[Contestant], system, dt: float) -> None:
    """Shapes, plus the final-time covariance against the exact and the Euler-discrete law."""
    d, steps = system.dim, contestants[0].steps
    Q = system.G @ system.G.T
    exact_cov = linear_transition(system, steps * dt).Qd[0]
    Phi = np.eye(d) + system.A * dt
    euler_cov = np.zeros((d, d))
    for _ in range(steps):  # Cov_{k+1} = Phi Cov_k Phi^T + Q dt from a fixed x0
        euler_cov = Phi @ euler_cov @ Phi.T + Q * dt

    def fmt(C: np.ndarray) -> str:
        return f"xx {C[0, 0]:7.4f}  xy {C[0, 1]:7.4f}  yy {C[1, 1]:7.4f}"

    print(
        f"\nCheck: covariance of x at t = {steps * dt:g} (x0 fixed; sampling error ~ "
        f"{np.sqrt(2 / contestants[0].paths):.0%} at {contestants[0].paths} paths)"
    )
    print(f"  {'exact law (linear_transition)':<44} {fmt(exact_cov)}")
    print(f"  {f'Euler-discretised law (dt = {dt:g})':<44} {fmt(euler_cov)}")
    for c in contestants:
        if c.run is None or c.output is None:
            continue
        if c.name.startswith("torchsde"):
            expected = (c.steps + 1, c.paths, d)
        else:
            expected = (c.paths, c.steps + 1, d)
        shape = tuple(c.output.shape)
        assert shape == expected, f"{c.name} {c.dtype}: shape {shape}, expected {expected}"
        if c.name.startswith(("ours", "torchsde")):
            label = f"{c.name} {c.dtype}"
            if c.drift_calls is not None:
                label += f" ({c.drift_calls[0]} drift calls)"
            print(f"  {label:<44} {fmt(final_covariance(c))}")
    print("  (shapes checked: ours/floor/sdeint (P, K+1, d), torchsde (K+1, P, d); torchsde's")
    print("   drift calls include one shape check by sdeint, so steps = calls - 1)")


# --- main -------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", type=int, help="paths P (default 4096; quick 64)")
    parser.add_argument("--steps", type=int, help="Euler steps K (default 2000; quick 100)")
    parser.add_argument("--repeats", type=int, help="timed calls per contestant (default 5)")
    parser.add_argument("--sdeint-paths", type=int, help="paths for sdeint (default 32; quick 4)")
    parser.add_argument("--dt", type=float, default=0.01, help="step size (default 0.01)")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run, 1 repeat")
    parser.add_argument("--skip-peers", action="store_true", help="time ours and the floor only")
    args = parser.parse_args(argv)
    defaults = {"paths": 4096, "steps": 2000, "repeats": 5, "sdeint_paths": 32}
    if args.quick:
        defaults = {"paths": 64, "steps": 100, "repeats": 1, "sdeint_paths": 4}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    print("SDE simulation throughput: ours vs peers (benchmarks/bench_sde.py)")
    torch = optional_import("torch")
    threads = (
        []
        if torch is None
        else [
            f"torch     : {torch.__version__} (torch.get_num_threads() = {torch.get_num_threads()})"
        ]
    )
    print("\n".join(machine_lines(threads, packages=("torchsde", "sdeint"))))
    print(
        f"workload  : preset {PRESET!r} variant {VARIANT!r}, {args.paths} paths x "
        f"{args.steps} steps, dt = {args.dt:g}, x0 = (1, 1); best of {args.repeats}, "
        "interleaved"
    )
    print(f"command   : {' '.join([os.path.basename(sys.executable), *sys.argv])}\n")

    system = presets.get(PRESET).scenario(VARIANT).system
    contestants = build_contestants(args, system)
    for c in contestants:  # the warm-up call (ours starts its noise thread pool there)
        c.warm = None if c.run is None else functools.partial(c.run, 10_000)
    run_all(contestants, args.repeats, args=lambda r: (r,))

    print()
    print_table(COLUMNS, table_rows(contestants))
    print_targets(contestants, quick=args.quick)
    check_outputs(contestants, system, args.dt)
    print(f"\nTotal wall time: {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

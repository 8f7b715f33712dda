"""Throughput of our batched Kalman filter against peer libraries, side by side in one run.

Workload (fixed by the project's issue): 1000 sequences x T = 1000 measurements, state
dimension d = 2 and d = 16, measurement ``C = I``, one model shared by every sequence and
regular steps ``h = 0.1``. Every contestant filters the same discrete model, the exact
discretisation of the SDE (``F = e^{A h}``, ``Q_d(h)`` from `sde_sim.linear_transition`), from the
same proper prior ``N(m0, P0)`` at the first measurement, and returns the filtered means and
covariances (update first at step 0, then predict + update). Metric: filter-steps per second,
``sequences * T / seconds``, where seconds is the best (minimum) of ``--repeats`` timed calls.

Models
------
d = 2
    Preset ``afa-2d`` variant ``b`` (seed 000 section 4.2): ``A = [[0.9, -2], [1, -1.1]]``,
    ``Q = 0.3 I``, ``R = 0.5 I``.
d = 16
    Eight damped planar rotations (decay rates 0.05..0.5, frequencies 0.5..4 rad/s) mixed by a
    seeded random orthogonal basis, so ``A`` is dense: ``A = U (-diag(a) + Omega) U^T``;
    ``Q = 0.3 I``, ``R = 0.5 I``.

The data are sampled from the discrete model itself (seeded). Two variants per dimension:
*all observed*, where every sequence shares one (times, mask) pattern so our filter computes
the covariances once; and *missing*, where each measurement vector is missing with probability
``--missing`` (default 0.2) independently per sequence, so every sequence has its own pattern
and its own covariance recursion.

Contestants
-----------
ours
    ``estimators.kalman.kalman_filter(sde, measurement, z, t, prior=..., mask=...)`` on the
    whole batch. It also returns predictions and the innovations log-likelihood.
simdkalman
    ``simdkalman.KalmanFilter(F, Q_d, C, R).compute(data, 0, ..., filtered=True,
    smoothed=False, observations=False)``, vectorised over sequences (missing = NaN). Its
    default ``smoothed=True`` would also run a smoother, which is not what is compared here, and
    ``observations=False`` skips the filtered observations it would otherwise add. Timed with and
    without ``log_likelihood=True``; the targets use the faster of the two.
filterpy
    ``filterpy.kalman.KalmanFilter.batch_filter(zs, update_first=True)``, one sequence at a
    time in Python (missing = None), timed on ``--filterpy-sequences`` sequences.
pykalman
    ``pykalman.KalmanFilter(...).filter(X)``, one sequence at a time (missing = masked),
    timed on ``--pykalman-sequences`` sequences.

The peers are timed without their log-likelihoods (filterpy and pykalman compute them in
separate calls, which the check below makes untimed), so they do less work than ours.

The repeats are interleaved (each round runs every contestant once, in a rotating order), so
that machine noise hits all of them alike; every contestant gets one small untimed warm-up
call first. Ratios are ``ours / peer`` in filter-steps/s, within one workload. After the
timings, the check compares every peer's filtered means with ours on the sequences it filtered
(max abs difference) and the log-likelihoods where the peer provides one (simdkalman leaves out
the constant ``-k/2 log 2 pi`` per observed measurement; it is added back before comparing).
It also records the peak memory (tracemalloc) of one call of ours and of simdkalman. The exit
status is 1 when a peer disagrees with ours.

Memory: with missing values our filter keeps per-sequence covariance arrays. When one call at
the requested size would need more than ``--mem-budget-gb`` (measured by a small probe and
extrapolated linearly), the missing variant is run on fewer sequences and says so.

If ``benchmarks/bench_scan.py`` exists, its ``main`` is run at the end (with ``--quick`` when
this run is quick); a missing or failing scan benchmark is reported and skipped.

Run::

    python benchmarks/bench_kalman.py              # the full workload (6-7 min on 2 cores)
    python benchmarks/bench_kalman.py --quick      # smoke run: 32 sequences x 100 steps
    python benchmarks/bench_kalman.py --skip-peers # ours only
    python benchmarks/bench_kalman.py --missing-only --repeats 5  # the missing variant only

The peers are in the optional extra ``bench``: ``pip install -c constraints.txt -e .[bench]``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from _harness import (
    NOT_INSTALLED,
    Column,
    load_text,
    machine_lines,
    optional_import,
    resident_peak_mb,
    run_all,
)
from _harness import Contestant as Row
from _harness import print_table as print_columns

from estimators.kalman import GaussianPrior, default_threads, kalman_filter
from sde_sim import LinearMeasurement, LinearSDE, linear_transition, presets
from sde_sim.models import rotation_generator

HERE = Path(__file__).resolve().parent
STEP = 0.1  # measurement interval h
PRIOR_VAR = 25.0  # P0 = 25 I, m0 = 0
Q_VAR, R_VAR = 0.3, 0.5
LOG_2PI = float(np.log(2.0 * np.pi))
# Agreement with ours: max |difference| <= RTOL * max(1, max |ours|) for means and per
# log-likelihood. The filters differ only in algebra (Joseph form vs P - K C P, inverse vs
# solve vs pinv) on a stable, well-conditioned model, so round-off stays near 1e-12 relative.
RTOL = 1e-8


# --- workloads --------------------------------------------------------------------------------


@dataclass
class Workload:
    """One model and data set: `z` (B, T, k), `observed` (B, T) bool or None (all observed)."""

    label: str
    sde: LinearSDE
    measurement: LinearMeasurement
    F: np.ndarray
    Qd: np.ndarray
    m0: np.ndarray
    P0: np.ndarray
    t: np.ndarray
    z: np.ndarray
    observed: np.ndarray | None
    note: str = ""
    recipe: tuple = ()  # make_workload's (d, sequences, steps, missing, seed): rebuilt in a child

    @property
    def dim(self) -> int:
        return self.sde.dim

    @property
    def sequences(self) -> int:
        return self.z.shape[0]

    @property
    def steps(self) -> int:
        return self.z.shape[1]

    def subset(self, n: int) -> Workload:
        keep = None if self.observed is None else self.observed[:n]
        return Workload(
            self.label, self.sde, self.measurement, self.F, self.Qd, self.m0, self.P0, self.t,
            self.z[:n], keep, self.note,
        )  # fmt: skip


def model(d: int) -> tuple[LinearSDE, LinearMeasurement]:
    """The d = 2 preset model or the dense d = 16 model described in the module docstring."""
    if d == 2:
        system = presets.get("afa-2d").scenario("b")
        return system.system, system.measurement
    if d % 2:
        raise ValueError(f"the benchmark models need an even state dimension, got {d}")
    modes = d // 2
    decay = np.repeat(np.linspace(0.05, 0.5, modes), 2)
    block = -np.diag(decay) + rotation_generator(np.linspace(0.5, 4.0, modes))
    U, _ = np.linalg.qr(np.random.default_rng(d).standard_normal((d, d)))
    A = U @ block @ U.T
    return LinearSDE(A, np.sqrt(Q_VAR) * np.eye(d)), LinearMeasurement.identity(d, R_VAR)


def make_workload(d: int, sequences: int, steps: int, missing: float, seed: int) -> Workload:
    """Sample `sequences` paths of the exact discrete model and their measurements."""
    sde, measurement = model(d)
    maps = linear_transition(sde, STEP)
    F, Qd = maps.Phi[0], maps.Qd[0]
    m0, P0 = np.zeros(d), PRIOR_VAR * np.eye(d)
    rng = np.random.default_rng(seed)
    Lq, Lr = np.linalg.cholesky(Qd), np.linalg.cholesky(measurement.R)
    x = m0 + rng.standard_normal((sequences, d)) @ np.linalg.cholesky(P0).T
    z = np.empty((sequences, steps, measurement.out_dim))
    for k in range(steps):
        if k:
            x = x @ F.T + rng.standard_normal((sequences, d)) @ Lq.T
        z[:, k] = x @ measurement.C.T + rng.standard_normal((sequences, d)) @ Lr.T
    observed = None
    label = f"d={d}, all observed"
    if missing > 0:
        observed = rng.random((sequences, steps)) >= missing
        label = f"d={d}, {missing:.0%} missing"
    t = STEP * np.arange(steps)
    recipe = (d, sequences, steps, missing, seed)
    return Workload(label, sde, measurement, F, Qd, m0, P0, t, z, observed, recipe=recipe)


# --- contestants ------------------------------------------------------------------------------

# A run returns (means (n, T, d), log-likelihoods (n,) or None) for the sequences it filtered.
Output = tuple[np.ndarray, np.ndarray | None]


@dataclass
class Contestant(Row):
    """One row (`_harness.Contestant`) on a workload: ``run()`` filters ``sequences`` of it;
    ``rate`` is filter-steps per second."""

    workload: Workload | None = None
    sequences: int = 0
    peak_mb: float | None = None

    def __post_init__(self) -> None:
        self.items = self.sequences * self.workload.steps

    def label(self) -> str:
        return f"{self.workload.label:<22} {self.name:<24}"


def make_ours(w: Workload, threads: int | None = None) -> Callable[[], Output]:
    prior = GaussianPrior(w.m0, w.P0)

    def run() -> Output:
        result = kalman_filter(
            w.sde, w.measurement, w.z, w.t, prior=prior, mask=w.observed, threads=threads
        )
        return result.means, result.log_likelihood

    return run


def make_simdkalman(simdkalman, w: Workload, log_likelihood: bool) -> Callable[[], Output]:
    kf = simdkalman.KalmanFilter(w.F, w.Qd, w.measurement.C, w.measurement.R)
    data = w.z if w.observed is None else np.where(w.observed[..., None], w.z, np.nan)
    k = w.measurement.out_dim
    counted = np.full(w.sequences, w.steps) if w.observed is None else w.observed.sum(axis=1)

    def run() -> Output:
        result = kf.compute(
            data,
            0,
            initial_value=w.m0,
            initial_covariance=w.P0,
            filtered=True,
            smoothed=False,
            observations=False,
            log_likelihood=log_likelihood,
        )
        if not log_likelihood:
            return result.filtered.states.mean, None
        # simdkalman drops the constant -k/2 log(2 pi) of each observed measurement's density.
        return result.filtered.states.mean, result.log_likelihood - 0.5 * k * LOG_2PI * counted

    return run


def make_filterpy(filterpy_kalman, w: Workload) -> Callable[[], Output]:
    d, k = w.dim, w.measurement.out_dim
    sequences = [
        # Column vectors: batch_filter passes H to update(), which then does not reshape z.
        [
            w.z[b, j, :, None] if w.observed is None or w.observed[b, j] else None
            for j in range(w.steps)
        ]
        for b in range(w.sequences)
    ]

    def new_filter():
        kf = filterpy_kalman.KalmanFilter(dim_x=d, dim_z=k)
        kf.F, kf.Q = w.F.copy(), w.Qd.copy()
        kf.H, kf.R = w.measurement.C.copy(), w.measurement.R.copy()
        kf.x, kf.P = w.m0.reshape(d, 1).copy(), w.P0.copy()
        return kf

    def run() -> Output:
        means = np.empty((w.sequences, w.steps, d))
        for b, zs in enumerate(sequences):
            # update_first: update with z_j, store, then predict to j + 1 (the last predict
            # is unused): the same order as ours with a prior at the first measurement.
            m, _, _, _ = new_filter().batch_filter(zs, update_first=True)
            means[b] = m[..., 0]
        return means, None

    def log_likelihoods() -> np.ndarray:
        """Untimed: sum of filterpy's per-update ``log_likelihood`` (scipy logpdf)."""
        out = np.zeros(w.sequences)
        for b, zs in enumerate(sequences):
            kf = new_filter()
            for j, zj in enumerate(zs):
                if j:
                    kf.predict()
                kf.update(zj)
                if zj is not None:
                    out[b] += kf.log_likelihood
        return out

    run.log_likelihoods = log_likelihoods
    return run


def make_pykalman(pykalman, w: Workload) -> Callable[[], Output]:
    kf = pykalman.KalmanFilter(
        transition_matrices=w.F,
        observation_matrices=w.measurement.C,
        transition_covariance=w.Qd,
        observation_covariance=w.measurement.R,
        transition_offsets=np.zeros(w.dim),
        observation_offsets=np.zeros(w.measurement.out_dim),
        initial_state_mean=w.m0,
        initial_state_covariance=w.P0,
    )
    if w.observed is None:
        data = list(w.z)
    else:
        hide = np.broadcast_to(~w.observed[..., None], w.z.shape)
        data = [np.ma.masked_array(w.z[b], mask=hide[b]) for b in range(w.sequences)]

    def run() -> Output:
        return np.stack([kf.filter(x)[0] for x in data]), None

    def log_likelihoods() -> np.ndarray:
        return np.array([kf.loglikelihood(x) for x in data])

    run.log_likelihoods = log_likelihoods
    return run


def build_contestants(args, workloads: list[Workload]) -> list[Contestant]:
    simdkalman = filterpy_kalman = pykalman = None
    if not args.skip_peers:
        simdkalman = optional_import("simdkalman")
        filterpy_kalman = optional_import("filterpy.kalman")
        pykalman = optional_import("pykalman")
    peer_status = "skipped (--skip-peers)" if args.skip_peers else NOT_INSTALLED
    rows = []
    for w in workloads:
        tiny = w.subset(2)
        ours = Contestant(
            "ours: kalman_filter", workload=w, sequences=w.sequences, note="+ log-lik, predictions"
        )
        ours.run, ours.warm = make_ours(w), make_ours(tiny)
        rows.append(ours)
        if args.one_thread_row:
            one = Contestant(
                "ours: threads=1", workload=w, sequences=w.sequences, note="the same, 1 thread"
            )
            one.run, one.warm = make_ours(w, threads=1), make_ours(tiny, threads=1)
            rows.append(one)
        for ll in (False, True):
            name = "simdkalman" + (" + log-lik" if ll else "")
            c = Contestant(name, workload=w, sequences=w.sequences, status=peer_status)
            if simdkalman is not None:
                c.run, c.warm = (
                    make_simdkalman(simdkalman, w, ll),
                    make_simdkalman(simdkalman, tiny, ll),
                )
                c.status, c.note = "", "vectorised over sequences"
            rows.append(c)
        for name, module, n, maker in (
            ("filterpy batch_filter", filterpy_kalman, args.filterpy_sequences, make_filterpy),
            ("pykalman filter", pykalman, args.pykalman_sequences, make_pykalman),
        ):
            n = min(n, w.sequences)
            c = Contestant(name, workload=w, sequences=n, status=peer_status)
            if module is not None:
                c.run, c.warm = maker(module, w.subset(n)), maker(module, w.subset(1))
                c.status, c.note = "", f"{n} sequences, 1 per call"
            rows.append(c)
    return rows


# --- timing -----------------------------------------------------------------------------------


def traced_peak_mb(fn: Callable[[], object]) -> float:
    """Peak traced memory (numpy buffers included) of one call of `fn`, in MB."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak / 1e6


def missing_sequences(args, d: int) -> tuple[int, str]:
    """Sequences for the missing variant that fit the memory budget (probe + extrapolation)."""
    probe_n = min(args.sequences, 16)
    probe = make_workload(d, probe_n, args.steps, args.missing, seed=1)
    per_sequence = traced_peak_mb(make_ours(probe)) / probe_n
    need_gb = per_sequence * args.sequences / 1e3
    if need_gb <= args.mem_budget_gb:
        return args.sequences, ""
    fit = int(args.mem_budget_gb * 1e3 / per_sequence)
    fit = max(probe_n, fit - fit % 50 if fit >= 100 else fit)
    note = (
        f"{fit} of {args.sequences} sequences: one call of ours at {args.sequences} would need "
        f"~{need_gb:.1f} GB ({per_sequence:.1f} MB per sequence, probe of {probe_n}), over the "
        f"{args.mem_budget_gb:g} GB budget"
    )
    return fit, note


# --- report -----------------------------------------------------------------------------------


def kalman_digest() -> str:
    """The first 12 hex digits of ``estimators/kalman.py``'s sha256 (which code was timed)."""
    source = HERE.parent / "estimators" / "kalman.py"
    return hashlib.sha256(source.read_bytes()).hexdigest()[:12] if source.exists() else "?"


COLUMNS = (
    Column("workload", 22),
    Column("contestant", 24),
    Column("seq x T", 11, ">"),
    Column("best s", 9, ">"),
    Column("worst s", 9, ">"),
    Column("steps/s", 10, ">"),
    Column("ours is", 16, gap="  "),
    Column("note"),
)


def print_table(contestants: list[Contestant], workloads: list[Workload]) -> None:
    rows = []
    for w in workloads:
        group = [c for c in contestants if c.workload is w]
        ours = group[0]
        for c in group:
            size = f"{c.sequences} x {w.steps}"
            if c.run is None or not c.times:
                rows.append((w.label, c.name, size, "-", "-", "-", c.status))
                continue
            ratio = "-" if c is ours else speed_text(ours.rate / c.rate)
            best, worst, rate = f"{c.best:.3f}", f"{max(c.times):.3f}", f"{c.rate:.3e}"
            rows.append((w.label, c.name, size, best, worst, rate, ratio, c.note))
        if w.note:
            rows.append(f"{'':<22} note: {w.note}")
    print_columns(COLUMNS, rows)


def speed_text(ratio: float) -> str:
    """``ours / peer`` in filter-steps/s as words."""
    return f"{ratio:.1f}x faster" if ratio >= 1 else f"{1 / ratio:.1f}x slower"


def fastest(group: list[Contestant], prefix: str) -> Contestant | None:
    timed = [c for c in group if c.name.startswith(prefix) and c.times]
    return max(timed, key=lambda c: c.rate) if timed else None


def print_targets(contestants: list[Contestant], workloads: list[Workload], quick: bool) -> None:
    print(
        "\nTargets (all-observed batch): ours >= 5x simdkalman (its faster configuration) and "
        ">= 100x filterpy."
    )
    if quick:
        print("  (--quick sizes: overheads dominate; these are not the benchmark's figures)")
    for w in workloads:
        if w.observed is not None:
            continue
        group = [c for c in contestants if c.workload is w]
        ours = group[0]
        for prefix, target in (("simdkalman", 5.0), ("filterpy", 100.0)):
            peer = fastest(group, prefix)
            if peer is None:
                print(f"  {w.label}: vs {prefix}: not timed")
                continue
            speedup = ours.rate / peer.rate
            verdict = "MET" if speedup >= target else "NOT MET"
            print(
                f"  {w.label}: vs {peer.name:<22} ours/peer = {speedup:8.2f} "
                f"(target >= {target:g}) -> {verdict}"
            )


def check_outputs(contestants: list[Contestant], workloads: list[Workload]) -> bool:
    """Means and log-likelihoods of every peer against ours; True when all agree."""
    print(
        f"\nCheck: max |peer - ours| on the peer's sequences (agree when <= {RTOL:g} x "
        "max(1, max |ours|))"
    )
    ok = True
    for w in workloads:
        group = [c for c in contestants if c.workload is w]
        ours = group[0]
        if ours.output is None:
            continue
        means, loglik = ours.output
        scale_m = max(1.0, float(np.max(np.abs(means))))
        assert means.shape == (w.sequences, w.steps, w.dim), means.shape
        for c in group[1:]:
            if c.output is None:
                continue
            n = c.sequences
            peer_means, peer_ll = c.output
            assert peer_means.shape == (n, w.steps, w.dim), (c.name, peer_means.shape)
            dm = float(np.max(np.abs(peer_means - means[:n])))
            good = dm <= RTOL * scale_m
            line = f"  {w.label:<22} {c.name:<24} means {dm:9.2e}"
            if peer_ll is None and hasattr(c.run, "log_likelihoods"):
                peer_ll = c.run.log_likelihoods()  # untimed
            if peer_ll is not None:
                scale_l = max(1.0, float(np.max(np.abs(loglik[:n]))))
                dl = float(np.max(np.abs(peer_ll - loglik[:n])))
                good &= dl <= RTOL * scale_l
                line += f"   log-lik {dl:9.2e} (|log-lik| up to {scale_l:.3g})"
            else:
                line += "   log-lik   (not computed by this call)"
            ok &= good
            print(line + ("" if good else "   MISMATCH"))
        print(f"  {w.label:<22} (max |ours mean| = {scale_m:.3g})")
    return ok


def print_memory(contestants: list[Contestant], workloads: list[Workload]) -> None:
    print(
        "\nPeak memory of one call, untimed: traced (tracemalloc: numpy's buffers, not torch's)"
        " and resident (what the call adds to the resident memory of a fresh process that made"
        " one small call first: every allocator, no history; n/a where it cannot be measured):"
    )
    for w in workloads:
        group = [c for c in contestants if c.workload is w]
        for c in group[:3]:
            if c.run is None:
                continue
            c.peak_mb = traced_peak_mb(c.run)
            resident = resident_in_fresh_process(c.name, w)
            rss = "n/a" if resident is None else f"{resident:.1f} MB"
            print(
                f"  {w.label:<22} {c.name:<24} {c.peak_mb:10.1f} MB traced, {rss:>10} resident"
                f"  ({c.sequences} sequences)"
            )


def resident_in_fresh_process(name: str, w: Workload) -> float | None:
    """`_harness.resident_peak_mb` of contestant `name`'s call on `w`, in a child process.

    Measured in this process, the number depended on what ran before: at d = 2 ours read
    72.6-79.0 MB after the timed rounds against 58.4 MB in a fresh process (traced: 57.5 MB).
    The child rebuilds the workload from its recipe (`make_workload` is deterministic)."""
    child = [sys.executable, __file__, "--probe-resident", name, *map(str, w.recipe)]
    run = subprocess.run(child, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])["resident_mb"]


def probe_resident(name: str, d: str, sequences: str, steps: str, missing: str, seed: str):
    """Child of `resident_in_fresh_process`: one small call, then the resident peak of one."""
    w = make_workload(int(d), int(sequences), int(steps), float(missing), int(seed))
    args = parse_args(["--one-thread-row", "--sequences", sequences, "--steps", steps])
    (c,) = [c for c in build_contestants(args, [w]) if c.name == name and c.run is not None]
    c.warm()
    print(json.dumps({"resident_mb": resident_peak_mb(c.run)}))


def run_scan_benchmark(args) -> None:
    """Run `benchmarks/bench_scan.py` (another benchmark's `main`) if it is there."""
    path = HERE / "bench_scan.py"
    print("\nScan benchmark (benchmarks/bench_scan.py):")
    if args.skip_scan:
        print("  skipped (--skip-scan)")
        return
    if not path.exists():
        print("  skipped: benchmarks/bench_scan.py does not exist")
        return
    argv = ["--quick"] if args.quick else []
    try:
        spec = importlib.util.spec_from_file_location("bench_scan", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        entry = getattr(module, "main", None) or getattr(module, "run", None)
        if entry is None:
            print("  skipped: bench_scan.py has no main() or run()")
            return
        print(f"  running bench_scan.{entry.__name__}({argv})", flush=True)
        code = entry(argv)
    except SystemExit as exc:  # its argument parser may exit
        code = exc.code
    except Exception as exc:  # noqa: BLE001 - another helper's script: report, never crash
        print(f"  skipped: bench_scan.py failed: {type(exc).__name__}: {exc}")
        return
    if code not in (None, 0):
        print(f"  note: bench_scan.py returned {code!r}")


# --- main -------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, help="sequences B (default 1000; quick 32)")
    parser.add_argument("--steps", type=int, help="measurements T (default 1000; quick 100)")
    parser.add_argument("--dims", default="2,16", help="state dimensions (default 2,16)")
    parser.add_argument("--repeats", type=int, help="timed calls per contestant (default 3)")
    parser.add_argument(
        "--filterpy-sequences", type=int, help="sequences for filterpy (default 16; quick 4)"
    )
    parser.add_argument(
        "--pykalman-sequences", type=int, help="sequences for pykalman (default 4; quick 2)"
    )
    parser.add_argument(
        "--missing",
        type=float,
        default=0.2,
        help="missing probability (default 0.2; 0: no variant)",
    )
    parser.add_argument(
        "--missing-only",
        action="store_true",
        help="time only the missing variant (skip the all-observed workloads)",
    )
    parser.add_argument(
        "--mem-budget-gb", type=float, default=6.0, help="memory for one call of ours (default 6)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny smoke run, 1 repeat")
    parser.add_argument("--skip-peers", action="store_true", help="time ours only")
    parser.add_argument("--skip-scan", action="store_true", help="do not run bench_scan.py")
    parser.add_argument(
        "--one-thread-row",
        action="store_true",
        help="also time ours with threads=1 (kalman_filter's default is default_threads())",
    )
    args = parser.parse_args(argv)
    defaults = {
        "sequences": 1000,
        "steps": 1000,
        "repeats": 3,
        "filterpy_sequences": 16,
        "pykalman_sequences": 4,
    }
    if args.quick:
        defaults = {
            "sequences": 32,
            "steps": 100,
            "repeats": 1,
            "filterpy_sequences": 4,
            "pykalman_sequences": 2,
        }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    try:
        args.dims = [int(d) for d in args.dims.split(",")]
    except ValueError:
        parser.error(f"--dims must be comma-separated integers, got {args.dims!r}")
    if any(d < 2 or d % 2 for d in args.dims):
        parser.error(f"--dims must be even and >= 2, got {args.dims}")
    if not 0 <= args.missing < 1:
        parser.error(f"--missing must be in [0, 1), got {args.missing}")
    if args.missing_only and args.missing == 0:
        parser.error("--missing-only needs --missing > 0")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--probe-resident"]:  # the child of `resident_in_fresh_process`
        if len(argv) != 7:
            print("--probe-resident takes NAME D SEQUENCES STEPS MISSING SEED", file=sys.stderr)
            return 2
        probe_resident(*argv[1:])
        return 0
    args = parse_args(argv)
    started = time.perf_counter()
    print("Kalman filter throughput: ours vs peers (benchmarks/bench_kalman.py)")
    ours = f"ours      : estimators/kalman.py sha256 {kalman_digest()}, threads {default_threads()}"
    packages = ("scipy", "simdkalman", "filterpy", "pykalman")
    print("\n".join(machine_lines([ours, f"load      : {load_text()}"], packages)))
    print(
        f"workload  : {args.sequences} sequences x {args.steps} steps (h = {STEP:g}), "
        f"d in {args.dims}, C = I, prior N(0, {PRIOR_VAR:g} I); missing variant p = "
        f"{args.missing:g}; best of {args.repeats}, interleaved"
    )
    command = " ".join([os.path.basename(sys.executable), "benchmarks/bench_kalman.py", *argv])
    print(f"command   : {command}\n")

    workloads = []
    for d in args.dims:
        if not args.missing_only:
            workloads.append(make_workload(d, args.sequences, args.steps, 0.0, seed=d))
        if args.missing > 0:
            n, note = missing_sequences(args, d)
            w = make_workload(d, n, args.steps, args.missing, seed=1000 + d)
            w.note = note
            workloads.append(w)
    contestants = build_contestants(args, workloads)
    run_all(contestants, args.repeats, warm_up="one small untimed call each")

    print()
    print_table(contestants, workloads)
    print_targets(contestants, workloads, args.quick)
    agree = check_outputs(contestants, workloads)
    for c in contestants:
        c.output = None
    print_memory(contestants, workloads)
    print(f"\nTotal wall time (Kalman part): {time.perf_counter() - started:.1f} s; {load_text()}")
    run_scan_benchmark(args)
    if not agree:
        print("\nFAILED: a peer's output disagrees with ours (see Check above)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

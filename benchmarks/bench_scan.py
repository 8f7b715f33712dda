"""KLA's information filter: sequential against parallel prefix scans, side by side in one run.

Workload: `estimators.scan.kla_filter` in float64 on B sequences of D channels with T tokens
(default B = 8, D = 16, T = 10^3, 10^4, 10^5): random keys, value precisions (10% of tokens
missing) and values, an OU prior per channel (eq. (8), dt = 0.1). Every contestant computes the
same posterior (precisions, information means, means and variances) end to end, input
validation included; only the grouping of the work differs:

recursion
    the direct information-filter step (eqs. (18)-(19)) token by token: T numpy steps over
    (B, D), the streaming form.
sequential
    the sequential scan: a left fold of the Moebius and affine combine operators (depth T - 1).
hillis-steele
    the parallel doubling scan: ceil(log2 T) levels, O(T log T) combines.
blelloch
    the work-efficient parallel scan: 2 log2 n + 1 levels (n = T rounded up to a power of two),
    O(T) combines.

Metric: the best (minimum) wall time of ``--repeats`` calls; repeats are interleaved (each round
runs every contestant once, in a rotating order) so that machine noise hits all alike. Ratio:
``sequential scan time / contestant time`` (above 1: faster than the sequential scan). Each row
also shows the scan's depth (levels of dependent combines) and work (combines per channel), and
the largest relative difference of its precisions from the recursion's.

On a CPU the parallel scans do not win by parallelism (numpy runs each level on one core); they
win, when they do, by replacing T small numpy calls over B * D numbers with O(log T) large ones.
The depth column is what a GPU's parallel time scales with.

Torch section (after the numpy table; ``--skip-torch`` leaves it out): the torch layer's filter
`kernels.ops.kla.kla_scan` in float32 (the paper's precision) on B sequences of N x D
filters (default B = 1, N = 16, D = 16), forward only under ``torch.no_grad``, at
T = 2^8 .. 2^16 (quick: 2^8, 2^10): ``parallel`` (the odd-even work-efficient scan, 2 ceil(log2 T)
levels, O(T) work) and ``hillis-steele`` (doubling, ceil(log2 T) levels, O(T log T) work), each
level a few whole-sequence torch ops, and ``chunked`` (`kernels.ops.kla.chunked`: ~sqrt(T)
chunks, each torch op one position of every chunk, the sequence swept about once), against
``sequential`` (a loop of T `kla_step` calls, the O(1)-per-token decoding form); repeats
interleaved as in the numpy section; ``--torch-lengths`` replaces the lengths. ``--device cuda``
runs it on a GPU (synchronised timings). Each
row gives the best wall time and the largest difference of the posterior means from the
sequential loop.

Run::

    python benchmarks/bench_scan.py            # T = 1e3, 1e4, 1e5, B = 8, D = 16, 3 repeats
    python benchmarks/bench_scan.py --quick    # smoke run: T = 100, 1000, B = 2, D = 4, 1 repeat
    python benchmarks/bench_scan.py --skip-numpy --device cuda   # torch section on a GPU
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform

import numpy as np
from _harness import interleaved_best

from estimators.closed_forms import kla
from estimators.scan import FILTER_METHODS, kla_filter

BASELINE = "sequential"
TORCH_METHODS = ("sequential", "parallel", "hillis-steele", "chunked")


def make_problem(B: int, T: int, D: int, seed: int):
    """Keys, value precisions (10% missing), values and the OU prior of D channels."""
    rng = np.random.default_rng(seed)
    a = np.exp(rng.uniform(np.log(0.1), np.log(2.0), D))
    p = rng.uniform(0.1, 2.0, D)
    a_bar, p_bar = kla.ou_discretisation(a, p, 0.1)
    k = rng.uniform(-1.5, 1.5, (B, T, D))
    lam_v = np.exp(rng.uniform(np.log(0.1), np.log(5.0), (B, T, D)))
    lam_v[rng.random((B, T, D)) < 0.1] = 0.0
    v = 2.0 * rng.standard_normal((B, T, D))
    return (k, lam_v, v, a_bar, p_bar)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (a few seconds)")
    parser.add_argument("--lengths", type=int, nargs="+", help="sequence lengths T")
    parser.add_argument("--batch", type=int, help="sequences B (default 8; quick 2)")
    parser.add_argument("--channels", type=int, help="channels D (default 16; quick 4)")
    parser.add_argument("--repeats", type=int, help="timed calls per method (default 3; quick 1)")
    parser.add_argument("--skip-torch", action="store_true", help="numpy section only")
    parser.add_argument("--skip-numpy", action="store_true", help="torch section only")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument(
        "--torch-lengths", type=int, nargs="+", help="torch section's T (default 2^8 .. 2^16)"
    )
    args = parser.parse_args(argv)
    lengths = args.lengths or ([100, 1000] if args.quick else [1000, 10_000, 100_000])
    B = args.batch or (2 if args.quick else 8)
    D = args.channels or (4 if args.quick else 16)
    repeats = args.repeats or (1 if args.quick else 3)
    if min(lengths + (args.torch_lengths or [1])) < 1 or B < 1 or D < 1 or repeats < 1:
        parser.error("lengths, --batch, --channels and --repeats must be >= 1")
    methods = list(FILTER_METHODS)
    if not args.skip_numpy:
        numpy_section(lengths, B, D, repeats, methods)
    if not args.skip_torch:
        torch_section(args.quick, args.device, repeats, args.torch_lengths)
    return 0


def numpy_section(lengths, B, D, repeats, methods) -> None:
    """The numpy table: every `kla_filter` method at each T."""
    print(
        f"bench_scan {datetime.date.today()}; {platform.platform()}, {os.cpu_count()} CPUs; "
        f"Python {platform.python_version()}, numpy {np.__version__}; float64; "
        f"B = {B}, D = {D}, best of {repeats} interleaved repeats"
    )
    header = (
        f"{'T':>8}  {'method':<14} {'best s':>9}  {'vs sequential scan':>19}  "
        f"{'depth':>7}  {'combines':>9}  {'max rel diff lam':>16}"
    )
    print(header)
    print("-" * len(header))
    for T in lengths:
        problem = make_problem(B, T, D, seed=T)
        kla_filter(*make_problem(1, min(T, 64), D, seed=0), method="blelloch")  # warm-up
        calls = {m: functools.partial(kla_filter, *problem, method=m) for m in methods}
        best, outputs = interleaved_best(calls, repeats)
        ref = outputs["recursion"].precision
        for m in methods:
            out = outputs[m]
            diff = float(np.max(np.abs(out.precision / ref - 1.0)))
            ratio = best[BASELINE] / best[m]
            word = "(baseline)" if m == BASELINE else f"{ratio:.2f}x faster"
            if m != BASELINE and ratio < 1:
                word = f"{1 / ratio:.2f}x slower"
            print(
                f"{T:>8}  {m:<14} {best[m]:>9.4f}  {word:>19}  {out.stats.depth:>7}  "
                f"{out.stats.combines:>9}  {diff:>16.1e}"
            )


def torch_section(quick: bool, device: str, repeats: int, lengths=None) -> None:
    """Torch `kla_scan`, the scans against the token loop, float32, forward only (interleaved
    repeats)."""
    import torch

    from kernels.ops.kla import kla_scan, ou_prior

    lengths = lengths or ([2**8, 2**10] if quick else [2**e for e in range(8, 17, 2)])
    B, N, D = (1, 4, 8) if quick else (1, 16, 16)
    dev = torch.device(device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    print(
        f"\ntorch {torch.__version__} on {dev}; float32, forward only; B = {B}, N = {N}, "
        f"D = {D}; best of {repeats}"
    )
    header = f"{'T':>8}  {'method':<13} {'best s':>9}  {'vs sequential':>15}  {'max |d mean|':>12}"
    print(header)
    print("-" * len(header))
    g = torch.Generator().manual_seed(0)
    a_bar, p_bar = ou_prior(torch.rand(N, D, generator=g) + 0.1, torch.ones(N, D), 0.05)
    a_bar, p_bar = a_bar.to(dev), p_bar.to(dev)
    for T in lengths:
        k = torch.randn(B, T, N, 1, generator=g).to(dev)
        lam_v = (torch.rand(B, T, 1, D, generator=g) * 3).to(dev)
        v = torch.randn(B, T, 1, D, generator=g).to(dev)
        with torch.no_grad():
            kla_scan(k[:, :8], lam_v[:, :8], v[:, :8], a_bar, p_bar)  # warm-up
            calls = {
                m: functools.partial(kla_scan, k, lam_v, v, a_bar, p_bar, method=m)
                for m in TORCH_METHODS
            }
            best, results = interleaved_best(calls, repeats, sync=sync)
        means = {m: r.mean for m, r in results.items()}
        for method in TORCH_METHODS:
            ratio = best["sequential"] / best[method]
            word = "(baseline)" if method == "sequential" else f"{ratio:.2f}x faster"
            if method != "sequential" and ratio < 1:
                word = f"{1 / ratio:.2f}x slower"
            diff = (means[method] - means["sequential"]).abs().max().item()
            print(f"{T:>8}  {method:<13} {best[method]:>9.4f}  {word:>15}  {diff:>12.1e}")


if __name__ == "__main__":
    raise SystemExit(main())

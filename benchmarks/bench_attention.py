"""Filtering attention against ``scaled_dot_product_attention``, side by side in one run.

Workload (fixed by issue 5): ``B = 2`` sequences, ``H = 4`` heads, ``D = 64`` features per head
(32 complex pairs), causal, float32, ``T = 256 .. 4096`` (``--lengths``). Every contestant gets
the same ``q, k, v``; the filtering layers get per-head dynamics (decay, 32 frequencies,
process and measurement variances) and a finite robust scale ``nu = 1`` so the robust weights
are part of the work.

Contestants
-----------
sdpa
    ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)``: the floor.
isotropic AFA
    ``kernels.functional.isotropic_afa`` (seed 000 Algorithm 1, factorised residuals,
    memory ``O(T^2 + T D)``).
RFA
    ``kernels.functional.rfa_attention`` (seed 004 Algorithm 1, Student-t logits).
tensor AFA
    ``kernels.functional.tensor_afa`` (seed 000 3.1, memory ``O(T^2 D)``): only where its
    estimated memory fits ``--tensor-budget-gb``.
compiled
    With ``--compile``, ``torch.compile`` of the isotropic AFA and RFA calls (compiled in an
    untimed warm-up per shape).

Time: the best of ``--repeats`` calls, interleaved (each round runs every contestant once), so
machine noise hits all alike; the ratio column is ``time / sdpa time``. Memory: the peak of
one call above the memory held before it. On CPU that is measured in a fresh subprocess per
(contestant, T) from the process's resident high-water mark (``VmHWM``), so no call sees
another's allocations; on CUDA from ``torch.cuda.max_memory_allocated``.

Run::

    python benchmarks/bench_attention.py                     # T = 256 .. 4096 (minutes)
    python benchmarks/bench_attention.py --lengths 1024 --compile
    python benchmarks/bench_attention.py --lengths 1024 --threads 1 --no-memory
    python benchmarks/bench_attention.py --quick             # smoke run, T = 64 and 128
    python benchmarks/bench_attention.py --device cuda       # on a GPU
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from _harness import interleaved_best, resident_peak_mb

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kernels.functional import isotropic_afa, rfa_attention, tensor_afa  # noqa: E402

BATCH, HEADS, DIM = 2, 4, 64
CONTESTANTS = ("sdpa", "isotropic AFA", "RFA", "tensor AFA")
COMPILED = ("isotropic AFA (compiled)", "RFA (compiled)")
# Bytes per element of the tensor form's largest live (B, H, T, T, D/2) complex-pair tensors,
# times how many such tensors it keeps at once (pulled-forward keys and values, residuals,
# precisions): an estimate used only to skip sizes that would not fit.
TENSOR_FORM_LIVE_ARRAYS = 6


def make_inputs(steps: int, dtype, device, seed: int = 0):
    """``q, k, v`` (B, H, T, D) and the per-head dynamics shared by the filtering layers."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = (BATCH, HEADS, steps, DIM)
    q, k, v = (torch.randn(shape, generator=gen, dtype=dtype).to(device) for _ in range(3))
    n = DIM // 2
    frequencies = (1e-2 * torch.logspace(0, 2, n, dtype=dtype)).repeat(HEADS, 1).to(device)
    dynamics = {
        "decay": torch.linspace(1e-3, 1e-1, HEADS, dtype=dtype, device=device),
        "frequencies": frequencies,
        "process_var": torch.full((HEADS,), 0.1, dtype=dtype, device=device),
        "measurement_var": torch.full((HEADS,), 1.0, dtype=dtype, device=device),
    }
    return q, k, v, dynamics


def contestant_call(name: str, q, k, v, dynamics) -> Callable[[], torch.Tensor]:
    """A zero-argument call running contestant ``name`` on the given inputs."""
    if name == "sdpa":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if name.startswith("isotropic AFA"):
        fn = isotropic_afa

        def afa():
            return fn(q, k, v, nu=1.0, causal=True, **dynamics).output

        return torch.compile(afa) if "compiled" in name else afa
    if name.startswith("RFA"):
        fn = rfa_attention

        def rfa():
            return fn(
                q,
                k,
                v,
                frequencies=dynamics["frequencies"],
                decay=dynamics["decay"],
                process_var=dynamics["process_var"],
                measurement_var=dynamics["measurement_var"],
                nu=1.0,
                causal=True,
            ).output

        return torch.compile(rfa) if "compiled" in name else rfa
    if name == "tensor AFA":
        return lambda: tensor_afa(q, k, v, nu=1.0, causal=True, **dynamics).output
    raise ValueError(f"unknown contestant {name!r}")


def tensor_form_bytes(steps: int, itemsize: int) -> int:
    return TENSOR_FORM_LIVE_ARRAYS * BATCH * HEADS * steps * steps * DIM * itemsize


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def peak_memory_cuda(call) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.no_grad():
        call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def peak_memory_subprocess(name: str, steps: int, dtype: str) -> float | None:
    """Peak resident memory (MiB) of one call above what the probe process held before it."""
    probe = [sys.executable, __file__, "--probe-memory", name, str(steps), "--dtype", dtype]
    env = dict(os.environ)
    run = subprocess.run(probe, capture_output=True, text=True, env=env, check=False)
    if run.returncode != 0:
        return None
    return json.loads(run.stdout.strip().splitlines()[-1])["peak_mib"]


def probe_memory(name: str, steps: int, dtype) -> None:
    """Child process: one small warm-up call, then report the peak rise of one full call."""
    small = make_inputs(16, dtype, "cpu")
    with torch.no_grad():
        contestant_call(name, *small[:3], small[3])()
    q, k, v, dynamics = make_inputs(steps, dtype, "cpu")
    call = contestant_call(name, q, k, v, dynamics)
    with torch.no_grad():
        peak_mb = resident_peak_mb(call)  # None where this kernel cannot measure it
    print(json.dumps({"peak_mib": None if peak_mb is None else peak_mb * 1e6 / 2**20}))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", help="sequence lengths T")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per contestant")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64", "bfloat16"))
    p.add_argument("--compile", action="store_true", help="also time torch.compile'd layers")
    p.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    p.add_argument("--tensor-budget-gb", type=float, default=4.0, help="skip the tensor form above")
    p.add_argument("--no-memory", action="store_true", help="skip the memory probes")
    p.add_argument("--quick", action="store_true", help="smoke run: T = 64, 128; 1 repeat")
    p.add_argument("--probe-memory", nargs=2, metavar=("NAME", "T"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.lengths = args.lengths or [64, 128]
        args.repeats = 1
    args.lengths = args.lengths or [256, 512, 1024, 2048, 4096]
    if min(args.lengths) < 1 or args.repeats < 1:
        p.error("--lengths and --repeats must be positive")
    return args


def header(args) -> str:
    threads = torch.get_num_threads()
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    machine = f"{platform.platform()}, {os.cpu_count()} CPUs, torch {torch.__version__}"
    if torch.device(args.device).type == "cuda":
        machine += f", {torch.cuda.get_device_name()}"
    return (
        f"bench_attention {stamp}; {machine}; {threads} threads; {args.dtype}; "
        f"B = {BATCH}, H = {HEADS}, D = {DIM}, causal; best of {args.repeats}"
    )


def run_length(steps: int, args, dtype) -> list[tuple]:
    q, k, v, dynamics = make_inputs(steps, dtype, args.device)
    names = list(CONTESTANTS) + (list(COMPILED) if args.compile else [])
    skipped = {}
    if tensor_form_bytes(steps, q.element_size()) > args.tensor_budget_gb * 2**30:
        skipped["tensor AFA"] = (
            f"needs ~{tensor_form_bytes(steps, q.element_size()) / 2**30:.0f} GB"
        )
    calls = {n: contestant_call(n, q, k, v, dynamics) for n in names if n not in skipped}
    for call in calls.values():  # warm-up (and compilation) untimed
        with torch.no_grad():
            call()
    best, _ = interleaved_best(
        {n: torch.no_grad()(call) for n, call in calls.items()},
        args.repeats,
        sync=functools.partial(synchronize, args.device),
    )
    rows = []
    for name in names:
        if name in skipped:
            rows.append((steps, name, None, None, None, skipped[name]))
            continue
        memory = None
        if not args.no_memory and "compiled" not in name:
            if torch.device(args.device).type == "cuda":
                memory = peak_memory_cuda(calls[name])
            else:
                memory = peak_memory_subprocess(name, steps, args.dtype)
        rows.append((steps, name, best[name], best[name] / best["sdpa"], memory, ""))
    return rows


def print_rows(rows) -> None:
    print(f"{'T':>6}  {'contestant':<26}{'best ms':>10}{'vs sdpa':>10}{'peak MiB':>11}  note")
    for steps, name, seconds, ratio, memory, note in rows:
        ms = "-" if seconds is None else f"{1e3 * seconds:.2f}"
        rel = "-" if ratio is None else f"{ratio:.2f}x"
        mem = "-" if memory is None else f"{memory:.1f}"
        print(f"{steps:>6}  {name:<26}{ms:>10}{rel:>10}{mem:>11}  {note}")


def memory_growth(rows) -> None:
    """Fitted exponent p of peak memory ~ T^p per contestant (2 = quadratic)."""
    by_name: dict[str, list[tuple[int, float]]] = {}
    for steps, name, _, _, memory, _ in rows:
        if memory is not None and memory > 0:
            by_name.setdefault(name, []).append((steps, memory))
    print("\nmemory growth (least-squares slope of log peak vs log T):")
    for name, points in by_name.items():
        if len(points) < 2:
            continue
        xs = [math.log(s) for s, _ in points]
        ys = [math.log(m) for _, m in points]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
            (x - mx) ** 2 for x in xs
        )
        print(f"  {name:<26} T^{slope:.2f}")


def main(argv=None) -> int:
    args = parse_args(argv)
    dtype = getattr(torch, args.dtype)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.probe_memory:
        probe_memory(args.probe_memory[0], int(args.probe_memory[1]), dtype)
        return 0
    print(header(args), flush=True)
    rows = []
    for steps in args.lengths:
        rows.extend(run_length(steps, args, dtype))
    print()
    print_rows(rows)
    memory_growth(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

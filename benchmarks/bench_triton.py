"""The Triton kernels against their torch forms and the GPU attention peers, in one run (CUDA).

Two sections, each timing its contestants side by side on identical inputs; ratios are taken
within one run (machines are shared and noisy: a ratio of one run is the figure that counts).

attention (``--skip-attention`` leaves it out)
    ``B = 2`` sequences, ``H = 8`` heads, ``D = 64`` and ``128``, causal, bfloat16,
    ``T = 1k .. 16k`` (``--lengths``, ``--dims``). Contestants:

    sdpa (flash)
        ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)`` restricted to the
        FlashAttention backend (``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``): the reference.
    flex
        ``torch.nn.attention.flex_attention`` (compiled) with the closest score it expresses:
        the score plus AFA's lag-dependent log-precision ``-log V_h(i - j)``, ``V_h(tau) =
        sigma_h^2 (1 - e^{-2 a_h tau}) / (2 a_h) + eta_h^2 e^{-2 a_h tau}`` (seed 000 3.4), and a
        causal block mask. It has no complex-pair rotation and no robust reweighting.
    isotropic AFA (triton)
        ``kernels.functional.isotropic_afa(..., backend="triton")`` with robust scale
        ``nu = 1``.
    RFA (triton)
        ``kernels.functional.rfa_attention(..., backend="triton")`` with ``nu = 1``.

    Columns: best forward time (under ``torch.no_grad``) and forward + backward time (gradient
    of ``<out, dout>`` w.r.t. q, k, v), each as nominal TFLOP/s (`attention_flops`: the
    causal attention matmuls, the same count for every contestant, so the TFLOP/s ratio is the
    time ratio; the filtering kernels' extra work is not counted) and as the ratio of SDPA's time
    to the contestant's (target: the fused forwards >= 0.5), and the peak memory of one forward
    and of one forward + backward above what was held before it
    (``torch.cuda.max_memory_allocated``). After each D, the slope of log(peak memory) against
    log(T) per contestant (1: linear, 2: quadratic).

kla (``--skip-kla`` leaves it out)
    ``kernels.ops.kla.kla_scan`` in float32 on B sequences of N x D filters (default
    B = 2, N = 16, D = 32: 512 channels), keys (B, T, N, 1), values (B, T, 1, D), per-channel
    OU prior, ``T = 2^10 .. 2^16``: ``backend="triton"`` (the chunked scan; one row per
    ``--kla-chunks`` size) against the torch loop ``method="sequential"`` (T `kla_step` calls)
    and the torch odd-even scan ``method="parallel"``. Forward times under ``torch.no_grad``
    with ratios ``sequential / contestant`` (target: triton >= 100x at T = 2048), then
    forward + backward times of triton and the torch parallel scan, and the largest
    difference of the means from the torch parallel scan.

Timing: the best of ``--repeats`` calls after ``--warmup`` untimed ones, repeats interleaved
(each round runs every contestant once), synchronised with ``torch.cuda.synchronize``. A
contestant that raises is shown with its error in place of its numbers.

Run::

    python benchmarks/bench_triton.py                      # full tables (minutes on an H100)
    python benchmarks/bench_triton.py --quick              # small sizes, one repeat
    python benchmarks/bench_triton.py --skip-attention --kla-chunks 32 64 128
    python benchmarks/bench_triton.py --json results.json  # also write every row as JSON

Without a CUDA device it prints one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kernels.functional import isotropic_afa, rfa_attention  # noqa: E402
from kernels.ops.kla import kla_scan, ou_prior  # noqa: E402

BATCH, HEADS = 2, 8
ATTENTION = ("sdpa (flash)", "flex", "isotropic AFA (triton)", "RFA (triton)")
REFERENCE = "sdpa (flash)"
BACKWARD_FLOP_FACTOR = 2.5  # backward = 5 matmuls against the forward's 2 (FlashAttention count)


# --- pure helpers (unit-tested without a GPU) ---------------------------------------------------


def attention_flops(
    batch: int, heads: int, steps: int, dim: int, *, causal: bool = True, backward: bool = False
) -> float:
    """Nominal FLOPs of attention: ``QK^T`` and ``PV``, ``2 T^2 D`` each per head (2 per MAC).

    Causal halves it; ``backward=True`` counts forward + backward, ``(1 + 2.5)`` times the
    forward (the backward's five ``T^2 D`` matmuls against the forward's two).
    """
    forward = 4.0 * batch * heads * steps * steps * dim * (0.5 if causal else 1.0)
    return forward * (1.0 + BACKWARD_FLOP_FACTOR) if backward else forward


def tflops(flops: float, seconds: float) -> float:
    """Throughput in TFLOP/s."""
    return flops / seconds / 1e12


def speedup(baseline_seconds: float, seconds: float) -> float:
    """``baseline / contestant`` time: above 1 the contestant is faster."""
    return baseline_seconds / seconds


def memory_slope(lengths, peaks) -> float:
    """Least-squares slope of ``log(peak)`` against ``log(T)``: 1 linear, 2 quadratic in T."""
    xs = [math.log(t) for t in lengths]
    ys = [math.log(p) for p in peaks]
    if len(xs) < 2:
        raise ValueError(f"memory_slope needs at least two lengths, found {len(xs)}")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("memory_slope needs at least two distinct lengths")
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


# --- timing -------------------------------------------------------------------------------------


def best_times(calls: dict[str, Callable[[], object]], repeats: int, warmup: int) -> dict:
    """Best wall time (s) per call over interleaved, rotating repeats; errors kept as strings."""
    errors: dict[str, str] = {}

    def attempt(name: str) -> bool:
        try:
            calls[name]()
        except Exception as exc:  # a failing contestant is reported in its row, not fatal
            errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:70]}"
            return False
        return True

    for name in calls:
        for _ in range(warmup):
            if not attempt(name):
                break
    times: dict[str, list[float]] = {name: [] for name in calls}
    for r in range(repeats):
        live = [name for name in calls if name not in errors]
        shift = r % max(len(live), 1)
        for name in live[shift:] + live[:shift]:
            torch.cuda.synchronize()
            start = time.perf_counter()
            ok = attempt(name)
            torch.cuda.synchronize()
            if ok:
                times[name].append(time.perf_counter() - start)
    return {name: errors.get(name) or min(times[name]) for name in calls}


def peak_mib(call: Callable[[], object]) -> float:
    """Peak CUDA memory of one call above what was allocated before it, MiB."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


# --- attention section --------------------------------------------------------------------------


def attention_inputs(steps: int, dim: int, device, seed: int = 0):
    """``q, k, v, dout`` (B, H, T, D) bfloat16 and per-head dynamics (float32)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shape = (BATCH, HEADS, steps, dim)
    q, k, v, dout = (
        torch.randn(shape, generator=gen).to(device=device, dtype=torch.bfloat16) for _ in range(4)
    )
    dynamics = {
        "decay": torch.linspace(1e-3, 1e-1, HEADS, device=device),
        "frequencies": (1e-2 * torch.logspace(0, 2, dim // 2)).repeat(HEADS, 1).to(device),
        "process_var": torch.full((HEADS,), 0.1, device=device),
        "measurement_var": torch.full((HEADS,), 1.0, device=device),
    }
    return (q, k, v, dout), dynamics


def attention_call(name: str, q, k, v, dynamics, flex) -> Callable[[], torch.Tensor]:
    """A zero-argument forward of contestant ``name``."""
    if name == REFERENCE:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def sdpa():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        return sdpa
    if name == "flex":
        return lambda: flex(q, k, v)
    if name == "isotropic AFA (triton)":
        return lambda: (
            isotropic_afa(q, k, v, nu=1.0, causal=True, backend="triton", **dynamics).output
        )
    if name == "RFA (triton)":
        return lambda: (
            rfa_attention(q, k, v, nu=1.0, causal=True, backend="triton", **dynamics).output
        )
    raise ValueError(f"unknown contestant {name!r}")


def flex_call(steps: int, dynamics, device):
    """Compiled FlexAttention with AFA's log-precision bias and a causal block mask."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    decay = dynamics["decay"]
    process_var, measurement_var = dynamics["process_var"], dynamics["measurement_var"]

    def score_mod(score, b, h, q_idx, kv_idx):
        lag = (q_idx - kv_idx).to(torch.float32)
        kept = torch.exp(-2.0 * decay[h] * lag)
        var = process_var[h] * (1.0 - kept) / (2.0 * decay[h]) + measurement_var[h] * kept
        return score - torch.log(var)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    mask = create_block_mask(causal, None, None, steps, steps, device=device)
    compiled = torch.compile(flex_attention)
    return lambda q, k, v: compiled(q, k, v, score_mod=score_mod, block_mask=mask)


def forward_backward(forward: Callable[[], torch.Tensor], inputs, dout):
    """A call running ``forward`` and the gradient of ``<out, dout>`` w.r.t. ``inputs``."""

    def call():
        out = forward()
        torch.autograd.grad(out, inputs, dout)

    return call


def attention_section(lengths, dims, repeats, warmup, device) -> list[dict]:
    rows = []
    print(f"\nattention: B = {BATCH}, H = {HEADS}, causal, bfloat16; best of {repeats}")
    header = (
        f"{'D':>4} {'T':>6}  {'contestant':<23} {'fwd ms':>8} {'TFLOP/s':>8} {'vs sdpa':>8}  "
        f"{'fwd+bwd ms':>10} {'TFLOP/s':>8} {'vs sdpa':>8}  {'fwd MiB':>9} {'f+b MiB':>9}"
    )
    print(header)
    print("-" * len(header))
    for dim in dims:
        peaks: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for steps in lengths:
            (q, k, v, dout), dynamics = attention_inputs(steps, dim, device)
            flex = flex_call(steps, dynamics, device)
            leaves = [x.detach().requires_grad_() for x in (q, k, v)]
            fwd = {n: attention_call(n, q, k, v, dynamics, flex) for n in ATTENTION}
            train = {
                n: forward_backward(attention_call(n, *leaves, dynamics, flex), leaves, dout)
                for n in ATTENTION
            }
            with torch.no_grad():
                fwd_times = best_times(fwd, repeats, warmup)
            train_times = best_times(train, repeats, warmup)
            for name in ATTENTION:
                row = {"section": "attention", "D": dim, "T": steps, "contestant": name}
                row.update(attention_row(name, fwd_times, train_times, dim, steps))
                for key, times, call in (("fwd", fwd_times, fwd), ("fwd_bwd", train_times, train)):
                    if isinstance(times[name], float):
                        with torch.set_grad_enabled(key == "fwd_bwd"):
                            row[f"{key}_peak_mib"] = peak_mib(call[name])
                        peaks.setdefault((name, key), []).append((steps, row[f"{key}_peak_mib"]))
                rows.append(row)
                print_attention_row(row)
        for (name, key), points in peaks.items():
            if len(points) >= 2 and all(p > 0 for _, p in points):
                slope = memory_slope([t for t, _ in points], [p for _, p in points])
                print(f"{dim:>4} {'':>6}  {name:<23} {key} peak memory slope in T: {slope:.2f}")
                rows.append(
                    {"section": "attention", "D": dim, "contestant": name, f"{key}_slope": slope}
                )
    return rows


def attention_row(name, fwd_times, train_times, dim, steps) -> dict:
    row = {}
    for key, times, backward in (("fwd", fwd_times, False), ("fwd_bwd", train_times, True)):
        t, ref = times[name], times[REFERENCE]
        if not isinstance(t, float):
            row[f"{key}_error"] = t
            continue
        row[f"{key}_s"] = t
        row[f"{key}_tflops"] = tflops(
            attention_flops(BATCH, HEADS, steps, dim, backward=backward), t
        )
        if isinstance(ref, float):
            row[f"{key}_vs_sdpa"] = speedup(ref, t)
    return row


def print_attention_row(row: dict) -> None:
    cells = []
    for key, width in (("fwd", 8), ("fwd_bwd", 10)):
        if f"{key}_error" in row:
            cells.append(f"{row[f'{key}_error'][: width + 18]:<{width + 18}}")
            continue
        ratio = row.get(f"{key}_vs_sdpa", math.nan)
        cells.append(
            f"{1e3 * row[f'{key}_s']:>{width}.3f} {row[f'{key}_tflops']:>8.1f} {ratio:>8.2f}"
        )
    peaks = " ".join(
        f"{row[k]:>9.1f}" if k in row else f"{'-':>9}" for k in ("fwd_peak_mib", "fwd_bwd_peak_mib")
    )
    print(f"{row['D']:>4} {row['T']:>6}  {row['contestant']:<23} {cells[0]}  {cells[1]}  {peaks}")


# --- KLA section --------------------------------------------------------------------------------


def kla_inputs(batch: int, steps: int, slots: int, channels: int, device, seed: int = 0):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    a_bar, p_bar = ou_prior(
        torch.rand(slots, channels, generator=gen) + 0.1, torch.ones(slots, channels), 0.05
    )
    tokens = (
        torch.randn(batch, steps, slots, 1, generator=gen),
        3.0 * torch.rand(batch, steps, 1, channels, generator=gen),
        torch.randn(batch, steps, 1, channels, generator=gen),
    )
    return [x.to(device) for x in (*tokens, a_bar, p_bar)]


def kla_section(
    lengths, chunks, block, batch, slots, channels, repeats, warmup, device
) -> list[dict]:
    from kernels.ops.kla.triton import BLOCK_C, kla_scan_triton

    block = block or BLOCK_C

    rows = []
    print(
        f"\nkla_scan: float32, B = {batch}, N = {slots}, D = {channels} "
        f"({slots * channels} channels); {block} channels per Triton program; best of {repeats}"
    )
    header = (
        f"{'T':>6}  {'contestant':<20} {'fwd ms':>10} {'vs sequential':>14}  "
        f"{'fwd+bwd ms':>10} {'vs parallel':>12}  {'max |d mean|':>12}"
    )
    print(header)
    print("-" * len(header))
    for steps in lengths:
        args = kla_inputs(batch, steps, slots, channels, device)
        leaves = [x.detach().requires_grad_() for x in args]
        calls = {
            "sequential (torch)": lambda a: kla_scan(*a, method="sequential", backend="torch"),
            "parallel (torch)": lambda a: kla_scan(*a, method="parallel", backend="torch"),
        }
        for chunk in chunks:
            calls[f"triton chunk={chunk}"] = lambda a, c=chunk: kla_scan_triton(
                *a, chunk=c, block_channels=block
            )
        with torch.no_grad():
            fwd = best_times(
                {n: (lambda f=f, a=args: f(a)) for n, f in calls.items()}, repeats, warmup
            )
            means = {n: f(args).mean for n, f in calls.items() if isinstance(fwd[n], float)}
        trained = {n: f for n, f in calls.items() if not n.startswith("sequential")}
        train = best_times(
            {
                n: (lambda f=f, x=leaves: torch.autograd.grad(f(x).mean.sum(), x))
                for n, f in trained.items()
            },
            repeats,
            warmup,
        )
        for name in calls:
            row = {"section": "kla", "T": steps, "contestant": name}
            row.update(kla_row(name, fwd, train, means))
            rows.append(row)
            print_kla_row(row)
    return rows


def kla_row(name, fwd, train, means) -> dict:
    row = {}
    if not isinstance(fwd[name], float):
        return {"error": fwd[name]}
    row["fwd_s"] = fwd[name]
    if isinstance(fwd["sequential (torch)"], float):
        row["fwd_vs_sequential"] = speedup(fwd["sequential (torch)"], fwd[name])
    if name in train and isinstance(train[name], float):
        row["fwd_bwd_s"] = train[name]
        if isinstance(train["parallel (torch)"], float):
            row["fwd_bwd_vs_parallel"] = speedup(train["parallel (torch)"], train[name])
    if "parallel (torch)" in means:
        row["max_abs_mean_diff"] = (means[name] - means["parallel (torch)"]).abs().max().item()
    return row


def print_kla_row(row: dict) -> None:
    if "error" in row:
        print(f"{row['T']:>6}  {row['contestant']:<20} {row['error']}")
        return
    ratio = row.get("fwd_vs_sequential", math.nan)
    train = f"{1e3 * row['fwd_bwd_s']:>10.3f}" if "fwd_bwd_s" in row else f"{'-':>10}"
    train_ratio = row.get("fwd_bwd_vs_parallel")
    train_ratio = f"{train_ratio:>11.2f}x" if train_ratio is not None else f"{'-':>12}"
    print(
        f"{row['T']:>6}  {row['contestant']:<20} {1e3 * row['fwd_s']:>10.3f} {ratio:>13.1f}x  "
        f"{train} {train_ratio}  {row.get('max_abs_mean_diff', math.nan):>12.1e}"
    )


# --- command line -------------------------------------------------------------------------------


def write_json(path: Path, record: dict) -> None:
    """Atomic write (temp file + rename) into ``path``'s folder."""
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as out:
        json.dump(record, out, indent=1)
    os.replace(tmp, path)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    p.add_argument("--lengths", type=int, nargs="+", help="attention T (default 1k..16k)")
    p.add_argument("--dims", type=int, nargs="+", help="attention head dims (default 64 128)")
    p.add_argument("--kla-lengths", type=int, nargs="+", help="KLA T (default 2^10..2^16)")
    p.add_argument("--kla-chunks", type=int, nargs="+", help="Triton chunk sizes (default 64)")
    p.add_argument("--kla-block", type=int, help="Triton channels per program (default 16)")
    p.add_argument("--kla-batch", type=int, default=2, help="KLA sequences B (default 2)")
    p.add_argument("--kla-state", type=int, nargs=2, default=(16, 32), metavar=("N", "D"))
    p.add_argument("--repeats", type=int, help="timed calls per contestant (default 5; quick 1)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls first (default 2)")
    p.add_argument("--skip-attention", action="store_true", help="KLA section only")
    p.add_argument("--skip-kla", action="store_true", help="attention section only")
    p.add_argument("--device", default="cuda", help="a CUDA device (default cuda)")
    p.add_argument("--json", type=Path, help="also write every row to this new JSON file")
    args = p.parse_args(argv)
    quick = args.quick
    args.lengths = args.lengths or ([256, 512] if quick else [1024, 2048, 4096, 8192, 16384])
    args.dims = args.dims or ([64] if quick else [64, 128])
    args.kla_lengths = args.kla_lengths or (
        [2**8, 2**10] if quick else [2**e for e in range(10, 17, 2)] + [2048]
    )
    args.kla_lengths = sorted(set(args.kla_lengths))
    args.kla_chunks = args.kla_chunks or [64]
    args.repeats = args.repeats or (1 if quick else 5)
    sizes = [*args.lengths, *args.dims, *args.kla_lengths, *args.kla_state, args.kla_batch]
    if min(sizes) < 1 or args.repeats < 1 or args.warmup < 0:
        p.error("sizes and --repeats must be >= 1, --warmup >= 0")
    if args.json is not None and args.json.exists():
        p.error(f"--json {args.json} exists; remove it or choose another name")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        print(
            f"bench_triton: needs a CUDA device (--device {args.device}; "
            f"torch.cuda.is_available() = {torch.cuda.is_available()})",
            file=sys.stderr,
        )
        return 2
    import triton

    name = torch.cuda.get_device_name(device)
    print(
        f"bench_triton {datetime.date.today()}; {name}; torch {torch.__version__}, "
        f"triton {triton.__version__}"
    )
    rows = []
    if not args.skip_attention:
        rows += attention_section(args.lengths, args.dims, args.repeats, args.warmup, device)
    if not args.skip_kla:
        slots, channels = args.kla_state
        rows += kla_section(
            args.kla_lengths, args.kla_chunks, args.kla_block, args.kla_batch, slots, channels,
            args.repeats, args.warmup, device,
        )  # fmt: skip
    if args.json is not None:
        record = {
            "date": str(datetime.date.today()),
            "device": name,
            "torch": torch.__version__,
            "triton": triton.__version__,
            "argv": sys.argv[1:] if argv is None else list(argv),
            "rows": rows,
        }
        write_json(args.json, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

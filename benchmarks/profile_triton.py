"""Where the fused Triton attention spends its time on a GPU (issue 19), by CUDA kernel.

Runs ``torch.profiler`` over a few forward and forward+backward calls of the fused isotropic
AFA and RFA (``backend="triton"``) at one size of ``bench_triton``'s attention workload
(B = 2, H = 8, causal, bfloat16) and prints, per contestant and pass, the CUDA kernels sorted
by their total device time. The split between the attention kernel itself and the work around
it (the rotation factors, the rotated float32 copies, casts) says which to fuse first.

Usage (needs CUDA)::

    python benchmarks/profile_triton.py                 # T = 4096, D = 64
    python benchmarks/profile_triton.py --steps 16384 --dim 128 --rows 20
"""

from __future__ import annotations

import argparse
import sys

import torch
from bench_triton import attention_call, attention_inputs, forward_backward


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4096, help="sequence length T")
    parser.add_argument("--dim", type=int, default=64, help="head dimension D")
    parser.add_argument("--calls", type=int, default=5, help="profiled calls per pass")
    parser.add_argument("--rows", type=int, default=12, help="kernels listed per table")
    args = parser.parse_args(argv)
    for name in ("steps", "dim", "calls", "rows"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be a positive integer; got {getattr(args, name)}")
    return args


def profile(call, calls: int, rows: int) -> str:
    """The kernel table of ``calls`` runs of ``call`` after two untimed ones."""
    for _ in range(2):
        call()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_triton: needs a CUDA device (none found)", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    (q, k, v, dout), dynamics = attention_inputs(args.steps, args.dim, device)
    for name in ("sdpa (flash)", "isotropic AFA (triton)", "RFA (triton)"):
        forward = attention_call(name, q, k, v, dynamics, flex=None)
        print(f"== {name}, forward, T = {args.steps}, D = {args.dim}, {args.calls} calls")
        print(profile(forward, args.calls, args.rows))
        inputs = [t.requires_grad_() for t in (q, k, v)]
        train = forward_backward(forward, inputs, dout)
        print(f"== {name}, forward + backward")
        print(profile(train, args.calls, args.rows))
        for t in inputs:
            t.requires_grad_(False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

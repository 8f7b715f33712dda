"""Unrolled AFA at ``nu = inf``: the chunked attention form against the loop, side by side.

At ``nu = inf`` the unrolled AFA (seed 000 B.2, Algorithm 4) is the Kalman filter of the
isotropic model, linear in the data, and `kernels.functional.unrolled_afa` runs it
as chunked causal attention (`kernels.ops.unrolled.chunked`) instead of a Python loop
over time (``method="loop"``, the reference form, still used for finite ``nu``). This script
times one training step (forward and backward of a squared-output loss, through the layer
`UnrolledAdaptiveFilterAttention` with ``predict=True``) for both methods on the shapes the
well-specified training cases use, and prints ``loop / attention`` (> 1: the attention form is
faster) and the largest difference of the two outputs.

Workloads (``B`` sequences, ``T`` steps, ``E`` features, ``H`` heads):

* ``ou-nll``: 256 x 101, E = H = 4, identity basis, real eigenvalues, float64 (the likelihood
  case's full batch);
* ``ou``: 32 x 101, E = H = 4, identity basis, float32 (the MSE case's batch);
* ``rotation-3d``: 32 x 151, E = 3, one head, unitary basis, float32;
* ``long``: 8 x 4096, E = 8, two heads, learned basis, float32 (16 chunks of 256 steps).

Run::

    python benchmarks/bench_unrolled_afa.py [--repeats 5] [--threads 1] [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from kernels.layers.unrolled_afa import UnrolledAdaptiveFilterAttention

WORKLOADS = {
    "ou-nll": dict(B=256, T=101, E=4, H=4, dtype=torch.float64, basis="identity", rotation=False),
    "ou": dict(B=32, T=101, E=4, H=4, dtype=torch.float32, basis="identity", rotation=False),
    "rotation-3d": dict(B=32, T=151, E=3, H=1, dtype=torch.float32, basis="unitary"),
    "long": dict(B=8, T=4096, E=8, H=2, dtype=torch.float32, basis="learned"),
}
QUICK = {"B": 4, "T": 40}


def _step_seconds(layer, x, method: str, repeats: int) -> tuple[float, torch.Tensor]:
    """Best of `repeats` forward + backward passes; the output of the last."""
    layer.method = method
    best = math.inf
    for _ in range(repeats + 1):  # the first is an untimed warm-up
        layer.zero_grad(set_to_none=True)
        start = time.perf_counter()
        out, _ = layer(x)
        out.square().sum().backward()
        best = min(best, time.perf_counter() - start)
    return best, out.detach()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny shapes (a smoke run)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.threads < 1:
        parser.error("--repeats and --threads must be >= 1")
    torch.set_num_threads(args.threads)
    print(f"# torch {torch.__version__}, {args.threads} thread(s), best of {args.repeats}")
    head = f"{'workload':12} {'B':>4} {'T':>5} {'loop ms':>9} {'attn ms':>9} {'loop/attn':>9}"
    print(head + "  max diff")
    for name, spec in WORKLOADS.items():
        spec = {**spec, **(QUICK if args.quick else {})}
        B, T, E, H, dtype = (spec.pop(k) for k in ("B", "T", "E", "H", "dtype"))
        gen = torch.Generator().manual_seed(0)
        layer = UnrolledAdaptiveFilterAttention(
            E, H, nu=math.inf, predict=True, generator=gen, dtype=dtype, **spec
        )
        x = torch.randn(B, T, E, generator=gen, dtype=dtype)
        loop_s, loop_out = _step_seconds(layer, x, "loop", args.repeats)
        attn_s, attn_out = _step_seconds(layer, x, "auto", args.repeats)
        diff = float((loop_out - attn_out).abs().max() / loop_out.abs().max())
        print(
            f"{name:12} {B:>4} {T:>5} {1e3 * loop_s:>9.2f} {1e3 * attn_s:>9.2f} "
            f"{loop_s / attn_s:>9.2f}  {diff:.1e}"
        )


if __name__ == "__main__":
    main()

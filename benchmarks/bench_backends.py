"""Why the simulator is numpy: the two costs of batched Euler-Maruyama, numpy against torch (CPU).

A linear Euler step is one small matrix product and one add per step; the rest is drawing the
Gaussian increments. This times both costs side by side for the benchmark workload of
`bench_sde.py` (4096 paths x 2000 steps, d = 2) and prints torch/numpy ratios:

* Gaussian draws: one ``Generator.standard_normal`` call against one ``torch.randn`` call, and
  numpy split over two threads in independently seeded blocks (what `sde_sim.brownian` does);
* the sequential loop: ``np.matmul(..., out=)`` plus an in-place add against one fused
  ``torch.addmm(..., out=)`` per step.

Run: ``python benchmarks/bench_backends.py [--paths N] [--steps N] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import platform
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from _harness import best_of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    P, K, d = args.paths, args.steps, 2
    n = P * K * d
    print(
        f"{platform.platform()}, {torch.get_num_threads()} torch threads; numpy "
        f"{np.__version__}, torch {torch.__version__}; {P} paths x {K} steps x {d}"
    )

    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    pool = ThreadPoolExecutor(2)
    block = max(1, K // 16)

    def numpy_threaded(dtype):
        def draw(b):
            seq = np.random.SeedSequence(0, spawn_key=(b,))
            return np.random.default_rng(seq).standard_normal((block, P, d), dtype=dtype)

        return lambda: list(pool.map(draw, range(-(-K // block))))

    rows = []
    for np_dtype, t_dtype in ((np.float64, torch.float64), (np.float32, torch.float32)):
        t_np = best_of(lambda dt=np_dtype: rng.standard_normal(n, dtype=dt), args.repeats)
        t_np2 = best_of(numpy_threaded(np_dtype), args.repeats)
        t_torch = best_of(lambda dt=t_dtype: torch.randn(n, generator=gen, dtype=dt), args.repeats)
        rows.append((f"draws {np.dtype(np_dtype).name}", t_np, t_np2, t_torch))

    step = np.array([[1.0, 0.01], [-0.02, 0.99]])
    forcing = rng.standard_normal((K, P, d))
    buf = np.empty((K + 1, P, d))
    buf[0] = 1.0

    def numpy_loop():
        for k in range(K):
            np.matmul(buf[k], step.T, out=buf[k + 1])
            buf[k + 1] += forcing[k]

    tbuf, tforcing, tstep = (
        torch.from_numpy(buf),
        torch.from_numpy(forcing),
        torch.from_numpy(step.T.copy()),
    )

    def torch_loop():
        for k in range(K):
            torch.addmm(tforcing[k], tbuf[k], tstep, out=tbuf[k + 1])

    t_np, t_torch = best_of(numpy_loop, args.repeats), best_of(torch_loop, args.repeats)
    rows.append(("loop float64", t_np, float("nan"), t_torch))

    print(
        f"{'cost':<16}{'numpy s':>10}{'numpy 2-thr s':>15}{'torch s':>10}"
        f"{'torch/numpy':>13}{'torch/numpy 2-thr':>19}"
    )
    for name, a, b, c in rows:
        print(f"{name:<16}{a:>10.3f}{b:>15.3f}{c:>10.3f}{c / a:>13.2f}{c / b:>19.2f}")


if __name__ == "__main__":
    main()

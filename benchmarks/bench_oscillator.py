"""Closed-form oscillator attention against the ODE-solver reference, side by side in one run.

Seed 002 (OsciFormer) claims its closed forms are 3-20x faster than ContiFormer's numerical
ODE + quadrature attention. Workload: one head of N tokens on irregular times (gaps
U(0.02, 0.2)), D channels, J query modes and M = J drive modes (section 7), mixed damping
(zeta = 0.3 and 1.5 alternating over channels), float64, forward only, the whole attention
(query fit, logits, softmax, average value read-out):

closed-form
    `kernels.ops.oscillator.oscillator_attention` (torch; ``--device`` picks CPU/CUDA).
ode-reference
    `estimators.oscillator_reference.oscillator_attention`: for every key and value, DOP853
    (`scipy.integrate.solve_ivp`, ``--rtol``) of the driven oscillator with the attention
    integrals of all later queries as extra components (the ContiFormer-style numerical path,
    digest Alg. D).

Metric: best wall time of ``--repeats`` interleaved calls; ratio = reference / closed form
(above 1: the closed form is faster); ``max|diff|`` is the largest output difference (set by the
solver tolerance). Both sides use ``--threads`` CPU threads (default 1: on a shared 2-core
machine torch's default thread pool oversubscribes and times become noise).

Run::

    python benchmarks/bench_oscillator.py            # N = 64, 128, 256, 512, D = 8, J = 8
    python benchmarks/bench_oscillator.py --quick    # smoke run: N = 32, 64, D = 4, J = 4
"""

from __future__ import annotations

import argparse
import datetime
import platform

import numpy as np
import torch
from _harness import interleaved_best

from estimators import oscillator_reference as ref
from kernels.ops import oscillator as osc


def _workload(steps: int, dim: int, modes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.uniform(0.02, 0.2, steps))
    q, k, v = (rng.standard_normal((steps, dim)) for _ in range(3))
    freqs = np.geomspace(0.1, 10.0, modes)
    omega = np.geomspace(0.1, 10.0, dim)
    zeta = np.where(np.arange(dim) % 2 == 0, 0.3, 1.5)
    params = {
        "omega": omega,
        "gamma": zeta * omega,
        "velocity": 0.1 * rng.standard_normal((dim, dim)),
        "drive_cos": 0.1 * rng.standard_normal((modes, dim)),
        "drive_sin": 0.1 * rng.standard_normal((modes, dim)),
        "drive_freqs": freqs,
    }
    return t, q, k, v, freqs, params


def _torch_params(params, device):
    def tensor(name):
        x = torch.tensor(params[name], device=device)
        return x if name == "drive_freqs" else x.unsqueeze(0)

    return osc.OscillatorParams(*(tensor(n) for n in osc.OscillatorParams._fields))


def run(sizes, dim, modes, repeats, rtol, device):
    """Rows ``(N, closed-form s, reference s, ratio, max|diff|)``."""
    rows = []
    for steps in sizes:
        t, q, k, v, freqs, params = _workload(steps, dim, modes)
        tp = _torch_params(params, device)
        qt, kt, vt = (torch.tensor(x, device=device)[None, None] for x in (q, k, v))
        tt, ft = torch.tensor(t, device=device), torch.tensor(freqs, device=device)

        def closed_form(qt=qt, kt=kt, vt=vt, tt=tt, ft=ft, tp=tp):
            with torch.no_grad():
                out, _ = osc.oscillator_attention(
                    qt, kt, vt, tt, key_params=tp, value_params=tp, freqs=ft
                )
            if out.is_cuda:
                torch.cuda.synchronize()
            return out[0, 0].cpu().numpy()

        def reference(t=t, q=q, k=k, v=v, freqs=freqs, params=params):
            out, _ = ref.oscillator_attention(
                q, k, v, t, key=params, value=params, freqs=freqs, rtol=rtol, atol=1e-2 * rtol
            )
            return out

        closed_form()  # warm-up (allocator, CUDA context)
        best, outs = interleaved_best({"closed": closed_form, "ref": reference}, repeats)
        diff = float(np.abs(outs["closed"] - outs["ref"]).max())
        rows.append((steps, best["closed"], best["ref"], best["ref"] / best["closed"], diff))
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: N = 32, 64; D = J = 4")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--dim", type=int, default=8, help="channels D per head")
    parser.add_argument("--modes", type=int, default=8, help="query modes J (= drive modes M)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rtol", type=float, default=1e-6, help="solve_ivp relative tolerance")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="device of the closed form")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.dim, args.modes, args.repeats = [32, 64], 4, 4, 1
    torch.set_num_threads(args.threads)
    print(
        f"# bench_oscillator {datetime.date.today()} | {platform.platform()} | "
        f"{platform.processor() or platform.machine()} | torch {torch.__version__} | "
        f"device {args.device} | threads {args.threads}"
    )
    print(
        f"# D = {args.dim}, J = M = {args.modes}, float64, solve_ivp DOP853 rtol {args.rtol:g}, "
        f"best of {args.repeats}"
    )
    print(f"{'N':>6} {'closed-form s':>14} {'ode-reference s':>16} {'ratio':>9} {'max|diff|':>10}")
    for steps, t_cf, t_ref, ratio, diff in run(
        args.sizes, args.dim, args.modes, args.repeats, args.rtol, args.device
    ):
        print(f"{steps:>6} {t_cf:>14.4f} {t_ref:>16.3f} {ratio:>8.1f}x {diff:>10.2e}", flush=True)


if __name__ == "__main__":
    main()

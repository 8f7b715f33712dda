"""Learned parameters against the truth as the training data grow (issue 13, consistency).

The well-specified likelihood case (unrolled AFA on ``ou``, identity basis, Gaussian NLL of its
own predictive law) trained on N = 16, 64, 256 paths (quick: 8, 32, 128), up to 4 (quick 2)
independent replicates at each N; `verify.consistency` pools the 12 parameters' errors over
the replicates in units of the MLE's standard errors at the largest N:

    e_N = sqrt( mean_{replicates, i} ((learned_i(N) - truth_i) / se_i(N_max))^2 ).

Drawn on log-log axes against N: ``e_N`` of the trained layer, the same for the parameter MLE
(`estimators.fit`, same paths), the MLE's standard error in the same units, and the line
``N^{-1/2}`` through the largest size. A consistent trainer follows the standard error down
with slope -1/2 (the registered check mle_convergence.consistency-slope bounds it).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from verify.consistency import (
    QUICK_SIZES,
    QUICK_STEPS,
    REPLICATES,
    SIZES,
    Consistency,
    consistency_of,
    size_configs,
)
from verify.mle_convergence import CASES

NAME = "convergence_vs_data"
TITLE = "Trained parameters approach the truth like N^-1/2 (unrolled AFA, OU, likelihood loss)"
SOURCE = "seed 000 B.2 (Algorithm 4), seed 001 eqs. (7)-(8); issue 13 (consistency)"
SEED = "000"
CHECKS = (
    "mle_convergence.consistency-slope",
    "mle_convergence.unrolled-afa-ou-nll*",
)


@dataclass(frozen=True)
class Config:
    """``sizes``: training paths per run (increasing, each dividing the largest); ``steps`` per
    run; at most ``replicates`` runs per size. Full: the registered check's full sizes, steps
    and replicates; quick: its quick ones."""

    sizes: tuple[int, ...] = SIZES
    steps: int = CASES["unrolled-afa-ou-nll"].full
    replicates: int = REPLICATES[False]

    @classmethod
    def quick(cls) -> Config:
        return cls(sizes=QUICK_SIZES, steps=QUICK_STEPS, replicates=REPLICATES[True])

    @classmethod
    def full(cls) -> Config:
        return cls()


@dataclass(frozen=True)
class Data:
    config: Config
    result: Consistency

    @property
    def sizes(self) -> np.ndarray:
        return np.array(self.result.sizes, dtype=float)

    def series(self, name: str) -> np.ndarray:
        """``"trained_error"``, ``"mle_error"`` or ``"mean_se"`` per size."""
        return np.array([getattr(r, name) for r in self.result.results], dtype=float)


def trainings(cfg: Config) -> tuple:
    """The training runs `compute` uses: on a Dask cluster each is a task of its own, and the
    figure's task adopts their reports (`figures.distributed`)."""
    return tuple(
        run for n in cfg.sizes for run in size_configs(n, cfg.sizes, cfg.steps, cfg.replicates)
    )


def compute(cfg: Config | None = None) -> Data:
    cfg = Config.full() if cfg is None else cfg
    return Data(cfg, consistency_of(cfg.sizes, steps=cfg.steps, replicates=cfg.replicates))


def reference_line(data: Data) -> np.ndarray:
    """``N^{-1/2}`` scaled to the MLE standard error at the largest size."""
    sizes, se = data.sizes, data.series("mean_se")
    return se[-1] * np.sqrt(sizes[-1] / sizes)


def plot(data: Data):
    from figures import style

    with style.context():
        fig = style.new_figure(figsize=(6.5, 4.5))
        ax = fig.subplots()
        sizes = data.sizes
        ax.plot(sizes, data.series("trained_error"), "o-", color="C2", label="trained layer")
        ax.plot(sizes, data.series("mle_error"), "s--", color="C1", label="parameter MLE")
        ax.plot(sizes, data.series("mean_se"), "^:", color="tab:blue", label="MLE standard error")
        ax.plot(sizes, reference_line(data), "-", color="0.5", lw=1.0, label="N^-1/2")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes, [str(int(n)) for n in sizes])
        ax.set_xticks([], minor=True)  # only the sizes are labelled
        ax.set_xlabel("training paths N")
        ax.set_ylabel("RMS error / se(N_max)")
        ax.set_title(f"fitted slope {data.result.slope:+.2f} (MLE {data.result.mle_slope:+.2f})")
        ax.legend(loc="upper right")
        fig.suptitle(TITLE, fontsize=9)
    return fig


def caption(data: Data) -> str:
    r = data.result
    return (
        "RMS error of the 12 learned parameters (a, p^2, eta^2 of four OU channels) against the "
        "truth, each in units of the parameter MLE's standard error at the largest N, for the "
        "unrolled AFA trained with the likelihood loss on N paths (full batch; up to "
        f"{data.config.replicates} independent replicates pooled at each N), beside the MLE "
        "on the first replicate's paths and its standard error. Expected: slope -1/2 "
        f"(consistency at the MLE's rate). Measured: {r.summary()}."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.convergence_vs_data [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

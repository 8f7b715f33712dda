"""Seed 001 Fig. 5(b): KLA+'s predictive uncertainty along a sequence.

The paper trains KLA+ (the layer trained with the Monte-Carlo marginal likelihood of its
readout, eqs. (24)-(25)) on MAD's Selective Copy and plots the posterior variance: it "decreases
as evidence accumulates" with "sharp spikes" at copy-relevant tokens. Selective Copy (T = 256,
12,800 sequences) does not train in seconds on a CPU, so here KLA+ is trained on the reduced
Memorization task of `figures.kla_memorization` (same model, ``loss="mc"``:
`kernels.ops.kla.mc_marginal_nll` with S = 10 samples), and the readout variance
``sum_n q_n^2 / lam[n, d]`` (`KalmanLinearAttention.readout`, Alg. 1) is read on held-out
sequences.

Numbers for the two claims, averaged over channels and held-out sequences:

* ``decay_ratio``: the mean variance over the last quarter of the positions divided by that
  over the first quarter (below 1: the variance falls as tokens accumulate);
* ``insert_ratio``: the mean variance at the ``[insert]`` positions (where the answer is read)
  divided by that at the key positions (above 1: spikes at the positions that matter).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import numpy as np
import torch

from figures import kla_memorization as memo

NAME = "kla_uncertainty"
TITLE = "Seed 001 Fig. 5(b): KLA+ readout variance along held-out sequences"
SOURCE = "seed 001 section 5.3, Fig. 5(b) (KLA+: eqs. (24)-(25); task here: Memorization)"
SEED = "001"
CHECKS: tuple[str, ...] = ("kla.filter-error-variance",)


@dataclass(frozen=True)
class Config:
    """The Memorization run of `figures.kla_memorization.Config` (``task``), trained as KLA+."""

    task: memo.Config = memo.Config(steps=150)

    @classmethod
    def quick(cls) -> Config:
        return cls(task=replace(memo.Config.quick(), steps=40))

    @classmethod
    def full(cls) -> Config:
        return cls()


@dataclass(frozen=True)
class Data:
    """``variance`` (T,) the readout variance of one held-out sequence, mean over channels,
    ``variance_band`` (2, T) its 10% and 90% quantiles over channels; ``mean_variance`` (T,)
    over all held-out sequences; ``is_insert`` (T,) bool; accuracies of KLA+ before and after
    training (decoded from the readout mean); ``decay_ratio``, ``insert_ratio`` (module
    docstring) for the trained and the untrained model."""

    config: Config
    variance: np.ndarray
    variance_band: np.ndarray
    mean_variance: np.ndarray
    is_insert: np.ndarray
    accuracy_before: float
    accuracy_after: float
    decay_ratio: float
    insert_ratio: float
    initial_decay_ratio: float
    initial_insert_ratio: float


@torch.no_grad()
def readout_variance(model, inputs: torch.Tensor) -> np.ndarray:
    """The layer's readout variance (B, T, E) on token sequences (B, T)."""
    return model.layer.readout(model.embed(inputs))[1].double().numpy()


def ratios(variance: np.ndarray, is_insert: np.ndarray) -> tuple[float, float]:
    """``(decay_ratio, insert_ratio)`` of a variance (B, T, E) (module docstring)."""
    per_step = variance.mean(axis=(0, 2))
    q = max(1, per_step.size // 4)
    decay = float(per_step[-q:].mean() / per_step[:q].mean())
    insert = float(per_step[is_insert].mean() / per_step[~is_insert].mean())
    return decay, insert


def compute(cfg: Config | None = None) -> Data:
    cfg = Config.full() if cfg is None else cfg
    model, data, initial, (before, after) = memo.train(cfg.task, loss="mc")
    inputs = data.holdouts[0].inputs
    is_insert = (inputs[0] == 2 * cfg.task.n_keys).numpy()
    var = readout_variance(model, inputs)
    var0 = readout_variance(initial, inputs)
    decay, insert = ratios(var, is_insert)
    decay0, insert0 = ratios(var0, is_insert)
    return Data(
        config=cfg,
        variance=var[0].mean(axis=-1),
        variance_band=np.quantile(var[0], [0.1, 0.9], axis=-1),
        mean_variance=var.mean(axis=(0, 2)),
        is_insert=is_insert,
        accuracy_before=before,
        accuracy_after=after,
        decay_ratio=decay,
        insert_ratio=insert,
        initial_decay_ratio=decay0,
        initial_insert_ratio=insert0,
    )


def plot(data: Data):
    from figures import style

    with style.context():
        fig = style.new_figure(figsize=(8, 3.8))
        ax = fig.subplots()
        steps = np.arange(data.variance.size)
        ax.fill_between(
            steps, *data.variance_band, color=style.OPTIMUM, alpha=0.2, lw=0,
            label="one sequence: 10-90% over channels",
        )  # fmt: skip
        ax.plot(steps, data.variance, color=style.OPTIMUM, label="one sequence: channel mean")
        ax.plot(steps, data.mean_variance, "--", color=style.TRUTH, label="held-out mean")
        ax.plot(
            steps[data.is_insert], data.variance[data.is_insert], "o", ms=3,
            color=style.MEASURED, label="[insert] positions",
        )  # fmt: skip
        ax.set_yscale("log")
        ax.set_xlabel("position t")
        ax.set_ylabel("readout variance sum_n q_n^2 / lam")
        ax.legend(loc="upper right")
        ax.set_title(TITLE)
    return fig


def _verdict(value: float, good_below: bool) -> str:
    agrees = value < 1.0 if good_below else value > 1.0
    return "agrees" if agrees else "disagrees"


def caption(data: Data) -> str:
    task = data.config.task
    return (
        "Paper (KLA+ on Selective Copy): the posterior variance decreases as evidence "
        "accumulates, with sharp spikes at copy-relevant tokens. Here (KLA+ on Memorization "
        f"instead, {task.n_keys} keys, T = {task.length}, width {task.width}, {task.steps} steps; "
        f"held-out accuracy {data.accuracy_before:.3f} before, {data.accuracy_after:.3f} after): "
        f"variance of the last quarter over the first {data.decay_ratio:.3f} trained "
        f"({_verdict(data.decay_ratio, True)} with the decrease), {data.initial_decay_ratio:.3f} "
        f"untrained; variance at [insert] positions over key positions {data.insert_ratio:.3f} "
        f"trained ({_verdict(data.insert_ratio, False)} with spikes at the positions where "
        f"the answer is read), {data.initial_insert_ratio:.3f} untrained."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.kla_uncertainty [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

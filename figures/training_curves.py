"""Training curves against the Kalman optimum, and the learned dynamics against the truth.

For each trained system (`verify.mle_convergence.CASES`, shared through `figures.trained`) one
row of two panels:

1. the held-out one-step prediction MSE of the layer during training, divided by that of the
   Kalman filter with the true parameters (the optimal one-step predictor of a linear-Gaussian
   model, seed 000 2.3, 3.1), against the optimizer step on a log axis:

       ratio_k = heldout_mse_k / MSE_kalman        (>= 1 in expectation)

   with horizontal lines for the Kalman optimum (1), the batch MLE with the true parameters
   (``MSE_mle / MSE_kalman``, seed 000 A.2; what a one-layer AFA with the true parameters
   computes where the eigenbasis is unitary), the last-measurement predictor
   (``MSE_last / MSE_kalman``) and issue 7's target `TARGET`;
2. each learned parameter against the optimizer step, in standard errors of the parameter MLE
   on the training paths, ``(learned_k - MLE) / se`` (`verify.mle_convergence.
   parameter_trajectory`), with the band ``MLE +- 1 se``: a layer that arrives at the MLE
   ends inside it (the well-specified cases, `verify.well_specified`), one whose loss has its
   minimum elsewhere does not (afa-2d b: the batch form is misspecified under process noise);
3. the table of `verify.mle_convergence.learned_dynamics`: per identifiable quantity its true
   value, the parameter MLE on the training paths with its standard error, the layer's learned
   value and whether ``|learned - MLE| <= 3 se`` (`SE_LEVEL`); below it the rows' notes (how a
   value is read off the layer and what is not identified).

All MSEs are on the same held-out paths and rows (`verify.mle_convergence.reference_mses`).
"""

from __future__ import annotations

import math
import sys
import textwrap
from dataclasses import dataclass

import numpy as np

from verify.mle_convergence import ParameterRow, learned_dynamics, parameter_trajectory

NAME = "training_curves"
TITLE = "Training curves against the Kalman optimum; learned vs true dynamics"
SOURCE = "seed 000 sections 2.3, 3.1, A.2, B.2 (one-step prediction loss, MLE); issues 7, 13"
SEED = "000"
CHECKS = (
    "mle_convergence.afa-2d-?",
    "mle_convergence.rotation-3d",
    "mle.diffuse-kalman",
)
# Issue 7's target for the held-out one-step MSE / Kalman optimum.
TARGET = 1.10
# A learned value "agrees" with the parameter MLE within this many standard errors.
SE_LEVEL = 3.0
# Systems `learned_dynamics` reads (linear presets with a Kalman optimum and a one-layer AFA or
# unrolled AFA). The unrolled ones are well-specified: their family holds the Kalman filter.
SUPPORTED = (
    "afa-2d-b",
    "afa-2d-c",
    "rotation-3d",
    "ou",
    "unrolled-afa-ou",
    "unrolled-afa-ou-nll",
    "unrolled-afa-rotation-3d",
)
# Reference predictors drawn as horizontal lines, in `reference_mses` names, with their labels.
REFERENCES = {
    "kalman": "Kalman, true parameters (optimum)",
    "mle": "batch MLE, true parameters",
    "last": "last measurement",
}
COLUMNS = ("quantity", "truth", "MLE ± se", "learned", f"within {SE_LEVEL:g} se of MLE?")
# Characters per line of the notes under the table (fits the table panel at 7 pt).
NOTE_WIDTH = 100
# Tables with more rows than this are set smaller, leaving room for the notes below them.
LONG_TABLE = 8
# What the learned values cannot tell, per quantity (`learned_dynamics`), added to the notes.
UNIDENTIFIED = {
    "|omega|": "its sign is not identified (a feature or its conjugate carries a real signal "
    "alike), nor a frequency beyond the Nyquist pi / Delta on a regular grid (aliasing)",
}


@dataclass(frozen=True)
class Config:
    """``cases``: `verify.mle_convergence.CASES` names (one row of panels each, from
    `SUPPORTED`); ``quick_training``: the cases' quick length instead of the full one;
    ``seed`` of the training runs."""

    cases: tuple[str, ...] = (
        "afa-2d-b",
        "rotation-3d",
        "ou",
        "unrolled-afa-ou-nll",
        "unrolled-afa-rotation-3d",
    )
    quick_training: bool = False
    seed: int = 0

    def __post_init__(self):
        if not isinstance(self.cases, tuple) or not self.cases:
            raise TypeError(f"cases must be a non-empty tuple of case names; found {self.cases!r}")
        unknown = [c for c in self.cases if c not in SUPPORTED]
        if unknown:
            raise ValueError(
                f"cases must be among {', '.join(SUPPORTED)}; found {', '.join(map(str, unknown))}"
            )

    @classmethod
    def quick(cls) -> Config:
        return cls(cases=("afa-2d-b",), quick_training=True)

    @classmethod
    def full(cls) -> Config:
        return cls()


@dataclass(frozen=True)
class Panel:
    """One trained system. Shapes: n evaluations.

    steps : (n,) optimizer steps of the held-out evaluations.
    ratios : (n,) held-out one-step MSE / ``kalman_mse`` at those steps.
    untrained_ratio : the same for the freshly initialised model (step 0).
    references : reference name -> its MSE / ``kalman_mse`` (``"kalman"`` is 1).
    kalman_mse : the Kalman optimum's held-out MSE (original units).
    final_ratio : the trained model's ratio (the last evaluation).
    cpu_s, wall_s : CPU and wall seconds of the training.
    rows : the learned-dynamics table (`verify.mle_convergence.ParameterRow`).
    trajectory_steps : (m,) the steps of ``trajectory``.
    trajectory : row name -> (m,) learned values during training.
    """

    case: str
    layer: str
    steps: np.ndarray
    ratios: np.ndarray
    untrained_ratio: float
    references: dict[str, float]
    kalman_mse: float
    final_ratio: float
    cpu_s: float
    wall_s: float
    rows: tuple[ParameterRow, ...]
    trajectory_steps: np.ndarray
    trajectory: dict[str, np.ndarray]

    def z_trajectory(self) -> dict[str, np.ndarray]:
        """Row name -> ``(learned_k - MLE) / se`` over the training (rows with an se only)."""
        return {
            r.name: (self.trajectory[r.name] - r.mle) / r.mle_se
            for r in self.rows
            if math.isfinite(r.mle_se) and r.mle_se > 0
        }


@dataclass(frozen=True)
class Data:
    config: Config
    panels: tuple[Panel, ...]


def agrees(row: ParameterRow) -> bool | None:
    """Whether the learned value lies within `SE_LEVEL` standard errors of the parameter MLE
    (None where the MLE has no standard error)."""
    z = row.z_score
    return None if math.isnan(z) else bool(abs(z) <= SE_LEVEL)


def _panel(case: str, cfg: Config) -> Panel:
    from figures import trained

    report = trained.report(case, quick=cfg.quick_training, seed=cfg.seed)
    kalman = report.references["kalman"]
    metrics = report.metrics
    steps, trajectory = parameter_trajectory(report)
    return Panel(
        case=case,
        layer=report.config.layer,
        steps=np.array([m["step"] for m in metrics], dtype=int),
        ratios=np.array([m["heldout_mse"] for m in metrics], dtype=float) / kalman,
        untrained_ratio=report.untrained_mse / kalman,
        references={name: mse / kalman for name, mse in report.references.items()},
        kalman_mse=kalman,
        final_ratio=report.ratios["kalman"],
        cpu_s=report.cpu_s,
        wall_s=report.wall_s,
        rows=tuple(learned_dynamics(report)),
        trajectory_steps=steps,
        trajectory=trajectory,
    )


def trainings(cfg: Config) -> tuple:
    """The training runs `compute` uses: on a Dask cluster each is a task of its own, and the
    figure's task adopts their reports (`figures.distributed`)."""
    from figures import trained

    return trained.case_configs(cfg.cases, quick=cfg.quick_training, seed=cfg.seed)


def compute(cfg: Config | None = None) -> Data:
    """Curves and tables of every case in ``cfg.cases`` (module docstring)."""
    cfg = Config.full() if cfg is None else cfg
    return Data(cfg, tuple(_panel(case, cfg) for case in cfg.cases))


def _number(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.4g}"


def table_cells(panel: Panel) -> list[list[str]]:
    """The table's body: one list of `COLUMNS` strings per row of ``panel.rows``."""
    verdict = {True: "yes", False: "no", None: "n/a"}
    cells = []
    for row in panel.rows:
        mle = _number(row.mle) if math.isnan(row.mle_se) else f"{row.mle:.4g} ± {row.mle_se:.2g}"
        z = "" if math.isnan(row.z_score) else f" (z = {row.z_score:+.1f})"
        cells.append(
            [row.name, _number(row.truth), mle, _number(row.learned), verdict[agrees(row)] + z]
        )
    return cells


def notes(panel: Panel) -> list[str]:
    """The distinct notes of the rows, as ``"quantity: note"`` (indexed rows share one), with
    what is not identified (`UNIDENTIFIED`)."""
    found: dict[str, str] = {}
    for row in panel.rows:
        found.setdefault(row.name.split("[")[0], row.note)
    return [
        f"{name}: {note}" + (f"; {UNIDENTIFIED[name]}" if name in UNIDENTIFIED else "")
        for name, note in found.items()
    ]


def plot(data: Data):
    """Per case: the ratio curve (log y) with the reference lines, the parameters in standard
    errors of the MLE against the step, and the parameter table."""
    from figures import style

    with style.context():
        n = len(data.panels)
        fig = style.new_figure(figsize=(19, 4.4 * n))
        axes = np.atleast_2d(fig.subplots(n, 3, width_ratios=(1, 1, 1.3)))
        for (curve_ax, param_ax, table_ax), p in zip(axes, data.panels, strict=True):
            _plot_curve(curve_ax, p)
            _plot_parameters(param_ax, p)
            _plot_table(table_ax, p)
        fig.suptitle(TITLE)
    return fig


def _plot_curve(ax, p: Panel) -> None:
    ax.plot([0, *p.steps], [p.untrained_ratio, *p.ratios], "o-", color="C2", label="trained layer")
    styles = {"kalman": ("-", "tab:blue"), "mle": ("--", "C1"), "last": (":", "C3")}
    for name, label in REFERENCES.items():
        if name in p.references:
            line, color = styles[name]
            value = p.references[name]
            ax.axhline(value, ls=line, color=color, lw=1.0, label=f"{label}: {value:.3g}")
    ax.axhline(TARGET, ls="-.", color="0.4", lw=1.0, label=f"issue 7 target: {TARGET:g}")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("held-out one-step MSE / Kalman")
    ax.set_title(
        f"{p.case}: {p.layer}, final ratio {p.final_ratio:.3f} ({p.cpu_s:.0f} s CPU training)"
    )
    ax.legend(loc="upper right")


def _plot_parameters(ax, p: Panel) -> None:
    ax.axhspan(-1.0, 1.0, color="0.6", alpha=0.25, lw=0, label="MLE +- 1 se")
    ax.axhline(0.0, color="0.2", lw=1.0)
    # tab10 without grey (C7), which the band uses
    colors = [f"C{k}" for k in range(10) if k != 7]
    for k, (name, z) in enumerate(p.z_trajectory().items()):
        ax.plot(p.trajectory_steps, z, "-", color=colors[k % 9], lw=1.2, label=name)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_xscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("(learned - MLE) / se")
    ax.set_title(f"{p.case}: learned parameters in standard errors of the MLE")
    ax.legend(loc="upper right", fontsize=6, ncol=2)


def _plot_table(ax, p: Panel) -> None:
    ax.axis("off")
    ax.grid(False)
    table = ax.table(cellText=table_cells(p), colLabels=COLUMNS, loc="upper center")
    table.auto_set_font_size(False)
    long_table = len(p.rows) > LONG_TABLE  # e.g. 16 rows for four OU channels
    table.set_fontsize(6 if long_table else 8)
    table.auto_set_column_width(list(range(len(COLUMNS))))
    table.scale(1.0, 0.95 if long_table else 1.4)
    ax.set_title(f"{p.case}: learned dynamics vs truth and parameter MLE (training paths)")
    ax.text(
        0.0,
        0.0,
        "\n".join(textwrap.fill(note, NOTE_WIDTH, subsequent_indent="    ") for note in notes(p)),
        transform=ax.transAxes,
        va="bottom",
        ha="left",
        fontsize=7,
    )


def _row_words(row: ParameterRow) -> str:
    mle = (
        f"MLE {_number(row.mle)}"
        if math.isnan(row.mle_se)
        else f"MLE {row.mle:.4g} +- {row.mle_se:.2g}"
    )
    verdict = agrees(row)
    where = (
        ""
        if verdict is None
        else f", {'within' if verdict else 'outside'} {SE_LEVEL:g} se (z = {row.z_score:+.1f})"
    )
    return f"{row.name}: truth {row.truth:.4g}, {mle}, learned {row.learned:.4g}{where}"


def caption(data: Data) -> str:
    parts = []
    for p in data.panels:
        refs = ", ".join(
            f"{name} {value:.3g}" for name, value in p.references.items() if name != "kalman"
        )
        parts.append(
            f"{p.case} ({p.layer}, {int(p.steps[-1])} steps, {p.cpu_s:.1f} s CPU of training): "
            f"final held-out MSE / Kalman {p.final_ratio:.3f} (target {TARGET:g}; untrained "
            f"{p.untrained_ratio:.3g}; references {refs}). Learned dynamics: "
            + "; ".join(_row_words(r) for r in p.rows)
            + "."
        )
    return (
        "Left: held-out one-step prediction MSE of the trained layer divided by that of the "
        "Kalman filter with the true parameters (the optimum, 1), against the optimizer step; "
        "lines: the batch MLE with the true parameters and the last-measurement predictor, "
        "on the same held-out paths. Middle: each learned parameter during training, in "
        "standard errors of the parameter MLE (band: MLE +- 1 se). Converging in parameters "
        "needs a family that holds the optimum: the unrolled AFA cases (the recursive filter "
        "with nu = inf is the Kalman filter) do; the batch AFA on afa-2d b/c and ou does not "
        "(it treats the pulled-forward measurements as independent, so with process noise "
        "its loss has its minimum away from the true parameters) and converges in prediction "
        "only. Right: the layer's dynamics against the truth and the "
        f"parameter MLE on the training paths (+- one standard error; agreement within "
        f"{SE_LEVEL:g} se). " + " ".join(parts)
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.training_curves [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

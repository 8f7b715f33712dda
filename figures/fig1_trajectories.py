"""Seed 000 Fig. 1: ground truth, measurements and one-step predictions on the 2-D spiral.

Three panels, the ``afa-2d`` variants a, b, c (seed 000 section 4.2): one simulated path each,
its measurements, the one-step predictions of a one-layer AFA trained on that noise setting
(`verify.mle_convergence.CASES`, measurements only) and those of the Kalman filter with the true
parameters (`estimators.kalman.kalman_filter`, diffuse prior, like a layer that sees the
measurements only): the optimum the trained layer is measured against.

`compute` returns the predictions as a mapping ``series name -> (T, d)`` per panel; `with_series`
adds another series and `plot` draws every series it finds.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace

import numpy as np

from estimators.kalman import kalman_filter
from sde_sim import presets
from sde_sim.scenario import simulate

NAME = "fig1_trajectories"
TITLE = "Seed 000 Fig. 1: trajectories, measurements and one-step predictions (afa-2d)"
SOURCE = "seed 000 section 4.2, Fig. 1 (panels a-c: the three noise settings)"
SEED = "000"
CHECKS = (
    "mle_convergence.afa-2d-a",
    "mle_convergence.afa-2d-b",
    "mle_convergence.afa-2d-c",
)
PRESET = "afa-2d"
VARIANTS = ("a", "b", "c")
OPTIMUM = "Kalman (true parameters)"
TRAINED = "one-layer AFA (trained)"


@dataclass(frozen=True)
class Config:
    """``seed`` of the simulation; ``n_steps`` integration steps (preset's dt; None: preset's
    1000, i.e. t in [0, 10] with a measurement every 10 steps); ``quick_training``: train the
    layers for the quick length of their `verify.mle_convergence` case instead of the full."""

    seed: int = 0
    n_steps: int | None = None
    quick_training: bool = False

    @classmethod
    def quick(cls) -> Config:
        return cls(n_steps=500, quick_training=True)

    @classmethod
    def full(cls) -> Config:
        return cls()


@dataclass(frozen=True)
class Panel:
    """One noise setting. Shapes: T grid points, M measurements, d = 2.

    t (T,), x (T, d): the latent path.   t_obs (M,), z (M, d): its measurements.
    x_obs (M, d): latent state at the measurement times.
    predictions: series name -> (M, d) one-step predictions of x at t_obs (row 0 is NaN: nothing
    precedes the first measurement).
    mse: series name -> mean over k >= 1 of |prediction_k - z_k|^2 (the training loss of seed
    000 2.3/3.1, against the measurement).
    """

    variant: str
    summary: str
    t: np.ndarray
    x: np.ndarray
    t_obs: np.ndarray
    z: np.ndarray
    x_obs: np.ndarray
    predictions: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def mse(self) -> dict[str, float]:
        return {k: float(np.mean(np.sum((p[1:] - self.z[1:]) ** 2, -1))) for k, p in self.items()}

    @property
    def mse_truth(self) -> dict[str, float]:
        """Mean over k >= 1 of |prediction_k - x(t_k)|^2."""
        return {
            k: float(np.mean(np.sum((p[1:] - self.x_obs[1:]) ** 2, -1))) for k, p in self.items()
        }

    def items(self):
        return self.predictions.items()


@dataclass(frozen=True)
class Data:
    config: Config
    panels: tuple[Panel, ...]

    def with_series(self, name: str, predictions) -> Data:
        """A copy with one more prediction series: `predictions` is a sequence of (M, d) arrays,
        one per panel (e.g. a trained layer's one-step predictions)."""
        panels = []
        for p, pred in zip(self.panels, predictions, strict=True):
            pred = np.asarray(pred, dtype=float)
            if pred.shape != p.z.shape:
                raise ValueError(
                    f"predictions for panel {p.variant} must be {p.z.shape}, got {pred.shape}"
                )
            panels.append(replace(p, predictions={**p.predictions, name: pred}))
        return replace(self, panels=tuple(panels))


def _panel(variant: str, cfg: Config) -> Panel:
    preset = presets.get(PRESET)
    scenario = preset.scenario(variant)
    if cfg.n_steps is not None:
        scenario = scenario.replace(n_steps=cfg.n_steps)
    sim = simulate(scenario, 1, seed=cfg.seed, method="exact")
    result = kalman_filter(scenario.system, scenario.measurement, sim.z[0], sim.t_obs)
    pred = np.array(result.pred_means, dtype=float)
    pred[0] = np.nan  # diffuse prior: no prediction before the first measurement
    return Panel(
        variant=variant,
        summary=preset.variant(variant).summary,
        t=sim.t,
        x=sim.x[0],
        t_obs=sim.t_obs,
        z=sim.z[0],
        x_obs=sim.x_obs[0],
        predictions={TRAINED: _trained_predictions(variant, sim, cfg), OPTIMUM: pred},
    )


def _trained_predictions(variant: str, sim, cfg: Config) -> np.ndarray:
    """The trained layer's one-step predictions of ``x_k`` from ``z_0..z_{k-1}`` on the path:
    row ``k`` is the model's output at row ``k - 1`` (row 0 NaN, like the Kalman series)."""
    import torch

    from figures import trained

    report = trained.report(f"{PRESET}-{variant}", quick=cfg.quick_training)
    model = report.model
    dtype = next(model.parameters()).dtype
    t_obs = sim.t_obs
    unit = (t_obs[-1] - t_obs[0]) / (t_obs.shape[0] - 1)  # the training harness's clock
    t = torch.as_tensor((t_obs - t_obs[0]) / unit, dtype=dtype)
    with torch.no_grad():
        out = model(torch.as_tensor(sim.z, dtype=dtype), t)[0].double().numpy()
    pred = np.full_like(out, np.nan)
    pred[1:] = out[:-1]
    return pred


def trainings(cfg: Config) -> tuple:
    """The training runs `compute` uses: on a Dask cluster each is a task of its own, and the
    figure's task adopts their reports (`figures.distributed`)."""
    from figures import trained

    return trained.case_configs([f"{PRESET}-{v}" for v in VARIANTS], quick=cfg.quick_training)


def compute(cfg: Config | None = None) -> Data:
    """One path per variant of ``afa-2d`` and the Kalman one-step predictions (module docstring)."""
    cfg = Config.full() if cfg is None else cfg
    return Data(cfg, tuple(_panel(v, cfg) for v in VARIANTS))


def plot(data: Data):
    """Three panels in state space: truth (line), measurements (dots), each prediction series."""
    from figures import style

    with style.context():
        fig = style.new_figure(figsize=(12, 4.4))
        axes = fig.subplots(1, len(data.panels))
        for ax, p in zip(np.atleast_1d(axes), data.panels, strict=True):
            ax.plot(*p.x.T, color=style.TRUTH, lw=1.0, label="ground truth", zorder=3)
            ax.plot(*p.z.T, ".", color=style.MEASURED, ms=3, alpha=0.6, label="measurements")
            mse = p.mse
            for k, (name, pred) in enumerate(p.items()):
                color = style.OPTIMUM if name == OPTIMUM else f"C{k + 2}"
                ax.plot(
                    *pred[1:].T,
                    "-",
                    color=color,
                    lw=1.0,
                    alpha=0.9,
                    label=f"{name} (MSE {mse[name]:.3g})",
                )
            ax.set_title(f"({p.variant}) {p.summary}")
            ax.set_xlabel("x1")
            ax.set_ylabel("x2")
            ax.set_aspect("equal", adjustable="datalim")
            ax.legend(loc="upper right")
        fig.suptitle(TITLE)
    return fig


def caption(data: Data) -> str:
    mses = "; ".join(
        f"({p.variant}) " + ", ".join(f"{k}: {v:.3g}" for k, v in p.mse.items())
        for p in data.panels
    )
    return (
        "The 2-D spiral A = [[0.9, -2], [1, -1.1]] at the three noise settings of seed 000 "
        "Fig. 1: one exactly simulated path (black), its measurements (red), the one-step "
        "predictions of a one-layer robust AFA trained on measurements of that noise setting "
        "only (green; python -m verify train; verify.mle_convergence.CASES) and those of the "
        "Kalman filter with the true parameters (blue), the optimum the layer should approach. "
        f"One-step prediction MSE against the measurements: {mses}."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.fig1_trajectories [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

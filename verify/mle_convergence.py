"""Trained layers against the optimum: held-out one-step prediction MSE vs Kalman and batch MLE.

`prediction_ratio` trains ``config`` with `verify.training.train` and scores the trained model,
the Kalman filter with the true parameters (diffuse prior; the optimal one-step predictor of a
linear-Gaussian model) and the batch MLE's one-step prediction ``z_plus`` (seed 000 A.2, 2.3) on
the same held-out paths and the same rows: from ``z_0..z_i`` predict ``z_{i+1}``,
``i = 0..M-2``. The ratios ``model / Kalman`` and ``model / MLE`` are the measures of
convergence (issue 7); 1 is the optimum for the first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from estimators.kalman import kalman_filter
from estimators.mle import batch_mle
from sde_sim import presets
from verify.training import Data, TrainConfig, evaluate, make_data, train


@dataclass(frozen=True)
class ConvergenceReport:
    """Held-out one-step prediction MSEs (original units) and their ratios.

    Attributes
    ----------
    config : the training run.
    steps : optimizer steps taken.
    wall_s : wall time of the training (data simulation and scoring excluded).
    model_mse, untrained_mse : the trained and the freshly initialised model.
    kalman_mse : Kalman filter with the true parameters (the optimum).
    mle_mse : batch MLE one-step prediction with the true parameters.
    ratio_kalman, ratio_mle : ``model_mse / kalman_mse``, ``model_mse / mle_mse``.
    metrics : the training metrics lines (step, train and held-out MSE, elapsed seconds).
    """

    config: TrainConfig
    steps: int
    wall_s: float
    model_mse: float
    untrained_mse: float
    kalman_mse: float
    mle_mse: float
    ratio_kalman: float
    ratio_mle: float
    metrics: list

    def summary(self) -> str:
        return (
            f"{self.config.layer} on {self.config.preset}/{self.config.variant}: "
            f"MSE {self.model_mse:.4g} = {self.ratio_kalman:.3f} x Kalman ({self.kalman_mse:.4g}), "
            f"{self.ratio_mle:.3f} x MLE ({self.mle_mse:.4g}); untrained {self.untrained_mse:.4g};"
            f" {self.steps} steps in {self.wall_s:.1f} s"
        )


def optimum_mses(config: TrainConfig, data: Data | None = None) -> tuple[float, float]:
    """(Kalman, batch MLE) held-out one-step prediction MSEs with the true parameters."""
    data = make_data(config) if data is None else data
    sim = data.holdout_sim
    scenario = presets.get(config.preset).scenario(config.variant)
    sde, meas = scenario.system, scenario.measurement
    z = np.asarray(sim.z, dtype=np.float64)
    t = np.asarray(sim.t_obs, dtype=np.float64)
    target = z[:, 1:]
    pred_states = kalman_filter(sde, meas, z, t).pred_means[:, 1:]
    kalman_pred = pred_states @ np.asarray(meas.C).T + np.asarray(meas.b)
    mle_pred = batch_mle(sde, meas, z, t).predictions[:, 1:]
    return (
        float(np.mean((kalman_pred - target) ** 2)),
        float(np.mean((mle_pred - target) ** 2)),
    )


def prediction_ratio(config: TrainConfig, *, quiet: bool = True) -> ConvergenceReport:
    """Train `config` and compare its held-out one-step MSE with the Kalman and MLE optima."""
    data = make_data(config)
    kalman_mse, mle_mse = optimum_mses(config, data)
    untrained = _untrained_mse(config, data)
    start = time.perf_counter()
    result = train(config, quiet=quiet)
    wall = time.perf_counter() - start
    model_mse = float(result.heldout_mse)
    return ConvergenceReport(
        config=config,
        steps=result.step,
        wall_s=wall,
        model_mse=model_mse,
        untrained_mse=untrained,
        kalman_mse=kalman_mse,
        mle_mse=mle_mse,
        ratio_kalman=model_mse / kalman_mse,
        ratio_mle=model_mse / mle_mse,
        metrics=list(result.metrics),
    )


def _untrained_mse(config: TrainConfig, data: Data) -> float:
    from verify.training import build_model

    with torch.no_grad():
        return evaluate(build_model(config, data), data)

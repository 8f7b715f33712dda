"""The convergence report: fields, finite ratios, the optimum below the untrained model."""

import math

import pytest

from verify.mle_convergence import ConvergenceReport, optimum_mses, prediction_ratio
from verify.training import TrainConfig, make_data


@pytest.fixture(scope="module")
def report() -> ConvergenceReport:
    config = TrainConfig(
        preset="afa-2d", variant="b", steps=20, n_paths=32, holdout_paths=16, eval_every=10
    )
    return prediction_ratio(config)


def test_report_fields(report):
    assert report.steps == 20
    assert report.wall_s > 0
    assert [m["step"] for m in report.metrics] == [10, 20]
    for name in ("model_mse", "untrained_mse", "kalman_mse", "mle_mse"):
        value = getattr(report, name)
        assert math.isfinite(value) and value > 0, name
    assert math.isfinite(report.ratio_kalman) and math.isfinite(report.ratio_mle)
    assert report.ratio_kalman == pytest.approx(report.model_mse / report.kalman_mse)
    assert report.ratio_mle == pytest.approx(report.model_mse / report.mle_mse)
    assert "x Kalman" in report.summary()


def test_optimum_below_untrained_and_training_helps(report):
    assert report.kalman_mse < report.untrained_mse / 10
    assert report.model_mse < report.untrained_mse
    # with process noise the Kalman filter beats the batch MLE's prediction
    assert report.kalman_mse < report.mle_mse


def test_optimum_is_deterministic_and_matches_the_data():
    config = TrainConfig(preset="afa-2d", variant="b", n_paths=32, holdout_paths=8)
    data = make_data(config)
    assert optimum_mses(config, data) == optimum_mses(config)

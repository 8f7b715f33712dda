"""The convergence report and the learned-dynamics table: fields, references, the fits."""

import dataclasses
import math

import numpy as np
import pytest

from verify.mle_convergence import (
    CASES,
    ConvergenceReport,
    learned_dynamics,
    optimum_mses,
    prediction_ratio,
    reference_mses,
)
from verify.training import TrainConfig, make_data


@pytest.fixture(scope="module")
def report() -> ConvergenceReport:
    config = TrainConfig(
        preset="afa-2d",
        variant="b",
        sim_method="exact",
        steps=20,
        n_paths=32,
        holdout_paths=16,
        eval_every=10,
    )
    return prediction_ratio(config)


def test_report_fields(report):
    assert report.steps == 20
    assert report.wall_s > 0 and report.cpu_s > 0
    assert [m["step"] for m in report.metrics] == [10, 20]
    assert set(report.references) == {"kalman", "mle", "last"}
    for name in ("model_mse", "untrained_mse"):
        value = getattr(report, name)
        assert math.isfinite(value) and value > 0, name
    for name, mse in report.references.items():
        assert report.ratios[name] == pytest.approx(report.model_mse / mse)
    assert "x kalman" in report.summary()


def test_optimum_below_untrained_and_training_helps(report):
    refs = report.references
    assert refs["kalman"] < report.untrained_mse / 10
    assert report.model_mse < report.untrained_mse
    # with process noise the Kalman filter beats the batch MLE, and both beat the last value
    assert refs["kalman"] < refs["mle"] < refs["last"]


def test_references_are_deterministic_and_match_the_data():
    config = TrainConfig(preset="afa-2d", variant="b", n_paths=32, holdout_paths=8)
    data = make_data(config)
    assert reference_mses(config, data) == reference_mses(config)
    assert optimum_mses(config, data) == (
        reference_mses(config)["kalman"],
        reference_mses(config)["mle"],
    )


def test_without_process_noise_the_mle_is_the_kalman_filter():
    # afa-2d a: sigma^2 = 0, so the batch MLE with a diffuse prior is the Kalman filter
    config = TrainConfig(preset="afa-2d", variant="a", sim_method="exact", holdout_paths=8)
    refs = reference_mses(config)
    assert refs["mle"] == pytest.approx(refs["kalman"], rel=1e-9)


def test_rt_reference_beats_the_last_measurement():
    config = CASES["rt-sphere-3d-b"].config(quick=True)
    config = dataclasses.replace(config, n_paths=8, holdout_paths=8, batch_size=4)
    refs = reference_mses(config)
    assert set(refs) == {"rt-mle", "last"}
    # pooling transported measurements beats the raw one (the preset's noise regime)
    assert refs["rt-mle"] < refs["last"]
    with pytest.raises(ValueError, match="not a linear system"):
        optimum_mses(config)


def test_learned_dynamics_rows_and_the_mle_within_its_errors(report):
    rows = learned_dynamics(report)
    assert [r.name for r in rows] == ["decay", "|omega|", "sigma2/eta2"]
    truth = {r.name: r.truth for r in rows}
    assert truth == pytest.approx({"decay": 0.1, "|omega|": 1.0, "sigma2/eta2": 0.6})
    for r in rows:
        # the parameter MLE on exactly simulated paths is consistent: within 4 standard errors
        assert math.isfinite(r.mle_se) and r.mle_se > 0, r.name
        assert abs(r.mle - r.truth) < 4 * r.mle_se, (r.name, r.mle, r.truth, r.mle_se)
        assert math.isfinite(r.learned), r.name
        assert r.z_score == pytest.approx((r.learned - r.mle) / r.mle_se)


def test_learned_dynamics_refuses_what_it_cannot_read(report):
    other = dataclasses.replace(report, config=dataclasses.replace(report.config, layer="rfa"))
    with pytest.raises(ValueError, match="one-layer isotropic AFA"):
        learned_dynamics(other)


def test_cases_build_valid_configs():
    for name, case in CASES.items():
        quick, full = case.config(quick=True), case.config(quick=False)
        assert quick.steps == case.quick < full.steps == case.full, name
        assert case.reference in ("kalman", "rt-mle"), name
    assert np.all([c.config(quick=True, seed=3).seed == 3 for c in CASES.values()])


@pytest.mark.parametrize("loss", ["mse", "nll"])
def test_unitary_basis_reads_the_true_dynamics_off_the_true_parameter_layer(loss):
    """The rotation-3d layer on the unitary basis holding the truth (`verify.well_specified`)
    reads back decay 0.1, |omega| 1 (the rotation rate of its generator's real part) and
    sigma^2/eta^2 0.4; with the likelihood loss also sigma^2 = 0.1 and eta^2 = 0.25. Rotating
    the basis away from the eigenbasis moves |omega| (the read-off can fail)."""
    import torch

    from verify.well_specified import CONTAINMENT_CONFIGS, true_parameter_model

    config = dataclasses.replace(CONTAINMENT_CONFIGS["unrolled-afa-rotation-3d"], loss=loss)
    model = true_parameter_model(config)
    report = ConvergenceReport(config, 0, 0.0, 0.0, math.nan, math.nan, {}, {}, [], model)
    rows = {r.name: r for r in learned_dynamics(report, fit_mle=False)}
    expected = {"decay": 0.1, "|omega|": 1.0, "sigma2/eta2": 0.4}
    if loss == "nll":
        expected.update(p2=0.1, eta2=0.25)
    assert set(rows) == set(expected)
    for name, value in expected.items():
        assert rows[name].truth == pytest.approx(value, rel=1e-12), name
        assert rows[name].learned == pytest.approx(value, rel=1e-9), name
    with torch.no_grad():
        model.layer.value_proj.generator_real[0, 1] += 0.3
    moved = {r.name: r.learned for r in learned_dynamics(report, fit_mle=False)}
    assert abs(moved["|omega|"] - 1.0) > 1e-3

"""Well-specified cases: the true-parameter layers are the Kalman filter, and only they are.

The registered checks (`verify.checks.well_specified`) assert the round-off agreement; these
tests are their negative controls (a perturbed parameter or map must fail the same bound) and
cover the likelihood loss of the training harness.
"""

import json
import math

import pytest
import torch

from verify.checks.well_specified import ROUNDOFF
from verify.cli import main
from verify.training import TrainConfig, make_data, read_metrics, train
from verify.well_specified import (
    CONTAINMENT_CONFIGS,
    containment,
    eigen_noise_coherence,
    true_parameter_model,
)


def _perturbed(name: str, change) -> float:
    config = CONTAINMENT_CONFIGS[name]
    model = true_parameter_model(config, make_data(config))
    with torch.no_grad():
        change(model.layer)
    return containment(name, model).residual


@pytest.mark.parametrize("name", list(CONTAINMENT_CONFIGS))
def test_true_parameters_pass_and_a_wrong_decay_fails(name):
    assert containment(name).residual <= ROUNDOFF

    def slower(layer):
        layer.raw_decay.sub_(0.1)

    assert _perturbed(name, slower) > 1e3 * ROUNDOFF


def test_wrong_noise_or_basis_fails():
    def noisier(layer):
        layer.set_parameters(measurement_var=2 * layer.measurement_var)

    def rotated(layer):  # another unitary basis (a common phase would be invisible)
        layer.value_proj.generator_real[0, 1] += 0.05

    def frequency(layer):
        layer.frequencies.mul_(1.1)

    for change in (noisier, rotated, frequency):
        assert _perturbed("unrolled-afa-rotation-3d", change) > 1e3 * ROUNDOFF, change.__name__


def test_eigen_noise_coherence():
    import numpy as np

    unitary = np.array([[1, 1], [-1j, 1j]]) / np.sqrt(2)
    assert eigen_noise_coherence(unitary, np.eye(2)) < 1e-15
    skewed = np.array([[1 - 1j, 1 + 1j], [1, 1]])
    assert eigen_noise_coherence(skewed, np.eye(2)) == pytest.approx(np.sqrt(5) / 3, rel=1e-12)


# --- the likelihood loss -----------------------------------------------------------------------

OU_IDENTITY = dict(
    layer="unrolled-afa",
    preset="ou",
    num_heads=4,
    n_steps=200,
    n_paths=16,
    holdout_paths=4,
    batch_size=16,
    sim_method="exact",
    layer_options={"nu": math.inf, "basis": "identity", "rotation": False},
)


def test_nll_training_lowers_the_nll_and_records_it(tmp_path):
    config = TrainConfig(**OU_IDENTITY, loss="nll", steps=30, eval_every=10, lr=0.05)
    result = train(config, tmp_path / "run", quiet=True)
    lines = read_metrics(tmp_path / "run")
    assert set(lines[0]) == {"step", "train_nll", "heldout_mse", "heldout_nll", "elapsed_s"}
    assert lines[-1]["heldout_nll"] < lines[0]["heldout_nll"]
    assert result.train_loss == pytest.approx(lines[-1]["train_nll"])
    assert math.isfinite(result.heldout_mse)


def test_nll_needs_a_predictive_law_and_a_known_loss(tmp_path):
    with pytest.raises(ValueError, match="loss must be one of mse, nll"):
        TrainConfig(loss="l1")
    config = TrainConfig(preset="afa-2d", layer="afa", loss="nll", n_paths=4, batch_size=4)
    with pytest.raises(ValueError, match="loss 'nll' needs a layer that states its predictive"):
        train(config, tmp_path / "run", quiet=True)
    assert not (tmp_path / "run").exists()  # refused before the run directory is made


def test_cli_loss_option(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--layer", "unrolled-afa", "--preset", "ou", "--heads", "4", "--loss"]
    argv += ["nll", "--steps", "2", "--paths", "4", "--batch-size", "4", "--holdout-paths"]
    argv += ["2", "--n-steps", "100", "--out", str(out), "--quiet"]
    for option in ('basis="identity"', "rotation=false", "nu=Infinity"):
        argv += ["--layer-option", option]
    assert main(argv) == 0
    assert "train NLL" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["loss"] == "nll"
    assert main([*argv[:-2], "--out", str(tmp_path / "other"), "--loss", "huber"]) == 2
    assert "loss must be one of" in capsys.readouterr().err


def test_nll_refuses_a_degenerate_predictive_law():
    """A zero output projection makes every predictive covariance singular: a clear error."""
    from verify.training import OneStepPredictor, one_step_nll

    model = OneStepPredictor("unrolled-afa", 2, layer_options={"nu": math.inf}).double()
    with torch.no_grad():
        model.layer.out_proj.weight_real.zero_()
        model.layer.out_proj.weight_imag.zero_()
    z = torch.randn(2, 6, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.raises(ValueError, match="predictive covariance is not positive definite"):
        one_step_nll(model, z)

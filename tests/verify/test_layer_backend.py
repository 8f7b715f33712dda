"""``backend`` reaches the fused kernels from ``python -m verify train --layer-option``.

`verify.training.OneStepPredictor` passes ``layer_options`` to the layer's constructor, and the
layers with a fused kernel (AFA, RFA, the AFA Transformer block) pass ``backend`` on to their
functional form, where `kernels.backend.use_triton` decides. The option's value is JSON, so on a
shell it is written ``--layer-option 'backend="torch"'``. Without CUDA and without Triton's
interpreter ``backend="triton"`` must be refused by the kernel dispatch (proof that the option
got there), and ``backend="torch"`` must train.
"""

import json

import pytest
import torch

from verify.cli import main
from verify.training import OneStepPredictor

ARGV = ["train", "--preset", "afa-2d", "--variant", "b", "--steps", "2", "--paths", "8"]
ARGV += ["--batch-size", "4", "--holdout-paths", "2"]


@pytest.mark.parametrize("layer", ["afa", "rfa"])
def test_cli_backend_option_reaches_the_kernel_dispatch(tmp_path, capsys, monkeypatch, layer):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # CPU tensors: "triton" has no device to run on
    run = tmp_path / "torch"
    argv = [*ARGV, "--layer", layer, "--out", str(run)]
    assert main([*argv, "--layer-option", 'backend="torch"']) == 0
    assert json.loads((run / "config.json").read_text())["layer_options"] == {"backend": "torch"}
    capsys.readouterr()
    argv = [*ARGV, "--layer", layer, "--out", str(tmp_path / "triton")]
    assert main([*argv, "--layer-option", 'backend="triton"']) == 2
    err = capsys.readouterr().err
    assert "backend='triton' needs CUDA tensors" in err


@pytest.mark.parametrize("layer", ["afa", "rfa"])
def test_the_predictor_builds_the_layer_with_the_backend(layer):
    model = OneStepPredictor(layer, 2, layer_options={"backend": "torch"})
    assert model.layer.backend == "torch"
    with pytest.raises(ValueError, match="backend must be one of"):
        OneStepPredictor(layer, 2, layer_options={"backend": "cuda"})
    z = torch.randn(2, 5, 2, generator=torch.Generator().manual_seed(0))
    assert model(z).shape == z.shape

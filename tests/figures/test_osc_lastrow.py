"""`figures.osc_lastrow`: the last row of OsciFormer attention equals the layer's last row."""

from __future__ import annotations

import pytest
import torch

from figures.osc_lastrow import LastQueryModel, last_row
from kernels.layers.osciformer import OscillatorAttention


@pytest.mark.parametrize("heads", [1, 2])
def test_last_row_equals_the_layers_last_row(heads):
    # Same parameters, same closed form restricted to one row: float64 round-off of sums of
    # O(10) terms of size O(1), so 1e-12 is ~1e4 eps of headroom. Non-zero velocity maps and
    # larger drives exercise every term of the logit and the endpoint values.
    g = torch.Generator().manual_seed(1)
    layer = OscillatorAttention(
        8, heads, num_modes=4, readout="endpoint", generator=g, dtype=torch.float64,
        freq_range=(1.0, 10.0), omega_range=(1.0, 10.0), drive_scale=0.5,
    )  # fmt: skip
    with torch.no_grad():
        layer.key_velocity.normal_(0.0, 0.3, generator=g)
        layer.value_velocity.normal_(0.0, 0.3, generator=g)
    x = torch.randn(3, 12, 8, dtype=torch.float64, generator=g)
    t = torch.sort(torch.rand(3, 12, dtype=torch.float64, generator=g) * 5, dim=1).values
    full, weights = layer(x, t, need_weights=True)
    mine, mine_w = last_row(layer, x, t, need_weights=True)
    torch.testing.assert_close(mine, full[:, -1], rtol=0, atol=1e-12)
    torch.testing.assert_close(mine_w, weights[:, :, -1], rtol=0, atol=1e-12)
    # a shared (T,) clock gives the same as the batch-expanded one
    torch.testing.assert_close(last_row(layer, x[:1], t[0]), full[:1, -1], rtol=0, atol=1e-12)


def test_last_row_rejects_average_readout_and_bad_times():
    layer = OscillatorAttention(4, 1, readout="average")
    with pytest.raises(ValueError, match="readout must be 'endpoint'"):
        last_row(layer, torch.randn(1, 3, 4), torch.arange(3.0))
    layer = OscillatorAttention(4, 1, readout="endpoint")
    with pytest.raises(ValueError, match="t must have shape"):
        last_row(layer, torch.randn(2, 3, 4), torch.zeros(2, 4))


def test_model_broadcasts_the_last_row_over_positions():
    model = LastQueryModel(2, 8, 5, hidden=16, generator=torch.Generator().manual_seed(0))
    x, t = torch.randn(4, 6, 2), torch.arange(6.0)
    out = model(x, t)
    assert out.shape == (4, 6, 5)
    torch.testing.assert_close(out[:, 0], model.last(x, t))
    torch.testing.assert_close(out[:, -1], out[:, 0])

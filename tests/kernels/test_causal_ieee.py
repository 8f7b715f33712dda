"""Causality in IEEE arithmetic (`kernels.layers.causal`): a NaN or inf at step j of the input
reaches no output before j, in every causal attention layer and block.

The masked product of causal attention multiplies the masked-out future by an exact zero, and
``0 x NaN = NaN``; issue 14 found a NaN in the last step's input in every earlier output of
every filtering layer. Each layer must give, before the first non-finite step, exactly the
outputs of the same input with that step finite (they never read it), and NaN where it does.
"""

import math

import pytest
import torch

from kernels.layers.afa import AdaptiveFilterAttention
from kernels.layers.afa_transformer import AFATransformerBlock
from kernels.layers.baselines import (
    ALiBiAttention,
    DecayedRotaryAttention,
    RotaryAttention,
    SoftmaxAttention,
)
from kernels.layers.kla import KalmanLinearAttention
from kernels.layers.osciformer import OscillatorAttention
from kernels.layers.rfa import RobustFilterAttention
from kernels.layers.rt_afa import RTAdaptiveFilterAttention
from kernels.layers.rt_transformer import RTRobustFilterAttention, RTTransformerBlock
from kernels.layers.unrolled_afa import UnrolledAdaptiveFilterAttention

E = 8


def _layers():
    gen = torch.Generator().manual_seed(0)
    return {
        "afa": AdaptiveFilterAttention(E, 2, generator=gen),
        "afa robust": AdaptiveFilterAttention(E, 2, nu=2.0, generator=gen),
        "afa tensor": AdaptiveFilterAttention(E, 2, tensor_form=True, generator=gen),
        "afa separable": AdaptiveFilterAttention(E, 2, separable=True, generator=gen),
        "rfa": RobustFilterAttention(E, 2),
        "rt-afa": RTAdaptiveFilterAttention(E, 2),
        "rt-rfa": RTRobustFilterAttention(E, 2),
        "oscillator": OscillatorAttention(E, 2, generator=gen),
        "rotary": RotaryAttention(E, 2),
        "alibi": ALiBiAttention(E, 2),
        "decayed rotary": DecayedRotaryAttention(E, 2),
        "softmax": SoftmaxAttention(E, 2, max_len=16),
        "kla": KalmanLinearAttention(E, 4, generator=gen),
        "unrolled": UnrolledAdaptiveFilterAttention(E, 2, generator=gen),
        "unrolled nu=inf": UnrolledAdaptiveFilterAttention(E, 2, nu=math.inf, generator=gen),
        "afa block": AFATransformerBlock(E, 2, generator=gen),
        "rt block": RTTransformerBlock(E, 2, generator=gen),
    }


@pytest.mark.parametrize("name", list(_layers()))
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_step_reaches_no_earlier_output(name, bad):
    layer = _layers()[name]
    x = torch.randn(2, 10, E, generator=torch.Generator().manual_seed(1))
    dirty = x.clone()
    dirty[0, 6, 1] = bad  # sequence 0 from step 6 on; sequence 1 stays finite
    with torch.no_grad():
        clean_out = layer(x)[0]
        out = layer(dirty)[0]
    torch.testing.assert_close(out[0, :6], clean_out[0, :6], rtol=0, atol=0)
    torch.testing.assert_close(out[1], clean_out[1], rtol=0, atol=0)
    assert not torch.isfinite(out[0, 6:]).all(), f"{name}: the non-finite step vanished"


def test_weights_rows_and_non_causal_layers():
    """Attention weights follow the same rows; a non-causal layer (every output reads every
    step) is left as it computes."""
    gen = torch.Generator().manual_seed(2)
    layer = AdaptiveFilterAttention(E, 2, generator=gen)
    x = torch.randn(1, 8, E, generator=gen)
    dirty = x.clone()
    dirty[0, 5, 0] = math.nan
    with torch.no_grad():
        _, w_clean = layer(x, need_weights=True)
        _, w = layer(dirty, need_weights=True)
        torch.testing.assert_close(w[:, :, :5], w_clean[:, :, :5], rtol=0, atol=0)
        both = AdaptiveFilterAttention(E, 2, causal=False, generator=gen)
        assert not torch.isfinite(both(dirty)[0][0, :5]).all()

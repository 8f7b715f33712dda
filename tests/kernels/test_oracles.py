"""The op folders' shared rooms: oracles, parameter objects, ``backend`` on the layers, memory.

* The positional baselines and the unrolled filter equal their float64 loops
  (`kernels.ops.baselines.naive`, `kernels.ops.unrolled.naive`) to round-off.
* `Dynamics` / `Robust` (`kernels.ops.common.params`): a call with the objects is the call with
  their keywords, bit for bit; `Dynamics.scaled` is the clock change; mixing both is refused.
* The one rotation (`kernels.ops.common.rotation`) is multiplication by ``r e^{i theta}``.
* Layers with a fused kernel take ``backend`` and the one tile name ``block_size`` and pass
  them down; the AFA layer's ``memory`` is the key/value source.
"""

import math

import numpy as np
import pytest
import torch

from kernels.layers.afa import AdaptiveFilterAttention
from kernels.layers.afa_transformer import AFATransformerBlock
from kernels.layers.rfa import RobustFilterAttention
from kernels.ops import afa, baselines, rfa
from kernels.ops.baselines.naive import attention_loop
from kernels.ops.common import complex_pairs
from kernels.ops.common.params import Dynamics, Robust
from kernels.ops.common.rotation import Rotation
from kernels.ops.unrolled import unrolled_afa
from kernels.ops.unrolled.naive import unrolled_loop
from kernels.tolerances import tolerance
from tests.kernels.helpers import assert_close

F64 = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# Oracles
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
def test_baselines_equal_their_loop(causal):
    gen = _gen(0)
    B, H, T, D = 2, 2, 6, 4
    q, k, v = (torch.randn(B, H, T, D, dtype=F64, generator=gen) for _ in range(3))
    t = torch.cumsum(torch.rand(B, T, dtype=F64, generator=gen) + 0.1, dim=1)
    freq = torch.randn(H, D // 2, dtype=F64, generator=gen)
    slopes = torch.rand(H, dtype=F64, generator=gen)
    decay = torch.rand(H, dtype=F64, generator=gen)
    common = {"causal": causal, "return_weights": True}
    cases = {
        "softmax": (baselines.softmax_attention(q, k, v, **common), {}),
        "rope": (
            baselines.rope_attention(q, k, v, t=t, frequencies=freq, **common),
            {"frequencies": freq},
        ),
        "alibi": (
            baselines.alibi_attention(q, k, v, t=t, slopes=slopes, **common),
            {"slopes": slopes},
        ),
    }
    for mode in ("post-softmax", "logit"):
        got = baselines.decayed_rope_attention(
            q, k, v, t=t, decay=decay, frequencies=freq, decay_mode=mode, **common
        )
        cases[f"decayed {mode}"] = (
            got,
            {"frequencies": freq, "decay": decay, "decay_mode": mode},
        )
    for name, (got, options) in cases.items():
        out, weights = attention_loop(q, k, v, t, causal=causal, **options)
        assert_close(f"{name} output", got.output, out, atol=1e-13)
        assert_close(f"{name} weights", got.weights, weights, atol=1e-14)


@pytest.mark.parametrize("weight", ["student-t", "rational"])
@pytest.mark.parametrize("with_prior", [False, True])
def test_unrolled_afa_equals_its_loop(weight, with_prior):
    """Irregular stamps per sequence, two heads with their own parameters, K = 3 damped inner
    iterations, a finite nu (and nu = inf in head 1 of the second call): the vectorised loop
    equals the one-step-at-a-time complex recursion to 1e-12."""
    gen = _gen(1)
    B, H, T, n = 2, 2, 9, 2
    values = torch.randn(B, H, T, 2 * n, dtype=F64, generator=gen) * 2
    t = torch.cumsum(torch.rand(B, T, dtype=F64, generator=gen) + 0.2, dim=1)
    params = {
        "decay": torch.tensor([0.3, 0.0], dtype=F64),
        "frequencies": torch.randn(H, n, dtype=F64, generator=gen),
        "process_var": torch.tensor([0.2, 0.5], dtype=F64),
        "measurement_var": torch.tensor([0.7, 0.4], dtype=F64),
    }
    prior_mean = torch.randn(B, H, 2 * n, dtype=F64, generator=gen) if with_prior else None
    prior_var = torch.tensor([[0.5, 2.0], [1.0, 0.1]], dtype=F64) if with_prior else None
    for nu in (torch.tensor([1.5, 4.0], dtype=F64), torch.tensor([2.0, math.inf], dtype=F64)):
        robust = {"nu": nu, "temperature": torch.tensor([0.8, 1.3], dtype=F64)}
        got = unrolled_afa(
            values,
            t=t,
            iterations=3,
            damping=torch.tensor([0.6, 0.9], dtype=F64),
            weight=weight,
            prior_mean=prior_mean,
            prior_variance=prior_var,
            method="loop",
            **params,
            **robust,
        )
        for b in range(B):
            for h in range(H):
                ref = unrolled_loop(
                    complex_pairs.to_complex(values[b, h]).numpy(),
                    t[b].numpy(),
                    decay=params["decay"][h].item(),
                    frequencies=params["frequencies"][h].numpy(),
                    process_var=params["process_var"][h].item(),
                    measurement_var=params["measurement_var"][h].item(),
                    nu=robust["nu"][h].item(),
                    iterations=3,
                    temperature=robust["temperature"][h].item(),
                    damping=(0.6, 0.9)[h],
                    weight=weight,
                    prior=None
                    if prior_mean is None
                    else (
                        complex_pairs.to_complex(prior_mean[b, h]).numpy(),
                        prior_var[b, h].item(),
                    ),
                )
                where = f"b={b} h={h} nu={nu[h].item()}"
                out = complex_pairs.to_complex(got.output[b, h])
                assert_close(f"estimate {where}", out, torch.as_tensor(ref.output), atol=1e-12)
                pred = complex_pairs.to_complex(got.prediction[b, h])
                assert_close(
                    f"prediction {where}", pred, torch.as_tensor(ref.prediction), atol=1e-12
                )
                assert_close(
                    f"precision {where}", got.precision[b, h], 1 / ref.variance, atol=1e-12
                )
                assert_close(f"weight {where}", got.weight[b, h], ref.weight, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# Parameter objects and the one rotation
# ---------------------------------------------------------------------------------------------


def _afa_case(seed=2, heads=2, steps=7, dim=4):
    gen = _gen(seed)
    q, k, v = (torch.randn(1, heads, steps, dim, dtype=F64, generator=gen) for _ in range(3))
    keywords = {
        "decay": torch.rand(heads, dtype=F64, generator=gen),
        "frequencies": torch.randn(heads, dim // 2, dtype=F64, generator=gen),
        "process_var": torch.rand(heads, dtype=F64, generator=gen) + 0.1,
        "measurement_var": torch.rand(heads, dtype=F64, generator=gen) + 0.5,
    }
    return q, k, v, keywords


def test_objects_and_keywords_are_one_call():
    q, k, v, kw = _afa_case()
    t = torch.tensor([0.0, 0.4, 0.9, 2.0, 2.3, 3.1, 3.3], dtype=F64)
    value = {"value_decay": kw["decay"] * 2, "value_process_var": kw["process_var"] + 1}
    dynamics = Dynamics.resolve(None, **kw, **value)
    assert dynamics.value is not None and dynamics.value.frequencies is dynamics.frequencies
    robust = Robust(nu=2.5, temperature=torch.tensor([0.7, 1.2], dtype=F64))
    for fn in (afa.isotropic_afa, afa.tensor_afa):
        by_keywords = fn(q, k, v, t=t, **kw, **value, nu=2.5, temperature=robust.temperature)
        by_objects = fn(q, k, v, t=t, dynamics=dynamics, robust=robust)
        assert torch.equal(by_keywords.output, by_objects.output), fn.__name__
    # `**dynamics` gives the keywords back, value twin included
    assert set(dynamics.keys()) == set(kw) | {f"value_{n}" for n in kw}
    again = afa.tensor_afa(q, k, v, t=t, **dynamics, **robust)
    assert torch.equal(again.output, by_objects.output)
    with pytest.raises(TypeError, match="not both"):
        afa.isotropic_afa(q, k, v, dynamics=dynamics, decay=0.1)
    with pytest.raises(TypeError, match="not both"):
        afa.isotropic_afa(q, k, v, dynamics=dynamics, robust=robust, nu=1.0)
    with pytest.raises(TypeError, match="decay is required"):
        afa.isotropic_afa(q, k, v, frequencies=None, process_var=0.1, measurement_var=1.0)
    with pytest.raises(TypeError, match="dynamics must be a Dynamics"):
        afa.isotropic_afa(q, k, v, dynamics=dict(kw))


def test_scaled_is_the_clock_change_and_keeps_shared_fields_shared():
    """``Dynamics.scaled(c)`` on the clock ``t`` = the dynamics on ``c t``; ``eta^2`` stays."""
    q, k, v, kw = _afa_case(seed=3)
    t = torch.tensor([0.0, 0.5, 1.5, 1.7, 3.0, 3.2, 4.0], dtype=F64)
    dynamics = Dynamics(**kw)
    scaled = dynamics.scaled(0.3)
    assert scaled.measurement_var is dynamics.measurement_var
    assert_close("decay", scaled.decay, kw["decay"] * 0.3, atol=0)
    on_scaled = afa.isotropic_afa(q, k, v, t=t, dynamics=scaled, nu=2.0).output
    on_clock = afa.isotropic_afa(q, k, v, t=0.3 * t, dynamics=dynamics, nu=2.0).output
    assert_close("scaled dynamics = scaled clock", on_scaled, on_clock, atol=1e-12)
    twin = Dynamics.resolve(None, **kw, value_decay=kw["decay"] + 1).scaled(2.0)
    assert twin.value.frequencies is twin.frequencies
    assert twin.value.process_var is twin.process_var
    assert twin["value_decay"] is twin.value.decay
    with pytest.raises(ValueError, match="no value twin of their own"):
        Dynamics(**kw, value=twin)


def test_the_rotation_is_multiplication_by_r_e_i_theta():
    gen = _gen(4)
    x = torch.randn(3, 5, 6, dtype=F64, generator=gen)
    theta = torch.randn(3, 5, 3, dtype=F64, generator=gen)
    r = torch.rand(3, 5, 3, dtype=F64, generator=gen)
    rot = Rotation.of(r * torch.cos(theta), r * torch.sin(theta))
    z = complex_pairs.to_complex(x)
    expected = z * r * torch.exp(1j * theta)
    assert_close("forward", complex_pairs.to_complex(rot.apply(x)), expected, atol=1e-15)
    back = z * r * torch.exp(-1j * theta)
    assert_close("conjugate", complex_pairs.to_complex(rot.apply(x, sign=-1)), back, atol=1e-15)
    t = torch.tensor([[[0.0, 0.5, 2.0, 2.5, 3.0]]], dtype=F64)
    omega = torch.randn(2, 3, dtype=F64, generator=gen)
    at = Rotation.at(t, omega)
    assert at.cos2.shape == (1, 2, 5, 6)
    angles = t.unsqueeze(-1) * omega.unsqueeze(-2)
    assert_close("rows", at.rows(slice(1, 3)).cos2[..., :3], torch.cos(angles[..., 1:3, :]), atol=0)


# ---------------------------------------------------------------------------------------------
# backend, block_size and memory on the layers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda **kw: AdaptiveFilterAttention(8, 2, nu=2.0, block_size=16, **kw),
        lambda **kw: RobustFilterAttention(8, 2, block_size=16, **kw),
        lambda **kw: AFATransformerBlock(8, 2, block_size=16, **kw),
    ],
    ids=["afa", "rfa", "afa-block"],
)
def test_layers_take_backend_and_block_size_to_the_kernel(build):
    """The same weights with ``backend="triton"`` (Triton's interpreter on CPU) and ``"torch"``
    give the same output (the kernel's float32 tolerance), through the same ``block_size``."""
    torch_layer = build(backend="torch", generator=_gen(5))
    triton_layer = build(backend="triton", generator=_gen(5))
    assert triton_layer.backend == "triton" and torch_layer.block_size == 16
    x = torch.randn(2, 11, 8, generator=_gen(6))
    t = torch.cumsum(torch.rand(11, generator=_gen(7)) + 0.2, 0)
    with torch.no_grad():
        expected = torch_layer(x, t)[0]
        got = triton_layer(x, t)[0]
    tol = tolerance("filtering_attention", "triton", "float32", "output")
    scale = max(1.0, expected.abs().max().item())
    assert_close("triton layer", got, expected, atol=10 * tol.atol * scale)
    with pytest.raises(ValueError, match="return_weights"):
        triton_layer(x, t, need_weights=True)
    with pytest.raises(ValueError, match="backend must be one of"):
        build(backend="cuda")


def test_a_tile_the_kernel_cannot_take_stays_with_torch():
    """``block_size`` is one name on both paths: ``"auto"`` keeps torch for a tile the kernel
    cannot take, ``"triton"`` names it."""
    q, k, v, kw = _afa_case(seed=8)
    q, k, v = q.float(), k.float(), v.float()
    with pytest.raises(ValueError, match="block_size=3"):
        afa.isotropic_afa(q, k, v, **kw, block_size=3, backend="triton")
    with pytest.raises(ValueError, match="block_size=24"):
        rfa.rfa_attention(q, k, v, **kw, block_size=24, backend="triton")
    auto = afa.isotropic_afa(q, k, v, **kw, block_size=3)
    assert torch.equal(
        auto.output, afa.isotropic_afa(q, k, v, **kw, block_size=3, backend="torch").output
    )


def test_memory_is_the_key_and_value_source():
    """``layer(x, memory=x)`` is ``layer(x)``; with another memory the keys and values come from
    it (the residual gate keeps the queries' values); a non-finite memory step reaches no
    earlier output."""
    layer = AdaptiveFilterAttention(4, 2, nu=1.5, gate="residual", predict=False).double()
    x = torch.randn(2, 7, 4, dtype=F64, generator=_gen(9))
    m = torch.randn(2, 7, 4, dtype=F64, generator=_gen(10))
    assert torch.equal(layer(x, memory=x)[0], layer(x)[0])
    y = layer(x, memory=m)[0]
    assert not torch.allclose(y, layer(x)[0])
    bad = m.clone()
    bad[0, 4] = math.nan
    z = layer(x, memory=bad)[0]
    assert torch.equal(z[0, :4], y[0, :4]) and torch.equal(z[1], y[1])
    assert torch.isnan(z[0, 4:]).any()
    with pytest.raises(ValueError, match="memory must have the shape of x"):
        layer(x, memory=m[:, :5])


def test_layers_expose_their_parameter_objects():
    gen = _gen(11)
    layer = AdaptiveFilterAttention(4, 2, nu=3.0, learn_nu=True, generator=gen)
    dynamics, robust = layer.dynamics(), layer.robust()
    assert isinstance(dynamics, Dynamics) and isinstance(robust, Robust)
    assert_close("nu", robust.nu, torch.full((2,), 3.0), atol=1e-6)
    assert torch.equal(dynamics["decay"], dynamics.decay)
    block = AFATransformerBlock(4, 2, nu=1.5)
    assert block.dynamics("magnitude").frequencies is None and block.robust("direction").nu == 1.5
    rfa_layer = RobustFilterAttention(8, 2, generator=gen)
    assert rfa_layer.dynamics().frequencies.shape == (2, 4) and rfa_layer.anchor_var.shape == (2,)
    np.testing.assert_allclose(rfa_layer.robust().temperature.detach().numpy(), 1.0, rtol=1e-6)

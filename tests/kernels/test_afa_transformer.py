"""The AFA Transformer block (seed 000 Algorithm 3): loop oracle, properties, errors.

The oracle is Algorithm 3's formulas evaluated directly, one query and one key at a time, in
complex arithmetic with the AFA weights of seed 000 3.1 (rational Student-t weight times the
propagated precision, pulled-forward keys and values): no factorised residual, no co-rotating
frame, no blocks. Float64 round-off: 1e-12.
"""

import math

import numpy as np
import pytest
import torch

from kernels.layers.afa_transformer import AFATransformerBlock
from kernels.layers.heads import merge_complex_heads, split_complex_heads
from kernels.ops.afa import naive
from kernels.ops.common import complex_pairs
from tests.kernels.helpers import assert_close

F64 = torch.float64
DYNAMICS = {
    "magnitude": {
        "decay": [0.3, 0.05],
        "process_var": [0.2, 0.5],
        "measurement_var": [0.1, 0.3],
        "temperature": [1.0, 0.6],
    },
    "direction": {
        "decay": [0.15, 0.4],
        "frequencies": [[0.7, -1.3], [2.1, 0.4]],
        "process_var": [0.1, 0.05],
        "measurement_var": [0.2, 0.4],
        "temperature": [0.8, 1.0],
    },
}


def _block(*, nu=1.5, causal=True, step=0.7, **kwargs) -> AFATransformerBlock:
    gen = torch.Generator().manual_seed(40)
    block = AFATransformerBlock(
        4, 2, nu=nu, causal=causal, step=step, generator=gen, dtype=F64, **kwargs
    )
    for part, values in DYNAMICS.items():
        block.set_dynamics(part, **values)
    with torch.no_grad():
        block.gamma_1.copy_(torch.tensor([1.3, 0.8]))
        block.gamma_2.copy_(torch.tensor([0.9, 1.1]))
    return block


def _random(shape, seed):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _loop_attention(block, q, k, v, t):
    """Algorithm 3 between the projections, one (sequence, head, query) at a time."""
    qc, kc, vc = (complex_pairs.to_complex(x.detach()).numpy() for x in (q, k, v))
    out = np.zeros_like(qc)
    eps, step = block.eps, block.step
    for h in range(q.shape[1]):
        dyn, temperature = {}, {}
        for part in ("magnitude", "direction"):
            raw = block.dynamics(part)
            n = 1 if raw["frequencies"] is None else raw["frequencies"].shape[-1]
            omega = 0.0 if raw["frequencies"] is None else raw["frequencies"][h].detach().numpy()
            lam = np.full(n, -raw["decay"][h].item() * step) + 1j * np.asarray(omega) * step
            dyn[part] = (
                lam,
                np.full(n, raw["process_var"][h].item() * step),
                np.full(n, raw["measurement_var"][h].item()),
            )
            temperature[part] = block.robust(part)["temperature"][h].item()
        g1, g2 = block.gamma_1[h].item(), block.gamma_2[h].item()
        for b in range(q.shape[0]):
            norms = [np.maximum(np.linalg.norm(x[b, h], axis=-1), eps) for x in (qc, kc, vc)]
            units = [g1 * x[b, h] / n[:, None] for x, n in zip((qc, kc, vc), norms, strict=True)]
            mags = [n[:, None].astype(complex) for n in norms]
            common = {"nu": block.nu, "causal": block.causal}
            m_hat, _ = naive.afa_loop(
                *mags, t, *[dyn["magnitude"]] * 2, temperature=temperature["magnitude"], **common
            )
            u_hat, _ = naive.afa_loop(
                *units, t, *[dyn["direction"]] * 2, temperature=temperature["direction"], **common
            )
            for i in range(len(t)):
                y = units[2][i] + u_hat[i].numpy()
                out[b, h, i] = m_hat[i].real.numpy() * g2 * y / max(np.linalg.norm(y), eps)
    return complex_pairs.from_complex(torch.tensor(out))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("nu", [1.5, math.inf])
def test_attention_part_equals_algorithm_3_loop(causal, nu):
    """``attend`` with set dynamics = the explicit loop, 1e-12 (irregular times, 2 heads with
    their own magnitude and direction dynamics, gamma_1, gamma_2 != 1, step 0.7)."""
    block = _block(nu=nu, causal=causal)
    q, k, v = (_random((2, 2, 5, 4), seed) for seed in (41, 42, 43))
    t = torch.tensor([0.0, 0.4, 0.9, 2.0, 2.3], dtype=F64)
    got, weights = block.attend(q, k, v, t, need_weights=True)
    assert_close("attention", got, _loop_attention(block, q, k, v, t.numpy()), atol=1e-12)
    assert weights.magnitude.shape == weights.direction.shape == (2, 2, 5, 5)


def test_forward_is_the_residual_ffn_of_the_attention():
    """``out = x + L_2 ReLU L_1 (Re L_O(attention) + b)`` with the loop's attention (1e-12)."""
    block = _block()
    x = _random((2, 5, 4), 44)
    t = torch.tensor([0.0, 0.4, 0.9, 2.0, 2.3], dtype=F64)
    z = complex_pairs.merge(x, torch.zeros_like(x))
    q, k, v = (split_complex_heads(p(z), 2) for p in (block.query, block.key, block.value))
    attended = merge_complex_heads(_loop_attention(block, q, k, v, t.numpy()))
    z_o = complex_pairs.split(block.out_proj(attended))[0] + block.out_bias
    expected = x + block.ffn_out(torch.relu(block.ffn_in(z_o)))
    assert_close("block", block(x, t)[0], expected, atol=1e-12)


def test_shapes_weights_and_gradients_reach_every_parameter():
    block = _block()
    x = _random((2, 6, 4), 45)
    out, weights = block(x, need_weights=True)
    assert out.shape == x.shape
    assert weights.magnitude.shape == weights.direction.shape == (2, 2, 6, 6)
    assert block(x)[1] is None
    (out.square().sum() + weights.direction.square().sum()).backward()
    dead = [n for n, p in block.named_parameters() if p.grad is None or not p.grad.abs().sum()]
    assert not dead


def test_no_leakage_from_the_future():
    """Perturbing tokens ``j > 2`` (by 100) leaves outputs ``i <= 2`` bit-identical."""
    block = _block(ffn_hidden=6)
    x = _random((2, 6, 4), 46)
    out = block(x)[0]
    moved = x.clone()
    moved[:, 3:] += 100 * _random((2, 3, 4), 47)
    out2 = block(moved)[0]
    assert torch.equal(out[:, :3], out2[:, :3])
    assert (out[:, 3:] - out2[:, 3:]).abs().min() > 0


def test_time_shift_invariance():
    block = _block(causal=False)
    x = _random((1, 5, 4), 48)
    t = torch.tensor([0.0, 0.4, 0.9, 2.0, 2.3], dtype=F64)
    assert_close("shift", block(x, t + 700.0)[0], block(x, t)[0], atol=1e-10)


def test_initialisation_uses_only_the_generator():
    """Same generator seed, same parameters; the global RNG is not touched."""
    state = torch.random.get_rng_state()
    one, two = (
        AFATransformerBlock(8, 2, generator=torch.Generator().manual_seed(5)) for _ in range(2)
    )
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, p1), p2 in zip(one.named_parameters(), two.parameters(), strict=True):
        assert torch.equal(p1, p2), name


def test_float32_long_sequence_is_finite():
    """fp32, T = 512, and near-zero decays (1e-8): finite outputs and gradients."""
    block = AFATransformerBlock(4, 1, generator=torch.Generator().manual_seed(6))
    for part in ("magnitude", "direction"):
        block.set_dynamics(part, decay=1e-8)
    x = torch.randn(1, 512, 4, generator=torch.Generator().manual_seed(7), requires_grad=True)
    out = block(x)[0]
    out.square().mean().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()


@pytest.mark.parametrize(
    ("build", "call", "match"),
    [
        ({"embed_dim": 6, "num_heads": 4}, None, "divisible by num_heads"),
        ({"num_heads": 0}, None, "num_heads must be a positive integer"),
        ({"ffn_hidden": 0}, None, "ffn_hidden must be a positive integer"),
        ({"nu": -1.0}, None, "nu must be a number > 0"),
        ({}, {"x": torch.zeros(2, 5, 6)}, "x must have shape \\(B, T, 8\\)"),
        ({}, {"t": torch.tensor([0.0, 1.0, 1.0, 2.0, 3.0])}, "strictly increasing"),
    ],
)
def test_clear_errors(build, call, match):
    with pytest.raises(ValueError, match=match):
        block = AFATransformerBlock(**{"embed_dim": 8, "num_heads": 2, **build})
        call = {"x": torch.zeros(2, 5, 8), **(call or {})}
        block(call["x"], call.get("t"))


def test_set_dynamics_checks_its_arguments():
    block = _block()
    with pytest.raises(ValueError, match="part must be one of"):
        block.set_dynamics("phase", decay=0.1)
    with pytest.raises(ValueError, match="direction attention only"):
        block.set_dynamics("magnitude", frequencies=[[0.1, 0.2], [0.3, 0.4]])
    with pytest.raises(ValueError, match="must be >= 0"):
        block.set_dynamics("direction", decay=-0.1)

"""Positional baselines (seed 004 B1-B4, seed 000 Fig. 3): references, SDPA, properties."""

import math

import pytest
import torch
import torch.nn.functional as F

from kernels.layers import heads as heads_mod
from kernels.layers.baselines import (
    ALiBiAttention,
    DecayedRotaryAttention,
    RotaryAttention,
    SoftmaxAttention,
)
from kernels.ops import baselines
from kernels.ops.common import complex_pairs, positional
from tests.kernels.helpers import assert_close

F64 = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _qkv(B, H, T, D, gen, dtype=F64):
    return tuple(torch.randn(B, H, T, D, dtype=dtype, generator=gen) for _ in range(3))


def _stamps(B, T, gen):
    return torch.cumsum(torch.rand(B, T, dtype=F64, generator=gen) + 0.05, dim=1)


def _causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).tril()


def test_rope_equals_complex_rotation_reference():
    """softmax(Re(q_c e^{i w t_i} conj(k_c e^{i w t_j})) / sqrt(D)) in torch.complex."""
    gen = _gen(0)
    B, H, T, D = 2, 3, 7, 6
    q, k, v = _qkv(B, H, T, D, gen)
    t = _stamps(B, T, gen)
    freq = torch.randn(H, D // 2, dtype=F64, generator=gen)
    phase = torch.exp(1j * t[:, None, :, None] * freq[None, :, None, :])  # (B, H, T, n)
    qc = complex_pairs.to_complex(q) * phase
    kc = complex_pairs.to_complex(k) * phase
    scores = (qc @ kc.conj().transpose(-1, -2)).real / math.sqrt(D)
    for causal in (True, False):
        s = scores.masked_fill(~_causal_mask(T), -math.inf) if causal else scores
        w = torch.softmax(s, dim=-1)
        got = baselines.rope_attention(
            q, k, v, t=t, frequencies=freq, causal=causal, return_weights=True
        )
        assert_close("RoPE weights", got.weights, w, atol=1e-14)
        assert_close("RoPE output", got.output, w @ v, atol=1e-13)
        fast = baselines.rope_attention(q, k, v, t=t, frequencies=freq, causal=causal)
        assert_close("RoPE SDPA path", fast.output, got.output, atol=1e-13)


def test_rope_default_bank_and_zero_frequencies_equal_sdpa():
    gen = _gen(1)
    q, k, v = _qkv(2, 2, 6, 8, gen)
    sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    flat = baselines.rope_attention(q, k, v, frequencies=torch.zeros(4, dtype=F64))
    assert_close("RoPE(omega = 0) = SDPA", flat.output, sdpa, atol=1e-14)
    assert_close("softmax = SDPA", baselines.softmax_attention(q, k, v).output, sdpa, atol=1e-14)
    bank = positional.rope_frequencies(4, dtype=F64)
    assert_close("RoPE bank", bank, 10000.0 ** (-torch.arange(4, dtype=F64) / 4), atol=0)
    default = baselines.rope_attention(q, k, v).output
    explicit = baselines.rope_attention(q, k, v, frequencies=bank).output
    assert_close("default bank", default, explicit, atol=0)


def test_alibi_equals_sdpa_with_the_explicit_bias_matrix():
    gen = _gen(2)
    B, H, T, D = 2, 4, 6, 5
    q, k, v = _qkv(B, H, T, D, gen)
    t = _stamps(B, T, gen)
    slopes = positional.alibi_slopes(H, dtype=F64)
    assert_close("slopes 2^(-8h/H)", slopes, 2.0 ** (-8.0 * torch.arange(1, 5) / 4), atol=0)
    lag = t[:, None, :, None] - t[:, None, None, :]  # (B, 1, T, T), t_i - t_j
    for causal in (True, False):
        bias = -slopes.view(1, H, 1, 1) * lag.abs()
        if causal:
            bias = bias.masked_fill(~_causal_mask(T), -math.inf)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        got = baselines.alibi_attention(q, k, v, t=t, causal=causal, return_weights=True)
        assert_close("ALiBi (weights path)", got.output, expected, atol=1e-14)
        fast = baselines.alibi_attention(q, k, v, t=t, causal=causal)
        assert_close("ALiBi (SDPA path)", fast.output, expected, atol=1e-14)
    visible = _causal_mask(T)
    causal_bias = -slopes.view(1, H, 1, 1) * lag
    assert_close(
        "causal bias = -m (t_i - t_j)", bias[..., visible], causal_bias[..., visible], atol=0
    )


def test_alibi_slopes_for_a_head_count_that_is_not_a_power_of_two():
    # Press et al.: the 4 slopes of H = 4, then every other slope of H = 8 (2^-1, 2^-3, ...).
    expected = [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    assert positional.alibi_slopes(6, dtype=F64).tolist() == expected


@pytest.mark.parametrize("mode", ["post-softmax", "logit"])
def test_decayed_rope_definitions(mode):
    gen = _gen(3)
    B, H, T, D = 2, 2, 6, 4
    q, k, v = _qkv(B, H, T, D, gen)
    t = _stamps(B, T, gen)
    freq = torch.randn(H, D // 2, dtype=F64, generator=gen)
    mu = torch.tensor([0.0, 0.4], dtype=F64)
    rope = baselines.rope_attention(q, k, v, t=t, frequencies=freq, return_weights=True)
    got = baselines.decayed_rope_attention(
        q, k, v, t=t, frequencies=freq, decay=mu, decay_mode=mode, return_weights=True
    )
    decay = torch.exp(-mu.view(1, H, 1, 1) * (t[:, None, :, None] - t[:, None, None, :]).abs())
    if mode == "post-softmax":
        expected_w = rope.weights * decay
    else:
        expected_w = torch.softmax(torch.log(rope.weights) + torch.log(decay), dim=-1)
    assert_close("decayed weights", got.weights, expected_w, atol=1e-14)
    assert_close("decayed output", got.output, expected_w @ v, atol=1e-13)
    assert_close("mu = 0 head is RoPE", got.output[:, 0], rope.output[:, 0], atol=1e-14)
    fast = baselines.decayed_rope_attention(
        q, k, v, t=t, frequencies=freq, decay=mu, decay_mode=mode
    )
    assert_close("without weights", fast.output, got.output, atol=1e-13)


def test_sc_rope_uses_the_coupled_spectrum():
    gen = _gen(4)
    q, k, v = _qkv(1, 4, 5, 8, gen)
    spec = positional.SpectralCoupling(damping=0.5, zero_decay_heads=1, conjugate_pairs=False)
    freq, mu = spec.build(4, 4, dtype=F64)
    assert mu[0] == 0 and torch.equal(mu[1:], 0.5 * freq[1:, -1])
    a = baselines.decayed_rope_attention(q, k, v, frequencies=spec)
    b = baselines.decayed_rope_attention(q, k, v, frequencies=freq, decay=mu)
    assert_close("SC-RoPE spec", a.output, b.output, atol=0)


LAYERS = {
    "rope": lambda **kw: RotaryAttention(8, 2, **kw),
    "alibi": lambda **kw: ALiBiAttention(8, 2, **kw),
    "decayed": lambda **kw: DecayedRotaryAttention(8, 2, **kw),
    "sc-rope": lambda **kw: DecayedRotaryAttention(8, 2, spectral_coupling=True, **kw),
    "softmax+sinusoidal": lambda **kw: SoftmaxAttention(8, 2, **kw),
    "softmax+learned": lambda **kw: SoftmaxAttention(8, 2, positional="learned", **kw),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_module_no_leakage_shift_and_weights(name):
    gen = _gen(5)
    layer = LAYERS[name](generator=gen, dtype=F64)
    x = torch.randn(2, 9, 8, dtype=F64, generator=gen)
    t = torch.cumsum(torch.rand(9, dtype=F64, generator=gen) + 0.3, 0)
    out, w = layer(x, t, need_weights=True)
    assert out.shape == (2, 9, 8) and w.shape == (2, 2, 9, 9)
    assert torch.equal(w.triu(1), torch.zeros_like(w))
    assert layer(x, t)[1] is None
    assert_close("need_weights path", layer(x, t)[0], out, atol=1e-13)
    x2 = x.clone()
    x2[:, 5:] += torch.randn(2, 4, 8, dtype=F64, generator=gen)
    # SDPA's fused kernels may reorder sums when masked keys change: equal to round-off
    assert_close("no leakage", layer(x2, t)[0][:, :5], out[:, :5], atol=1e-14)
    shifted = layer(x, t + 3.7)[0]
    if name.startswith("softmax"):  # absolute embeddings: the output moves with the shift
        assert (shifted - out).abs().max() > 1e-3
    else:
        assert_close(f"{name} time shift", shifted, out, atol=1e-12)


def test_module_projections_match_the_functional():
    gen = _gen(6)
    layer = DecayedRotaryAttention(12, 3, head_dim=6, decay=0.2, generator=gen, dtype=F64)
    x = torch.randn(2, 5, 12, dtype=F64, generator=gen)
    out, _ = layer(x)
    q, k, v = (heads_mod.split_heads(m(x), 3) for m in (layer.q_proj, layer.k_proj, layer.v_proj))
    ref = baselines.decayed_rope_attention(q, k, v, decay=0.2)
    assert_close("module", out, layer.out_proj(heads_mod.merge_heads(ref.output)), atol=1e-14)


def test_softmax_embeddings():
    gen = _gen(7)
    table = positional.sinusoidal_embedding(torch.arange(4, dtype=F64), 6)
    assert_close("PE[t, 0]", table[:, 0], torch.sin(torch.arange(4, dtype=F64)), atol=0)
    expected = torch.cos(torch.arange(4, dtype=F64) * 1e4 ** (-4 / 6))
    assert_close("PE[t, 5]", table[:, 5], expected, atol=1e-15)
    layer = SoftmaxAttention(6, 2, positional="learned", max_len=8, generator=gen, dtype=F64)
    stamps = torch.tensor([[[0.0, 2.0, 2.5, 7.0]]], dtype=F64)
    emb = layer.embedding(stamps)
    rows = layer.position_table
    assert_close("integer t reads rows", emb[0, [0, 1, 3]], rows[[0, 2, 7]], atol=0)
    assert_close("t = 2.5 interpolates", emb[0, 2], (rows[2] + rows[3]) / 2, atol=1e-15)
    with pytest.raises(ValueError, match=r"t must lie in \[0, 7\]"):
        layer(torch.zeros(1, 2, 6, dtype=F64), torch.tensor([0.0, 8.0]))
    plain = SoftmaxAttention(6, 2, positional=None, generator=_gen(8), dtype=F64)
    x = torch.randn(1, 4, 6, dtype=F64, generator=gen)
    assert_close("no embedding ignores t", plain(x, stamps[0, 0] + 5)[0], plain(x)[0], atol=0)


def test_gradcheck_float64():
    gen = _gen(9)
    q, k, v = (x.requires_grad_() for x in _qkv(1, 2, 4, 4, gen))
    t = torch.tensor([0.0, 0.5, 1.7, 2.0], dtype=F64)
    mu = torch.tensor([0.3, 0.1], dtype=F64, requires_grad=True)
    freq = torch.randn(2, 2, dtype=F64, generator=gen, requires_grad=True)
    slopes = torch.tensor([0.5, 0.25], dtype=F64, requires_grad=True)

    def decayed(q, k, v, mu, freq):
        post = baselines.decayed_rope_attention(q, k, v, t=t, frequencies=freq, decay=mu)
        pre = baselines.decayed_rope_attention(
            q, k, v, t=t, frequencies=freq, decay=mu, decay_mode="logit"
        )
        return post.output + pre.output

    assert torch.autograd.gradcheck(decayed, (q, k, v, mu, freq))

    def alibi(q, k, v, slopes):
        return baselines.alibi_attention(q, k, v, t=t, slopes=slopes, causal=False).output

    assert torch.autograd.gradcheck(alibi, (q, k, v, slopes))


def test_finite_in_float32_at_t_8192():
    """ALiBi and decayed RoPE (logit mode, mu -> 0) through SDPA with an explicit bias."""
    gen = _gen(10)
    q, k, v = _qkv(1, 1, 8192, 4, gen, dtype=torch.float32)
    for out in (
        baselines.alibi_attention(q, k, v).output,
        baselines.decayed_rope_attention(q, k, v, decay=1e-9, decay_mode="logit").output,
    ):
        assert torch.isfinite(out).all() and out.abs().max() <= v.abs().max()


def test_clear_errors():
    gen = _gen(11)
    q, k, v = _qkv(1, 2, 5, 3, gen)
    with pytest.raises(ValueError, match="must be even"):
        baselines.rope_attention(q, k, v)
    q, k, v = _qkv(1, 2, 5, 4, gen)
    with pytest.raises(ValueError, match="strictly increasing"):
        baselines.alibi_attention(q, k, v, t=torch.tensor([0.0, 2, 1, 3, 4]))
    with pytest.raises(ValueError, match="q and k must have equal shapes"):
        baselines.softmax_attention(q, k[:, :1], v)
    with pytest.raises(ValueError, match="decay_mode"):
        baselines.decayed_rope_attention(q, k, v, decay=0.1, decay_mode="pre")
    with pytest.raises(TypeError, match="decay is required"):
        baselines.decayed_rope_attention(q, k, v)
    with pytest.raises(ValueError, match="slopes must be a scalar or have shape"):
        baselines.alibi_attention(q, k, v, slopes=torch.ones(3))
    with pytest.raises(ValueError, match="divisible by num_heads"):
        RotaryAttention(10, 3)
    with pytest.raises(ValueError, match="head_dim must be even"):
        RotaryAttention(8, 2, head_dim=3)
    with pytest.raises(ValueError, match="positional must be one of"):
        SoftmaxAttention(8, 2, positional="rotary")
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 8\)"):
        ALiBiAttention(8, 2)(torch.zeros(1, 3, 4))


def test_init_uses_only_the_given_generator():
    state = torch.random.get_rng_state()
    a = SoftmaxAttention(8, 2, positional="learned", generator=_gen(12))
    b = SoftmaxAttention(8, 2, positional="learned", generator=_gen(12))
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    bound = 1 / math.sqrt(8)
    assert a.q_proj.weight.abs().max() <= bound and a.q_proj.weight.std() > bound / 3

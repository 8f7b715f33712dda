"""The shared pieces of the attention layers: complex pairs, lag kernel, heads, validation."""

import math

import numpy as np
import pytest
import torch

from estimators.closed_forms.measurement import isotropic_measurement_variance
from kernels import _validation
from kernels.layers import heads
from kernels.layers.complex_linear import ComplexLinear, lift
from kernels.ops.common import complex_pairs, lags
from tests.kernels.helpers import assert_close


def test_complex_linear_is_complex_matrix_multiplication():
    gen = torch.Generator().manual_seed(0)
    layer = ComplexLinear(3, 5, generator=gen, dtype=torch.float64)
    bias = torch.randn(5, dtype=torch.complex128, generator=gen)
    layer.set_complex(layer.weight_real + 1j * layer.weight_imag, bias)
    z = torch.randn(4, 7, 3, dtype=torch.complex128, generator=gen)
    weight = torch.complex(layer.weight_real, layer.weight_imag)
    expected = z @ weight.T + bias
    got = complex_pairs.to_complex(layer(complex_pairs.from_complex(z)))
    assert_close(
        "complex linear", torch.view_as_real(got), torch.view_as_real(expected), atol=1e-13
    )


@pytest.mark.parametrize("bias", ["real", "none"])
def test_complex_linear_without_imaginary_bias_is_complex_multiplication(bias):
    """A real bias (``imaginary_bias=False``) adds to the real part only; no bias adds nothing."""
    gen = torch.Generator().manual_seed(3)
    layer = ComplexLinear(
        3, 4, bias=bias == "real", imaginary_bias=False, generator=gen, dtype=torch.float64
    )
    if bias == "real":
        layer.set_complex(
            torch.complex(layer.weight_real, layer.weight_imag),
            torch.complex(
                torch.randn(4, dtype=torch.float64, generator=gen),
                torch.zeros(4, dtype=torch.float64),
            ),
        )
    z = torch.randn(2, 5, 3, dtype=torch.complex128, generator=gen)
    expected = z @ torch.complex(layer.weight_real, layer.weight_imag).T
    if bias == "real":
        expected = expected + layer.bias_real
    got = complex_pairs.to_complex(layer(complex_pairs.from_complex(z)))
    assert_close(
        "complex linear", torch.view_as_real(got), torch.view_as_real(expected), atol=1e-13
    )


def test_complex_linear_init_is_isotropic_with_glorot_scale():
    layer = ComplexLinear(200, 300, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w = torch.complex(layer.weight_real, layer.weight_imag).detach()
    # E|W|^2 = 2 / (n_in + n_out); with 6e4 entries the sample mean is within 1% (4 sigma: the
    # relative sd of a chi^2_1 mean over n entries is sqrt(2 / n) = 0.0058).
    assert abs(w.abs().pow(2).mean().item() / (2 / 500) - 1) < 4 * np.sqrt(2 / w.numel())
    # isotropy: the phase is uniform, so E[W^2] = 0 (real and imaginary parts equal and independent)
    assert abs(w.pow(2).mean().item()) < 4 * (2 / 500) / np.sqrt(w.numel())


def test_complex_linear_rejects_wrong_width_and_lift_pads_zeros():
    layer = ComplexLinear(3, 2)
    with pytest.raises(ValueError, match="2 \\* in_features = 6"):
        layer(torch.zeros(2, 5))
    x = torch.randn(2, 3)
    assert torch.equal(lift(x), torch.cat((x, torch.zeros_like(x)), -1))


def test_rotate_and_real_inner_match_complex_arithmetic():
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(2, 5, 4, dtype=torch.complex128, generator=gen)
    w = torch.randn(2, 6, 4, dtype=torch.complex128, generator=gen)
    theta = torch.randn(5, 4, dtype=torch.float64, generator=gen)
    rotated = complex_pairs.rotate(complex_pairs.from_complex(z), theta.cos(), theta.sin())
    assert_close(
        "rotate", rotated, complex_pairs.from_complex(z * torch.exp(1j * theta)), atol=1e-14
    )
    inner = complex_pairs.real_inner(complex_pairs.from_complex(z), complex_pairs.from_complex(w))
    assert_close("Re(z^H w)", inner, (z.conj() @ w.transpose(-1, -2)).real, atol=1e-13)
    assert_close(
        "|z|^2",
        complex_pairs.squared_modulus(complex_pairs.from_complex(z)),
        z.abs().pow(2).sum(-1),
        atol=1e-13,
    )


@pytest.mark.parametrize("decay", [0.0, 1e-9, 1e-3, 0.7])
def test_isotropic_variance_equals_the_float64_closed_form(decay):
    lag = np.linspace(0.0, 5.0, 11)
    expected = isotropic_measurement_variance(-decay, 0.3, 0.2, -lag)
    got = lags.isotropic_variance(
        torch.tensor(lag), torch.tensor(decay, dtype=torch.float64), 0.3, 0.2
    )
    assert_close("sigma_V^2", got, torch.tensor(expected), atol=0, rtol=1e-12)


def test_relaxation_gradient_is_finite_and_correct_at_zero():
    x = torch.tensor([0.0, 1e-6, 1e-3, 2.0], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(lags.relaxation(x).sum(), x)
    # d/dx (1 - e^{-x})/x = (e^{-x}(x + 1) - 1) / x^2, with limit -1/2 at 0
    xs = x.detach()
    exact = torch.where(xs > 1e-2, (torch.exp(-xs) * (xs + 1) - 1) / xs**2, -0.5 + xs / 3)
    assert_close("relaxation'", grad, exact, atol=1e-6)


def test_heads_round_trip():
    x = torch.randn(2, 5, 12)
    assert torch.equal(heads.merge_heads(heads.split_heads(x, 3)), x)
    assert torch.equal(heads.merge_complex_heads(heads.split_complex_heads(x, 3)), x)
    # head h holds real features h*n..(h+1)*n and the matching imaginary ones
    split = heads.split_complex_heads(x, 3)
    assert torch.equal(split[:, 1, :, :2], x[..., 2:4])
    assert torch.equal(split[:, 1, :, 2:], x[..., 8:10])


def test_validation_names_the_argument():
    q = torch.zeros(1, 2, 4, 6)
    with pytest.raises(ValueError, match="q and k must have equal shapes"):
        _validation.check_qkv(q, torch.zeros(1, 2, 4, 5), q)
    with pytest.raises(ValueError, match="v must share"):
        _validation.check_qkv(q, q, torch.zeros(1, 2, 3, 6))
    with pytest.raises(ValueError, match="feature size Dv must be even"):
        _validation.check_qkv(q, q, torch.zeros(1, 2, 4, 3), even=True)
    with pytest.raises(ValueError, match="strictly increasing"):
        _validation.check_times(torch.tensor([0.0, 1.0, 1.0, 2.0]), 4, like=q)
    with pytest.raises(ValueError, match="shape \\(T,\\) or \\(B, T\\) with T = 4"):
        _validation.check_times(torch.arange(5.0), 4, like=q)
    with pytest.raises(ValueError, match="must be divisible by num_heads"):
        _validation.check_heads(10, 3)
    with pytest.raises(ValueError, match="must be even"):
        _validation.check_heads(12, 4, even=True)
    assert _validation.check_times(None, 4, like=q).shape == (1, 1, 4)


def test_complex_time_stamps_are_refused_by_every_filtering_layer():
    """A complex ``t`` would be cast to the real dtype with its imaginary part dropped: every
    layer that reads time stamps refuses it, naming ``t``; the real part alone is accepted."""
    from kernels.layers.afa import AdaptiveFilterAttention
    from kernels.layers.rfa import RobustFilterAttention
    from kernels.layers.rt_afa import RTAdaptiveFilterAttention
    from kernels.layers.unrolled_afa import UnrolledAdaptiveFilterAttention

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 5, 4, generator=gen)
    t_real = np.arange(5.0)
    t_complex = t_real + 0.5j
    layers = [
        AdaptiveFilterAttention(4, 1, generator=gen),
        AdaptiveFilterAttention(4, 1, tensor_form=True, generator=gen),
        AdaptiveFilterAttention(4, 1, separable=True, generator=gen),
        RobustFilterAttention(4, 1),
        RTAdaptiveFilterAttention(4, 1),
        UnrolledAdaptiveFilterAttention(4, 1, generator=gen),
    ]
    for layer in layers:
        name = type(layer).__name__
        assert layer(x, torch.from_numpy(t_real).float())[0].shape == x.shape, name
        for bad in (t_complex, torch.from_numpy(t_complex)):
            with pytest.raises(TypeError, match="t must hold real time stamps"):
                layer(x, bad)
    with pytest.raises(TypeError, match="t must hold real time stamps"):
        _validation.check_times([0.0, 1.0 + 1e-9j], 2, like=x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_all_finite_matches_isfinite(dtype):
    """`_validation._all_finite` (the output check of `overflow_warning`: one sum where it can)
    agrees with ``isfinite().all()``: NaN, +-inf (also both, whose sum is NaN), finite entries
    whose sum overflows (then the full check decides), empty tensors."""
    big = torch.finfo(dtype).max
    cases = {
        "finite": torch.randn(3, 5).to(dtype),
        "nan": torch.tensor([1.0, math.nan, 2.0]).to(dtype),
        "inf": torch.tensor([1.0, math.inf]).to(dtype),
        "-inf": torch.tensor([-math.inf, 0.0]).to(dtype),
        "inf and -inf": torch.tensor([math.inf, -math.inf]).to(dtype),
        "finite, sum overflows": torch.full((4,), big, dtype=dtype),
        "empty": torch.zeros(0, dtype=dtype),
    }
    for name, x in cases.items():
        assert _validation._all_finite(x) == bool(torch.isfinite(x).all()), name


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("sign", [1, -1])
def test_rotation_without_autograd_equals_the_differentiable_products(dtype, sign):
    """`Rotation.apply` without a graph writes both halves with fused products into one tensor,
    and `Rotation.apply_` in place: bitwise the products of the differentiable form (``x cos2 +
    -swap(x) sin2``), for a batch broadcast against per-head factors and with ``r != 1``; with
    a graph `apply_` leaves its argument alone and returns the differentiable result."""
    from kernels.ops.common.rotation import Rotation

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 7, 8, dtype=dtype, generator=gen)
    angles = torch.randn(1, 3, 7, 4, dtype=dtype, generator=gen)
    radius = torch.rand(1, 3, 7, 4, dtype=dtype, generator=gen)
    rotation = Rotation.of(radius * torch.cos(angles), radius * torch.sin(angles))
    leaf = x.clone().requires_grad_()
    graph = rotation.apply(leaf, sign)
    assert graph.grad_fn is not None
    assert torch.equal(rotation.apply(x, sign), graph.detach())
    own = x.clone()
    assert rotation.apply_(own, sign).data_ptr() == own.data_ptr()
    assert torch.equal(own, graph.detach())
    again = rotation.apply_(leaf, sign)
    assert torch.equal(leaf.detach(), x) and torch.equal(again.detach(), graph.detach())
    # the formula itself: e^{sign i theta} r (re + i im)
    z = torch.complex(x[..., :4], x[..., 4:]) * radius * torch.exp(sign * 1j * angles)
    assert_close("rotation", own, torch.cat((z.real, z.imag), -1), atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_squared_modulus_untracked(dtype):
    """`complex_pairs.squared_modulus_untracked` (a norm, no temporary) is `squared_modulus`
    within the rounding of a sum of 2n squares and a square root (a few ulp), zero on zero
    vectors; with a graph it is `squared_modulus` itself, with its gradient ``2 x``."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 5, 8, dtype=dtype, generator=gen) * 10
    x[0, 0, 0] = 0.0
    got = complex_pairs.squared_modulus_untracked(x)
    want = complex_pairs.squared_modulus(x)
    assert got[0, 0, 0] == 0.0
    eps = torch.finfo(dtype).eps
    assert_close("untracked |x|^2", got, want, atol=0.0, rtol=8 * eps)
    leaf = x.clone().requires_grad_()
    tracked = complex_pairs.squared_modulus_untracked(leaf)
    assert torch.equal(tracked.detach(), want)
    tracked.sum().backward()
    assert torch.equal(leaf.grad, 2 * x)

"""The fused filtering-attention kernel against the torch functions it must equal.

`kernels.ops.common.fused_filtering` (through its packers `kernels.ops.afa.triton` and
`kernels.ops.rfa.triton`) runs in the Triton interpreter here (tests/kernels/
conftest.py sets ``TRITON_INTERPRET=1``) at tiny shapes with 16-row tiles, so several tiles,
partial tiles (``T`` not a multiple of 16) and padded features (``D = 24``) are exercised. The
reference is `isotropic_afa` / `rfa_attention` with ``backend="torch"`` in float64 on the same
(already rounded) inputs; tolerances come from `kernels.tolerances`. Kernel outputs are
allocated by a NaN-filling ``torch.empty`` (fla's habit), so an element a kernel forgets to write
shows up. The ``gpu`` tests repeat the parity at full size (T = 1024, D = 64, bfloat16).
"""

import math

import pytest
import torch

from kernels.ops import afa, rfa
from kernels.ops.afa.triton import isotropic_afa_triton
from kernels.ops.rfa.triton import rfa_attention_triton
from kernels.tolerances import tolerance
from tests.kernels.helpers import assert_close

F64 = torch.float64
HEADS = 2
TILE = 16


@pytest.fixture(autouse=True)
def nan_empty(monkeypatch):
    """``torch.empty`` filled with NaN for floating dtypes, so unwritten elements show."""
    empty = torch.empty

    def filled(*args, **kwargs):
        x = empty(*args, **kwargs)
        return x.fill_(math.nan) if x.is_floating_point() else x

    monkeypatch.setattr(torch, "empty", filled)


def _check(name, actual, expected, dtype: str, quantity: str, *, sensitivity=None) -> None:
    """`assert_close` with the table's entry; ``atol`` scales with max(1, max|expected|).

    ``sensitivity``: the change of the float64 reference when the inputs move by one unit
    roundoff of ``dtype`` (`_sensitivity`); four times it is added to ``atol`` (the kernel's
    backward error is about four roundings, ``kernels.tolerances``).
    """
    tol = tolerance("filtering_attention", "triton", dtype, quantity)
    scale = max(1.0, expected.detach().abs().max().item())
    atol = tol.atol * scale
    if sensitivity is not None:
        atol += 4 * sensitivity
    assert_close(name, actual, expected, atol=atol, rtol=tol.rtol)


def _jitter(x, unit, generator):
    """``x (1 + u xi)``, ``xi`` uniform in [-1, 1]: a move of one unit roundoff ``u``."""
    xi = 2 * torch.rand(x.shape, generator=generator, dtype=F64) - 1
    return x * (1 + unit * xi.to(x.device))


def _sensitivity(reference, expected, inputs, dtype, generator) -> dict:
    """``max |ref(x (1 + u xi), w (1 + u xi')) - ref(x, w)|`` per result.

    ``x`` the inputs q, k, v and ``w`` the upstream gradient (the output weights): the kernel
    rounds both to ``dtype`` (q~, k~, v~ and the rotated upstream gradient), so a one-roundoff
    move of each is the size of the error it must make; ``reference(moved, weight_unit)``.
    """
    unit = torch.finfo(dtype).eps / 2
    moved = tuple(_jitter(x, unit, generator) for x in inputs)
    return {
        name: (value - expected[name]).abs().max().item()
        for name, value in reference(moved, unit).items()
    }


def _params(heads: int, n: int, *, family: str, nu, generator) -> dict:
    """Per-head dynamics with distinct values per head (tensors, so they get gradients)."""

    def per_head(low, high):
        return low + (high - low) * torch.rand(heads, generator=generator, dtype=F64)

    params = {
        "decay": per_head(0.05, 0.4),
        "process_var": per_head(0.1, 0.6),
        "measurement_var": per_head(0.5, 1.2),
        "temperature": per_head(0.6, 1.3),
        "frequencies": torch.rand(heads, n, generator=generator, dtype=F64) * 2 - 1,
    }
    if family == "rfa":
        params["anchor_var"] = per_head(0.05, 0.3)
    params["nu"] = nu if math.isinf(nu) else per_head(nu, 2 * nu)
    return params


def _times(kind: str, batch: int, steps: int, generator):
    if kind == "none":
        return None
    gaps = 0.3 + torch.rand(batch, steps, generator=generator, dtype=F64)
    stamps = torch.cumsum(gaps, dim=-1)
    return stamps[0] if kind == "shared" else stamps


def _inputs(batch, steps, dim, vdim, generator):
    shape = (batch, HEADS, steps)
    return tuple(torch.randn(*shape, d, generator=generator, dtype=F64) for d in (dim, dim, vdim))


def _run(family, q, k, v, params, **options):
    """The triton function and the float64 torch reference on the same inputs."""
    if family == "afa":
        ref = afa.isotropic_afa(
            q.to(F64), k.to(F64), v.to(F64), backend="torch", **params, **options
        )
        params = {**params, **options}
        return isotropic_afa_triton(q, k, v, block_size=TILE, **params), ref.output
    params = {**params, **options}
    ref = rfa.rfa_attention(q.to(F64), k.to(F64), v.to(F64), backend="torch", **params)
    return rfa_attention_triton(q, k, v, block_size=TILE, **params), ref.output


def _cast(params, dtype):
    return {name: x.to(dtype) if isinstance(x, torch.Tensor) else x for name, x in params.items()}


FORWARD_CASES = [
    # family, steps, dim, vdim, causal, nu, times, dtype
    ("afa", 1, 8, 8, True, 2.0, "none", torch.float32),
    ("afa", 5, 8, 8, False, 2.0, "shared", torch.float32),
    ("afa", 33, 24, 24, True, math.inf, "batch", torch.float32),
    ("afa", 33, 24, 24, False, 3.0, "batch", torch.float32),
    ("afa", 64, 8, 8, True, 3.0, "none", torch.float32),
    ("afa", 33, 16, 16, True, 2.0, "shared", torch.bfloat16),
    ("afa", 33, 16, 16, False, math.inf, "none", torch.float16),
    ("rfa", 1, 8, 8, True, 2.0, "none", torch.float32),
    ("rfa", 5, 8, 8, False, math.inf, "shared", torch.float32),
    ("rfa", 33, 24, 24, True, 3.0, "batch", torch.float32),
    ("rfa", 33, 24, 24, False, math.inf, "batch", torch.float32),
    ("rfa", 64, 8, 8, True, math.inf, "none", torch.float32),
    ("rfa", 33, 16, 16, False, 2.0, "shared", torch.bfloat16),
    ("rfa", 33, 16, 16, True, 3.0, "none", torch.float16),
]


@pytest.mark.parametrize(
    ("family", "steps", "dim", "vdim", "causal", "nu", "times", "dtype"), FORWARD_CASES
)
def test_forward_matches_torch(family, steps, dim, vdim, causal, nu, times, dtype):
    gen = torch.Generator().manual_seed(steps * 31 + dim)
    batch = 2
    q, k, v = (x.to(dtype) for x in _inputs(batch, steps, dim, vdim, gen))
    params = _params(HEADS, dim // 2, family=family, nu=nu, generator=gen)
    t = _times(times, batch, steps, gen)
    out, ref = _run(family, q, k, v, _cast(params, torch.float32), t=t, causal=causal)
    assert out.dtype == dtype
    _check(f"{family} output", out, ref, str(dtype).removeprefix("torch."), "output")


@pytest.mark.parametrize("causal", [True, False])
def test_afa_real_features_and_value_width(causal):
    """``frequencies=None`` (real features, no rotation) with ``Dv != D``; and QK-norm."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = (x.float() for x in _inputs(1, 21, 24, 8, gen))
    params = _params(HEADS, 12, family="afa", nu=2.0, generator=gen)
    params["frequencies"] = None
    out, ref = _run("afa", q, k, v, _cast(params, torch.float32), causal=causal)
    _check("afa real output", out, ref, "float32", "output")
    q, k, v = (x.float() for x in _inputs(1, 21, 24, 24, gen))
    params = _params(HEADS, 12, family="afa", nu=2.0, generator=gen)
    options = {"causal": causal, "normalized_qk": True}
    out, ref = _run("afa", q, k, v, _cast(params, torch.float32), **options)
    _check("afa normalized output", out, ref, "float32", "output")


def _gradients(family, dtype, inputs, params, t, causal, device="cpu", weight_unit=0.0):
    """Output and gradients of q, k, v and every tensor parameter after ``sum(out * w)``.

    ``dtype`` float64 runs the torch function, any other the triton one with 16-row tiles
    (the default tile on CUDA); parameters are float32 then (float64 for the reference).
    ``weight_unit > 0`` moves the weights ``w`` by that relative amount (`_jitter`).
    """
    real = F64 if dtype == F64 else torch.float32
    leaves = [x.detach().to(device, dtype).requires_grad_() for x in inputs]
    tensors = {
        name: x.detach().to(device, real).requires_grad_()
        for name, x in params.items()
        if isinstance(x, torch.Tensor)
    }
    kwargs = {**params, **tensors, "causal": causal}
    kwargs["t"] = None if t is None else t.to(device, real)
    if dtype == F64:
        fn = afa.isotropic_afa if family == "afa" else rfa.rfa_attention
        out = fn(*leaves, backend="torch", **kwargs).output
    else:
        fn = isotropic_afa_triton if family == "afa" else rfa_attention_triton
        out = fn(*leaves, block_size=None if device == "cuda" else TILE, **kwargs)
    gen = torch.Generator().manual_seed(11)
    # the output weights are bfloat16 numbers, so every dtype sees the same upstream gradient
    weights = torch.randn(out.shape, generator=gen, dtype=F64).bfloat16().to(F64)
    if weight_unit:
        weights = _jitter(weights, weight_unit, gen)
    (out * weights.to(device, out.dtype)).sum().backward()
    grads = {"output": out.detach(), "q": leaves[0].grad, "k": leaves[1].grad}
    grads["v"] = leaves[2].grad
    grads.update({name: x.grad for name, x in tensors.items()})
    return {name: None if g is None else g.cpu() for name, g in grads.items()}


def _compare_low_precision(family, dtype, inputs, params, t, causal, device="cpu"):
    """Kernel in ``dtype`` against the float64 reference, with its measured sensitivity."""
    name = str(dtype).removeprefix("torch.")
    results = _gradients(family, dtype, inputs, params, t, causal, device)
    expected = _gradients(family, F64, inputs, params, t, causal, device)
    gen = torch.Generator().manual_seed(13)
    sensitivity = _sensitivity(
        lambda moved, unit: _gradients(family, F64, moved, params, t, causal, device, unit),
        expected,
        inputs,
        dtype,
        gen,
    )
    assert results["output"].dtype == dtype
    for key, value in expected.items():
        quantity = "output" if key == "output" else "grad"
        _check(key, results[key], value, name, quantity, sensitivity=sensitivity[key])


@pytest.mark.parametrize("family", ["afa", "rfa"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("nu", [2.0, math.inf])
def test_backward_matches_torch_autograd(family, causal, nu):
    """Gradients of q, k, v and of every dynamics/noise parameter, irregular (B, T) stamps."""
    gen = torch.Generator().manual_seed(3)
    batch, steps, dim = 1, 20, 8
    inputs = _inputs(batch, steps, dim, dim, gen)
    params = _params(HEADS, dim // 2, family=family, nu=nu, generator=gen)
    t = _times("batch", batch, steps, gen)
    grads = _gradients(family, torch.float32, inputs, params, t, causal)
    expected = _gradients(family, F64, inputs, params, t, causal)
    for name, value in expected.items():
        if value is None:  # content-free AFA (nu = inf): q, k, temperature do not enter
            assert family == "afa" and math.isinf(nu) and name in ("q", "k", "temperature")
            assert grads[name] is None or not grads[name].any(), name
            continue
        _check(name, grads[name], value, "float32", "output" if name == "output" else "grad")


@pytest.mark.parametrize("family", ["afa", "rfa"])
@pytest.mark.parametrize("causal", [True, False])
def test_far_from_time_zero(family, causal):
    """Stamps near ``t = 10^5`` keep float32 accuracy: only lags enter, so stamps are measured
    from the sequence's first one (`from_origin`). RFA once measured them from ``t = 0``: its
    float32 angles rounded by ``~ ulp(10^5)`` and moved the output by 3e-4, five times the
    float32 tolerance (the RFA cases fail on that code)."""
    gen = torch.Generator().manual_seed(4)
    inputs = _inputs(1, 20, 8, 8, gen)
    params = _params(HEADS, 4, family=family, nu=2.0, generator=gen)
    t = (1e5 + _times("batch", 1, 20, gen)).float().to(F64)  # the same stamps for both
    grads = _gradients(family, torch.float32, inputs, params, t, causal)
    expected = _gradients(family, F64, inputs, params, t, causal)
    for name, value in expected.items():
        _check(name, grads[name], value, "float32", "output" if name == "output" else "grad")


def test_backward_bfloat16():
    gen = torch.Generator().manual_seed(5)
    inputs = tuple(x.bfloat16().to(F64) for x in _inputs(1, 33, 16, 16, gen))
    params = _params(HEADS, 8, family="rfa", nu=3.0, generator=gen)
    _compare_low_precision("rfa", torch.bfloat16, inputs, params, None, True)


# ---------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------


def _small(family):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (x.float() for x in _inputs(1, 9, 8, 8, gen))
    params = _cast(_params(HEADS, 4, family=family, nu=2.0, generator=gen), torch.float32)
    fn = afa.isotropic_afa if family == "afa" else rfa.rfa_attention
    return fn, (q, k, v), params


@pytest.mark.parametrize("family", ["afa", "rfa"])
def test_dispatch(family, monkeypatch):
    fn, qkv, params = _small(family)
    torch_out = fn(*qkv, **params, backend="torch").output
    # auto on CPU tensors is the torch path, bit for bit
    assert torch.equal(fn(*qkv, **params).output, torch_out)
    triton_out = fn(*qkv, **params, backend="triton")
    assert triton_out.weights is None
    _check("dispatched output", triton_out.output, torch_out, "float32", "output")
    with pytest.raises(ValueError, match="return_weights"):
        fn(*qkv, **params, backend="triton", return_weights=True)
    with pytest.raises(ValueError, match="float64"):
        fn(*(x.double() for x in qkv), **params, backend="triton")
    with pytest.raises(ValueError, match="backend must be one of"):
        fn(*qkv, **params, backend="cuda")
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        fn(*qkv, **params, backend="triton")


def test_dispatch_names_unsupported_options():
    fn, qkv, params = _small("afa")
    with pytest.raises(ValueError, match="bias_qk"):
        fn(*qkv, **params, backend="triton", bias_qk=torch.zeros(HEADS, 8))
    with pytest.raises(ValueError, match="value_"):
        fn(*qkv, **params, backend="triton", value_decay=0.1)
    fn, qkv, params = _small("rfa")
    with pytest.raises(ValueError, match="steady_state"):
        fn(*qkv, **params, backend="triton", steady_state=True)
    with pytest.raises(ValueError, match="unitary_limit"):
        fn(*qkv, **params, backend="triton", unitary_limit=True)


def test_block_must_be_a_power_of_two():
    fn, (q, k, v), params = _small("rfa")
    with pytest.raises(ValueError, match="block_size must be a power of two"):
        rfa_attention_triton(q, k, v, **params, block_size=24)


# ---------------------------------------------------------------------------------------------
# Full size on a GPU
# ---------------------------------------------------------------------------------------------


# The bfloat16 frequency gradient of non-causal RFA at T = 1024 is off by 0.37 relative RMS
# (max 0.33 against 1.21, atol 0.09) on an H200: it is formed as sum_i t_i (...) over the
# rotated operands' gradients, whose terms cancel to a gradient ten times smaller than the
# causal one, so their bfloat16 products' rounding (ds, p) is magnified. Every other output
# and gradient passes. A lag-weighted accumulation in the kernel would remove the
# cancellation (BENCHMARKS.md, "Fused Triton kernels").
_RFA_FREQUENCY_GRADIENT = pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="bfloat16 non-causal RFA frequency gradient"
)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize(
    ("family", "causal"),
    [
        ("afa", True),
        ("afa", False),
        ("rfa", True),
        pytest.param("rfa", False, marks=_RFA_FREQUENCY_GRADIENT),
    ],
)
def test_full_size_bfloat16_on_gpu(family, causal):
    """T = 1024, D = 64, bfloat16, default tile: the output and every gradient."""
    gen = torch.Generator().manual_seed(2)
    batch, steps, dim = 2, 1024, 64
    inputs = tuple(x.bfloat16().to(F64) for x in _inputs(batch, steps, dim, dim, gen))
    params = _params(HEADS, dim // 2, family=family, nu=4.0, generator=gen)
    t = _times("batch", batch, steps, gen)
    _compare_low_precision(family, torch.bfloat16, inputs, params, t, causal, device="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("family", ["afa", "rfa"])
def test_dispatch_auto_on_gpu(family):
    """``backend="auto"`` takes the kernel for CUDA inputs and equals ``backend="triton"``."""
    fn, qkv, params = _small(family)
    qkv = tuple(x.cuda() for x in qkv)
    params = {n: x.cuda() if isinstance(x, torch.Tensor) else x for n, x in params.items()}
    auto = fn(*qkv, **params).output
    assert torch.equal(auto, fn(*qkv, **params, backend="triton").output)
    torch_out = fn(*(x.double() for x in qkv), **params, backend="torch").output
    _check("auto output", auto.cpu(), torch_out.cpu(), "float32", "output")

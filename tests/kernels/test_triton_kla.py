"""The Triton KLA chunked scan against the torch `kla_scan` (DESIGN.md section 2, link 5).

Without CUDA the kernels run in the Triton interpreter (``tests/kernels/conftest.py`` sets
``TRITON_INTERPRET=1``) at tiny shapes: a few programs of a few chunks, with T never a multiple
of the chunk. The reference is the torch odd-even scan in float64 on the same (rounded) inputs;
tolerances come from `kernels.tolerances` with their derivations. Gradients are compared
relative to the largest entry of each reference gradient (see the "grad" entries).
``@pytest.mark.gpu`` tests repeat the parity at T = 2^16 on CUDA, compiled:
``pytest tests/kernels/test_triton_kla.py -m gpu`` (where CUDA is present the conftest leaves
``TRITON_INTERPRET`` unset; an explicit value is kept).
"""

from __future__ import annotations

import pytest
import torch

from kernels.ops.kla import kla_scan, ou_prior
from kernels.tolerances import tolerance
from tests.kernels.helpers import assert_close

KERNEL = "kla_scan"
READOUTS = ("precision", "info_mean", "mean", "variance", "output", "output_variance")
ARGS = ("k", "value_precision", "v", "a_bar", "p_bar", "q", "lam0", "eta0")
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def make_problem(
    state: tuple[int, ...],
    steps: int,
    *,
    per_token: bool,
    p_zero: bool = False,
    batch: int = 2,
    seed: int = 0,
    device: str = "cpu",
) -> dict[str, torch.Tensor]:
    """float64 arguments of `kla_scan`; tokens (B, T, *S), keys (B, T, N, 1) for S = (N, D).

    About 20% of the tokens are missing (value precision 0). Decay rates in [0.1, 1.3] and steps
    dt in [0.1, 1] (per token: irregular sampling) or dt = 0.5 give ``a_bar`` in [0.27, 0.99].
    """
    g = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.rand(shape, generator=g, dtype=torch.float64)

    def randn(*shape):
        return torch.randn(shape, generator=g, dtype=torch.float64)

    B, T = batch, steps
    if len(state) == 1:
        key_shape = value_shape = (B, T, *state)
    else:
        n, d = state
        key_shape, value_shape = (B, T, n, 1), (B, T, 1, d)
    lam_v = torch.exp(3.0 * rand(*value_shape) - 1.5)
    lam_v = torch.where(rand(*value_shape) < 0.2, 0.0, lam_v)
    rate = 0.1 + 1.2 * rand(*state)
    dt = 0.1 + 0.9 * rand(B, T, *state) if per_token else torch.tensor(0.5, dtype=torch.float64)
    a_bar, p_bar = ou_prior(rate, 0.5 + rand(*state), dt)
    if p_zero:
        p_bar = torch.zeros_like(p_bar)
    args = {
        "k": randn(*key_shape),
        "value_precision": lam_v,
        "v": randn(*value_shape),
        "a_bar": a_bar,
        "p_bar": p_bar,
        "q": randn(B, T, *state),
        "lam0": 0.5 + rand(B, *state),
        "eta0": randn(B, *state),
    }
    return {name: x.to(device) for name, x in args.items()}


def run(args: dict[str, torch.Tensor], backend: str, **options):
    """`kla_scan` with ``backend``; kernel ``options`` (chunk sizes) call the kernel directly."""
    k, lam_v, v, a_bar, p_bar = (args[n] for n in ARGS[:5])
    kwargs = {"q": args["q"], "lam0": args["lam0"], "eta0": args["eta0"]}
    if options:
        from kernels.ops.kla.triton import kla_scan_triton

        return kla_scan_triton(k, lam_v, v, a_bar, p_bar, **kwargs, **options)
    return kla_scan(k, lam_v, v, a_bar, p_bar, **kwargs, backend=backend)


def cast(args: dict[str, torch.Tensor], dtype, *, grad: bool = False) -> dict[str, torch.Tensor]:
    return {n: x.to(dtype).detach().requires_grad_(grad) for n, x in args.items()}


def check_forward(args64, dtype, **options) -> None:
    """Every readout and the final state of the kernel against float64 torch on the same input."""
    low = cast(args64, dtype)
    reference = run(cast(low, torch.float64), "torch")
    actual = run(low, "triton", **options)
    name = DTYPE_NAMES[dtype]
    for quantity in READOUTS:
        tol = tolerance(KERNEL, "triton", name, "variance" if "variance" in quantity else "mean")
        if quantity == "precision":
            tol = tolerance(KERNEL, "triton", name, "variance")
        got, want = getattr(actual, quantity), getattr(reference, quantity)
        assert got.dtype == dtype
        assert_close(quantity, got, want, atol=tol.atol, rtol=tol.rtol)
    tol = tolerance(KERNEL, "triton", name, "variance")
    assert_close("state.lam", actual.state.lam, reference.state.lam, atol=tol.atol, rtol=tol.rtol)


@pytest.mark.parametrize(
    ("state", "steps", "per_token", "p_zero"),
    [((5,), 37, False, False), ((3, 5), 40, True, False), ((7,), 50, False, True)],
    ids=["D5-invariant", "N3xD5-irregular", "D7-p0"],
)
def test_forward_float32(state, steps, per_token, p_zero):
    args = make_problem(state, steps, per_token=per_token, p_zero=p_zero)
    check_forward(args, torch.float32, chunk=16, block_channels=8)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_forward_half(dtype):
    check_forward(make_problem((3, 5), 37, per_token=True), dtype, chunk=16)


def test_forward_single_chunk_defaults():
    """Default chunk (64) and channel block, T = 50 < chunk: one partial tile."""
    check_forward(make_problem((5,), 50, per_token=False, batch=1), torch.float32)


@pytest.mark.parametrize(
    ("state", "steps", "per_token", "p_zero", "readouts"),
    [((3, 5), 37, True, False, READOUTS), ((5,), 32, False, True, READOUTS[2:])],
    ids=["N3xD5-T37-irregular", "D5-T32-invariant-p0"],
)
def test_gradients_float32(state, steps, per_token, p_zero, readouts):
    """d/d(every argument) of a loss reading the readouts, against float64 autograd.

    T = 37 (a partial last chunk of 16) and T = 32 (two whole chunks: no masked rows).

    With ``p_bar = 0`` the precision grows like ``a_bar^{-2t}`` (1e20 here): its gradients
    (``d precision / d var = -precision^2``) leave the fp32 range, so that case reads the mean
    and variance readouts only.
    """
    args64 = make_problem(state, steps, per_token=per_token, p_zero=p_zero)
    g = torch.Generator().manual_seed(1)
    shape = args64["q"].shape
    weights = [torch.randn(shape, generator=g, dtype=torch.float64) for _ in readouts]

    def loss(result):
        return sum((w * getattr(result, n)).sum() for w, n in zip(weights, readouts, strict=True))

    low = cast(args64, torch.float32, grad=True)
    high = cast(low, torch.float64, grad=True)
    loss(run(high, "torch")).backward()
    loss(run(low, "triton", chunk=16, block_channels=8)).backward()
    tol = tolerance(KERNEL, "triton", "float32", "grad")
    for name in ARGS:
        want = high[name].grad
        scale = want.abs().max()
        assert scale > 0, name
        assert_close(f"d/d{name}", low[name].grad / scale, want / scale, atol=tol.atol)


def test_auto_on_cpu_is_torch():
    """``backend="auto"`` runs torch on CPU tensors: bit-identical to ``backend="torch"``."""
    args = cast(make_problem((5,), 9, per_token=False), torch.float32)
    auto, torch_result = run(args, "auto"), run(args, "torch")
    for quantity in READOUTS:
        assert torch.equal(getattr(auto, quantity), getattr(torch_result, quantity))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"backend": "cuda"}, "backend must be one of"),
        ({"backend": "triton", "method": "sequential"}, "method='sequential'"),
        ({"backend": "triton", "dtype": torch.float64}, "torch.float64"),
        ({"chunk": 48}, "chunk must be a power of two"),
    ],
)
def test_triton_backend_rejects(options, match):
    args = cast(make_problem((5,), 9, per_token=False), options.pop("dtype", torch.float32))
    tokens = [args[n] for n in ARGS[:5]]
    with pytest.raises(ValueError, match=match):
        if "chunk" in options:
            from kernels.ops.kla.triton import kla_scan_triton

            kla_scan_triton(*tokens, **options)
        else:
            kla_scan(*tokens, **options)


def test_triton_on_cpu_needs_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    args = cast(make_problem((5,), 9, per_token=False), torch.float32)
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        run(args, "triton")


def test_layer_backend_triton_runs_the_kernel(monkeypatch):
    """`KalmanLinearAttention(backend="triton")` runs the chunked kernel (counted) and its
    readout equals the torch backend's in float32.

    Tolerance: each backend is within the kernel's tolerance of the exact filter (the torch
    odd-even scan at T = 21 has depth 10 < the kernel's 14 combines), so a slot's mean differs
    by at most twice it; the readout sums N = 4 slots with weights ``q_n``, ``|q|_2 = 1``, so
    ``sum |q_n| <= sqrt(N) = 2``: 4x the mean tolerance. The variance is a sum of positive
    terms: twice the relative variance tolerance.
    """
    import kernels.ops.kla.triton as kla_triton
    from kernels.layers.kla import KalmanLinearAttention

    calls = []
    kernel = kla_triton.kla_scan_triton

    def counted(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return kernel(*args, **kwargs)

    monkeypatch.setattr(kla_triton, "kla_scan_triton", counted)
    x = torch.randn(2, 21, 8, generator=torch.Generator().manual_seed(3))
    layers = {
        backend: KalmanLinearAttention(
            8, 4, backend=backend, generator=torch.Generator().manual_seed(0)
        )
        for backend in ("torch", "triton")
    }
    with torch.no_grad():
        (mean, var), (mean_ref, var_ref) = (layers[b].readout(x) for b in ("triton", "torch"))
        layers["triton"](x)
    assert calls == [(2, 21, 4, 1)] * 2  # keys (B, T, N, 1): the layer's state-expanded tokens
    tol = tolerance(KERNEL, "triton", "float32", "mean")
    assert_close("readout mean", mean, mean_ref, atol=4 * tol.atol, rtol=4 * tol.rtol)
    tol = tolerance(KERNEL, "triton", "float32", "variance")
    assert_close("readout variance", var, var_ref, atol=0.0, rtol=2 * tol.rtol)


# --- full size on a GPU -------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_forward_full_size_gpu(dtype):
    """T = 2^16, N x D = 4 x 16 channels, irregular steps: every readout against float64."""
    args = make_problem((4, 16), 2**16, per_token=True, batch=2, device="cuda")
    check_forward(args, dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gradients_full_size_gpu():
    args64 = make_problem((4, 16), 2**16, per_token=True, batch=1, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(1)
    weights = torch.randn(args64["q"].shape, generator=g, dtype=torch.float64, device="cuda")
    low = cast(args64, torch.float32, grad=True)
    high = cast(low, torch.float64, grad=True)
    for args, backend in ((high, "torch"), (low, "triton")):
        result = run(args, backend)
        (weights * (result.output + result.variance)).sum().backward()
    tol = tolerance(KERNEL, "triton", "float32", "grad")
    for name in ARGS:
        want = high[name].grad
        scale = want.abs().max()
        assert_close(f"d/d{name}", low[name].grad / scale, want / scale, atol=tol.atol)

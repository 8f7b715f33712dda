"""KLA's chunked CPU scan (``method="chunked"``, `kernels.ops.kla.chunked`) against its oracles.

The float64 oracle is `estimators.scan.kla_filter` (the information-filter recursion); the float32
comparison is the token loop (``method="sequential"``). Chunk lengths are forced through
`chunked_filter` so that every case of the layout runs: one chunk, T a multiple of C, a tail
``T - L C``, ``C > T``, ``C = 1``, and normalisations of the chunk products inside a chunk.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from estimators.scan import kla_filter
from kernels.ops.kla import kla_scan, ou_prior
from kernels.ops.kla.chunked import chunk_length, chunked_filter
from kernels.ops.kla.params import prepare
from kernels.ops.kla.scan import _result
from tests.kernels.helpers import assert_close

F64 = torch.float64
# the same float64 contract as the other scans (tests/kernels/test_kla_layer.py): the chunked
# scan regroups the same well-conditioned maps; asserted at 1e-12 relative plus 1e-12 of the
# field's largest magnitude
ORACLE_TOL = 1e-12
FIELDS = ("precision", "info_mean", "mean", "variance", "output", "output_variance")


def _problem(seed, B, T, D, *, zero_p=False, per_token=False, precise=False):
    rng = np.random.default_rng(seed)
    k = rng.uniform(-1.5, 1.5, (B, T, D))
    hi = 12.0 if precise else 1.5  # precise: phi up to ~4e5, so that pass 1 normalises often
    lam_v = np.exp(rng.uniform(-2.0, hi, (B, T, D)))
    lam_v[rng.random((B, T, D)) < 0.2] = 0.0
    v = rng.standard_normal((B, T, D))
    q = rng.standard_normal((B, T, D))
    a = rng.uniform(0.1, 2.0, D)
    p = np.zeros(D) if zero_p else rng.uniform(0.1, 2.0, D)
    dt = rng.uniform(0.01, 0.5, (B, T, 1)) if per_token else 0.1
    a_bar, p_bar = ou_prior(torch.tensor(a), torch.tensor(p), torch.tensor(dt))
    return k, lam_v, v, q, a_bar.numpy(), p_bar.numpy()


def _chunked(k, lam_v, v, a_bar, p_bar, q, lam0, eta0, chunk):
    args = prepare(*(torch.as_tensor(x) for x in (k, lam_v, v, a_bar, p_bar, q)), lam0, eta0)
    k, lam_v, v, a_bar, p_bar, q, lam0, eta0, shape = args
    readouts = chunked_filter(k, lam_v, v, a_bar, p_bar, lam0, eta0, shape, chunk=chunk)
    return _result(*readouts, q)


@pytest.mark.parametrize(
    ("T", "chunk"),
    [(1, None), (1, 4), (2, 1), (5, 8), (16, 4), (37, 6), (37, 37), (64, None), (200, 7)],
)
@pytest.mark.parametrize("case", ["plain", "zero_p", "per_token", "precise"])
def test_chunked_equals_numpy_information_filter(T, chunk, case):
    """float64, B = 3: every field equals the recursion at any T and C (tail, C > T, C = 1)."""
    k, lam_v, v, q, a_bar, p_bar = _problem(
        T,
        3,
        T,
        4,
        zero_p=case == "zero_p",
        per_token=case == "per_token",
        precise=case == "precise",
    )
    ref = kla_filter(k, lam_v, v, a_bar, p_bar, q=q, lam0=1.3, eta0=0.4, method="recursion")
    res = _chunked(k, lam_v, v, a_bar, p_bar, q, 1.3, 0.4, chunk)
    for name in FIELDS:
        expected = torch.tensor(getattr(ref, name))
        scale = expected.abs().max().item()
        assert_close(name, getattr(res, name), expected, atol=ORACLE_TOL * scale, rtol=ORACLE_TOL)
    assert_close("final lam", res.state.lam, torch.tensor(ref.precision[:, -1]), atol=0, rtol=1e-12)
    final_eta = torch.tensor(ref.info_mean[:, -1])
    atol = ORACLE_TOL * final_eta.abs().max().item()  # eta ~ lam mu grows like e^t when p = 0
    assert_close("final eta", res.state.eta, final_eta, atol=atol, rtol=ORACLE_TOL)


@pytest.mark.parametrize("T", [1, 3, 100, 1000, 4099])
def test_chunked_float32_within_the_token_loops_round_off(T):
    """float32 state-expanded tokens (B = 2, N = 3, D = 4): the chunked scan's distance to the
    float64 filter is at most 4x the token loop's own float32 error plus a few ulp of the field
    (both are float32 evaluations of one contracting filter; only the grouping differs)."""
    g = torch.Generator().manual_seed(T)
    B, N, D = 2, 3, 4
    k = torch.randn(B, T, N, 1, generator=g, dtype=F64)
    lam_v = 3 * torch.rand(B, T, 1, D, generator=g, dtype=F64)
    v = torch.randn(B, T, 1, D, generator=g, dtype=F64)
    a_bar, p_bar = ou_prior(torch.rand(N, D, generator=g, dtype=F64) + 0.1, torch.ones(N, D), 0.05)
    args = (k, lam_v, v, a_bar, p_bar)
    exact = kla_scan(*args, lam0=1.3, eta0=0.4, method="sequential")
    f32 = [x.float() for x in args]
    loop = kla_scan(*f32, lam0=1.3, eta0=0.4, method="sequential")
    chunked = kla_scan(*f32, lam0=1.3, eta0=0.4, method="chunked")
    for name in ("precision", "info_mean", "mean", "variance"):
        expected = getattr(exact, name)
        loop_err = (getattr(loop, name).double() - expected).abs().max().item()
        ulp = torch.finfo(torch.float32).eps * expected.abs().max().item()
        assert_close(name, getattr(chunked, name).double(), expected, atol=4 * loop_err + 4 * ulp)


def test_chunked_p0_fp32_mean_matches_float64():
    """p = 0 at T = 2048 (lam ~ e^{0.1 t} leaves float32): the float32 mean stays within 1e-4 of
    the float64 recursion, as the parallel scan's does (the same test in test_kla_layer.py)."""
    k, lam_v, v, q, _, _ = _problem(6, 1, 2048, 3, zero_p=True)
    a_bar = np.exp(-0.05 * np.ones(3))
    ref = kla_filter(k, lam_v, v, a_bar, 0.0, q=q, method="recursion")
    assert np.max(ref.precision) > 1e40
    f32 = (torch.tensor(x, dtype=torch.float32) for x in (k, lam_v, v, a_bar))
    res = kla_scan(*f32, 0.0, method="chunked")
    assert_close("mean", res.mean, torch.tensor(ref.mean), atol=1e-4, rtol=1e-4)
    assert torch.isfinite(res.variance).all()


def test_chunked_batch_carried_by_one_argument_only():
    """Keys without a batch axis of their own (1, T, D) and values of batch 2: the chunks take
    the token shape's batch, not the keys'; equal to the sequential loop in float64."""
    g = torch.Generator().manual_seed(7)
    k = torch.randn(1, 40, 3, generator=g, dtype=F64)
    v = torch.randn(2, 40, 3, generator=g, dtype=F64)
    res = kla_scan(k, 1.0, v, 0.9, 0.1, method="chunked")
    ref = kla_scan(k, 1.0, v, 0.9, 0.1, method="sequential")
    assert_close("mean", res.mean, ref.mean, atol=1e-13)
    assert_close("precision", res.precision, ref.precision, atol=0, rtol=1e-13)


def test_chunked_is_forward_only():
    """Inputs that require gradients: a RuntimeError naming the methods that differentiate;
    under torch.no_grad the same inputs run and agree with the parallel scan."""
    g = torch.Generator().manual_seed(4)
    k = torch.randn(1, 9, 2, generator=g, dtype=F64, requires_grad=True)
    v = torch.randn(1, 9, 2, generator=g, dtype=F64)
    with pytest.raises(RuntimeError, match="forward-only.*'parallel' or 'sequential'"):
        kla_scan(k, 1.0, v, 0.9, 0.1, method="chunked")
    with pytest.raises(RuntimeError, match="forward-only"):
        kla_scan(k.detach(), 1.0, v, torch.tensor(0.9, requires_grad=True), 0.1, method="chunked")
    with torch.no_grad():
        res = kla_scan(k, 1.0, v, 0.9, 0.1, method="chunked")
        ref = kla_scan(k, 1.0, v, 0.9, 0.1, method="parallel")
    assert_close("mean", res.mean, ref.mean, atol=1e-13)


def test_chunk_length_rule_and_argument():
    """C = ceil(sqrt T), 1 <= C <= T."""
    assert [chunk_length(t) for t in (1, 2, 4, 5, 4096, 4097, 65536)] == [1, 2, 2, 3, 64, 65, 256]
    x = torch.zeros(1, 4, 2, dtype=F64)
    args = prepare(x, 1.0, x, 0.9, 0.1, None, 1.0, 0.0)
    with pytest.raises(ValueError, match="chunk"):
        chunked_filter(*args[:5], *args[6:8], args[8], chunk=0)


def test_layer_with_chunked_method_for_inference():
    """`KalmanLinearAttention(method="chunked")`: under no_grad its output equals the parallel
    layer's (same seed) to float32 round-off; a training forward raises the forward-only error."""
    from kernels.layers.kla import KalmanLinearAttention

    x = torch.randn(2, 50, 8, generator=torch.Generator().manual_seed(1))
    layers = {
        m: KalmanLinearAttention(8, 4, method=m, generator=torch.Generator().manual_seed(0))
        for m in ("chunked", "parallel")
    }
    with torch.no_grad():
        out = {m: layer(x)[0] for m, layer in layers.items()}
    scale = out["parallel"].abs().max().item()
    # float32: both regroup one contracting filter over 50 tokens; 1e-5 of the output's scale
    # is ~100 ulp, far above the ~1e-7 observed and far below any modelling error
    assert_close("output", out["chunked"], out["parallel"], atol=1e-5 * scale)
    with pytest.raises(RuntimeError, match="forward-only"):
        layers["chunked"](x)

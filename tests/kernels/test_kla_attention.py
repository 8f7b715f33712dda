"""KLA's equivalent attention matrix (seed 001 App. E.4) against the float64 filters.

The weights must reproduce the filter's readout exactly: ``output_t = sum_s W[t, s] v_s +
initial_t eta0 / lam0`` against `estimators.scan.kla_filter` (token recursion) and the naive
loop; entrywise against the paper's own form ``diag(q / lam) W_E4`` built from the
information-form gates ``f_t``; causal (exactly zero above the diagonal, rows blind to later
tokens); and the layer's ``need_weights=True`` output against its readout.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from estimators.scan import kla_filter
from kernels.functional import kla_attention_matrix as functional_matrix
from kernels.layers.kla import KalmanLinearAttention
from kernels.ops.kla import kla_attention_matrix, naive_kla, ou_prior
from tests.kernels.test_kla_layer import _problem as layer_problem

F64 = torch.float64
# Each weight is a product of <= T gates and one coefficient, each within a few ulp of exact
# (the precision path from the scan is within ~8 t u, kla.scan-groupings-vs-sequential), so a
# weight's relative error is <= ~10 T^2 u ~ 1.5e-12 at T = 37; the sums over s are compared
# relative to sum_s |W v| (terms of mixed sign). Observed: ~1e-15.
TOL = 1e-11


def _problem(seed, B=2, T=37, D=5, *, zero_p=False, missing=0.2):
    """`tests.kernels.test_kla_layer`'s random problem with its OU prior discretised (dt 0.3)."""
    k, lam_v, v, q, a, p = layer_problem(seed, B, T, D, zero_p=zero_p, missing=missing)
    a_bar, p_bar = ou_prior(torch.tensor(a), torch.tensor(p), 0.3)
    return k, lam_v, v, q, a_bar.numpy(), p_bar.numpy()


def _apply(weights, v, initial=None, mu0=None):
    """``sum_s W[t, s] v_s`` (+ ``initial_t mu0``) and ``sum_s |W[t, s] v_s|`` for (B, D, T, T)
    weights and (B, T, D) values."""
    out = torch.einsum("bdts,bsd->btd", weights, v)
    scale = torch.einsum("bdts,bsd->btd", weights.abs(), v.abs())
    if initial is not None:
        out = out + initial * mu0[:, None]
        scale = scale + (initial * mu0[:, None]).abs()
    return out, scale


@pytest.mark.parametrize("zero_p", [False, True])
@pytest.mark.parametrize("T", [1, 2, 37])
def test_weights_times_values_is_the_filters_readout(zero_p, T):
    k, lam_v, v, q, a_bar, p_bar = _problem(1, T=T, zero_p=zero_p)
    lam0, eta0 = 1.3, np.array([[0.4, -0.2, 0.0, 1.0, 0.3], [0.1, 0.2, 0.3, -0.4, 0.5]])
    ref = kla_filter(k, lam_v, v, a_bar, p_bar, q=q, lam0=lam0, eta0=eta0, method="recursion")
    res = kla_attention_matrix(
        torch.tensor(k), torch.tensor(lam_v), torch.tensor(a_bar), torch.tensor(p_bar),
        q=torch.tensor(q), lam0=lam0,
    )  # fmt: skip
    assert res.weights.shape == (2, 5, T, T) and res.initial.shape == (2, T, 5)
    out, scale = _apply(res.weights, torch.tensor(v), res.initial, torch.tensor(eta0 / lam0))
    err = ((out - torch.tensor(ref.output)).abs() / scale.clamp_min(1e-300)).max().item()
    assert err < TOL, err
    # and the mean itself (no query) against the naive loop
    mean = kla_attention_matrix(
        torch.tensor(k), torch.tensor(lam_v), torch.tensor(a_bar), torch.tensor(p_bar), lam0=lam0
    )
    naive = naive_kla(k, lam_v, v, a_bar, p_bar, lam0=lam0, eta0=torch.tensor(eta0))
    out, scale = _apply(mean.weights, torch.tensor(v), mean.initial, torch.tensor(eta0 / lam0))
    assert ((out - naive.mean).abs() / scale.clamp_min(1e-300)).max().item() < TOL


def test_entries_equal_the_papers_information_form():
    """``M_seq[t, s] = q_t / lam_t (f_{s+1} ... f_t) k_s Lambda^v_s`` (App. E.4, Fig. 10) with
    ``f_t = a_bar / (a_bar^2 + p_bar lam_{t-1})`` (eq. (19)) from the numpy filter's precisions:
    the moment-form products telescope to it entry by entry."""
    k, lam_v, v, q, a_bar, p_bar = _problem(2, B=1, T=12, D=3, missing=0.0)
    lam0 = 0.7
    ref = kla_filter(k, lam_v, v, a_bar, p_bar, q=q, lam0=lam0, method="recursion")
    lam = ref.precision[0]  # (T, D)
    lam_prev = np.vstack([np.full((1, 3), lam0), lam[:-1]])
    f = a_bar / (a_bar**2 + p_bar * lam_prev)  # (T, D)
    T = lam.shape[0]
    want = np.zeros((3, T, T))
    for t in range(T):
        for s in range(t + 1):
            gates = np.prod(f[s + 1 : t + 1], axis=0)
            want[:, t, s] = q[0, t] / lam[t] * gates * k[0, s] * lam_v[0, s]
    got = kla_attention_matrix(
        torch.tensor(k), torch.tensor(lam_v), torch.tensor(a_bar), torch.tensor(p_bar),
        q=torch.tensor(q), lam0=lam0,
    ).weights[0].numpy()  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=TOL, atol=0)


def test_causal_and_independent_of_later_tokens():
    k, lam_v, v, q, a_bar, p_bar = _problem(3, B=1, T=10, D=4)
    args = [torch.tensor(x) for x in (k, lam_v, a_bar, p_bar)]
    w = kla_attention_matrix(*args, q=torch.tensor(q)).weights
    assert torch.equal(w.triu(1), torch.zeros_like(w))
    assert (w.diagonal(dim1=-2, dim2=-1) != 0).any()
    changed = [x.clone() for x in args]
    changed[0][:, 6:] += 1.0  # later keys
    changed[1][:, 6:] *= 3.0  # later precisions
    w2 = kla_attention_matrix(*changed, q=torch.tensor(q)).weights
    torch.testing.assert_close(w2[..., :6, :], w[..., :6, :], rtol=0, atol=0)
    assert not torch.allclose(w2[..., 6:, :], w[..., 6:, :])


def test_functional_export_and_errors():
    assert functional_matrix is kla_attention_matrix
    k = torch.ones(1, 4, 2, dtype=F64)
    with pytest.raises(ValueError, match="a_bar"):
        kla_attention_matrix(k, k, 0.0, 0.1)
    with pytest.raises(ValueError, match="value_precision"):
        kla_attention_matrix(k, -k, 0.9, 0.1)
    with pytest.raises(TypeError, match="k must be"):
        kla_attention_matrix([1.0], k, 0.9, 0.1)


def _layer(**kw):
    return KalmanLinearAttention(8, 4, generator=torch.Generator().manual_seed(0), dtype=F64, **kw)


@pytest.mark.parametrize("process_noise", [True, False])
@pytest.mark.parametrize("irregular", [False, True])
def test_layer_need_weights_reproduces_its_readout(process_noise, irregular):
    layer = _layer(process_noise=process_noise)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 13, 8, generator=gen, dtype=F64)
    t = torch.cumsum(torch.rand(13, generator=gen, dtype=F64) + 0.2, 0) if irregular else None
    with torch.no_grad():
        out, weights = layer(x, t, need_weights=True)
        mean, _ = layer.readout(x, t)
        values = layer.values(x)
    assert weights.shape == (2, 8, 13, 13)
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))
    y, scale = _apply(weights, values)
    assert ((y - mean).abs() / scale).max().item() < TOL
    torch.testing.assert_close(out, layer.out_proj(y), rtol=1e-12, atol=1e-12)
    assert layer(x, t)[1] is None

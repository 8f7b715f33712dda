"""The Gaussian unrolled AFA as chunked causal attention (`kernels.ops.unrolled.chunked`).

Oracle: `estimators.recurrent.eigen_recurrent_filter` at ``nu = inf`` (float64 numpy, the loop
of seed 000 B.2 with weight 1), reached through `kernels.ops.unrolled.unrolled_afa`,
which dispatches ``nu = inf`` here. Every chunk length, from one step to longer than the
sequence, gives the same filter: the chunk boundary carries the prediction as the next prior.
"""

import math

import numpy as np
import pytest
import torch

from estimators import recurrent as rec
from kernels.ops.common import complex_pairs
from kernels.ops.unrolled import kalman_attention, unrolled_afa
from tests.kernels.helpers import assert_close

# two float64 evaluations of one contractive recursion over ~40 steps: round-off, ~1e-15
ROUNDOFF = 1e-10


def _problem(seed=3, B=2, T=40, n=2, heads=2):
    """Irregular per-sequence times (B, T), heads with their own dynamics, a random
    non-unitary eigenbasis, heavy-tailed data and a proper prior per sequence and head."""
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.uniform(0.02, 0.9, size=(B, T)), axis=1)
    cols = rng.normal(size=(2 * n, n)) + 1j * rng.normal(size=(2 * n, n))
    S = np.stack([c for k in range(n) for c in (cols[:, k], cols[:, k].conj())], axis=1)
    z = rng.standard_t(3.0, size=(B, heads, T, 2 * n))
    zs = z @ np.linalg.inv(S).T
    values = torch.from_numpy(np.concatenate([zs.real, zs.imag], axis=-1))
    params = dict(
        decay=torch.tensor([0.3, 0.0]),
        frequencies=torch.from_numpy(rng.normal(size=(heads, 2 * n))),
        process_var=torch.tensor([0.2, 0.05]),
        measurement_var=torch.tensor([0.4, 0.9]),
    )
    params = {k: v.double() for k, v in params.items()}
    # conjugate frequency pairs: the eigenvalues of a real system
    params["frequencies"][:, 1::2] = -params["frequencies"][:, 0::2]
    prior_amb = rng.normal(size=(B, heads, 2 * n))
    ps = prior_amb @ np.linalg.inv(S).T
    prior = torch.from_numpy(np.concatenate([ps.real, ps.imag], axis=-1))
    prior_var = torch.from_numpy(rng.uniform(0.3, 2.0, size=(B, heads)))
    return S, z, t, values, params, prior_amb, prior, prior_var


@pytest.mark.parametrize("with_prior", [False, True])
@pytest.mark.parametrize("damping", [1.0, 0.6])
def test_unrolled_afa_at_nu_inf_equals_the_reference_loop(with_prior, damping):
    S, z, t, values, p, prior_amb, prior, prior_var = _problem()
    K = 2
    kw = dict(prior_mean=prior, prior_variance=prior_var) if with_prior else {}
    out = unrolled_afa(
        values, t=torch.from_numpy(t), nu=math.inf, iterations=K, damping=damping, **p, **kw
    )
    for b in range(z.shape[0]):
        for h in range(z.shape[1]):
            w = p["frequencies"][h].numpy()
            lam = -p["decay"][h].item() + 1j * w
            prior_kw = (
                dict(prior_mean=prior_amb[b, h], prior_variances=[prior_var[b, h].item()] * 4)
                if with_prior
                else {}
            )
            ref = rec.eigen_recurrent_filter(
                lam,
                S,
                [p["process_var"][h].item()] * 4,
                [p["measurement_var"][h].item()] * 4,
                z[b : b + 1, h],
                t[b],
                nu=math.inf,
                n_iter=K,
                tol=0.0,
                damping=damping,
                **prior_kw,
            )
            mean = (complex_pairs.to_complex(out.output[b, h]).numpy() @ S.T).real
            name = f"b={b} h={h} prior={with_prior} delta={damping}"
            assert_close(name, torch.from_numpy(mean), ref.means[0], atol=ROUNDOFF)
            assert_close(
                name + " precision",
                out.precision[b, h],
                1 / ref.mode_variances[0, :, 0],
                atol=0.0,
                rtol=ROUNDOFF,
            )
    assert torch.all(out.weight == 1)


@pytest.mark.parametrize("damping", [1.0, 0.5])
def test_auto_equals_the_loop_with_batched_times_and_a_prior(damping):
    """The two methods of `unrolled_afa` at nu = inf: every field to round-off, K = 3."""
    _, _, t, values, p, _, prior, prior_var = _problem(seed=9)
    kw = dict(t=torch.from_numpy(t), nu=math.inf, iterations=3, damping=damping, **p)
    kw.update(prior_mean=prior, prior_variance=prior_var)
    auto, loop = unrolled_afa(values, **kw), unrolled_afa(values, method="loop", **kw)
    for name, a, b in zip(auto._fields, auto, loop, strict=True):
        assert_close(f"{name} delta={damping}", a, b, atol=ROUNDOFF, rtol=ROUNDOFF)
    with pytest.raises(ValueError, match="method must be one of"):
        unrolled_afa(values, method="scan", **kw)


@pytest.mark.parametrize("chunk", [1, 2, 7, 39, 40, 256])
def test_every_chunk_length_gives_the_same_filter(chunk):
    _, _, t, values, p, _, prior, prior_var = _problem(seed=5)
    times = torch.from_numpy(t).unsqueeze(1)
    kw = dict(gain_scale=torch.tensor([0.7, 1.0], dtype=torch.float64), **p)
    whole = kalman_attention(values, times, chunk=1000, **kw)
    pieces = kalman_attention(values, times, chunk=chunk, **kw)
    for name, a, b in zip(
        ("output", "variance", "prediction", "pred var"), whole, pieces, strict=True
    ):
        assert_close(f"chunk={chunk} {name}", b, a, atol=ROUNDOFF, rtol=ROUNDOFF)
    with_prior = kalman_attention(
        values, times, chunk=chunk, prior_mean=prior, prior_variance=prior_var, **kw
    )
    assert torch.equal(with_prior[2][:, :, 0], prior)
    assert_close("prior pred var", with_prior[3][:, :, 0], prior_var, atol=0.0, rtol=0.0)


def test_gradients_match_finite_differences_across_chunks():
    """float64 gradcheck in every input (data, dynamics, noise, gain scale, prior) with three
    chunk boundaries inside the sequence."""
    _, _, t, values, p, _, prior, prior_var = _problem(seed=7, B=1, T=9, n=1)
    times = torch.from_numpy(t).unsqueeze(1)
    inputs = (
        values.clone().requires_grad_(),
        p["decay"].clone().add(0.05).requires_grad_(),
        p["frequencies"].clone().requires_grad_(),
        p["process_var"].clone().requires_grad_(),
        p["measurement_var"].clone().requires_grad_(),
        torch.tensor([0.8, 0.6], dtype=torch.float64, requires_grad=True),
        prior.clone().requires_grad_(),
        prior_var.clone().requires_grad_(),
    )

    def f(v, a, w, q, r, c, m0, p0):
        out = kalman_attention(
            v,
            times,
            decay=a,
            frequencies=w,
            process_var=q,
            measurement_var=r,
            gain_scale=c,
            prior_mean=m0,
            prior_variance=p0,
            chunk=3,
        )
        return out[0], out[1], out[3]

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7)


def test_a_non_finite_measurement_does_not_reach_earlier_outputs():
    """IEEE causality: a NaN or inf at the last step leaves every earlier output as it was
    (the masked product would give 0 x NaN = NaN; such input runs the loop)."""
    _, _, t, values, p, _, _, _ = _problem(seed=2)
    kw = dict(t=torch.from_numpy(t), nu=math.inf, **p)
    clean = unrolled_afa(values, **kw)
    for bad in (math.nan, math.inf):
        dirty = values.clone()
        dirty[:, :, -1, 0] = bad
        out = unrolled_afa(dirty, **kw)
        assert_close(
            f"{bad} earlier", out.output[:, :, :-1], clean.output[:, :, :-1], atol=ROUNDOFF
        )

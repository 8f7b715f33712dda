"""Kalman Linear Attention in torch (seed 001) against its float64 oracles.

The oracles: the numpy information filter `estimators.scan.kla_filter` and the family's naive
token loop `kernels.ops.kla.naive` (moment form, itself checked against the numpy filter here).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from estimators.closed_forms.kla import ou_discretisation
from estimators.scan import kla_filter
from kernels.layers.kla import KalmanLinearAttention
from kernels.ops.kla import (
    KLAState,
    kla_scan,
    kla_step,
    mc_marginal_nll,
    naive_kla,
    ou_prior,
)
from tests.kernels.helpers import assert_close

F64 = torch.float64
# float64 oracle: the scans regroup products of well-conditioned maps; observed errors are
# ~4e-15 relative (p = 0 worst), asserted at 1e-12 relative to each entry plus 1e-12 of the
# field's largest magnitude (entries that cancel to near 0, e.g. eta, get an absolute floor).
ORACLE_TOL = 1e-12


def _problem(seed, B=2, T=37, D=5, *, zero_p=False, missing=0.2):
    rng = np.random.default_rng(seed)
    k = rng.uniform(-1.5, 1.5, (B, T, D))
    lam_v = np.exp(rng.uniform(-2.0, 1.5, (B, T, D)))
    lam_v[rng.random((B, T, D)) < missing] = 0.0  # missing tokens: pure prediction steps
    v = rng.standard_normal((B, T, D))
    q = rng.standard_normal((B, T, D))
    a = rng.uniform(0.1, 2.0, D)
    p = np.zeros(D) if zero_p else rng.uniform(0.1, 2.0, D)
    return k, lam_v, v, q, a, p


def _fields(res):
    return {
        "precision": res.precision,
        "info_mean": res.info_mean,
        "mean": res.mean,
        "variance": res.variance,
        "output": res.output,
        "output_variance": res.output_variance,
    }


@pytest.mark.parametrize("zero_p", [False, True])
@pytest.mark.parametrize("method", ["parallel", "hillis-steele", "sequential", "chunked"])
@pytest.mark.parametrize("T", [1, 2, 37, 64])
def test_scan_equals_numpy_information_filter(zero_p, method, T):
    k, lam_v, v, q, a, p = _problem(1, T=T, zero_p=zero_p)
    a_bar, p_bar = ou_prior(torch.tensor(a), torch.tensor(p), 0.1)
    ref = kla_filter(
        k, lam_v, v, a_bar.numpy(), p_bar.numpy(), q=q, lam0=1.3, eta0=0.4, method="recursion"
    )
    res = kla_scan(
        *(torch.tensor(x) for x in (k, lam_v, v)),
        a_bar,
        p_bar,
        q=torch.tensor(q),
        lam0=1.3,
        eta0=0.4,
        method=method,
    )
    for name, actual in _fields(res).items():
        expected = torch.tensor(getattr(ref, name))
        scale = expected.abs().max().item()  # entries near 0 get the field's absolute scale
        assert_close(name, actual, expected, atol=ORACLE_TOL * scale, rtol=ORACLE_TOL)
    assert_close("final lam", res.state.lam, torch.tensor(ref.precision[:, -1]), atol=0, rtol=1e-12)


@pytest.mark.parametrize("zero_p", [False, True])
def test_naive_equals_numpy_information_filter(zero_p):
    """The naive oracle (moment form, token by token) = the numpy information filter: two
    independent float64 routes, missing tokens included."""
    k, lam_v, v, q, a, p = _problem(10, T=37, zero_p=zero_p)
    a_bar, p_bar = ou_prior(torch.tensor(a), torch.tensor(p), 0.1)
    ref = kla_filter(
        k, lam_v, v, a_bar.numpy(), p_bar.numpy(), q=q, lam0=1.3, eta0=0.4, method="recursion"
    )
    res = naive_kla(
        *(torch.tensor(x) for x in (k, lam_v, v)), a_bar, p_bar, q=torch.tensor(q), lam0=1.3,
        eta0=0.4,
    )  # fmt: skip
    for name, actual in _fields(res).items():
        expected = torch.tensor(getattr(ref, name))
        scale = expected.abs().max().item()
        assert_close(name, actual, expected, atol=ORACLE_TOL * scale, rtol=ORACLE_TOL)


@pytest.mark.parametrize("method", ["parallel", "hillis-steele", "sequential", "chunked"])
def test_scan_equals_naive_state_expanded_irregular(method):
    """Every scan = the naive oracle on (B, T, N, D) tokens (keys (B, T, N, 1), values
    (B, T, 1, D)) with a per-token prior (irregular steps) and a per-row initial belief."""
    g = torch.Generator().manual_seed(12)
    B, T, N, D = 2, 19, 3, 4
    k = torch.randn(B, T, N, 1, generator=g, dtype=F64)
    lam_v = torch.exp(torch.randn(B, T, 1, D, generator=g, dtype=F64))
    lam_v = torch.where(torch.rand(B, T, 1, D, generator=g, dtype=F64) < 0.2, 0.0, lam_v)
    v = torch.randn(B, T, 1, D, generator=g, dtype=F64)
    q = torch.randn(B, T, N, 1, generator=g, dtype=F64)
    dt = 0.05 + torch.rand(B, T, 1, 1, generator=g, dtype=F64)
    rate, diffusion = (0.1 + torch.rand(N, D, generator=g, dtype=F64) for _ in range(2))
    a_bar, p_bar = ou_prior(rate, diffusion, dt)
    lam0 = 0.5 + torch.rand(B, N, D, generator=g, dtype=F64)
    eta0 = torch.randn(B, N, D, generator=g, dtype=F64)
    args = (k, lam_v, v, a_bar, p_bar)
    res = kla_scan(*args, q=q, lam0=lam0, eta0=eta0, method=method)
    ref = naive_kla(*args, q=q, lam0=lam0, eta0=eta0)
    for name, expected in _fields(ref).items():
        scale = expected.abs().max().item()
        assert_close(name, _fields(res)[name], expected, atol=ORACLE_TOL * scale, rtol=ORACLE_TOL)
    assert_close("final lam", res.state.lam, ref.state.lam, atol=0, rtol=ORACLE_TOL)


def test_per_token_prior_matches_numpy():
    """Irregular steps: a_bar_t, p_bar_t per token (B, T, D) as in `kla_filter`."""
    k, lam_v, v, q, a, p = _problem(8, T=23)
    dt = np.random.default_rng(9).uniform(0.01, 0.5, (2, 23, 1))
    a_bar, p_bar = ou_prior(torch.tensor(a), torch.tensor(p), torch.tensor(dt))
    assert a_bar.shape == (2, 23, 5)
    ref = kla_filter(k, lam_v, v, a_bar.numpy(), p_bar.numpy(), q=q, method="recursion")
    res = kla_scan(*(torch.tensor(x) for x in (k, lam_v, v)), a_bar, p_bar, q=torch.tensor(q))
    assert_close("output", res.output, torch.tensor(ref.output), atol=1e-13)
    assert_close("variance", res.variance, torch.tensor(ref.variance), atol=0, rtol=1e-13)


def test_ou_prior_matches_eq8_and_code_convention():
    a, p, dt = np.array([0.0, 1e-9, 0.3, 2.0]), np.array([0.5, 1.0, 1.5, 0.2]), 0.1
    ref = ou_discretisation(a, p, dt)
    a_bar, p_bar = ou_prior(torch.tensor(a), torch.tensor(p), dt)
    assert_close("a_bar", a_bar, torch.tensor(ref.a_bar), atol=0, rtol=1e-15)
    assert_close("p_bar", p_bar, torch.tensor(ref.p_bar), atol=0, rtol=1e-14)
    _, p_code = ou_prior(torch.tensor(a), torch.tensor(p**2), dt, convention="code")
    assert_close("code p_bar(p^2) = paper p_bar(p)", p_code, p_bar, atol=0, rtol=1e-15)
    with pytest.raises(ValueError, match="convention"):
        ou_prior(torch.tensor(a), torch.tensor(p), dt, convention="zoh")


def test_state_expanded_layout_matches_per_channel_filters():
    """Keys (B, T, N, 1) and values (B, T, 1, D) broadcast to N x D scalar filters (eq. 22-23)."""
    rng = np.random.default_rng(2)
    B, T, N, D = 2, 9, 3, 4
    k = rng.standard_normal((B, T, N, 1))
    lam_v = np.exp(rng.standard_normal((B, T, 1, D)))
    v = rng.standard_normal((B, T, 1, D))
    a_bar = np.exp(-rng.uniform(0.01, 0.3, (N, D)))
    p_bar = rng.uniform(0.01, 0.5, (N, D))
    res = kla_scan(*(torch.tensor(x) for x in (k, lam_v, v, a_bar, p_bar)))
    full = [np.broadcast_to(x, (B, T, N, D)).reshape(B, T, N * D) for x in (k, lam_v, v)]
    ref = kla_filter(*full, a_bar.reshape(-1), p_bar.reshape(-1), method="recursion")
    assert_close("mean", res.mean.reshape(B, T, N * D), torch.tensor(ref.mean), atol=1e-13)


def test_step_loop_equals_parallel_scan():
    k, lam_v, v, q, a, p = _problem(3, T=20)
    tk, tl, tv, tq = (torch.tensor(x) for x in (k, lam_v, v, q))
    a_bar, p_bar = ou_prior(torch.tensor(a), torch.tensor(p), 0.2)
    res = kla_scan(tk, tl, tv, a_bar, p_bar, q=tq)
    state = KLAState(torch.ones(2, 5, dtype=F64), torch.zeros(2, 5, dtype=F64))
    outs = []
    for t in range(20):
        state, y = kla_step(state, tk[:, t], tl[:, t], tv[:, t], a_bar, p_bar, q_t=tq[:, t])
        outs.append(y)
    assert_close("outputs", torch.stack(outs, 1), res.output, atol=1e-13)
    assert_close("final lam", state.lam, res.state.lam, atol=0, rtol=1e-13)
    assert_close("final eta", state.eta, res.state.eta, atol=1e-13)


@pytest.mark.parametrize("method", ["parallel", "hillis-steele", "sequential"])
def test_gradcheck_scan(method):
    g = torch.Generator().manual_seed(4)
    B, T, D = 1, 5, 2
    k = torch.randn(B, T, D, generator=g, dtype=F64, requires_grad=True)
    lam_v = (torch.rand(B, T, D, generator=g, dtype=F64) + 0.5).requires_grad_()
    v = torch.randn(B, T, D, generator=g, dtype=F64, requires_grad=True)
    a_bar = (0.5 + 0.4 * torch.rand(D, generator=g, dtype=F64)).requires_grad_()
    p_bar = (0.1 + torch.rand(D, generator=g, dtype=F64)).requires_grad_()
    q = torch.randn(B, T, D, generator=g, dtype=F64, requires_grad=True)

    def outputs(*args):
        res = kla_scan(*args[:5], q=args[5], method=method)
        return res.output, res.output_variance

    assert torch.autograd.gradcheck(outputs, (k, lam_v, v, a_bar, p_bar, q))


@pytest.mark.parametrize("method", ["parallel", "chunked"])
def test_long_sequence_fp32_finite_and_accurate(method):
    """T = 65536 in fp32 stays finite; p = 0 keeps finite mean and variance (renormalised) while
    the precision passes the float32 range (the true lam is ~e^{6553})."""
    g = torch.Generator().manual_seed(5)
    T, D = 65536, 2
    k = torch.randn(1, T, D, generator=g)
    lam_v = 3 * torch.rand(1, T, D, generator=g)
    v = torch.randn(1, T, D, generator=g)
    for p in (1.0, 0.0):
        a_bar, p_bar = ou_prior(torch.full((D,), 0.5), torch.full((D,), p), torch.tensor(0.1))
        res = kla_scan(k, lam_v, v, a_bar, p_bar, q=torch.ones(D), method=method)
        for name in ("mean", "variance", "output", "output_variance"):
            assert torch.isfinite(getattr(res, name)).all(), (p, name)
        if p > 0:
            assert torch.isfinite(res.precision).all()
            # precision bounded by 1/p_bar + phi (digest C11)
            assert (res.precision <= 1 / p_bar + k * k * lam_v + 1e-3).all()
        else:
            assert torch.isinf(res.precision[:, -1]).all()


def test_zero_process_noise_fp32_matches_float64_beyond_fp32_range():
    """p = 0: lam grows like a_bar^{-2t} = e^{0.1 t}; at T = 2048 it exceeds the fp32 range (e^88)
    yet the fp32 mean stays within 1e-4 of the float64 filter (information form would overflow)."""
    k, lam_v, v, q, a, _ = _problem(6, B=1, T=2048, D=3, zero_p=True)
    a_bar = np.exp(-0.05 * np.ones(3))
    ref = kla_filter(k, lam_v, v, a_bar, 0.0, q=q, method="recursion")
    assert np.max(ref.precision) > 1e40
    res = kla_scan(*(torch.tensor(x, dtype=torch.float32) for x in (k, lam_v, v, a_bar)), 0.0)
    assert_close("mean", res.mean, torch.tensor(ref.mean), atol=1e-4, rtol=1e-4)
    assert torch.isfinite(res.variance).all()


def test_scan_argument_errors():
    x = torch.zeros(1, 4, 2)
    with pytest.raises(ValueError, match="method"):
        kla_scan(x, 1.0, x, 0.9, 0.1, method="blelloch")
    with pytest.raises(ValueError, match="a_bar"):
        kla_scan(x, 1.0, x, 0.0, 0.1)
    with pytest.raises(ValueError, match="p_bar"):
        kla_scan(x, 1.0, x, 0.9, -0.1)
    with pytest.raises(ValueError, match="value_precision"):
        kla_scan(x, -torch.ones(1, 4, 2), x, 0.9, 0.1)
    with pytest.raises(ValueError, match="broadcast"):
        kla_scan(x, 1.0, torch.zeros(1, 4, 3), 0.9, 0.1)
    with pytest.raises(ValueError, match=r"\(B, T, \*S\)"):
        kla_scan(torch.zeros(4, 2), 1.0, torch.zeros(4, 2), 0.9, 0.1)
    with pytest.raises(ValueError, match="lam0"):
        kla_scan(x, 1.0, x, 0.9, 0.1, lam0=0.0)
    with pytest.raises(ValueError, match="lam0"):
        kla_scan(x, 1.0, x, 0.9, 0.1, lam0=torch.ones(3))
    with pytest.raises(TypeError, match="k"):
        kla_scan(np.zeros((1, 4, 2)), 1.0, x, 0.9, 0.1)


def test_step_argument_errors():
    """`kla_step` refuses what the filter cannot mean, naming the argument: no state, a state
    of two shapes, a negative precision (state or value), a_bar <= 0, p_bar < 0, tokens that
    do not broadcast to the state; a valid call still runs."""
    lam, eta = torch.ones(2, 3, dtype=F64), torch.zeros(2, 3, dtype=F64)
    ok = dict(k_t=1.0, value_precision_t=2.0, v_t=torch.ones(2, 3, dtype=F64), a_bar=0.9, p_bar=0.1)
    state, out = kla_step(KLAState(lam, eta), **ok, q_t=1.0)
    assert torch.isfinite(state.lam).all() and out.shape == (2, 3)
    cases = [
        (None, {}, TypeError, "state must be a KLAState"),
        (KLAState(lam, eta[:1]), {}, ValueError, "one shape"),
        (KLAState(-lam, eta), {}, ValueError, "state.lam must be >= 0"),
        (KLAState(lam, eta), {"value_precision_t": -1.0}, ValueError, "value_precision_t"),
        (KLAState(lam, eta), {"a_bar": 0.0}, ValueError, "a_bar must be > 0"),
        (KLAState(lam, eta), {"p_bar": -0.1}, ValueError, "p_bar must be >= 0"),
        (KLAState(lam, eta), {"v_t": torch.ones(4, 3, dtype=F64)}, ValueError, "broadcast"),
        (KLAState(lam, eta), {"k_t": 1j}, TypeError, "k_t must be real"),
    ]
    for state, change, error, words in cases:
        with pytest.raises(error, match=words):
            kla_step(state, **{**ok, **change})


def test_mc_marginal_nll_logsumexp_and_jensen():
    g = torch.Generator().manual_seed(7)
    mean = torch.randn(3, 4, 6, generator=g, dtype=F64)
    var = torch.rand(3, 4, 6, generator=g, dtype=F64)
    target = torch.randint(0, 5, (3, 4), generator=g)
    W = torch.randn(6, 5, generator=g, dtype=F64)

    def decoder(z):
        return z @ W

    S = 7
    loss = mc_marginal_nll(
        mean, var, target, decoder, num_samples=S, generator=torch.Generator().manual_seed(1)
    )
    eps = torch.randn((S, 3, 4, 6), generator=torch.Generator().manual_seed(1), dtype=F64)
    probs = torch.softmax(decoder(mean + var.sqrt() * eps), -1)
    p_t = probs.gather(-1, target.expand(S, 3, 4).unsqueeze(-1)).squeeze(-1)
    direct = -torch.log(p_t.mean(0)).mean()
    assert_close("eq. (24) direct average", loss, direct, atol=1e-13)
    assert loss <= (-torch.log(p_t)).mean() + 1e-12  # Jensen: below the per-sample CE
    zero = mc_marginal_nll(mean, torch.zeros_like(var), target, decoder, num_samples=3)
    ce = torch.nn.functional.cross_entropy(decoder(mean).reshape(-1, 5), target.reshape(-1))
    assert_close("zero variance = CE of the mean", zero, ce, atol=1e-13)
    with pytest.raises(ValueError, match="num_samples"):
        mc_marginal_nll(mean, var, target, decoder, num_samples=0)
    with pytest.raises(ValueError, match="target"):
        mc_marginal_nll(mean, var, target[:, :2], decoder)


# --- module ---------------------------------------------------------------------------------------


def _layer(seed=0, **kw):
    return KalmanLinearAttention(
        8, 4, generator=torch.Generator().manual_seed(seed), dtype=F64, **kw
    )


def test_layer_shapes_and_step_decoding_equals_forward():
    layer = _layer()
    x = torch.randn(2, 11, 8, generator=torch.Generator().manual_seed(1), dtype=F64)
    out, weights = layer(x)
    assert out.shape == (2, 11, 8) and weights is None
    state, outs = None, []
    for i in range(11):
        o, state = layer.step(x[:, i], state)
        outs.append(o)
    assert_close("step loop", torch.stack(outs, 1), out, atol=1e-13)
    seq = _layer(method="sequential")(x)[0]
    assert_close("sequential method", seq, out, atol=1e-13)
    mean, var = layer.readout(x)
    assert mean.shape == var.shape == (2, 11, 8) and (var > 0).all()


def test_step_decoding_in_the_default_dtype_as_a_user_runs_it():
    """No dtype given: every parameter is in the default dtype (float32), so the O(1) decoding
    step runs on float32 tokens (the prior's parameters were once float64 and `step` raised a
    dtype mismatch that `forward` hid) and equals `forward` to float32 round-off."""
    layer = KalmanLinearAttention(8, num_slots=4, generator=torch.Generator().manual_seed(0))
    assert {p.dtype for p in layer.parameters()} == {torch.get_default_dtype()}
    x = torch.randn(2, 11, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out, _ = layer(x)
        state, outs = None, []
        for i in range(11):
            o, state = layer.step(x[:, i], state)
            outs.append(o)
    assert_close("float32 step loop", torch.stack(outs, 1), out, atol=1e-5)


def test_layer_irregular_times_and_shift_invariance():
    layer = _layer(p_convention="code")
    x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(2), dtype=F64)
    t = torch.cumsum(torch.rand(2, 7, generator=torch.Generator().manual_seed(3), dtype=F64), 1)
    out = layer(x, t + 0.1)[0]
    assert_close("t -> t + c", layer(x, t + 17.0)[0], out, atol=1e-13)
    assert_close("t = arange is the default", layer(x, torch.arange(7.0))[0], layer(x)[0], atol=0)
    state, outs, prev = None, [], None
    for i in range(7):  # stepping with the gaps reproduces the batch-0 irregular forward
        gap = 1.0 if prev is None else float(t[0, i] - prev)
        o, state = layer.step(x[:1, i], state, gap=gap)
        outs.append(o)
        prev = t[0, i]
    assert_close("irregular step loop", torch.stack(outs, 1), out[:1], atol=1e-13)


def test_layer_is_causal():
    layer = _layer()
    x = torch.randn(1, 10, 8, generator=torch.Generator().manual_seed(4), dtype=F64)
    y = x.clone()
    y[:, 6:] += torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(5), dtype=F64)
    a, b = layer(x)[0], layer(y)[0]
    assert_close("outputs before the perturbation", b[:, :6], a[:, :6], atol=0)
    assert (b[:, 6:] - a[:, 6:]).abs().max() > 1e-6


@pytest.mark.parametrize("process_noise", [True, False])
def test_layer_gradients_reach_every_parameter(process_noise):
    layer = _layer(process_noise=process_noise)
    x = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(6), dtype=F64)
    layer(x)[0].pow(2).sum().backward()
    names = {n for n, _ in layer.named_parameters()}
    assert ("raw_diffusion" in names) == process_noise
    for name, param in layer.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_layer_generator_only_init():
    before = torch.random.get_rng_state()
    a, b, c = _layer(3), _layer(3), _layer(4)
    assert torch.equal(torch.random.get_rng_state(), before)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.raw_step, c.raw_step)
    step = torch.nn.functional.softplus(a.raw_step)
    assert (step >= 1e-3 - 1e-12).all() and (step <= 1e-1 + 1e-12).all()
    f32 = KalmanLinearAttention(8, 4, generator=torch.Generator().manual_seed(0))
    assert f32.in_proj.weight.dtype == torch.float32


def test_layer_backend_reaches_the_scan(monkeypatch):
    """``backend`` is stored and handed to `kla_scan` at every forward (the readout path);
    the decoding step stays torch. An unknown backend is refused at construction."""
    import kernels.layers.kla as kla_layer

    seen = []

    def spy(*args, **kwargs):
        seen.append(kwargs["backend"])
        return kla_scan(*args, **kwargs)

    monkeypatch.setattr(kla_layer, "kla_scan", spy)
    x = torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(9), dtype=F64)
    for backend in ("auto", "torch"):
        layer = _layer(backend=backend)
        assert layer.backend == backend
        layer(x)
        layer.readout(x)
    assert seen == ["auto", "auto", "torch", "torch"]
    assert _layer().backend == "auto"
    with pytest.raises(ValueError, match="backend must be one of"):
        KalmanLinearAttention(8, 4, backend="cuda")
    # float64 on the fused kernel is refused by the backend rule, naming the dtype
    with pytest.raises(ValueError, match="torch.float64"):
        _layer(backend="triton")(x)


def test_layer_errors():
    layer = _layer()
    x = torch.zeros(1, 5, 8, dtype=F64)
    with pytest.raises(ValueError, match="embed_dim"):
        KalmanLinearAttention(0, 4)
    with pytest.raises(ValueError, match="num_slots"):
        KalmanLinearAttention(8, 2.5)
    with pytest.raises(ValueError, match="p_convention"):
        KalmanLinearAttention(8, 4, p_convention="zoh")
    with pytest.raises(ValueError, match="method"):
        KalmanLinearAttention(8, 4, method="blelloch")
    with pytest.raises(ValueError, match=r"\(B, T, 8\)"):
        layer(torch.zeros(1, 5, 7, dtype=F64))
    with pytest.raises(TypeError, match="dtype"):
        layer(torch.zeros(1, 5, 8))
    with pytest.raises(ValueError, match="increasing"):
        layer(x, torch.tensor([0.0, 1.0, 1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="x_t"):
        layer.step(x)
    with pytest.raises(ValueError, match="state"):
        layer.step(x[:, 0], KLAState(torch.ones(1, 4, 7), torch.ones(1, 4, 7)))
    with pytest.raises(ValueError, match="gap"):
        layer.step(x[:, 0], gap=0.0)

"""Robust Filter Attention (seed 004 Algorithm 1): oracle, limits, ablations, properties.

The float64 ground truth is `estimators` (eq. 4 = `eigen_batch_mle` / `batch_mle`; the
Student-t layer = one step of `estimators.irls` with the power family from the measurement
initialisation) on data simulated by `sde_sim` from isotropic systems. An explicit loop over
``(i, j)`` in ``torch.complex`` checks the real-pair factorisation and every ablation switch.
"""

import math

import numpy as np
import pytest
import torch

from estimators.closed_forms.measurement import alibi_slope, zero_decay_bias
from estimators.irls import robust_estimate
from estimators.mle import DiagonalizableModel, batch_mle, eigen_batch_mle, eigen_pairwise_terms
from kernels.layers import heads as heads_mod
from kernels.layers.rfa import RobustFilterAttention
from kernels.ops import baselines
from kernels.ops.common import complex_pairs, positional
from kernels.ops.rfa import rfa_attention, rfa_lag_kernel
from kernels.ops.rfa.naive import rfa_loop
from sde_sim import LinearMeasurement, PoissonTimes, SphericalShellInitial, presets, simulate
from tests.kernels.helpers import assert_close, record_inplace_paths

F64 = torch.float64
# Float64 oracle tolerance: the layer and the estimator differ only by round-off (measured
# ~1e-14 on these O(1)-O(10) signals).
ORACLE_ATOL = 1e-10


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------------
# An explicit (i, j) loop in complex arithmetic, with every ablation switch
# --------------------------------------------------------------------------------------------


def _params(H, n, gen, *, with_zero_decay=True):
    decay = torch.rand(H, dtype=F64, generator=gen) + 0.2
    if with_zero_decay:
        decay[0] = 0.0
    return {
        "decay": decay,
        "frequencies": torch.randn(H, n, dtype=F64, generator=gen),
        "process_var": torch.rand(H, dtype=F64, generator=gen) + 0.1,
        "measurement_var": torch.rand(H, dtype=F64, generator=gen) + 0.5,
        "anchor_var": torch.rand(H, dtype=F64, generator=gen) * 0.3,
        "nu": torch.rand(H, dtype=F64, generator=gen) * 10 + 0.5,
        "temperature": torch.rand(H, dtype=F64, generator=gen) + 0.5,
    }


def _qkv(B, H, T, D, gen, dtype=F64):
    return tuple(torch.randn(B, H, T, D, dtype=dtype, generator=gen) for _ in range(3))


ABLATIONS = {
    "full": {},
    "M2.1 exponential kernel": {"weight_kernel": "exponential"},
    "M2.2 flat prior": {"precision_prior": False},
    "M2.3 no gate": {"precision_gate": False},
    "M2.4 no value rotation": {"rotate_values": False},
    "M2.5 no rotations": {"rotate_qk": False, "rotate_values": False},
    "M2.6 unitary limit": {"unitary_limit": True},
}


@pytest.mark.parametrize("name", list(ABLATIONS))
@pytest.mark.parametrize("causal", [True, False])
def test_equals_complex_loop_for_every_switch(name, causal):
    gen = _gen(0)
    B, H, T, D = 2, 2, 5, 4
    q, k, v = _qkv(B, H, T, D, gen)
    p = _params(H, D // 2, gen)
    t = torch.cumsum(torch.rand(B, T, dtype=F64, generator=gen) + 0.2, dim=1)
    flags = ABLATIONS[name]
    ref_out, ref_w = rfa_loop(q, k, v, t, p, causal=causal, **flags)
    for stamps, block in ((t, 2), (None, 2), (None, None)):
        times = t if stamps is not None else torch.arange(T, dtype=F64).expand(B, T)
        if stamps is None:
            ref_out, ref_w = rfa_loop(q, k, v, times, p, causal=causal, **flags)
        got = rfa_attention(
            q, k, v, t=stamps, causal=causal, return_weights=True, block_size=block, **p, **flags
        )
        assert_close(f"{name} output", got.output, ref_out, atol=1e-12)
        assert_close(f"{name} weights", got.weights, ref_w, atol=1e-12)
        plain = rfa_attention(q, k, v, t=stamps, causal=causal, block_size=block, **p, **flags)
        assert plain.weights is None
        assert_close(f"{name} without weights", plain.output, got.output, atol=1e-14)


@pytest.mark.parametrize("name", list(ABLATIONS))
@pytest.mark.parametrize("stamps", ["uniform", "irregular"])
@pytest.mark.parametrize("rational", [False, True])
def test_inplace_inference_path_equals_the_loop_and_the_autograd_path(
    name, stamps, rational, monkeypatch
):
    """Without autograd a causal call without weights runs in place (issue 19: keys in chunks
    with an online softmax, queries in groups of whole blocks) where the penalty is "log": on
    the uniform grid `_attend_bounded` (the bias' maximum for the row maximum; with ``tau
    kappa = 1``, ``rational``, one division for the log and exp), on stamps `_attend_inplace`.
    The same output as the complex loop and the autograd path at T = 11 (not a multiple of the
    block, the group or the chunk: chunks of 4, 4, 3 keys for the last group), for every
    ablation switch (the others keep the whole-row path)."""
    from kernels.ops.rfa import isotropic

    monkeypatch.setattr(isotropic, "_INFERENCE_KEY_CHUNK", 4)
    monkeypatch.setattr(isotropic, "_INFERENCE_ROWS", 4)  # groups of 2 blocks of 2 queries
    seen = record_inplace_paths(monkeypatch, isotropic, "_attend_inplace")
    gen = _gen(19)
    B, H, T, D = 2, 2, 11, 4
    q, k, v = _qkv(B, H, T, D, gen)
    p = _params(H, D // 2, gen)
    if rational:  # tau kappa = tau (nu + n) / n = 1 (exactly: nu = n, tau = 1 / 2)
        p["nu"], p["temperature"] = (
            torch.full((H,), D / 2, dtype=F64),
            torch.full((H,), 0.5, dtype=F64),
        )
    t = torch.cumsum(torch.rand(B, T, dtype=F64, generator=gen) + 0.2, dim=1)
    times = t if stamps == "irregular" else torch.arange(T, dtype=F64).expand(B, T)
    flags = ABLATIONS[name]
    ref_out, _ = rfa_loop(q, k, v, times, p, causal=True, **flags)
    stamp = t if stamps == "irregular" else None
    with torch.no_grad():
        fast = rfa_attention(q, k, v, t=stamp, causal=True, block_size=2, **p, **flags)
    runs_inplace = name not in ("M2.1 exponential kernel", "M2.6 unitary limit")
    path = "bounded" if stamps == "uniform" else "exact"
    assert ([4, 4, 3] in seen[path]) == runs_inplace, seen
    assert seen["fallbacks"] == 0 and seen["rational"] <= {rational}
    calls = len(seen["bounded"]) + len(seen["exact"])
    assert_close(f"{name} in-place path", fast.output, ref_out, atol=1e-12)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    slow = rfa_attention(*leaves, t=stamp, causal=True, block_size=2, **p, **flags)
    assert len(seen["bounded"]) + len(seen["exact"]) == calls  # autograd: out-of-place path
    assert_close(f"{name} in-place vs autograd path", fast.output, slow.output, atol=1e-12)


# Extreme inputs for `_attend_bounded`: (changes, whether it falls back in float32, in float64)
_EXTREME = {
    # sigma^2 = 0, anchor 0: tau log P = 2 a tau - log eta^2 grows by 1.1 a lag, so a chunk's
    # first row sees at most e^{-69} of the bound (below n tiny / eps in float32 only)
    "no process noise": ({"process_var": 0.0, "anchor_var": 0.0, "decay": 0.55}, True, False),
    # tau kappa = 500 (1 + 1 / n): (1 + u)^-500 with u ~ 10 at lag 0, below either range
    "large temperature": ({"temperature": 500.0}, True, True),
    # query 7 of magnitude ~1e13: u ~ 1e27, (1 + u)^-2 below float32's range
    "outlier": ({"temperature": 2.0, "outlier": 1e13}, True, False),
    "tiny decay": ({"decay": 1e-8}, False, False),
    "huge decay": ({"decay": 30.0}, False, False),
}


@pytest.mark.parametrize("case", list(_EXTREME))
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_bounded_inference_path_at_extreme_inputs(case, dtype, monkeypatch):
    """`_attend_bounded` replaces the row maximum by the bias'. Where that bound is so far
    above a row's maximum that the row's terms leave the dtype's range (`_EXTREME`) it must
    fall back to `_attend_inplace` (the exact row maximum), elsewhere agree without one; the
    output equals the float64 autograd path (float32: the exact in-place path)."""
    from kernels.ops.rfa import isotropic

    monkeypatch.setattr(isotropic, "_INFERENCE_KEY_CHUNK", 64)
    monkeypatch.setattr(isotropic, "_INFERENCE_ROWS", 64)  # block 16: chunks of 64 and 16 keys
    seen = record_inplace_paths(monkeypatch, isotropic, "_attend_inplace")
    gen = _gen(20)
    B, H, T, D = 2, 3, 80, 8
    q, k, v = _qkv(B, H, T, D, gen)
    changes, f32_falls_back, f64_falls_back = _EXTREME[case]
    p = {
        "decay": torch.tensor([0.05, 0.3, 1.0], dtype=F64),
        "frequencies": torch.randn(H, D // 2, dtype=F64, generator=gen),
        "process_var": torch.full((H,), 0.2, dtype=F64),
        "measurement_var": torch.full((H,), 0.5, dtype=F64),
        "anchor_var": torch.full((H,), 0.1, dtype=F64),
        "nu": torch.full((H,), 0.7, dtype=F64),
        "temperature": torch.ones(H, dtype=F64),
    }
    for key, x in changes.items():
        if key == "outlier":
            q[:, :, 7] *= x
        else:
            p[key] = torch.full((H,), x, dtype=F64)
    cast = {key: x.to(dtype) for key, x in p.items()}
    qkv = [x.to(dtype) for x in (q, k, v)]
    with torch.no_grad():
        fast = rfa_attention(*qkv, causal=True, block_size=16, **cast).output
    falls_back = f32_falls_back if dtype == torch.float32 else f64_falls_back
    assert seen["bounded"] and (seen["fallbacks"] > 0) == falls_back, seen
    assert len(seen["exact"]) == seen["fallbacks"]  # each fallback reruns its group exactly
    assert torch.isfinite(fast).all()
    if dtype == F64:
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        slow = rfa_attention(*leaves, causal=True, block_size=16, **p).output
        assert_close(f"{case}: in-place vs autograd path", fast, slow, atol=1e-12)
        return
    # float32 against the exact in-place path (`_attend_bounded` switched off): the same
    # weights up to the rounding of their exponents, at most eps (|L - m| + 3) with |L - m| <= 60
    # on the groups that do not fall back, so 64 eps max|v| on the weighted means (rows sum to
    # 1, |E| <= 1); groups that fall back are the exact path's own result.
    monkeypatch.setattr(isotropic, "_attend_bounded", lambda *args, **kwargs: None)
    with torch.no_grad():
        exact = rfa_attention(*qkv, causal=True, block_size=16, **cast).output
    atol = 64 * torch.finfo(dtype).eps * v.abs().max().item()
    assert_close(f"{case}: bounded vs exact float32 path", fast, exact, atol=atol)


# --------------------------------------------------------------------------------------------
# Oracle: eq. (4) and one IRLS step of the float64 estimators
# --------------------------------------------------------------------------------------------


def _rotation_3d(observations=None):
    """`rotation-3d` (A = -0.1 I + [w]x, Q = 0.1 I, R = 0.25 I): isotropic, as RFA assumes."""
    scenario = presets.get("rotation-3d").scenario().replace(n_steps=300)
    if observations is not None:
        scenario = scenario.replace(observations=observations)
    sim = simulate(scenario, 2, seed=3)
    model = DiagonalizableModel.from_linear(scenario.system, scenario.measurement)
    return scenario, model, sim.z, sim.t_obs


def _layer_on_eigen_coordinates(model, z, t, **options):
    """RFA with W_q = W_k = W_v = S^-1 and W_o = S, one head holding all d modes."""
    S = model.S
    zs = z @ np.linalg.inv(S).T
    x = torch.from_numpy(np.concatenate([zs.real, zs.imag], axis=-1))[:, None]
    lam = model.eigenvalues
    np.testing.assert_allclose(lam.real, lam.real[0])  # isotropic decay
    np.testing.assert_allclose(model.process_variances, model.process_variances[0])
    out = rfa_attention(
        x,
        x,
        x,
        t=torch.from_numpy(t),
        frequencies=torch.from_numpy(lam.imag.copy()),
        decay=float(-lam.real[0]),
        process_var=float(model.process_variances[0]),
        measurement_var=float(model.measurement_variances[0]),
        anchor_var=0.0,
        temperature=1.0,
        **options,
    ).output[:, 0]
    estimate = complex_pairs.to_complex(out).numpy() @ S.T
    assert np.abs(estimate.imag).max() < 1e-12
    return estimate.real


@pytest.mark.parametrize("irregular", [False, True])
def test_oracle_gaussian_limit_is_eq4_batch_mle(irregular):
    """Exponential kernel (M2.1) at nu = inf: softmax(log P) = P / sum P, eq. (4) exactly."""
    scenario, model, z, t = _rotation_3d(PoissonTimes(10.0) if irregular else None)
    got = _layer_on_eigen_coordinates(model, z, t, weight_kernel="exponential", nu=math.inf)
    assert_close("eq. 4 (eigen MLE)", got, eigen_batch_mle(model, z, t).outputs, atol=ORACLE_ATOL)
    general = batch_mle(scenario.system, scenario.measurement, z, t).outputs
    assert_close("eq. 4 (general MLE)", got, general, atol=ORACLE_ATOL)


@pytest.mark.parametrize("nu", [math.inf, 5.0, 0.7])
def test_oracle_student_t_is_one_power_irls_step_from_the_measurements(nu):
    """kappa = (nu + d)/d logits = one IRLS step, power family, init ``z_hat_ii = z_i``.

    At nu = inf the power weight's limit is exp(-d^2/d), not 1: the Student-t layer is not the
    MLE in the Gaussian limit, and the IRLS reference (same limit) agrees with it.
    """
    _, model, z, t = _rotation_3d()
    terms = eigen_pairwise_terms(model, z, t)
    ref = robust_estimate(terms, nu=nu, family="power", init="measurement", max_iter=1)
    assert ref.iterations == 1
    got = _layer_on_eigen_coordinates(model, z, t, nu=nu)
    assert_close(f"one IRLS step, nu={nu}", got, ref.outputs, atol=ORACLE_ATOL)
    mle = eigen_batch_mle(model, z, t).outputs
    assert np.abs(got - mle).max() > 1e-3  # a robust step is not the MLE


def _isotropic_2d(mu=0.3, omega=1.3, sigma2=0.2, eta2=0.4):
    """``A = -mu I + omega J`` in the basis ``S = [[1, 1], [-i, i]]/sqrt 2`` (``+i omega`` first,
    the layer's conjugate-pair order), ``Q = sigma2 I``, ``R = eta2 I``."""
    S = np.array([[1, 1], [-1j, 1j]]) / np.sqrt(2)
    model = DiagonalizableModel(
        np.array([-mu + 1j * omega, -mu - 1j * omega]), S, [sigma2] * 2, [eta2] * 2
    )
    scenario = (
        presets.get("rotation-3d")
        .scenario()
        .replace(
            system=model.sde(),
            measurement=LinearMeasurement.identity(2, eta2),
            initial=SphericalShellInitial(2, 4.0, 6.0),
            n_steps=250,
        )
    )
    sim = simulate(scenario, 2, seed=5)
    return model, scenario, sim.z, sim.t_obs


@pytest.mark.parametrize("nu", [math.inf, 3.0])
def test_module_oracle_with_inverse_eigenbasis_projections(nu):
    """The nn.Module with W_q = W_k = W_v = S^-1, W_o = S and the true dynamics (float64)."""
    model, scenario, z, t = _isotropic_2d()
    kernel = "exponential" if math.isinf(nu) else "student-t"
    layer = RobustFilterAttention(
        2, 1, anchor_noise=False, variance_floor=0.0, nu=nu, weight_kernel=kernel, dtype=F64
    )
    S = torch.from_numpy(np.array(model.S))  # model.S is read-only
    S_inv = torch.linalg.inv(S)
    layer.set_complex_weights(query=S_inv, key=S_inv, value=S_inv, output=S)
    lam = model.eigenvalues
    layer.load_dynamics(
        decay=-lam.real[0],
        frequencies=[[lam.imag[0]]],
        process_var=model.process_variances[0],
        measurement_var=model.measurement_variances[0],
        temperature=1.0,
        **({} if math.isinf(nu) else {"nu": nu}),
    )
    with torch.no_grad():
        out, weights = layer(torch.from_numpy(z), torch.from_numpy(t), need_weights=True)
    assert weights.shape == (2, 1, t.size, t.size)
    if math.isinf(nu):
        expected = batch_mle(scenario.system, scenario.measurement, z, t).outputs
    else:
        terms = eigen_pairwise_terms(model, z, t)
        expected = robust_estimate(
            terms, nu=nu, family="power", init="measurement", max_iter=1
        ).outputs
    assert_close(f"module oracle nu={nu}", out, expected, atol=ORACLE_ATOL)


def test_module_heads_are_the_functional_on_split_projections():
    gen = _gen(2)
    layer = RobustFilterAttention(
        12, 3, head_dim=4, spectral_coupling=True, generator=gen, dtype=F64
    )
    x = torch.randn(2, 7, 12, dtype=F64, generator=gen)
    t = torch.cumsum(torch.rand(7, dtype=F64, generator=gen) + 0.1, 0)
    out, w = layer(x, t, need_weights=True)
    split = [heads_mod.split_complex_heads(m(x), 3) for m in (layer.q_proj, layer.k_proj)]
    v = heads_mod.split_complex_heads(layer.v_proj(x), 3)
    ref = rfa_attention(
        *split,
        v,
        t=t,
        return_weights=True,
        dynamics=layer.dynamics(),
        robust=layer.robust(),
        anchor_var=layer.anchor_var,
    )
    vr, vi = complex_pairs.split(heads_mod.merge_complex_heads(ref.output))
    W = layer.out_proj.weight
    half = W.shape[1] // 2
    expected = vr @ W[:, :half].T + vi @ W[:, half:].T + layer.out_proj.bias
    assert_close("module = functional", out, expected, atol=1e-13)
    assert_close("module weights", w, ref.weights, atol=1e-14)
    assert layer(x)[1] is None


# --------------------------------------------------------------------------------------------
# Limits: ALiBi slope (mu = 0) and RoPE (mu = 0, sigma^2 = 0, nu -> inf)
# --------------------------------------------------------------------------------------------


def test_zero_decay_bias_and_slope_equal_the_float64_closed_forms():
    """B.4.2: at mu = 0, B = log P - (2 kappa/nu) P and -dB/dtau(0) = alibi_slope."""
    c, s_eta, s_gamma, nu, n = 0.3, 0.7, 0.2, 6.0, 4
    kappa = (nu + n) / n
    lag = torch.linspace(0.0, 20.0, 41, dtype=F64, requires_grad=True)
    kernel = rfa_lag_kernel(
        lag, decay=0.0, process_var=c, measurement_var=s_eta, anchor_var=s_gamma
    )
    bias = kernel.log_precision - 2 * kappa / nu * kernel.precision
    ref = zero_decay_bias(lag.detach().numpy(), c=c, s=s_eta + s_gamma, kappa=kappa, nu=nu)
    assert_close("zero-decay bias", bias.detach(), torch.from_numpy(ref), atol=1e-13)
    (slope,) = torch.autograd.grad(bias[0], lag)
    m = alibi_slope(c=c, s=s_eta + s_gamma, kappa=kappa, nu=nu)
    assert abs(-slope[0].item() - m) < 1e-13
    assert_close("E = 1 at mu = 0", kernel.decay.detach(), torch.ones(41, dtype=F64), atol=0)


def test_zero_decay_layer_slope_is_alibi_slope_to_first_order_in_p_over_nu():
    """The layer's own logit slope at lag 0 (q orthogonal to k, no rotation, mu = 0).

    Its exact value is ``c/s - (2 kappa/nu)(c/s^2)/(1 + a)``, ``a = 2/(nu s)``; the paper's
    ALiBi slope drops the ``1/(1 + a)``: it is exact to first order in ``P/nu`` (digest 1.11).
    The slope is read from the weights of the last of three tokens at ``t = 0, h, 2h``
    (``log w_ij`` differences are logit differences at ``mu = 0``), Richardson-extrapolated.
    """
    c, eta2, gamma2, n, h = 0.3, 0.7, 0.2, 2, 1e-4
    s = eta2 + gamma2
    q = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64).expand(1, 1, 3, 4)
    k = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=F64).expand(1, 1, 3, 4)
    gaps = []
    for nu in (20.0, 40.0, 80.0):
        w = rfa_attention(
            q,
            k,
            q,
            t=torch.tensor([0.0, h, 2 * h], dtype=F64),
            frequencies=torch.zeros(n, dtype=F64),
            decay=0.0,
            process_var=c,
            measurement_var=eta2,
            anchor_var=gamma2,
            nu=nu,
            return_weights=True,
        ).weights[0, 0, 2]
        one = (torch.log(w[2]) - torch.log(w[1])).item() / h  # (L(0) - L(h)) / h
        two = (torch.log(w[2]) - torch.log(w[0])).item() / (2 * h)
        slope = 2 * one - two  # error O(h^2) + round-off / h
        kappa, a = (nu + n) / n, 2 / (nu * s)
        exact = c / s - 2 * kappa / nu * c / s**2 / (1 + a)
        assert abs(slope - exact) < 1e-6 * abs(exact)
        m = alibi_slope(c=c, s=s, kappa=kappa, nu=nu)
        gaps.append(abs(slope - m))
        assert gaps[-1] <= 2 * kappa / nu * c / s**2 * a * (1 + 1e-5)
    assert 0.4 < gaps[1] / gaps[0] < 0.6 and 0.4 < gaps[2] / gaps[1] < 0.6  # O(1/nu)


def _unit_rows(x):
    return x / x.norm(dim=-1, keepdim=True)


def test_rope_limit_exact_at_infinite_nu_and_first_order_in_one_over_nu():
    """mu = 0, sigma^2 = 0, unit q, k: L = const + (2 kappa/nu) P Re(q~^H k~) + O(P^2 kappa/nu^2).

    At nu = inf the logits are exactly ``const + (2P/d) Re(q~^H k~)``: RoPE softmax with scale
    ``2 tau P / d`` (RFA rotates by ``e^{-i omega t}``, RoPE by ``e^{+i omega t}``: frequencies
    ``-omega``). Without value rotation (M2.4) the outputs are RoPE attention's.
    """
    gen = _gen(4)
    B, H, T, D = 2, 2, 6, 8
    n = D // 2
    q, k, v = _qkv(B, H, T, D, gen)
    q, k = _unit_rows(q), _unit_rows(k)
    omega = torch.randn(H, n, dtype=F64, generator=gen)
    eta2, gamma2, tau_s = 0.5, 0.3, 1.7
    P = 1 / (eta2 + gamma2)
    common = {
        "frequencies": omega,
        "decay": 0.0,
        "process_var": 0.0,
        "measurement_var": eta2,
        "anchor_var": gamma2,
        "temperature": tau_s,
        "return_weights": True,
        "rotate_values": False,
    }
    limit = rfa_attention(q, k, v, nu=math.inf, **common)
    rope = baselines.rope_attention(
        q, k, v, frequencies=-omega, scale=2 * tau_s * P / n, return_weights=True
    )
    assert_close("nu = inf weights = RoPE", limit.weights, rope.weights, atol=1e-13)
    assert_close("nu = inf outputs = RoPE", limit.output, rope.output, atol=1e-13)
    errors = []
    for nu in (50.0, 100.0, 200.0):
        kappa = (nu + n) / n
        got = rfa_attention(q, k, v, nu=nu, **common).weights
        linear = baselines.rope_attention(
            q, k, v, frequencies=-omega, scale=2 * tau_s * kappa * P / nu, return_weights=True
        ).weights
        errors.append((got - linear).abs().max().item())
    assert 0.4 < errors[1] / errors[0] < 0.6 and 0.4 < errors[2] / errors[1] < 0.6


# --------------------------------------------------------------------------------------------
# SC-RFA and the lag kernel
# --------------------------------------------------------------------------------------------


def test_spectral_coupling_spec_sets_bands_and_coupled_decays():
    spec = positional.SpectralCoupling(damping=0.05)
    freq, decay = spec.build(8, 8, dtype=F64)
    assert freq.shape == (8, 8)
    distinct = freq[:, :4]
    assert torch.equal(freq[:, 4:], -distinct)  # conjugate pairs
    assert (distinct.flatten().diff() > 0).all()  # bands ascending, head 0 slowest
    assert torch.equal(decay[:2], torch.zeros(2, dtype=F64))  # 2 of 8 zero-decay heads
    assert_close("mu_h = b max omega_h", decay[2:], 0.05 * distinct[2:].amax(1), atol=0)
    gen = _gen(5)
    q, k, v = _qkv(1, 8, 5, 16, gen)
    a = rfa_attention(q, k, v, frequencies=spec, nu=9.0)
    b = rfa_attention(q, k, v, frequencies=freq, decay=decay, nu=9.0)
    assert_close("SC spec = explicit tensors", a.output, b.output, atol=0)


@pytest.mark.parametrize("a_sign", [1.0, -1.0])
def test_lag_kernel_matches_the_regime_forms(a_sign):
    """B.4.1: integrative (a > 0) / diffusive (a < 0) forms; steady-state parameterisation."""
    from estimators.closed_forms.measurement import rfa_log_precision

    mu, gamma2 = 0.2, 0.1
    s2t, eta2 = (0.2, 1.0) if a_sign > 0 else (1.0, 0.2)
    lag = np.linspace(0.0, 30.0, 61)
    kernel = rfa_lag_kernel(
        torch.from_numpy(lag),
        decay=mu,
        process_var=s2t,
        measurement_var=eta2,
        anchor_var=gamma2,
        steady_state=True,
    )
    ref = rfa_log_precision(lag, a=eta2 - s2t, b=gamma2 + s2t, mu=mu)
    assert_close("log P regime form", kernel.log_precision, torch.from_numpy(ref), atol=1e-13)
    same = rfa_lag_kernel(
        torch.from_numpy(lag),
        decay=mu,
        process_var=2 * mu * s2t,
        measurement_var=eta2,
        anchor_var=gamma2,
    )
    assert_close("sigma^2 = 2 mu sigma~^2", same.precision, kernel.precision, atol=1e-13)


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stamps", ["uniform", "irregular"])
def test_causal_no_leakage(stamps):
    gen = _gen(6)
    B, H, T, D = 2, 2, 9, 4
    q, k, v = _qkv(B, H, T, D, gen)
    p = _params(H, D // 2, gen)
    t = None if stamps == "uniform" else torch.cumsum(torch.rand(T, dtype=F64, generator=gen), 0)
    base = rfa_attention(q, k, v, t=t, block_size=4, **p).output
    cut = 5
    q2, k2, v2 = (x.clone() for x in (q, k, v))
    for x in (q2, k2, v2):
        x[:, :, cut:] += 10 * torch.randn(B, H, T - cut, D, dtype=F64, generator=gen)
    moved = rfa_attention(q2, k2, v2, t=t, block_size=4, **p).output
    assert torch.equal(moved[:, :, :cut], base[:, :, :cut])
    assert (moved[:, :, cut:] - base[:, :, cut:]).abs().min() > 0


def test_time_shift_invariance():
    """Only lags enter: rotations cancel between query, key and the value counter-rotation."""
    gen = _gen(7)
    q, k, v = _qkv(2, 2, 8, 6, gen)
    p = _params(2, 3, gen)
    t = torch.cumsum(torch.rand(2, 8, dtype=F64, generator=gen) + 0.1, 1)
    for causal in (True, False):
        a = rfa_attention(q, k, v, t=t, causal=causal, return_weights=True, **p)
        b = rfa_attention(q, k, v, t=t + 123.4, causal=causal, return_weights=True, **p)
        assert_close("shifted output", b.output, a.output, atol=1e-10)
        assert_close("shifted weights", b.weights, a.weights, atol=1e-12)


@pytest.mark.parametrize("stamps", ["uniform", "irregular"])
def test_gradcheck_float64(stamps):
    gen = _gen(8)
    B, H, T, D = 1, 2, 4, 4
    q, k, v = (x.requires_grad_() for x in _qkv(B, H, T, D, gen))
    params = _params(H, D // 2, gen, with_zero_decay=False)
    p = {name: x.requires_grad_() for name, x in params.items()}
    t = None if stamps == "uniform" else torch.tensor([0.0, 0.4, 1.5, 1.7], dtype=F64)
    names = list(p)

    def f(q, k, v, *values):
        return rfa_attention(
            q, k, v, t=t, block_size=3, **dict(zip(names, values, strict=True))
        ).output

    assert torch.autograd.gradcheck(f, (q, k, v, *p.values()))

    def at_zero_decay(q, k, v, process_var, measurement_var):
        # mu = 0 exactly (the Brownian kernel's series branch); decay itself must stay >= 0
        return rfa_attention(
            q,
            k,
            v,
            t=t,
            frequencies=params["frequencies"],
            decay=0.0,
            process_var=process_var,
            measurement_var=measurement_var,
            nu=3.0,
        ).output

    assert torch.autograd.gradcheck(
        at_zero_decay, (q, k, v, p["process_var"], p["measurement_var"])
    )


def test_finite_in_float32_at_t_8192_and_as_decay_vanishes():
    """One call, two heads of D = 4: mu = 0.05 and mu = 0 (the Brownian kernel's mu -> 0 branch)."""
    gen = _gen(9)
    q, k, v = _qkv(1, 2, 8192, 4, gen, dtype=torch.float32)
    out = rfa_attention(
        q,
        k,
        v,
        frequencies=torch.tensor([0.3, -0.3]),
        decay=torch.tensor([0.05, 0.0]),
        process_var=0.1,
        anchor_var=0.1,
        nu=8.0,
        block_size=512,  # fewer, larger blocks: same result, less per-op overhead
    ).output
    assert torch.isfinite(out).all()
    assert out.abs().max() <= v.abs().max()  # a sub-convex combination of rotated values


def test_float32_agrees_with_float64_over_long_irregular_sequences():
    gen = _gen(13)
    q, k, v = _qkv(1, 2, 1024, 8, gen)
    t = torch.cumsum(torch.rand(1024, dtype=F64, generator=gen) * 2 + 0.01, 0)
    p = _params(2, 4, gen)
    ref = rfa_attention(q, k, v, t=t, **p).output
    low = rfa_attention(
        q.float(), k.float(), v.float(), t=t.float(), **{n: x.float() for n, x in p.items()}
    ).output
    # angles omega t up to ~5e3 rad are rounded to ~2.5e-4 rad in float32 (RoPE's own limit)
    assert_close("float32 vs float64", low, ref, atol=5e-3)


def test_clear_errors():
    gen = _gen(10)
    q, k, v = _qkv(1, 2, 5, 4, gen)
    good = {"frequencies": torch.zeros(2, dtype=F64), "decay": 0.1}
    with pytest.raises(ValueError, match="q and k must have equal shapes"):
        rfa_attention(q, k[..., :3, :], v, **good)
    for empty in (q[:0], q[:, :0]):  # no sequence, no head: refused by name, not / 0
        with pytest.raises(ValueError, match="at least one sequence and one head"):
            rfa_attention(empty, empty, empty, **good)
    with pytest.raises(ValueError, match="must be even"):
        rfa_attention(q[..., :3], k[..., :3], v[..., :3], **good)
    with pytest.raises(ValueError, match="strictly increasing"):
        rfa_attention(q, k, v, t=torch.tensor([0.0, 1, 1, 2, 3]), **good)
    with pytest.raises(ValueError, match="frequencies must have shape"):
        rfa_attention(q, k, v, frequencies=torch.zeros(3), decay=0.1)
    with pytest.raises(ValueError, match="decay must be a scalar or have shape"):
        rfa_attention(q, k, v, frequencies=good["frequencies"], decay=torch.ones(3))
    with pytest.raises(ValueError, match="decay must be finite and >= 0"):
        rfa_attention(q, k, v, frequencies=good["frequencies"], decay=-1.0)
    with pytest.raises(ValueError, match="nu must be finite and > 0"):
        rfa_attention(q, k, v, nu=0.0, **good)
    with pytest.raises(ValueError, match="lag-0 variance"):
        rfa_attention(q, k, v, measurement_var=0.0, **good)
    with pytest.raises(ValueError, match="weight_kernel"):
        rfa_attention(q, k, v, weight_kernel="huber", **good)
    with pytest.raises(TypeError, match="decay is required"):
        rfa_attention(q, k, v, frequencies=good["frequencies"])
    with pytest.raises(ValueError, match="v must have the feature size"):
        rfa_attention(q, k, v[..., :2], **good)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        RobustFilterAttention(10, 3)
    with pytest.raises(ValueError, match="even for conjugate pairs"):
        RobustFilterAttention(6, 2)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 8\)"):
        RobustFilterAttention(8, 2)(torch.zeros(2, 3, 6))


def test_module_init_uses_only_the_given_generator_and_learns():
    state = torch.random.get_rng_state()
    a = RobustFilterAttention(16, 2, generator=_gen(11), learn_decay=True, learn_frequencies=True)
    b = RobustFilterAttention(16, 2, generator=_gen(11), learn_decay=True, learn_frequencies=True)
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    robust = a.robust()
    assert_close("nu init 4n", robust["nu"], torch.full((2,), 32.0), atol=1e-5)
    assert_close("tau_s init", robust["temperature"], torch.ones(2), atol=1e-6)
    x = torch.randn(3, 10, 16, generator=_gen(12))
    out, w = a(x, need_weights=True)
    assert out.shape == (3, 10, 16) and w.shape == (3, 2, 10, 10)
    out.square().mean().backward()
    for name, param in a.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), name

"""Adaptive Filter Attention (seed 000 3.1-3.9, Algorithm 1, B.1) against its float64 references.

Chain of trust: with the true dynamics and ``W_q = W_k = W_v = S^-1``, ``W_p = S``, ``nu = inf``
the layers are the batch MLE of `estimators.mle` (seed 000 2.2); with a finite ``nu`` one layer
is one IRLS step of `estimators.irls` (2.3); the isotropic and separable forms equal the tensor
form, which equals an explicit loop over ``(i, j)`` written with complex numbers from 3.1.
Float64 oracle tolerances are ``1e-10`` relative to the data's scale (the estimators evaluate
matrix exponentials, so agreement is round-off, ~1e-14, not exact).
"""

import math

import numpy as np
import pytest
import torch

from estimators import irls, mle
from estimators.closed_forms import measurement, separable
from kernels.layers.afa import AdaptiveFilterAttention
from kernels.ops import afa
from kernels.ops.afa import naive
from kernels.ops.afa.precision import log_separable_precision
from kernels.ops.common import complex_pairs
from sde_sim import (
    EveryKSteps,
    GaussianInitial,
    LinearMeasurement,
    PoissonTimes,
    Scenario,
    SphericalShellInitial,
    simulate,
)
from sde_sim.models import isotropic_sde
from tests.kernels.helpers import assert_close, record_inplace_paths

F64 = torch.float64
# Float64 oracle agreement, relative to the largest |z| (module docstring).
ORACLE_RTOL = 1e-10
# Two float64 implementations of the same formula: round-off of O(T) sums.
SAME_FORMULA_ATOL = 1e-12


def _t(x, dtype=F64) -> torch.Tensor:
    return torch.as_tensor(np.array(x), dtype=dtype)


def _pairs(zs: np.ndarray) -> torch.Tensor:
    """Complex eigen-coordinates (B, T, n) -> real pairs (B, 1, T, 2n), one head."""
    return complex_pairs.from_complex(torch.as_tensor(zs)).unsqueeze(1)


def _ambient(out: torch.Tensor, S: np.ndarray) -> np.ndarray:
    """Real pairs (B, 1, T, 2n) in the eigenbasis -> ``S z_s`` (must be real)."""
    z = complex_pairs.to_complex(out[:, 0]).detach().numpy() @ S.T
    assert np.abs(z.imag).max() < 1e-12 * max(1.0, np.abs(z).max())
    return z.real


# ---------------------------------------------------------------------------------------------
# Simulated systems
# ---------------------------------------------------------------------------------------------

ALPHA, OMEGA, SIGMA2, ETA2 = -0.2, 1.3, 0.3, 0.5


def _isotropic(observations):
    """2-D ``A = alpha I + Omega`` with isotropic noise (seed 000 3.6), two simulated paths."""
    sde = isotropic_sde(ALPHA, np.array([[0.0, -OMEGA], [OMEGA, 0.0]]), SIGMA2)
    meas = LinearMeasurement.identity(2, ETA2)
    scenario = Scenario(
        system=sde,
        measurement=meas,
        initial=SphericalShellInitial(2, 3.0, 5.0),
        dt=0.01,
        n_steps=300,
        observations=observations,
    )
    sim = simulate(scenario, 2, seed=1, method="exact")
    model = mle.DiagonalizableModel.from_linear(sde, meas)
    return sde, meas, model, sim.z, sim.t_obs


@pytest.fixture(scope="module")
def regular():
    return _isotropic(EveryKSteps(10))


@pytest.fixture(scope="module")
def irregular():
    return _isotropic(PoissonTimes(10.0))


def _isotropic_params(model, scale=1.0):
    """Functional isotropic parameters of the true model, time rescaled by ``scale``."""
    lam = model.eigenvalues
    return {
        "decay": _t([-lam.real[0] * scale]),
        "frequencies": _t(lam.imag[None] * scale),
        "process_var": _t([SIGMA2 * scale]),
        "measurement_var": _t([ETA2]),
    }


@pytest.fixture(scope="module")
def general():
    """4-D diagonalizable system, noise diagonal in the eigenbasis, irregular times."""
    rng = np.random.default_rng(7)
    cols = rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))
    S = np.stack([cols[:, 0], cols[:, 0].conj(), cols[:, 1], cols[:, 1].conj()], axis=1)
    lam = np.array([-0.1 + 1.0j, -0.1 - 1.0j, -0.6 + 0.3j, -0.6 - 0.3j])
    model = mle.DiagonalizableModel(lam, S, [0.2, 0.2, 0.5, 0.5], [0.3, 0.3, 0.8, 0.8])
    scenario = Scenario(
        system=model.sde(),
        measurement=model.measurement(),
        initial=GaussianInitial(np.zeros(4), np.eye(4)),
        dt=0.05,
        n_steps=60,
        observations=PoissonTimes(8.0),
    )
    sim = simulate(scenario, 2, seed=3, method="exact")
    return model, sim.z, sim.t_obs


def _tensor_params(model):
    lam = model.eigenvalues
    return {
        "decay": _t(-lam.real[None]),
        "frequencies": _t(lam.imag[None]),
        "process_var": _t(model.process_variances[None]),
        "measurement_var": _t(model.measurement_variances[None]),
    }


# ---------------------------------------------------------------------------------------------
# Oracle: the batch MLE and one IRLS step (seed 000 2.2, 2.3)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("grid", ["regular", "irregular"])
def test_isotropic_afa_is_the_batch_mle(grid, causal, request):
    sde, meas, model, z, t = request.getfixturevalue(grid)
    # the general (Van Loan) form on the regular grid; the eigenbasis form (one expm-free
    # closed form per pair) on the irregular one, where every pair has its own lag
    if grid == "regular":
        ref = mle.batch_mle(sde, meas, z, t, causal=causal).outputs
    else:
        ref = mle.eigen_batch_mle(model, z, t, causal=causal).outputs
    x = _pairs(z @ np.linalg.inv(model.S).T)
    out = afa.isotropic_afa(x, x, x, t=_t(t), causal=causal, **_isotropic_params(model))
    scale = np.abs(z).max()
    assert_close(
        "isotropic AFA vs batch MLE", _ambient(out.output, model.S), ref, atol=ORACLE_RTOL * scale
    )
    if grid == "regular":  # uniform grid: t = None with the dynamics in units of the step
        h = t[1] - t[0]
        uniform = afa.isotropic_afa(x, x, x, causal=causal, **_isotropic_params(model, h))
        assert_close("Toeplitz path", uniform.output, out.output, atol=ORACLE_RTOL * scale)


@pytest.mark.parametrize("causal", [True, False])
def test_tensor_afa_is_the_eigenbasis_batch_mle(general, causal):
    model, z, t = general
    ref = mle.eigen_batch_mle(model, z, t, causal=causal).outputs
    x = _pairs(z @ np.linalg.inv(model.S).T)
    out = afa.tensor_afa(x, x, x, t=_t(t), causal=causal, **_tensor_params(model))
    scale = np.abs(z).max()
    got = _ambient(out.output, model.S)
    assert_close("tensor AFA vs eigen_batch_mle", got, ref, atol=ORACLE_RTOL * scale)
    if causal:  # the general matrix form too (Van Loan per lag: once is enough)
        general_ref = mle.batch_mle(model.sde(), model.measurement(), z, t).outputs
        assert_close("tensor AFA vs batch_mle", got, general_ref, atol=ORACLE_RTOL * scale)


def test_predict_is_the_mle_one_step_prediction(regular):
    sde, meas, model, z, t = regular
    ref = mle.batch_mle(sde, meas, z, t).predictions  # row i: prediction of z_i from i - 1
    x = _pairs(z @ np.linalg.inv(model.S).T)
    h = t[1] - t[0]
    params = _isotropic_params(model, h)
    estimate = afa.isotropic_afa(x, x, x, **params).output
    pred = afa.predict(estimate, decay=params["decay"], frequencies=params["frequencies"])
    got = _ambient(pred, model.S)
    assert_close("prediction", got[:, :-1], ref[:, 1:], atol=ORACLE_RTOL * np.abs(z).max())
    per_step = afa.predict(
        estimate,
        decay=_t([-ALPHA]),
        frequencies=_t(model.eigenvalues.imag[None]),
        step=_t(np.append(np.diff(t), h)),
    )
    assert_close("per-step horizons", per_step, pred, atol=SAME_FORMULA_ATOL)


@pytest.mark.parametrize(
    "options",
    [{}, {"share_qk_values": False}, {"tensor_form": True}, {"step": None}],
    ids=["alg1", "qk-from-input", "tensor", "stamps-in-steps"],
)
def test_module_from_true_parameters_is_the_batch_mle(regular, options):
    """The layer's clock is ``step * t``: the default ``t = 0, 1, ...`` with ``step = h``, or
    explicit stamps ``t_obs / h`` (irregular-capable) with the same step."""
    sde, meas, model, z, t = regular
    ref = mle.batch_mle(sde, meas, z, t)
    h = t[1] - t[0]
    options = dict(options)
    stamps = _t(t / h) if options.pop("step", h) is None else None
    scale = np.abs(z).max()
    for predict, expected in ((False, ref.outputs), (True, ref.predictions)):
        layer = AdaptiveFilterAttention.from_eigen(
            model.S, model.eigenvalues, SIGMA2, ETA2, step=h, predict=predict, **options
        )
        y, _ = layer(_t(z), stamps)
        y = y.detach().numpy()
        if predict:  # output i predicts z_{i+1}; the MLE's row i + 1
            y, expected = y[:, :-1], expected[:, 1:]
        assert_close(f"module predict={predict}", y, expected, atol=ORACLE_RTOL * scale)


def test_one_layer_is_one_irls_step(regular, general):
    """Finite nu, temperature 1: the rational weight ``1 / (1 + r^T P r / nu)`` of 3.1 is
    `estimators.irls`' ``"rational"`` family; one step from the measurements (``init=
    "measurement"``, ``max_iter=1``). The Student-t family differs from it by the constant
    ``1 + d/nu`` and gives the same estimate."""
    nu = 2.0
    sde, meas, model, z, t = regular
    scale = np.abs(z).max()
    step = irls.eigen_irls(model, z, t, nu=nu, family="rational", init="measurement", max_iter=1)
    student = irls.eigen_irls(
        model, z, t, nu=nu, family="student-t", init="measurement", max_iter=1
    )
    assert_close("student-t = rational", student.outputs, step.outputs, atol=1e-12 * scale)
    mle_out = mle.eigen_batch_mle(model, z, t).outputs
    assert np.abs(step.outputs - mle_out).max() > 0.1  # the reweighting matters here
    x = _pairs(z @ np.linalg.inv(model.S).T)
    iso = afa.isotropic_afa(x, x, x, t=_t(t), nu=nu, **_isotropic_params(model))
    assert_close(
        "isotropic AFA vs IRLS step",
        _ambient(iso.output, model.S),
        step.outputs,
        atol=ORACLE_RTOL * scale,
    )
    layer = AdaptiveFilterAttention.from_eigen(
        model.S, model.eigenvalues, SIGMA2, ETA2, nu=nu, predict=False
    )
    y, _ = layer(_t(z), _t(t))
    assert_close("module vs IRLS step", y, step.outputs, atol=ORACLE_RTOL * scale)

    model4, z4, t4 = general
    step4 = irls.eigen_irls(
        model4, z4, t4, nu=nu, family="rational", init="measurement", max_iter=1
    )
    x4 = _pairs(z4 @ np.linalg.inv(model4.S).T)
    out4 = afa.tensor_afa(x4, x4, x4, t=_t(t4), nu=nu, **_tensor_params(model4))
    assert_close(
        "tensor AFA vs IRLS step",
        _ambient(out4.output, model4.S),
        step4.outputs,
        atol=ORACLE_RTOL * np.abs(z4).max(),
    )


def test_drift_biases_give_the_inhomogeneous_mle():
    """Seed 000 3.9: with drift ``u`` the pulled-forward estimate is ``e^{lambda tau}(z_j + b)
    - b``, ``b = u_s / lambda``: biases added to q, k, v, subtracted from the estimate."""
    u = np.array([0.4, -0.7])
    sde = isotropic_sde(ALPHA, np.array([[0.0, -OMEGA], [OMEGA, 0.0]]), SIGMA2, u=u)
    meas = LinearMeasurement.identity(2, ETA2)
    scenario = Scenario(
        system=sde,
        measurement=meas,
        initial=SphericalShellInitial(2, 3.0, 5.0),
        dt=0.01,
        n_steps=200,
        observations=EveryKSteps(10),
    )
    sim = simulate(scenario, 2, seed=4, method="exact")
    model = mle.DiagonalizableModel.from_linear(sde, meas)
    ref = mle.eigen_batch_mle(model, sim.z, sim.t_obs)
    S_inv = np.linalg.inv(model.S)
    bias = complex_pairs.from_complex(torch.as_tensor((S_inv @ u) / model.eigenvalues))[None]
    x = _pairs(sim.z @ S_inv.T)
    params = _isotropic_params(model)
    out = afa.isotropic_afa(
        x, x, x, t=_t(sim.t_obs), bias_qk=bias, bias_v=bias, nu=3.0, **params
    ).output
    nu_inf = afa.isotropic_afa(x, x, x, t=_t(sim.t_obs), bias_qk=bias, bias_v=bias, **params)
    scale = np.abs(sim.z).max()
    assert_close(
        "biased AFA vs drift MLE",
        _ambient(nu_inf.output, model.S),
        ref.outputs,
        atol=ORACLE_RTOL * scale,
    )
    h = sim.t_obs[1] - sim.t_obs[0]
    pred = afa.predict(
        nu_inf.output, decay=params["decay"], frequencies=params["frequencies"], step=h, bias=bias
    )
    assert_close(
        "biased prediction",
        _ambient(pred, model.S)[:, :-1],
        ref.predictions[:, 1:],
        atol=ORACLE_RTOL * scale,
    )
    tensor = (
        afa.tensor_afa(x + bias, x + bias, x + bias, t=_t(sim.t_obs), nu=3.0, **params).output
        - bias
    )
    assert_close(
        "biased robust AFA = tensor form on shifted inputs",
        out,
        tensor,
        atol=SAME_FORMULA_ATOL * scale,
    )


# ---------------------------------------------------------------------------------------------
# Equivalences: loop over (i, j) with complex numbers, tensor, isotropic, separable
# ---------------------------------------------------------------------------------------------


def _estimators_variance(lam, process_var, measurement_var, tau):
    """The oracle's propagated variance from the float64 closed form
    `estimators.closed_forms.measurement.eigen_measurement_variances` (seed convention
    ``dt = t_j - t_i``; the A.3 ``sign(dt)`` form for non-causal keys)."""
    return measurement.eigen_measurement_variances(lam, process_var, measurement_var, -tau)


def _random_heads(gen, heads, n, nv, *, per_feature):
    """Per-head (or per-feature) dynamics for q/k and for values, float64 tensors."""
    cols = n if per_feature else 1

    def positive(size, low):
        return low + torch.rand(heads, size, dtype=F64, generator=gen)

    qk = {
        "decay": positive(cols, 0.05) * 0.5,
        "frequencies": torch.randn(heads, n, dtype=F64, generator=gen),
        "process_var": positive(cols, 0.1),
        "measurement_var": positive(cols, 0.2),
    }
    vcols = nv if per_feature else 1
    value = {
        "value_decay": positive(vcols, 0.05) * 0.5,
        "value_frequencies": torch.randn(heads, nv, dtype=F64, generator=gen),
        "value_process_var": positive(vcols, 0.1),
        "value_measurement_var": positive(vcols, 0.2),
    }
    if not per_feature:
        qk = {k: v[:, 0] if v.shape[1] == 1 else v for k, v in qk.items()}
        value = {k: v[:, 0] if v.shape[1] == 1 else v for k, v in value.items()}
    return qk, value


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("nu, temperature", [(math.inf, 1.0), (1.7, 1.0), (0.9, 2.5)])
def test_tensor_form_equals_the_complex_loop(causal, nu, temperature):
    gen = torch.Generator().manual_seed(11)
    heads, steps, n, nv = 2, 5, 2, 3
    q, k = (torch.randn(1, heads, steps, 2 * n, dtype=F64, generator=gen) for _ in range(2))
    v = torch.randn(1, heads, steps, 2 * nv, dtype=F64, generator=gen)
    t = torch.cumsum(0.2 + torch.rand(steps, dtype=F64, generator=gen), 0)
    qk, value = _random_heads(gen, heads, n, nv, per_feature=True)
    got = afa.tensor_afa(
        q,
        k,
        v,
        t=t,
        nu=nu,
        temperature=temperature,
        causal=causal,
        return_weights=True,
        **qk,
        **value,
    )
    for h in range(heads):

        def dyn(d, prefix, h=h):
            lam = -d[f"{prefix}decay"][h] + 1j * d[f"{prefix}frequencies"][h]
            return (
                lam.numpy(),
                d[f"{prefix}process_var"][h].numpy(),
                d[f"{prefix}measurement_var"][h].numpy(),
            )

        zq, zk, zv = (complex_pairs.to_complex(x[0, h]) for x in (q, k, v))
        out, attn = naive.afa_loop(
            zq,
            zk,
            zv,
            t.numpy(),
            dyn(qk, ""),
            dyn(value, "value_"),
            nu=nu,
            temperature=temperature,
            causal=causal,
            variance=_estimators_variance,
        )
        assert_close(
            f"head {h} estimate",
            torch.view_as_real(complex_pairs.to_complex(got.output[0, h])),
            torch.view_as_real(out),
            atol=SAME_FORMULA_ATOL,
        )
        assert_close(f"head {h} weights", got.weights[0, h], attn, atol=SAME_FORMULA_ATOL)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("nu", [math.inf, 1.3])
@pytest.mark.parametrize("times", ["uniform", "irregular", "batched"])
@pytest.mark.parametrize("block_size", [None, 3])
def test_isotropic_form_equals_tensor_form(causal, nu, times, block_size):
    gen = torch.Generator().manual_seed(12)
    batch, heads, steps, n, nv = 2, 3, 7, 2, 3
    q, k = (torch.randn(batch, heads, steps, 2 * n, dtype=F64, generator=gen) for _ in range(2))
    v = torch.randn(batch, heads, steps, 2 * nv, dtype=F64, generator=gen)
    t = {
        "uniform": None,
        "irregular": torch.cumsum(0.1 + torch.rand(steps, dtype=F64, generator=gen), 0),
        "batched": torch.cumsum(0.1 + torch.rand(batch, steps, dtype=F64, generator=gen), 1),
    }[times]
    qk, value = _random_heads(gen, heads, n, nv, per_feature=False)
    common = {"t": t, "nu": nu, "temperature": 1.4, "causal": causal, "return_weights": True}
    iso = afa.isotropic_afa(q, k, v, block_size=block_size, **common, **qk, **value)
    ten = afa.tensor_afa(q, k, v, **common, **qk, **value)
    assert_close("estimate", iso.output, ten.output, atol=SAME_FORMULA_ATOL)
    for f in range(nv):
        assert_close("weights", iso.weights, ten.weights[..., f], atol=SAME_FORMULA_ATOL)
    # shared value dynamics (the default) and Dv == D with shared frequencies
    shared = afa.isotropic_afa(q, k, q, block_size=block_size, **common, **qk)
    assert_close(
        "shared dynamics",
        shared.output,
        afa.tensor_afa(q, k, q, **common, **qk).output,
        atol=SAME_FORMULA_ATOL,
    )


def test_real_features_without_rotation_any_width():
    """``frequencies=None``: real features (here D = 1 magnitudes, Dv = 3), still decayed,
    precision-weighted and robustly reweighted: the complex loop with real ``lambda = -a``."""
    gen = torch.Generator().manual_seed(13)
    heads, steps = 2, 6
    q, k = (torch.randn(1, heads, steps, 1, dtype=F64, generator=gen) for _ in range(2))
    v = torch.randn(1, heads, steps, 3, dtype=F64, generator=gen)
    t = torch.cumsum(0.3 + torch.rand(steps, dtype=F64, generator=gen), 0)
    p = {"decay": _t([0.3, 0.05]), "process_var": _t([0.2, 0.4]), "measurement_var": _t([0.5, 0.3])}
    for causal in (True, False):
        iso = afa.isotropic_afa(q, k, v, t=t, frequencies=None, nu=1.5, causal=causal, **p)
        ten = afa.tensor_afa(q, k, v, t=t, frequencies=None, nu=1.5, causal=causal, **p)
        assert_close(
            "isotropic = tensor, real features", iso.output, ten.output, atol=SAME_FORMULA_ATOL
        )
        for h in range(heads):
            dyn_qk = (
                np.array([-p["decay"][h].item()] * 1),
                np.full(1, p["process_var"][h].item()),
                np.full(1, p["measurement_var"][h].item()),
            )
            dyn_v = tuple(np.repeat(x, 3) for x in dyn_qk)
            out, _ = naive.afa_loop(
                q[0, h].to(torch.complex128),
                k[0, h].to(torch.complex128),
                v[0, h].to(torch.complex128),
                t.numpy(),
                dyn_qk,
                dyn_v,
                nu=1.5,
                temperature=1.0,
                causal=causal,
                variance=_estimators_variance,
            )
            assert_close("real loop", iso.output[0, h], out.real, atol=SAME_FORMULA_ATOL)


def test_complex_input_module_equals_real_input_module():
    """Real pairs in (complex_input=True) with a zero imaginary half = the lifted real input."""
    gen = torch.Generator().manual_seed(14)
    real = AdaptiveFilterAttention(4, 2, generator=gen, dtype=F64, nu=2.0)
    pairs = AdaptiveFilterAttention(8, 2, complex_input=True, dtype=F64, nu=2.0)
    # the complex-input layer also learns L_P's imaginary bias (zero at init): load the rest
    missing, unexpected = pairs.load_state_dict(real.state_dict(), strict=False)
    assert missing == ["out_proj.bias_imag"] and not unexpected
    x = torch.randn(2, 6, 4, dtype=F64, generator=gen)
    y_real, _ = real(x)
    y_pairs, _ = pairs(torch.cat((x, torch.zeros_like(x)), -1))
    assert y_pairs.shape == (2, 6, 8)
    assert_close("real part", y_pairs[..., :4], y_real, atol=SAME_FORMULA_ATOL)


def test_normalized_qk_equals_explicitly_normalised_inputs():
    gen = torch.Generator().manual_seed(15)
    q, k, v = (torch.randn(2, 2, 6, 4, dtype=F64, generator=gen) for _ in range(3))
    qk, _ = _random_heads(gen, 2, 2, 2, per_feature=False)
    unit_q, unit_k = (x / x.norm(dim=-1, keepdim=True) for x in (q, k))
    got = afa.isotropic_afa(q, k, v, nu=0.8, normalized_qk=True, **qk)
    expected = afa.isotropic_afa(unit_q, unit_k, v, nu=0.8, **qk)
    assert_close("normalized q/k (3.7)", got.output, expected.output, atol=SAME_FORMULA_ATOL)


@pytest.mark.parametrize("nu", [math.inf, 1.5])
def test_separable_precision_matches_its_float64_closed_form(nu):
    """B.1: the factorised form = the tensor form with ``P~`` = `estimators.closed_forms.
    separable` (precision, distance matrix, estimate)."""
    gen = torch.Generator().manual_seed(16)
    heads, steps, n = 2, 6, 3
    q, k, v = (torch.randn(1, heads, steps, 2 * n, dtype=F64, generator=gen) for _ in range(3))
    t = torch.cumsum(0.3 + torch.rand(steps, dtype=F64, generator=gen), 0)
    qk, _ = _random_heads(gen, heads, n, n, per_feature=True)
    sep = afa.separable_afa(q, k, v, t=t, nu=nu, return_weights=True, **qk)
    ten = afa.tensor_afa(q, k, v, t=t, nu=nu, precision="separable", **qk)
    assert_close("separable = tensor(P~)", sep.output, ten.output, atol=SAME_FORMULA_ATOL)
    tt = t.numpy()
    for h in range(heads):
        lam = (-qk["decay"][h] + 1j * qk["frequencies"][h]).numpy()
        q2, r2 = qk["process_var"][h].numpy(), qk["measurement_var"][h].numpy()
        c, f, g = separable.separable_factors(lam, q2, r2, tt)
        phi = np.exp(lam * (tt - 0.5 * (tt.max() + tt.min()))[:, None])
        zq, zk, zv = (complex_pairs.to_complex(x[0, h]).numpy() for x in (q, k, v))
        dist = separable.separable_distance(c, f, g, phi, zq / phi, zk / phi)
        w = np.ones_like(dist) if math.isinf(nu) else 1 / (1 + dist / nu)
        est = separable.separable_estimate(w, c, f, g, phi, zv / phi)
        assert_close(
            "B.1 estimate",
            torch.view_as_real(complex_pairs.to_complex(sep.output[0, h])),
            torch.view_as_real(torch.as_tensor(est)),
            atol=SAME_FORMULA_ATOL,
        )
        assert_close(
            "B.1 weights", sep.weights[0, h], torch.as_tensor(np.tril(w)), atol=SAME_FORMULA_ATOL
        )
        lag = np.linspace(0.0, 4.0, 9)
        precision = torch.exp(
            log_separable_precision(
                _t(lag)[:, None], qk["decay"][h], qk["process_var"][h], qk["measurement_var"][h]
            )
        )
        assert_close(
            "P~(tau)",
            precision,
            torch.as_tensor(separable.separable_precision(lam, q2, r2, lag)),
            atol=0,
            rtol=1e-13,
        )


def test_separable_module_runs_and_is_causal():
    gen = torch.Generator().manual_seed(17)
    layer = AdaptiveFilterAttention(4, 2, separable=True, nu=2.0, generator=gen, dtype=F64)
    x = torch.randn(1, 6, 4, dtype=F64, generator=gen)
    y, w = layer(x, need_weights=True)
    assert y.shape == x.shape and w.shape == (1, 2, 6, 6)
    assert torch.all(w.triu(1) == 0)


# ---------------------------------------------------------------------------------------------
# Limits (seed 000 3.8)
# ---------------------------------------------------------------------------------------------


def _unit_complex(gen, shape):
    z = torch.randn(*shape, dtype=torch.complex128, generator=gen)
    return z / z.abs().pow(2).sum(-1, keepdim=True).sqrt()


def test_unitary_limit_is_rotary_dot_product_attention():
    """``alpha = 0``, ``sigma = 0``, unit q/k: ``L = const - log(1 - tau c)``, ``tau = 2 /
    (nu eta^2 + 2)``, ``c = Re(q~^H k~)`` with RoPE's rotation; to first order softmax
    ``exp(tau c)``, with an error of order ``tau^2`` (the next term, ``tau^2 c^2 / 2``)."""
    gen = torch.Generator().manual_seed(21)
    heads, steps, n = 2, 9, 3
    zq, zk = _unit_complex(gen, (1, heads, steps, n)), _unit_complex(gen, (1, heads, steps, n))
    q, k = complex_pairs.from_complex(zq), complex_pairs.from_complex(zk)
    v = torch.randn(1, heads, steps, 2 * n, dtype=F64, generator=gen)
    omega = torch.randn(heads, n, dtype=F64, generator=gen)
    eta2 = 0.7
    positions = torch.arange(steps, dtype=F64)
    rotation = torch.exp(-1j * omega[None, :, None, :] * positions[:, None])
    c = ((zq * rotation).conj() @ (zk * rotation).transpose(-1, -2)).real  # RoPE scores
    mask = torch.ones(steps, steps, dtype=torch.bool).tril()

    def afa_log_weights(nu):
        out = afa.isotropic_afa(
            q,
            k,
            v,
            decay=_t([0.0, 0.0]),
            frequencies=omega,
            process_var=_t([0.0, 0.0]),
            measurement_var=_t([eta2, eta2]),
            nu=nu,
            return_weights=True,
        )
        return torch.log(out.weights).masked_fill(~mask, 0.0)

    def log_softmax(logits):
        return torch.log_softmax(logits.masked_fill(~mask, -math.inf), -1).masked_fill(~mask, 0.0)

    errors, taus = [], []
    for nu in (4.0, 8.0, 16.0, 32.0, 64.0):
        tau = 2 / (nu * eta2 + 2)
        got = afa_log_weights(nu)
        assert_close(
            "exact unitary form", got, log_softmax(-torch.log1p(-tau * c)), atol=SAME_FORMULA_ATOL
        )
        errors.append((got - log_softmax(tau * c)).abs().max().item())
        taus.append(tau)
    orders = np.diff(np.log(errors)) / np.diff(np.log(taus))
    # second order in tau: the measured order approaches 2 as tau -> 0 (corrections O(tau))
    assert np.all(np.abs(orders[-2:] - 2.0) < 0.15), orders


def test_zero_decay_gives_an_alibi_bias():
    """``alpha = 0``: ``V = sigma^2 |tau| + eta^2`` (ALiBi's ``a|i - j| + b``). With orthogonal
    unit q, k (``c = 0``, ``|R|^2 = 2``) the logit is ``-log(V + 2/nu)`` exactly; seed 004's
    ``zero_decay_bias`` with ``kappa = 1`` is its expansion to first order in ``1/nu`` (error
    ``O(nu^-2)``) and its ALiBi slope ``alibi_slope`` the slope at lag 0."""
    steps, s2, e2 = 12, 0.4, 0.6
    q = torch.zeros(1, 1, steps, 2, dtype=F64)
    k = torch.zeros_like(q)
    q[..., 0], k[..., 1] = 1.0, 1.0
    v = torch.randn(1, 1, steps, 2, dtype=F64, generator=torch.Generator().manual_seed(22))
    lag = np.arange(steps, dtype=float)

    def bias(nu, h=1.0):
        w = (
            afa.isotropic_afa(
                q,
                k,
                v,
                t=_t(h * lag),
                decay=_t([0.0]),
                frequencies=None,
                process_var=_t([s2]),
                measurement_var=_t([e2]),
                nu=nu,
                return_weights=True,
            )
            .weights[0, 0, -1]
            .flip(0)
        )
        return torch.log(w / w[0]).numpy()  # logit at lag tau minus logit at lag 0

    exact = -np.log(s2 * lag + e2 + 2 / 50.0) + np.log(e2 + 2 / 50.0)
    assert_close("exact zero-decay logits", bias(50.0), exact, atol=SAME_FORMULA_ATOL)
    errors = []
    for nu in (20.0, 40.0, 80.0):
        expansion = measurement.zero_decay_bias(lag, c=s2, s=e2, kappa=1.0, nu=nu)
        errors.append(np.abs(bias(nu) - (expansion - expansion[0])).max())
    assert 3.5 < errors[0] / errors[1] < 4.5 and 3.5 < errors[1] / errors[2] < 4.5, errors
    nu, h = 100.0, 1e-5
    slope = -bias(nu, h)[1] / h
    x = 2 / (nu * e2)  # the ALiBi slope is s2/e2 (1 - x); the exact one s2 / (e2 (1 + x))
    bound = 1.1 * (s2 / e2) * x**2 + h * (s2 / e2) ** 2
    assert abs(slope - measurement.alibi_slope(c=s2, s=e2, kappa=1.0, nu=nu)) < bound


# ---------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------


def _forms():
    """(name, callable(q, k, v, t) -> output) for each causal form, with fixed parameters."""
    iso = {
        "decay": _t([0.2, 0.05]),
        "frequencies": _t([[0.3, 1.1], [0.7, -0.4]]),
        "process_var": _t([0.3, 0.1]),
        "measurement_var": _t([0.5, 0.2]),
        "nu": 1.5,
    }
    per_feature = {**iso, "decay": _t([[0.2, 0.4], [0.05, 0.3]])}
    return [
        (
            "isotropic",
            lambda q, k, v, t: afa.isotropic_afa(q, k, v, t=t, block_size=2, **iso).output,
        ),
        ("tensor", lambda q, k, v, t: afa.tensor_afa(q, k, v, t=t, **per_feature).output),
        ("separable", lambda q, k, v, t: afa.separable_afa(q, k, v, t=t, **per_feature).output),
    ]


@pytest.mark.parametrize("name, form", _forms(), ids=[f[0] for f in _forms()])
def test_causal_forms_do_not_leak_the_future(name, form):
    gen = torch.Generator().manual_seed(31)
    q, k, v = (torch.randn(2, 2, 7, 4, dtype=F64, generator=gen) for _ in range(3))
    t = torch.cumsum(0.2 + torch.rand(7, dtype=F64, generator=gen), 0)
    base = form(q, k, v, t)
    cut = 3
    q2, k2, v2 = (x.clone() for x in (q, k, v))
    for x in (q2, k2, v2):
        x[..., cut + 1 :, :] += 10 * torch.randn(
            x[..., cut + 1 :, :].shape, dtype=F64, generator=gen
        )
    moved = form(q2, k2, v2, t)
    assert_close(f"{name}: past rows", moved[..., : cut + 1, :], base[..., : cut + 1, :], atol=0)
    assert (moved[..., cut + 1 :, :] - base[..., cut + 1 :, :]).abs().max() > 1e-3


@pytest.mark.parametrize("name, form", _forms(), ids=[f[0] for f in _forms()])
def test_time_shift_invariance(name, form):
    gen = torch.Generator().manual_seed(32)
    q, k, v = (torch.randn(2, 2, 6, 4, dtype=F64, generator=gen) for _ in range(3))
    t = torch.cumsum(0.2 + torch.rand(6, dtype=F64, generator=gen), 0)
    # t + c changes the stamps by round-off of |t + c| ~ 1e3: ~1e-13 relative.
    assert_close(name, form(q, k, v, t + 1234.5), form(q, k, v, t), atol=1e-10)


def test_module_causality_and_time_shift():
    gen = torch.Generator().manual_seed(33)
    layer = AdaptiveFilterAttention(4, 2, nu=2.0, gate="prediction-gate", generator=gen, dtype=F64)
    x = torch.randn(2, 7, 4, dtype=F64, generator=gen)
    t = torch.cumsum(0.3 + torch.rand(7, dtype=F64, generator=gen), 0)
    y, _ = layer(x, t)
    x2 = x.clone()
    x2[:, 5:] += 5.0
    y2, _ = layer(x2, t)
    assert_close("module past rows", y2[:, :5], y[:, :5], atol=0)
    assert_close("module time shift", layer(x, t + 500.0)[0], y, atol=1e-10)


def test_uniform_spacing_detects_exact_grids_only():
    from kernels.ops.afa.params import uniform_spacing

    grid = 0.5 * torch.arange(6, dtype=F64).view(1, 1, 6)
    assert uniform_spacing(grid) == 0.5
    assert uniform_spacing(grid.expand(3, 1, 6)) == 0.5  # one grid shared by the batch
    nudged = grid.clone()
    nudged[0, 0, 4] += 1e-12
    assert uniform_spacing(nudged) is None
    rows = torch.cat((grid, 2 * grid))  # two sequences, two spacings
    assert uniform_spacing(rows) is None
    assert uniform_spacing(grid.clone().requires_grad_()) is None  # stamps with a gradient
    assert uniform_spacing(grid[..., :1]) == 1.0  # one stamp: only the zero lag


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("grad", [False, True])
def test_uniform_stamps_take_the_toeplitz_path_with_the_same_result(causal, grad, monkeypatch):
    """Stamps ``t_0 + i h`` (h = 0.25, t_0 = 3) evaluate the lag kernels once per call on the
    lags ``h (i - j)``, in training (autograd) and inference: the same output as the general
    path on the same stamps (round-off: the lags are the same numbers), and the general path is
    not entered."""
    from kernels.ops.afa import isotropic, params

    gen = torch.Generator().manual_seed(44)
    q, k, v = (torch.randn(2, 2, 9, 4, dtype=F64, generator=gen) for _ in range(3))
    qk, value = _random_heads(gen, 2, 2, 2, per_feature=False)
    t = 3.0 + 0.25 * torch.arange(9, dtype=F64)
    call = {"t": t, "nu": 1.3, "temperature": 1.1, "causal": causal, "block_size": 4}

    def run():
        with torch.set_grad_enabled(grad):
            inputs = [x.clone().requires_grad_(grad) for x in (q, k, v)]
            return afa.isotropic_afa(*inputs, **call, **qk, **value).output.detach()

    with monkeypatch.context() as m:
        m.setattr(params, "uniform_spacing", lambda positions: None)
        reference = run()

    def refuse(*args, **kwargs):
        raise AssertionError("uniform stamps took the general path")

    monkeypatch.setattr(isotropic, "_IrregularKernels", refuse)
    assert_close("uniform stamps", run(), reference, atol=1e-13)
    jittered = t.clone()
    jittered[5] += 1e-3  # control: a non-uniform grid still needs the general path
    with pytest.raises(AssertionError, match="general path"):
        afa.isotropic_afa(q, k, v, **{**call, "t": jittered}, **qk, **value)


def test_gradcheck_isotropic_with_parameters():
    gen = torch.Generator().manual_seed(41)

    def leaf(*shape, low=None):
        x = (
            torch.randn(*shape, dtype=F64, generator=gen)
            if low is None
            else (low + torch.rand(*shape, dtype=F64, generator=gen))
        )
        return x.requires_grad_()

    q, k = leaf(1, 2, 4, 4), leaf(1, 2, 4, 4)
    v = leaf(1, 2, 4, 2)
    decay, freq, vfreq = leaf(2, low=0.1), leaf(2, 2), leaf(2, 1)
    s2, e2, nu, temp = leaf(2, low=0.1), leaf(2, low=0.3), leaf(2, low=1.0), leaf(2, low=0.5)
    t = torch.tensor([0.0, 0.4, 1.1, 1.5], dtype=F64)
    for causal, times in ((True, None), (False, t)):  # uniform causal; irregular non-causal

        def fn(q, k, v, decay, freq, vfreq, s2, e2, nu, temp, causal=causal, times=times):
            return afa.isotropic_afa(
                q,
                k,
                v,
                t=times,
                decay=decay,
                frequencies=freq,
                value_frequencies=vfreq,
                process_var=s2,
                measurement_var=e2,
                nu=nu,
                temperature=temp,
                causal=causal,
                block_size=3,
            ).output

        # fast mode: random projections of the Jacobians (every input still enters)
        inputs = (q, k, v, decay, freq, vfreq, s2, e2, nu, temp)
        assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


def test_gradcheck_tensor_separable_and_predict():
    gen = torch.Generator().manual_seed(42)
    q, k, v = (torch.randn(1, 1, 4, 4, dtype=F64, generator=gen).requires_grad_() for _ in range(3))
    decay = (0.1 + torch.rand(1, 2, dtype=F64, generator=gen)).requires_grad_()
    freq = torch.randn(1, 2, dtype=F64, generator=gen).requires_grad_()
    s2 = (0.2 + torch.rand(1, 2, dtype=F64, generator=gen)).requires_grad_()
    e2 = (0.3 + torch.rand(1, 2, dtype=F64, generator=gen)).requires_grad_()
    for form in (afa.tensor_afa, afa.separable_afa):

        def fn(q, k, v, decay, freq, s2, e2, form=form):
            return form(
                q, k, v, decay=decay, frequencies=freq, process_var=s2, measurement_var=e2, nu=1.3
            ).output

        assert torch.autograd.gradcheck(fn, (q, k, v, decay, freq, s2, e2))
    assert torch.autograd.gradcheck(
        lambda x, a, w: afa.predict(x, decay=a, frequencies=w, step=0.7), (q, decay, freq)
    )


def test_module_gradients_reach_every_parameter():
    gen = torch.Generator().manual_seed(43)
    for options in (
        {"gate": "residual", "learn_step": True, "nu": 2.0, "learn_nu": True},
        {"gate": "prediction-gate", "tensor_form": True, "nu": 2.0},
    ):
        layer = AdaptiveFilterAttention(4, 2, generator=gen, dtype=F64, **options)
        x = torch.randn(2, 5, 4, dtype=F64, generator=gen)
        layer(x)[0].pow(2).sum().backward()
        for name, p in layer.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
            assert p.grad.abs().max() > 0, name


@pytest.mark.parametrize("decay, nu", [(0.05, 2.0), (1e-12, math.inf)])
def test_float32_long_sequence_is_finite(decay, nu):
    """T = 8192 in float32 (one head, D = 4): decays on lags, logits in log space."""
    gen = torch.Generator().manual_seed(51)
    q, k, v = (torch.randn(1, 1, 8192, 4, generator=gen) for _ in range(3))
    params = {
        "decay": torch.tensor([decay]),
        "frequencies": torch.tensor([[0.3, 1.7]]),
        "process_var": torch.tensor([0.1]),
        "measurement_var": torch.tensor([0.5]),
    }
    out = afa.isotropic_afa(q, k, v, nu=nu, **params).output
    assert torch.isfinite(out).all()
    assert out.abs().max() <= v.abs().max()  # a convex combination of decayed, rotated values


def test_vanishing_decay_is_continuous():
    """``a -> 0`` reaches the ``sigma^2 |tau| + eta^2`` limit smoothly (float32 and float64)."""
    gen = torch.Generator().manual_seed(52)
    for dtype, tol in ((F64, 1e-10), (torch.float32, 1e-5)):
        q, k, v = (torch.randn(1, 1, 64, 4, dtype=dtype, generator=gen) for _ in range(3))
        params = {
            "frequencies": torch.tensor([[0.3, 1.7]]),
            "process_var": torch.tensor([0.1]),
            "measurement_var": torch.tensor([0.5]),
            "nu": 2.0,
        }
        tiny = afa.isotropic_afa(q, k, v, decay=torch.tensor([1e-12]), **params).output
        zero = afa.isotropic_afa(q, k, v, decay=torch.tensor([0.0]), **params).output
        assert torch.isfinite(tiny).all()
        assert_close(f"decay 1e-12 vs 0 ({dtype})", tiny, zero, atol=tol)


def test_module_shapes_weights_and_gates():
    gen = torch.Generator().manual_seed(53)
    x = torch.randn(2, 5, 6, generator=gen)
    for options in (
        {},
        {"gate": None, "predict": False},
        {"gate": "prediction-gate"},
        {"causal": False, "nu": 1.0},
        {"tensor_form": True},
    ):
        layer = AdaptiveFilterAttention(6, 3, generator=gen, **options)
        y, w = layer(x, need_weights=True)
        assert y.shape == x.shape and y.dtype == x.dtype
        assert w.shape == (2, 3, 5, 5)
        assert_close("rows sum to one", w.sum(-1), torch.ones(2, 3, 5), atol=1e-5)
        if options.get("causal", True):
            assert torch.all(w.triu(1) == 0)
        assert layer(x)[1] is None


def test_errors_name_the_argument():
    q = torch.zeros(1, 2, 5, 4)
    p = {
        "decay": torch.ones(2),
        "frequencies": torch.ones(2, 2),
        "process_var": torch.ones(2),
        "measurement_var": torch.ones(2),
    }
    with pytest.raises(ValueError, match="q and k must have equal shapes"):
        afa.isotropic_afa(q, torch.zeros(1, 2, 5, 6), q, **p)
    with pytest.raises(ValueError, match="v must share"):
        afa.isotropic_afa(q, q, torch.zeros(1, 2, 4, 4), **p)
    with pytest.raises(ValueError, match="strictly increasing"):
        afa.isotropic_afa(q, q, q, t=torch.tensor([0.0, 1.0, 1.0, 2.0, 3.0]), **p)
    with pytest.raises(ValueError, match="at least one time step"):
        empty = torch.zeros(1, 2, 0, 4)
        afa.isotropic_afa(empty, empty, empty, **p)
    with pytest.raises(ValueError, match="D must be even"):
        odd = torch.zeros(1, 2, 5, 3)
        afa.isotropic_afa(odd, odd, odd, **p)
    with pytest.raises(ValueError, match="value_frequencies is required"):
        afa.isotropic_afa(q, q, torch.zeros(1, 2, 5, 6), **p)
    with pytest.raises(ValueError, match="frequencies must have shape"):
        afa.isotropic_afa(q, q, q, **{**p, "frequencies": torch.ones(3, 2)})
    with pytest.raises(ValueError, match="measurement_var must be > 0"):
        afa.isotropic_afa(q, q, q, **{**p, "measurement_var": torch.zeros(2)})
    with pytest.raises(ValueError, match="decay must be >= 0"):
        afa.tensor_afa(q, q, q, **{**p, "decay": -torch.ones(2)})
    with pytest.raises(ValueError, match="nu must be > 0"):
        afa.isotropic_afa(q, q, q, nu=0.0, **p)
    with pytest.raises(ValueError, match="causal lags only"):
        afa.tensor_afa(q, q, q, precision="separable", causal=False, **p)
    with pytest.raises(ValueError, match="block_size"):
        afa.isotropic_afa(q, q, q, block_size=0, **p)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        AdaptiveFilterAttention(6, 4)
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        AdaptiveFilterAttention(6, 0)
    with pytest.raises(ValueError, match="embed_dim must be even"):
        AdaptiveFilterAttention(5, 1, complex_input=True)
    with pytest.raises(ValueError, match="gate must be one of"):
        AdaptiveFilterAttention(4, 2, gate="sigmoid")
    layer = AdaptiveFilterAttention(4, 2)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 4\)"):
        layer(torch.zeros(2, 5, 3))
    with pytest.raises(ValueError, match="strictly increasing"):
        layer(torch.zeros(1, 3, 4), torch.tensor([0.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match="isotropic layer"):
        AdaptiveFilterAttention.from_eigen(np.eye(2), [-0.1 + 1j, -0.2 - 1j], 0.1, 0.2)


@pytest.mark.slow
def test_isotropic_form_under_torch_compile():
    """No data-dependent control flow in the hot path: the compiled function matches eager."""
    gen = torch.Generator().manual_seed(61)
    q, k, v = (torch.randn(2, 2, 64, 8, generator=gen) for _ in range(3))
    p = {
        "decay": torch.tensor([0.1, 0.02]),
        "frequencies": torch.rand(2, 4, generator=gen),
        "process_var": torch.tensor([0.1, 0.2]),
        "measurement_var": torch.tensor([1.0, 0.5]),
        "nu": 2.0,
        "block_size": 16,
    }
    compiled = torch.compile(lambda q, k, v: afa.isotropic_afa(q, k, v, **p).output)
    assert_close("compiled", compiled(q, k, v), afa.isotropic_afa(q, k, v, **p).output, atol=1e-5)


def test_process_noise_false_fixes_sigma2_at_zero():
    """``process_noise=False``: sigma^2 is exactly 0 and not a parameter; the layer equals the
    learned-sigma^2 layer holding sigma^2 = 0; from_eigen refuses a positive sigma^2 for it."""
    gen = torch.Generator().manual_seed(0)
    fixed = AdaptiveFilterAttention(4, 2, process_noise=False, generator=gen).double()
    assert "raw_process_var" not in dict(fixed.named_parameters())
    assert torch.equal(fixed.dynamics()["process_var"], torch.zeros(2, dtype=torch.float64))
    learned = AdaptiveFilterAttention(4, 2).double()
    learned.load_state_dict(fixed.state_dict())  # the buffer's -inf into the parameter
    x = torch.randn(2, 9, 4, generator=gen, dtype=torch.float64)
    assert torch.equal(fixed(x)[0], learned(x)[0])
    fixed(x)[0].square().sum().backward()
    assert torch.isfinite(fixed.raw_decay.grad).all() and fixed.raw_decay.grad.abs().sum() > 0
    S = np.array([[1, 1], [-1j, 1j]]) / np.sqrt(2)
    eig = np.array([-0.1 + 1j, -0.1 - 1j])
    AdaptiveFilterAttention.from_eigen(S, eig, 0.0, 1.0, process_noise=False)
    with pytest.raises(ValueError, match="process_var must be 0"):
        AdaptiveFilterAttention.from_eigen(S, eig, 0.1, 1.0, process_noise=False)
    with pytest.raises(TypeError, match="process_noise must be a bool"):
        AdaptiveFilterAttention(4, 2, process_noise=0)


def _eleven_step_problem(gen, times: str):
    """``q, k (2, 3, 11, 4)``, ``v (2, 3, 11, 6)`` float64, stamps (None: uniform, else
    irregular per sequence) and random per-head dynamics: T = 11 is not a multiple of the block
    sizes the tests below force."""
    batch, heads, steps, n, nv = 2, 3, 11, 2, 3
    q, k = (torch.randn(batch, heads, steps, 2 * n, dtype=F64, generator=gen) for _ in range(2))
    v = torch.randn(batch, heads, steps, 2 * nv, dtype=F64, generator=gen)
    t = (
        None
        if times == "uniform"
        else torch.cumsum(0.1 + torch.rand(batch, steps, dtype=F64, generator=gen), 1)
    )
    qk, value = _random_heads(gen, heads, n, nv, per_feature=False)
    return q, k, v, t, qk, value


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("nu", [math.inf, 1.3])
@pytest.mark.parametrize("times", ["uniform", "batched"])
def test_key_chunks_equal_the_whole_rows(causal, nu, times, monkeypatch):
    """Keys taken in chunks (online softmax, `_attend_chunked`) give the tensor form's output
    and gradients; every tile is at most ``block x chunk`` (old tiles grew to ``block x T``)."""
    from kernels.ops.afa import isotropic

    monkeypatch.setattr(isotropic, "_KEY_CHUNK", 4)  # 11 keys: chunks of 4, 4, 3
    widths = []
    logits = isotropic._logits

    def recorded(tile, *args):
        out = logits(tile, *args)
        widths.append(out.shape[-1])
        return out

    monkeypatch.setattr(isotropic, "_logits", recorded)
    gen = torch.Generator().manual_seed(14)
    q, k, v, t, qk, value = _eleven_step_problem(gen, times)
    common = {"t": t, "nu": nu, "temperature": 1.4, "causal": causal}
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    chunked = afa.isotropic_afa(*leaves, block_size=2, **common, **qk, **value).output
    assert widths and max(widths) <= 4, widths
    reference = [x.clone().requires_grad_() for x in (q, k, v)]
    whole = afa.tensor_afa(*reference, **common, **qk, **value).output
    assert_close("chunked output", chunked, whole, atol=SAME_FORMULA_ATOL)
    weights = torch.randn(whole.shape, dtype=F64, generator=gen)
    (chunked * weights).sum().backward()
    (whole * weights).sum().backward()
    for name, a, b in zip("qkv", leaves, reference, strict=True):
        if b.grad is None:  # nu = inf: q and k do not enter
            assert a.grad is None or not a.grad.any(), name
            continue
        assert_close(f"d{name}", a.grad, b.grad, atol=SAME_FORMULA_ATOL)


@pytest.mark.parametrize("times", ["uniform", "batched"])
@pytest.mark.parametrize("nu", [math.inf, 1.3])
@pytest.mark.parametrize("options", ["plain", "biases", "normalized"])
@pytest.mark.parametrize("temperature", [1.4, 1.0])
def test_inplace_inference_path_equals_the_autograd_path(
    times, nu, options, temperature, monkeypatch
):
    """Without autograd a causal call runs in place (issue 19: keys in chunks, queries in
    groups of whole blocks): on the uniform grid `_attend_bounded` (the prior's maximum for the
    row maximum; ``temperature = 1``: the rational weight, no log or exp), on stamps
    `_attend_chunked_inplace`. The same output as the autograd path (and, plain, the tensor
    form) at T = 11 (not a multiple of the block, the group or the chunk: 3 chunks of 4, 4, 3
    keys for the last group), with biases and normalized queries/keys."""
    from kernels.ops.afa import isotropic

    monkeypatch.setattr(isotropic, "_INFERENCE_KEY_CHUNK", 4)
    monkeypatch.setattr(isotropic, "_INFERENCE_ROWS", 4)  # groups of 2 blocks of 2 queries
    seen = record_inplace_paths(monkeypatch, isotropic, "_attend_chunked_inplace")
    gen = torch.Generator().manual_seed(19)
    q, k, v, t, qk, value = _eleven_step_problem(gen, times)
    heads, n, nv = q.shape[1], q.shape[-1] // 2, v.shape[-1] // 2
    common = {"t": t, "nu": nu, "temperature": temperature, "causal": True, **qk, **value}
    extra = {
        "plain": {},
        "biases": {
            "bias_qk": torch.randn(heads, 2 * n, dtype=F64, generator=gen),
            "bias_v": torch.randn(heads, 2 * nv, dtype=F64, generator=gen),
        },
        "normalized": {"normalized_qk": True},
    }[options]
    with torch.no_grad():
        fast = afa.isotropic_afa(q, k, v, block_size=2, **common, **extra).output
        whole = afa.tensor_afa(q, k, v, **common).output
    path = "bounded" if times == "uniform" else "exact"
    assert [4, 4, 3] in seen[path], seen
    assert seen["fallbacks"] == 0 and seen["rational"] <= {temperature == 1.0}
    calls = len(seen["bounded"]) + len(seen["exact"])
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    slow = afa.isotropic_afa(*leaves, block_size=2, **common, **extra).output
    assert len(seen["bounded"]) + len(seen["exact"]) == calls  # autograd: out-of-place path
    assert_close("in-place vs autograd path", fast, slow, atol=SAME_FORMULA_ATOL)
    with torch.no_grad():  # default block, one chunk per group
        default = afa.isotropic_afa(q, k, v, **common, **extra).output
    assert_close("in-place path, default block", default, fast, atol=SAME_FORMULA_ATOL)
    if options == "plain":
        assert_close("in-place path vs tensor form", fast, whole, atol=SAME_FORMULA_ATOL)


# Extreme inputs for `_attend_bounded`: (changes, whether it falls back in float32, in float64)
_EXTREME = {
    # sigma^2 = 0: log P_v = 2 a tau - log eta^2 grows by 2 a = 1.1 a lag, so a chunk's first
    # row sees at most e^{-69} of the bound (1e-30: below n tiny / eps in float32 only)
    "no process noise": ({"process_var": 0.0, "decay": 0.55}, {}, True, False),
    # (1 + u)^-500 with u ~ 10 at lag 0: e^-1200, below either dtype's range
    "large temperature": ({}, {"temperature": 500.0}, True, True),
    # query 7 of magnitude ~1e13: u ~ 1e27, (1 + u)^-2 ~ 1e-54 (float32's range ends at 1e-38)
    "outlier": ({}, {"temperature": 2.0, "outlier": 1e13}, True, False),
    # decay 1e-8: every prior and decay rounds to its zero-lag value
    "tiny decay": ({"decay": 1e-8}, {}, False, False),
    # decay 30: E = e^{-30 tau} flushed to 0 beyond a lag or two
    "huge decay": ({"decay": 30.0}, {}, False, False),
}


@pytest.mark.parametrize("case", list(_EXTREME))
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_bounded_inference_path_at_extreme_inputs(case, dtype, monkeypatch):
    """`_attend_bounded` replaces the row maximum by the prior's. Where that bound is so far
    above a row's maximum that the row's terms leave the dtype's range (`_EXTREME`) it must
    fall back to `_attend_chunked_inplace` (the exact row maximum), elsewhere agree without
    one; either way the in-place output equals the float64 autograd path (float32: within
    the rounding of its logits)."""
    from kernels.ops.afa import isotropic

    monkeypatch.setattr(isotropic, "_INFERENCE_KEY_CHUNK", 64)
    monkeypatch.setattr(isotropic, "_INFERENCE_ROWS", 64)  # chunks of 64 and 16 keys
    seen = record_inplace_paths(monkeypatch, isotropic, "_attend_chunked_inplace")
    gen = torch.Generator().manual_seed(20)
    batch, heads, steps, n = 2, 3, 80, 4
    q, k, v = (torch.randn(batch, heads, steps, 2 * n, dtype=F64, generator=gen) for _ in range(3))
    dynamics, robust, f32_falls_back, f64_falls_back = _EXTREME[case]
    dyn = {
        "decay": torch.tensor([0.05, 0.3, 1.0], dtype=F64),
        "frequencies": torch.randn(heads, n, dtype=F64, generator=gen),
        "process_var": torch.full((heads,), 0.2, dtype=F64),
        "measurement_var": torch.full((heads,), 0.5, dtype=F64),
    }
    dyn.update({key: torch.full((heads,), x, dtype=F64) for key, x in dynamics.items()})
    if "outlier" in robust:
        q[:, :, 7] *= robust["outlier"]
    common = {"nu": 0.7, "temperature": robust.get("temperature", 1.0), "causal": True}
    cast = {key: x.to(dtype) for key, x in dyn.items()}
    with torch.no_grad():
        fast = afa.isotropic_afa(q.to(dtype), k.to(dtype), v.to(dtype), **common, **cast).output
    falls_back = f32_falls_back if dtype == torch.float32 else f64_falls_back
    assert seen["bounded"] and (seen["fallbacks"] > 0) == falls_back, seen
    assert len(seen["exact"]) == seen["fallbacks"]  # each fallback reruns its group exactly
    assert torch.isfinite(fast).all()
    if dtype == F64:
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        slow = afa.isotropic_afa(*leaves, **common, **dyn).output
        assert_close(f"{case}: in-place vs autograd path", fast, slow, atol=SAME_FORMULA_ATOL)
        return
    # float32 against the exact in-place path (row maximum; `_attend_bounded` switched off):
    # the same weights up to the rounding of their exponents, at most eps (|L - m| + 3) with
    # |L - m| <= 60 on the groups that do not fall back (prior spread + temperature log(1 + u)),
    # so a relative 64 eps per weight and 64 eps max|v| on the weighted means (rows sum to 1,
    # |E_v| <= 1); groups that fall back are the exact path's own result.
    monkeypatch.setattr(isotropic, "_attend_bounded", lambda *args, **kwargs: None)
    with torch.no_grad():
        exact = afa.isotropic_afa(q.to(dtype), k.to(dtype), v.to(dtype), **common, **cast).output
    atol = 64 * torch.finfo(dtype).eps * v.abs().max().item()
    assert_close(f"{case}: bounded vs exact float32 path", fast, exact, atol=atol)


@pytest.mark.slow
def test_isotropic_afa_at_T_65536_under_an_address_space_limit(tmp_path):
    """T = 65536 float32 (block 64) in a child process limited to 3 GiB of address space: the
    key-chunked tiles keep it far below (it once died at ~3.7 GB under 4 GiB, RELIABILITY.md)."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import resource
        limit = 3 * 2**30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        import torch
        from kernels.ops import afa
        torch.set_num_threads(1)
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(1, 1, 65536, 4, generator=g) for _ in range(3))
        t = torch.cumsum(0.5 + torch.rand(65536, generator=g), 0)
        with torch.no_grad():
            out = afa.isotropic_afa(
                q, k, v, t=t, decay=0.1, frequencies=torch.tensor([[0.3, 0.7]]),
                process_var=0.2, measurement_var=1.0, nu=4.0, block_size=64,
            ).output
        assert torch.isfinite(out).all()
        print("peak MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
        """
    )
    root = str(__import__("pathlib").Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=3600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "peak MiB" in done.stdout

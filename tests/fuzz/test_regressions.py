"""Regression tests for the defects the fuzz suite found (RELIABILITY.md, "Defects found").

Each names the input that once ended badly and what it gave then."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from estimators import fit as fitting
from estimators import irls, scan
from estimators.kalman import GaussianPrior, kalman_filter, rts_smoother
from estimators.recurrent import recurrent_filter
from kernels._validation import MagnitudeWarning
from sde_sim import (
    EveryKSteps,
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    Scenario,
    SphericalShellInitial,
    linear_transition,
    simulate,
)
from sde_sim.validation import EulerStabilityWarning
from tests.fuzz.api import functional as F

A2 = np.array([[-0.5, 1.0], [-1.0, -0.5]])
SDE = LinearSDE.from_covariance(A2, 0.3 * np.eye(2))
MEAS = LinearMeasurement(np.eye(2), 0.5 * np.eye(2))
Z = np.random.default_rng(0).normal(size=(2, 6, 2))
T6 = np.arange(6) * 0.1
PRIOR = GaussianPrior(np.zeros(2), np.eye(2))


# ---- estimators ---------------------------------------------------------------------------------


def test_rts_smoother_refuses_what_is_not_a_filter_result():
    """rts_smoother(None) raised AttributeError ('NoneType' object has no attribute 'means')."""
    for bad in (None, (1, 2), {"means": Z}):
        with pytest.raises(TypeError, match="filtered must be the FilterResult"):
            rts_smoother(bad)


def test_log_likelihood_names_theta_not_theta0():
    family = fitting.IsotropicFamily(2, rotation="rope")
    with pytest.raises(ValueError, match=r"\btheta has 1 NaN"):
        fitting.log_likelihood(family, [-0.5, 0.5, 0.3, np.nan], Z, T6)


def test_log_likelihood_names_a_ragged_z():
    """Found by the slow profile: a ragged ``z`` failed in ``np.shape`` and the guard reported
    the computation's scales instead of naming ``z``."""
    family = fitting.IsotropicFamily(2, rotation="rope")
    ragged = [[[1.0, 0.0], [0.5, 0.2], [0.1, 0.3]], [[0.2, 0.1], [0.4, 0.3]]]
    with pytest.raises(TypeError, match=r"\bz must be"):
        fitting.log_likelihood(family, [-0.5, 0.5, 0.3, 0.2], ragged, T6[:3])


@pytest.mark.parametrize("estimate", [kalman_filter, recurrent_filter, irls.irls])
def test_measurements_and_times_beyond_1e150_are_refused_by_name(estimate):
    """z * 1e300 gave non-finite means and log-likelihoods (kalman_filter) without a word."""
    with pytest.raises(ValueError, match=r"^z has entries of magnitude up to"):
        estimate(SDE, MEAS, Z * 1e300, T6)
    with pytest.raises(ValueError, match=r"^t has entries of magnitude up to"):
        estimate(SDE, MEAS, Z, T6 * 1e300)


@pytest.mark.parametrize(
    "change, word",
    [
        ({"A": -A2 * 1e300}, "A"),  # unstable: e^{Ah} overflows, NaN means and likelihood
        ({"C": np.eye(2) * 1e300}, "C"),  # C P C^T overflows: non-finite log-likelihood
        ({"u": np.full(2, 1e300)}, "u"),  # the drift's offset overflows
        ({"prior_cov": np.eye(2) * 1e300}, "prior.cov"),  # LinAlgError 'not positive definite'
        ({"prior_mean": np.full(2, 1e300)}, "prior.mean"),  # inf log-likelihood
    ],
)
def test_kalman_filter_overflow_names_the_input(change, word):
    A, C, u = change.get("A", A2), change.get("C", np.eye(2)), change.get("u")
    sde = LinearSDE.from_covariance(A, 0.3 * np.eye(2), u) if "A" not in change else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if sde is None:
            sde = LinearSDE(A, np.sqrt(0.3) * np.eye(2))
        prior = GaussianPrior(
            change.get("prior_mean", np.zeros(2)), change.get("prior_cov", np.eye(2))
        )
        with pytest.raises(ValueError, match=rf"(?<![A-Za-z_]){word}(?![A-Za-z_])") as info:
            kalman_filter(sde, LinearMeasurement(C, 0.5 * np.eye(2)), Z, T6, prior=prior)
    assert "LinAlgError" not in info.typename


def test_irls_overflow_names_the_model_not_an_internal_quantity():
    """irls with A * 1e300 said only 'mahalanobis_sq has 162 NaN or infinite entries'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sde = LinearSDE(-A2 * 1e300, np.sqrt(0.3) * np.eye(2))
        with pytest.raises(ValueError, match=r"magnitudes furthest from 1 .*\bA\b"):
            irls.irls(sde, MEAS, Z, T6, nu=1.0)


@pytest.mark.parametrize("filter_", [scan.kla_filter, scan.moment_filter])
def test_kla_filters_name_an_overflowing_a_bar(filter_):
    """a_bar = 1e300 gave NaN means and variances ('overflow encountered in multiply')."""
    k = np.ones((5, 2))
    with pytest.raises(ValueError, match=r"\ba_bar\b"):
        filter_(k, np.ones((5, 2)), k, np.full(2, 1e300), np.full(2, 0.1))


# ---- sde_sim ------------------------------------------------------------------------------------


@pytest.mark.parametrize("h", [1e16, 1e18, 1e20, 1e50, 1e300])
def test_linear_transition_over_very_long_steps_is_the_stationary_limit(h):
    """expm of the whole step gave offset 0.44 instead of 1.2 at h = 1e16, 7e27 at 1e18 and NaN
    from 1e20 on: now halved and doubled, as Q_d already was."""
    u = np.ones(2)
    maps = linear_transition(LinearSDE.from_covariance(A2, 0.2 * np.eye(2), u), h)
    np.testing.assert_allclose(maps.offset[0], -np.linalg.solve(A2, u), rtol=1e-12)
    np.testing.assert_allclose(maps.Qd[0], 0.2 * np.eye(2), rtol=1e-12, atol=1e-15)  # Q / 2a
    np.testing.assert_array_equal(maps.Phi[0], np.zeros((2, 2)))


def test_linear_transition_refuses_a_nan_step():
    with pytest.raises(ValueError, match=r"^h has 1 NaN"):
        linear_transition(SDE, [0.1, np.nan])


def test_euler_on_a_stiff_stable_system_warns_naming_the_step():
    """A = -1000 I, dt = 0.01: Euler paths reached 7e190 (and inf with more steps) silently."""
    stiff = LinearSDE.from_covariance(-1000 * np.eye(2), 0.1 * np.eye(2))
    scenario = Scenario(
        stiff, MEAS, GaussianInitial([1.0, 0.0]), dt=0.01, n_steps=5, observations=EveryKSteps(1)
    )
    with pytest.warns(EulerStabilityWarning, match=r"\(A\) at the step dt = 0.01"):
        simulate(scenario, 1, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EulerStabilityWarning)
        simulate(scenario, 1, seed=0, method="exact")  # exact: no warning


def test_radial_tangential_euler_with_a_huge_decay_warns_naming_mu_r():
    system = RadialTangentialSDE(np.zeros((3, 3)), 1e300, 0.2, 0.2, 0.1)
    scenario = Scenario(
        system,
        RadialTangentialMeasurement(0.1, 0.1),
        SphericalShellInitial(3, 0.8, 1.2),
        dt=0.05,
        n_steps=4,
        observations=EveryKSteps(2),
    )
    with pytest.warns(EulerStabilityWarning, match="mu_r"):
        simulate(scenario, 1, seed=0)


# ---- kernels ------------------------------------------------------------------------------------


def _qkv(T=5, H=1, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(1, H, T, 4, generator=g, dtype=dtype) for _ in range(3)]


def test_separable_afa_with_a_tiny_process_variance_warns_naming_it():
    """process_var = 1e-30 (float32): 1/lam_eff overflows; the output was inf/NaN silently."""
    q, k, v = _qkv()
    with pytest.warns(MagnitudeWarning, match="process_var"):
        out = F("separable_afa")(
            q,
            k,
            v,
            decay=torch.tensor([0.2]),
            frequencies=torch.zeros(1, 2),
            process_var=torch.tensor([1e-30]),
            measurement_var=torch.tensor([0.5]),
        ).output
    assert not torch.isfinite(out).all()


def test_attention_on_huge_inputs_warns_naming_them():
    q, k, v = _qkv()
    with pytest.warns(MagnitudeWarning, match=r"^q has entries of magnitude up to"):
        F("softmax_attention")(q * 1e30, k, v)


@pytest.mark.parametrize(
    "change, word",
    [
        ({"frequencies": torch.tensor([[math.nan, 0.0]])}, "frequencies"),  # NaN output
        ({"decay": torch.tensor([math.inf])}, "decay"),  # NaN output
        ({"process_var": torch.tensor([math.inf])}, "process_var"),  # NaN output
        ({"frequencies": "fast"}, "frequencies"),  # torch's 'new(): invalid data type'
    ],
)
def test_unrolled_afa_refuses_non_finite_and_non_numeric_parameters(change, word):
    v = _qkv()[2]
    kwargs = dict(
        decay=torch.tensor([0.2]),
        frequencies=torch.zeros(1, 2),
        process_var=torch.tensor([0.1]),
        measurement_var=torch.tensor([0.5]),
    )
    kwargs.update(change)
    with pytest.raises((ValueError, TypeError), match=rf"^{word}"):
        F("unrolled_afa")(v, **kwargs)


def test_unrolled_afa_names_values_with_no_heads():
    """H = 0 was reported as 'decay must be a scalar or have shape (0,)'."""
    with pytest.raises(ValueError, match="^values must hold at least one sequence and one head"):
        F("unrolled_afa")(
            torch.zeros(1, 0, 3, 4),
            decay=0.1,
            frequencies=torch.zeros(2),
            process_var=0.1,
            measurement_var=0.5,
        )


def test_kalman_attention_checks_its_arguments():
    """A list gave AttributeError, a wrong-length parameter a reshape RuntimeError, a half
    tensor 'expected scalar type Half but found Float'."""
    v = _qkv()[2]
    ok = dict(
        decay=torch.tensor([0.2]),
        frequencies=torch.zeros(1, 2),
        process_var=torch.tensor([0.1]),
        measurement_var=torch.tensor([0.5]),
    )
    times = torch.arange(5.0).view(1, 1, 5)
    with pytest.raises(TypeError, match="^values must be a torch.Tensor"):
        F("kalman_attention")(v.tolist(), times, **ok)
    with pytest.raises(ValueError, match="^measurement_var must have shape"):
        F("kalman_attention")(v, times, **{**ok, "measurement_var": torch.ones(2)})
    with pytest.raises(TypeError, match="^decay must have values' dtype"):
        F("kalman_attention")(v.half(), times, **ok)
    assert torch.isfinite(F("kalman_attention")(v, times, **ok)[0]).all()


def test_layers_name_x_when_it_is_empty_or_huge():
    from kernels.layers.afa import AdaptiveFilterAttention

    layer = AdaptiveFilterAttention(8, 2, generator=torch.Generator().manual_seed(0))
    for shape in ((0, 4, 8), (2, 0, 8)):  # was 'q, k, v must hold at least ...'
        with pytest.raises(ValueError, match="^x must hold at least one sequence and one step"):
            layer(torch.zeros(shape))
    with pytest.warns(MagnitudeWarning, match="^x has entries"):
        layer(torch.randn(1, 3, 8) * 1e30)


def test_sizes_refuse_booleans():
    """num_heads=True reached torch.empty ('found element of type bool')."""
    from kernels.layers.complex_linear import ComplexLinear
    from kernels.layers.osciformer import OscillatorAttention

    with pytest.raises(ValueError, match="^num_heads must be a positive integer"):
        OscillatorAttention(8, True)
    with pytest.raises(ValueError, match="^in_features must be a positive integer"):
        ComplexLinear(True, True)


def test_complex_linear_refuses_a_list():
    from kernels.layers.complex_linear import ComplexLinear

    with pytest.raises(TypeError, match="^x must be a torch.Tensor"):
        ComplexLinear(2, 2)([[1.0, 2.0, 3.0, 4.0]])


def test_kla_layer_long_gaps_forget_instead_of_failing():
    """t with a gap of 1e10 (or stamps up to 3e30): e^(-a dt) underflowed to 0 and the layer
    refused with 'a_bar must be > 0', naming an internal quantity; a gap that long forgets the
    past, exactly as a gap of 1e4 already does in float32."""
    from kernels.layers.kla import KalmanLinearAttention

    layer = KalmanLinearAttention(8, num_slots=4, generator=torch.Generator().manual_seed(0))
    x = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        far = layer(x, torch.tensor([0.0, 1.0, 1e10, 2e10]))[0]
        near = layer(x, torch.tensor([0.0, 1.0, 1e4, 2e4]))[0]
    torch.testing.assert_close(far, near)
    with pytest.raises(ValueError, match="^gap must be finite and > 0"):
        layer.step(x[:, 0], None, gap=math.inf)
    quiet = KalmanLinearAttention(
        8, num_slots=4, process_noise=False, generator=torch.Generator().manual_seed(0)
    )
    with pytest.raises(ValueError, match=r"^t \(or gap\) has a gap so long"):
        quiet(x, torch.tensor([0.0, 1.0, 1e30, 2e30]))


@pytest.mark.parametrize(
    "name, kwargs, word",
    [
        ("a5", {"n_train": 10**9, "train_length": 16}, "n_train"),
        ("mqar", {"n_sequences": 10**9, "seq_len": 128}, "n_sequences"),
        ("memorization", {"n_sequences": 10**9, "seq_len": 128}, "n_sequences"),
        ("irregular-rotation", {"n_sequences": 10**9, "n_steps": 64}, "n_sequences"),
        ("irregular-forecast", {"n_sequences": 10**9}, "n_sequences"),
        ("logistic-map", {"n_steps": 10**12}, "n_steps"),
    ],
)
def test_datasets_refuse_sizes_beyond_memory(name, kwargs, word):
    """A size of 10**9 once made a generator allocate until the OOM killer stopped the run
    (21.7 GB resident); now it is refused before any draw, naming the size and the GiB."""
    from verify.datasets import dataset

    with pytest.raises(ValueError, match=rf"\b{word}\b.*GiB"):
        dataset(name, seed=0, **kwargs)

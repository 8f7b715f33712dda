"""Unrolled AFA (seed 000 B.2, Algorithm 4): oracle, the batch form as K grows, properties, errors.

The oracle is `estimators.recurrent.eigen_recurrent_filter` (float64 numpy, the consistent reading
of B.2), on data simulated by `sde_sim` from an isotropic 2-D system ``A = -a I + Omega``, and the
Kalman filter (`estimators.kalman.kalman_filter`) at ``nu = inf``. The K-convergence test
measures the distance to the recursive fixed point and to the batch robust estimate
(`estimators.irls.eigen_irls`). `from_afa` is checked against the batch layer
(`kernels.layers.afa.AdaptiveFilterAttention`) where both are the Kalman filter.
"""

import functools
import math

import numpy as np
import pytest
import torch

from estimators import recurrent as rec
from estimators.irls import eigen_irls
from estimators.kalman import kalman_filter
from estimators.mle import DiagonalizableModel, eigen_batch_mle
from kernels.layers.afa import AdaptiveFilterAttention
from kernels.layers.complex_linear import UnitaryLinear
from kernels.layers.unrolled_afa import UnrolledAdaptiveFilterAttention
from kernels.ops.common import complex_pairs
from kernels.ops.unrolled import unrolled_afa
from sde_sim import (
    Contamination,
    EveryKSteps,
    FixedTimes,
    GaussianInitial,
    LinearMeasurement,
    Scenario,
    simulate,
)
from sde_sim.models import isotropic_sde
from tests.kernels.helpers import assert_close

# Two float64 implementations of the same recursion over ~100 steps differ by round-off, ~1e-15
# measured (the filter is contractive: errors do not accumulate); 1e-10 allowed.
ROUNDOFF = 1e-10
DECAY, OMEGA = 0.2, 1.0
# Unitary eigenbasis of Omega = [[0, -w], [w, 0]]: columns (1, -i)/sqrt2 (eigenvalue +iw) and
# its conjugate, so Q = sigma^2 I and R = eta^2 I stay sigma^2, eta^2 per mode.
S_2D = np.array([[1, 1], [-1j, 1j]]) / np.sqrt(2)
LAM_2D = np.array([-DECAY + 1j * OMEGA, -DECAY - 1j * OMEGA])
FREQ_2D = torch.tensor([OMEGA, -OMEGA], dtype=torch.float64)


@functools.cache
def _simulate(sigma2, eta2, *, seed, n_paths=3, irregular=False, outliers=0.1):
    """``z`` (P, M, 2), ``t`` (M,), true states (P, M, 2): isotropic 2-D system by sde_sim's
    exact sampler, every other step of 0.05 or (``irregular``) at 60 random grid times (gaps
    0.05 to ~1; on the grid, so the sampler needs one matrix exponential, not one per gap).
    Cached: parametrised tests share one simulation; callers must not modify the arrays."""
    Omega = np.array([[0.0, -OMEGA], [OMEGA, 0.0]])
    if irregular:
        steps = np.random.default_rng(seed).choice(201, size=60, replace=False)
        observations = FixedTimes(0.05 * np.sort(steps))
    else:
        observations = EveryKSteps(2)
    scenario = Scenario(
        isotropic_sde(-DECAY, Omega, sigma2),
        LinearMeasurement.identity(2, eta2),
        GaussianInitial(np.array([3.0, 0.0]), np.eye(2)),
        0.05,
        200,
        observations,
        Contamination(outlier_fraction=outliers),
    )
    sim = simulate(scenario, n_paths, seed=seed, method="exact")
    return sim.z, sim.t_obs, sim.x_obs


def _to_values(z, S):
    """Ambient ``z`` (B, T, d) -> eigen-coordinates as real pairs (B, 1, T, 2d)."""
    zs = z @ np.linalg.inv(S).T
    return torch.from_numpy(np.concatenate([zs.real, zs.imag], axis=-1)).unsqueeze(1)


def _to_ambient(output, S):
    """Real-pair head output (B, T, 2d) -> ambient real estimates ``S x_s`` (B, T, d)."""
    return torch.from_numpy((complex_pairs.to_complex(output).numpy() @ S.T).real)


def _filter_2d(z, t, sigma2, eta2, **kw):
    return unrolled_afa(
        _to_values(z, S_2D),
        t=torch.from_numpy(np.asarray(t)),
        decay=DECAY,
        frequencies=FREQ_2D,
        process_var=sigma2,
        measurement_var=eta2,
        **kw,
    )


# --- oracle ---------------------------------------------------------------------------------


@pytest.mark.parametrize("nu", [3.0, math.inf])
@pytest.mark.parametrize("weight", ["student-t", "rational"])
@pytest.mark.parametrize("irregular", [False, True])
def test_equals_the_eigen_recurrent_filter_for_K_1_2_5(nu, weight, irregular):
    """Exactly K inner iterations (reference with ``tol = 0``), regular and irregular times,
    10% Cauchy outliers; damping 1 and 0.6. Means, precisions and weights to round-off."""
    sigma2, eta2 = 0.1, 0.25
    z, t, _ = _simulate(sigma2, eta2, seed=11, irregular=irregular)
    for K in (1, 2, 5):
        for damping in (1.0, 0.6):
            kw = dict(nu=nu, weight=weight, damping=damping)
            ref = rec.eigen_recurrent_filter(
                LAM_2D, S_2D, [sigma2] * 2, [eta2] * 2, z, t, n_iter=K, tol=0.0, **kw
            )
            out = _filter_2d(z, t, sigma2, eta2, iterations=K, **kw)
            name = f"K={K} nu={nu} {weight} delta={damping}"
            assert_close(name, _to_ambient(out.output[:, 0], S_2D), ref.means, atol=ROUNDOFF)
            assert_close(
                name + " precision",
                out.precision[:, 0],
                1 / ref.mode_variances[..., 0],
                atol=0.0,
                rtol=ROUNDOFF,
            )
            assert_close(name + " weight", out.weight[:, 0], ref.weights, atol=ROUNDOFF)


def test_nu_inf_is_the_kalman_filter():
    """``nu = inf``: w = 1, and the recursion is the Kalman filter with exact discretisation and
    a diffuse prior, whatever K."""
    sigma2, eta2 = 0.3, 0.5
    z, t, _ = _simulate(sigma2, eta2, seed=5, irregular=True, outliers=0.0)
    Omega = np.array([[0.0, -OMEGA], [OMEGA, 0.0]])
    kf = kalman_filter(
        isotropic_sde(-DECAY, Omega, sigma2), LinearMeasurement.identity(2, eta2), z, t
    )
    for K in (1, 3):
        out = _filter_2d(z, t, sigma2, eta2, iterations=K)
        assert_close(f"Kalman K={K}", _to_ambient(out.output[:, 0], S_2D), kf.means, atol=ROUNDOFF)
        # isotropic: the Kalman covariance is v I with v = 1/precision
        assert_close("Kalman variance", 1 / out.precision[0, 0], kf.covs[0, :, 0, 0], atol=ROUNDOFF)
        assert np.all(np.abs(kf.covs[0, :, 0, 1]) < ROUNDOFF)
        assert torch.all(out.weight == 1)


def test_heads_with_their_own_parameters_irregular_batched_times_and_a_prior():
    """Two heads, each a 4-D isotropic system (two rotation planes, D = 8) with its own decay,
    frequencies, noise and nu, in a non-unitary eigenbasis; per-sequence irregular time stamps
    (B, T); a proper prior at t_0. Each head equals the reference run with its parameters."""
    rng = np.random.default_rng(4)
    B, T = 2, 30
    t = np.cumsum(rng.uniform(0.02, 0.7, size=(B, T)), axis=1)
    heads = [
        dict(a=0.3, w=(0.8, 2.5), s2=0.2, e2=0.4, nu=2.5),
        dict(a=0.0, w=(1.7, -0.4), s2=0.05, e2=0.9, nu=8.0),
    ]
    # Conjugate column pairs (real A), otherwise random: S = [s1, conj s1, s2, conj s2].
    cols = rng.normal(size=(4, 2)) + 1j * rng.normal(size=(4, 2))
    S = np.stack([cols[:, 0], cols[:, 0].conj(), cols[:, 1], cols[:, 1].conj()], axis=1)
    z = rng.standard_t(2.0, size=(B, 2, T, 4))
    prior_amb = rng.normal(size=(B, 2, 4))
    values = torch.cat([_to_values(z[:, h], S) for h in range(2)], dim=1)
    prior_s = prior_amb @ np.linalg.inv(S).T
    prior_mean = torch.from_numpy(np.concatenate([prior_s.real, prior_s.imag], axis=-1))
    prior_var = torch.tensor([0.7, 1.3], dtype=torch.float64)
    freq = torch.tensor(
        [[p["w"][0], -p["w"][0], p["w"][1], -p["w"][1]] for p in heads], dtype=torch.float64
    )
    per = {key: torch.tensor([p[key] for p in heads], dtype=torch.float64) for key in heads[0]}
    out = unrolled_afa(
        values,
        t=torch.from_numpy(t),
        decay=per["a"],
        frequencies=freq,
        process_var=per["s2"],
        measurement_var=per["e2"],
        nu=per["nu"],
        iterations=3,
        prior_mean=prior_mean,
        prior_variance=prior_var,
    )
    for h, p in enumerate(heads):
        lam = np.array([complex(-p["a"], s * w) for w in p["w"] for s in (1, -1)])
        ref = rec.eigen_recurrent_filter(
            lam,
            S,
            [p["s2"]] * 4,
            [p["e2"]] * 4,
            z[:, h],
            t,
            nu=p["nu"],
            n_iter=3,
            tol=0.0,
            prior_mean=prior_amb[0, h],
            prior_variances=[prior_var[h].item()] * 4,
        )
        # the reference takes one prior for all sequences: compare the first sequence
        assert_close(f"head {h}", _to_ambient(out.output[0, h], S), ref.means[0], atol=ROUNDOFF)
        assert_close(
            f"head {h} precision",
            out.precision[0, h],
            1 / ref.mode_variances[0, :, 0],
            atol=0.0,
            rtol=ROUNDOFF,
        )


def test_layer_with_true_projections_is_the_reference_filter():
    """``L_V = S^-1``, ``L_P = S`` (no biases) and the true dynamics: the module's output is the
    reference filter's estimate of the measured signal. The clock is ``step * t``: ``t = None``
    on the 0.1 grid with ``step = 0.1``, or the given stamps in units of ``step``."""
    sigma2, eta2, step = 0.1, 0.25, 0.1
    z, t, _ = _simulate(sigma2, eta2, seed=2, outliers=0.1)
    np.testing.assert_allclose(t, step * np.arange(t.size), atol=1e-12)  # the regular grid
    layer = UnrolledAdaptiveFilterAttention(2, 1, iterations=4, nu=3.0, step=step, bias=False)
    layer = layer.double()
    layer.value_proj.set_complex(torch.from_numpy(np.linalg.inv(S_2D)))
    layer.out_proj.set_complex(torch.from_numpy(S_2D))
    layer.set_parameters(
        decay=DECAY,
        frequencies=FREQ_2D,
        process_var=sigma2,
        measurement_var=eta2,
        nu=3.0,
        temperature=1.0,
        damping=1.0,
    )
    ref = rec.eigen_recurrent_filter(
        LAM_2D, S_2D, [sigma2] * 2, [eta2] * 2, z, t, nu=3.0, n_iter=4, tol=0.0
    )
    out, weights = layer(torch.from_numpy(z))
    assert weights is None
    assert_close("layer", out, ref.means, atol=ROUNDOFF)
    out_t, _ = layer(torch.from_numpy(z), torch.from_numpy(t) / step)
    assert_close("layer with t", out_t, ref.means, atol=ROUNDOFF)


def test_from_afa_equals_the_batch_layer_where_both_are_the_kalman_filter():
    """A batch AFA layer of a known system without process noise, ``nu = inf`` and no gate is
    the causal batch MLE, which is then the Kalman filter; the recurrent layer built from it by
    `from_afa` is the same filter: equal outputs, estimate and one-step prediction, on
    irregular time stamps (in units of ``step = 0.5``)."""
    z, t, _ = _simulate(0.0, 0.25, seed=9, irregular=True, outliers=0.0)
    for predict in (False, True):
        afa = AdaptiveFilterAttention.from_eigen(
            S_2D, LAM_2D, 0.0, 0.25, gate=None, nu=math.inf, predict=predict, step=0.5
        )
        unrolled = UnrolledAdaptiveFilterAttention.from_afa(afa, iterations=2)
        x, stamps = torch.from_numpy(z), torch.from_numpy(t) / 0.5
        expected, _ = afa(x, stamps)
        got, _ = unrolled(x, stamps)
        assert_close(f"from_afa predict={predict}", got, expected, atol=ROUNDOFF)


def test_from_afa_copies_the_parameters():
    gen = torch.Generator().manual_seed(7)
    afa = AdaptiveFilterAttention(
        8, 2, gate="residual", nu=3.0, learn_nu=True, step=0.3, predict=True, generator=gen
    )
    with torch.no_grad():
        for p in (afa.raw_decay, afa.raw_process_var, afa.raw_temperature, afa.raw_delta):
            p.normal_(generator=gen)
    unrolled = UnrolledAdaptiveFilterAttention.from_afa(afa, iterations=3)
    dyn = afa.dynamics()
    pairs = {
        "decay": (unrolled.decay, dyn["decay"]),
        "frequencies": (unrolled.frequencies, dyn["frequencies"]),
        "process_var": (unrolled.process_var, dyn["process_var"]),
        "measurement_var": (unrolled.measurement_var, dyn["measurement_var"]),
        "temperature": (unrolled.temperature, afa.robust()["temperature"]),
        "nu": (unrolled.nu, afa.nu),
        "damping": (unrolled.damping, torch.sigmoid(afa.raw_delta)),
        "L_V": (unrolled.value_proj.weight_imag, afa.value.weight_imag),
        "L_P": (unrolled.out_proj.weight_real, afa.out_proj.weight_real),
    }
    for name, (got, want) in pairs.items():
        assert_close(name, got, want, atol=1e-6)  # float32, through softplus and its inverse
    assert unrolled.step == pytest.approx(0.3) and unrolled.predict and unrolled.iterations == 3
    with pytest.raises(ValueError, match="per-feature dynamics"):
        UnrolledAdaptiveFilterAttention.from_afa(AdaptiveFilterAttention(8, 2, tensor_form=True))
    with pytest.raises(ValueError, match="prediction-gate"):
        UnrolledAdaptiveFilterAttention.from_afa(
            AdaptiveFilterAttention(8, 2, gate="prediction-gate")
        )
    with pytest.raises(TypeError, match="AdaptiveFilterAttention"):
        UnrolledAdaptiveFilterAttention.from_afa(unrolled)


# --- the batch form as K grows ----------------------------------------------------------------


def _gaps(sigma2, nu):
    eta2 = 0.25
    z, t, x = _simulate(sigma2, eta2, seed=3, n_paths=4)
    model = DiagonalizableModel(LAM_2D, S_2D, np.full(2, sigma2), np.full(2, eta2))
    batch = eigen_irls(model, z, t, nu=nu, family="student-t", causal=True, tol=1e-10).outputs
    fixed = rec.eigen_recurrent_filter(
        LAM_2D, S_2D, [sigma2] * 2, [eta2] * 2, z, t, nu=nu, n_iter=5000, tol=1e-14
    )
    assert np.all(fixed.converged)
    fixed = fixed.means

    def rms(e):
        return float(np.sqrt(np.mean(e**2)))

    to_fixed, to_batch = [], []
    for K in (1, 2, 4, 8, 16):
        est = _to_ambient(_filter_2d(z, t, sigma2, eta2, nu=nu, iterations=K).output[:, 0], S_2D)
        est = est.numpy()
        to_fixed.append(np.abs(est - fixed).max() / np.abs(fixed).max())
        to_batch.append(rms(est - batch) / rms(batch))
    limit = rms(fixed - batch) / rms(batch)
    return np.array(to_fixed), np.array(to_batch), limit, rms(fixed - x), rms(batch - x)


def test_unrolled_afa_approaches_the_recursive_fixed_point_and_with_Q_0_the_batch_form():
    """What "the batch form" is: batch AFA iterated to its fixed point computes the causal robust
    batch estimate of 2.3 (`estimators.irls.eigen_irls`, each target reweighting all its pairs).
    Unrolled AFA converges, as K grows, to a different estimator: the recursive fixed point
    (`eigen_recurrent_filter` iterated to convergence), each measurement weighted once, at its
    own time. Measured on the isotropic 2-D system (a = 0.2, w = 1, eta^2 = 0.25, 101 steps of
    0.1, 10% Cauchy outliers, 4 paths, nu = 2, student-t weights):

    ====  =======================  ===========================  ===========================
    K     to the fixed point, max  to batch, rel. RMS, Q = 0    to batch, rel. RMS, Q = 0.1 I
    ====  =======================  ===========================  ===========================
    1     2.3e-2 / 3.0e-2 (Q=.1)   0.0354                       0.188
    2     6.3e-3 / 9.2e-3          0.0298                       0.195
    4     6.1e-4 / 9.5e-4          0.0283                       0.196
    8     7.3e-6 / 1.2e-5          0.0282                       0.196
    16    1.0e-9 / 2.7e-9          0.0282                       0.196
    inf   0                        0.0282 (fixed pt vs batch)   0.196 (fixed pt vs batch)
    ====  =======================  ===========================  ===========================

    So: the gap to the recursive fixed point shrinks geometrically (both Q). Without process
    noise the gap to the batch form shrinks monotonically too, to a floor of 2.8% (the two
    robust estimators differ; at nu = inf they coincide, next test). With process noise it does
    *not* approach the batch form (K = 1 is even the closest): the recursive filter keeps the
    cross-time correlation of the process noise that the batch MLE discards
    (`estimators.mle` docstring), and is the better estimator: RMS error to the true state 0.219
    against 0.322 for the batch form.
    """
    for sigma2 in (0.0, 0.1):
        to_fixed, to_batch, limit, err_fixed, err_batch = _gaps(sigma2, nu=2.0)
        assert np.all(np.diff(to_fixed) < 0), to_fixed
        assert to_fixed[0] > 1e-2 and to_fixed[-1] < 1e-7, to_fixed
        # the gap to the batch form tends to the fixed point's gap, within the distance to it
        assert abs(to_batch[-1] - limit) < 1e-6
        if sigma2 == 0.0:
            assert np.all(np.diff(to_batch) < 0), to_batch
            assert 1e-2 < limit < 0.05  # a floor: a different robust estimator
        else:
            assert limit > 0.1 and to_batch[0] < limit, (to_batch, limit)
            assert err_fixed < 0.8 * err_batch, (err_fixed, err_batch)


def test_nu_inf_without_process_noise_is_the_causal_batch_mle():
    """The one case where the recursive and the batch forms are the same estimator: Q = 0 (the
    pulled-forward measurements are independent) and nu = inf (seed 000 2.2's causal MLE)."""
    z, t, _ = _simulate(0.0, 0.25, seed=8, irregular=True, outliers=0.0)
    model = DiagonalizableModel(LAM_2D, S_2D, np.zeros(2), np.full(2, 0.25))
    mle = eigen_batch_mle(model, z, t, causal=True).outputs
    out = _filter_2d(z, t, 0.0, 0.25, iterations=2)
    assert_close("batch MLE", _to_ambient(out.output[:, 0], S_2D), mle, atol=1e-9)


# --- properties -----------------------------------------------------------------------------


def _random_problem(seed, B=2, H=2, T=12, D=4, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(B, H, T, D, generator=gen, dtype=dtype) * 2
    t = torch.cumsum(torch.rand(B, T, generator=gen, dtype=dtype) + 0.05, dim=1)
    params = dict(
        decay=torch.tensor([0.3, 0.05], dtype=dtype)[:H],
        frequencies=torch.randn(H, D // 2, generator=gen, dtype=dtype),
        process_var=torch.tensor([0.2, 0.5], dtype=dtype)[:H],
        measurement_var=torch.tensor([0.4, 1.1], dtype=dtype)[:H],
        nu=torch.tensor([2.0, 5.0], dtype=dtype)[:H],
        damping=torch.tensor([0.7, 0.95], dtype=dtype)[:H],  # < 1: gradcheck perturbs it
        temperature=torch.tensor([1.3, 0.8], dtype=dtype)[:H],
    )
    return values, t, params


def test_no_leakage_from_the_future():
    values, t, params = _random_problem(0, T=12)
    base = unrolled_afa(values, t=t, iterations=3, **params)
    for i in (0, 5, 10):
        perturbed = values.clone()
        perturbed[:, :, i + 1 :] += 100.0
        out = unrolled_afa(perturbed, t=t, iterations=3, **params)
        for field in ("output", "precision", "weight", "prediction"):
            a, b = getattr(base, field)[:, :, : i + 1], getattr(out, field)[:, :, : i + 1]
            assert torch.equal(a, b), (field, i)
        assert not torch.equal(base.output[:, :, i + 1 :], out.output[:, :, i + 1 :])


def test_time_shift_invariance():
    values, t, params = _random_problem(1)
    a = unrolled_afa(values, t=t, iterations=2, **params)
    b = unrolled_afa(values, t=t + 1000.0, iterations=2, **params)
    # the steps t_i - t_{i-1} change by rounding of t + 1000 only (ulp(1000) = 1.1e-13)
    assert_close("shifted", b.output, a.output, atol=1e-11)
    assert_close("shifted precision", b.precision, a.precision, atol=0.0, rtol=1e-11)


def test_layer_is_causal_and_shift_invariant():
    gen = torch.Generator().manual_seed(4)
    layer = UnrolledAdaptiveFilterAttention(
        8, 2, iterations=2, nu=2.0, damping=0.8, predict=True, generator=gen
    ).double()
    x = torch.randn(2, 10, 8, generator=gen, dtype=torch.float64)
    t = torch.cumsum(torch.rand(2, 10, generator=gen, dtype=torch.float64) + 0.1, dim=1)
    base, _ = layer(x, t)
    later = x.clone()
    later[:, 6:] += 50.0
    out, _ = layer(later, t)
    assert torch.equal(out[:, :6], base[:, :6]) and not torch.equal(out[:, 6:], base[:, 6:])
    shifted, _ = layer(x, t + 100.0)
    assert_close("layer shift", shifted, base, atol=1e-11)


def test_float64_gradcheck():
    values, t, params = _random_problem(2, B=1, T=4)
    names = list(params)
    inputs = [values.requires_grad_()] + [params[k].clone().requires_grad_() for k in names]

    def f(v, *ps):
        out = unrolled_afa(
            v, t=t, iterations=2, weight="student-t", **dict(zip(names, ps, strict=True))
        )
        return out.output, out.precision

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-7, fast_mode=True)


def test_layer_gradients_are_finite_with_nu_inf_and_no_damping():
    """``raw_damping = +inf`` (delta = 1) gets a zero, not NaN, gradient; at ``nu = inf`` the
    filter reads neither ``nu`` nor the temperature (no gradient), every other one is finite."""
    layer = UnrolledAdaptiveFilterAttention(
        8, 2, iterations=2, nu=math.inf, generator=torch.Generator().manual_seed(0)
    ).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out, _ = layer(x.requires_grad_())
    out.square().sum().backward()
    unread = {"raw_nu", "raw_temperature"}
    for name, p in layer.named_parameters():
        if name in unread:
            assert p.grad is None, name
        else:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert torch.all(layer.raw_damping.grad == 0)
    assert torch.isfinite(x.grad).all()
    assert torch.autograd.gradcheck(lambda y: layer(y)[0], x.detach()[:1, :3].requires_grad_())


def test_finite_at_T_8192_in_float32_and_with_decay_to_zero():
    """One sequence, T = 8192, D = 4, three heads: decay 0.1, decay 0 (the a -> 0 limit), decay 0
    with sigma^2 = 0 (the precision then grows like i / eta^2), 5% outliers of size 1e3. fp32
    stays finite; on the first 2048 steps it is within 1e-3 of a float64 run (the filter is
    contractive, so rounding does not accumulate; fp64 on all 8192 steps would double the cost
    of this test, ~1.5 s per run of the Python loop over T)."""
    gen = torch.Generator().manual_seed(3)
    T, prefix = 8192, 2048
    values = torch.randn(1, 3, T, 4, generator=gen, dtype=torch.float64)
    outlier = torch.rand(1, 3, T, 1, generator=gen, dtype=torch.float64) < 0.05
    values = torch.where(outlier, 1e3 * values, values)
    params = dict(
        decay=torch.tensor([0.1, 0.0, 0.0]),
        frequencies=torch.tensor([1.0, -1.0]),
        process_var=torch.tensor([0.1, 0.1, 0.0]),
        measurement_var=1.0,
        nu=3.0,
    )
    out32 = unrolled_afa(values.float(), **params)
    for field in out32._fields:
        got = getattr(out32, field)
        assert got.dtype == torch.float32
        assert not torch.isnan(got).any(), field
    assert torch.isfinite(out32.output).all() and torch.isfinite(out32.precision).all()
    assert out32.weight.min() < 1e-4  # the outliers were rejected
    params64 = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in params.items()}
    out64 = unrolled_afa(values[:, :, :prefix], **params64)
    assert_close("fp32 vs fp64", out32.output[:, :, :prefix], out64.output, atol=1e-3)
    # sigma = 0, a = 0: the precision is the sum of the weights over eta^2 = 1
    assert_close(
        "precision growth",
        out32.precision[0, 2],
        out32.weight[0, 2].cumsum(0),
        atol=0.0,
        rtol=1e-4,
    )


def test_decay_zero_is_the_limit_of_small_decay():
    values, t, params = _random_problem(5)
    params["decay"] = torch.zeros(2, dtype=torch.float64)
    at_zero = unrolled_afa(values, t=t, iterations=2, **params)
    params["decay"] = torch.full((2,), 1e-9, dtype=torch.float64)
    near = unrolled_afa(values, t=t, iterations=2, **params)
    # d/da of the output is O(t_max) = O(15): a change of 1e-9 moves it by < 1e-7
    assert_close("a -> 0", near.output, at_zero.output, atol=1e-7)


# --- errors -----------------------------------------------------------------------------------


def test_clear_errors():
    values, t, params = _random_problem(6)
    call = dict(t=t, **params)
    with pytest.raises(ValueError, match=r"values must have shape \(B, H, T, D\)"):
        unrolled_afa(values[0], **call)
    with pytest.raises(ValueError, match="D must be even"):
        unrolled_afa(values[..., :3], **{**call, "frequencies": params["frequencies"][:, :1]})
    with pytest.raises(TypeError, match="values must be a torch.Tensor"):
        unrolled_afa(values.numpy(), **call)
    with pytest.raises(ValueError, match="strictly increasing"):
        unrolled_afa(values, **{**call, "t": t.flip(-1)})
    with pytest.raises(ValueError, match=r"t must have shape \(T,\) or \(B, T\)"):
        unrolled_afa(values, **{**call, "t": t[:, :5]})
    with pytest.raises(ValueError, match=r"frequencies must have shape \(2, 2\)"):
        unrolled_afa(values, **{**call, "frequencies": torch.zeros(3, 2)})
    with pytest.raises(ValueError, match=r"decay must be a scalar or have shape \(2,\)"):
        unrolled_afa(values, **{**call, "decay": torch.zeros(3)})
    for K in (0, 1.5, True):
        with pytest.raises(ValueError, match="iterations must be an integer K >= 1"):
            unrolled_afa(values, iterations=K, **call)
    for name, bad, match in (
        ("decay", -0.1, "decay must be >= 0"),
        ("measurement_var", 0.0, "measurement_var must be > 0"),
        ("nu", float("nan"), "nu must be > 0"),
        ("damping", 1.5, r"damping must be in \(0.0, 1.0\]"),
        ("temperature", 0.0, "temperature must be > 0"),
    ):
        with pytest.raises(ValueError, match=match):
            unrolled_afa(values, **{**call, name: bad})
    with pytest.raises(ValueError, match="weight must be one of"):
        unrolled_afa(values, weight="cauchy", **call)
    with pytest.raises(ValueError, match="prior_mean and prior_variance"):
        unrolled_afa(values, prior_mean=torch.zeros(4), **call)


def test_layer_clear_errors():
    with pytest.raises(ValueError, match="must be divisible by num_heads"):
        UnrolledAdaptiveFilterAttention(6, 4)
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        UnrolledAdaptiveFilterAttention(6, 0)
    with pytest.raises(ValueError, match="causal must be True"):
        UnrolledAdaptiveFilterAttention(8, 2, causal=False)
    with pytest.raises(ValueError, match="iterations must be an integer K >= 1"):
        UnrolledAdaptiveFilterAttention(8, 2, iterations=0)
    layer = UnrolledAdaptiveFilterAttention(8, 2)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 8\)"):
        layer(torch.zeros(1, 5, 6))
    with pytest.raises(ValueError, match="need_weights=True is not available"):
        layer(torch.zeros(1, 5, 8), need_weights=True)
    with pytest.raises(ValueError, match="strictly increasing"):
        layer(torch.zeros(1, 5, 8), torch.tensor([0.0, 1.0, 1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="measurement_var must be > 0"):
        layer.set_parameters(measurement_var=0.0)


# --- predictive law, identity basis, fixed rotation ------------------------------------------


def _true_layer_2d(sigma2, eta2, step):
    """The 2-D isotropic system of `_simulate` in the layer: ``L_V = S^-1``, ``L_P = S``."""
    layer = UnrolledAdaptiveFilterAttention(
        2, 1, nu=math.inf, step=step, bias=False, predict=True
    ).double()
    layer.value_proj.set_complex(torch.from_numpy(np.linalg.inv(S_2D)))
    layer.out_proj.set_complex(torch.from_numpy(S_2D))
    layer.set_parameters(decay=DECAY, frequencies=FREQ_2D, process_var=sigma2, measurement_var=eta2)
    return layer


@torch.no_grad()
def test_predictive_law_is_the_kalman_innovation_law():
    """With the true system (unitary ``S``) the one-step predictive mean and covariance are the
    Kalman filter's ``C m^-`` and ``C P^- C^T + R`` of the next measurement, on a regular grid
    (the predictive law looks one unit of ``t`` ahead)."""
    sigma2, eta2, step = 0.1, 0.25, 0.1
    z, t, _ = _simulate(sigma2, eta2, seed=4, outliers=0.0)
    layer = _true_layer_2d(sigma2, eta2, step)
    mean, cov = layer.predictive(torch.from_numpy(z))
    kf = kalman_filter(
        isotropic_sde(-DECAY, np.array([[0.0, -OMEGA], [OMEGA, 0.0]]), sigma2),
        LinearMeasurement.identity(2, eta2),
        z,
        t,
    )
    innovation = kf.pred_covs[kf.group, 1:] + eta2 * np.eye(2)
    assert_close("mean", mean[:, :-1], kf.pred_means[:, 1:], atol=ROUNDOFF)
    assert_close("cov", cov[:, :-1], innovation, atol=ROUNDOFF)
    assert_close("forward", layer(torch.from_numpy(z))[0], mean, atol=0.0)
    # negative control: a wrong measurement variance changes the law
    layer.set_parameters(measurement_var=2 * eta2)
    wrong = layer.predictive(torch.from_numpy(z))[1][:, :-1].numpy()
    assert np.abs(wrong - innovation).max() > 0.1


@torch.no_grad()
def test_identity_basis_and_no_rotation():
    """``basis="identity"``: no projections, each coordinate one real-valued feature; with
    ``rotation=False`` the frequencies are a zero buffer. Per head it is the scalar filter of
    its coordinate (the functional form on the lifted input), and the predictive covariance
    is diagonal with each head's ``c``."""
    layer = UnrolledAdaptiveFilterAttention(
        3, 3, nu=math.inf, basis="identity", rotation=False, predict=True
    ).double()
    assert layer.value_proj is None and layer.out_proj is None
    assert "frequencies" not in dict(layer.named_parameters())
    assert torch.equal(layer.frequencies, torch.zeros(3, 1, dtype=torch.float64))
    layer.set_parameters(decay=[0.1, 0.5, 1.0], process_var=[0.2, 0.3, 0.4])
    x = torch.randn(2, 7, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mean, cov = layer.predictive(x)
    values = torch.cat([x, torch.zeros_like(x)], dim=-1).view(2, 7, 2, 3, 1)
    values = values.permute(0, 3, 1, 2, 4).reshape(2, 3, 7, 2)
    ref = unrolled_afa(
        values,
        decay=layer.decay,
        frequencies=torch.zeros(3, 1, dtype=torch.float64),
        process_var=layer.process_var,
        measurement_var=layer.measurement_var,
    )
    shrink = torch.exp(-layer.decay).view(1, 3, 1)
    assert_close("mean", mean, (ref.output[..., 0] * shrink).transpose(1, 2), atol=1e-14)
    a, q = layer.decay.view(1, 3, 1), layer.process_var.view(1, 3, 1)
    c = (
        shrink**2 / ref.precision
        + q * (1 - shrink**2) / (2 * a)
        + layer.measurement_var.view(1, 3, 1)
    )
    assert_close("cov", cov, torch.diag_embed(c.transpose(1, 2)), atol=1e-14)
    with pytest.raises(ValueError, match="rotation=False"):
        layer.set_parameters(frequencies=[0.1])


def test_predictive_needs_predict_and_options_are_checked():
    with pytest.raises(ValueError, match="predictive needs a layer built with predict=True"):
        UnrolledAdaptiveFilterAttention(4, 2).predictive(torch.zeros(1, 3, 4))
    with pytest.raises(ValueError, match="basis must be one of"):
        UnrolledAdaptiveFilterAttention(4, 2, basis="eigen")
    with pytest.raises(TypeError, match="rotation must be a bool"):
        UnrolledAdaptiveFilterAttention(4, 2, rotation=1)


@torch.no_grad()
def test_tied_basis_reads_out_with_the_inverse():
    """``basis="tied"``: ``L_P = L_V^-1`` applied to ``w - b_V``; equal to the learned basis
    with ``L_P`` set to that inverse and the matching real output bias; with ``S^-1`` in
    ``L_V`` it is the layer of the true system."""
    gen = torch.Generator().manual_seed(3)
    tied = UnrolledAdaptiveFilterAttention(2, 1, basis="tied", predict=True, generator=gen)
    tied = tied.double()
    assert tied.out_proj is None
    learned = UnrolledAdaptiveFilterAttention(2, 1, predict=True).double()
    learned.load_state_dict(tied.state_dict(), strict=False)
    proj = tied.value_proj
    inverse = torch.linalg.inv(torch.complex(proj.weight_real, proj.weight_imag))
    bias = -(inverse @ torch.complex(proj.bias_real, proj.bias_imag)).real
    learned.out_proj.set_complex(inverse, bias.to(inverse.dtype))
    x = torch.randn(2, 9, 2, generator=gen, dtype=torch.float64)
    assert_close("tied", tied(x)[0], learned(x)[0], atol=1e-13)
    assert_close("tied cov", tied.predictive(x)[1], learned.predictive(x)[1], atol=1e-13)


@torch.no_grad()
def test_unitary_basis_reads_out_with_the_adjoint():
    """``basis="unitary"``: ``L_V`` unitary (`UnitaryLinear`), ``L_P = L_V^H``; equal to the
    tied basis holding the same matrix, and its predictive covariance is ``c I``
    (``Re(L_P L_P^H) = I``: isotropic noise stays isotropic)."""
    gen = torch.Generator().manual_seed(5)
    unitary = UnrolledAdaptiveFilterAttention(
        3, 1, basis="unitary", nu=math.inf, predict=True, generator=gen
    ).double()
    assert unitary.out_proj is None and isinstance(unitary.value_proj, UnitaryLinear)
    unitary.value_proj.bias_real.normal_(generator=gen)
    unitary.value_proj.bias_imag.normal_(generator=gen)
    tied = UnrolledAdaptiveFilterAttention(3, 1, basis="tied", nu=math.inf, predict=True)
    tied = tied.double()
    tied.load_state_dict(unitary.state_dict(), strict=False)
    w = unitary.value_proj.complex_weight()
    tied.value_proj.set_complex(
        w, torch.complex(unitary.value_proj.bias_real, unitary.value_proj.bias_imag)
    )
    x = torch.randn(2, 9, 3, generator=gen, dtype=torch.float64)
    assert_close("unitary", unitary(x)[0], tied(x)[0], atol=1e-13)
    _, cov = unitary.predictive(x)
    eye = torch.eye(3, dtype=torch.float64)
    assert_close("cov = c I", cov, cov[..., :1, :1] * eye, atol=1e-13)


def test_unitary_linear_weight_load_and_errors():
    gen = torch.Generator().manual_seed(2)
    layer = UnitaryLinear(4, generator=gen).double()
    w = layer.complex_weight().detach()
    eye = torch.eye(4, dtype=w.dtype)
    assert_close("unitary", w.mH @ w, eye, atol=1e-14)
    assert float((w - eye).abs().max()) > 0.5  # a generic start, not the identity
    x = torch.randn(3, 8, generator=gen, dtype=torch.float64)
    ref = torch.complex(x[:, :4], x[:, 4:]) @ w.T + torch.complex(layer.bias_real, layer.bias_imag)
    assert_close("forward", layer(x), torch.cat([ref.real, ref.imag], -1), atol=1e-14)
    # load a given unitary (here with eigenvalues near -1 as well) and get it back
    q, _ = torch.linalg.qr(torch.randn(4, 4, dtype=torch.complex128, generator=gen))
    angles = torch.tensor([3.14, -3.1, 0.2, 1.0], dtype=torch.float64)
    target = q @ torch.diag(torch.exp(1j * angles)) @ q.mH
    other = UnitaryLinear(4).double()
    other.set_complex(target)
    assert_close("loaded", other.complex_weight(), target, atol=1e-12)
    with torch.no_grad():
        with pytest.raises(ValueError, match="weight must be unitary"):
            other.set_complex(2 * target)
        with pytest.raises(ValueError, match="weight must have shape"):
            other.set_complex(target[:3, :3])
    with pytest.raises(ValueError, match="features must be a positive integer"):
        UnitaryLinear(0)
    grads = torch.autograd.grad(layer(x).square().sum(), [layer.generator_real])
    assert torch.isfinite(grads[0]).all() and grads[0].abs().sum() > 0


def _kalman_attention_at(**change):
    """`kalman_attention` on a plain 20-step OU-like problem, diffuse prior, with ``change``."""
    from kernels.ops.unrolled.chunked import kalman_attention

    g = torch.Generator().manual_seed(0)
    steps = 20
    args = {
        "decay": torch.tensor([0.1]),
        "frequencies": torch.zeros(1, 1),
        "process_var": torch.tensor([0.1]),
        "measurement_var": torch.tensor([1.0]),
        **change,
    }
    values = torch.randn(1, 1, steps, 2, generator=g)
    times = torch.arange(steps, dtype=torch.float32).view(1, 1, steps)
    return kalman_attention(values, times, **args)


def test_diffuse_prior_first_prediction_variance_is_infinite_without_a_warning():
    """Before the first measurement nothing is known: that variance is inf by design, and the
    overflow guard (`kernels._validation.overflow_warning`) must not call it an overflow (it
    did, hundreds of times per training run)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        output, variance, prediction, prediction_variance = _kalman_attention_at()
    assert torch.isinf(prediction_variance[..., 0]).all()
    finite = (output, variance, prediction, prediction_variance[..., 1:])
    assert all(torch.isfinite(x).all() for x in finite)


def test_kalman_attention_overflow_still_warns():
    """Control: a process variance of 1e38 overflows float32 everywhere, and is named."""
    from kernels._validation import MagnitudeWarning

    with pytest.warns(MagnitudeWarning, match="process_var"):
        outputs = _kalman_attention_at(process_var=torch.tensor([1e38]))
    assert not torch.isfinite(outputs[0]).all()

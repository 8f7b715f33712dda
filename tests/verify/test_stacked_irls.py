"""Shared-weight AFA stacks as IRLS (`verify.stacked_irls`, seed 000 2.3).

The strongest test: with the true eigen-data in the layer, layer ``l`` of the stack is IRLS
iterate ``l`` of `estimators.irls` from the same start, for every ``l`` and every variant the
stack supports (isotropic and tensor forms, causal or not, the residual gate as damping).
"""

import math

import numpy as np
import pytest
import torch

from estimators.irls import eigen_irls
from estimators.mle import eigen_batch_mle
from kernels.layers.afa import AdaptiveFilterAttention
from verify.checks.stacked_irls import PERTURBED
from verify.stacked_irls import (
    afa_2d_model,
    limit_distances,
    measurements,
    stack_outputs,
    stacked_distances,
)

NU = 10.0
# Layer vs IRLS iterate, relative to max |z|: per-layer round-off is ~T eps ~ 1e-14 (sums of
# T = 30 terms of float64), and the iteration's transient amplifies it by at most ~100
# (measured up to 2.2e-11 / 1e-14 on outlier-heavy data, ~5 on these): 1e-12.
ITERATE_RTOL = 1e-12
# Round-off floor of the relative distance once converged: measured 3e-16 to 1.2e-14 (module
# docstring of `verify.checks.stacked_irls`); 1e-12 leaves two orders of margin.
FLOOR = 1e-12


@pytest.fixture(scope="module")
def data():
    """2 paths x 30 measurements of the afa-2d spiral with 5% Cauchy outliers. Seed 4: its
    contraction is fast at nu = 10 (factor 0.23; the distance is below 1e-12 at layer 16 with
    the true eigen-data, at layer 43 with the perturbed ones)."""
    model = afa_2d_model()
    z, t = measurements(model, paths=2, steps=30, outlier_fraction=0.05, seed=4)
    return model, z, t


def _layer(model, **kwargs):
    kwargs.setdefault("nu", NU)
    kwargs.setdefault("predict", False)
    return AdaptiveFilterAttention.from_eigen(
        model.S,
        model.eigenvalues,
        float(model.process_variances[0]),
        float(model.measurement_variances[0]),
        **kwargs,
    )


@pytest.mark.parametrize(
    "options",
    [{}, {"tensor_form": True}, {"causal": False}, {"gate": "residual"}],
    ids=["isotropic", "tensor", "non-causal", "residual-gate"],
)
def test_layer_l_is_irls_iterate_l(data, options):
    """Each layer output against `eigen_irls(max_iter=l, init="measurement")` recomputed from
    scratch (independent of `stacked_distances`' own iterates); the residual gate's ``delta``
    (sigmoid(0) = 1/2 at initialisation) is IRLS damping."""
    model, z, t = data
    layer = _layer(model, **options)
    layers = 6
    out = stack_outputs(layer, torch.as_tensor(z), torch.as_tensor(t), layers=layers).numpy()
    assert out.shape == (layers, *z.shape)
    damping = 0.5 if options.get("gate") == "residual" else 1.0
    scale = np.abs(z).max()
    for depth in range(1, layers + 1):
        ref = eigen_irls(
            model,
            z,
            t,
            nu=NU,
            family="rational",
            causal=options.get("causal", True),
            damping=damping,
            init="measurement",
            max_iter=depth,
            tol=1e-300,  # never stop early: exactly `depth` reweightings
        )
        assert ref.iterations == depth
        np.testing.assert_allclose(out[depth - 1], ref.outputs, rtol=0, atol=ITERATE_RTOL * scale)
    # the reweighting moves the estimate: consecutive layers differ far above round-off
    assert np.abs(out[1] - out[0]).max() > 1e-3 * scale


@pytest.mark.parametrize(
    "options",
    [
        {"gate": "residual"},
        {"gate": None, "share_qk_values": False},
        {"gate": None, "tensor_form": True, "causal": False},
        {"gate": None, "separable": True},
    ],
    ids=["residual-gate", "qk-from-input", "tensor-noncausal", "separable"],
)
def test_first_layer_is_the_layer_itself(data, options):
    """Layer 1's queries are the measurements, so it is the module's own forward (any
    weights: a randomly initialised two-head layer here): `stack_outputs` reassembles the
    forward pass correctly. Same float64 operations in the same order: round-off only."""
    _, z, t = data
    generator = torch.Generator().manual_seed(5)
    layer = AdaptiveFilterAttention(
        4, 2, nu=NU, predict=False, generator=generator, dtype=torch.float64, **options
    )
    x = torch.as_tensor(np.concatenate([z, 0.5 * z[..., ::-1]], axis=-1) / np.abs(z).max())
    stamps = torch.as_tensor(t / (t[1] - t[0]))
    expected, _ = layer(x, stamps)
    got = stack_outputs(layer, x, stamps, layers=2)
    np.testing.assert_allclose(got[0].numpy(), expected.detach().numpy(), rtol=0, atol=1e-13)
    assert (got[1] - got[0]).abs().max() > 1e-6  # the second layer's queries differ


def test_distances_fall_geometrically_to_round_off(data):
    model, z, t = data
    result = stacked_distances(_layer(model), model, z, t, layers=25)
    assert result.irls_converged
    assert result.outputs.shape == (25, *z.shape)
    assert result.iterates.shape == (25, *z.shape)
    assert result.fixed_point.shape == z.shape
    assert result.distances.shape == (25,) and result.contraction.shape == (24,)
    np.testing.assert_allclose(result.contraction, result.distances[1:] / result.distances[:-1])
    assert result.distances[0] > 1e-3  # the first layer is far from the fixed point
    assert result.distances[-1] < FLOOR
    assert result.iterate_errors.max() < ITERATE_RTOL
    # geometric: while above round-off, each layer shrinks the distance by a factor < 1, and
    # the factor settles (a constant ratio, not a slower algebraic decay)
    alive = result.distances[1:] > 1e3 * FLOOR
    factors = result.contraction[alive]
    assert factors.size >= 4 and factors.max() < 1.0
    assert np.ptp(factors[-3:]) < 0.1


def test_gaussian_limit_every_layer_is_the_batch_mle(data):
    """nu = inf: every weight is 1, so every layer returns the batch MLE (seed 000 2.2)."""
    model, z, t = data
    result = stacked_distances(_layer(model, nu=math.inf), model, z, t, layers=3)
    mle = eigen_batch_mle(model, z, t).outputs
    np.testing.assert_allclose(result.fixed_point, mle, rtol=0, atol=ITERATE_RTOL * np.abs(z).max())
    assert result.distances.max() < FLOOR


def test_perturbed_layer_converges_to_its_own_fixed_point(data):
    """Shared weights off the truth converge to the IRLS fixed point of their own eigen-data;
    measured against the true eigen-data the distance stalls at the parameters' bias."""
    model, z, t = data
    own = afa_2d_model(**PERTURBED)
    to_own = stacked_distances(_layer(own), own, z, t, layers=50)
    assert to_own.distances[-1] < FLOOR
    true_fixed = eigen_irls(model, z, t, nu=NU, family="rational", init="measurement").outputs
    bias = to_own.outputs[-1] - true_fixed
    assert np.sqrt(np.mean(bias**2) / np.mean(true_fixed**2)) > 1e-2


def test_limit_of_the_true_layer_is_the_irls_fixed_point(data):
    """`limit_distances` needs no reference: with the true eigen-data its limit is the IRLS
    fixed point (to the two stopping rules, ~1e-13 each), and the distances agree."""
    model, z, t = data
    layer = _layer(model)
    limit = limit_distances(layer, torch.as_tensor(z), torch.as_tensor(t), layers=12)
    assert limit.converged and 12 <= limit.depth < 2000
    assert limit.outputs.shape == (12, *z.shape) and limit.limit.shape == z.shape
    ref = stacked_distances(layer, model, z, t, layers=12)
    scale = np.abs(z).max()
    np.testing.assert_allclose(limit.limit.numpy(), ref.fixed_point, rtol=0, atol=FLOOR * scale)
    np.testing.assert_allclose(limit.distances, ref.distances, rtol=1e-6, atol=FLOOR)
    np.testing.assert_allclose(limit.contraction, limit.distances[1:] / limit.distances[:-1])


def test_limit_reports_an_expanding_stack(data):
    """A residual gate whose skip path ``(1 - delta) Re(L_P L_V)`` expands (here ``L_P``
    scaled by 4, ``delta = 1/2``: factor 2 per layer) has no limit: ``converged`` is False."""
    model, z, t = data
    layer = _layer(model, gate="residual")
    with torch.no_grad():
        for param in layer.out_proj.parameters():
            param.mul_(4.0)
    result = limit_distances(layer, z, torch.as_tensor(t), layers=3, max_layers=60)
    assert not result.converged and result.depth == 60
    with pytest.raises(ValueError, match="max_layers must be an integer >= layers"):
        limit_distances(layer, z, layers=3, max_layers=2)
    with pytest.raises(ValueError, match="tol must be a float > 0"):
        limit_distances(layer, z, layers=3, tol=0.0)


def test_unbatched_measurements(data):
    model, z, t = data
    batched = stacked_distances(_layer(model), model, z[:1], t, layers=3)
    single = stacked_distances(_layer(model), model, z[0], t, layers=3)
    assert single.outputs.shape == (3, *z.shape[1:])
    assert single.fixed_point.shape == z.shape[1:]
    np.testing.assert_allclose(single.outputs, batched.outputs[:, 0], rtol=0, atol=1e-14)


def test_bad_arguments(data):
    model, z, t = data
    layer = _layer(model)
    with pytest.raises(TypeError, match="layer must be an AdaptiveFilterAttention"):
        stack_outputs(torch.nn.Linear(2, 2), z, layers=2)
    with pytest.raises(ValueError, match="predict=False"):
        stack_outputs(_layer(model, predict=True), z, layers=2)
    with pytest.raises(ValueError, match="layers must be an integer >= 1"):
        stack_outputs(layer, z, layers=0)
    with pytest.raises(ValueError, match=r"z must have shape \(B, T, d\)"):
        stack_outputs(layer, z[0], layers=2)
    with pytest.raises(ValueError, match="embed_dim = 2"):
        stack_outputs(layer, np.zeros((1, 5, 3)), layers=2)
    bad = z.copy()
    bad[0, 3, 1] = np.nan
    with pytest.raises(ValueError, match="z must be finite"):
        stack_outputs(layer, bad, layers=2)
    with pytest.raises(TypeError, match="model must be a DiagonalizableModel"):
        stacked_distances(layer, "model", z, t, layers=2)
    with pytest.raises(ValueError, match="layers must be an integer >= 2"):
        stacked_distances(layer, model, z, t, layers=1)
    with pytest.raises(ValueError, match=r"t must have shape \(T,\)"):
        stacked_distances(layer, model, z, t[:-1], layers=2)
    with pytest.raises(ValueError, match="one head"):
        stacked_distances(
            AdaptiveFilterAttention(2, 2, nu=NU, predict=False, dtype=torch.float64),
            model,
            z,
            t,
            layers=2,
        )
    with pytest.raises(ValueError, match="d = model.dim = 2"):
        stacked_distances(
            AdaptiveFilterAttention(3, 1, nu=NU, predict=False, dtype=torch.float64),
            model,
            np.zeros((1, 5, 3)),
            None,
            layers=2,
        )

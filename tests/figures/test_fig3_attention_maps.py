"""Seed 000 Fig. 3: the attention matrices' compute at quick size and the periodicity summary."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.linalg import toeplitz

from figures import fig3_attention_maps as fig3


@pytest.fixture(scope="module")
def data():
    # The models are tiny (width <= 16, 101 steps): intra-op threads only add synchronisation,
    # which on a shared 2-core machine costs many times the work, so train on one thread.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fig3.compute(fig3.Config.quick())
    finally:
        torch.set_num_threads(threads)


def test_weights_are_causal_row_stochastic_matrices(data):
    assert len(data.weights) == len(fig3.PANELS) == 3
    M = data.weights[0].shape[0]
    # Rows are softmax-normalised in float32: each sum carries at most ~M roundings of
    # eps_32 = 1.2e-7, so 4 M eps bounds the error (M = 101: 5e-5).
    tol = 4 * M * np.finfo(np.float32).eps
    for w in data.weights:
        assert w.shape == (M, M) and np.all(np.isfinite(w))
        assert np.all(w >= 0)
        assert np.all(np.triu(w, 1) == 0)  # causal: no weight on later keys
        np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=0, atol=tol)
    assert data.afa_profile.shape == (M,)


def test_both_models_beat_persistence(data):
    # A trained one-step predictor must beat the guess z_{i+1} = z_i on the held-out paths.
    mse = data.heldout_mse
    assert set(mse) == {"softmax", "afa"}
    assert all(np.isfinite(v) and v < data.persistence_mse for v in mse.values()), (
        mse,
        data.persistence_mse,
    )


def test_true_frequency_is_the_system_oscillation(data):
    # |Im lambda| = 1 rad per time unit, one measurement every 0.1 time units.
    assert data.true_frequency == pytest.approx(0.1, rel=1e-12)


def test_dominant_frequency_finds_a_known_period():
    # A Toeplitz matrix whose lag profile is a decaying trend plus cos(omega tau): the
    # periodogram peak must sit within one Fourier bin 2 pi / T of omega (the main lobe's
    # half-width), whatever the trend.
    T, omega = 101, 0.31
    tau = np.arange(T)
    profile = 0.5 * np.exp(-0.03 * tau) + 0.05 * np.cos(omega * tau)
    w = np.tril(toeplitz(profile))
    got = fig3.lag_profile(w)
    np.testing.assert_allclose(got, profile, rtol=1e-12)
    peak, omegas, power = fig3.dominant_frequency(got)
    assert abs(peak - omega) < 2 * np.pi / T
    assert omegas.shape == power.shape and np.all(power >= 0)
    # and it fails for a profile with no oscillation at that frequency
    flat, _, _ = fig3.dominant_frequency(0.5 * np.exp(-0.03 * tau) + 0.05 * np.cos(2.0 * tau))
    assert abs(flat - omega) > 2 * np.pi / T


def test_softmax_stack_weights_follow_the_forward():
    gen = torch.Generator().manual_seed(0)
    model = fig3.SoftmaxStack(2, 8, scale=2.0, generator=gen, dtype=torch.float64)
    z = torch.randn(3, 12, 2, generator=gen, dtype=torch.float64)
    t = torch.arange(12, dtype=torch.float64)
    y, weights = model(z, t, need_weights=True)
    # The weights path and the fused path differ only by float64 round-off.
    torch.testing.assert_close(y, model(z, t), rtol=0, atol=1e-12)
    assert [tuple(w.shape) for w in weights] == [(3, 1, 12, 12)] * 2
    # causal: the prediction at step 5 does not change when later measurements do
    z2 = z.clone()
    z2[:, 6:] += 1.0
    torch.testing.assert_close(model(z2, t)[:, :6], y[:, :6], rtol=0, atol=1e-12)


def test_plot_and_caption(data):
    fig = fig3.plot(data)
    assert len([ax for ax in fig.axes if ax.get_images()]) == 3
    assert f"{data.afa_frequency:.3f}" in fig3.caption(data)

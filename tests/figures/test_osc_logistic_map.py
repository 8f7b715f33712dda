"""Seed 002 Figs. 7-8 (App. F): trained OsciFormer forecasters at quick size."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from figures import osc_logistic_map as fig
from verify import tasks


@pytest.fixture(scope="module")
def data():
    return fig.compute(fig.Config.quick())


def test_test_windows_are_the_harness_ones():
    cfg = fig.Config.quick()
    held = tasks.make_task_data(cfg.train_config()).holdouts[0]
    lm = fig.logistic_data(cfg)
    # the harness trains in float32: the same orbit values, rounded once
    f32 = np.float32
    np.testing.assert_array_equal(held.inputs[..., 0].numpy(), lm.test_context.astype(f32))
    np.testing.assert_array_equal(held.targets.numpy(), lm.test_future[:, 0].astype(f32))


def test_free_run_feeds_back_its_predictions():
    cfg = fig.Config.quick()
    data = tasks.make_task_data(cfg.train_config())
    model = fig.build(cfg, 8, data)
    ctx = fig.logistic_data(cfg).test_context[:3]
    run = fig.free_run(model, ctx, 3)
    with torch.no_grad():
        w = torch.as_tensor(ctx, dtype=torch.float32)[..., None]
        first = model.last(w)[:, 0]
        w2 = torch.cat([w[:, 1:], first[:, None, None]], dim=1)
        second = model.last(w2)[:, 0]
    np.testing.assert_allclose(run[:, 0], first.numpy(), rtol=1e-6)
    np.testing.assert_allclose(run[:, 1], second.numpy(), rtol=1e-6)


def test_trained_one_step_beats_a_quarter_of_the_variance(data):
    # Bound: one-step MSE < variance / 4 (the mean predictor's MSE is the variance, 0.047).
    # Measured at quick size: ~0.004-0.008 trained; the untrained model of the same seed (the
    # negative control) sits at 0.04-0.05, above the bound.
    assert [r.modes for r in data.runs] == [8, 16]
    bound = data.variance / 4
    for r in data.runs:
        assert r.one_step_mse < bound
        assert r.init_mse > bound
        assert r.forecast.shape == data.future.shape
        assert np.all(np.isfinite(r.forecast))


def test_decorrelation_and_range_statistics(data):
    lo, hi = data.attractor
    assert 0.3 < lo < hi < 0.9  # r = 3.57: the orbit lives in [0.34, 0.89]
    for r in data.runs:
        step = data.decorrelation_step(r)
        assert 1 <= step <= data.config.horizon + 1
        assert 0.0 <= data.outside(r) <= 1.0
    # a perfect forecast never decorrelates and never leaves the attractor
    perfect = fig.Run(0, data.future.copy(), 0.0, 0.0, 0.0)
    assert data.decorrelation_step(perfect) == data.config.horizon + 1
    assert data.outside(perfect) == 0.0 and data.excursion(perfect) == 0.0
    # a forecast stuck 0.1 above the attractor is all outside, 0.1 beyond it
    high = fig.Run(0, np.full_like(data.future, hi + 0.1), 0.0, 0.0, 0.0)
    assert data.outside(high) == 1.0
    assert abs(data.excursion(high) - 0.1) < 1e-12


def test_caption_states_the_measured_numbers(data):
    text = fig.caption(data)
    for r in data.runs:
        assert f"one-step MSE {r.one_step_mse:.2g}" in text
        assert f"median {data.decorrelation_step(r):g} steps" in text
        assert f"at most {data.excursion(r):.2f} beyond" in text
    assert "Paper" in text and "Here" in text

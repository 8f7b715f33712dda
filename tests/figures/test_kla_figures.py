"""Seed 001 (KLA) figures: each compute() at quick size, the numbers its caption states, and the
helpers behind those numbers on inputs whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import figures
from figures import (
    kla_attention_matrix,
    kla_memorization,
    kla_ou_scan,
    kla_runtime,
    kla_uncertainty,
)
from verify.registry import select

MODULES = (kla_ou_scan, kla_attention_matrix, kla_memorization, kla_uncertainty, kla_runtime)


def _one_thread(fn, *args, **kwargs):
    # The models are tiny: intra-op threads only add synchronisation on a shared 2-core machine.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(*args, **kwargs)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_contract_registry_and_checks(module):
    assert figures.get(module.NAME) is module
    assert module.SEED == "001" and module.SOURCE.startswith("seed 001")
    ids = [c.id for c in select()]
    for prefix in module.CHECKS:
        assert any(i.startswith(prefix) for i in ids), prefix
    assert module.Config.quick() != module.Config.full()


# --- Fig. 2 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ou():
    return kla_ou_scan.compute(kla_ou_scan.Config.quick())


def test_ou_scan_agrees_with_kalman_filter_and_caption(ou):
    cfg = ou.config
    assert ou.gap_mean < kla_ou_scan.AGREEMENT and ou.gap_var < kla_ou_scan.AGREEMENT
    assert ou.a_bar == pytest.approx(np.exp(-cfg.a * cfg.delta), rel=1e-15)
    assert ou.z.shape == ou.scan_mean.shape == ou.kf_var.shape == (cfg.n_tokens,)
    assert np.all(np.isnan(ou.v[~ou.observed])) and np.all(np.isfinite(ou.v[ou.observed]))
    before, peak, after = kla_ou_scan.gap_variances(ou)
    # prediction steps from below the stationary variance: it rises and stays below it
    assert before < peak < ou.stationary_var and after < peak
    text = kla_ou_scan.caption(ou)
    for number in (
        f"a_bar = {ou.a_bar:.4f}",
        f"p_bar = {ou.p_bar:.4f}",
        f"{ou.gap_mean:.1e} (mean",
        f"{ou.gap_var:.1e} (variance",
        f"{100 * ou.coverage:.1f}%",
        f"from {before:.3g} to {peak:.3g}",
    ):
        assert number in text, number


def test_ou_scan_refuses_a_scan_that_disagrees(monkeypatch):
    """The agreement assertion has power: a scan mean off by a relative 1e-6 is rejected."""
    real = kla_ou_scan.kla_filter

    def skewed(*args, **kwargs):
        res = real(*args, **kwargs)
        return res._replace(mean=res.mean * (1 + 1e-6))

    monkeypatch.setattr(kla_ou_scan, "kla_filter", skewed)
    with pytest.raises(AssertionError, match="disagree"):
        kla_ou_scan.compute(kla_ou_scan.Config.quick())


# --- Fig. 10 ----------------------------------------------------------------------------------


def test_attention_matrix_exact_causal_and_caption():
    data = kla_attention_matrix.compute(kla_attention_matrix.Config.quick())
    cfg = data.config
    assert data.weights.shape == (cfg.width, cfg.length, cfg.length)
    assert data.exactness < 1e-13  # float64 round-off of T-term sums (observed ~6e-16)
    assert data.upper == 0.0
    text = kla_attention_matrix.caption(data)
    for number in (f"{data.exactness:.1e}", f"{data.upper:.1e}", f"{data.quiet_ratio:.3f}"):
        assert number in text, number
    assert ("do not fade" in text) == (data.quiet_ratio >= 1)


# --- Fig. 13 ----------------------------------------------------------------------------------


def test_memorization_task_recipe():
    cfg = kla_memorization.Config.quick()
    data = kla_memorization.memorization_data(cfg)
    K = cfg.n_keys
    x, y = data.train.inputs, data.train.targets
    assert x.shape == y.shape == (cfg.n_train, cfg.length)
    assert torch.all(x[:, 1::2] == 2 * K) and torch.all(x[:, 0::2] < K)
    assert torch.all(y[:, 0::2] == kla_memorization.tasks.IGNORE_INDEX)
    # one dictionary: a key always maps to the same value, in training and held out
    keys = torch.cat([x[:, 0::2], data.holdouts[0].inputs[:, 0::2]]).ravel()
    vals = torch.cat([y[:, 1::2], data.holdouts[0].targets[:, 1::2]]).ravel()
    for key in keys.unique():
        assert vals[keys == key].unique().numel() == 1
    with pytest.raises(ValueError, match="seq_len must be even"):
        kla_memorization.memorization_data(kla_memorization.Config(length=7))


def test_similarity_and_lag_profile_on_known_maps():
    rng = np.random.default_rng(0)
    base = np.tril(rng.random((6, 6)))
    assert kla_memorization.channel_similarity(np.stack([base, 2 * base, base])) == pytest.approx(1)
    noise = np.tril(rng.random((40, 30, 30)))
    assert abs(kla_memorization.channel_similarity(noise)) < 0.05
    prof = kla_memorization.lag_profile(np.eye(5)[None])
    np.testing.assert_allclose(prof, [1, 0, 0, 0, 0])


@pytest.fixture(scope="module")
def memo():
    return _one_thread(kla_memorization.compute, kla_memorization.Config.quick())


def test_memorization_maps_and_caption(memo):
    cfg = memo.config
    assert memo.weights.shape == memo.initial_weights.shape == (cfg.width, cfg.length, cfg.length)
    assert np.all(np.triu(memo.weights, 1) == 0)
    assert memo.profile.sum() == pytest.approx(1) and memo.profile.shape == (cfg.length,)
    assert not np.array_equal(memo.weights, memo.initial_weights)  # training moved the layer
    text = kla_memorization.caption(memo)
    for number in (
        f"{memo.accuracy_before:.3f} before",
        f"{memo.accuracy_after:.3f} after",
        f"{memo.similarity:.2f} trained",
        f"{memo.initial_similarity:.2f} untrained",
        f"{memo.last_token_share:.2f} trained",
    ):
        assert number in text, number
    assert ("not reproduced" in text) == (memo.similarity < 0.5)


# --- Fig. 5(b) --------------------------------------------------------------------------------


def test_uncertainty_ratios_on_known_variances():
    T = 8
    is_insert = np.arange(T) % 2 == 1
    falling = np.linspace(2.0, 1.0, T)[None, :, None] * np.ones((3, T, 4))
    decay, insert = kla_uncertainty.ratios(falling, is_insert)
    assert decay == pytest.approx(np.mean(falling[0, -2:, 0]) / np.mean(falling[0, :2, 0]))
    assert decay < 1 and insert < 1  # each insert comes after its key: slightly lower
    spiky = np.where(is_insert, 5.0, 1.0)[None, :, None] * np.ones((3, T, 4))
    assert kla_uncertainty.ratios(spiky, is_insert) == (1.0, 5.0)


def test_uncertainty_compute_and_caption():
    data = _one_thread(kla_uncertainty.compute, kla_uncertainty.Config.quick())
    T = data.config.task.length
    assert data.variance.shape == data.mean_variance.shape == data.is_insert.shape == (T,)
    assert data.variance_band.shape == (2, T) and np.all(data.variance > 0)
    assert data.is_insert.sum() == T // 2
    text = kla_uncertainty.caption(data)
    for number in (
        f"{data.decay_ratio:.3f} trained",
        f"{data.initial_decay_ratio:.3f} untrained",
        f"{data.insert_ratio:.3f} trained",
        f"{data.accuracy_after:.3f} after",
    ):
        assert number in text, number
    assert ("agrees with the decrease" in text) == (data.decay_ratio < 1)


# --- Figs. 4 and 9 ----------------------------------------------------------------------------


def test_runtime_structure_and_caption():
    cfg = kla_runtime.Config.quick()
    data = _one_thread(kla_runtime.compute, cfg)
    expected = {
        (device, kind, p)
        for device, kinds in kla_runtime.devices(cfg).items()
        for kind in kinds
        for p in kla_runtime.PASSES
    }
    assert set(data.seconds) == expected and ("cpu", "recurrent", "forward") in expected
    for t in data.seconds.values():
        assert t.shape == (len(cfg.lengths),) and np.all(t > 0) and np.all(np.isfinite(t))
    text = kla_runtime.caption(data)
    for p in kla_runtime.PASSES:
        assert f"{data.speedup('cpu', 'torch scan', p):.2f}x {p}" in text
    assert f"recurrent {data.slope('cpu', 'recurrent', 'forward+backward'):.2f}" in text
    assert ("No GPU here" in text) == (not torch.cuda.is_available())


def test_runtime_helpers_on_known_times():
    cfg = kla_runtime.Config.quick()
    lengths = np.array([16, 64, 256])
    data = kla_runtime.Data(
        cfg,
        lengths,
        {
            ("cpu", "recurrent", "forward"): 1e-3 * lengths,
            ("cpu", "torch scan", "forward"): 1e-4 * np.log2(lengths),
        },
        {"cpu": "test"},
    )
    assert data.slope("cpu", "recurrent", "forward") == pytest.approx(1.0)
    assert data.speedup("cpu", "torch scan", "forward") == pytest.approx(0.256 / 8e-4)
    with pytest.raises(ValueError, match="increasing"):
        kla_runtime.Config(lengths=(64, 16))

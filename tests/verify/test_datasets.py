"""Tests of `verify.datasets`: shapes, determinism, and each task's defining property."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from verify import datasets as ds

SMALL = {
    "a5": {"n_train": 16, "n_test": 8, "train_length": 6, "test_lengths": (9, 12)},
    "mqar": {"n_sequences": 16, "vocab_size": 64, "n_pairs": 6, "seq_len": 40, "n_queries": 4},
    "memorization": {"n_sequences": 16, "n_keys": 8, "seq_len": 12},
    "irregular-rotation": {"n_sequences": 16},
    "irregular-forecast": {"n_sequences": 16},
    "logistic-map": {"n_steps": 300, "n_train": 200, "window": 8, "horizon": 20, "n_test": 4},
}


def _arrays(obj):
    """Every numpy array of a generated dataset, flattened, in a fixed order."""
    out = []
    for name in obj.__dataclass_fields__:
        value = getattr(obj, name)
        if isinstance(value, np.ndarray):
            out.append(value)
        elif isinstance(value, tuple):
            for item in value:
                out.extend(item if isinstance(item, tuple) else [item])
    return out


def _same(a, b):
    return all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------------------------------------
# all generators
# ---------------------------------------------------------------------------------------------


def test_registry_lists_the_six_tasks():
    assert sorted(ds.DATASETS) == sorted(SMALL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_same_seed_same_bits_and_meta_is_json(name):
    a = ds.dataset(name, seed=3, **SMALL[name])
    b = ds.dataset(name, seed=3, **SMALL[name])
    c = ds.dataset(name, seed=np.random.default_rng(3), **SMALL[name])
    assert _same(_arrays(a), _arrays(b))
    assert _same(_arrays(a), _arrays(c))  # an int seed is default_rng(seed)
    assert json.loads(json.dumps(a.meta)) == a.meta
    assert a.meta["seed"] == 3 and c.meta["seed"] is None
    assert a.meta["task"] == name
    assert "source" in a.meta


@pytest.mark.parametrize("name", sorted(SMALL))
def test_different_seed_different_data(name):
    a = ds.dataset(name, seed=1, **SMALL[name])
    b = ds.dataset(name, seed=2, **SMALL[name])
    if name == "logistic-map":  # the orbit is deterministic; the seed picks the test windows
        assert not np.array_equal(a.test_start, b.test_start)
        assert np.array_equal(a.series, b.series)
    else:
        assert not _same(_arrays(a), _arrays(b))


def test_generator_does_not_touch_global_state():
    # The legacy global state is what must stay untouched, so the legacy API is the probe.
    before = np.random.get_state()[1].copy()  # noqa: NPY002
    for name in SMALL:
        ds.dataset(name, seed=0, **SMALL[name])
    assert np.array_equal(np.random.get_state()[1], before)  # noqa: NPY002


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("seed", [None, 1.5, "0", True, -1])
def test_bad_seed(name, seed):
    with pytest.raises((TypeError, ValueError), match="seed"):
        ds.dataset(name, seed=seed, **SMALL[name])


def test_unknown_name():
    with pytest.raises(ValueError, match="name must be one of"):
        ds.dataset("a6", seed=0)
    with pytest.raises(TypeError, match="name"):
        ds.dataset(5, seed=0)


# ---------------------------------------------------------------------------------------------
# A5
# ---------------------------------------------------------------------------------------------


def _parity(p):
    return sum(p[i] > p[j] for i in range(len(p)) for j in range(i + 1, len(p))) % 2


def test_a5_elements_are_exactly_the_even_permutations():
    elems = ds.a5_elements()
    assert elems.shape == (60, 5) and elems.dtype == np.int64
    rows = {tuple(p) for p in elems.tolist()}
    assert len(rows) == 60
    assert rows == {p for p in itertools.permutations(range(5)) if _parity(p) == 0}
    assert tuple(elems[0]) == (0, 1, 2, 3, 4)


def test_a5_table_is_a_group_table():
    table = ds.a5_multiplication_table()
    assert table.shape == (60, 60) and table.dtype == np.int64
    for row in (*table, *table.T):
        assert sorted(row.tolist()) == list(range(60))
    assert np.array_equal(table[0], np.arange(60)) and np.array_equal(table[:, 0], np.arange(60))
    # associativity: (a b) c = a (b c)
    idx = np.arange(60)
    lhs = table[table[:, :, None], idx[None, None, :]]  # [a, b, c] -> (a b) c
    rhs = table[idx[:, None, None], table[None, :, :]]  # [a, b, c] -> a (b c)
    assert np.array_equal(lhs, rhs)


def test_a5_targets_are_running_products():
    data = ds.a5_composition(n_train=8, n_test=4, train_length=7, test_lengths=(11, 15), seed=0)
    elems = data.elements
    assert data.train.tokens.shape == data.train.targets.shape == (8, 7)
    assert [s.tokens.shape for s in data.tests] == [(4, 11), (4, 15)]
    for split in (data.train, *data.tests):
        assert split.tokens.dtype == split.targets.dtype == np.int64
        assert split.tokens.min() >= 0 and split.tokens.max() < 60
        for tokens, targets in zip(split.tokens, split.targets, strict=True):
            state = list(range(5))
            for g, y in zip(tokens, targets, strict=True):
                perm = elems[g].tolist()
                state = [perm[state[k]] for k in range(5)]  # apply g after the earlier ones
                assert elems[y].tolist() == state
    assert min(len(s.tokens[0]) for s in data.tests) > data.train.tokens.shape[1]


def test_a5_test_lengths_must_be_longer():
    with pytest.raises(ValueError, match="test_lengths must all exceed train_length=16"):
        ds.a5_composition(train_length=16, test_lengths=(32, 16), seed=0)
    with pytest.raises(ValueError, match="test_lengths"):
        ds.a5_composition(test_lengths=(), seed=0)
    with pytest.raises(TypeError, match="n_train"):
        ds.a5_composition(n_train=2.0, seed=0)
    with pytest.raises(ValueError, match="n_test"):
        ds.a5_composition(n_test=0, seed=0)


# ---------------------------------------------------------------------------------------------
# MQAR
# ---------------------------------------------------------------------------------------------


def test_mqar_answers_are_the_paired_values():
    data = ds.mqar(64, vocab_size=32, n_pairs=8, seq_len=48, n_queries=5, seed=0)
    assert data.inputs.shape == data.labels.shape == (64, 48)
    assert data.keys.shape == data.values.shape == (64, 8)
    assert data.query_positions.shape == (64, 5)
    for arr in (data.inputs, data.labels, data.keys, data.values, data.query_positions):
        assert arr.dtype == np.int64
    n_keys = 31 // 2
    for seq, lab in zip(data.inputs, data.labels, strict=True):
        pairs = {}
        for i in range(0, 16, 2):
            k, v = int(seq[i]), int(seq[i + 1])
            assert 1 <= k <= n_keys < v < 32
            assert k not in pairs  # keys distinct
            pairs[k] = v
        answered = np.flatnonzero(lab != ds.IGNORE_INDEX)
        assert len(answered) == 5 and answered.min() >= 16
        seen = set()
        for p in answered:
            key = int(seq[p])
            assert lab[p] == pairs[key]  # the value paired with that key earlier
            assert seq[p + 1] == lab[p]
            seen.add(key)
        assert len(seen) == 5  # distinct queried keys
        rest = np.setdiff1d(np.arange(16, 48), np.concatenate([answered, answered + 1]))
        assert np.all(seq[rest] == 0)
    assert np.all(data.labels[np.arange(64)[:, None], data.query_positions] != ds.IGNORE_INDEX)


def test_mqar_tight_sequence_uses_every_slot():
    data = ds.mqar(32, vocab_size=16, n_pairs=4, seq_len=16, seed=5)
    assert np.all(data.inputs != 0)
    assert np.all(np.diff(data.query_positions, axis=1) == 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_pairs": 200}, "n_pairs must be <= \\(vocab_size - 1\\) // 2 = 127"),
        ({"seq_len": 10}, "seq_len must be >= 2\\*n_pairs"),
        ({"n_queries": 17}, "n_queries must be <= n_pairs=16"),
        ({"vocab_size": 2}, "vocab_size must be >= 3"),
    ],
)
def test_mqar_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ds.mqar(4, seed=0, **kwargs)


# ---------------------------------------------------------------------------------------------
# Memorization
# ---------------------------------------------------------------------------------------------


def test_memorization_asks_one_dictionary_whose_values_never_appear():
    K = 10
    a = ds.memorization(64, n_keys=K, seq_len=20, dictionary_seed=4, seed=1)
    b = ds.memorization(64, n_keys=K, seq_len=20, dictionary_seed=4, seed=2)
    assert np.array_equal(a.dictionary, b.dictionary)  # other sequences, the same dictionary
    assert not np.array_equal(a.inputs, b.inputs)
    assert sorted(a.dictionary.tolist()) == list(range(K))  # a permutation
    for data in (a, b):
        keys, inserts = data.inputs[:, 0::2], data.inputs[:, 1::2]
        assert np.all((keys >= 0) & (keys < K)) and np.all(inserts == 2 * K)
        assert np.all(data.labels[:, 0::2] == ds.IGNORE_INDEX)
        assert np.array_equal(data.labels[:, 1::2], K + a.dictionary[keys])
        assert not np.any((data.inputs >= K) & (data.inputs < 2 * K))  # no value is an input
    other = ds.memorization(64, n_keys=K, seq_len=20, dictionary_seed=5, seed=1)
    assert np.array_equal(other.inputs, a.inputs)  # the sequences follow `seed` alone
    assert not np.array_equal(other.dictionary, a.dictionary)
    assert a.meta["vocab_size"] == 2 * K + 1 and a.meta["dictionary_seed"] == 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"seq_len": 7}, "seq_len must be even"),
        ({"seq_len": 0}, "seq_len must be >= 2"),
        ({"n_keys": 0}, "n_keys must be >= 1"),
        ({"dictionary_seed": -1}, "dictionary_seed must be >= 0"),
    ],
)
def test_memorization_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ds.memorization(4, seed=0, **kwargs)


# ---------------------------------------------------------------------------------------------
# seed 002 E.2
# ---------------------------------------------------------------------------------------------


def test_irregular_rotation_times_and_classes():
    data = ds.irregular_rotation(200, seed=0)
    assert data.t.shape == (200, 32) and data.x.shape == data.x_clean.shape == (200, 32, 2)
    assert data.labels.shape == (200,) and data.labels.dtype == np.int64
    assert data.frequencies.shape == (41,)
    assert np.allclose(data.frequencies[[0, -1]], [2 * math.pi * 0.5, 2 * math.pi * 4.5])
    gaps = np.diff(data.t, axis=1)
    assert np.all(data.t[:, 0] > 0) and np.all(gaps > 0)
    assert np.array_equal(data.t[:, -1], np.full(200, 5.0))
    assert np.all(gaps.std(axis=1) > 0.2 * gaps.mean(axis=1))  # irregular, not a uniform grid
    assert np.array_equal(data.omega, data.frequencies[data.labels])
    assert np.all((data.amplitude >= 0.8) & (data.amplitude <= 1.2))
    resid = data.x - data.x_clean
    # 12800 draws: the sample std has sd 0.05 / sqrt(2 * 12800) = 3.1e-4; 5 sigma band.
    assert abs(resid.std() - 0.05) < 5 * 0.05 / math.sqrt(2 * resid.size)
    # The label is the bank frequency that demodulates the noisy data to a constant phasor.
    z = data.x[..., 0] + 1j * data.x[..., 1]
    phasor = np.abs(np.mean(z[:, :, None] * np.exp(-1j * data.t[:, :, None] * data.frequencies), 1))
    assert np.array_equal(phasor.argmax(axis=1), data.labels)
    angle = data.omega[:, None] * data.t + data.phase[:, None]
    assert np.allclose(data.x_clean[..., 0], data.amplitude[:, None] * np.cos(angle))


def test_irregular_rotation_errors():
    with pytest.raises(ValueError, match="noise_std"):
        ds.irregular_rotation(4, noise_std=-1.0, seed=0)
    with pytest.raises(ValueError, match="amplitude_range"):
        ds.irregular_rotation(4, amplitude_range=(1.2, 0.8), seed=0)
    with pytest.raises(ValueError, match="n_steps must be >= 2"):
        ds.irregular_rotation(4, n_steps=1, seed=0)
    with pytest.raises(TypeError, match="horizon"):
        ds.irregular_rotation(4, horizon="5", seed=0)


# ---------------------------------------------------------------------------------------------
# seed 002 E.3
# ---------------------------------------------------------------------------------------------


def test_irregular_forecast_times_and_targets():
    data = ds.irregular_forecast(300, seed=0)
    n, l_max = data.t.shape
    assert n == 300 and data.y.shape == data.y_clean.shape == data.mask.shape == (n, l_max)
    assert data.mask.dtype == bool and data.lengths.dtype == np.int64
    assert data.amplitudes.shape == (n, 8) and data.target.shape == (n,)
    assert np.array_equal(data.lengths, data.mask.sum(1)) and l_max == data.lengths.max()
    assert len(np.unique(data.lengths)) > 1  # the number of points varies
    for t, m, length in zip(data.t, data.mask, data.lengths, strict=True):
        assert m[:length].all() and not m[length:].any()
        obs = t[:length]
        assert obs[0] > 0 and obs[-1] < 5.0 and np.all(np.diff(obs) > 0)
        assert np.diff(obs).std() > 0.1 * np.diff(obs).mean()  # irregular
        assert np.isnan(t[length:]).all()
    counts = (data.amplitudes != 0).sum(1)
    assert counts.min() == 1 and counts.max() == 3
    assert np.all(np.abs(data.amplitudes) <= 1.5)
    bank = np.array([2.0, 3.2, 4.4, 5.6, 6.0, 7.2, 8.0, 9.0])
    assert np.array_equal(data.frequencies, bank)
    for i in range(0, n, 37):
        active = np.flatnonzero(data.amplitudes[i])
        a, w = data.amplitudes[i, active], bank[active]
        length = data.lengths[i]
        t = data.t[i, :length]
        assert np.allclose(data.y_clean[i, :length], np.cos(np.outer(t, w)) @ a, atol=1e-12)
        assert math.isclose(data.target[i], float(a @ np.cos(7.0 * w)), abs_tol=1e-12)
    # The paper reports std(y_target) = 0.88; this recipe's is about 0.9 (300 draws: sd ~ 0.04).
    assert 0.7 < data.target.std() < 1.1
    resid = (data.y - data.y_clean)[data.mask]
    assert abs(resid.std() - 0.1) < 5 * 0.1 / math.sqrt(2 * resid.size)  # 5 sigma band


def test_irregular_forecast_errors():
    with pytest.raises(ValueError, match="t_future must be >= window=5.0"):
        ds.irregular_forecast(4, t_future=4.0, seed=0)
    with pytest.raises(ValueError, match="n_components"):
        ds.irregular_forecast(4, n_components=(1, 9), seed=0)
    with pytest.raises(ValueError, match="frequencies must be distinct"):
        ds.irregular_forecast(4, frequencies=(2.0, 2.0), n_components=(1, 1), seed=0)
    with pytest.raises(ValueError, match="gap_scale"):
        ds.irregular_forecast(4, gap_scale=0.0, seed=0)


# ---------------------------------------------------------------------------------------------
# seed 002 App. F
# ---------------------------------------------------------------------------------------------


def test_logistic_map_recurrence_and_windows():
    data = ds.logistic_map(seed=0)
    s = data.series
    assert s.shape == (2001,) and s.dtype == np.float64
    assert s[0] == 0.6
    r = 3.57
    assert np.array_equal(s[1:], r * s[:-1] * (1 - s[:-1]))  # exactly, bit for bit
    assert np.array_equal(data.observed, s)  # noise free by default
    assert data.train_inputs.shape == (1500 - 16, 16) and data.train_targets.shape == (1484,)
    assert np.array_equal(data.train_inputs[5], s[5:21]) and data.train_targets[5] == s[21]
    assert data.test_context.shape == (8, 16) and data.test_future.shape == (8, 50)
    for start, ctx, fut in zip(data.test_start, data.test_context, data.test_future, strict=True):
        assert start >= 1500  # no test value is used in training
        assert np.array_equal(ctx, s[start : start + 16])
        assert np.array_equal(fut, s[start + 16 : start + 66])


def test_logistic_map_noise_and_burn_in():
    data = ds.logistic_map(noise_std=0.01, burn_in=10, seed=1)
    x = 0.6
    for _ in range(10):
        x = 3.57 * x * (1 - x)
    assert data.series[0] == x
    assert not np.array_equal(data.observed, data.series)
    assert np.array_equal(data.test_future[0], data.series[data.test_start[0] + 16 :][:50])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"r": 4.5}, "r must be in \\(0, 4\\]"),
        ({"x0": 1.5}, "x0 must be in \\[0, 1\\]"),
        ({"n_steps": 1560}, "n_steps must leave at least window \\+ horizon = 66"),
        ({"window": 0}, "window must be >= 1"),
        ({"n_train": 10}, "n_train must be >= 17"),
    ],
)
def test_logistic_map_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ds.logistic_map(seed=0, **kwargs)

"""Synthetic task generators the seed papers train on, small enough for a CPU.

Each generator takes a seed (``int``) or a `numpy.random.Generator` as the keyword ``seed``,
never touches global RNG state, and returns a frozen dataclass of numpy arrays plus a JSON-able
``meta`` dict (the full recipe: every parameter, the seed and the source section). Same seed,
same bits.

========================  ===================================================================
name                      task (source)
========================  ===================================================================
``a5``                    A5 word problem: running products of even permutations of 5
                          elements, trained short and tested long (seed 001 Section 5.4;
                          digest 4.4, 2.8)
``mqar``                  multi-query associative recall (seed 001 Section 5.3; digest 4.2-4.3)
``memorization``          a fixed key -> value dictionary recalled at ``[insert]`` tokens, the
                          values never in the input (seed 001 App. F.1; digest 4.2)
``irregular-rotation``    noisy rotations on irregular Poisson times, 41 frequency classes
                          (seed 002 App. E.2; digest Alg. F, 4.6)
``irregular-forecast``    sums of 1-3 cosines on Gamma-gap times, forecast y(7)
                          (seed 002 App. E.3; digest Alg. G, 4.7)
``logistic-map``          one-step-ahead windows and free-run tests of x_{n+1} = r x_n (1 - x_n)
                          (seed 002 App. F, eq. (109); digest Alg. H, 4.8)
========================  ===================================================================

``dataset(name, **kwargs)`` calls the generator registered under `name`; ``DATASETS`` lists them.
Where a paper leaves a parameter open, the choice made here is stated in the generator's
docstring and recorded in ``meta``.

The generators are plain numpy; `verify.tasks` turns them into training problems (tensors, a
model head, the loss and the held-out metric), so that ``python -m verify train --task NAME``
trains any layer of `verify.training` on them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from sde_sim.plumbing import physical_memory

__all__ = [
    "A5_ORDER",
    "DATASETS",
    "E3_FREQUENCIES",
    "IGNORE_INDEX",
    "A5Composition",
    "IrregularForecast",
    "IrregularRotation",
    "LogisticMap",
    "MQAR",
    "Memorization",
    "TokenSplit",
    "a5_composition",
    "a5_elements",
    "a5_multiplication_table",
    "dataset",
    "irregular_forecast",
    "irregular_rotation",
    "logistic_map",
    "memorization",
    "mqar",
]

#: Number of elements of the alternating group A5.
A5_ORDER = 60
#: Label at positions that carry no target (the PyTorch cross-entropy ``ignore_index``).
IGNORE_INDEX = -100

SeedLike = int | np.random.Generator


# ----------------------------------------------------------------------------------------------
# argument checks
# ----------------------------------------------------------------------------------------------


def _rng(seed: SeedLike) -> tuple[np.random.Generator, int | None]:
    """The generator for `seed` and the integer to record in ``meta`` (None for a Generator)."""
    if isinstance(seed, np.random.Generator):
        return seed, None
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(
            f"seed must be an int or a numpy.random.Generator, got {type(seed).__name__}"
        )
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}")
    return np.random.default_rng(int(seed)), int(seed)


def _int(name: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _fits(sizes: str, elements: float, *, arrays: int) -> None:
    """Refuse a dataset whose ``arrays`` arrays of ``elements`` 8-byte entries each cannot fit
    this machine's memory, naming the sizes (``sizes``: the arguments and their values)."""
    total = physical_memory()
    need = 8.0 * float(elements) * arrays
    if total is not None and need > total:
        raise ValueError(
            f"{sizes} needs at least {need / 2**30:.3g} GiB, more than this machine's "
            f"{total / 2**30:.3g} GiB"
        )


def _positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        expected = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {expected}, got {value}")
    return value


def _interval(name: str, value: Any) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a pair (low, high) of reals, got {value!r}") from exc
    if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
        raise ValueError(f"{name} must satisfy finite low <= high, got ({lo}, {hi})")
    return lo, hi


# ----------------------------------------------------------------------------------------------
# A5 word problem
# ----------------------------------------------------------------------------------------------


def a5_elements() -> np.ndarray:
    """The 60 even permutations of ``{0, ..., 4}`` in lexicographic order.

    Row ``g`` is the permutation as an image array: ``p[k]`` is the image of ``k``. Row 0 is the
    identity, so token 0 is the neutral element.

    Returns
    -------
    numpy.ndarray
        ``(60, 5)`` int64.
    """
    rows = [
        p
        for p in itertools.permutations(range(5))
        if sum(p[i] > p[j] for i in range(5) for j in range(i + 1, 5)) % 2 == 0
    ]
    return np.array(rows, dtype=np.int64)


def a5_multiplication_table() -> np.ndarray:
    """``table[a, b]`` = index of ``b after a``: the permutation ``k -> b[a[k]]``.

    This is the step of the running product of `a5_composition`: the state after reading token
    ``g`` is ``table[state, g]``, i.e. apply the earlier elements first.

    Returns
    -------
    numpy.ndarray
        ``(60, 60)`` int64; every row and column is a permutation of ``0..59`` (a Latin square).
    """
    elems = a5_elements()
    index = {tuple(p): i for i, p in enumerate(elems.tolist())}
    # composed[a, b, k] = b[a[k]]
    composed = elems[np.arange(A5_ORDER)[None, :, None], elems[:, None, :]]
    return np.array(
        [[index[tuple(composed[a, b])] for b in range(A5_ORDER)] for a in range(A5_ORDER)],
        dtype=np.int64,
    )


class TokenSplit(NamedTuple):
    """One split of a token task: ``tokens`` and ``targets``, both ``(N, T)`` int64."""

    tokens: np.ndarray
    targets: np.ndarray


@dataclass(frozen=True, eq=False)
class A5Composition:
    """A5 word-problem data; see `a5_composition`.

    Attributes
    ----------
    train : TokenSplit
        ``(n_train, train_length)`` tokens and running-product targets.
    tests : tuple of TokenSplit
        One split per entry of ``meta["test_lengths"]``, each ``(n_test, length)``.
    elements : numpy.ndarray
        ``(60, 5)`` int64, the permutation of each token id (`a5_elements`).
    table : numpy.ndarray
        ``(60, 60)`` int64 multiplication table (`a5_multiplication_table`).
    meta : dict
        The JSON-able recipe.
    """

    train: TokenSplit
    tests: tuple[TokenSplit, ...]
    elements: np.ndarray
    table: np.ndarray
    meta: dict = field(default_factory=dict)


def _a5_split(rng: np.random.Generator, table: np.ndarray, n: int, length: int) -> TokenSplit:
    tokens = rng.integers(0, A5_ORDER, size=(n, length), dtype=np.int64)
    targets = np.empty_like(tokens)
    state = np.zeros(n, dtype=np.int64)  # identity
    for i in range(length):
        state = table[state, tokens[:, i]]
        targets[:, i] = state
    return TokenSplit(tokens, targets)


def a5_composition(
    *,
    n_train: int = 1024,
    n_test: int = 256,
    train_length: int = 16,
    test_lengths: Sequence[int] = (32, 64),
    seed: SeedLike,
) -> A5Composition:
    """A5 state tracking: predict the running product of a word of A5 elements.

    Seed 001 Section 5.4 (digest 4.4; the paper gives no recipe, 2.8) follows Merrill et al.
    (2024), "The illusion of state": tokens ``g_1..g_T`` are uniform i.i.d. over the 60 elements
    of A5 (the even permutations of 5 objects), and the target at position ``t`` is the product
    ``y_t = g_1 g_2 ... g_t``, composed left to right: ``y_t[k] = g_t[y_{t-1}[k]]`` with
    ``y_0`` the identity (``y_t = table[y_{t-1}, g_t]``).

    Choices (open in the paper): uniform tokens, train length 16 and test lengths 32 and 64 by
    default (train short, test long: every test length must exceed `train_length`), token ids
    are the lexicographic ranks of `a5_elements` (0 = identity). Each split is drawn from one
    stream of `seed` in the order train, then tests.

    Parameters
    ----------
    n_train, n_test : int
        Number of sequences per split.
    train_length : int
        Length ``T_train`` of the training sequences.
    test_lengths : sequence of int
        Lengths of the test splits; each must be > `train_length`.
    seed : int or numpy.random.Generator

    Returns
    -------
    A5Composition
        ``train`` ``(n_train, T_train)``; ``tests[i]`` ``(n_test, test_lengths[i])``; int64.
    """
    n_train = _int("n_train", n_train, minimum=1)
    n_test = _int("n_test", n_test, minimum=1)
    train_length = _int("train_length", train_length, minimum=1)
    if isinstance(test_lengths, int | np.integer):
        test_lengths = (test_lengths,)
    if not isinstance(test_lengths, Sequence) or isinstance(test_lengths, str):
        raise TypeError(f"test_lengths must be a sequence of int, got {test_lengths!r}")
    lengths = tuple(_int("test_lengths", t, minimum=1) for t in test_lengths)
    if not lengths:
        raise ValueError("test_lengths must name at least one length, got none")
    short = [t for t in lengths if t <= train_length]
    if short:
        raise ValueError(
            f"test_lengths must all exceed train_length={train_length} (train short, test long); "
            f"got {short}"
        )
    _fits(
        f"n_train x train_length + n_test x sum(test_lengths) = {n_train} x {train_length} + "
        f"{n_test} x {sum(lengths)}",
        n_train * train_length + n_test * sum(lengths),
        arrays=2,
    )
    rng, seed_int = _rng(seed)
    elements = a5_elements()
    table = a5_multiplication_table()
    train = _a5_split(rng, table, n_train, train_length)
    tests = tuple(_a5_split(rng, table, n_test, t) for t in lengths)
    meta = {
        "task": "a5",
        "source": "seed 001 Section 5.4 (digest 4.4); recipe of Merrill et al. (2024)",
        "n_train": n_train,
        "n_test": n_test,
        "train_length": train_length,
        "test_lengths": list(lengths),
        "composition": "y_t[k] = g_t[y_{t-1}[k]], y_0 = identity",
        "seed": seed_int,
    }
    return A5Composition(train, tests, elements, table, meta)


# ----------------------------------------------------------------------------------------------
# MQAR
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class MQAR:
    """Multi-query associative recall data; see `mqar`.

    Attributes
    ----------
    inputs : numpy.ndarray
        ``(N, T)`` int64 tokens.
    labels : numpy.ndarray
        ``(N, T)`` int64: the value at each query-key position, `IGNORE_INDEX` elsewhere.
    keys, values : numpy.ndarray
        ``(N, P)`` int64, the pairs in order of appearance.
    query_positions : numpy.ndarray
        ``(N, Q)`` int64 positions of the query keys, increasing.
    meta : dict
    """

    inputs: np.ndarray
    labels: np.ndarray
    keys: np.ndarray
    values: np.ndarray
    query_positions: np.ndarray
    meta: dict = field(default_factory=dict)


def mqar(
    n_sequences: int,
    *,
    vocab_size: int = 256,
    n_pairs: int = 16,
    seq_len: int = 128,
    n_queries: int | None = None,
    seed: SeedLike,
) -> MQAR:
    """Multi-query associative recall (Zoology, Arora et al. 2023), as in seed 001 Section 5.3.

    Digest 4.2-4.3: ``n_pairs`` key-value pairs, then queries of keys seen earlier; the target
    at a query is the value paired with its key. Layout of one sequence of length ``T``:
    ``k_1 v_1 k_2 v_2 ... k_P v_P`` then a query region of length ``T - 2P`` in which each query
    occupies two slots ``[k, v]`` (the value follows in the input, for next-token training as in
    Zoology) and the other slots hold the filler token 0. ``labels`` carries the value at the
    query key's position and `IGNORE_INDEX` elsewhere.

    Vocabulary: token 0 is the filler; keys are ``1 .. K`` and values ``K+1 .. vocab_size-1``
    with ``K = (vocab_size - 1) // 2``. Keys are distinct within a sequence (sampled without
    replacement); values are sampled with replacement; the ``n_queries`` queried keys are
    distinct, in random order, at uniformly random non-overlapping slot pairs.

    Choices (the paper gives T = 2048, V = 256 for the hard setting but not the number of pairs
    or the query placement): uniform query placement (Zoology draws gaps from a power law),
    a dedicated filler token instead of random filler, defaults T = 128, P = 16, Q = P.

    Parameters
    ----------
    n_sequences : int
    vocab_size : int
        ``V``; needs ``(V - 1) // 2 >= n_pairs`` keys and at least one value.
    n_pairs : int
        ``P``.
    seq_len : int
        ``T >= 2 P + 2 Q``.
    n_queries : int, optional
        ``Q <= P``; default ``P``.
    seed : int or numpy.random.Generator

    Returns
    -------
    MQAR
        ``inputs``/``labels`` ``(N, T)``, ``keys``/``values`` ``(N, P)``, ``query_positions``
        ``(N, Q)``; int64.
    """
    n = _int("n_sequences", n_sequences, minimum=1)
    vocab_size = _int("vocab_size", vocab_size, minimum=3)
    n_pairs = _int("n_pairs", n_pairs, minimum=1)
    n_queries = n_pairs if n_queries is None else _int("n_queries", n_queries, minimum=1)
    if n_queries > n_pairs:
        raise ValueError(f"n_queries must be <= n_pairs={n_pairs}, got {n_queries}")
    n_keys = (vocab_size - 1) // 2
    n_values = vocab_size - 1 - n_keys
    if n_pairs > n_keys:
        raise ValueError(
            f"n_pairs must be <= (vocab_size - 1) // 2 = {n_keys} distinct keys, got {n_pairs}"
        )
    seq_len = _int("seq_len", seq_len, minimum=1)
    need = 2 * n_pairs + 2 * n_queries
    if seq_len < need:
        raise ValueError(f"seq_len must be >= 2*n_pairs + 2*n_queries = {need}, got {seq_len}")
    _fits(f"n_sequences x seq_len = {n} x {seq_len}", n * seq_len, arrays=3)
    rng, seed_int = _rng(seed)

    keys = 1 + rng.permuted(np.tile(np.arange(n_keys), (n, 1)), axis=1)[:, :n_pairs]
    values = 1 + n_keys + rng.integers(0, n_values, size=(n, n_pairs), dtype=np.int64)
    which = rng.permuted(np.tile(np.arange(n_pairs), (n, 1)), axis=1)[:, :n_queries]
    # Query slots: choose Q of the R - Q positions left when each pair is collapsed to one slot,
    # then expand (p_i = c_i + i): a uniform draw of Q non-overlapping slot pairs among R slots.
    region = seq_len - 2 * n_pairs
    free = region - n_queries
    chosen = np.sort(rng.permuted(np.tile(np.arange(free), (n, 1)), axis=1)[:, :n_queries], 1)
    query_positions = 2 * n_pairs + chosen + np.arange(n_queries)

    inputs = np.zeros((n, seq_len), dtype=np.int64)
    labels = np.full((n, seq_len), IGNORE_INDEX, dtype=np.int64)
    inputs[:, 0 : 2 * n_pairs : 2] = keys
    inputs[:, 1 : 2 * n_pairs : 2] = values
    rows = np.arange(n)[:, None]
    q_keys = np.take_along_axis(keys, which, axis=1)
    q_values = np.take_along_axis(values, which, axis=1)
    inputs[rows, query_positions] = q_keys
    inputs[rows, query_positions + 1] = q_values
    labels[rows, query_positions] = q_values
    meta = {
        "task": "mqar",
        "source": "seed 001 Section 5.3, App. F.2 (digest 4.2-4.3); Zoology MQAR",
        "n_sequences": n,
        "vocab_size": vocab_size,
        "n_pairs": n_pairs,
        "n_queries": n_queries,
        "seq_len": seq_len,
        "filler_token": 0,
        "key_tokens": [1, n_keys],
        "value_tokens": [n_keys + 1, vocab_size - 1],
        "ignore_index": IGNORE_INDEX,
        "query_placement": "uniform non-overlapping [key, value] slot pairs after the pairs",
        "seed": seed_int,
    }
    return MQAR(inputs, labels, keys.astype(np.int64), values, query_positions, meta)


# ----------------------------------------------------------------------------------------------
# Seed 001 App. F.1: Memorization (MAD)
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Memorization:
    """Memorization data; see `memorization`.

    Attributes
    ----------
    inputs : numpy.ndarray
        ``(N, T)`` int64 tokens: keys at even positions, ``[insert]`` at odd ones.
    labels : numpy.ndarray
        ``(N, T)`` int64: at each ``[insert]`` the value token of the key before it,
        `IGNORE_INDEX` at the keys.
    dictionary : numpy.ndarray
        ``(K,)`` int64: key ``i`` maps to the value token ``K + dictionary[i]``.
    meta : dict
    """

    inputs: np.ndarray
    labels: np.ndarray
    dictionary: np.ndarray
    meta: dict = field(default_factory=dict)


def memorization(
    n_sequences: int,
    *,
    n_keys: int = 128,
    seq_len: int = 32,
    dictionary_seed: int = 0,
    seed: SeedLike,
) -> Memorization:
    """The MAD Memorization task of seed 001 (App. F.1, Table 8; digest 4.2).

    One key -> value dictionary is shared by every sequence; a sequence is ``T / 2`` pairs
    ``(key, [insert])`` with keys drawn uniformly, and the target at each ``[insert]`` is the
    value of the key before it. The values never appear in the input, so a model can only
    answer from what its weights stored. Tokens: keys ``0 .. K-1``, values ``K .. 2K-1``,
    ``[insert] = 2K`` (vocabulary ``2K + 1``).

    The dictionary comes from ``dictionary_seed`` and the sequences from ``seed``, so that
    training and held-out sequences drawn with different seeds ask the same dictionary.

    Choices (the paper gives 128 keys, 128 values, T = 32, 256 training sequences): the
    dictionary is a random permutation (each value belongs to one key), keys are drawn with
    replacement, and the ``[insert]`` token follows every key.

    Parameters
    ----------
    n_sequences : int
    n_keys : int
        ``K``, the dictionary's size.
    seq_len : int
        ``T``, even and >= 2.
    dictionary_seed : int
        The dictionary's seed (non-negative).
    seed : int or numpy.random.Generator
        The sequences' seed.

    Returns
    -------
    Memorization
        ``inputs``/``labels`` ``(N, T)``, ``dictionary`` ``(K,)``; int64.
    """
    n = _int("n_sequences", n_sequences, minimum=1)
    n_keys = _int("n_keys", n_keys, minimum=1)
    seq_len = _int("seq_len", seq_len, minimum=2)
    if seq_len % 2:
        raise ValueError(f"seq_len must be even (pairs of key and [insert]), got {seq_len}")
    dictionary_seed = _int("dictionary_seed", dictionary_seed, minimum=0)
    _fits(f"n_sequences x seq_len = {n} x {seq_len}", n * seq_len, arrays=2)
    rng, seed_int = _rng(seed)
    dictionary = np.random.default_rng([dictionary_seed, 1]).permutation(n_keys)
    keys = rng.integers(0, n_keys, size=(n, seq_len // 2))
    insert = 2 * n_keys
    inputs = np.full((n, seq_len), insert, dtype=np.int64)
    inputs[:, 0::2] = keys
    labels = np.full((n, seq_len), IGNORE_INDEX, dtype=np.int64)
    labels[:, 1::2] = n_keys + dictionary[keys]
    meta = {
        "task": "memorization",
        "source": "seed 001 App. F.1, Table 8 (digest 4.2); MAD Memorization",
        "n_sequences": n,
        "n_keys": n_keys,
        "seq_len": seq_len,
        "vocab_size": 2 * n_keys + 1,
        "key_tokens": [0, n_keys - 1],
        "value_tokens": [n_keys, 2 * n_keys - 1],
        "insert_token": insert,
        "ignore_index": IGNORE_INDEX,
        "dictionary": "a random permutation of the values, from dictionary_seed",
        "dictionary_seed": dictionary_seed,
        "seed": seed_int,
    }
    return Memorization(inputs, labels, dictionary.astype(np.int64), meta)


# ----------------------------------------------------------------------------------------------
# Seed 002 App. E.2: irregular noisy rotations, frequency classification
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class IrregularRotation:
    """Seed 002 App. E.2 data; see `irregular_rotation`.

    Attributes
    ----------
    t : numpy.ndarray
        ``(N, L)`` float64 time stamps, strictly increasing, ``t[:, -1] == horizon``.
    x : numpy.ndarray
        ``(N, L, 2)`` float64 noisy observations.
    x_clean : numpy.ndarray
        ``(N, L, 2)`` float64 ``A [cos(w t + phi), sin(w t + phi)]``.
    labels : numpy.ndarray
        ``(N,)`` int64 class ``m`` in ``0..M-1`` (0-based; the paper's ``m*`` minus one).
    omega : numpy.ndarray
        ``(N,)`` float64 angular frequency ``frequencies[labels]``.
    amplitude, phase : numpy.ndarray
        ``(N,)`` float64.
    frequencies : numpy.ndarray
        ``(M,)`` float64 bank ``omega_min + m * d_omega``.
    meta : dict
    """

    t: np.ndarray
    x: np.ndarray
    x_clean: np.ndarray
    labels: np.ndarray
    omega: np.ndarray
    amplitude: np.ndarray
    phase: np.ndarray
    frequencies: np.ndarray
    meta: dict = field(default_factory=dict)


def irregular_rotation(
    n_sequences: int,
    *,
    n_steps: int = 32,
    horizon: float = 5.0,
    rate: float = 6.0,
    n_classes: int = 41,
    omega_min: float = 2 * math.pi * 0.5,
    d_omega: float = 2 * math.pi * 0.1,
    amplitude_range: tuple[float, float] = (0.8, 1.2),
    noise_std: float = 0.05,
    seed: SeedLike,
) -> IrregularRotation:
    """Noisy 2-D rotations on irregular times, classified by frequency (seed 002 App. E.2).

    Digest 4.6 / Alg. F. Per sequence: class ``m ~ U{0..M-1}``, ``w = omega_min + m d_omega``
    (defaults: M = 41 frequencies 0.5 .. 4.5 Hz); amplitude ``A ~ U[0.8, 1.2]``, phase
    ``phi ~ U[0, 2 pi)``; ``L = 32`` times from a homogeneous Poisson process of rate 6
    renormalised to ``[0, T]``, ``T = 5``; observations
    ``x_l = A [cos(w t_l + phi), sin(w t_l + phi)] + eps_l``, ``eps_l ~ N(0, 0.05^2 I_2)``.

    Choice (the paper's "re-normalised to [0, T]" is ambiguous): ``L`` i.i.d. Exp(rate) gaps
    ``g_1..g_L``, cumulative sums ``S_l``, ``t_l = T S_l / S_L``; so ``0 < t_1 < ... < t_L = T``
    and the query time ``T`` is the last stamp. Labels are 0-based. The paper's splits are
    50,000 / 10,000 / 10,000: draw them with different seeds.

    Parameters
    ----------
    n_sequences : int
    n_steps : int
        ``L``.
    horizon : float
        ``T``.
    rate : float
        Poisson rate before renormalisation (only the gap proportions survive it).
    n_classes : int
        ``M``.
    omega_min, d_omega : float
        Bank start and spacing, rad per unit time.
    amplitude_range : (float, float)
    noise_std : float
        ``sigma >= 0``.
    seed : int or numpy.random.Generator

    Returns
    -------
    IrregularRotation
        ``t`` ``(N, L)``, ``x`` and ``x_clean`` ``(N, L, 2)``, per-sequence ``(N,)``
        parameters, ``frequencies`` ``(M,)``.
    """
    n = _int("n_sequences", n_sequences, minimum=1)
    n_steps = _int("n_steps", n_steps, minimum=2)
    horizon = _positive("horizon", horizon)
    rate = _positive("rate", rate)
    n_classes = _int("n_classes", n_classes, minimum=2)
    omega_min = _positive("omega_min", omega_min, allow_zero=True)
    d_omega = _positive("d_omega", d_omega)
    a_lo, a_hi = _interval("amplitude_range", amplitude_range)
    if a_lo <= 0:
        raise ValueError(f"amplitude_range must be positive, got ({a_lo}, {a_hi})")
    noise_std = _positive("noise_std", noise_std, allow_zero=True)
    _fits(f"n_sequences x n_steps = {n} x {n_steps}", n * n_steps, arrays=4)
    rng, seed_int = _rng(seed)

    frequencies = omega_min + d_omega * np.arange(n_classes, dtype=np.float64)
    labels = rng.integers(0, n_classes, size=n, dtype=np.int64)
    omega = frequencies[labels]
    gaps = rng.exponential(1.0 / rate, size=(n, n_steps))
    cums = np.cumsum(gaps, axis=1)
    t = horizon * (cums / cums[:, -1:])  # S_L / S_L == 1 exactly, so t_L == horizon
    amplitude = rng.uniform(a_lo, a_hi, size=n)
    phase = rng.uniform(0.0, 2 * math.pi, size=n)
    angle = omega[:, None] * t + phase[:, None]
    x_clean = amplitude[:, None, None] * np.stack([np.cos(angle), np.sin(angle)], axis=-1)
    x = x_clean + noise_std * rng.standard_normal(x_clean.shape)
    meta = {
        "task": "irregular-rotation",
        "source": "seed 002 App. E.2 (digest Alg. F, 4.6)",
        "n_sequences": n,
        "n_steps": n_steps,
        "horizon": horizon,
        "rate": rate,
        "n_classes": n_classes,
        "omega_min": omega_min,
        "d_omega": d_omega,
        "amplitude_range": [a_lo, a_hi],
        "noise_std": noise_std,
        "times": "t_l = horizon * S_l / S_L, S = cumsum of Exp(rate) gaps",
        "labels": "0-based",
        "seed": seed_int,
    }
    return IrregularRotation(t, x, x_clean, labels, omega, amplitude, phase, frequencies, meta)


# ----------------------------------------------------------------------------------------------
# Seed 002 App. E.3: 1-D irregular forecasting (resonance regression)
# ----------------------------------------------------------------------------------------------

#: The angular frequencies of seed 002 App. E.3.
E3_FREQUENCIES = (2.0, 3.2, 4.4, 5.6, 6.0, 7.2, 8.0, 9.0)


@dataclass(frozen=True, eq=False)
class IrregularForecast:
    """Seed 002 App. E.3 data; see `irregular_forecast`.

    Sequences have different lengths: arrays are padded to ``L_max`` with NaN; ``mask`` marks
    the real entries, which come first.

    Attributes
    ----------
    t : numpy.ndarray
        ``(N, L_max)`` float64 times, strictly increasing on the mask, NaN after.
    y : numpy.ndarray
        ``(N, L_max)`` float64 noisy observations ``y(t_n) + eps_n``, NaN after the mask.
    y_clean : numpy.ndarray
        ``(N, L_max)`` float64 ``y(t_n)``, NaN after the mask.
    mask : numpy.ndarray
        ``(N, L_max)`` bool.
    lengths : numpy.ndarray
        ``(N,)`` int64 number of observations.
    target : numpy.ndarray
        ``(N,)`` float64 ``y(t_future)``.
    amplitudes : numpy.ndarray
        ``(N, K)`` float64 ``a_k`` over the whole bank, zero for components not drawn, so
        ``y(t) = amplitudes @ cos(frequencies * t)``.
    frequencies : numpy.ndarray
        ``(K,)`` float64.
    meta : dict
    """

    t: np.ndarray
    y: np.ndarray
    y_clean: np.ndarray
    mask: np.ndarray
    lengths: np.ndarray
    target: np.ndarray
    amplitudes: np.ndarray
    frequencies: np.ndarray
    meta: dict = field(default_factory=dict)


def irregular_forecast(
    n_sequences: int,
    *,
    frequencies: Sequence[float] = E3_FREQUENCIES,
    n_components: tuple[int, int] = (1, 3),
    amplitude_max: float = 1.5,
    gap_shape: float = 2.0,
    gap_scale: float = 0.05,
    window: float = 5.0,
    t_future: float = 7.0,
    noise_std: float = 0.1,
    seed: SeedLike,
) -> IrregularForecast:
    """Forecast ``y(t_future)`` of a sum of cosines seen noisily on irregular times.

    Seed 002 App. E.3 (digest Alg. G, 4.7): ``y(t) = sum_k a_k cos(w_k t)`` with 1-3 components
    (the text's "1133" read as 1-3) from ``w in {2.0, 3.2, 4.4, 5.6, 6.0, 7.2, 8.0, 9.0}``,
    random amplitudes, times ``0 < t_1 < ... < t_N`` with i.i.d. Gamma gaps,
    ``y_n = y(t_n) + eps_n``, ``eps_n ~ N(0, sigma^2)``, target ``y(7.0)``.

    Choices (open in the paper): the number of components is uniform on ``n_components``
    (inclusive), the components are distinct, drawn uniformly without replacement;
    ``a_k ~ U[-1.5, 1.5]`` (gives std(y(7)) of about 0.9, near the reported 0.88); gaps
    ``Gamma(shape 2, scale 0.05)`` (mean 0.1, about 50 points); observations stop before
    ``window = 5.0`` (the paper's feature window ``T``), leaving a gap of 2 to the target;
    ``sigma = 0.1``. The paper's splits are 2,000 train / 400 validation: draw them with
    different seeds.

    Parameters
    ----------
    n_sequences : int
    frequencies : sequence of float
        Bank ``(K,)`` of distinct positive angular frequencies.
    n_components : (int, int)
        Inclusive range of the number of components, within ``1..K``.
    amplitude_max : float
        ``a_k ~ U[-amplitude_max, amplitude_max]``.
    gap_shape, gap_scale : float
        Gamma gap parameters (mean ``shape * scale``).
    window : float
        Observations lie in ``(0, window)``.
    t_future : float
        Target time, ``>= window``.
    noise_std : float
    seed : int or numpy.random.Generator

    Returns
    -------
    IrregularForecast
        ``(N, L_max)`` padded series, ``(N,)`` lengths and targets, ``(N, K)`` amplitudes.
    """
    n = _int("n_sequences", n_sequences, minimum=1)
    try:
        bank = np.asarray(frequencies, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"frequencies must be a sequence of reals, got {frequencies!r}") from exc
    if bank.ndim != 1 or bank.size == 0:
        raise ValueError(f"frequencies must be a non-empty 1-D sequence, got shape {bank.shape}")
    if not np.all(np.isfinite(bank)) or np.any(bank <= 0):
        raise ValueError(f"frequencies must be finite and > 0, got {bank.tolist()}")
    if np.unique(bank).size != bank.size:
        raise ValueError(f"frequencies must be distinct, got {bank.tolist()}")
    k_bank = bank.size
    try:
        c_lo, c_hi = (int(v) for v in n_components)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"n_components must be a pair of ints, got {n_components!r}") from exc
    if not 1 <= c_lo <= c_hi <= k_bank:
        raise ValueError(
            f"n_components must satisfy 1 <= low <= high <= {k_bank} (the bank size), "
            f"got ({c_lo}, {c_hi})"
        )
    amplitude_max = _positive("amplitude_max", amplitude_max)
    gap_shape = _positive("gap_shape", gap_shape)
    gap_scale = _positive("gap_scale", gap_scale)
    window = _positive("window", window)
    t_future = _positive("t_future", t_future)
    if t_future < window:
        raise ValueError(f"t_future must be >= window={window}, got {t_future}")
    noise_std = _positive("noise_std", noise_std, allow_zero=True)
    expected = window / (gap_shape * gap_scale) + 8  # points per sequence
    _fits(
        f"n_sequences x window / (gap_shape x gap_scale) = {n} x {expected:.3g} points",
        n * (expected + k_bank),
        arrays=4,
    )
    rng, seed_int = _rng(seed)

    counts = rng.integers(c_lo, c_hi + 1, size=n)
    order = rng.permuted(np.tile(np.arange(k_bank), (n, 1)), axis=1)
    active = np.zeros((n, k_bank), dtype=bool)
    np.put_along_axis(active, order, np.arange(k_bank)[None, :] < counts[:, None], axis=1)
    amplitudes = np.where(active, rng.uniform(-amplitude_max, amplitude_max, (n, k_bank)), 0.0)

    # Draw gaps in blocks until every sequence has passed the window (deterministic in the seed).
    mean_gap = gap_shape * gap_scale
    block = max(8, int(math.ceil(window / mean_gap)) + 8)
    cums = np.cumsum(rng.gamma(gap_shape, gap_scale, size=(n, block)), axis=1)
    while np.any(cums[:, -1] < window):
        more = np.cumsum(rng.gamma(gap_shape, gap_scale, size=(n, block)), axis=1)
        cums = np.concatenate([cums, cums[:, -1:] + more], axis=1)
    mask = cums < window
    lengths = mask.sum(axis=1).astype(np.int64)
    l_max = max(int(lengths.max()), 1)
    mask = mask[:, :l_max]
    t = np.where(mask, cums[:, :l_max], np.nan)

    t_safe = np.where(mask, t, 0.0)
    y_clean = np.einsum("nk,nlk->nl", amplitudes, np.cos(t_safe[..., None] * bank))
    y = y_clean + noise_std * rng.standard_normal(y_clean.shape)
    y_clean = np.where(mask, y_clean, np.nan)
    y = np.where(mask, y, np.nan)
    target = amplitudes @ np.cos(bank * t_future)
    meta = {
        "task": "irregular-forecast",
        "source": "seed 002 App. E.3 (digest Alg. G, 4.7)",
        "n_sequences": n,
        "frequencies": bank.tolist(),
        "n_components": [c_lo, c_hi],
        "amplitude_max": amplitude_max,
        "gap_shape": gap_shape,
        "gap_scale": gap_scale,
        "window": window,
        "t_future": t_future,
        "noise_std": noise_std,
        "padding": "NaN beyond mask",
        "seed": seed_int,
    }
    return IrregularForecast(t, y, y_clean, mask, lengths, target, amplitudes, bank, meta)


# ----------------------------------------------------------------------------------------------
# Seed 002 App. F: logistic map
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LogisticMap:
    """Seed 002 App. F data; see `logistic_map`.

    Attributes
    ----------
    series : numpy.ndarray
        ``(n_steps + 1,)`` float64 clean orbit ``x_0 .. x_n`` (after burn-in).
    observed : numpy.ndarray
        ``(n_steps + 1,)`` float64 ``series`` plus observation noise (equal when noise is 0).
    train_inputs : numpy.ndarray
        ``(N_train, W)`` float64 windows of ``observed`` from the first ``n_train`` values.
    train_targets : numpy.ndarray
        ``(N_train,)`` float64 next value after each window.
    test_context : numpy.ndarray
        ``(n_test, W)`` float64 true windows from the held-out tail that seed the free run.
    test_future : numpy.ndarray
        ``(n_test, H)`` float64 the clean continuation to forecast.
    test_start : numpy.ndarray
        ``(n_test,)`` int64 index in ``series`` of each context's first value.
    meta : dict
    """

    series: np.ndarray
    observed: np.ndarray
    train_inputs: np.ndarray
    train_targets: np.ndarray
    test_context: np.ndarray
    test_future: np.ndarray
    test_start: np.ndarray
    meta: dict = field(default_factory=dict)


def logistic_map(
    *,
    r: float = 3.57,
    x0: float = 0.6,
    n_steps: int = 2000,
    burn_in: int = 0,
    n_train: int = 1500,
    window: int = 16,
    horizon: int = 50,
    n_test: int = 8,
    noise_std: float = 0.0,
    seed: SeedLike,
) -> LogisticMap:
    """One-step-ahead training windows and free-run tests of the logistic map.

    Seed 002 App. F, eq. (109) (digest Alg. H, 4.8): ``x_{n+1} = r x_n (1 - x_n)``, ``r = 3.57``,
    ``x_0 = 0.6``; train on sliding windows of one long orbit to predict the next value, then
    seed a free run with a true window and feed predictions back for ``H`` steps. (At r = 3.57,
    just past the accumulation point 3.5699, the Lyapunov exponent is small, about +0.011.)

    The orbit is iterated in float64 in exactly that expression order, so
    ``series[i + 1] == r * series[i] * (1 - series[i])`` holds bit for bit.

    Choices (open in the paper): 2,000 steps, no burn-in, train on ``series[:n_train]``
    (all ``n_train - W`` windows), window ``W = 16``, horizon ``H = 50``, 8 test windows whose
    starts are drawn uniformly (from `seed`) in the tail so that no test value is seen in
    training; optional Gaussian observation noise on the training inputs and targets and the
    test contexts (default 0: the paper is noise free).

    Parameters
    ----------
    r : float
        In ``(0, 4]`` so the orbit stays in ``[0, 1]``.
    x0 : float
        In ``[0, 1]``.
    n_steps : int
        Length of the kept orbit minus one.
    burn_in : int
        Iterations discarded before ``x_0`` of `series`.
    n_train : int
        Values of the orbit used for training windows, ``W < n_train``.
    window : int
        ``W``.
    horizon : int
        ``H``.
    n_test : int
    noise_std : float
    seed : int or numpy.random.Generator

    Returns
    -------
    LogisticMap
        ``series`` ``(n_steps + 1,)``; ``train_inputs`` ``(n_train - W, W)``;
        ``test_context`` ``(n_test, W)``; ``test_future`` ``(n_test, H)``.
    """
    r = _positive("r", r)
    if r > 4:
        raise ValueError(f"r must be in (0, 4] to keep the orbit in [0, 1], got {r}")
    if isinstance(x0, bool) or not isinstance(x0, int | float | np.integer | np.floating):
        raise TypeError(f"x0 must be a real number, got {type(x0).__name__}")
    x0 = float(x0)
    if not 0.0 <= x0 <= 1.0:
        raise ValueError(f"x0 must be in [0, 1], got {x0}")
    n_steps = _int("n_steps", n_steps, minimum=2)
    burn_in = _int("burn_in", burn_in, minimum=0)
    window = _int("window", window, minimum=1)
    horizon = _int("horizon", horizon, minimum=1)
    n_train = _int("n_train", n_train, minimum=window + 1)
    n_test = _int("n_test", n_test, minimum=1)
    tail = n_steps + 1 - n_train
    if tail < window + horizon:
        raise ValueError(
            f"n_steps must leave at least window + horizon = {window + horizon} values after "
            f"n_train={n_train}; got {tail} (n_steps={n_steps})"
        )
    noise_std = _positive("noise_std", noise_std, allow_zero=True)
    _fits(
        f"n_steps = {n_steps} (n_train x window = {n_train} x {window})",
        n_steps + 1 + n_train * window,
        arrays=3,
    )
    rng, seed_int = _rng(seed)

    x = x0
    for _ in range(burn_in):
        x = r * x * (1 - x)
    series = np.empty(n_steps + 1, dtype=np.float64)
    series[0] = x
    for i in range(n_steps):
        x = r * x * (1 - x)
        series[i + 1] = x
    observed = series + noise_std * rng.standard_normal(series.shape)

    starts = np.arange(n_train - window)
    train_inputs = observed[starts[:, None] + np.arange(window)]
    train_targets = observed[starts + window]
    test_start = n_train + rng.integers(0, tail - window - horizon + 1, size=n_test)
    test_context = observed[test_start[:, None] + np.arange(window)]
    test_future = series[test_start[:, None] + window + np.arange(horizon)]
    meta = {
        "task": "logistic-map",
        "source": "seed 002 App. F, eq. (109) (digest Alg. H, 4.8)",
        "r": r,
        "x0": x0,
        "n_steps": n_steps,
        "burn_in": burn_in,
        "n_train": n_train,
        "window": window,
        "horizon": horizon,
        "n_test": n_test,
        "noise_std": noise_std,
        "seed": seed_int,
    }
    return LogisticMap(
        series,
        observed,
        train_inputs,
        train_targets,
        test_context,
        test_future,
        test_start.astype(np.int64),
        meta,
    )


# ----------------------------------------------------------------------------------------------
# registry
# ----------------------------------------------------------------------------------------------

#: Generators by name.
DATASETS: dict[str, Callable[..., Any]] = {
    "a5": a5_composition,
    "mqar": mqar,
    "memorization": memorization,
    "irregular-rotation": irregular_rotation,
    "irregular-forecast": irregular_forecast,
    "logistic-map": logistic_map,
}


def dataset(name: str, **kwargs: Any) -> Any:
    """Generate the task registered as `name` in `DATASETS`; `kwargs` go to its generator.

    Example: ``dataset("mqar", n_sequences=64, seed=0)``.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    try:
        generator = DATASETS[name]
    except KeyError:
        raise ValueError(f"name must be one of {sorted(DATASETS)}, got {name!r}") from None
    return generator(**kwargs)

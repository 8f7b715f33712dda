"""Hypothesis strategies: Hurwitz matrices, SPD covariances, stable linear SDEs, time grids."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from sde_sim import LinearSDE, TimeGrid


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


DIMS = st.integers(1, 4)


@st.composite
def hurwitz_matrices(draw, dims=DIMS, max_cond: float = 4.0):
    """Real A with every eigenvalue's real part <= -0.1 and non-normal structure.

    ``A = T (K - P) T^-1`` with K skew, P SPD (so ``K - P`` is strictly dissipative) and a
    random well-conditioned similarity ``T``: the spectrum stays in the open left half-plane.
    """
    d = draw(dims)
    rng = _rng(draw(st.integers(0, 2**32 - 1)))
    K = rng.normal(size=(d, d))
    K = K - K.T
    L = rng.normal(size=(d, d))
    P = L @ L.T / d + 0.1 * np.eye(d)
    T = np.eye(d) + rng.normal(size=(d, d)) * 0.3
    while np.linalg.cond(T) > max_cond:
        T = np.eye(d) + 0.5 * (T - np.eye(d))
    return T @ (K - P) @ np.linalg.inv(T)


@st.composite
def spd_matrices(draw, d: int, min_eig: float = 0.05):
    """Symmetric positive definite (d, d) with smallest eigenvalue >= `min_eig`."""
    rng = _rng(draw(st.integers(0, 2**32 - 1)))
    L = rng.normal(size=(d, d))
    return L @ L.T / d + min_eig * np.eye(d)


@st.composite
def stable_linear_sdes(draw, dims=DIMS):
    """A `LinearSDE` with Hurwitz A, SPD Q and a random constant drift u."""
    A = draw(hurwitz_matrices(dims=dims))
    d = A.shape[0]
    Q = draw(spd_matrices(d))
    u = _rng(draw(st.integers(0, 2**32 - 1))).normal(size=d)
    return LinearSDE.from_covariance(A, Q, u)


@st.composite
def time_grids(draw, max_steps: int = 40):
    """Irregular increasing time grids starting anywhere."""
    n = draw(st.integers(1, max_steps))
    rng = _rng(draw(st.integers(0, 2**32 - 1)))
    steps = rng.uniform(0.001, 0.2, size=n)
    t0 = draw(st.floats(-5, 5))
    return TimeGrid(t0 + np.concatenate([[0.0], np.cumsum(steps)]), steps)


# --------------------------------------------------------------------------------------------
# Bad and edge inputs (the fuzz suite, tests/fuzz): one argument of a valid call made bad.
# --------------------------------------------------------------------------------------------

# Each kind names a way to spoil an array argument; `spoil_array` applies it.
ARRAY_SPOILS = (
    "nan",
    "inf",
    "-inf",
    "huge",
    "tiny",
    "negative",
    "zero",
    "empty",
    "ragged",
    "string",
    "none",
    "dict",
    "complex",
    "int",
    "bool",
    "extra_axis",
    "drop_axis",
    "truncate",
)
# Values that are not finite or not representable in a product of two of them.
HUGE = (1e150, 1e200, 1e300, 1.7e308)
TINY = (1e-150, 1e-300, 5e-324)
SCALAR_SPOILS = (
    float("nan"),
    float("inf"),
    float("-inf"),
    1e300,
    -1e300,
    1e-300,
    0.0,
    -1.0,
    "1.0",
    None,
    True,
    complex(1.0, 1.0),
    [1.0, 2.0],
)


def spoil_array(draw, value, kind: str):
    """`value` (array-like, any rank) spoilt by `kind` (one of `ARRAY_SPOILS`)."""
    arr = np.array(value, dtype=float)
    rng = _rng(draw(st.integers(0, 2**32 - 1)))
    flat = arr.reshape(-1).copy()
    pick = int(rng.integers(flat.size)) if flat.size else 0
    if kind in ("nan", "inf", "-inf"):
        if not flat.size:
            return np.full((1,) * max(arr.ndim, 1), float(kind))
        flat[pick] = float(kind)
        return flat.reshape(arr.shape)
    if kind == "huge":
        big = draw(st.sampled_from(HUGE))
        if draw(st.booleans()) or not flat.size:
            return arr * big + (0.0 if flat.size else big)
        flat[pick] = big * draw(st.sampled_from((1.0, -1.0)))
        return flat.reshape(arr.shape)
    if kind == "tiny":
        return arr * draw(st.sampled_from(TINY))
    if kind == "negative":
        return -np.abs(arr) - 1.0
    if kind == "zero":
        return np.zeros_like(arr)
    if kind == "empty":
        shape = list(arr.shape) or [1]
        shape[int(rng.integers(len(shape)))] = 0
        return np.zeros(shape)
    if kind == "ragged":
        if arr.ndim == 0:
            return [float(arr), [float(arr)]]
        rows = [np.asarray(row).tolist() for row in arr]
        if len(rows) < 2:
            rows.append(rows[0] if rows else 1.0)
        rows[-1] = [rows[-1], rows[-1]] if not isinstance(rows[-1], list) else rows[-1][:-1]
        if rows[-1] == []:
            rows[-1] = [1.0, 2.0, 3.0]
        return rows
    if kind == "string":
        return "not an array"
    if kind == "none":
        return None
    if kind == "dict":
        return {"value": 1.0}
    if kind == "complex":
        return arr + 1j * (1.0 + np.abs(arr))
    if kind == "int":
        return np.round(arr).astype(np.int64)
    if kind == "bool":
        return arr > 0
    if kind == "extra_axis":
        return arr[None]
    if kind == "drop_axis":
        return arr[0] if arr.ndim else arr[None]
    if kind == "truncate":
        if arr.ndim == 0 or not arr.size:
            return np.zeros((2, 3, 5))
        axis = int(rng.integers(arr.ndim))
        if arr.shape[axis] > 1:
            return np.take(arr, range(arr.shape[axis] - 1), axis=axis)
        return np.concatenate([arr, arr], axis=axis)
    raise ValueError(f"unknown spoil {kind!r}")


@st.composite
def spoilt(draw, value, kinds=ARRAY_SPOILS):
    """(kind, spoilt value) for an array argument."""
    kind = draw(st.sampled_from(kinds))
    return kind, spoil_array(draw, value, kind)


def scalar_spoils(extra=()):
    """A bad or edge value for a scalar argument."""
    return st.sampled_from(SCALAR_SPOILS + tuple(extra))


@st.composite
def small_arrays(draw, shape, scale: float = 1.0):
    """Standard normal entries times `scale` (from a drawn seed, so shrinking stays cheap)."""
    rng = _rng(draw(st.integers(0, 2**32 - 1)))
    return rng.normal(size=shape) * scale

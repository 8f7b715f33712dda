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

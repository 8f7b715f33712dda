"""Euler-Maruyama: the fast linear path against the pure step, its law, strong and weak order."""

import numpy as np
import pytest
from hypothesis import given, settings

from sde_sim import (
    ArrayNoise,
    BrownianPath,
    LinearSDE,
    TimeGrid,
    euler_maruyama_step,
    linear_transition,
    presets,
    simulate_euler,
)
from tests.sde_sim.reference import SIGMA, euler_moments, slope_with_error, whitened_scores
from tests.strategies import stable_linear_sdes, time_grids


def _iterate_step(sde, x0, grid, dW):
    x, out = x0, [x0]
    for k in range(grid.n_steps):
        x = euler_maruyama_step(sde, grid.t[k], x, grid.steps[k], dW[k])
        out.append(x)
    return np.stack(out, axis=1)


@given(stable_linear_sdes(), time_grids())
def test_linear_fast_path_equals_the_pure_step(sde, grid):
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=(3, sde.dim))
    dW = rng.normal(size=(grid.n_steps, 3, sde.noise_dim)) * np.sqrt(grid.steps)[:, None, None]
    fast = simulate_euler(sde, x0, ArrayNoise(dW, grid))
    np.testing.assert_allclose(fast, _iterate_step(sde, x0, grid, dW), rtol=1e-12, atol=1e-12)


def test_float32_follows_float64_on_the_same_noise():
    sde = presets.get("afa-2d").scenario("b").system
    grid = TimeGrid.uniform(0.01, 500)
    dW = BrownianPath(2, grid, 16, 2).increments()
    x0 = np.full((16, 2), 10.0)
    x64 = simulate_euler(sde, x0, ArrayNoise(dW, grid))
    x32 = simulate_euler(sde, x0, ArrayNoise(dW.astype(np.float32), grid))
    assert x32.dtype == np.float32
    # Round-off of 500 contracting steps: a few hundred float32 ulps of |x| ~ 20.
    np.testing.assert_allclose(x32, x64, rtol=0, atol=1e-3)


def test_same_seed_same_paths():
    sde = presets.get("rotation-3d").scenario().system
    grid = TimeGrid.uniform(0.01, 300)
    x0 = np.ones((8, 3))
    a = simulate_euler(sde, x0, BrownianPath(5, grid, 8, 3))
    b = simulate_euler(sde, x0, BrownianPath(5, grid, 8, 3))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("name", "variant"), [("afa-2d", "b"), ("rotation-3d", None)])
def test_euler_transition_law_is_the_euler_recursion(name, variant):
    sde = presets.get(name).scenario(variant).system
    h, n, skip, paths = 0.05, 8, 3, 10_000
    grid = TimeGrid.uniform(h, skip + n)
    x0 = np.random.default_rng(1).normal(size=(paths, sde.dim)) * 3.0
    x = simulate_euler(sde, x0, BrownianPath(2, grid, paths, sde.noise_dim))
    M, c, S = euler_moments(sde.A, sde.G, sde.u, h, n)
    scores = whitened_scores(x[:, skip + n] - x[:, skip] @ M.T - c, S)
    assert np.max(np.abs(scores)) < SIGMA, scores


@settings(max_examples=8)
@given(stable_linear_sdes())
def test_euler_law_for_random_stable_systems(sde):
    h, n, paths = 0.1, 5, 10_000
    grid = TimeGrid.uniform(h, n)
    x0 = np.random.default_rng(3).normal(size=(paths, sde.dim))
    x = simulate_euler(sde, x0, BrownianPath(4, grid, paths, sde.noise_dim))
    M, c, S = euler_moments(sde.A, sde.G, sde.u, h, n)
    scores = whitened_scores(x[:, n] - x0 @ M.T - c, S)
    assert np.max(np.abs(scores)) < SIGMA, scores


# --- convergence on nested grids sharing one Brownian path --------------------------------------
#
# Levels h = T / 2^k, k = 4..8, are coarsenings of one fine path with h_ref = T / 2^12, so every
# level sees the same Brownian motion. The reference is itself Euler: if the error behaves like
# c h, the measured error behaves like c (h - h_ref), which raises the local slope between the
# two finest levels by log2((2 - 1/16) / (1 - 1/16)) - 1 = 0.047 and the fitted slope by less;
# the O(h^2) term of the error expansion adds a few hundredths at h = 1/16 (|A| ~ 2.2). Band for
# the strong order: |slope - 1| < 0.1 + 5 standard errors (estimated over 10 batches of paths).
# It separates order 1 from the order 1/2 of multiplicative noise and from the order 0 a
# broken coupling between levels would give.

LEVELS = np.arange(4, 9)
FINE_LEVEL = 12
STRONG_BAND = 0.1


def _nested_paths(sde, x0, T, seed):
    fine_grid = TimeGrid.uniform(T / 2**FINE_LEVEL, 2**FINE_LEVEL)
    fine = BrownianPath(seed, fine_grid, x0.shape[0], sde.noise_dim)
    reference = simulate_euler(sde, x0, fine)[:, -1]
    finals = [simulate_euler(sde, x0, fine.coarsen(2 ** (FINE_LEVEL - k)))[:, -1] for k in LEVELS]
    return reference, np.stack(finals, axis=1), T / 2.0**LEVELS


def test_strong_order_one_for_additive_noise():
    # x0 = 0 and u = 0: every bit of the error comes from how the noise is integrated.
    sde = presets.get("afa-2d").scenario("b").system
    reference, finals, h = _nested_paths(sde, np.zeros((2000, 2)), T=1.0, seed=7)
    errors = np.linalg.norm(finals - reference[:, None], axis=-1)  # (paths, levels)
    batches = errors.reshape(10, -1, len(LEVELS)).mean(axis=1)
    slope, stderr = slope_with_error(h, batches)
    assert abs(slope - 1.0) < STRONG_BAND + SIGMA * stderr, (slope, stderr)


def _euler_second_moment(sde, x0, step, n):
    M, c, S = euler_moments(sde.A, sde.G, sde.u, step, n)
    mean = M @ x0 + c
    return mean @ mean + np.trace(S)


def test_weak_order_one_and_the_predicted_bias():
    # f(x) = |x|^2. Euler's E f(x_n) follows exactly from its moments, so the weak error of
    # every level is predicted. The Monte Carlo estimate (coupled through the shared path,
    # hence low-variance) must match the prediction level by level, and its fitted slope must
    # match the predicted curve's.
    sde = presets.get("afa-2d").scenario("b").system
    paths, T = 4000, 1.0
    x0 = np.array([15.0, -5.0])
    reference, finals, h = _nested_paths(sde, np.tile(x0, (paths, 1)), T=T, seed=8)
    diffs = np.sum(finals**2, axis=-1) - np.sum(reference**2, axis=-1)[:, None]

    f_fine = _euler_second_moment(sde, x0, T / 2**FINE_LEVEL, 2**FINE_LEVEL)
    predicted = np.array([_euler_second_moment(sde, x0, T / 2.0**k, 2**k) for k in LEVELS])
    predicted -= f_fine
    stderr = diffs.std(axis=0, ddof=1) / np.sqrt(paths)
    assert np.all(np.abs(diffs.mean(axis=0) - predicted) < SIGMA * stderr), (
        diffs.mean(axis=0),
        predicted,
        stderr,
    )
    batches = np.abs(diffs.reshape(10, -1, len(LEVELS)).mean(axis=1))
    slope, slope_err = slope_with_error(h, batches)
    predicted_slope = np.polyfit(np.log(h), np.log(np.abs(predicted)), 1)[0]
    assert abs(slope - predicted_slope) < SIGMA * slope_err, (slope, predicted_slope, slope_err)


def test_euler_weak_error_against_the_exact_law_halves_with_the_step():
    # Weak order 1 of the Euler law itself: E f under Euler minus E f under the exact
    # transition (Van Loan), for f = |x|^2; the ratio of errors at h and h/2 tends to 2.
    sde = presets.get("afa-2d").scenario("b").system
    x0, T = np.array([15.0, -5.0]), 1.0
    Phi, offset, Qd = (m[0] for m in linear_transition(sde, T))
    mean = Phi @ x0 + offset
    exact = mean @ mean + np.trace(Qd)
    errors = np.array([_euler_second_moment(sde, x0, T / 2**k, 2**k) - exact for k in range(4, 13)])
    ratios = errors[:-1] / errors[1:]
    assert np.all(np.diff(np.abs(ratios - 2.0)) < 0)  # monotone approach to 2
    assert abs(ratios[-1] - 2.0) < 1e-3


def test_bad_batches_are_reported():
    sde = LinearSDE(-np.eye(2), np.eye(2))
    grid = TimeGrid.uniform(0.1, 4)
    with pytest.raises(ValueError, match=r"x0 must have shape \(P, 2\)"):
        simulate_euler(sde, np.zeros((3, 3)), BrownianPath(0, grid, 3, 2))
    with pytest.raises(ValueError, match="x0 has 4 paths but the noise has 3"):
        simulate_euler(sde, np.zeros((4, 2)), BrownianPath(0, grid, 3, 2))
    with pytest.raises(ValueError, match="noise has dimension 1; the system needs 2"):
        simulate_euler(sde, np.zeros((3, 2)), BrownianPath(0, grid, 3, 1))

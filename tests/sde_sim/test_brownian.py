"""Seeded Brownian paths: determinism, chunk independence, shared paths across step sizes, law."""

import numpy as np
import pytest

from sde_sim import ArrayNoise, BrownianPath, TimeGrid
from sde_sim import brownian as brownian_module

# Statistical checks below use 5-sigma bands: a false alarm has probability ~6e-7 per check.
SIGMA = 5.0


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few steps, so short paths span many blocks."""
    monkeypatch.setattr(brownian_module, "BLOCK_ELEMENTS", 64)


def test_same_seed_same_bits_and_different_seed_differs():
    grid = TimeGrid.uniform(0.01, 300)
    a = BrownianPath(7, grid, 5, 2).increments()
    b = BrownianPath(7, grid, 5, 2).increments()
    c = BrownianPath(8, grid, 5, 2).increments()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.shape == (300, 5, 2)


def test_reads_do_not_depend_on_order_or_chunking(small_blocks):
    grid = TimeGrid.uniform(0.1, 97)
    whole = BrownianPath(3, grid, 4, 3).increments()
    path = BrownianPath(3, grid, 4, 3)
    assert path.block_steps < 10  # the fixture makes the path span many blocks
    pieces = [(50, 97), (0, 13), (13, 50)]
    for start, stop in pieces:
        np.testing.assert_array_equal(path.increments(start, stop), whole[start:stop])
    chunked = np.concatenate([dw for _, _, dw in path.chunks(max_steps=11)])
    np.testing.assert_array_equal(chunked, whole)


def test_coarse_increments_are_sums_of_fine_ones(small_blocks):
    grid = TimeGrid.uniform(0.01, 120)
    fine = BrownianPath(11, grid, 3, 2)
    dW = fine.increments()
    for factor in (2, 3, 8, 12):
        coarse = fine.coarsen(factor)
        assert coarse.grid.steps[0] == pytest.approx(0.01 * factor)
        expected = dW.reshape(-1, factor, 3, 2).sum(axis=1)
        np.testing.assert_allclose(coarse.increments(), expected, rtol=1e-13, atol=1e-15)
        chunked = np.concatenate([d for _, _, d in coarse.chunks()])
        np.testing.assert_allclose(chunked, expected, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(
        fine.coarsen(2).coarsen(3).increments(),
        fine.coarsen(6).increments(),
        rtol=1e-13,
        atol=1e-15,
    )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_increments_have_variance_h_and_no_correlation(dtype):
    steps = np.random.default_rng(0).uniform(0.001, 0.1, size=400)
    grid = TimeGrid(np.concatenate([[0], np.cumsum(steps)]), steps)
    dW = BrownianPath(5, grid, 500, 2, dtype=dtype).increments()
    assert dW.dtype == np.dtype(dtype)
    xi = (dW / np.sqrt(steps)[:, None, None]).astype(float).ravel()
    n = xi.size
    # Sample mean ~ N(0, 1/n); sample variance ~ 1 +- sqrt(2/n).
    assert abs(xi.mean()) < SIGMA / np.sqrt(n)
    assert abs(xi.var() - 1.0) < SIGMA * np.sqrt(2.0 / n)
    # Lag-1 correlation in time and across paths: each ~ N(0, 1/n).
    w = (dW / np.sqrt(steps)[:, None, None]).astype(float)
    lag = np.mean(w[1:] * w[:-1])
    across = np.mean(w[:, 1:] * w[:, :-1])
    assert abs(lag) < SIGMA / np.sqrt(w[1:].size)
    assert abs(across) < SIGMA / np.sqrt(w[:, 1:].size)


def test_seed_types():
    grid = TimeGrid.uniform(0.1, 5)
    a = BrownianPath(np.random.SeedSequence(4), grid, 2, 1).increments()
    b = BrownianPath(4, grid, 2, 1).increments()
    np.testing.assert_array_equal(a, b)
    g1, g2 = np.random.default_rng(9), np.random.default_rng(9)
    np.testing.assert_array_equal(
        BrownianPath(g1, grid, 2, 1).increments(), BrownianPath(g2, grid, 2, 1).increments()
    )
    with pytest.raises(TypeError, match="seed must be"):
        BrownianPath(-1, grid, 2, 1)
    with pytest.raises(ValueError, match="dtype must be float64 or float32"):
        BrownianPath(1, grid, 2, 1, dtype="int32")
    with pytest.raises(ValueError, match=r"step range \[3, 9\)"):
        BrownianPath(1, grid, 2, 1).increments(3, 9)


def test_array_noise_checks_its_shape():
    grid = TimeGrid.uniform(0.1, 5)
    with pytest.raises(ValueError, match=r"noise must have shape \(5, P, m\)"):
        ArrayNoise(np.zeros((4, 2, 1)), grid)
    with pytest.raises(ValueError, match="NaN"):
        ArrayNoise(np.full((5, 2, 1), np.nan), grid)

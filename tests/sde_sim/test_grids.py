"""Time grids: exact uniform steps, merging off-grid times, coarsening."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sde_sim import TimeGrid
from tests.strategies import time_grids


def test_uniform_grid_keeps_the_exact_step():
    grid = TimeGrid.uniform(0.01, 1000, t0=2.0)
    assert grid.t.shape == (1001,)
    assert np.all(grid.steps == 0.01)  # np.diff(grid.t) varies in the last bits; steps do not
    assert grid.step_classes()[0].tolist() == [0.01]
    assert grid.end == pytest.approx(12.0)


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        ((0.0, 10), "dt must be > 0"),
        ((-1.0, 10), "dt must be > 0"),
        ((0.1, 0), "n_steps must be >= 1"),
        ((float("inf"), 10), "dt must be finite"),
    ],
)
def test_uniform_grid_bad_input(args, pattern):
    with pytest.raises(ValueError, match=pattern):
        TimeGrid.uniform(*args)


def test_non_increasing_times_are_rejected():
    with pytest.raises(ValueError, match="strictly increasing; step 1"):
        TimeGrid.from_times([0.0, 1.0, 1.0, 2.0])


@given(time_grids(), st.integers(0, 2**32 - 1))
def test_insert_places_each_time_exactly_and_keeps_untouched_steps(grid, seed):
    rng = np.random.default_rng(seed)
    times = np.sort(rng.uniform(grid.start, grid.end, size=rng.integers(0, 6)))
    times = np.concatenate([times, grid.t[rng.integers(0, grid.t.size, size=2)]])
    merged, index = grid.insert(times)
    np.testing.assert_allclose(merged.t[index], times, rtol=0, atol=1e-9 * grid.steps.max())
    assert np.all(np.diff(merged.t) > 0)
    assert np.isin(grid.t, merged.t).all()
    # Steps between two original points keep their original size exactly.
    _, old = merged.insert(grid.t)
    untouched = np.diff(old) == 1
    np.testing.assert_array_equal(merged.steps[old[:-1][untouched]], grid.steps[untouched])
    np.testing.assert_allclose(merged.steps, np.diff(merged.t), rtol=1e-9)


def test_insert_rejects_times_outside_the_span():
    with pytest.raises(ValueError, match=r"span \[0, 1\]"):
        TimeGrid.uniform(0.1, 10).insert(np.array([0.5, 1.5]))


def test_coarsen():
    grid = TimeGrid.uniform(0.01, 12)
    coarse = grid.coarsen(4)
    np.testing.assert_array_equal(coarse.t, grid.t[::4])
    assert np.all(coarse.steps == 0.04)
    with pytest.raises(ValueError, match="does not divide"):
        grid.coarsen(5)

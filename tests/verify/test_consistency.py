"""Consistency check: the quick run passes its band and a trainer that ignores data fails it."""

import pytest

from verify.consistency import SLOPE, SLOPE_BAND, consistency, fitted_slope, pooled_error


@pytest.fixture(scope="module")
def quick():
    return consistency(quick=True)  # shared with the registered check (cached per process)


def test_quick_slope_within_the_band(quick):
    assert abs(quick.slope - SLOPE) <= SLOPE_BAND[True], quick.summary()
    assert [r.replicates for r in quick.results] == [2, 2, 1]
    errors = [r.trained_error for r in quick.results]
    assert errors[0] > errors[-1]


def test_a_trainer_that_ignores_the_extra_data_fails():
    """Negative control: the values learned on the smallest N reported at every N (a trainer
    that stops learning from more paths) give a flat error, slope 0, outside the band."""
    result = consistency(quick=True)
    first = result.results[0].learned[0]
    largest = result.results[-1].rows
    scales = {r.name: r.mle_se for r in largest}
    truth = {r.name: r.truth for r in largest}
    frozen = [pooled_error([first] * size.replicates, truth, scales) for size in result.results]
    slope = fitted_slope(result.sizes, frozen)
    assert abs(slope - SLOPE) > max(SLOPE_BAND.values())
    # and the real errors are the pooled ones
    real = [pooled_error(list(size.learned), truth, scales) for size in result.results]
    assert real == [size.trained_error for size in result.results]


def test_the_largest_size_is_the_case_own_run():
    """The full sizes' largest run is `CASES[CASE]` itself (same configuration key), so the
    registered checks and the figures train it once."""
    from verify.consistency import CASE, SIZES, size_configs
    from verify.mle_convergence import CASES, config_key

    [largest] = size_configs(SIZES[-1], SIZES, CASES[CASE].full, replicates=4)
    assert config_key(largest) == config_key(CASES[CASE].config(quick=False))
    assert len(size_configs(SIZES[0], SIZES, CASES[CASE].full, replicates=4)) == 4

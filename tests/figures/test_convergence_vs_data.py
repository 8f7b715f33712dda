"""The consistency figure: its series are `verify.consistency`'s, on a tiny configuration (the
real sizes are the registered check mle_convergence.consistency-slope)."""

from __future__ import annotations

import numpy as np
import pytest

from figures import convergence_vs_data as cd
from verify.consistency import fitted_slope


@pytest.fixture(scope="module")
def data():
    return cd.compute(cd.Config(sizes=(8, 16, 32), steps=4, replicates=4))


def test_series_and_slope(data):
    result = data.result
    assert result.sizes == (8, 16, 32)
    assert [r.n_paths for r in result.results] == [8, 16, 32]
    assert [r.replicates for r in result.results] == [4, 2, 1]
    trained = data.series("trained_error")
    assert np.all(np.isfinite(trained)) and np.all(trained > 0)
    assert result.slope == pytest.approx(fitted_slope(data.sizes, trained), rel=1e-12)
    # se(N_max) is the unit: the MLE's own standard error there is 1
    assert data.series("mean_se")[-1] == pytest.approx(1.0, rel=1e-12)
    line = cd.reference_line(data)
    assert line[-1] == pytest.approx(1.0) and line[0] == pytest.approx(2.0)


def test_plot_and_caption(data):
    fig = cd.plot(data)
    (ax,) = fig.axes
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert len(ax.get_lines()) == 4
    assert f"slope {data.result.slope:+.3f}" in cd.caption(data)


def test_sizes_are_checked():
    from verify.consistency import consistency_of

    for bad in ((32, 16), (8, 12)):
        with pytest.raises(ValueError, match="sizes must be at least 2 increasing"):
            consistency_of(bad, steps=2)

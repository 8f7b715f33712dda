"""Seed 004 Fig. 4: the damping mu and the transition of the precision kernel."""

from __future__ import annotations

import numpy as np
import pytest

from figures import rfa_damping as fig


@pytest.fixture(scope="module")
def data():
    return fig.compute(fig.Config.quick())


def test_mu_sets_the_speed_of_the_transition(data):
    # V - beta halves every ln 2 / (2 mu): the measured halfway lag (a root search on the
    # closed form, xtol 1e-12) times 2 mu is ln 2 to round-off for every decay.
    decaying = [c for c in data.curves if c.mu > 0]
    assert decaying
    for c in decaying:
        assert 2 * c.mu * c.half_lag == pytest.approx(np.log(2.0), rel=1e-9)


def test_saturation_and_regimes(data):
    cfg = data.config
    for c in data.curves:
        if c.mu == 0:
            assert c.regime == "Brownian" and np.isnan(c.saturation_gap)
            # The variance grows without bound: the last lag is the largest.
            assert c.variance[-1] == pytest.approx(
                cfg.sigma2 * cfg.max_lag + cfg.eta2 + cfg.gamma2, rel=1e-12
            )
            continue
        # |B + log beta| = |log(1 + x)| <= |x| / (1 - |x|) with x = (alpha/beta) e^{-2 mu tau};
        # the slowest decay here has 2 mu tau_max = 4. Plus round-off of a log near 1 (1e-14).
        x = abs(c.alpha) / c.floor * np.exp(-2 * c.mu * cfg.max_lag)
        assert x < 1
        assert c.saturation_gap <= x / (1 - x) + 1e-14
        expected = "diffusive" if c.mu < cfg.critical_mu else "integrative"
        assert c.regime == expected


def test_brownian_precision_is_not_linear(data):
    # P_0 = 1/(s + c tau): at tau = s/c, where the tangent line reaches zero, it is P_0(0)/2.
    assert data.brownian_half == pytest.approx(0.5, abs=1e-12)
    assert data.continuity < 1e-5
    assert data.regime_form_error < 1e-12


def test_plot_and_caption(data):
    fig_ = fig.plot(data)
    assert len(fig_.axes) == 3
    text = fig.caption(data)
    assert "Paper:" in text and "Here:" in text and "disagree" in text
    assert f"{data.brownian_half:.3f}" in text
    for c in data.curves:
        if c.mu > 0:
            assert f"{c.mu:g}: {2 * c.mu * c.half_lag:.3f}" in text


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sigma2": 0.0}, "sigma2 > 0"),
        ({"mus": (0.1, 0.01)}, "increasing"),
        ({"eta2": 0.0, "gamma2": 0.0}, "zero-lag"),
        ({"n_lags": 2}, "n_lags"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fig.Config(**kwargs)

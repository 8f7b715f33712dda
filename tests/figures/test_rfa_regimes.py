"""Seed 004 Fig. 3: the regimes of RFA's lag kernel, the numbers its caption states."""

from __future__ import annotations

import numpy as np
import pytest

from figures import rfa_regimes as fig


@pytest.fixture(scope="module")
def data():
    return fig.compute(fig.Config.quick())


def test_regimes_close_and_open_the_gate(data):
    cfg = data.config
    assert [c.regime for c in data.curves] == ["diffusive"] * len(cfg.diffusive) + [
        "integrative"
    ] * len(cfg.integrative)
    for c in data.curves:
        # B(0) = -log(eta^2 + gamma^2) whatever the ratio: the zero-lag variance has no process
        # noise in it; the long-lag floor is beta.
        assert c.bias[0] == pytest.approx(-np.log(cfg.eta2 + cfg.gamma2), rel=1e-12)
        assert c.b == pytest.approx(cfg.gamma2 + c.sigma2_tilde, rel=1e-12)
        if c.regime == "diffusive":
            assert c.a < 0 and c.monotone == "falling" and c.gate_gain < 1
        else:
            assert c.a > 0 and c.monotone == "rising" and c.gate_gain > 1
        # 2 mu max_lag = 6: the gate is within |a|/b e^{-6} (relative) of its floor 1/beta.
        assert c.gate[-1] * c.b == pytest.approx(1.0, abs=abs(c.a) / c.b * np.exp(-5.9))


def test_regime_forms_match_eq9_and_the_torch_kernel(data):
    # log of O(1) numbers in float64: a few ulp; 1e-12 leaves ~4 digits of headroom.
    assert data.form_error < 1e-12
    assert data.kernel_error < 1e-12


def test_kernel_comparison_has_power(data):
    # The torch kernel read with sigma^2 where it needs sigma~^2 (steady_state=False) is a
    # different kernel; the same comparison must see it.
    import torch

    from kernels.ops.rfa.precision import rfa_lag_kernel

    cfg, c = data.config, data.curves[0]
    wrong = rfa_lag_kernel(
        torch.as_tensor(data.lags),
        decay=cfg.mu,
        process_var=c.sigma2_tilde,
        measurement_var=cfg.eta2,
        anchor_var=cfg.gamma2,
        steady_state=False,
    )
    assert np.abs(wrong.log_precision.numpy() - c.bias).max() > 1e-2


def test_alpha_beta_bound_fails_while_variance_stays_positive(data):
    # The paper's |alpha| <= beta (B.4.1) fails for integrative heads with small anchor noise;
    # the variance is monotone, so its minimum is min(V(0), V(last)) and positive.
    cfg = data.config
    violating = [c for c in data.curves if abs(c.a) > c.b]
    assert violating and all(c.regime == "integrative" for c in violating)
    assert data.max_alpha_over_beta > 1
    for c in data.curves:
        v0, v_last = cfg.eta2 + cfg.gamma2, 1.0 / c.gate[-1]
        assert c.min_variance == pytest.approx(min(v0, v_last), rel=1e-12)
        assert c.min_variance > 0


def test_plot_and_caption(data):
    fig_ = fig.plot(data)
    assert len(fig_.axes) == 4
    text = fig.caption(data)
    assert "Paper:" in text and "Here:" in text and "disagree" in text
    for c in data.curves:
        assert f"{c.gate_gain:.3g}" in text
    assert f"{data.form_error:.1e}" in text


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mu": 0.0}, "mu must be > 0"),
        ({"diffusive": (0.5,)}, "diffusive ratios"),
        ({"integrative": (1.5,)}, "integrative ratios"),
        ({"n_lags": 1}, "n_lags"),
    ],
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fig.Config(**kwargs)

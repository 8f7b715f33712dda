"""Seed 004 Fig. 1: pulled-forward ensembles at five targets, against their closed-form law."""

from __future__ import annotations

import numpy as np
import pytest

from estimators.closed_forms import measurement
from figures import rfa_ensemble as fig


@pytest.fixture(scope="module")
def data():
    return fig.compute(fig.Config.quick())


def test_transition_and_covariance_match_the_numeric_references():
    # Eigenbasis forms against expm and Van Loan, both signs of the lag (float64 round-off
    # of 2x2 products with entries up to e^{1.5}: 1e-10 is generous).
    A, Q, C, R = fig.system()
    dt = np.array([-15.0, -2.7, -0.075, 0.075, 3.0, 14.0])
    np.testing.assert_allclose(
        fig.transition(dt), measurement.measurement_transition(A, C, dt), rtol=0, atol=1e-10
    )
    np.testing.assert_allclose(
        fig.member_covariance(dt), measurement.measurement_covariance(A, Q, C, R, dt), rtol=1e-8
    )


def test_shapes_and_targets(data):
    M = data.t_obs.size
    assert data.z.shape == (M, 2) and data.x.shape == (data.t.size, 2)
    assert [round(t.time) for t in data.targets] == [1, 5, 10, 13, 15]
    for t in data.targets:
        assert t.ensemble.shape == (M - 1, 2) and t.lags.shape == (M - 1,)
        assert np.all(np.linalg.eigvalsh(t.ellipse) > 0)


def test_members_follow_the_propagated_covariance(data):
    # Each member is exactly N(x(t_i), V^C): E d2 = 2. The per-path means are independent
    # across paths, so (mean - 2)/se is asymptotically normal; P(|z| > 5) ~ 6e-7 per target.
    for t in data.targets:
        assert abs(t.d2_z) < 5.0, (t.time, t.d2_mean, t.d2_se)
        assert abs(t.coverage - fig.COVERAGE_2SIGMA) < 5.0 * t.coverage_se


def test_wrong_backward_covariance_is_rejected():
    # Negative control: judging the non-causal members with the causal (forward) formula,
    # i.e. ignoring the amplification of backward propagation, must fail the same 5-sigma test.
    cfg = fig.Config.quick()
    sim, _ = fig._monte_carlo(cfg)
    i = int(np.argmin(np.abs(sim.t_obs - 1.0)))
    dt, members = fig.pull_forward(sim.t_obs, sim.z, i)
    err = members - sim.x_obs[:, i, None]
    right = fig.mahalanobis(err, fig.member_covariance(dt)).mean(axis=1)
    wrong = fig.mahalanobis(err, fig.member_covariance(-np.abs(dt))).mean(axis=1)
    se = wrong.std(ddof=1) / np.sqrt(wrong.size)
    assert abs(right.mean() - 2.0) < 5.0 * right.std(ddof=1) / np.sqrt(right.size)
    assert (wrong.mean() - 2.0) / se > 5.0


def test_backward_propagation_amplifies(data):
    # The paper's claim, closed form and measured: non-causal members spread more than causal.
    both = [t for t in data.targets if np.isfinite(t.spread_noncausal)]
    assert len(both) == 4  # every target but the last has later measurements
    for t in both:
        assert t.predicted_noncausal > 2 * t.predicted_causal
        assert t.spread_noncausal > 2 * t.spread_causal


def test_paper_ellipse_understates_the_weighted_mean_error(data):
    # Our disagreement: the weighted mean's measured error is several times the ellipse
    # (sum P)^-1 (observed 7-70x). Negative control: the Kalman smoother's own posterior
    # trace predicts its measured MSE: the ratio MSE/trace has relative standard error
    # <= sqrt(2/P) = 0.08 at P = 300, so (0.5, 2) is > 6 sigma wide, while the ellipse's ratio
    # must exceed 3.
    for t in data.targets:
        assert t.understatement > 3.0
        assert 0.5 < t.smoother_mse / t.smoother_trace < 2.0
        assert t.mean_error_trace > t.smoother_mse  # nothing beats the smoother by much


def test_plot_and_caption(data):
    fig_ = fig.plot(data)
    assert len(fig_.axes) == 1 + len(data.targets)
    text = fig.caption(data)
    assert "Paper:" in text and "Here" in text and "disagree" in text
    for t in data.targets:
        assert f"{t.d2_mean:.3f}" in text and f"{t.understatement:.1f}" in text


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"n_paths": 1}, "n_paths"), ({"targets": (16.0,)}, "targets")]
)
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fig.Config(**kwargs)

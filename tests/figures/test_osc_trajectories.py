"""Seed 002 oscillator trajectories: the figure's compute at quick size, the numbers it states."""

from __future__ import annotations

import numpy as np
import pytest

from figures import osc_trajectories as fig


@pytest.fixture(scope="module")
def data():
    return fig.compute(fig.Config.quick())


def test_closed_form_and_kernel_match_the_ode_in_every_regime(data):
    assert [p.variant for p in data.panels] == list(fig.VARIANTS)
    assert [round(p.zeta, 12) for p in data.panels] == [0.1, 1.0, 3.0]
    for p in data.panels:
        assert p.closed.shape == p.kernel.shape == p.t.shape
        assert p.ode.shape == p.t_ode.shape == p.t[:: p.every].shape
        # The ODE reference runs at rtol 1e-12 on keys of size O(1) over 10 time units: its
        # own error is ~1e-11 at most, so 1e-9 is the reference's accuracy with margin; the
        # closed forms are accurate to a few eps.
        assert p.closed_error < 1e-9 and p.kernel_error < 1e-9
        np.testing.assert_allclose(p.kernel, p.closed, rtol=0, atol=1e-12)


def test_printed_overdamped_coefficients_disagree(data):
    # The caption's disagreement: the printed U, V of A.5.4 do not start the key from rest,
    # an O(x_ss(0)) error (x_ss(0) ~ 0.1 here), far above the 1e-9 the correct routes meet.
    over = data.panels[-1]
    assert over.printed is not None and data.panels[0].printed is None
    assert over.printed_error > 1e-3
    # Wrong already at s = 0: U + V = -(gamma/sigma) x_ss(0) instead of -x_ss(0), an error of
    # (gamma/sigma - 1) |x_ss(0)| = 0.06 x 0.011 = 6.5e-4 here, >> the 1e-9 above.
    assert abs(over.printed[0] - over.ode[0]) > 1e-4


def test_simulated_mean_matches_the_closed_form_law(data):
    # Each point is a mean over independent paths (asymptotically normal): |z| > 5 at any of
    # the ~1000 points per regime has probability ~6e-4 in all.
    for p in data.panels:
        assert p.mc_mean.shape == p.law_mean.shape == p.t_sim.shape
        assert p.max_abs_z < fig.SIGMA_LEVEL
        assert np.all(p.law_sd[1:] > 0)


def test_caption_states_the_measured_numbers(data):
    text = fig.caption(data)
    assert f"{data.panels[-1].printed_error:.3f}" in text
    assert f"closed {data.panels[0].closed_error:.1e}" in text
    assert "paper" in text.lower() and "here" in text.lower()

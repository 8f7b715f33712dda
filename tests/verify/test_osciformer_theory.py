"""Negative control of `osciformer_theory.logistic-r357-chaotic`: the same criterion rejects a map in
the period-doubling cascade (r = 3.56, lambda = -0.077) and accepts r = 4 (lambda = ln 2)."""

from verify.checks.osciformer_theory import chaos_margin


def test_chaos_criterion_rejects_a_periodic_map():
    assert chaos_margin(3.56, 20_000).residual > 0.05


def test_chaos_criterion_accepts_r_4():
    assert chaos_margin(4.0, 20_000).residual < -0.5

"""Negative controls of registered checks whose residual is a random or estimated quantity:
the same criterion, fed a case where the claim is false, must reject it."""

import numpy as np

from verify.checks.osciformer_theory import chaos_margin
from verify.checks.radial_tangential import C7_RATIOS, c7_magnitudes, m2_spread


def test_chaos_criterion_rejects_a_periodic_map():
    """`osciformer_theory.logistic-r357-chaotic` on r = 3.56 (period-doubling, lambda = -0.077)."""
    assert chaos_margin(3.56, 20_000).residual > 0.05


def test_chaos_criterion_accepts_r_4():
    assert chaos_margin(4.0, 20_000).residual < -0.5


def test_m2_spread_bound_rejects_radial_noise():
    """`radial_tangential.c6-deterministic-m2`'s bound (1e-2) on sigma_r = 0.3: m^2 is random
    then, and its spread (~0.4 of m0^2) does not shrink with the step."""
    assert m2_spread(0.3, 250) > 0.1
    assert m2_spread(0.3, 2000) > 0.1


def test_c7_criterion_rejects_a_wrong_tangential_noise():
    """`radial_tangential.c7-validity-regime`'s bound (1e-2, Euler vs the exact m(T)) on paths
    simulated with sigma_t = 0.6 instead of 0.5: the Ito term (d - 1) sigma_t^2 shifts m(T) by
    ~20% at 0.3 m_star, which the bound must catch."""
    exact, euler, _ = c7_magnitudes(C7_RATIOS, 1000, sigma_t=0.6)
    assert np.max(np.abs(euler / exact - 1)) > 0.1

"""Negative controls of registered checks whose residual is a random or estimated quantity:
the same criterion, fed a case where the claim is false, must reject it."""

from verify.checks.osciformer_theory import chaos_margin
from verify.checks.radial_tangential import m2_spread


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


def _kla_attention_case():
    import numpy as np

    from estimators.closed_forms import kla
    from estimators.scan import kla_filter
    from verify.checks.kla import paper_attention_matrix

    rng = np.random.default_rng(0)
    T, n = 12, 3
    a_bar, p_bar = kla.ou_discretisation(rng.uniform(0.2, 2.0, n), rng.uniform(0.1, 2.0, n), 0.3)
    k, v, q = (rng.uniform(-1.5, 1.5, (T, n)) for _ in range(3))
    lam_v = np.exp(rng.uniform(-2.0, 1.5, (T, n)))
    ref = kla_filter(k, lam_v, v, a_bar, p_bar, q=q, lam0=1.0, eta0=0.0)
    M = paper_attention_matrix(a_bar, p_bar, k, lam_v, q, ref.precision, np.ones(n))
    return M, v, ref.output


def test_kla_attention_matrix_rejects_perturbed_weights():
    """`kla.c14-attention-matrix`'s criterion (tolerance 1e-11): the exact matrix passes; one
    entry off by a relative 1e-6, or one weight on a future token, fails."""
    from verify.checks.kla import attention_residual
    from verify.registry import select

    tolerance = next(c for c in select() if c.id == "kla.c14-attention-matrix").tolerance
    M, v, y = _kla_attention_case()
    assert attention_residual(M, v, y) < tolerance
    scaled = M.copy()
    scaled[1, 7, 3] *= 1.0 + 1e-6
    assert attention_residual(scaled, v, y) > 1e3 * tolerance
    future = M.copy()
    future[0, 4, 9] = 1e-6 * abs(M).max()
    assert attention_residual(future, v, y) > 1e3 * tolerance

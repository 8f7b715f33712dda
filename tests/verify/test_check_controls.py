"""Negative controls of registered checks whose residual is a random or estimated quantity:
the same criterion, fed a case where the claim is false, must reject it."""

import numpy as np
import torch

from verify.checks.osciformer_theory import chaos_margin
from verify.checks.radial_tangential import C7_RATIOS, c7_magnitudes, m2_spread
from verify.checks.rfa_extensions import c5_scores, factorised_decay_fp32


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


def test_c5_criterion_rejects_parts_of_the_full_variance():
    """`rfa_extensions.c5-circular-sampling` (5 sigma) on parts drawn with variance Lambda_total
    instead of Lambda_total / 2: E|eps|^2 doubles."""
    assert np.max(np.abs(c5_scores(20_000, part_variance=1.0))) > 50


def test_p22_factorised_decay_is_exact_below_the_onset():
    """The overflow demo's factorised kernel is the decay itself where it is finite (so the
    check measures overflow, not a wrong kernel): mu = 0.1 and T = 800 < 888."""
    got = factorised_decay_fp32([0.1], 800)[0].double()
    lag = torch.arange(800.0)[:, None] - torch.arange(800.0)[None, :]
    want = torch.where(lag >= 0, torch.exp(-0.1 * lag.double()), torch.zeros(()))
    assert torch.isfinite(got).all()
    assert (got - want).abs().max() < 1e-4


def test_kernel_quadrature_check_rejects_a_wrong_kernel(monkeypatch):
    """`oscillator.kernels-52-61-vs-quadrature` (1e-9) when (53) loses its ``+ lambda`` term."""
    from verify.checks import oscillator

    printed_s = oscillator._printed_s

    def broken_s(g, lam, delta):
        return printed_s(g, lam, delta) - lam / (g**2 + lam**2)

    assert oscillator._kernels_vs_quadrature(True).residual < 1e-9
    monkeypatch.setattr(oscillator, "_printed_s", broken_s)
    assert oscillator._kernels_vs_quadrature(True).residual > 1e-2


def test_corollary1_bounds_fail_without_its_choice_of_damping():
    """`osciformer_theory.cor1-damped-bank` (ratios <= 1) on a bank damped by 0.5 per mode,
    far beyond the corollary's gammabar: the keys leave the eps = 0.1 tube."""
    from verify.checks.osciformer_theory import corollary1_ratios

    assert corollary1_ratios(np.random.default_rng(56), 0.1)[0] < 1
    assert corollary1_ratios(np.random.default_rng(56), 0.1, damping=0.5)[0] > 1


def test_table3_matrix_objective_matches_the_update_with_one_key_slot():
    """`kla.printed-table3-matrix-objective` compares the right things: with d_k = 1 the matrix
    objective has no coupling and its argmin is the printed update to round-off."""
    from verify.checks.kla import _table3_update

    rng = np.random.default_rng(0)
    s_prev, k, v = rng.normal(size=(1, 3)), rng.normal(size=1), rng.normal(size=3)
    gram = 0.7 + 1.3 * k[0] ** 2
    argmin = (0.7 * 0.9 * s_prev + 1.3 * np.outer(k, v)) / gram
    np.testing.assert_allclose(_table3_update(0.9, s_prev, k, v, 0.7, 1.3), argmin, rtol=1e-13)


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


def test_backward_sampling_criterion_rejects_independent_marginals():
    """`generative.rts-backward-sampling` (5 sigma) on draws from each step's smoother marginal
    alone: the marginals are right, the lag-one cross-covariances are zero instead of J P^s."""
    from verify.checks.generative import backward_sampling_scores

    assert np.max(np.abs(backward_sampling_scores(20_000, independent=True))) > 20

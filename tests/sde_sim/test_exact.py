"""Exact discretisation: the Van Loan transition against quadrature, and the sampler's law."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.linalg import expm
from scipy.special import roots_legendre

from sde_sim import BrownianPath, LinearSDE, TimeGrid, linear_transition, presets, simulate_exact
from sde_sim.exact import ou_variance_factor
from tests.sde_sim.reference import SIGMA, euler_moments, whitened_scores
from tests.strategies import stable_linear_sdes


@given(stable_linear_sdes(), st.floats(0.01, 3.0))
def test_van_loan_transition_equals_quadrature(sde, h):
    Phi, offset, Qd = (m[0] for m in linear_transition(sde, h))
    np.testing.assert_allclose(Phi, expm(sde.A * h), rtol=1e-12, atol=1e-14)
    # 80-node Gauss-Legendre: exact for polynomials of degree 159, and the integrands are
    # entire with |A| h < 30, so the truncation error is far below round-off.
    nodes, weights = roots_legendre(80)
    s = 0.5 * h * (nodes + 1.0)
    E = expm(sde.A * s[:, None, None])
    quad_Q = 0.5 * h * np.einsum("k,kij,jl,kml->im", weights, E, sde.Q, E)
    quad_u = 0.5 * h * np.einsum("k,kij,j->i", weights, E, sde.u)
    scale = max(1.0, np.abs(quad_Q).max())
    np.testing.assert_allclose(Qd, quad_Q, rtol=1e-9, atol=1e-11 * scale)
    np.testing.assert_allclose(offset, quad_u, rtol=1e-9, atol=1e-11 * max(1, np.abs(quad_u).max()))


@given(stable_linear_sdes(), st.floats(0.01, 2.0), st.floats(0.01, 2.0))
def test_transition_composes_over_consecutive_steps(sde, h1, h2):
    # Chapman-Kolmogorov: Q_d(h1+h2) = Phi(h2) Q_d(h1) Phi(h2)^T + Q_d(h2).
    t1, t2, t12 = (linear_transition(sde, h) for h in (h1, h2, h1 + h2))
    composed = t2.Phi[0] @ t1.Qd[0] @ t2.Phi[0].T + t2.Qd[0]
    np.testing.assert_allclose(t12.Qd[0], composed, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        t12.offset[0], t2.Phi[0] @ t1.offset[0] + t2.offset[0], rtol=1e-9, atol=1e-12
    )


def test_ou_variance_factor_is_stable_near_zero_rate():
    h = 0.7
    for mu in (1e-3, 1e-9, 1e-15):
        # Taylor series of (1 - e^{-2 mu h}) / (2 mu), truncated after O((mu h)^3) relative.
        exact = h - mu * h**2 + 2 * mu**2 * h**3 / 3 - mu**3 * h**4 / 3
        assert ou_variance_factor(mu, h) == pytest.approx(exact, rel=1e-12)
    assert ou_variance_factor(0.0, h) == h
    assert ou_variance_factor(2.0, h) == pytest.approx((1 - np.exp(-4 * h)) / 4, rel=1e-14)


def _transition_residuals(sde, method, *, h, skip, n, paths=10_000, seed=0):
    """Residuals of ``x(t_a + n h)`` against the exact (or Euler) mean map from ``x(t_a)``."""
    grid = TimeGrid.uniform(h, skip + n)
    x0 = np.random.default_rng(seed).normal(size=(paths, sde.dim)) * 3.0
    x = method(sde, x0, BrownianPath(seed + 1, grid, paths, sde.noise_dim))
    return x[:, skip], x[:, skip + n]


@pytest.mark.parametrize(("name", "variant"), [("afa-2d", "b"), ("rotation-3d", None)])
def test_exact_sampler_transition_law_matches_van_loan(name, variant):
    sde = presets.get(name).scenario(variant).system
    h, n = 0.05, 8
    xa, xb = _transition_residuals(sde, simulate_exact, h=h, skip=3, n=n)
    Phi, offset, Qd = (m[0] for m in linear_transition(sde, n * h))
    scores = whitened_scores(xb - xa @ Phi.T - offset, Qd)
    assert np.max(np.abs(scores)) < SIGMA, scores


@settings(max_examples=8)
@given(stable_linear_sdes())
def test_exact_sampler_law_for_random_stable_systems(sde):
    h, n = 0.1, 5
    xa, xb = _transition_residuals(sde, simulate_exact, h=h, skip=2, n=n)
    Phi, offset, Qd = (m[0] for m in linear_transition(sde, n * h))
    scores = whitened_scores(xb - xa @ Phi.T - offset, Qd)
    assert np.max(np.abs(scores)) < SIGMA, scores


def test_exact_and_euler_laws_are_told_apart_at_a_coarse_step():
    # Power of the statistic: at h = 0.1 over 20 steps, Euler's (I + A h)^n differs from e^{AD}
    # by ~10% for afa-2d; the exact law must be rejected for Euler samples and accepted for its
    # own, so the 5-sigma band of the other tests is not vacuous.
    sde = presets.get("afa-2d").scenario("b").system
    h, n = 0.1, 20
    Phi, offset, Qd = (m[0] for m in linear_transition(sde, n * h))
    from sde_sim import simulate_euler

    for method, should_pass in ((simulate_exact, True), (simulate_euler, False)):
        xa, xb = _transition_residuals(sde, method, h=h, skip=0, n=n)
        worst = np.max(np.abs(whitened_scores(xb - xa @ Phi.T - offset, Qd)))
        assert (worst < SIGMA) == should_pass, (method.__name__, worst)
    M, c, S = euler_moments(sde.A, sde.G, sde.u, h, n)
    assert not np.allclose(M, Phi, rtol=0.05)


def test_irregular_grid_uses_each_steps_own_transition():
    # Deterministic check: with zero noise, the exact sampler on any grid hits e^{A t} x0.
    sde = LinearSDE(np.array([[-0.3, -2.0], [1.5, -0.1]]), np.zeros((2, 1)), [0.2, -0.1])
    times = np.concatenate([[0.0], np.sort(np.random.default_rng(3).uniform(0, 4, 37)), [4.0]])
    grid = TimeGrid.from_times(times)
    x0 = np.array([[1.0, -2.0]])
    x = simulate_exact(sde, x0, BrownianPath(0, grid, 1, 2))
    for k in (5, 20, len(times) - 1):
        Phi, offset, _ = (m[0] for m in linear_transition(sde, times[k]))
        np.testing.assert_allclose(x[0, k], Phi @ x0[0] + offset, rtol=1e-11, atol=1e-12)

"""Radial-tangential SDE: the magnitude's second moment, the two readings, measurement noise.

Seed 003 digest: for the literal SDE ``d(m^2) = (-2 mu_r m^2 + sigma_r^2 + (d-1) sigma_t^2) dt
+ 2 sigma_r m dw_r``, so ``E m^2(t) = m_inf^2 + (m0^2 - m_inf^2) e^{-2 mu_r t}`` with
``m_inf^2 = (sigma_r^2 + (d-1) sigma_t^2) / (2 mu_r)`` (C5); in the frozen-frame reading the
tangential spread is ``sigma_t^2 phi(mu_t, t)`` per tangent direction (C17).
"""

import numpy as np
import pytest

from sde_sim import (
    BrownianPath,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    TimeGrid,
    simulate_euler,
    simulate_exact,
)
from sde_sim.exact import ou_variance_factor
from sde_sim.models import radial_tangential_split, rotation_generator, skew_from_vector
from tests.sde_sim.reference import SIGMA, whitened_scores

MU_R, SIGMA_R, SIGMA_T, M0 = 0.3, 0.4, 0.5, 10.0


def m2_formula(d, t, mu_r=MU_R, sigma_r=SIGMA_R, sigma_t=SIGMA_T, m0=M0):
    m_inf2 = (sigma_r**2 + (d - 1) * sigma_t**2) / (2 * mu_r)
    return m_inf2 + (m0**2 - m_inf2) * np.exp(-2 * mu_r * t)


def euler_m2(d, h, n, rotation_sq, mu_r=MU_R, sigma_r=SIGMA_R, sigma_t=SIGMA_T, m0=M0):
    """E m^2 after each of n Euler steps when |Omega x|^2 = rotation_sq |x|^2 (exact then).

    One step: |x + (-mu_r x + Omega x) h|^2 = ((1 - mu_r h)^2 + h^2 |Omega x|^2/|x|^2) |x|^2
    (x . Omega x = 0), plus E|G dW|^2 = h (sigma_r^2 + (d-1) sigma_t^2).
    """
    out, m2 = [], m0**2
    for _ in range(n):
        m2 = ((1 - mu_r * h) ** 2 + rotation_sq * h**2) * m2 + h * (
            sigma_r**2 + (d - 1) * sigma_t**2
        )
        out.append(m2)
    return np.array(out)


def _rt(d, Omega, mode="literal", mu_t=MU_R):
    return RadialTangentialSDE(
        Omega, mu_r=MU_R, mu_t=mu_t, sigma_r=SIGMA_R, sigma_t=SIGMA_T, mode=mode
    )


def _paths(sde, h, n, paths, seed, method=simulate_euler, x0=None):
    if x0 is None:
        x0 = np.zeros((paths, sde.dim))
        x0[:, 0] = M0
    grid = TimeGrid.uniform(h, n)
    return method(sde, x0, BrownianPath(seed, grid, paths, sde.dim))


@pytest.mark.parametrize(
    ("d", "Omega", "rotation_sq"),
    [(2, rotation_generator([1.0]), 1.0), (3, np.zeros((3, 3)), 0.0)],
    ids=["2d-rotating", "3d-pure-tangential"],
)
def test_literal_magnitude_second_moment(d, Omega, rotation_sq):
    h, n, paths = 1e-3, 1000, 4000
    x = _paths(_rt(d, Omega), h, n, paths, seed=d)
    m2 = np.sum(x**2, axis=-1)
    checkpoints = [99, 499, 999]
    predicted = euler_m2(d, h, n, rotation_sq)[checkpoints]
    sample = m2[:, [k + 1 for k in checkpoints]]
    stderr = sample.std(axis=0, ddof=1) / np.sqrt(paths)
    # Monte Carlo against the exact law of the Euler recursion (tight)...
    assert np.all(np.abs(sample.mean(axis=0) - predicted) < SIGMA * stderr)
    # ...and against the continuous-time formula, allowing only Euler's bias, which the
    # recursion gives exactly (O(h), under 0.1% here; its rate is checked below).
    t = h * (np.array(checkpoints) + 1)
    bias = predicted - m2_formula(d, t)
    assert np.all(np.abs(bias) < 1e-3 * predicted)
    assert np.all(np.abs(sample.mean(axis=0) - m2_formula(d, t)) < SIGMA * stderr + np.abs(bias))


def test_tangential_noise_drives_the_magnitude_even_without_radial_noise():
    # Seed 000 section 5.1 computes d<x,x> = sigma_r^2 dt (it drops tr P_T = d-1), so it
    # predicts dm = alpha m dt + sigma_r dw_r and, with sigma_r = 0, E m^2 = m0^2 e^{-2 mu_r t}.
    # The correct quadratic variation adds (d-1) sigma_t^2 (seed 003 digest C3, C5). With
    # sigma_r = 0 the magnitude is nearly deterministic, so the data tell the two apart sharply.
    d, h, n, paths, m0 = 3, 1e-3, 1000, 2000, 1.0
    sde = RadialTangentialSDE(np.zeros((3, 3)), mu_r=MU_R, mu_t=MU_R, sigma_r=0.0, sigma_t=SIGMA_T)
    x0 = np.tile([m0, 0.0, 0.0], (paths, 1))
    m2 = np.sum(_paths(sde, h, n, paths, seed=4, x0=x0)[:, -1] ** 2, axis=-1)
    stderr = m2.std(ddof=1) / np.sqrt(paths)
    predicted = euler_m2(d, h, n, 0.0, sigma_r=0.0, m0=m0)[-1]
    assert abs(m2.mean() - predicted) < SIGMA * stderr
    assert abs(predicted - m2_formula(d, 1.0, sigma_r=0.0, m0=m0)) < 1e-3
    seed000 = m0**2 * np.exp(-2 * MU_R * 1.0)
    assert abs(m2.mean() - seed000) > 100 * SIGMA * stderr


def test_literal_magnitude_in_3d_with_rotation_lies_between_the_euler_bounds():
    # In 3-D, |Omega x|^2 = |w|^2 |x|^2 - (w.x)^2 lies in [0, |w|^2 |x|^2]: Euler's E m^2 lies
    # between the recursions with rotation_sq = 0 and |w|^2.
    w = np.array([0.3, -0.6, 0.9])
    h, n, paths = 1e-3, 1000, 4000
    x = _paths(_rt(3, skew_from_vector(w)), h, n, paths, seed=11)
    m2 = np.sum(x[:, -1] ** 2, axis=-1)
    stderr = m2.std(ddof=1) / np.sqrt(paths)
    low, high = euler_m2(3, h, n, 0.0)[-1], euler_m2(3, h, n, w @ w)[-1]
    assert low - SIGMA * stderr < m2.mean() < high + SIGMA * stderr
    assert abs(m2_formula(3, 1.0) - m2.mean()) < SIGMA * stderr + (high - low)


def test_euler_magnitude_recursion_converges_to_the_formula_at_rate_h():
    t_end = 1.0
    gaps = [
        abs(euler_m2(3, h, round(t_end / h), 1.0)[-1] - m2_formula(3, t_end))
        for h in (1e-2, 1e-3, 1e-4)
    ]
    ratios = np.array(gaps[:-1]) / np.array(gaps[1:])
    np.testing.assert_allclose(ratios, 10.0, rtol=0.05)


def test_mu_t_has_no_effect_in_the_literal_reading():
    Omega = skew_from_vector([0.0, 0.0, 0.7])
    a = _paths(_rt(3, Omega, mu_t=0.0), 1e-2, 200, 50, seed=1)
    b = _paths(_rt(3, Omega, mu_t=2.0), 1e-2, 200, 50, seed=1)
    np.testing.assert_array_equal(a, b)


def _tangential_variance(x, sde, t, x0):
    """Per-direction variance of the state's tangential part in the co-rotating frame."""
    from scipy.linalg import expm

    y = x @ expm(-sde.Omega * t).T
    u0 = x0 / np.linalg.norm(x0, axis=1, keepdims=True)
    _, tangential = radial_tangential_split(u0, y)
    return np.sum(tangential**2, axis=1).mean() / (sde.dim - 1)


@pytest.mark.parametrize("mu_t", [0.0, 2.0])
@pytest.mark.parametrize("method", [simulate_exact, simulate_euler], ids=["exact", "euler"])
def test_frozen_frame_tangential_spread_follows_phi_mu_t(mu_t, method):
    # Exact sampler: exact at any h. Euler at h = 1e-3: its relative bias is O(h (|w|^2 +
    # mu_t^2) t) ~ 0.5%, under a third of the 1.6% relative standard error at 4000 paths.
    sde = _rt(3, skew_from_vector([0.0, 0.3, 0.6]), mode="frozen-frame", mu_t=mu_t)
    h, n, paths = 1e-3, 1000, 4000
    x0 = np.tile([M0, 0.0, 0.0], (paths, 1))
    x = _paths(sde, h, n, paths, seed=5, method=method, x0=x0)
    measured = _tangential_variance(x[:, -1], sde, 1.0, x0)
    expected = SIGMA_T**2 * ou_variance_factor(mu_t, 1.0)
    # |y_T|^2 / v ~ chi^2 with d-1 = 2 degrees of freedom: the mean over N paths, divided by
    # d-1, has standard deviation v sqrt(2 / ((d-1) N)).
    stderr = expected * np.sqrt(2.0 / (2 * paths))
    assert abs(measured - expected) < SIGMA * stderr, (measured, expected)


def test_frozen_frame_radial_part_is_an_ou_process():
    sde = _rt(3, skew_from_vector([0.0, 0.3, 0.6]), mode="frozen-frame", mu_t=2.0)
    paths = 20_000
    x0 = np.tile([M0, 0.0, 0.0], (paths, 1))
    x = _paths(sde, 0.05, 20, paths, seed=6, method=simulate_exact, x0=x0)
    from scipy.linalg import expm

    radial = (x[:, -1] @ expm(-sde.Omega * 1.0).T)[:, 0]
    mean, var = M0 * np.exp(-MU_R), SIGMA_R**2 * ou_variance_factor(MU_R, 1.0)
    scores = whitened_scores((radial - mean)[:, None], np.array([[var]]))
    assert np.max(np.abs(scores)) < SIGMA


def test_rt_additive_measurement_noise_is_radial_plus_tangential():
    meas = RadialTangentialMeasurement(eta_r=0.3, eta_t=0.05)
    n = 20_000
    x = np.tile([2.0, -1.0, 0.5], (n, 1))
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    z = meas.observe(x, u, np.random.default_rng(0).normal(size=(n, 3)))
    P_R = np.outer(u[0], u[0])
    cov = 0.3**2 * P_R + 0.05**2 * (np.eye(3) - P_R)
    assert np.max(np.abs(whitened_scores(z - x, cov))) < SIGMA


def test_rt_errors():
    sde = _rt(3, np.zeros((3, 3)), mode="frozen-frame")
    grid = TimeGrid.uniform(0.1, 3)
    with pytest.raises(ValueError, match="x0 must be nonzero"):
        simulate_euler(sde, np.zeros((2, 3)), BrownianPath(0, grid, 2, 3))
    with pytest.raises(ValueError, match="literal radial-tangential SDE has state-dependent"):
        simulate_exact(sde.with_mode("literal"), np.ones((2, 3)), BrownianPath(0, grid, 2, 3))

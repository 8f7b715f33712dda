"""KLA closed forms: shapes, limits, properties and bad input (the registry checks the math)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from estimators.closed_forms import kla

# Subnormal inputs are excluded: relative accuracy is lost there (a_bar^2 phi underflows).
A_BAR = st.floats(0.05, 1.0)
P_BAR = st.floats(0.0, 5.0, allow_subnormal=False)
PHI = st.floats(0.0, 20.0, allow_subnormal=False)
LAM = st.floats(0.0, 50.0, allow_subnormal=False)


def _random_matrices(seed, n):
    rng = np.random.default_rng(seed)
    a_bar = rng.uniform(0.1, 1.0, n)
    p_bar = rng.uniform(0.0, 2.0, n)
    phi = rng.uniform(0.0, 5.0, n)
    return kla.mobius_matrix(a_bar, p_bar, phi)


# --- OU discretisation ----------------------------------------------------------------------------


def test_ou_discretisation_broadcasts_over_slots_and_channels():
    a = np.array([[0.5, 1.0, 2.0], [4.0, 0.1, 0.0]])  # (N, D) = (2, 3), one a = 0 channel
    a_bar, p_bar = kla.ou_discretisation(a, 0.3, np.array([0.01, 0.1, 1.0]))
    assert a_bar.shape == p_bar.shape == (2, 3)
    np.testing.assert_allclose(a_bar, np.exp(-a * [0.01, 0.1, 1.0]))
    np.testing.assert_allclose(p_bar[0, 1], 0.09 / 2.0 * (1 - np.exp(-0.2)))
    assert (a_bar[1, 2], p_bar[1, 2]) == (1.0, 0.09)  # a = 0: Brownian limit p^2 dt


def test_ou_small_rate_is_continuous_with_the_brownian_limit():
    p_bar = kla.ou_discretisation(np.array([0.0, 1e-300, 1e-12]), 2.0, 0.5).p_bar
    np.testing.assert_allclose(p_bar, 2.0, rtol=1e-11)


def test_ou_zero_step_is_the_identity_law():
    a_bar, p_bar = kla.ou_discretisation(1.5, 0.7, 0.0)
    assert (float(a_bar), float(p_bar)) == (1.0, 0.0)


@given(st.floats(1e-3, 10.0), st.floats(-3.0, 3.0), st.floats(1e-4, 5.0))
def test_ou_step_preserves_the_stationary_variance(a, p, dt):
    # P -> a_bar^2 P + p_bar fixes p^2 / (2a): the prior is stationary under eq. (8)
    a_bar, p_bar = kla.ou_discretisation(a, p, dt)
    stationary = kla.ou_stationary_variance(a, p)
    np.testing.assert_allclose(a_bar**2 * stationary + p_bar, stationary, rtol=1e-12, atol=1e-300)


@given(st.floats(1e-3, 10.0), st.floats(0.1, 3.0), st.floats(1e-3, 2.0), st.floats(1e-3, 2.0))
def test_ou_steps_compose(a, p, s, t):
    # the law over s + t is the law over s followed by the law over t (Chapman-Kolmogorov)
    a_s, p_s = kla.ou_discretisation(a, p, s)
    a_t, p_t = kla.ou_discretisation(a, p, t)
    a_st, p_st = kla.ou_discretisation(a, p, s + t)
    np.testing.assert_allclose(a_st, a_s * a_t, rtol=1e-13)
    np.testing.assert_allclose(p_st, a_t**2 * p_s + p_t, rtol=1e-12)


# --- Moebius precision step -----------------------------------------------------------------------


def test_token_evidence_shapes_follow_state_expansion():
    T, N, D, P = 5, 3, 4, 2
    rng = np.random.default_rng(0)
    k = rng.normal(size=(T, N, 1))
    lam_v = rng.uniform(0.5, 2.0, (T, 1, D))
    v = rng.normal(size=(P, T, 1, D))
    phi, b = kla.token_evidence(k, lam_v, v)
    assert phi.shape == (T, N, D)  # shared by every value sequence
    assert b.shape == (P, T, N, D)
    np.testing.assert_allclose(phi, k**2 * lam_v)
    np.testing.assert_allclose(b, k * lam_v * v)


def test_mobius_matrix_shape_and_entries():
    phi = np.arange(24.0).reshape(2, 3, 4)  # (T, N, D)
    M = kla.mobius_matrix(0.9, 0.2, phi)
    assert M.shape == (2, 3, 4, 2, 2)
    np.testing.assert_allclose(M[1, 2, 3], [[1 + 0.2 * 23, 0.81 * 23], [0.2, 0.81]])
    np.testing.assert_allclose(np.linalg.det(M), 0.81)


@given(A_BAR, P_BAR, PHI, LAM)
def test_mobius_form_equals_predict_update_and_is_capped(a_bar, p_bar, phi, lam):
    M = kla.mobius_matrix(a_bar, p_bar, phi)
    step = kla.precision_step(lam, a_bar, p_bar, phi)
    np.testing.assert_allclose(kla.mobius_apply(M, lam), step, rtol=1e-13)
    np.testing.assert_allclose(np.linalg.det(M), a_bar**2, rtol=1e-12)
    assert step >= phi
    if p_bar > 0:
        # process noise caps the precision: lam_t < 1/p_bar + phi (digest C11)
        assert step <= 1 / p_bar + phi
    np.testing.assert_allclose(step, kla.prior_precision(lam, a_bar, p_bar) + phi, rtol=1e-15)


@given(st.integers(0, 2**32 - 1))
def test_mobius_composition_is_associative_with_identity(seed):
    A, B, C = _random_matrices(seed, 3)
    left = kla.mobius_compose(kla.mobius_compose(A, B), C)
    right = kla.mobius_compose(A, kla.mobius_compose(B, C))
    np.testing.assert_allclose(left, right, rtol=1e-13)
    np.testing.assert_array_equal(kla.mobius_compose(kla.MOBIUS_IDENTITY, A), A)
    np.testing.assert_array_equal(kla.mobius_compose(A, kla.MOBIUS_IDENTITY), A)
    lam = np.random.default_rng(seed).uniform(0.0, 10.0)
    np.testing.assert_allclose(
        kla.mobius_apply(kla.mobius_compose(A, B), lam),
        kla.mobius_apply(A, kla.mobius_apply(B, lam)),
        rtol=1e-13,
    )


def test_trace_normalisation_keeps_the_map():
    M = _random_matrices(1, 8)
    products = kla.mobius_compose(M[1:], M[:-1])
    normed = kla.mobius_compose(M[1:], M[:-1], normalise=True)
    np.testing.assert_allclose(np.trace(normed, axis1=-2, axis2=-1), 1.0)
    lam = np.linspace(0.0, 5.0, 7)
    np.testing.assert_allclose(
        kla.mobius_apply(normed, lam), kla.mobius_apply(products, lam), rtol=1e-14
    )


@given(A_BAR, st.floats(1e-3, 5.0), PHI)
def test_steady_state_is_an_attractive_fixed_point(a_bar, p_bar, phi):
    lam_star = kla.steady_state_precision(a_bar, p_bar, phi)
    assert lam_star >= 0
    np.testing.assert_allclose(
        kla.precision_step(lam_star, a_bar, p_bar, phi), lam_star, rtol=1e-12, atol=1e-300
    )
    M = kla.mobius_matrix(a_bar, p_bar, phi)
    # slope det M / (p_bar lam* + a_bar^2)^2 < 1 at the attractive root (<= 1 when it is double)
    assert a_bar**2 / (p_bar * lam_star + a_bar**2) ** 2 <= 1 + 1e-12
    for start in (0.0, 0.1 * lam_star, 10 * lam_star + 1):  # both sides of lam*
        lam = start
        for _ in range(8):
            lam_next = kla.precision_step(lam, a_bar, p_bar, phi)
            assert abs(lam_next - lam_star) <= abs(lam - lam_star) * (1 + 1e-12) + 1e-12
            lam = lam_next
        np.testing.assert_allclose(lam, kla.mobius_apply(np.linalg.matrix_power(M, 8), start))


def test_steady_state_limits():
    a, p, dt = np.array([0.5, 2.0]), np.array([1.0, 0.3]), 0.1
    a_bar, p_bar = kla.ou_discretisation(a, p, dt)
    # no tokens: the stationary precision 2a/p^2 of the prior
    np.testing.assert_allclose(kla.steady_state_precision(a_bar, p_bar, 0.0), 2 * a / p**2)
    # no process noise: unbounded for a_bar <= 1, affine fixed point for a_bar > 1
    lam = kla.steady_state_precision([0.9, 1.0, 1.2], 0.0, [1.0, 1.0, 0.44])
    assert np.isinf(lam[0]) and np.isinf(lam[1])
    np.testing.assert_allclose(lam[2], 1.44 * 0.44 / 0.44)
    # a_bar > 1 with p_bar > 0 takes the cancellation-free branch
    lam = kla.steady_state_precision(1.5, 1e-3, 2.0)
    np.testing.assert_allclose(kla.precision_step(lam, 1.5, 1e-3, 2.0), lam, rtol=1e-13)


# --- affine mean step -----------------------------------------------------------------------------


def test_affine_map_shapes_and_gate():
    lam_prev = np.full((3, 4), 2.0)  # (N, D)
    b = np.ones((5, 3, 4))  # (P, N, D)
    f, b_out = kla.affine_map(lam_prev, 0.9, 0.1, b)
    assert f.shape == b_out.shape == (5, 3, 4)
    np.testing.assert_allclose(f, 0.9 / (0.81 + 0.2))
    np.testing.assert_allclose(kla.forget_gate(0.0, 0.9, 0.1), 1 / 0.9)  # p_bar lam = 0: 1/a_bar
    eta = kla.affine_apply((f, b_out), np.arange(4.0))
    np.testing.assert_allclose(eta[0, 0], f[0, 0] * np.arange(4.0) + 1.0)


@given(st.integers(0, 2**32 - 1))
def test_affine_composition_is_associative_with_identity(seed):
    rng = np.random.default_rng(seed)
    maps = [kla.AffineMap(rng.uniform(0.1, 2.0, 4), rng.normal(size=4)) for _ in range(3)]
    left = kla.affine_compose(kla.affine_compose(maps[2], maps[1]), maps[0])
    right = kla.affine_compose(maps[2], kla.affine_compose(maps[1], maps[0]))
    np.testing.assert_allclose(left, right, rtol=1e-13, atol=1e-14)
    for m in maps:
        np.testing.assert_array_equal(kla.affine_compose(kla.AFFINE_IDENTITY, m), m)
        np.testing.assert_array_equal(kla.affine_compose(m, kla.AFFINE_IDENTITY), m)
    eta = rng.normal(size=4)
    np.testing.assert_allclose(
        kla.affine_apply(kla.affine_compose(maps[1], maps[0]), eta),
        kla.affine_apply(maps[1], kla.affine_apply(maps[0], eta)),
        rtol=1e-13,
        atol=1e-14,
    )


def test_one_information_step_matches_the_moment_form():
    a_bar, p_bar, lam, mu, k, lam_v, v = 0.8, 0.3, 2.5, -0.4, 1.3, 4.0, 0.9
    phi, b = kla.token_evidence(k, lam_v, v)
    lam_t = kla.precision_step(lam, a_bar, p_bar, phi)
    eta_t = kla.affine_apply(kla.affine_map(lam, a_bar, p_bar, b), lam * mu)
    P_prior = a_bar**2 / lam + p_bar
    gain = P_prior * k / (k**2 * P_prior + 1 / lam_v)
    np.testing.assert_allclose(1 / lam_t, (1 - gain * k) * P_prior, rtol=1e-14)
    np.testing.assert_allclose(eta_t / lam_t, a_bar * mu + gain * (v - k * a_bar * mu), rtol=1e-14)


def test_identities_are_read_only():
    with pytest.raises(ValueError):
        kla.MOBIUS_IDENTITY[0, 0] = 2.0


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: kla.ou_discretisation(-0.1, 1.0, 0.1), ValueError, "a must be >= 0, got min -0.1"),
        (lambda: kla.ou_discretisation(1.0, 1.0, -1.0), ValueError, "dt must be >= 0"),
        (lambda: kla.ou_discretisation(1.0, np.nan, 0.1), ValueError, "p has 1 NaN"),
        (
            lambda: kla.ou_discretisation(np.ones(2), np.ones(3), 0.1),
            ValueError,
            r"a, p, dt must broadcast together; got shapes a \(2,\), p \(3,\), dt \(\)",
        ),
        (lambda: kla.ou_discretisation("fast", 1.0, 0.1), TypeError, "a must be numeric"),
        (lambda: kla.ou_stationary_variance(0.0, 1.0), ValueError, "a must be > 0, got min 0"),
        (lambda: kla.token_evidence(1.0, 0.0, 1.0), ValueError, "value_precision must be > 0"),
        (lambda: kla.prior_precision(-1.0, 0.9, 0.1), ValueError, "lam must be >= 0"),
        (lambda: kla.precision_step(1.0, 0.0, 0.1, 1.0), ValueError, "a_bar must be > 0"),
        (lambda: kla.mobius_matrix(0.9, -0.1, 1.0), ValueError, "p_bar must be >= 0"),
        (lambda: kla.mobius_matrix(0.9, 0.1, -1.0), ValueError, "phi must be >= 0"),
        (
            lambda: kla.mobius_apply(np.eye(3), 1.0),
            ValueError,
            r"M must have shape \(\.\.\., 2, 2\)",
        ),
        (
            lambda: kla.mobius_apply([[1.0, 0.0], [1.0, 1.0]], -1.0),
            ValueError,
            "sends lam to infinity",
        ),
        (
            lambda: kla.mobius_apply(np.tile(np.eye(2), (3, 1, 1)), np.ones(2)),
            ValueError,
            "must broadcast together",
        ),
        (
            lambda: kla.mobius_compose(
                np.tile(np.eye(2), (3, 1, 1)), np.tile(np.eye(2), (2, 1, 1))
            ),
            ValueError,
            r"later and earlier must broadcast together; got shapes \(3, 2, 2\), \(2, 2, 2\)",
        ),
        (
            lambda: kla.mobius_compose([[1.0, 0.0], [0.0, -1.0]], np.eye(2), normalise=True),
            ValueError,
            "trace 0",
        ),
        (
            lambda: kla.steady_state_precision(1.0, 0.0, 0.0),
            ValueError,
            "identity step",
        ),
        (lambda: kla.forget_gate(-1.0, 0.9, 0.1), ValueError, "lam_prev must be >= 0"),
        (lambda: kla.affine_map(1.0, 0.9, 0.1, np.inf), ValueError, "b has 1 NaN or infinite"),
        (lambda: kla.affine_apply((1.0, 0.0), "x"), TypeError, "eta must be numeric"),
        (
            lambda: kla.affine_compose((np.ones(2), 0.0), (np.ones(3), 0.0)),
            ValueError,
            "later.f, later.b, earlier.f, earlier.b must broadcast together",
        ),
    ],
)
def test_bad_input(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()

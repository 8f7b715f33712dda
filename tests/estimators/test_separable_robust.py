"""Separable precision approximation and robust weights: shapes, properties and bad input.

The registry (`verify/checks/separable.py`, `verify/checks/robust_weights.py`) proves the math;
these tests pin the API: shapes and batching, limit branches, and the error messages.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from estimators.closed_forms import dle
from estimators.closed_forms import robust_weights as rw
from estimators.closed_forms import separable as sep

LAM = np.array([-0.2 - 1.0j, -0.2 + 1.0j, -0.7])
Q = np.array([0.5, 0.5, 1.0])
RHO = np.array([2.0, 2.0, 0.3])  # mode pair integrative (rho > lam_eff), last diffusive
GAINS = np.array([0.8 * np.exp(0.5j), 0.8 * np.exp(-0.5j), 1.2])


def _modes(seed: int):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 5))
    lam = -rng.uniform(0.05, 2.0, d) + 1j * rng.uniform(-2, 2, d)
    q = rng.uniform(0.1, 2.0, d)
    rho = rng.uniform(0.05, 5.0, d)
    gains = rng.uniform(0.3, 2.0, d) * np.exp(1j * rng.uniform(-np.pi, np.pi, d))
    return lam, q, rho, gains


# --- separable: exact tensor ------------------------------------------------------------------


def test_precision_tensor_shapes_batching_and_diagonal():
    t = np.array([[0.0, 0.3, 0.5, 1.4, 2.0], [1.0, 1.1, 1.5, 3.0, 3.2]])
    P = sep.precision_tensor(LAM, Q, RHO, t, output_gains=GAINS)
    assert P.shape == (2, 5, 5, 3)
    np.testing.assert_allclose(P[1], sep.precision_tensor(LAM, Q, RHO, t[1], output_gains=GAINS))
    for b in range(2):
        np.testing.assert_allclose(np.einsum("iik->ik", P[b]), np.broadcast_to(1 / RHO, (5, 3)))
    # entry [i, j] uses dt = t_j - t_i: the causal (lower) triangle is mode_precision at -lag
    np.testing.assert_allclose(
        P[0, 3, 1], sep.mode_precision(LAM, Q, RHO, t[0, 1] - t[0, 3], output_gains=GAINS)
    )


def test_mode_variance_is_dle_mode_variance_plus_propagated_noise():
    dt = np.linspace(-3, 2, 11)
    v = sep.mode_variance(LAM, Q, RHO, dt, output_gains=GAINS)
    expected = np.abs(GAINS) ** 2 * dle.eigen_mode_variances(LAM, Q, dt) + RHO * np.exp(
        -2 * LAM.real * dt[:, None]
    )
    np.testing.assert_allclose(v, expected, rtol=1e-15)
    assert v.shape == (11, 3) and np.all(v > 0)


def test_pure_rotation_mode_is_allowed_by_the_exact_form():
    lam = np.array([1j, -1j])
    v = sep.mode_variance(lam, [0.4, 0.4], [1.0, 1.0], -2.5)
    np.testing.assert_allclose(v, [0.4 * 2.5 + 1.0] * 2)


# --- separable: approximation -----------------------------------------------------------------


@given(st.integers(0, 2**32 - 1))
def test_approximation_matches_at_zero_and_infinity_and_stays_below(seed):
    lam, q, rho, gains = _modes(seed)
    lag = np.concatenate([[0.0], np.geomspace(1e-3, 1e3, 60)])
    exact = sep.mode_precision(lam, q, rho, -lag, output_gains=gains)
    approx = sep.separable_precision(lam, q, rho, lag, output_gains=gains)
    np.testing.assert_allclose(approx[0], exact[0], rtol=1e-14)
    assert np.all(approx <= exact * (1 + 1e-13))
    params = sep.separable_parameters(lam, q, rho, output_gains=gains)
    far = 200.0 / np.min([params.rate, -2 * lam.real])  # both kernels have converged
    np.testing.assert_allclose(
        sep.separable_precision(lam, q, rho, far, output_gains=gains), params.floor, rtol=1e-12
    )


@given(st.integers(0, 2**32 - 1))
def test_approximation_is_monotone_in_the_direction_of_the_exact_kernel(seed):
    lam, q, rho, gains = _modes(seed)
    lag = np.linspace(0, 20, 200)
    exact = sep.mode_precision(lam, q, rho, -lag, output_gains=gains)
    approx = sep.separable_precision(lam, q, rho, lag, output_gains=gains)
    params = sep.separable_parameters(lam, q, rho, output_gains=gains)
    direction = np.sign(1 / params.ratio - 1)  # R = rho / lam_eff: > 1 rises, < 1 falls
    scale = params.floor * 1e-13
    assert np.all(direction * np.diff(exact, axis=0) >= -scale)
    assert np.all(direction * np.diff(approx, axis=0) >= -scale)


@given(st.integers(0, 2**32 - 1), st.integers(2, 30))
def test_factors_reproduce_the_kernel_for_any_reference_time(seed, T):
    lam, q, rho, gains = _modes(seed)
    rng = np.random.default_rng(seed)
    params = sep.separable_parameters(lam, q, rho, output_gains=gains)
    t = np.sort(rng.uniform(0, 10.0 / params.rate.max(), T))
    i, j = np.tril_indices(T)
    kernel = sep.separable_precision(lam, q, rho, t[i] - t[j], output_gains=gains)
    for ref in (None, float(t[0]), float(t[-1])):
        c, f, g = sep.separable_factors(lam, q, rho, t, output_gains=gains, reference_time=ref)
        assert c.shape == (lam.size,) and f.shape == g.shape == (T, lam.size)
        np.testing.assert_allclose(c + f[i] * g[j], kernel, rtol=1e-11)


def test_factors_batch_over_leading_axes():
    t = np.array([[0.0, 0.5, 1.0], [2.0, 2.2, 4.0]])
    c, f, g = sep.separable_factors(LAM, Q, RHO, t, output_gains=GAINS)
    assert f.shape == g.shape == (2, 3, 3)
    _, f1, g1 = sep.separable_factors(LAM, Q, RHO, t[1], output_gains=GAINS)
    np.testing.assert_allclose(f[1] * g[1], f1 * g1)


def _sequences(rng, T, d):
    def crandn():
        return rng.normal(size=(T, d)) + 1j * rng.normal(size=(T, d))

    return crandn(), crandn(), crandn()


def test_estimate_of_a_constant_sequence_is_that_constant():
    rng = np.random.default_rng(3)
    t = np.cumsum(rng.uniform(0.1, 0.5, 8))
    c, f, g = sep.separable_factors(LAM, Q, RHO, t, output_gains=GAINS)
    W = rng.uniform(0.1, 1.0, (8, 8))
    zv = np.broadcast_to(np.array([1 + 2j, -0.5j, 3.0]), (8, 3))
    phi = np.exp(1j * rng.uniform(0, 6, (8, 3)))
    np.testing.assert_allclose(sep.separable_estimate(W, c, f, g, phi, zv), phi * zv, rtol=1e-13)


def test_estimate_is_causal():
    rng = np.random.default_rng(4)
    t = np.cumsum(rng.uniform(0.1, 0.5, 6))
    c, f, g = sep.separable_factors(LAM, Q, RHO, t, output_gains=GAINS)
    W = rng.uniform(0.1, 1.0, (6, 6))
    phi, zv, _ = _sequences(rng, 6, 3)
    first = sep.separable_estimate(W, c, f, g, phi, zv)
    zv2 = zv.copy()
    zv2[4:] += 10.0  # the future must not move earlier estimates
    second = sep.separable_estimate(W, c, f, g, phi, zv2)
    np.testing.assert_allclose(first[:4], second[:4], rtol=1e-14)
    np.testing.assert_allclose(first[0], phi[0] * zv[0], rtol=1e-14)


def test_distance_vanishes_on_matching_pairs_and_is_nonnegative():
    rng = np.random.default_rng(5)
    t = np.cumsum(rng.uniform(0.1, 0.5, 7))
    c, f, g = sep.separable_factors(LAM, Q, RHO, t, output_gains=GAINS)
    phi, zq, _ = _sequences(rng, 7, 3)
    D = sep.separable_distance(c, f, g, phi, zq, zq)
    assert D.shape == (7, 7)
    np.testing.assert_allclose(np.diag(D), 0.0, atol=1e-12 * np.abs(D).max())
    assert np.all(np.tril(D) >= -1e-12 * np.abs(D).max())  # P~ > 0 on causal pairs


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: sep.separable_precision([0.1, -1.0], [1, 1], [1, 1], 1.0), ValueError, "Re < 0"),
        (
            lambda: sep.separable_precision([-1.0, -1.0], [0.0, 1], [1, 1], 1.0),
            ValueError,
            "process_variances and output_gains must be nonzero",
        ),
        (
            lambda: sep.mode_precision(LAM, Q, [1.0, 1.0, 0.0], 1.0),
            ValueError,
            "measurement_variances must be > 0",
        ),
        (
            lambda: sep.mode_precision(LAM, Q[:2], RHO, 1.0),
            ValueError,
            r"process_variances must have shape \(3,\)",
        ),
        (
            lambda: sep.mode_precision(LAM, -Q, RHO, 1.0),
            ValueError,
            "process_variances must be >= 0",
        ),
        (
            lambda: sep.mode_precision(LAM, Q, RHO, 1.0, output_gains=[1, 1]),
            ValueError,
            r"output_gains must have shape \(3,\)",
        ),
        (lambda: sep.separable_precision(LAM, Q, RHO, -0.5), ValueError, "lag must be >= 0"),
        (lambda: sep.mode_precision(LAM, Q, RHO, np.nan), ValueError, "dt has 1 NaN"),
        (lambda: sep.mode_precision(LAM, Q, RHO, "x"), TypeError, "dt must be numeric"),
        (lambda: sep.precision_tensor(LAM, Q, RHO, 1.0), ValueError, "t must have at least 1"),
        (
            lambda: sep.separable_factors(LAM, Q, RHO, [0.0, 1e4]),
            ValueError,
            "t spans too long a range",
        ),
    ],
)
def test_separable_bad_input(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_matrix_form_bad_input():
    t = np.array([0.0, 0.5, 1.0])
    c, f, g = sep.separable_factors(LAM, Q, RHO, t, output_gains=GAINS)
    z = np.ones((3, 3), complex)
    with pytest.raises(ValueError, match=r"weights must have shape \(\.\.\., 3, 3\)"):
        sep.separable_estimate(np.ones((2, 2)), c, f, g, z, z)
    with pytest.raises(ValueError, match="weights must be >= 0"):
        sep.separable_estimate(-np.ones((3, 3)), c, f, g, z, z)
    with pytest.raises(ValueError, match="positive total weight"):
        sep.separable_estimate(np.triu(np.ones((3, 3)), 1), c, f, g, z, z)
    with pytest.raises(ValueError, match="g must have the shape of f"):
        sep.separable_estimate(np.ones((3, 3)), c, f, g[:2], z, z)
    with pytest.raises(ValueError, match=r"zk_hat must have shape \(\.\.\., 3, 3\)"):
        sep.separable_distance(c, f, g, z, z, z[:, :2])
    with pytest.raises(ValueError, match=r"f must have shape \(\.\.\., T, 3\)"):
        sep.separable_distance(c, f[:, :2], g[:, :2], z, z, z)


# --- robust weights ---------------------------------------------------------------------------


def test_weights_broadcast_over_residuals_and_heads():
    m = np.linspace(0, 10, 12).reshape(4, 3)
    nu = np.array([1.0, 5.0, np.inf])  # one per head
    for out in (
        rw.student_t_weight(m, nu, 8),
        rw.rational_weight(m, nu),
        rw.student_t_logit(m, nu, 8, log_precision=np.log([[0.5], [1], [2], [4]])),
        rw.student_t_log_density(m, nu, 8),
    ):
        assert out.shape == (4, 3)
    post = rw.gamma_posterior(m, 3, shape=np.array([1.0, 2.0, 3.0]), rate=0.5)
    assert post.shape.shape == post.rate.shape == (4, 3)


def test_infinite_nu_gives_the_gaussian_limits():
    m = np.array([0.0, 0.7, 4.0])
    np.testing.assert_array_equal(rw.student_t_weight(m, np.inf, 3), 1.0)
    np.testing.assert_array_equal(rw.rational_weight(m, np.inf), 1.0)
    np.testing.assert_array_equal(rw.student_t_logit(m, np.inf, 4), -m / 4)
    np.testing.assert_array_equal(rw.power_log_weight(m, np.inf, kappa=2.0), 0.0)
    gauss = -1.5 * np.log(2 * np.pi) - m / 2
    np.testing.assert_allclose(rw.student_t_log_density(m, np.inf, 3), gauss, rtol=1e-15)
    assert rw.student_t_exponent(np.inf, 3) == np.inf


@given(st.floats(0, 1e3), st.floats(1e-2, 1e3), st.integers(1, 128))
def test_logit_forms_agree(m, nu, d):
    kappa = rw.student_t_exponent(nu, d)
    logit = rw.student_t_logit(m, nu, d)
    np.testing.assert_allclose(rw.power_log_weight(m, nu, kappa=kappa), logit, rtol=1e-14)
    np.testing.assert_allclose(np.exp(logit), (1 + m / nu) ** -kappa, rtol=1e-10)
    # the IRLS weight is -d times the slope of the logit in m (central difference)
    h = 1e-5 * (1 + m)
    slope = (rw.student_t_logit(m + h, nu, d) - rw.student_t_logit(m + 2 * h, nu, d)) / -h
    np.testing.assert_allclose(-d * slope, rw.student_t_weight(m + 1.5 * h, nu, d), rtol=1e-4)


@given(st.floats(0.05, 20), st.floats(0.05, 20), st.integers(1, 10))
def test_variational_weight_forms(alpha, beta, d):
    m = np.linspace(0, 50, 11)
    w = rw.variational_weight(m, d, shape=alpha, rate=beta)
    np.testing.assert_allclose(
        np.log(w), rw.log_variational_weight(m, d, shape=alpha, rate=beta), rtol=1e-13, atol=1e-15
    )
    assert np.all(np.diff(w) < 0)  # larger residuals get smaller weights
    ratio = w / rw.rational_weight(m, 2 * beta)  # seed 000: only nu = 2 beta matters
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-13)
    # the IRLS weight is twice the slope of the loss rho(m) (central difference)
    mid, h = m[1:], 1e-5 * (1 + m[1:])
    slope = (
        rw.student_t_loss(mid + h, d, shape=alpha, rate=beta)
        - rw.student_t_loss(mid - h, d, shape=alpha, rate=beta)
    ) / (2 * h)
    np.testing.assert_allclose(2 * slope, w[1:], rtol=1e-6)


def test_student_t_is_the_symmetric_gamma_mixture_and_continuous_at_large_nu():
    m = np.array([0.0, 1.3, 40.0])
    for nu, d in ((3.0, 1), (12.0, 5)):
        np.testing.assert_allclose(
            rw.student_t_log_density(m, nu, d, logdet_precision=0.4),
            rw.gamma_mixture_log_density(m, d, shape=nu / 2, rate=nu / 2, logdet_precision=0.4),
        )
    np.testing.assert_allclose(
        rw.student_t_log_density(m, 1e14, 7), rw.student_t_log_density(m, np.inf, 7), rtol=1e-12
    )


def test_log_gamma_ratio_is_continuous_across_its_branches():
    from scipy.special import gammaln

    x = np.array([19.999999, 20.0, 20.000001])
    for a in (0.5, 3.0, 40.0):
        direct = gammaln(x + a) - gammaln(x) - a * np.log(x)
        np.testing.assert_allclose(rw.log_gamma_ratio(x, a), direct, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: rw.student_t_weight(-1.0, 3.0, 2), ValueError, "mahalanobis_sq must be >= 0"),
        (lambda: rw.student_t_weight(1.0, 0.0, 2), ValueError, "nu must be > 0, got min 0"),
        (lambda: rw.student_t_logit(1.0, np.nan, 2), ValueError, "nu has NaN"),
        (lambda: rw.student_t_logit(1.0, "3", 2), TypeError, "nu must be a real number"),
        (lambda: rw.student_t_logit(1.0, 3.0, 0), ValueError, "dim must be > 0"),
        (
            lambda: rw.student_t_logit(1.0, 3.0, 2, log_precision=np.inf),
            ValueError,
            "log_precision",
        ),
        (
            lambda: rw.variational_weight(1.0, 2, shape=np.inf, rate=1.0),
            ValueError,
            "shape must be finite",
        ),
        (lambda: rw.variational_weight(1.0, 2, shape=1.0, rate=-2), ValueError, "rate must be > 0"),
        (lambda: rw.power_log_weight(1.0, 3.0, kappa=-1.0), ValueError, "kappa must be > 0"),
        (lambda: rw.gaussian_logit(1.0, 0.0), ValueError, "temperature must be > 0"),
        (lambda: rw.log_gamma_ratio(0.0, 1.0), ValueError, "x must be > 0"),
    ],
)
def test_robust_bad_input(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_numerical_options_are_keyword_only():
    with pytest.raises(TypeError):
        rw.variational_weight(1.0, 2, 1.0, 1.0)
    with pytest.raises(TypeError):
        rw.power_log_weight(1.0, 3.0, 2.0)

"""Parameter MLE (estimators.fit): families, score, recovery, calibration, maximality, errors.

Statistical assertions use fixed seeds. Under the model, ``phi_hat ~ N(phi, H^-1)`` to first
order, so a z-score ``(theta_hat - theta) / se`` is standard normal: single z-scores are held to
4 sigma (two-sided p = 6e-5), and pooled statistics of K independent fits to bands derived from
their sampling distributions (stated beside each).
"""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from estimators import fit as mle
from estimators.closed_forms import kla
from estimators.kalman import GaussianPrior
from sde_sim import EveryKSteps, GaussianInitial, LinearMeasurement, LinearSDE, Scenario, simulate
from sde_sim.exact import linear_transition
from verify.problems.fit import (
    ISOTROPIC,
    ISOTROPIC_PRIOR,
    ISOTROPIC_TRUTH,
    OU,
    OU_TRUTH,
    custom_problem,
    finite_difference_score,
    isotropic_data,
    ou_data,
    whitened,
    z_scores,
)

SIGMA = 4.0


# --- families ----------------------------------------------------------------------------------


def test_isotropic_family_builds_alpha_i_plus_rope_rotation():
    fam = mle.IsotropicFamily(4)
    theta = fam.pack(alpha=-0.2, omega=[1.0, -3.0], sigma2=0.4, eta2=0.1)
    assert fam.names == ("alpha", "omega[0]", "omega[1]", "sigma2", "eta2")
    assert fam.constraints == ("negative", "real", "real", "positive", "positive")
    sde, meas = fam.build(theta)
    A = np.zeros((4, 4))
    A[0, 1], A[1, 0], A[2, 3], A[3, 2] = -1.0, 1.0, 3.0, -3.0
    np.testing.assert_allclose(sde.A, -0.2 * np.eye(4) + A)
    np.testing.assert_allclose(sde.Q, 0.4 * np.eye(4))
    np.testing.assert_allclose(meas.R, 0.1 * np.eye(4))
    np.testing.assert_array_equal(meas.C, np.eye(4))
    back = fam.unpack(theta)
    assert back["alpha"] == -0.2 and back["eta2"] == 0.1
    np.testing.assert_array_equal(back["omega"], [1.0, -3.0])


def test_isotropic_family_3d_rotation_vector_and_no_rotation():
    fam = mle.IsotropicFamily(3, rotation="vector")
    sde, _ = fam.build(fam.pack(alpha=-0.1, omega=[0.0, 0.0, 2.0], sigma2=1.0, eta2=1.0))
    # rotation about e_z at 2 rad per unit time: [w]_x e_x = w x e_x = 2 e_y
    np.testing.assert_allclose(sde.A @ [1.0, 0.0, 0.0], [-0.1, 2.0, 0.0])
    one = mle.IsotropicFamily(1, rotation="none")
    assert one.names == ("alpha", "sigma2", "eta2")
    sde, meas = one.build([-0.5, 2.0, 3.0])
    np.testing.assert_allclose([sde.A[0, 0], sde.Q[0, 0], meas.R[0, 0]], [-0.5, 2.0, 3.0])


def test_ou_family_step_law_is_kla_eq_8():
    # The exact transition of the family's SDE over dt is eq. (8): a_bar = e^{-a dt},
    # p_bar = p^2 (1 - e^{-2 a dt}) / (2a) (the closed form in estimators.closed_forms.kla).
    fam = mle.OUFamily(3, noise="per-channel")
    a, p, eta2 = np.array([0.5, 1.0, 4.0]), np.array([0.3, 1.0, 2.0]), np.array([0.1, 0.2, 0.3])
    sde, meas = fam.build(fam.pack(a=a, p=p, eta2=eta2))
    step = linear_transition(sde, [0.1])
    expected = kla.ou_discretisation(a, p, 0.1)
    np.testing.assert_allclose(np.diag(step.Phi[0]), expected.a_bar, rtol=1e-13)
    np.testing.assert_allclose(np.diag(step.Qd[0]), expected.p_bar, rtol=1e-12)
    np.testing.assert_allclose(meas.R, np.diag(eta2))
    assert fam.names[-1] == "eta2[2]" and set(fam.constraints) == {"positive"}


@given(
    st.lists(st.sampled_from(mle.CONSTRAINTS), min_size=1, max_size=6),
    st.integers(0, 2**32 - 1),
)
def test_parameter_map_round_trip_and_jacobian(kinds, seed):
    rng = np.random.default_rng(seed)
    size = np.exp(rng.uniform(-5, 5, len(kinds)))
    sign = np.where(np.array(kinds) == "negative", -1.0, 1.0)
    theta = np.where(np.array(kinds) == "real", rng.normal(size=len(kinds)) * size, sign * size)
    phi = mle.to_unconstrained(theta, kinds)
    np.testing.assert_allclose(mle.from_unconstrained(phi, kinds), theta, rtol=1e-14)
    # d theta / d phi (the delta method's Jacobian) against a central difference
    h = 1e-6
    fd = (mle.from_unconstrained(phi + h, kinds) - mle.from_unconstrained(phi - h, kinds)) / (2 * h)
    np.testing.assert_allclose(mle._jacobian_diag(theta, kinds), fd, rtol=1e-8)


# --- score (Fisher's identity) against the filter's log-likelihood --------------------------------


def _score_cases():
    family, theta, z, t, mask, prior = custom_problem()
    yield "custom-prior-at-t0", family, theta, z, t, {"mask": mask, "prior": prior}
    z_i, t_i = isotropic_data(8, 12, 3)
    yield "isotropic-diffuse", ISOTROPIC, ISOTROPIC_TRUTH * [1.5, 0.9, 1.2, 0.8], z_i, t_i, {}
    yield "isotropic-gaussian", ISOTROPIC, ISOTROPIC_TRUTH, z_i, t_i, {"prior": ISOTROPIC_PRIOR}
    z_o, t_o = ou_data(6, 12, 4)
    rng = np.random.default_rng(1)
    mask = rng.random(z_o.shape[:2]) > 0.3
    z_o[~mask] = np.nan
    fam = mle.OUFamily(4, noise="per-channel")
    theta = fam.pack(a=[0.4, 1.1, 2.5, 3.0], p=[1.2, 0.8, 1.0, 1.5], eta2=[0.1, 0.2, 0.05, 0.3])
    yield "ou-stationary-missing", fam, theta, z_o, t_o, {"mask": mask, "prior": "stationary"}
    # 3-D rotation vector, irregular per-sequence times
    fam3 = mle.IsotropicFamily(3, rotation="vector")
    t3 = np.cumsum(rng.uniform(0.05, 0.3, (5, 10)), axis=1)
    z3 = rng.normal(size=(5, 10, 3))
    yield (
        "vector-irregular",
        fam3,
        fam3.pack(alpha=-0.3, omega=[0.5, -1, 0.2], sigma2=0.5, eta2=0.4),
        z3,
        t3,
        {},
    )


@pytest.mark.parametrize("case", list(_score_cases()), ids=lambda c: c[0])
def test_score_equals_finite_differences_of_the_filter_log_likelihood(case):
    # Central differences (h = 1e-5) of log L ~ 1e2..1e3 err by ~ u |log L| / h + h^2 |L'''|
    # ~ 1e-9 .. 1e-8; the identity itself is exact, so 1e-6 relative is a loose bound.
    _, family, theta, z, t, kwargs = case
    exact = mle.score(family, theta, z, t, **kwargs)
    fd = finite_difference_score(family, theta, z, t, **kwargs)
    assert np.max(np.abs(exact - fd)) <= 1e-6 * max(1.0, np.max(np.abs(fd)))


# --- recovery ------------------------------------------------------------------------------------


def test_fit_recovers_isotropic_parameters_within_standard_errors():
    z, t = isotropic_data(300, 31, 21)
    start = ISOTROPIC.pack(alpha=-0.5, omega=0.7, sigma2=1.0, eta2=1.0)
    res = mle.fit(ISOTROPIC, start, z, t, prior=ISOTROPIC_PRIOR)
    conv = res.convergence
    assert conv.converged and conv.success and conv.gradient == "score"
    assert conv.newton_step < 1e-2 and conv.iterations < 100
    assert np.all(np.abs(z_scores(res, ISOTROPIC_TRUTH)) < SIGMA)
    # the standard errors are small enough for this to be a test: alpha to ~20%, omega to ~1%
    assert res.se[0] < 0.2 * abs(ISOTROPIC_TRUTH[0]) and res.se[1] < 0.01
    assert res.names == ISOTROPIC.names and res.n_obs == 300 * 31 * 2
    # the model at the estimate is the family's
    np.testing.assert_allclose(res.sde.A, ISOTROPIC.build(res.params)[0].A)


def test_fit_recovers_the_ou_preset_within_standard_errors():
    z, t = ou_data(150, 41, 22)
    start = OU.pack(a=1.0, p=0.7, eta2=0.3)
    res = mle.fit(OU, start, z, t, prior="stationary")
    assert res.convergence.converged and res.names[0] == "a[0]" and res.names[-1] == "eta2"
    assert np.all(np.abs(z_scores(res, OU_TRUTH)) < SIGMA)


def test_fit_with_per_sequence_times_and_missing_values():
    # Each sequence keeps its own random 20 of 41 grid times; 15% of the rest is missing. The
    # prior is the law at t = 0, before most sequences' first time: the model carries it there.
    z_all, t_all = isotropic_data(300, 41, 23)
    rng = np.random.default_rng(24)
    idx = np.sort(np.stack([rng.choice(41, 20, replace=False) for _ in range(300)]), axis=1)
    z = np.take_along_axis(z_all, idx[..., None], axis=1)
    t = t_all[idx]
    mask = rng.random(z.shape[:2]) > 0.15
    z[~mask] = np.nan
    prior = ISOTROPIC_PRIOR._replace(time=0.0)
    res = mle.fit(ISOTROPIC, ISOTROPIC_TRUTH, z, t, mask=mask, prior=prior)
    assert res.convergence.converged and res.convergence.gradient == "score"
    assert res.n_obs == 2 * int(mask.sum())
    assert np.all(np.abs(z_scores(res, ISOTROPIC_TRUTH)) < SIGMA)


# --- calibration over independent datasets --------------------------------------------------------

K_DATASETS, B_SEQ, T_OBS = 24, 100, 21


@pytest.fixture(scope="module")
def replicated_fits():
    z, t = isotropic_data(K_DATASETS * B_SEQ, T_OBS, 25)
    fits = []
    for k in range(K_DATASETS):
        part = z[k * B_SEQ : (k + 1) * B_SEQ]
        fits.append(mle.fit(ISOTROPIC, ISOTROPIC_TRUTH, part, t, prior=ISOTROPIC_PRIOR))
    return fits


def test_z_scores_over_seeds_look_standard_normal(replicated_fits):
    assert all(f.convergence.converged for f in replicated_fits)
    z = np.array([z_scores(f, ISOTROPIC_TRUTH) for f in replicated_fits])  # (K, 4)
    # every single z-score within 4.5 sigma: with 96 of them, P(any beyond) ~ 96 * 6.8e-6
    assert np.max(np.abs(z)) < 4.5
    # whitened errors L^-1 (phi_hat - phi) are K n = 96 independent N(0, 1) draws: their mean
    # has sd 1/sqrt(96) and their mean square sd sqrt(2/96); both held to 4 sigma
    w = np.array([whitened(f, ISOTROPIC_TRUTH) for f in replicated_fits]).ravel()
    assert abs(w.mean()) < SIGMA / np.sqrt(w.size)
    assert abs(np.mean(w**2) - 1.0) < SIGMA * np.sqrt(2.0 / w.size)
    # and their distribution: Kolmogorov-Smirnov against N(0, 1) at p > 6e-5 (4 sigma)
    assert stats.kstest(w, "norm").pvalue > 6e-5


def test_standard_errors_match_the_monte_carlo_spread(replicated_fits):
    phi = np.array([f.unconstrained for f in replicated_fits])  # (K, n)
    se2 = np.array([f.se_unconstrained**2 for f in replicated_fits]).mean(axis=0)
    ratio = phi.var(axis=0, ddof=1) / se2
    # (K-1) var / sigma^2 ~ chi^2_{K-1}: the ratio lies between its 4-sigma quantiles
    dof = K_DATASETS - 1
    p = stats.norm.sf(SIGMA)
    low, high = stats.chi2.ppf(p, dof) / dof, stats.chi2.isf(p, dof) / dof
    assert np.all((low < ratio) & (ratio < high)), ratio
    # pooled over parameters (whitened: independent coordinates) the band is much narrower
    pooled = np.mean([np.mean(whitened(f, ISOTROPIC_TRUTH) ** 2) for f in replicated_fits])
    n = K_DATASETS * phi.shape[1]
    assert stats.chi2.ppf(p, n) / n < pooled < stats.chi2.isf(p, n) / n
    # the delta method: se(theta) = |d theta / d phi| se(phi)
    f = replicated_fits[0]
    np.testing.assert_allclose(
        f.se, np.abs(mle._jacobian_diag(f.params, f.constraints)) * f.se_unconstrained
    )


# --- maximality -----------------------------------------------------------------------------------


def test_log_likelihood_is_maximal_at_the_estimate():
    z, t = isotropic_data(100, 21, 26)
    res = mle.fit(ISOTROPIC, ISOTROPIC_TRUTH, z, t, prior=ISOTROPIC_PRIOR)
    at_hat = mle.log_likelihood(ISOTROPIC, res.params, z, t, prior=ISOTROPIC_PRIOR)
    assert at_hat == pytest.approx(res.log_likelihood, abs=1e-9)
    n = res.params.size

    def drop(delta):
        theta = mle.from_unconstrained(res.unconstrained + delta, res.constraints)
        return at_hat - mle.log_likelihood(ISOTROPIC, theta, z, t, prior=ISOTROPIC_PRIOR)

    # Steps of 0.2 se: the drop is 1/2 d^T H d plus the residual slope -g . d (|g| <= grad_norm)
    # plus a cubic term, odd in d, of relative size ~ 0.2 se |L'''| / |L''| (1.5% at most
    # measured here; bounded by 10%). The mean of the drops at +-d cancels the cubic term and
    # leaves the quartic one, ~ (0.2 se)^2 relative: it tests H itself to 1%.
    for i in range(n):
        delta = 0.2 * res.se_unconstrained[i] * np.eye(n)[i]
        predicted = 0.5 * delta @ res.hessian @ delta
        slope = res.convergence.grad_norm * np.abs(delta).sum()
        up, down = drop(delta), drop(-delta)
        assert up > 0 and down > 0
        assert max(abs(up - predicted), abs(down - predicted)) < 0.1 * predicted + slope
        assert abs(0.5 * (up + down) - predicted) < 0.01 * predicted
    for v in np.random.default_rng(27).normal(size=(6, n)):
        delta = 0.2 * v / np.linalg.norm(v) * res.se_unconstrained.min()
        predicted = 0.5 * delta @ res.hessian @ delta
        slope = res.convergence.grad_norm * np.abs(delta).sum()
        value = drop(delta)
        assert value > 0 and abs(value - predicted) < 0.1 * predicted + slope


def test_score_and_numeric_gradients_give_the_same_fit():
    z, t = isotropic_data(60, 16, 28)
    a = mle.fit(ISOTROPIC, ISOTROPIC_TRUTH, z, t, prior=ISOTROPIC_PRIOR, gradient="score")
    b = mle.fit(ISOTROPIC, ISOTROPIC_TRUTH, z, t, prior=ISOTROPIC_PRIOR, gradient="numeric")
    assert a.convergence.gradient == "score" and b.convergence.gradient == "numeric"
    # both stop within 1e-2 se of the optimum; the Hessians agree to their difference accuracy
    np.testing.assert_allclose(
        a.unconstrained, b.unconstrained, atol=0.02 * a.se_unconstrained.min()
    )
    np.testing.assert_allclose(a.se_unconstrained, b.se_unconstrained, rtol=1e-3)


# --- general interface ----------------------------------------------------------------------------


def _oscillator(theta):
    """Damped oscillator x'' = -w^2 x - 2 g x' + s dW, both coordinates measured (seed 002)."""
    w, g, s, eta2 = theta
    A = np.array([[0.0, 1.0], [-(w**2), -2.0 * g]])
    return LinearSDE(A, np.array([[0.0], [s]])), LinearMeasurement.identity(2, eta2)


def test_general_interface_fits_a_user_model():
    truth = np.array([2.0, 0.3, 0.5, 0.01])
    sde, meas = _oscillator(truth)
    scenario = Scenario(
        sde, meas, GaussianInitial(np.array([1.0, 0.0]), 0.01 * np.eye(2)), 0.1, 30, EveryKSteps(1)
    )
    sim = simulate(scenario, 150, seed=29, method="exact")
    prior = GaussianPrior(np.array([1.0, 0.0]), 0.01 * np.eye(2))
    family = mle.CustomFamily(_oscillator, ("positive",) * 4, ("w", "g", "s", "eta2"))
    res = mle.fit(family, truth * 1.2, sim.z, sim.t_obs, prior=prior)
    assert res.convergence.converged and res.names == ("w", "g", "s", "eta2")
    assert np.all(np.abs(z_scores(res, truth)) < SIGMA)
    # a plain callable (all parameters real) reaches the same maximum
    plain = mle.fit(_oscillator, truth * 1.2, sim.z, sim.t_obs, prior=prior)
    assert plain.constraints == ("real",) * 4
    np.testing.assert_allclose(plain.params, res.params, atol=0.02 * res.se.min())


def test_singular_process_noise_falls_back_to_numeric_gradient():
    # Noise on one coordinate only: Q_d has rank 1 (A is diagonal), so Fisher's identity, which
    # inverts Q_d, cannot be used; "auto" switches to central differences of log L.
    def build(theta):
        a, s, eta2 = theta
        return LinearSDE(-a * np.eye(2), np.array([[s], [0.0]])), LinearMeasurement.identity(
            2, eta2
        )

    truth = np.array([0.5, 0.8, 0.2])
    sde, meas = build(truth)
    scenario = Scenario(
        sde, meas, GaussianInitial(np.array([2.0, 2.0]), np.eye(2)), 0.1, 20, EveryKSteps(1)
    )
    sim = simulate(scenario, 100, seed=30, method="exact")
    family = mle.CustomFamily(build, ("positive",) * 3)
    prior = GaussianPrior(np.array([2.0, 2.0]), np.eye(2))
    res = mle.fit(family, truth, sim.z, sim.t_obs, prior=prior)
    assert res.convergence.gradient == "numeric" and res.convergence.converged
    assert np.all(np.abs(z_scores(res, truth)) < SIGMA)
    with pytest.raises(ValueError, match="gradient='score' needs invertible"):
        mle.fit(family, truth, sim.z, sim.t_obs, prior=prior, gradient="score")


# --- identifiability (documented in the families' docstrings) -------------------------------------


@given(st.floats(0.2, 5.0), st.integers(0, 2**16))
def test_ou_rate_and_step_enter_only_as_their_product(c, seed):
    # (a, p, Delta) and (c a, sqrt(c) p, Delta / c) give the same a_bar and p_bar: the same
    # likelihood of the same measurements at time stamps t / c
    rng = np.random.default_rng(seed)
    fam = mle.OUFamily(2)
    z, t = rng.normal(size=(3, 8, 2)), np.cumsum(rng.uniform(0.05, 0.5, 8))
    a, p = np.array([0.7, 2.0]), np.array([1.0, 0.4])
    base = mle.log_likelihood(fam, fam.pack(a=a, p=p, eta2=0.2), z, t)
    scaled = mle.log_likelihood(fam, fam.pack(a=c * a, p=np.sqrt(c) * p, eta2=0.2), z, t / c)
    assert scaled == pytest.approx(base, rel=1e-10)


def test_rope_frequency_is_identified_only_modulo_the_nyquist_band_on_a_regular_grid():
    z, t = isotropic_data(10, 16, 31)
    alias = ISOTROPIC_TRUTH + np.array([0.0, 2 * np.pi / 0.1, 0.0, 0.0])
    same = mle.log_likelihood(ISOTROPIC, alias, z, t, prior=ISOTROPIC_PRIOR)
    base = mle.log_likelihood(ISOTROPIC, ISOTROPIC_TRUTH, z, t, prior=ISOTROPIC_PRIOR)
    assert same == pytest.approx(base, rel=1e-9)
    # irregular steps separate the aliases
    t_irregular = t + np.random.default_rng(32).uniform(0, 0.03, t.size)
    split = mle.log_likelihood(ISOTROPIC, alias, z, t_irregular, prior=ISOTROPIC_PRIOR)
    assert (
        split
        < mle.log_likelihood(ISOTROPIC, ISOTROPIC_TRUTH, z, t_irregular, prior=ISOTROPIC_PRIOR) - 10
    )


# --- convergence report and bad input -------------------------------------------------------------


def test_iteration_limit_is_reported_not_exceeded():
    z, t = isotropic_data(40, 11, 33)
    start = ISOTROPIC.pack(alpha=-2.0, omega=0.2, sigma2=5.0, eta2=5.0)
    res = mle.fit(ISOTROPIC, start, z, t, prior=ISOTROPIC_PRIOR, max_iter=1)
    assert res.convergence.iterations <= 1
    assert not res.convergence.converged and not res.convergence.success
    assert res.convergence.newton_step > 1e-2 or not res.convergence.hessian_pd


def test_bad_input_raises_clear_errors():
    z, t = isotropic_data(4, 6, 34)
    good = ISOTROPIC_TRUTH
    with pytest.raises(ValueError, match=r"theta0\[3\] \(eta2\) must be > 0"):
        mle.fit(ISOTROPIC, ISOTROPIC.pack(alpha=-0.1, omega=1.0, sigma2=0.3, eta2=0.0), z, t)
    with pytest.raises(ValueError, match=r"theta0\[2\] \(sigma2\) must be > 0"):
        mle.fit(ISOTROPIC, ISOTROPIC.pack(alpha=-0.1, omega=1.0, sigma2=-1.0, eta2=0.5), z, t)
    with pytest.raises(ValueError, match=r"theta0\[0\] \(alpha\) must be < 0"):
        mle.fit(ISOTROPIC, ISOTROPIC.pack(alpha=0.1, omega=1.0, sigma2=0.3, eta2=0.5), z, t)
    with pytest.raises(ValueError, match="theta0 must have 4 entries"):
        mle.fit(ISOTROPIC, good[:3], z, t)
    with pytest.raises(ValueError, match="z must have shape"):
        mle.fit(ISOTROPIC, good, z[..., :1], t)
    with pytest.raises(ValueError, match="t must have shape"):
        mle.fit(ISOTROPIC, good, z, t[:-1])
    with pytest.raises(ValueError, match="mask must have shape"):
        mle.fit(ISOTROPIC, good, z, t, mask=np.ones((4, 5), dtype=bool))
    with pytest.raises(TypeError, match="mask must be boolean"):
        mle.fit(ISOTROPIC, good, z, t, mask=np.ones((4, 6)))
    z_nan = z.copy()
    z_nan[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        mle.fit(ISOTROPIC, good, z_nan, t)
    with pytest.raises(ValueError, match="prior must be"):
        mle.fit(ISOTROPIC, good, z, t, prior="flat")
    with pytest.raises(ValueError, match="gradient must be one of"):
        mle.fit(ISOTROPIC, good, z, t, gradient="exact")
    with pytest.raises(ValueError, match="max_iter must be >= 1"):
        mle.fit(ISOTROPIC, good, z, t, max_iter=0)
    with pytest.raises(TypeError, match="family must be"):
        mle.fit("isotropic", good, z, t)
    with pytest.raises(TypeError, match=r"must return \(sde_sim.LinearSDE"):
        mle.fit(lambda th: ISOTROPIC.build(th)[0], good, z, t)
    with pytest.raises(ValueError, match="prior='stationary' needs a stable A"):
        unstable = mle.CustomFamily(
            lambda th: (LinearSDE([[th[0]]], [[1.0]]), LinearMeasurement.identity(1, 1.0)),
            ("real",),
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mle.fit(unstable, [0.5], z[..., :1], t, prior="stationary")
    with pytest.raises(ValueError, match="rotation 'rope' needs an even dim"):
        mle.IsotropicFamily(3)
    with pytest.raises(ValueError, match="rotation 'vector'"):
        mle.IsotropicFamily(2, rotation="vector")
    with pytest.raises(ValueError, match="names has 1 entries"):
        mle.CustomFamily(ISOTROPIC.build, ("real", "real"), ("a",))
    with pytest.raises(ValueError, match=r"constraints\[1\] must be one of"):
        mle.CustomFamily(ISOTROPIC.build, ("real", "nonnegative"))

"""KLA's information filter as Moebius + affine scans: every grouping against the recursion, the
moment form and `estimators.kalman`; the combine operators' algebra; long sequences; missing
tokens; readouts and bad input."""

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from estimators import scan
from estimators.closed_forms import kla
from estimators.kalman import GaussianPrior, kalman_filter
from sde_sim import LinearMeasurement, LinearSDE

U = np.finfo(float).eps / 2  # unit round-off
SCANS = scan.SCAN_METHODS


def _problem(seed, B=3, T=50, D=4, missing=0.1):
    """Random filters: OU steps from eq. (8), tokens, some missing (Lambda^v = 0), a prior.

    Ranges: a in [0.1, 2], p in [0.1, 2], dt = 0.1, k in [-1.5, 1.5], Lambda^v in [0.1, 5]
    (log-uniform), v ~ 2 N(0, 1), lam0 in [0.1, 10], eta0 ~ lam0 N(0, 1).
    """
    rng = np.random.default_rng(seed)
    a = np.exp(rng.uniform(np.log(0.1), np.log(2.0), D))
    p = rng.uniform(0.1, 2.0, D)
    a_bar, p_bar = kla.ou_discretisation(a, p, 0.1)
    k = rng.uniform(-1.5, 1.5, (B, T, D))
    lam_v = np.exp(rng.uniform(np.log(0.1), np.log(5.0), (B, T, D)))
    lam_v[rng.random((B, T, D)) < missing] = 0.0
    v = 2.0 * rng.standard_normal((B, T, D))
    lam0 = np.exp(rng.uniform(np.log(0.1), np.log(10.0), (B, D)))
    eta0 = lam0 * rng.standard_normal((B, D))
    return {"k": k, "value_precision": lam_v, "v": v, "a_bar": a_bar, "p_bar": p_bar}, {
        "lam0": lam0,
        "eta0": eta0,
    }


def _run(args, prior, method, **kw):
    return scan.kla_filter(*args.values(), **prior, method=method, **kw)


def _eta_scale(args, prior):
    """``sum_s |F_{s+1:t} b_s| + |F_{1:t} eta_0|``: the size of the terms summed into eta_t.

    All gates are > 0, so it is the information mean of the same filter with |k|, |v|, |eta0|.
    """
    absolute = dict(args, k=np.abs(args["k"]), v=np.abs(args["v"]))
    return scan.kla_filter(
        *absolute.values(), lam0=prior["lam0"], eta0=np.abs(prior["eta0"]), method="recursion"
    ).info_mean


# --- every grouping = the recursion = the moment form = estimators.kalman -------------------------


@pytest.mark.parametrize("method", SCANS)
@pytest.mark.parametrize("T", [1, 2, 7, 64, 257])
def test_scans_equal_the_sequential_information_filter(method, T):
    # Error budget (float64, u = 2^-53). Each Moebius combine multiplies entrywise nonnegative
    # matrices (no cancellation: <= 2u per entry) and divides by the trace (<= 2u more), so a
    # prefix of t leaves, in any grouping, carries <= 4(t + 1)u relative per entry and its
    # application to lam_0 3u more; the recursion's relative error is <= 4tu (its steps have
    # relative sensitivity <= 1). So |lam / lam_ref - 1| <= (8T + 7)u. The affine scan is fed
    # that precision path: each gate is then within (8T + 10)u, a product of <= T gates within
    # T(8T + 10)u, and eta within ~ (8T^2 + 13T)u of the sum of its terms' sizes. For T = 257:
    # lam 2.3e-13, eta 1.2e-10 (the bound; measured errors are ~ 1e-15).
    args, prior = _problem(T, T=T)
    ref = _run(args, prior, "recursion")
    got = _run(args, prior, method)
    lam_err = np.max(np.abs(got.precision / ref.precision - 1))
    assert lam_err <= (8 * T + 7) * U
    scale = _eta_scale(args, prior)
    eta_err = np.max(np.abs(got.info_mean - ref.info_mean) / scale)
    assert eta_err <= (8 * T**2 + 13 * T + 10) * U
    np.testing.assert_allclose(got.prior_precision, ref.prior_precision, rtol=(8 * T + 12) * U)
    assert got.stats.method == method


def test_recursion_matches_the_closed_form_steps():
    # the recursion is eq. (18)-(19) step for step: kla.precision_step and kla.affine_map
    args, prior = _problem(1, B=2, T=6, missing=0.3)
    res = _run(args, prior, "recursion")
    lam, eta = prior["lam0"], prior["eta0"]
    phi = args["k"] ** 2 * args["value_precision"]
    b = args["k"] * args["value_precision"] * args["v"]
    scale = _eta_scale(args, prior)
    for t in range(6):
        step = kla.affine_map(lam, args["a_bar"], args["p_bar"], b[:, t])
        eta = kla.affine_apply(step, eta)
        lam = kla.precision_step(lam, args["a_bar"], args["p_bar"], phi[:, t])
        # phi is rounded in another order ((k Lv) k vs k^2 Lv): <= 2u apart, then <= 4u per step
        np.testing.assert_allclose(res.precision[:, t], lam, rtol=8 * (t + 1) * U)
        # eta: gates within ~ 8(t + 1)u, summed terms relative to their size
        assert np.all(np.abs(res.info_mean[:, t] - eta) <= 12 * (t + 1) * U * scale[:, t])


@pytest.mark.parametrize("method", ["recursion", *SCANS])
def test_information_form_equals_the_moment_form(method):
    # The moment form's P = (1 - K k) P- cancels: 1 - K k = 1 / (1 + phi P-) is formed as a
    # difference and loses up to u phi P- relative per step. In `_problem`'s ranges
    # phi = k^2 Lambda^v <= 11.25 and P- <= max(1/lam0, p^2/(2a)) + p_bar <= max(10, 20) + 0.4,
    # so <= 230u per step; the filter's relative sensitivities are <= 1, so over T = 100 steps
    # <= 2.3e4 u ~ 5e-12 on P, and the means likewise relative to the size of their terms.
    # 1e-10 leaves a factor 20.
    args, prior = _problem(2, T=100)
    got = _run(args, prior, method)
    ref = scan.moment_filter(*args.values(), **prior)
    np.testing.assert_allclose(got.variance, ref.variance, rtol=1e-10)
    scale = _eta_scale(args, prior) / got.precision
    assert np.max(np.abs(got.mean - ref.mean) / scale) < 1e-10


def _kalman_per_channel(args, prior, t, mask):
    """`estimators.kalman.kalman_filter` on the 1-D LinearSDE ``dz = -a z dt + p dW`` of each
    channel with ``C = [[k]]``, ``R = [[1/Lambda^v]]``; the prior at the first token is the
    one-step prediction ``N(a_bar mu_0, a_bar^2 / lam0 + p_bar)`` from ``t = 0``."""
    a, p, k, lam_v, v = (args[n] for n in ("a", "p", "k_const", "lv_const", "v"))
    B, T, D = v.shape
    means, variances = np.empty((B, T, D)), np.empty((B, T, D))
    for d in range(D):
        sde = LinearSDE([[-a[d]]], [[p[d]]])
        meas = LinearMeasurement([[k[d]]], [[1.0 / lam_v[d]]])
        a_bar0, p_bar0 = kla.ou_discretisation(a[d], p[d], t[0])
        mu0 = prior["eta0"][:, d] / prior["lam0"][:, d]
        var0 = a_bar0**2 / prior["lam0"][:, d] + p_bar0
        for i in range(B):  # the prior differs per sequence
            res = kalman_filter(
                sde,
                meas,
                v[i, :, d : d + 1],
                t,
                prior=GaussianPrior(np.array([a_bar0 * mu0[i]]), np.array([[var0[i]]])),
                mask=mask[i],
            )
            means[i, :, d] = res.means[:, 0]
            variances[i, :, d] = res.covs[0, :, 0, 0]
    return means, variances


@pytest.mark.parametrize("irregular", [False, True])
def test_equals_estimators_kalman_with_exact_discretisation(irregular):
    # kalman_filter (Joseph form, expm/Van Loan steps, ~u-accurate a_bar, p_bar) against the
    # scan with eq. (8): both are within ~1e-12 of exact by the budgets above; 1e-10 allows
    # the Joseph form's extra products.
    rng = np.random.default_rng(3)
    B, T, D = 2, 40, 3
    a = rng.uniform(0.2, 2.0, D)
    p = rng.uniform(0.2, 1.5, D)
    k_c = np.array([1.0, -0.6, 1.4])
    lv_c = np.array([2.0, 0.5, 4.0])
    dt = rng.uniform(0.02, 0.5, T) if irregular else np.full(T, 0.1)
    t = np.cumsum(dt)
    a_bar, p_bar = kla.ou_discretisation(a, p, dt[:, None])  # (T, D): per-step OU laws
    v = rng.standard_normal((B, T, D))
    mask = rng.random((B, T)) > 0.2
    lam0 = rng.uniform(0.5, 3.0, (B, D))
    eta0 = rng.standard_normal((B, D))
    got = scan.kla_filter(
        k_c, lv_c, v, a_bar, p_bar, lam0=lam0, eta0=eta0, mask=mask, method="blelloch"
    )
    ref_args = {"a": a, "p": p, "k_const": k_c, "lv_const": lv_c, "v": v}
    means, variances = _kalman_per_channel(ref_args, {"lam0": lam0, "eta0": eta0}, t, mask)
    np.testing.assert_allclose(got.variance, variances, rtol=1e-10)
    np.testing.assert_allclose(got.mean, means, rtol=1e-10, atol=1e-12)


def test_steady_state_is_the_closed_form_fixed_point():
    # constant tokens: lam_t -> lam* (attractive, contraction mu_-/mu_+ per step); after
    # T = 400 steps the gap is far below round-off, leaving a few u per step of rounding.
    a_bar, p_bar = kla.ou_discretisation(np.array([0.5, 1.0, 2.0]), np.array([0.3, 1.0, 2.0]), 0.1)
    k, lam_v = np.array([1.0, 0.5, -2.0]), np.array([3.0, 0.2, 1.0])
    res = scan.kla_filter(
        k, lam_v, np.zeros((400, 3)), a_bar, p_bar, lam0=np.array([1e-3, 1.0, 1e3])
    )
    lam_star = kla.steady_state_precision(a_bar, p_bar, k**2 * lam_v)
    np.testing.assert_allclose(res.precision[-1], lam_star, rtol=1e-13)


def test_theorem_3_zero_process_noise_is_a_convolution():
    # p_bar = 0, lam0 = eta0 = 0: lam_t = sum_s a_bar^{-2(t-s)} phi_s and
    # eta_t = sum_s a_bar^{-(t-s)} b_s (seed 001 Thm 3, with a_bar the discretised decay).
    rng = np.random.default_rng(4)
    T, D = 30, 2
    a_bar = np.array([0.95, 0.8])
    k, lam_v, v = rng.normal(size=(T, D)), rng.uniform(0.5, 2.0, (T, D)), rng.normal(size=(T, D))
    phi, b = k**2 * lam_v, k * lam_v * v
    lag = np.arange(T)[:, None] - np.arange(T)[None, :]  # t - s
    causal = lag >= 0
    for method in SCANS:
        res = scan.kla_filter(k, lam_v, v, a_bar, 0.0, lam0=0.0, eta0=0.0, method=method)
        for d in range(D):
            kernel2 = np.where(causal, a_bar[d] ** (-2.0 * np.where(causal, lag, 0)), 0.0)
            kernel1 = np.where(causal, a_bar[d] ** (-1.0 * np.where(causal, lag, 0)), 0.0)
            np.testing.assert_allclose(res.precision[:, d], kernel2 @ phi[:, d], rtol=1e-13)
            scale = np.abs(kernel1) @ np.abs(b[:, d])
            assert np.max(np.abs(res.info_mean[:, d] - kernel1 @ b[:, d]) / scale) < 1e-13


# --- the combine operators: associativity and identity --------------------------------------------

POS = st.floats(1e-3, 1e3, allow_subnormal=False)


@st.composite
def mobius_elements(draw, kla_steps: bool):
    if kla_steps:  # a KLA step matrix (eq. (17))
        a_bar = draw(st.floats(0.05, 1.0))
        p_bar = draw(st.floats(0.0, 5.0, allow_subnormal=False))
        phi = draw(st.floats(0.0, 20.0, allow_subnormal=False))
        return scan.kla_leaves(a_bar, p_bar, phi)
    # any entrywise positive matrix (e.g. a renormalised prefix product)
    return scan.Mobius(*(np.float64(draw(POS)) for _ in range(4)))


MOBIUS = st.one_of(mobius_elements(kla_steps=True), mobius_elements(kla_steps=False))
AFFINE = st.tuples(st.floats(1e-3, 1e3), st.floats(-1e3, 1e3)).map(
    lambda fb: kla.AffineMap(np.float64(fb[0]), np.float64(fb[1]))
)


@given(MOBIUS, MOBIUS, MOBIUS)
def test_mobius_combine_is_associative(x, y, z):
    # Nonnegative entries: every product entry is a sum of two nonnegative products (<= 2u) and
    # the trace division adds <= 2u, so each side is within ~ 8u per entry of the exact
    # normalised product; the two groupings differ by <= 16u relative.
    left = scan.mobius_combine(scan.mobius_combine(x, y), z)
    right = scan.mobius_combine(x, scan.mobius_combine(y, z))
    np.testing.assert_allclose(np.array(left), np.array(right), rtol=16 * U, atol=0)


@given(MOBIUS)
def test_mobius_identity_on_both_sides(x):
    # I x = x I = x exactly (products with 1 and 0 are exact); normalising divides by tr x
    normed = np.array(x) / (x.alpha + x.delta)
    np.testing.assert_array_equal(np.array(scan.mobius_combine(scan.MOBIUS_IDENTITY, x)), normed)
    np.testing.assert_array_equal(np.array(scan.mobius_combine(x, scan.MOBIUS_IDENTITY)), normed)
    raw = scan.mobius_combine(scan.MOBIUS_IDENTITY, x, normalise=False)
    np.testing.assert_array_equal(np.array(raw), np.array(x))


@given(MOBIUS, MOBIUS, st.floats(0.0, 100.0))
def test_mobius_combine_is_composition_and_matches_the_closed_form(x, y, lam):
    # later o earlier applies earlier first; equal to kla.mobius_compose(normalise=True)
    combined = scan.mobius_combine(x, y)
    np.testing.assert_allclose(
        scan.mobius_apply(combined, lam),
        scan.mobius_apply(x, scan.mobius_apply(y, lam)),
        rtol=12 * U,
    )
    as_matrix = kla.mobius_compose(
        np.array(x).reshape(2, 2), np.array(y).reshape(2, 2), normalise=True
    )
    # both are within 3u per entry of the exact normalised product (matmul may round another
    # way, e.g. with fused multiply-adds)
    np.testing.assert_allclose(np.array(combined).reshape(2, 2), as_matrix, rtol=6 * U)


@given(AFFINE, AFFINE, AFFINE, st.floats(-100.0, 100.0))
def test_affine_combine_is_associative_with_identity(x, y, z, eta):
    left = scan.affine_combine(scan.affine_combine(x, y), z)
    right = scan.affine_combine(x, scan.affine_combine(y, z))
    np.testing.assert_allclose(left.f, right.f, rtol=4 * U)
    # b = f_x f_y b_z + f_x b_y + b_x in two groupings: <= 3u each relative to the terms' size
    size = abs(x.f * y.f * z.b) + abs(x.f * y.b) + abs(x.b)
    assert abs(left.b - right.b) <= 8 * U * size
    for out in (
        scan.affine_combine(kla.AFFINE_IDENTITY, x),
        scan.affine_combine(x, kla.AFFINE_IDENTITY),
    ):
        assert (out.f, out.b) == (x.f, x.b)  # exact
    composed = scan.affine_combine(x, y)
    np.testing.assert_allclose(
        composed.f * eta + composed.b, x.f * (y.f * eta + y.b) + x.b, rtol=1e-12, atol=1e-9
    )
    ref = kla.affine_compose(x, y)
    assert (composed.f, composed.b) == (ref.f, ref.b)


@given(st.integers(1, 40), st.integers(0, 2**32 - 1), st.sampled_from(SCANS))
def test_scan_order_exact_on_integer_matrices(T, seed, method):
    # Products of 0/1 matrices have integer entries < 2^T <= 2^40: every grouping is exact in
    # float64, so each prefix must equal M_t ... M_1 (later on the left) to the last bit.
    rng = np.random.default_rng(seed)
    mats = rng.integers(0, 2, (T, 2, 2)).astype(float)
    mats[:, 0, 0] = 1.0  # keep the products from vanishing
    elements = scan.Mobius(*(mats[:, i, j] for i in range(2) for j in range(2)))
    out = scan.associative_scan(
        functools.partial(scan.mobius_combine, normalise=False),
        elements,
        identity=scan.MOBIUS_IDENTITY,
        method=method,
    )
    prod = np.eye(2)
    for t in range(T):
        prod = mats[t] @ prod
        got = np.array([p[t] for p in out.prefix]).reshape(2, 2)
        np.testing.assert_array_equal(got, prod)


@given(st.integers(1, 3000))
def test_scan_depth_and_work(T):
    # Hillis-Steele: ceil(log2 T) levels, sum_j (T - 2^j) combines (O(T log T)); Blelloch:
    # 2 log2 n + 1 levels (n = 2^ceil(log2 T)) and 2(n - 1) + T combines (O(T), <= 5T).
    levels = int(np.ceil(np.log2(T))) if T > 1 else 0
    ones = (np.ones(T),) * 2
    hs = scan.associative_scan(scan.affine_combine, ones, method="hillis-steele").stats
    assert hs.depth == levels
    assert hs.combines == sum(T - 2**j for j in range(levels))
    bl = scan.associative_scan(
        scan.affine_combine, ones, identity=kla.AFFINE_IDENTITY, method="blelloch"
    ).stats
    assert bl.depth == 2 * levels + 1
    assert bl.combines == 2 * (2**levels - 1) + T <= 5 * T
    seq = scan.associative_scan(scan.affine_combine, ones, method="sequential").stats
    assert (seq.depth, seq.combines) == (T - 1, T - 1)


def test_associative_scan_along_another_axis():
    rng = np.random.default_rng(5)
    f, b = rng.uniform(0.5, 1.0, (3, 9, 2)), rng.normal(size=(3, 9, 2))
    ref = scan.associative_scan(scan.affine_combine, (f, b), method="sequential", axis=1).prefix
    for method in ("hillis-steele", "blelloch"):
        got = scan.associative_scan(
            scan.affine_combine, (f, b), identity=(1.0, 0.0), method=method, axis=1
        ).prefix
        np.testing.assert_allclose(got[0], ref[0], rtol=1e-14)
        np.testing.assert_allclose(got[1], ref[1], rtol=1e-13, atol=1e-14)


def test_leaves_are_the_closed_form_step_matrices():
    rng = np.random.default_rng(6)
    a_bar, p_bar, phi = rng.uniform(0.1, 1, 5), rng.uniform(0, 2, 5), rng.uniform(0, 5, (4, 5))
    leaves = scan.kla_leaves(a_bar, p_bar, phi)
    M = kla.mobius_matrix(a_bar, p_bar, phi)
    np.testing.assert_array_equal(np.stack(leaves, axis=-1).reshape(4, 5, 2, 2), M)


# --- long sequences -------------------------------------------------------------------------------


def test_long_sequences_stay_finite_and_exact():
    # T = 10^5 with p_bar > 0: the renormalised prefixes stay finite and the scans equal the
    # recursion. The errors do not grow like T: the filter forgets its past at the contraction
    # rate mu_-/mu_+ < 1 per step, so rounding from far back is damped (measured ~1e-15).
    T = 100_000
    args, prior = _problem(7, B=1, T=T, D=3, missing=0.2)
    ref = _run(args, prior, "recursion")
    assert np.all(np.isfinite(ref.precision)) and np.all(np.isfinite(ref.mean))
    for method in ("hillis-steele", "blelloch"):
        got = _run(args, prior, method)
        assert np.all(np.isfinite(got.precision)) and np.all(np.isfinite(got.mean))
        np.testing.assert_allclose(got.precision, ref.precision, rtol=1e-12)
        scale = _eta_scale(args, prior)
        assert np.max(np.abs(got.info_mean - ref.info_mean) / scale) < 1e-12


def test_unnormalised_products_overflow_on_long_sequences():
    # Without the trace division the prefix M_t ... M_1 grows like mu_+^t (mu_+ > 1 is M's
    # Perron root when phi > 0): for this channel (mu_+ ~ 1.095) float64 overflows after
    # ~ 709 / log(1.095) ~ 7.8e3 tokens, and lam = x / y becomes inf / inf = NaN.
    T = 100_000
    leaves = scan.kla_leaves(0.99, 0.01, np.ones(T))
    raw = functools.partial(scan.mobius_combine, normalise=False)
    with np.errstate(over="ignore", invalid="ignore"):
        plain = scan.associative_scan(raw, leaves, method="hillis-steele").prefix
        lam_plain = scan.mobius_apply(plain, 1.0)
    first_bad = int(np.argmax(~np.isfinite(lam_plain)))
    assert not np.isfinite(lam_plain[-1])
    assert 5_000 < first_bad < 10_000
    normed = scan.associative_scan(scan.mobius_combine, leaves, method="hillis-steele").prefix
    lam = scan.mobius_apply(normed, 1.0)
    assert np.all(np.isfinite(np.array(normed))) and np.all(np.isfinite(lam))
    np.testing.assert_allclose(lam[-1], kla.steady_state_precision(0.99, 0.01, 1.0), rtol=1e-12)


# --- missing tokens -------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["recursion", *SCANS])
def test_missing_tokens_three_ways(method):
    # Lambda^v = 0, mask False and NaN values under the mask are the same pure prediction
    args, prior = _problem(8, missing=0.0)
    B, T, D = args["v"].shape
    drop = np.random.default_rng(9).random((B, T)) < 0.3
    zeroed = dict(args, value_precision=np.where(drop[..., None], 0.0, args["value_precision"]))
    nan_values = dict(args, v=np.where(drop[..., None], np.nan, args["v"]))
    a = _run(zeroed, prior, method)
    b = _run(nan_values, prior, method, mask=~drop)
    c = _run(args, prior, method, mask=np.broadcast_to(~drop[..., None], (B, T, D)))
    for other in (b, c):
        np.testing.assert_array_equal(other.precision, a.precision)
        np.testing.assert_array_equal(other.info_mean, a.info_mean)


@pytest.mark.parametrize("method", ["recursion", *SCANS])
def test_all_tokens_missing_is_the_prior_prediction(method):
    # no evidence: P_t = a_bar^{2t} P_0 + p_bar (1 - a_bar^{2t}) / (1 - a_bar^2) and
    # mu_t = a_bar^t mu_0
    a_bar, p_bar, T = np.array([0.9, 0.5]), np.array([0.2, 1.0]), 25
    lam0, eta0 = np.array([4.0, 0.5]), np.array([2.0, -1.0])
    res = scan.kla_filter(
        1.0, 0.0, np.zeros((T, 2)), a_bar, p_bar, lam0=lam0, eta0=eta0, method=method
    )
    t = np.arange(1, T + 1)[:, None]
    P = a_bar ** (2 * t) / lam0 + p_bar * (1 - a_bar ** (2 * t)) / (1 - a_bar**2)
    np.testing.assert_allclose(res.variance, P, rtol=1e-13)
    np.testing.assert_allclose(res.mean, a_bar**t * eta0 / lam0, rtol=1e-13)


@pytest.mark.parametrize("method", ["recursion", *SCANS])
def test_diffuse_prior_before_the_first_token(method):
    # lam0 = 0 and the first two tokens missing: nothing is known (variance inf, mean NaN), then
    # the first token alone gives lam = k^2 Lambda^v and mu = v / k
    v = np.array([[np.nan], [np.nan], [3.0], [1.0]])
    res = scan.kla_filter(
        2.0,
        0.5,
        v,
        0.9,
        0.1,
        lam0=0.0,
        eta0=0.0,
        method=method,
        mask=np.array([False, False, True, True]),
    )
    assert np.all(np.isinf(res.variance[:2])) and np.all(np.isnan(res.mean[:2]))
    np.testing.assert_allclose(res.precision[2], 2.0)
    np.testing.assert_allclose(res.mean[2], 1.5, rtol=1e-15)
    assert np.all(np.isfinite(res.mean[2:]))


# --- readouts, shapes, bad input ------------------------------------------------------------------


def test_query_readout_and_unbatched_input():
    args, prior = _problem(10, B=1, T=12)
    q = np.random.default_rng(11).normal(size=(12, 4))
    batched = _run(args, prior, "blelloch", q=q)
    np.testing.assert_array_equal(batched.output, q * batched.mean)
    np.testing.assert_allclose(batched.output_variance, q**2 / batched.precision, rtol=4 * U)
    single = scan.kla_filter(
        *(x[0] if np.ndim(x) == 3 else x for x in args.values()),
        lam0=prior["lam0"][0],
        eta0=prior["eta0"][0],
        q=q,
    )
    assert single.mean.shape == (12, 4)
    np.testing.assert_array_equal(single.output, batched.output[0])
    no_query = _run(args, prior, "blelloch")
    assert no_query.output is None and no_query.output_variance is None


def test_state_expanded_slots_are_independent_channels():
    # App. A: N slots x D channels with k (T, N, 1) and values (T, 1, D) are N*D scalar filters
    rng = np.random.default_rng(12)
    T, N, D = 10, 3, 2
    k, lam_v, v = (
        rng.normal(size=(T, N, 1)),
        rng.uniform(0.5, 2, (T, 1, D)),
        rng.normal(size=(T, 1, D)),
    )
    a_bar, p_bar = rng.uniform(0.5, 1.0, (N, D)), rng.uniform(0.1, 1.0, (N, D))
    flat = scan.kla_filter(
        np.broadcast_to(k, (T, N, D)).reshape(T, N * D),
        np.broadcast_to(lam_v, (T, N, D)).reshape(T, N * D),
        np.broadcast_to(v, (T, N, D)).reshape(T, N * D),
        a_bar.reshape(-1),
        p_bar.reshape(-1),
    ).mean.reshape(T, N, D)
    for n in range(N):
        for d in range(D):
            one = scan.kla_filter(
                k[:, n],
                lam_v[:, 0, d : d + 1],
                v[:, 0, d : d + 1],
                a_bar[n, d],
                p_bar[n, d],
                method="recursion",
            )
            np.testing.assert_allclose(flat[:, n, d], one.mean[:, 0], rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"v": np.ones((3, 5, 4)), "k": np.ones((2, 5, 4))}, ValueError, "broadcast together"),
        ({"value_precision": -1.0}, ValueError, "value_precision must be >= 0"),
        ({"a_bar": 0.0}, ValueError, "a_bar must be > 0"),
        ({"p_bar": -0.1}, ValueError, "p_bar must be >= 0"),
        ({"a_bar": np.ones(3)}, ValueError, "a_bar must broadcast"),
        ({"k": np.full((2, 5, 4), np.nan)}, ValueError, "k has"),
        ({"v": np.full((2, 5, 4), np.nan)}, ValueError, "v has 40 NaN"),
        ({"lam0": -1.0}, ValueError, "lam0 must be >= 0"),
        ({"lam0": np.ones(3)}, ValueError, "lam0 must broadcast"),
        ({"lam0": 0.0, "eta0": 1.0}, ValueError, "eta0 must be 0 where lam0 = 0"),
        ({"method": "kogge-stone"}, ValueError, "method must be one of"),
        ({"mask": np.ones((2, 5))}, TypeError, "mask must be boolean"),
        ({"mask": np.ones((2, 4), dtype=bool)}, ValueError, "mask must have shape"),
        ({"v": np.ones((5,))}, ValueError, "tokens must have shape"),
        ({"v": np.array(["a"] * 4)}, TypeError, "v must be a real numeric array"),
    ],
)
def test_bad_input_names_the_argument(change, error, match):
    kw = {"k": 1.0, "value_precision": 1.0, "v": np.zeros((2, 5, 4)), "a_bar": 0.9, "p_bar": 0.1}
    kw.update(change)
    with pytest.raises(error, match=match):
        scan.kla_filter(**kw)


def test_moment_filter_needs_a_proper_prior():
    with pytest.raises(ValueError, match="lam0 must be > 0"):
        scan.moment_filter(1.0, 1.0, np.zeros((3, 2)), 0.9, 0.1, lam0=0.0)


def test_blelloch_needs_an_identity():
    with pytest.raises(ValueError, match="identity must be"):
        scan.associative_scan(scan.affine_combine, (np.ones(3), np.ones(3)), method="blelloch")

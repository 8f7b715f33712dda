"""Fuzz the float64 estimators (`estimators.*`): one raw input of a valid problem spoilt at a
time (non-finite, 1e300/1e-300, negative, empty, ragged, wrong type/dtype/rank), under the error
contract of `tests.fuzz.contract`; valid problems checked against their references (the dense
oracle for the Kalman filter and smoother, the Kalman filter for the recurrent filter at
``nu = inf``, for the causal batch MLE at ``Q = 0`` and for `fit.log_likelihood`, the general
batch MLE/IRLS/recurrent filter for the eigenbasis forms, the sequential scan for KLA's)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from estimators import fit as fitting
from estimators import irls as irls_mod
from estimators import mle, oracle, recurrent, rt_irls, scan
from estimators.kalman import GaussianPrior, kalman_filter, rts_smoother
from tests import strategies as S
from tests.fuzz.contract import expect, naming
from tests.fuzz.models import Problem, observed, oracle_prior, problems, spoilt_problems


def close(a, b, tol=1e-7, what=""):
    a, b = np.asarray(a, float), np.asarray(b, float)
    scale = 1.0 + np.max(np.abs(b), initial=0.0)
    err = np.max(np.abs(a - b), initial=0.0)
    assert err <= tol * scale, f"{what}: max error {err:.3g} (scale {scale:.3g})"


def _kf(p: Problem):
    return kalman_filter(p.sde(), p.measurement(), p.z, p.t, prior=p.prior(), mask=p.mask)


def _kf_finite(r, diffuse=False):
    """Everything the filter returns; with a diffuse prior the predictions at step 0 are NaN
    by design (there is nothing to predict from)."""
    pred, pred_covs = (
        (r.pred_means[..., 1:, :], r.pred_covs[:, 1:]) if diffuse else (r.pred_means, r.pred_covs)
    )
    return [
        ("means", r.means),
        ("covs", r.covs),
        ("pred_means", pred),
        ("pred_covs", pred_covs),
        ("log_likelihood", r.log_likelihood),
    ]


def _kf_reference(p: Problem):
    def check(r):
        m0, P0 = oracle_prior(p)
        obs = observed(p)
        for b in range(np.shape(p.z)[0]):
            fm, fc, sm, sc, ll = oracle.dense_filter_smoother(
                p.sde(), p.measurement(), np.nan_to_num(p.z[b]), p.t, m0, P0, obs[b]
            )
            close(r.means[b], fm, what="means")
            close(r.covs[r.group[b]], fc, what="covs")
            close(r.log_likelihood[b], ll, what="log_likelihood")
            s = rts_smoother(r)
            close(s.means[b], sm, what="smoothed means")
            close(s.covs[s.group[b]], sc, what="smoothed covs")

    return check


def test_kalman_filter_and_smoother(fuzz):
    def body(p: Problem):
        expect(
            "estimators.kalman.kalman_filter+rts_smoother",
            lambda: _kf(p),
            names=p.names,
            valid=p.spoilt is None,
            finite=lambda r: _kf_finite(r, diffuse=p.prior_cov is None),
            reference=_kf_reference(p) if p.spoilt is None else None,
            describe=p.describe(),
        )

    fuzz.run("kalman_filter", spoilt_problems(), body, ci=60, slow=700)


def test_rts_smoother_of_a_spoilt_result_is_refused_or_finite(fuzz):
    """`rts_smoother` takes a FilterResult: a wrong type or an edited field."""

    @st.composite
    def cases(draw):
        p = draw(problems())
        kind = draw(st.sampled_from(["none", "tuple", "dict", "nan-means", "valid"]))
        return p, kind

    def body(case):
        p, kind = case
        r = _kf(p)
        arg = {
            "none": None,
            "tuple": (1, 2),
            "dict": {"means": r.means},
            "nan-means": r._replace(means=np.full_like(r.means, np.nan)),
            "valid": r,
        }[kind]
        expect(
            "estimators.kalman.rts_smoother",
            lambda: rts_smoother(arg),
            names=("filtered", "FilterResult", "means"),
            valid=kind == "valid",
            finite=(lambda r: []) if kind == "nan-means" else None,  # NaN in, NaN out
            describe=kind,
        )

    fuzz.run("rts_smoother", cases(), body, ci=10, slow=100)


def test_recurrent_filter_at_nu_inf_is_the_kalman_filter(fuzz):
    @st.composite
    def cases(draw):
        return draw(spoilt_problems()), draw(st.sampled_from([math.inf, math.inf, 2.0, 0.5]))

    def body(case):
        p, nu = case

        def call():
            return recurrent.recurrent_filter(
                p.sde(), p.measurement(), p.z, p.t, nu=nu, prior=p.prior(), mask=p.mask
            )

        def reference(r):
            if math.isinf(nu):
                k = _kf(p)
                close(r.means, k.means, what="means vs kalman_filter")
                close(r.pred_means, k.pred_means, what="pred_means vs kalman_filter")

        expect(
            "estimators.recurrent.recurrent_filter",
            call,
            names=p.names,
            valid=p.spoilt is None,
            finite=lambda r: [("means", r.means), ("covs", r.covs), ("pred", r.pred_means)],
            reference=reference if p.spoilt is None else None,
            describe=f"{p.describe()}, nu={nu}",
        )

    fuzz.run("recurrent_filter", cases(), body, ci=40, slow=450)


def test_recurrent_filter_options(fuzz):
    names = ("nu", "weight", "n_iter", "tol", "damping")

    @st.composite
    def cases(draw):
        p = draw(problems(max_T=4))
        name = draw(st.sampled_from(names))
        bad = draw(S.scalar_spoils(extra=("rational", "student-t", 0, 10**9, 2)))
        return p, name, bad

    def body(case):
        p, name, bad = case
        expect(
            "estimators.recurrent.recurrent_filter",
            lambda: recurrent.recurrent_filter(
                p.sde(), p.measurement(), p.z, p.t, prior=p.prior(), mask=p.mask, **{name: bad}
            ),
            names=(name,),
            finite=lambda r: [("means", r.means), ("covs", r.covs)],
            describe=f"{name}={bad!r}",
        )

    fuzz.run("recurrent_filter_options", cases(), body, ci=20, slow=200)


def _mle_finite(r):
    used = r.n_used > 0
    prev = np.zeros_like(used)
    prev[..., 1:] = used[..., :-1]
    return [
        ("outputs", r.outputs[used]),
        ("covs", r.covs[used]),
        ("predictions", r.predictions[prev]),
    ]


def test_batch_mle(fuzz):
    """Causal and not; at Q = 0 the causal MLE is the Kalman filter from a diffuse prior."""

    @st.composite
    def cases(draw):
        p = draw(spoilt_problems(square=True))
        zero_noise = p.spoilt is None and draw(st.booleans())
        if zero_noise:
            p = p.replace(Q=np.zeros_like(p.Q))
        return p, draw(st.booleans()), zero_noise

    def body(case):
        p, causal, zero_noise = case

        def reference(r):
            if zero_noise and causal:
                k = kalman_filter(p.sde(), p.measurement(), p.z, p.t, mask=p.mask)
                close(r.states, k.means, tol=1e-6, what="states vs diffuse kalman_filter")

        expect(
            "estimators.mle.batch_mle",
            lambda: mle.batch_mle(p.sde(), p.measurement(), p.z, p.t, mask=p.mask, causal=causal),
            names=p.names,
            valid=p.spoilt is None,
            finite=_mle_finite,
            reference=reference if p.spoilt is None else None,
            describe=f"{p.describe()}, causal={causal}",
        )

    fuzz.run("batch_mle", cases(), body, ci=40, slow=450)


def test_irls(fuzz):
    @st.composite
    def cases(draw):
        p = draw(spoilt_problems(square=True, max_T=6))
        family = draw(st.sampled_from(["student-t", "rational", "exponential"]))
        return p, draw(st.sampled_from([1.0, 4.0])), family

    def body(case):
        p, nu, family = case
        expect(
            "estimators.irls.irls",
            lambda: irls_mod.irls(
                p.sde(),
                p.measurement(),
                p.z,
                p.t,
                nu=nu,
                family=family,
                mask=p.mask,
                max_iter=50,
            ),
            names=p.names,
            valid=p.spoilt is None,
            finite=_mle_finite,
            describe=f"{p.describe()}, nu={nu}, {family}",
        )

    fuzz.run("irls", cases(), body, ci=25, slow=300)


def test_mle_error_covariance(fuzz):
    @st.composite
    def cases(draw):
        p = draw(spoilt_problems(square=True, max_T=5, inputs=("A", "Q", "C", "R", "t")))
        return p.replace(mask=None), draw(st.booleans())

    def body(case):
        p, causal = case
        expect(
            "estimators.mle.mle_error_covariance",
            lambda: mle.mle_error_covariance(p.sde(), p.measurement(), p.t, causal=causal),
            names=p.names,
            valid=p.spoilt is None,
            describe=p.describe(),
        )

    fuzz.run("mle_error_covariance", cases(), body, ci=15, slow=150)


# ---- eigenbasis forms ---------------------------------------------------------------------

EIGEN_NAMES = {
    "eigenvalues": ("eigenvalues",),
    "S": ("S",),
    "process_variances": ("process_variances", "variances"),
    "measurement_variances": ("measurement_variances", "variances"),
    "z": ("z",),
    "t": ("t",),
}


EIGEN_PARTNERS = {
    "eigenvalues": ("S", "process_variances", "measurement_variances"),
    "S": ("eigenvalues", "process_variances", "measurement_variances", "z"),
    "process_variances": ("eigenvalues", "S"),
    "measurement_variances": ("eigenvalues", "S"),
    "z": ("t", "S"),
    "t": ("z",),
}


@st.composite
def eigen_cases(draw, spoil=True):
    """A diagonalizable 2-D spiral (or two real modes) with z, t; maybe one input spoilt."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()):
        a, w = rng.uniform(0.1, 1.0), rng.uniform(0.2, 2.0)
        lam = np.array([-a - 1j * w, -a + 1j * w])
        s = rng.normal(size=2) + 1j * rng.normal(size=2)
        S_ = np.stack([s, s.conj()], axis=1)
        q = np.full(2, rng.uniform(0.05, 1.0))
        r = np.full(2, rng.uniform(0.1, 1.0))
    else:
        lam = -rng.uniform(0.1, 1.0, size=2).astype(complex)
        S_ = (np.eye(2) + 0.3 * rng.normal(size=(2, 2))).astype(complex)
        q, r = rng.uniform(0.05, 1.0, size=2), rng.uniform(0.1, 1.0, size=2)
    T = draw(st.integers(1, 6))
    t = np.concatenate([[0.0], np.cumsum(rng.uniform(0.05, 0.5, size=T - 1))])
    z = rng.normal(size=(draw(st.integers(1, 3)), T, 2))
    raw = {
        "eigenvalues": lam,
        "S": S_,
        "process_variances": q,
        "measurement_variances": r,
        "z": z,
        "t": t,
    }
    name = kind = None
    if spoil and draw(st.floats(0, 1)) < 0.8:
        name = draw(st.sampled_from(sorted(raw)))
        kind, raw[name] = draw(
            S.spoilt(np.real_if_close(raw[name]) if name != "S" else raw[name].real)
        )
    return raw, name, kind


def _model(raw):
    return mle.DiagonalizableModel(
        raw["eigenvalues"], raw["S"], raw["process_variances"], raw["measurement_variances"]
    )


def test_eigen_batch_mle_and_irls_equal_the_general_forms(fuzz):
    @st.composite
    def cases(draw):
        return draw(eigen_cases()), draw(st.booleans()), draw(st.sampled_from([None, 2.0]))

    def body(case):
        (raw, name, kind), causal, nu = case
        valid = name is None

        def call():
            model = _model(raw)
            if nu is None:
                return mle.eigen_batch_mle(model, raw["z"], raw["t"], causal=causal)
            return irls_mod.eigen_irls(model, raw["z"], raw["t"], nu=nu, causal=causal)

        def reference(r):
            model = _model(raw)
            sde, meas = model.sde(), model.measurement()
            if nu is None:
                g = mle.batch_mle(sde, meas, raw["z"], raw["t"], causal=causal)
            else:
                g = irls_mod.irls(sde, meas, raw["z"], raw["t"], nu=nu, causal=causal)
            close(r.outputs[r.n_used > 0], g.outputs[g.n_used > 0], tol=1e-6, what="outputs")

        expect(
            "estimators.mle.eigen_batch_mle" if nu is None else "estimators.irls.eigen_irls",
            call,
            names=naming(name, kind, EIGEN_NAMES, EIGEN_PARTNERS),
            valid=valid,
            finite=_mle_finite,
            reference=reference if valid else None,
            describe=f"{name} spoilt ({kind})" if name else "valid",
        )

    fuzz.run("eigen_mle", cases(), body, ci=30, slow=300)


def test_eigen_recurrent_filter_equals_the_state_form(fuzz):
    def body(case):
        raw, name, kind = case

        def call():
            return recurrent.eigen_recurrent_filter(
                raw["eigenvalues"],
                raw["S"],
                raw["process_variances"],
                raw["measurement_variances"],
                raw["z"],
                raw["t"],
                nu=3.0,
            )

        def reference(r):
            model = _model(raw)
            g = recurrent.recurrent_filter(
                model.sde(), model.measurement(), raw["z"], raw["t"], nu=3.0
            )
            close(r.means, g.means, tol=1e-6, what="means vs recurrent_filter")

        expect(
            "estimators.recurrent.eigen_recurrent_filter",
            call,
            names=naming(name, kind, EIGEN_NAMES, EIGEN_PARTNERS),
            valid=name is None,
            finite=lambda r: [("means", r.means)],
            reference=reference if name is None else None,
            describe=f"{name} spoilt ({kind})" if name else "valid",
        )

    fuzz.run("eigen_recurrent_filter", eigen_cases(), body, ci=25, slow=250)


# ---- parameter fitting ---------------------------------------------------------------------


def test_fit_log_likelihood_is_the_kalman_log_likelihood(fuzz):
    """`fit.log_likelihood` of the isotropic family (RoPE, d = 2) at theta: z, t, theta spoilt."""

    @st.composite
    def cases(draw):
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        theta = np.array(
            [-rng.uniform(0.1, 1), rng.uniform(-2, 2), rng.uniform(0.05, 1), rng.uniform(0.1, 1)]
        )
        T = draw(st.integers(2, 8))
        t = np.concatenate([[0.0], np.cumsum(rng.uniform(0.05, 0.5, size=T - 1))])
        raw = {"theta": theta, "z": rng.normal(size=(2, T, 2)), "t": t}
        name = kind = None
        if draw(st.floats(0, 1)) < 0.8:
            name = draw(st.sampled_from(sorted(raw)))
            kind, raw[name] = draw(S.spoilt(raw[name]))
        return raw, name, kind

    family = fitting.IsotropicFamily(2, rotation="rope")

    def body(case):
        raw, name, kind = case

        def reference(value):
            sde, meas = family.build(np.asarray(raw["theta"]))
            k = kalman_filter(sde, meas, raw["z"], raw["t"])
            close(value, np.sum(k.log_likelihood), tol=1e-8, what="log-likelihood")

        expect(
            "estimators.fit.log_likelihood",
            lambda: fitting.log_likelihood(family, raw["theta"], raw["z"], raw["t"]),
            names=(name,) if name else (),
            valid=name is None,
            reference=reference if name is None else None,
            describe=f"{name} spoilt ({kind})" if name else "valid",
        )

    fuzz.run("fit_log_likelihood", cases(), body, ci=25, slow=250)


def test_fit(fuzz):
    """`fit` on short data: theta0, z, t spoilt; or valid (a finite result with finite errors)."""

    @st.composite
    def cases(draw):
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        T = draw(st.integers(3, 10))
        t = np.arange(T) * 0.3
        raw = {"theta0": np.array([-0.5, 0.5, 0.3, 0.5]), "z": rng.normal(size=(2, T, 2)), "t": t}
        name = kind = None
        if draw(st.floats(0, 1)) < 0.85:
            name = draw(st.sampled_from(sorted(raw)))
            kind, raw[name] = draw(S.spoilt(raw[name]))
        return raw, name, kind

    family = fitting.IsotropicFamily(2, rotation="rope")

    def body(case):
        raw, name, kind = case
        expect(
            "estimators.fit.fit",
            lambda: fitting.fit(family, raw["theta0"], raw["z"], raw["t"], max_iter=10),
            names=(name,) if name else (),
            finite=lambda r: [("params", r.params), ("log_likelihood", r.log_likelihood)],
            describe=f"{name} spoilt ({kind})" if name else "valid",
        )

    fuzz.run("fit", cases(), body, ci=6, slow=60)


# ---- KLA's scans ------------------------------------------------------------------------------


@st.composite
def kla_cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    B, T, D = draw(st.integers(1, 2)), draw(st.integers(1, 9)), draw(st.integers(1, 3))
    raw = {
        "k": rng.normal(size=(B, T, D)),
        "value_precision": rng.uniform(0.1, 2.0, size=(B, T, D)),
        "v": rng.normal(size=(B, T, D)),
        "a_bar": rng.uniform(0.3, 0.99, size=D),
        "p_bar": rng.uniform(0.01, 1.0, size=D),
        "lam0": 1.0,
        "eta0": 0.0,
    }
    name = kind = None
    if draw(st.floats(0, 1)) < 0.8:
        name = draw(st.sampled_from(sorted(raw)))
        if name in ("lam0", "eta0"):
            kind, raw[name] = "scalar", draw(S.scalar_spoils())
        else:
            kind, raw[name] = draw(S.spoilt(raw[name]))
    return raw, name, kind, draw(st.sampled_from(["blelloch", "hillis-steele", "recursion"]))


def test_kla_filter_scans_equal_the_sequential_one(fuzz):
    def body(case):
        raw, name, kind, method = case
        args = [raw[n] for n in ("k", "value_precision", "v", "a_bar", "p_bar")]

        def reference(r):
            seq = scan.kla_filter(*args, lam0=raw["lam0"], eta0=raw["eta0"], method="sequential")
            close(r.mean, seq.mean, tol=1e-9, what="mean")
            close(r.precision, seq.precision, tol=1e-9, what="precision")
            m = scan.moment_filter(*args, lam0=raw["lam0"], eta0=raw["eta0"])
            close(r.mean, m.mean, tol=1e-8, what="mean vs moment_filter")

        expect(
            "estimators.scan.kla_filter",
            lambda: scan.kla_filter(*args, lam0=raw["lam0"], eta0=raw["eta0"], method=method),
            names=(name,) if name else (),
            valid=name is None,
            reference=reference if name is None else None,
            describe=f"{name} spoilt ({kind}), {method}" if name else f"valid, {method}",
        )

    fuzz.run("kla_filter", kla_cases(), body, ci=30, slow=350)


def test_moment_filter(fuzz):
    def body(case):
        raw, name, kind, _ = case
        args = [raw[n] for n in ("k", "value_precision", "v", "a_bar", "p_bar")]
        expect(
            "estimators.scan.moment_filter",
            lambda: scan.moment_filter(*args, lam0=raw["lam0"], eta0=raw["eta0"]),
            names=(name,) if name else (),
            valid=name is None,
            describe=f"{name} spoilt ({kind})" if name else "valid",
        )

    fuzz.run("moment_filter", kla_cases(), body, ci=15, slow=200)


# ---- radial-tangential and directional estimators ----------------------------------------------

RT_SCALARS = ("mu_r", "mu_t", "sigma_r", "sigma_t", "eta_r", "eta_t")


@st.composite
def rt_cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d = draw(st.sampled_from([2, 3]))
    w = rng.normal(size=(d, d))
    raw = {
        "Omega": w - w.T,
        "mu_r": 0.2,
        "mu_t": 0.3,
        "sigma_r": 0.3,
        "sigma_t": 0.2,
        "eta_r": 0.3,
        "eta_t": 0.2,
    }
    T = draw(st.integers(1, 6))
    raw["t"] = np.concatenate([[0.0], np.cumsum(rng.uniform(0.05, 0.4, size=T - 1))])
    direction = rng.normal(size=(draw(st.integers(1, 2)), T, d))
    raw["z"] = direction * rng.uniform(0.5, 2.0, size=(*direction.shape[:2], 1))
    name = kind = None
    if draw(st.floats(0, 1)) < 0.8:
        name = draw(st.sampled_from(sorted(raw)))
        if name in RT_SCALARS:
            kind, raw[name] = "scalar", draw(S.scalar_spoils())
        else:
            kind, raw[name] = draw(S.spoilt(raw[name]))
    which = draw(st.sampled_from(["rt_mle", "rt_irls", "directional_mle", "directional_irls"]))
    return raw, name, kind, which


def _defined_rows(r):
    """The RT/directional estimates where the result says they are defined (NaN elsewhere by
    design: no key carries weight, or a resultant too small to give a direction)."""
    rows = np.asarray(r.defined, dtype=bool)
    return [
        (f, getattr(r, f)[rows])
        for f in ("means", "magnitudes", "directions", "resultant")
        if f in r._fields
    ]


def test_rt_and_directional_estimators(fuzz):
    def body(case):
        raw, name, kind, which = case

        def call():
            model = rt_irls.RTModel(raw["Omega"], *(raw[n] for n in RT_SCALARS))
            fn = getattr(rt_irls, which)
            extra = {"nu": 2.0} if which == "directional_irls" else {}
            if which == "rt_irls":
                extra = {"nu_r": 2.0, "nu_t": 2.0, "max_iter": 30}
            return fn(model, raw["z"], raw["t"], **extra)

        expect(
            f"estimators.rt_irls.{which}",
            call,
            names=naming(name, kind, {}, {"z": ("t",), "t": ("z",), "Omega": ("z",)}),
            valid=name is None,
            describe=f"{name} spoilt ({kind})" if name else "valid",
            finite=_defined_rows,
        )

    fuzz.run("rt_irls", rt_cases(), body, ci=30, slow=350)


# ---- the dense oracle itself -------------------------------------------------------------------


def test_oracle(fuzz):
    def body(p: Problem):
        def call():
            obs = observed(p)[0]
            return oracle.dense_filter_smoother(
                p.sde(),
                p.measurement(),
                np.asarray(p.z)[0] if np.ndim(p.z) == 3 else p.z,
                p.t,
                p.prior_mean,
                p.prior_cov,
                obs,
            )

        expect(
            "estimators.oracle.dense_filter_smoother",
            call,
            names=p.names,
            valid=p.spoilt is None,
            describe=p.describe(),
        )

    fuzz.run(
        "oracle",
        spoilt_problems(inputs=("A", "Q", "C", "R", "t", "prior_mean", "prior_cov", "z"), max_B=1),
        body,
        ci=15,
        slow=150,
    )


def test_gaussian_prior_time_after_the_first_measurement_is_refused():
    p = Problem(
        np.array([[-1.0]]),
        np.eye(1),
        None,
        np.eye(1),
        np.eye(1),
        None,
        0.0,
        np.zeros((4, 1)),
        np.arange(4.0),
        None,
        np.zeros(1),
        np.eye(1),
        0.5,
    )
    for fn in (kalman_filter, recurrent.recurrent_filter):
        expect(
            f"estimators.{fn.__module__.split('.')[-1]}.{fn.__name__}",
            lambda fn=fn: fn(p.sde(), p.measurement(), p.z, p.t, prior=p.prior()),
            names=("prior.time",),
        )
    assert GaussianPrior(None, None).cov is None


def test_associative_scan_groupings_agree(fuzz):
    """`scan.associative_scan` with the affine operator: the three groupings give the
    sequential fold's result; spoilt elements, identity, method or axis are refused by name."""

    @st.composite
    def cases(draw):
        rng = np.random.default_rng(draw(st.integers(0, 999)))
        T = draw(st.integers(1, 9))
        raw = {"gates": rng.uniform(0.2, 0.9, size=(T, 2)), "b": rng.normal(size=(T, 2))}
        name = kind = None
        method = draw(st.sampled_from(["blelloch", "hillis-steele", "sequential"]))
        spoil = draw(st.sampled_from([None, None, "gates", "b", "method", "identity", "axis"]))
        identity, axis = (1.0, 0.0), 0
        if spoil in ("gates", "b"):
            name = spoil
            kind, raw[name] = draw(S.spoilt(raw[name]))
        elif spoil == "method":
            name, kind, method = "method", "choice", draw(st.sampled_from(["", "fast", None]))
        elif spoil == "identity":
            name, kind, identity = "identity", "value", draw(st.sampled_from([None, (1.0,), "x"]))
        elif spoil == "axis":
            name, kind, axis = "axis", "value", draw(st.sampled_from([5, -9, 1.5, "0"]))
        return raw, method, identity, axis, name, kind

    def body(case):
        raw, method, identity, axis, name, kind = case

        def call():
            out = scan.associative_scan(
                scan.affine_combine,
                (raw["gates"], raw["b"]),
                identity=identity,
                method=method,
                axis=axis,
            )
            return out[0] if isinstance(out, tuple) and not hasattr(out, "_fields") else out

        def reference(r):
            seq = scan.associative_scan(
                scan.affine_combine, (raw["gates"], raw["b"]), method="sequential"
            )
            for a, b in zip(r[0], seq[0], strict=True):
                close(a, b, 1e-12, "vs sequential")

        words = {"gates": ("elements", "elements[0]"), "b": ("elements", "elements[1]")}
        nan_in = kind in ("nan", "inf", "-inf")  # data: NaN in, NaN out (a generic scan)
        expect(
            "estimators.scan.associative_scan",
            call,
            finite=(lambda r: []) if nan_in else None,
            names=naming(name, kind, words, {"gates": ("b",), "b": ("gates",)}),
            valid=name is None,
            reference=reference if name is None else None,
            describe=f"{name} spoilt ({kind})" if name else "valid",
        )

    fuzz.run("associative_scan", cases(), body, ci=20, slow=200)


def test_fit_score(fuzz):
    """`fit.score` (Fisher's identity) at valid and spoilt theta: finite or refused by name."""
    family = fitting.IsotropicFamily(2, rotation="rope")

    @st.composite
    def cases(draw):
        rng = np.random.default_rng(draw(st.integers(0, 999)))
        T = draw(st.integers(2, 6))
        raw = {
            "theta": np.array([-0.4, 0.7, 0.3, 0.5]),
            "z": rng.normal(size=(2, T, 2)),
            "t": np.arange(T) * 0.3,
        }
        name = kind = None
        if draw(st.floats(0, 1)) < 0.7:
            name = draw(st.sampled_from(sorted(raw)))
            kind, raw[name] = draw(S.spoilt(raw[name]))
        return raw, name, kind

    def body(case):
        raw, name, kind = case
        expect(
            "estimators.fit.score",
            lambda: fitting.score(family, raw["theta"], raw["z"], raw["t"], prior="diffuse"),
            names=naming(name, kind, {}, {"z": ("t",), "t": ("z",)}),
            valid=name is None,
            describe=f"{name} spoilt ({kind})" if name else "valid",
        )

    fuzz.run("fit_score", cases(), body, ci=10, slow=100)

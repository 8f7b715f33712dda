"""Checks of the unitary limit alpha = 0 and its rotary reading (seed 000 3.6-3.8)."""

from __future__ import annotations

import functools

import numpy as np
import sympy as sp
from scipy.linalg import expm

from estimators.closed_forms import measurement as meas
from estimators.closed_forms import unitary
from sde_sim import BrownianPath, LinearMeasurement, LinearSDE, TimeGrid, simulate_exact
from sde_sim.models import real_from_eigen, rotation_generator
from verify.registry import Outcome, check, seed
from verify.tools import (
    lag_grid,
    matrix_identity_residual,
    random_eigensystem,
    relative_error,
    symbolic_residual,
    whitened_scores,
)

SIGMA_LEVEL = 5.0


# --- symbolic ---------------------------------------------------------------------------------


@check(
    "unitary.sec3.8-kernel",
    title="printed 3.8: lim_{a->0} (1 - e^{2a dt tau})/(-2a) = dt tau, so sigma_V^2 = |c|^2 s^2 dt "
    "tau + eta^2 (causal and non-causal); V = s^2 |dt| S S^H solves the DLE when Lambda^H = "
    "-Lambda",
    source=seed(0, "3.8, A.3"),
    kind="symbolic",
    tolerance=0.0,
)
def _sec38_kernel(quick: bool) -> float:
    """The printed unitary kernel holds (it uses the corrected 3.6 exponent ``e^{+2 a dt tau}``)."""
    alpha = sp.symbols("alpha", real=True)
    c2, sigma2, eta2, x, s = sp.symbols("c2 sigma2 eta2 x s", positive=True)  # x = dt tau
    printed = c2 * sigma2 * x + eta2
    causal = c2 * sigma2 * (1 - sp.exp(2 * alpha * x)) / (-2 * alpha) + eta2 * sp.exp(2 * alpha * x)
    non_causal = c2 * sigma2 * (sp.exp(-2 * alpha * x) - 1) / (-2 * alpha)
    non_causal += eta2 * sp.exp(-2 * alpha * x)
    # matrix DLE at alpha = 0: Omega = S L S^-1 with L^H = -L, V(s) = sigma2 s S S^H
    d = 2
    S, L = sp.MatrixSymbol("S", d, d), sp.MatrixSymbol("L", d, d)
    Omega, Omega_T = S * L * S.I, S.I.adjoint() * (-L) * S.adjoint()  # Omega^T = Omega^H
    V = sigma2 * s * S * S.adjoint()
    dle_residual = sp.diff(sigma2 * s, s) * S * S.adjoint() - (
        Omega * V + V * Omega_T + sigma2 * S * S.adjoint()
    )
    structural = matrix_identity_residual(dle_residual, (S, L))
    return max(
        symbolic_residual(sp.limit((1 - sp.exp(2 * alpha * x)) / (-2 * alpha), alpha, 0) - x),
        symbolic_residual(sp.limit(causal, alpha, 0) - printed),
        symbolic_residual(sp.limit(non_causal, alpha, 0) - printed),
        structural,
    )


@check(
    "unitary.rotary-identities",
    title="pair rotation (cos x0 + sin x1, cos x1 - sin x0) = e^{-iwt}(x0 + i x1); <R(t_i)q, "
    "R(t_j)k> = <q, R(t_j - t_i)k> = Re(conj(q) k e^{iw(t_i - t_j)}): relative position only",
    source=seed(0, "3.6 (Phi~^-), 3.8 (RoPE)"),
    kind="symbolic",
    tolerance=0.0,
)
def _rotary_identities(quick: bool) -> float:
    w, ti, tj, q0, q1, k0, k1, x0, x1 = sp.symbols("w t_i t_j q0 q1 k0 k1 x0 x1", real=True)

    def rot(a, b, t):  # unitary.rotate_pairs on one pair
        return sp.cos(w * t) * a + sp.sin(w * t) * b, sp.cos(w * t) * b - sp.sin(w * t) * a

    z = sp.expand(sp.exp(-sp.I * w * ti) * (x0 + sp.I * x1), complex=True)
    rx = rot(x0, x1, ti)
    rq, rk = rot(q0, q1, ti), rot(k0, k1, tj)
    score = rq[0] * rk[0] + rq[1] * rk[1]
    pulled = rot(k0, k1, tj - ti)
    # Re(conj(q) k e^{i theta}) with conj(q) k = (q0 k0 + q1 k1) + i (q0 k1 - q1 k0)
    theta = w * (ti - tj)
    complex_form = (q0 * k0 + q1 * k1) * sp.cos(theta) - (q0 * k1 - q1 * k0) * sp.sin(theta)

    def exp_form(expr):  # trigonometric identities become polynomial ones in e^{i w t}
        return sp.expand(expr.rewrite(sp.exp))

    return max(
        symbolic_residual(sp.re(z) - rx[0]),
        symbolic_residual(sp.im(z) - rx[1]),
        symbolic_residual(exp_form(score - (q0 * pulled[0] + q1 * pulled[1]))),
        symbolic_residual(exp_form(score - complex_form)),
    )


@check(
    "unitary.score-expansion",
    title="3.8: unit rows give |R|^2 = 2(1 - x); L = -log(nu V + 2 - 2x) ~ -log(nu V + 2) + "
    "2x/(nu V + 2) to first order in x; at sigma^2 = 0, e^L ~ (tau/2) e^{tau x}, tau = "
    "2/(nu eta^2 + 2)",
    source=seed(0, "3.7, 3.8"),
    kind="symbolic",
    tolerance=0.0,
)
def _score_expansion(quick: bool) -> float:
    nu, V, eta2 = sp.symbols("nu V eta2", positive=True)
    x, E = sp.symbols("x E", real=True)
    residual_37 = 1 + E**2 - 2 * E * x  # 3.7, unit-norm rows; E = e^{alpha (t_i - t_j)}
    L = -sp.log(nu * V + 2 - 2 * x)
    taylor = L.subs(x, 0) + sp.diff(L, x).subs(x, 0) * x
    printed = -sp.log(nu * V + 2) + 2 * x / (nu * V + 2)
    tau = 2 / (nu * eta2 + 2)
    return max(
        symbolic_residual(residual_37.subs(E, 1) - 2 * (1 - x)),
        symbolic_residual(taylor - printed),
        symbolic_residual(sp.exp(printed.subs(V, eta2)) - tau / 2 * sp.exp(tau * x)),
    )


def _sec37_forms():
    alpha = sp.symbols("alpha", real=True)
    nu, c2, sigma2, eta2, y = sp.symbols("nu c2 sigma2 eta2 y", positive=True)  # y = -dt_ij >= 0
    x = sp.symbols("x", real=True)
    E = sp.exp(alpha * y)  # e^{-alpha dt_ij} = e^{alpha (t_i - t_j)} for a causal pair
    V = c2 * sigma2 * (1 - E**2) / (-2 * alpha) + eta2 * E**2  # causal sigma_V^2 (A.3)
    correct = nu * V + 1 + E**2 - 2 * E * x
    printed = nu * c2 * sigma2 * (1 - E**2) / (-2 * alpha) + eta2 * E**2 + 1 + E**2 - 2 * E * x
    k = nu * c2 * sigma2 / (-2 * alpha)
    printed_ab = (1 + k) + (1 + eta2 - k) * E**2 - 2 * E * x
    corrected_ab = (1 + k) + (1 + nu * eta2 - k) * E**2 - 2 * E * x
    return (alpha, nu, c2, sigma2, eta2, y, x), correct, printed, printed_ab, corrected_ab


def _shown_sec37(which: int) -> str:
    """SymPy's LaTeX of ``nu V^C + |R|^2`` in the a + b E^2 - 2E x form: as printed (3) or
    corrected (4); ``y = -dt_ij``."""
    forms = _sec37_forms()
    _, _, c2, sigma2, eta2, y, _ = forms[0]
    names = {c2: "|c|^2", sigma2: r"\sigma^2", eta2: r"\eta^2", y: r"(-\Delta t_{ij})"}
    return r"\nu V^C + |R|^2 = " + sp.latex(forms[which], symbol_names=names)


@check(
    "unitary.printed-sec3.7-denominator",
    title="PRINTED 3.7: nu V^C + |R|^2 = nu|c|^2 s^2 (1-E^2)/(-2a) + eta^2 E^2 + ... = a + b E^2 - "
    "2E x with b = 1 + eta^2 - nu|c|^2 s^2/(-2a): the eta^2 term lacks its factor nu",
    source=seed(0, "3.7 (denominator, a and b)"),
    kind="symbolic",
    tolerance=0.0,
    expect="fails",
    printed=functools.partial(_shown_sec37, 3),
    corrected=functools.partial(_shown_sec37, 4),
    correction="unitary.corrected-sec3.7-denominator",
)
def _printed_sec37(quick: bool) -> Outcome:
    """``nu V^C`` multiplies the measurement term too: ``nu eta^2 E^2``.

    So ``b = 1 + nu eta^2 - nu |c|^2 sigma^2 / (-2 alpha)``. The residual is ``(1 - nu) eta^2
    E^2``, zero only at ``nu = 1``. 3.8 uses the corrected ``nu eta^2`` (its temperature
    ``2 / (nu eta^2 + 2)``).
    """
    _, correct, printed, printed_ab, _ = _sec37_forms()
    return Outcome(
        max(
            symbolic_residual(sp.expand(printed - correct)),
            symbolic_residual(sp.expand(printed_ab - correct)),
        ),
        "residual (1 - nu) eta^2 E^2",
    )


@check(
    "unitary.corrected-sec3.7-denominator",
    title="corrected 3.7: nu V^C + |R|^2 = a + b E^2 - 2E x with a = 1 + nu|c|^2 s^2/(-2a), "
    "b = 1 + nu eta^2 - nu|c|^2 s^2/(-2a); alpha -> 0 gives 3.8's nu(|c|^2 s^2 |dt| + eta^2) "
    "+ 2 - 2x",
    source=seed(0, "3.7, 3.8"),
    kind="symbolic",
    tolerance=0.0,
)
def _corrected_sec37(quick: bool) -> float:
    (alpha, nu, c2, sigma2, eta2, y, x), correct, _, _, corrected_ab = _sec37_forms()
    limit_38 = nu * (c2 * sigma2 * y + eta2) + 2 - 2 * x
    return max(
        symbolic_residual(corrected_ab - correct),
        symbolic_residual(sp.limit(correct, alpha, 0) - limit_38),
    )


# --- numeric ----------------------------------------------------------------------------------


def _rotation_system(rng: np.random.Generator, d: int):
    """A = S diag(i w) S^-1 with a random non-unitary S (unitary only in the eigenbasis)."""
    _, S = random_eigensystem(rng, d)
    w = np.repeat(rng.uniform(0.2, 2.0, size=d // 2), 2) * np.tile([1.0, -1.0], d // 2)
    if d % 2:
        w = np.append(w, 0.0)  # a real column of S carries a zero eigenvalue
    lam = 1j * w
    return lam, S, real_from_eigen(lam, S)


@check(
    "unitary.kernel-vs-van-loan",
    title="alpha = 0 exactly: (|c|^2 s^2 |dt| + eta^2) S S^H = V^C from Van Loan and expm for "
    "Omega with any S, lags up to +-40 (linear growth, no saturation)",
    source=seed(0, "3.8, A.3 (Re(lambda) = 0 branch)"),
    kind="numeric",
    tolerance=1e-10,
)
def _kernel_vs_van_loan(quick: bool) -> Outcome:
    # Pure rotations: e^{+-A s} stay bounded by cond(S) <= 30, so Van Loan's doubling keeps the
    # error at a few k u (k <= 10 doublings over |dt| <= 40) times cond(S)^2 <= 900: ~1e-12;
    # tolerance 1e-10.
    rng = np.random.default_rng(21)
    worst = 0.0
    for _ in range(2 if quick else 30):
        d = int(rng.integers(2, 6))
        lam, S, A = _rotation_system(rng, d)
        SSH = (S @ S.conj().T).real
        sigma2, eta2, gain = rng.uniform(0.05, 1.0, size=3)
        dt = np.array([-40.0, -3.0, -0.2, 0.0, 0.2, 3.0, 40.0])
        numeric = meas.measurement_covariance(A, sigma2 * SSH, gain * np.eye(d), eta2 * SSH, dt)
        kernel = unitary.unitary_measurement_variance(dt, sigma2=sigma2, eta2=eta2, c_gain=gain)
        same = meas.isotropic_measurement_variance(0.0, sigma2, eta2, dt, c_gain=gain)
        worst = max(
            worst,
            relative_error(kernel[:, None, None] * SSH, numeric),
            relative_error(same, kernel),
        )
    return Outcome(worst, "random d in 2..5 (odd d: one zero eigenvalue)")


@check(
    "unitary.rotary-scores",
    title="RoPE real pairs: rotate_pairs = complex e^{-iwt} z; scores = <q_i, expm(-Omega(t_j - "
    "t_i)) k_j>; invariant to t -> t + 100; |R|^2 and logits = their definitions from expm",
    source=seed(0, "3.6, 3.8"),
    kind="numeric",
    tolerance=1e-12,
)
def _rotary_scores(quick: bool) -> Outcome:
    # Angles w t reach ~ 2 * 110: their rounding, u * 220 ~ 3e-14, bounds the cos/sin error;
    # expm of a skew 2m x 2m matrix is accurate to ~1e-14 relative. Tolerance 1e-12.
    rng = np.random.default_rng(22)
    worst = 0.0
    for _ in range(3 if quick else 30):
        m, T = int(rng.integers(1, 4)), int(rng.integers(2, 9))
        w = rng.uniform(-2.0, 2.0, size=m)
        Omega = rotation_generator(w)
        q, k = rng.normal(size=(2, 3, T, 2 * m))  # a batch of 3 heads
        t = np.sort(rng.uniform(0.0, 10.0, size=T))
        rotated = unitary.rotate_pairs(q, t, w)
        z = (q[..., 0::2] + 1j * q[..., 1::2]) * np.exp(-1j * w * t[:, None])
        worst = max(
            worst,
            relative_error(rotated[..., 0::2], z.real),
            relative_error(rotated[..., 1::2], z.imag),
        )
        pulled = expm(-Omega * (t[None, :] - t[:, None])[..., None, None])  # [i, j]
        pk = np.einsum("ijab,hjb->hija", pulled, k)  # key j pulled forward to t_i
        ref_scores = np.einsum("hia,hija->hij", q, pk)
        ref_res = np.sum((q[:, :, None, :] - pk) ** 2, axis=-1)
        scores = unitary.rotary_scores(q, k, t, w)
        shifted = unitary.rotary_scores(q, k, t + 100.0, w)
        kw = {"nu": rng.uniform(1.0, 8.0), "sigma2": rng.uniform(0.0, 1.0), "eta2": 0.3}
        lag = t[None, :] - t[:, None]
        ref_logits = -np.log(0.3 + kw["sigma2"] * np.abs(lag) + ref_res / kw["nu"])
        unit_q = q / np.linalg.norm(q, axis=-1, keepdims=True)
        unit_k = k / np.linalg.norm(k, axis=-1, keepdims=True)
        chordal = 2.0 * (1.0 - unitary.rotary_scores(unit_q, unit_k, t, w))
        worst = max(
            worst,
            relative_error(scores, ref_scores),
            relative_error(shifted, scores),
            relative_error(unitary.unitary_residual_norms(q, k, t, w), ref_res),
            relative_error(unitary.unitary_logits(q, k, t, w, **kw), ref_logits),
            relative_error(unitary.unitary_residual_norms(unit_q, unit_k, t, w), chordal),
        )
    return Outcome(worst, "m in 1..3 pairs, T in 2..8, 3 heads")


# --- statistical --------------------------------------------------------------------------------


@check(
    "unitary.linear-variance-growth",
    title="Monte Carlo, alpha = 0 (A = T Omega T^-1): Phi_z(dt) z_j - C x_i ~ N(0, (|c|^2 s^2 "
    "|dt| + eta^2) T T^T) for causal and non-causal lags up to +-3",
    source=seed(0, "3.8, A.1"),
    kind="statistical",
    tolerance=SIGMA_LEVEL,
)
def _linear_growth(quick: bool) -> Outcome:
    Tm = np.array([[1.0, 0.3, 0.0, 0.2], [0.0, 0.8, -0.2, 0.0], [0.1, 0.0, 1.2, 0.3], [0, 0, 0, 1]])
    A = Tm @ rotation_generator([0.7, 1.9]) @ np.linalg.inv(Tm)
    sigma2, eta2, gain = 0.05, 0.04, 1.5
    TT = Tm @ Tm.T  # = S S^H for the eigenbasis S = T S_Omega (S_Omega unitary)
    C = gain * np.eye(4)
    paths = 4000 if quick else 40_000
    dts = np.array([-3.0, -1.5, -0.05, 0.0, 0.05, 1.5, 3.0])
    times, i, js = lag_grid(3.0, dts)
    sde = LinearSDE.from_covariance(A, sigma2 * TT)
    x0 = np.random.default_rng(31).normal(size=(paths, 4))
    x = simulate_exact(sde, x0, BrownianPath(32, TimeGrid.from_times(times), paths, 4))
    xi = np.random.default_rng(33).standard_normal(x.shape)
    z = LinearMeasurement(C, eta2 * TT).observe(x, xi)
    Phi = meas.measurement_transition(A, C, dts)
    variances = unitary.unitary_measurement_variance(dts, sigma2=sigma2, eta2=eta2, c_gain=gain)
    worst = 0.0
    for n, j in enumerate(js):
        pulled = z[:, j] @ Phi[n].T
        scores = whitened_scores(pulled - x[:, i] @ C.T, variances[n] * TT)
        worst = max(worst, float(np.max(np.abs(scores))))
    return Outcome(worst, f"{paths} paths, lags {', '.join(f'{v:+.2f}' for v in dts)}; max |z|")

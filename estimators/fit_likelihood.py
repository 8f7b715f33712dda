"""The objective of the parameter MLE: the innovations log-likelihood and its score.

For a family ``theta -> (sde, measurement)`` (`estimators.fit_families`) and measurements ``z``
(B, T, k) of B independent sequences,

    log L(theta) = sum_b sum_k log N(z_bk; C m-_bk + b, S_k),   S_k = C P-_k C^T + R,

the innovations (prediction-error) decomposition of the exact likelihood that
`estimators.kalman.kalman_filter` returns per sequence (``log_likelihood``, summed here).
`Likelihood` holds the data and evaluates ``-log L`` and its gradient in the unconstrained
coordinates ``phi`` of the family (`estimators.fit_families`); `estimators.fit` optimises it.

Gradient. ``d log L / d phi`` is computed with Fisher's identity: the score of the observed
data is the posterior expectation of the complete-data score,
``E[d/dphi log p(x, z; phi) | z]``, and for a linear-Gaussian model that expectation needs
only the RTS-smoothed means and covariances (`estimators.kalman.rts_smoother`), the lag-one
smoothed cross-covariances and the derivatives of the step maps ``e^{Ah}``, ``int e^{As} ds u``,
``Q_d(h)`` and of ``C, b, R`` and the prior. Those model derivatives are cheap central
differences of the model map (no filtering); the expensive part, the filter and smoother, is
run once per gradient instead of twice per parameter. Where a covariance the identity inverts
(``Q_d``, ``R``, the prior covariance) is singular, the gradient falls back to central
differences of the log-likelihood (``gradient="auto"``). The prior terms use the filter's own
pieces (`estimators.linear_gaussian`): the diffuse start, and a fixed prior carried to the
first state by the core's `predict`.

Prior on the first state. ``"stationary"`` and a fixed `GaussianPrior` give the exact
likelihood when the data start from that law. ``"diffuse"`` (the filter's flat prior: the first
measurement fixes the state and adds no term) is the usual choice for one long sequence, but it
is not the likelihood of data whose first states come from a proper law: it takes ``x_0 | z_0``
to be ``N(P0 C^T R^-1 (z_0 - b), P0)``, the posterior under a flat prior, so the expected score
under the data is not zero. With many short sequences the estimate is then biased by an amount
fixed as the number of sequences grows (growing like its square root in standard errors) and
shrinking only with their length. Measured here: for ``A = -0.3 I + J``, ``sigma2 = 0.3``,
``eta2 = 0.5``, stationary starts, 200 sequences of 31 steps of 0.1, the diffuse estimate of
``log(-alpha)`` lies +4.4 standard errors from the truth on average over 20 datasets; the
stationary-prior estimate lies within 0.1 standard errors of it over 100. Give the initial law
when it is known.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import solve_continuous_lyapunov

from estimators import batch_input
from estimators import linear_gaussian as lg
from estimators.fit_families import from_unconstrained
from estimators.kalman import GaussianPrior, kalman_filter, rts_smoother
from sde_sim import LinearMeasurement, LinearSDE, linear_transition

PRIORS = ("diffuse", "stationary")
GRADIENTS = ("auto", "score", "numeric")

_EPS = np.finfo(float).eps
# Central differences of a function computed to relative accuracy ~u: the step u^(1/3) balances
# truncation (h^2) against round-off (u / h), both ~ u^(2/3) ~ 4e-11 relative.
_MODEL_STEP = _EPS ** (1.0 / 3.0)
# A covariance counts as singular for Fisher's identity (which inverts it) below this ratio of
# its smallest to largest eigenvalue: the identity's terms then cancel catastrophically.
_SINGULAR_RTOL = 1e-12
# Points whose (value, gradient) `Likelihood` remembers.
_CACHE_SIZE = 64


class _Pieces(NamedTuple):
    """A model at one parameter point, on the step sizes of the data."""

    sde: LinearSDE
    measurement: LinearMeasurement
    Phi: np.ndarray  # (S, d, d)
    offset: np.ndarray  # (S, d)
    Qd: np.ndarray  # (S, d, d)
    prior_mean: np.ndarray | None  # (d,) or (B, d) (diffuse: per sequence)
    prior_cov: np.ndarray | None  # (d, d)


class Likelihood:
    """``-log L(phi)`` of a family on fixed data, its gradient, and the model pieces they use.

    Parameters
    ----------
    family : a family (`estimators.fit_families.as_family`).
    z : (B, T, k) or (T, k) measurements (NaN allowed only where ``mask`` is False).
    t : (T,) shared or (B, T) per-sequence times (checked by the filter).
    mask : (B, T) or (T,) bool, True where observed; None for all.
    prior : ``"diffuse"``, ``"stationary"`` or a `GaussianPrior` (see `estimators.fit.fit`).

    ``evaluations`` counts the Kalman-filter passes.
    """

    def __init__(self, family, z, t, mask, prior):
        self.family = family
        self.constraints = tuple(family.constraints)
        self.prior = _check_prior(prior)
        # k is z's own last axis here; the filter checks it against the model's.
        data = batch_input.measurements(z, mask, None)
        self.z = data.zero_filled()  # (B, T, k)
        self.observed = data.observed  # (B, T)
        self.t = t
        self.evaluations = 0
        # Recent nll_and_grad results by point: BFGS and the Hessians revisit points.
        self._cache: dict = {}
        self._maps: dict = {}  # step maps by model and step sizes (see `pieces`)

    def counted(self) -> np.ndarray:
        """(B, T) the measurements that enter ``log L``: the observed ones, less the first of
        each sequence under a diffuse prior (it is the diffuse start and adds no term)."""
        counted = self.observed.copy()
        if self.prior == "diffuse":
            counted[:, 0] = False
        return counted

    # --- model -----------------------------------------------------------------------------

    def model(self, phi) -> tuple[LinearSDE, LinearMeasurement]:
        theta = from_unconstrained(phi, self.constraints)
        out = self.family.build(theta)
        if (
            not isinstance(out, tuple)
            or len(out) != 2
            or not isinstance(out[0], LinearSDE)
            or not isinstance(out[1], LinearMeasurement)
        ):
            raise TypeError(
                "the family's build(theta) must return (sde_sim.LinearSDE, "
                f"sde_sim.LinearMeasurement), got {type(out).__name__}"
            )
        return out

    def filter_prior(self, sde: LinearSDE) -> GaussianPrior | None:
        if isinstance(self.prior, GaussianPrior):
            return self.prior
        if self.prior == "diffuse":
            return None
        return GaussianPrior(*_stationary(sde))

    def run_filter(self, phi):
        sde, meas = self.model(phi)
        self.evaluations += 1
        prior = self.filter_prior(sde)
        fr = kalman_filter(sde, meas, self.z, self.t, prior=prior, mask=self.observed)
        return sde, meas, fr

    def nll(self, phi) -> float:
        return -float(np.sum(self.run_filter(phi)[2].log_likelihood))

    def pieces(self, phi, sizes: np.ndarray) -> _Pieces:
        sde, meas = self.model(phi)
        d = sde.dim
        if sizes.size:
            # Perturbing a measurement-only parameter leaves the SDE, and its step maps, as
            # they were: the maps are remembered by (A, Q, u, sizes).
            key = b"".join(a.tobytes() for a in (sde.A, sde.Q, sde.u, sizes))
            if key not in self._maps:
                if len(self._maps) >= _CACHE_SIZE:
                    self._maps.pop(next(iter(self._maps)))
                self._maps[key] = linear_transition(sde, sizes)
            Phi, offset, Qd = self._maps[key]
        else:
            Phi, offset, Qd = np.zeros((0, d, d)), np.zeros((0, d)), np.zeros((0, d, d))
        if isinstance(self.prior, GaussianPrior):
            mean, cov = self.propagated_prior(sde, meas)
        elif self.prior == "diffuse":
            mean, cov = _diffuse_prior(meas, self.z[:, 0])
        else:
            mean, cov = _stationary(sde, check=False)  # the filter at phi has checked A
        return _Pieces(sde, meas, Phi, offset, Qd, mean, cov)

    def propagated_prior(self, sde: LinearSDE, meas: LinearMeasurement):
        """A fixed prior ``N(mu, S)`` at ``prior.time``, carried to each first state time.

        ``N(F mu + c, F S F^T + Q_d)`` over ``h_b = t_b0 + delay - time`` per sequence: means
        (B, d) and covariances (B, d, d). (None, None) when the prior sits at the first state
        times (``time=None``, or ``h = 0``): it does not depend on the parameters then.
        """
        if self.prior.time is None:
            return None, None
        t = np.asarray(self.t, dtype=float)
        first = t[..., 0] if t.ndim == 2 else np.full(self.z.shape[0], t[0])
        h = np.broadcast_to(first + meas.delay - float(self.prior.time), (self.z.shape[0],))
        if not np.any(h):
            return None, None
        maps, cls = lg.step_maps(sde, h)
        d = sde.dim
        mu = np.zeros(d) if self.prior.mean is None else np.asarray(self.prior.mean, float)
        S = np.asarray(self.prior.cov, dtype=float)
        mean, cov = lg.predict(mu, S, maps.Phi, maps.offset, maps.Qd)
        return mean[cls], cov[cls]

    # --- derivatives ------------------------------------------------------------------------

    def nll_and_grad(self, phi, mode: str) -> tuple[float, np.ndarray, str]:
        key = (np.asarray(phi, dtype=float).tobytes(), mode)
        if key not in self._cache:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))  # oldest first
            self._cache[key] = self._nll_and_grad(phi, mode)
        value, grad, kind = self._cache[key]
        return value, grad.copy(), kind

    def _nll_and_grad(self, phi, mode: str) -> tuple[float, np.ndarray, str]:
        sde, meas, fr = self.run_filter(phi)
        value = -float(np.sum(fr.log_likelihood))
        if mode != "numeric":
            score = self.score(phi, fr)
            if score is not None:
                return value, -score, "score"
            if mode == "score":
                raise ValueError(
                    "gradient='score' needs invertible Q_d, R and prior covariance "
                    "(Fisher's identity inverts them); use gradient='numeric' or 'auto'"
                )
        return value, self.numeric_grad(phi), "numeric"

    def numeric_grad(self, phi) -> np.ndarray:
        h = _MODEL_STEP * np.maximum(1.0, np.abs(phi))
        g = np.empty(phi.size)
        for i in range(phi.size):
            e = np.zeros(phi.size)
            e[i] = h[i]
            g[i] = (self.nll(phi + e) - self.nll(phi - e)) / (2 * h[i])
        return g

    def score(self, phi, fr) -> np.ndarray | None:
        """``d log L / d phi`` by Fisher's identity, or None where a covariance is singular.

        With ``e_k = x_k - F_k x_{k-1} - c_k`` (``F_k = e^{A h_k}``, ``c_k`` the offset, ``W_k =
        Q_d(h_k)^-1``), ``r_k = z_k - C x_k - b`` (``V = R^-1``), the prior ``N(mu0, S0)``
        (``U = S0^-1``) and ``E`` the smoothed expectation, each derivative ``d`` is

            sum_k 1/2 tr(dQ_k (W E[e e^T] W - W)) + tr(dF_k^T W E[e x_{k-1}^T]) + dc_k^T W E[e]
          + sum_obs 1/2 tr(dR (V E[r r^T] V - V)) + tr(dC^T V E[r x^T]) + db^T V E[r]
          + 1/2 tr(dS0 (U E[(x_0 - mu0)(.)^T] U - U)) + dmu0^T U E[x_0 - mu0],

        ``E[e e^T] = e_bar e_bar^T + P_k - F P_{k,k-1}^T - P_{k,k-1} F^T + F P_{k-1} F^T``,
        ``E[e x_{k-1}^T] = e_bar m_{k-1}^T + P_{k,k-1} - F P_{k-1}``, ``E[r r^T] = r_bar
        r_bar^T + C P_k C^T``, ``E[r x^T] = r_bar m_k^T - C P_k``, with smoothed means ``m``,
        covariances ``P`` and lag-one cross-covariances ``P_{k,k-1} = P_k (P-_k)^-1 F_k
        Pf_{k-1}`` (the RTS gain). The diffuse start is the prior ``N(P0 C^T V (z_0 - b),
        P0)``, ``P0 = (C^T V C)^-1``, with the first measurement's term left out, as in the
        filter; a fixed prior at an earlier time is carried to the first state, ``N(F mu + c,
        F S F^T + Q_d)`` per sequence (`propagated_prior`). The sums run over the distinct
        step sizes (the terms are linear in the expectations, which are summed per step size
        first) and over sequences.
        """
        sr = rts_smoother(fr)
        B, T, d = sr.means.shape
        group = fr.group
        G = sr.covs.shape[0]
        counts = np.bincount(group, minlength=G).astype(float)
        first = np.unique(group, return_index=True)[1]
        if T > 1:
            sizes, sid = lg.step_classes(np.diff(fr.times[first], axis=1))  # (S,), (G, T-1)
        else:
            sizes, sid = np.zeros(0), np.zeros((G, 0), dtype=int)
        n = phi.size
        base = self.pieces(phi, sizes)
        h = _MODEL_STEP * np.maximum(1.0, np.abs(phi))
        deriv = []
        for i in range(n):
            e = np.zeros(n)
            e[i] = h[i]
            deriv.append(
                _difference(self.pieces(phi + e, sizes), self.pieces(phi - e, sizes), h[i])
            )
        inverse = _inverses(base)
        if inverse is None:
            return None
        W, V, U = inverse

        m = sr.means
        Ps = sr.covs
        score = np.zeros(n)
        # --- transitions x_{k-1} -> x_k, k >= 1 ---------------------------------------------
        if T > 1:
            S = sizes.size
            F = base.Phi[sid]  # (G, T-1, d, d)
            Pk, Pk1 = Ps[:, 1:], Ps[:, :-1]
            # Cov(x_k, x_{k-1} | all z) = Ps_k (P-_k)^-1 F_k Pf_{k-1} (RTS gain transposed)
            cross = Pk @ np.linalg.solve(
                fr.pred_covs[:, 1:], fr.transition[:, 1:] @ fr.covs[:, :-1]
            )
            Ft = lg.transpose(F)
            cov_e = Pk - F @ lg.transpose(cross) - cross @ Ft + F @ Pk1 @ Ft
            labels_b = sid[group]  # (B, T-1)
            Fb = F[group]
            ebar = m[:, 1:] - np.einsum("btij,btj->bti", Fb, m[:, :-1]) - base.offset[labels_b]
            cw = counts[:, None, None, None]
            M = _sum_by(labels_b, ebar[..., :, None] * ebar[..., None, :], S)
            M += _sum_by(sid, cw * cov_e, S)
            X = _sum_by(labels_b, ebar[..., :, None] * m[:, :-1, None, :], S)
            X += _sum_by(sid, cw * (cross - F @ Pk1), S)
            E = _sum_by(labels_b, ebar, S)
            cnt = _sum_by(sid, np.broadcast_to(counts[:, None], sid.shape), S)
            WMW = W @ M @ W
            WX, WE = W @ X, np.einsum("sij,sj->si", W, E)
            for i, dv in enumerate(deriv):
                score[i] += 0.5 * np.sum(dv.Qd * (WMW - cnt[:, None, None] * W))
                score[i] += np.sum(dv.Phi * WX) + np.sum(dv.offset * WE)
        # --- measurements ---------------------------------------------------------------------
        meas = base.measurement
        C, bias = meas.C, meas.b
        observed = self.counted()
        zc = np.where(observed[..., None], self.z, 0.0)
        r = np.where(observed[..., None], zc - m @ C.T - bias, 0.0)  # (B, T, k)
        gobs = observed[first]  # (G, T)
        SP = np.einsum("g,gt,gtij->ij", counts, gobs.astype(float), Ps)
        rows = r.reshape(-1, r.shape[-1])
        mrows = np.where(observed[..., None], m, 0.0).reshape(-1, d)
        Mr = rows.T @ rows + C @ SP @ C.T
        Xr = rows.T @ mrows - C @ SP
        Er = rows.sum(axis=0)
        nr = float(observed.sum())
        VMV, VX, VE = V @ Mr @ V, V @ Xr, V @ Er
        for i, dv in enumerate(deriv):
            score[i] += 0.5 * np.sum(dv.R * (VMV - nr * V))
            score[i] += np.sum(dv.C * VX) + np.sum(dv.b * VE)
        # --- prior on x_0 -------------------------------------------------------------------
        if U is not None and U.ndim == 2:  # one prior covariance for all sequences
            dev = m[:, 0] - base.prior_mean
            M0 = dev.T @ dev + np.einsum("g,gij->ij", counts, Ps[:, 0])
            UMU = U @ M0 @ U
            Udev = dev @ U
            for i, dv in enumerate(deriv):
                score[i] += 0.5 * np.sum(dv.prior_cov * (UMU - B * U))
                score[i] += np.sum(np.broadcast_to(dv.prior_mean, dev.shape) * Udev)
        elif U is not None:  # per sequence (a prior carried from its own time): U (B, d, d)
            dev = m[:, 0] - base.prior_mean
            M0 = dev[:, :, None] * dev[:, None, :] + Ps[group, 0]
            core = U @ M0 @ U - U
            Udev = np.einsum("bij,bj->bi", U, dev)
            for i, dv in enumerate(deriv):
                score[i] += 0.5 * np.sum(dv.prior_cov * core)
                score[i] += np.sum(dv.prior_mean * Udev)
        return score


class _Derivative(NamedTuple):
    Phi: np.ndarray
    offset: np.ndarray
    Qd: np.ndarray
    C: np.ndarray
    b: np.ndarray
    R: np.ndarray
    prior_mean: np.ndarray | None
    prior_cov: np.ndarray | None


def _difference(plus: _Pieces, minus: _Pieces, h: float) -> _Derivative:
    def diff(a, b):
        return None if a is None else (a - b) / (2.0 * h)

    mp, mm = plus.measurement, minus.measurement
    return _Derivative(
        diff(plus.Phi, minus.Phi),
        diff(plus.offset, minus.offset),
        diff(plus.Qd, minus.Qd),
        diff(mp.C, mm.C),
        diff(mp.b, mm.b),
        diff(mp.R, mm.R),
        diff(plus.prior_mean, minus.prior_mean),
        diff(plus.prior_cov, minus.prior_cov),
    )


def _inv_spd(M: np.ndarray) -> np.ndarray | None:
    """Inverse of a stack of SPD matrices, or None if one is (numerically) singular."""
    if M.size == 0:
        return M.copy()
    eigs = np.linalg.eigvalsh(M)
    if np.any(eigs[..., 0] <= _SINGULAR_RTOL * np.abs(eigs[..., -1])):
        return None
    inv = np.linalg.inv(M)
    return lg.sym(inv)


def _inverses(base: _Pieces):
    W = _inv_spd(base.Qd)
    V = _inv_spd(base.measurement.R)
    U = None if base.prior_cov is None else _inv_spd(base.prior_cov)
    if W is None or V is None or (base.prior_cov is not None and U is None):
        return None
    return W, V, U


def _sum_by(labels: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Sum of ``values`` (labels.shape + tail) over entries with equal label -> (size,) + tail."""
    tail = values.shape[labels.ndim :]
    if size == 1:
        return values.reshape(-1, *tail).sum(axis=0)[None]
    out = np.zeros((size, *tail))
    np.add.at(out, labels.ravel(), values.reshape(-1, *tail))
    return out


def _stationary(sde: LinearSDE, *, check: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Stationary law ``N(-A^-1 u, P)``, ``A P + P A^T + Q = 0`` (needs a Hurwitz A)."""
    growth = float(np.max(np.linalg.eigvals(sde.A).real)) if check else -1.0
    if growth >= 0:
        raise ValueError(
            f"prior='stationary' needs a stable A (every eigenvalue's real part < 0); the "
            f"largest real part is {growth:.4g}"
        )
    P = solve_continuous_lyapunov(sde.A, -sde.Q)
    return -np.linalg.solve(sde.A, sde.u), lg.sym(P)


def _diffuse_prior(meas: LinearMeasurement, z0: np.ndarray):
    """The filter's diffuse start as a prior: ``N(P0 C^T R^-1 (z_0 - b), P0)``,
    ``P0 = (C^T R^-1 C)^-1`` (`estimators.linear_gaussian.diffuse_covariance`).

    Returns (B, d) means (one per sequence) and P0 (d, d); None, None where the start is not
    defined (C without full column rank, R singular: the filter itself rejects that input).
    """
    try:
        P0 = lg.diffuse_covariance(meas)
    except ValueError:
        return None, None
    return lg.diffuse_mean(meas, z0, P0), P0


def _check_prior(prior):
    """``"diffuse"``, ``"stationary"`` or a proper `GaussianPrior` (one with ``cov=None`` is
    ``"diffuse"``)."""
    if isinstance(prior, GaussianPrior):
        return "diffuse" if prior.cov is None else prior
    if prior not in PRIORS:
        raise ValueError(f"prior must be 'diffuse', 'stationary' or a GaussianPrior; got {prior!r}")
    return prior

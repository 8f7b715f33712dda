"""Directional MLE and IRLS of a radial-tangential state (seed 003 eqs. 10-16, C.1-C.2, D.4).

On the model of `estimators.rt_model` (transported keys ``u^_ij = e^{Omega s_ij} u_z,j``, their
tangential variances ``sigma_Vt^2``). Conditioning on the observed magnitudes, each transported
direction is a tangent-plane Gaussian observation of ``u_i`` with directional precision (eq. 10)

    kappa_ij = ( (eta_t^2 + gamma_t^2) / (m_i^2 + eps)
                 + (sigma_Vt^2(dt_ij) + gamma_t^2) / (m^_ij^2 + eps) + tau_theta^2 )^-1

(``gamma_t`` enters both terms, as the seed writes it: digest section 8 item 8). This is eq. 10
as printed. As the variance of ``u_z,i - u^_ij`` it holds only for ``mu_t = mu_r``: the rotation
carries the key's measurement noise undamped, so the key's term is really ``sigma_t^2
phi(mu_t, dt) / m^_ij^2 + eta_t^2 / m_j^2`` (checks
``radial_tangential.corrected-c11-angular-var`` and the printed form's failure beside it);
the estimator keeps the seed's form. With
``d_ij^2 = 2 kappa_ij (1 - u . u^_ij) = kappa_ij |u - u^_ij|^2`` (eq. 11), the exact MLE (eq. 12)
maximises ``u . sum_j kappa_ij u^_ij`` on the sphere:

    u_i* = Norm(sum_j kappa_ij u^_ij) = Norm(u_bar_i),  u_bar_i = sum_j A_ij u^_ij,
    A_ij = kappa_ij / sum_j' kappa_ij'       (eq. 13; |u_bar| in [0, 1] is the mean resultant).

Robust reweighting (eq. 14) ``w_ij = (1 + d_ij^2 / nu)^-p``, ``kappa~ = w kappa``. The IRLS
``u^(k+1) = Norm(sum_j w_ij(u^(k)) kappa_ij u^_ij)`` is a majorise-minimise algorithm for the loss

    L_i(u) = (1/2) sum_j rho(d_ij^2(u)),   rho(x) = int_0^x (1 + y/nu)^-p dy,

(``rho`` is concave, so its tangent line majorises it, and the majoriser is minimised on the
sphere exactly by the normalised weighted sum): ``L_i`` never increases, and a fixed point is
stationary, ``P_T(u) sum_j w_ij kappa_ij u^_ij = 0``. The default ``p = 1`` is the Student-t
IRLS weight, whose ``nu -> inf`` limit is the MLE; seed 003's exponent ``p = (nu + d)/d``
(Alg. 1, `robust_weights.student_t_exponent`) tends to ``exp(-d^2 / d)`` instead (digest C25).
The geometric update of a state by the output (eqs. 15-16, C.2) is in `estimators.sphere`.

The names are public as ``estimators.rt_irls.<name>`` too, the entry point of the RT
estimators.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from estimators import batch_input, rt_model
from estimators.rt_model import INITS, RTModel
from estimators.sphere import angle, unit
from sde_sim import validation

ANCHORS = ("estimate", "query")


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


class DirectionalEstimate(NamedTuple):
    """Output of `directional_mle` and `directional_consensus` (eigen-coordinates).

    directions : (B, T, d) ``Norm(u_bar)`` (NaN where undefined).
    resultant : (B, T, d) ``u_bar = sum_j A_ij u^_ij`` (eq. 13), the attention output.
    resultant_length : (B, T) ``|u_bar|`` in [0, 1].
    precision : (B, T, T) ``kappa_ij`` (eq. 10), 0 outside the support.
    weights : (B, T, T) robust weights ``w_ij`` (eq. 14); for the MLE 1 on the support.
    defined : (B, T) False where no key carries weight or the resultant vanishes.
    """

    directions: np.ndarray
    resultant: np.ndarray
    resultant_length: np.ndarray
    precision: np.ndarray
    weights: np.ndarray
    defined: np.ndarray


class DirectionalIRLSResult(NamedTuple):
    """Output of `directional_irls`: `DirectionalEstimate`'s fields plus the convergence report.

    iterations : iterations run; converged : (B,) last angular change of every defined row
    <= tol; final_change : (B,) that largest angle (radians).
    """

    directions: np.ndarray
    resultant: np.ndarray
    resultant_length: np.ndarray
    precision: np.ndarray
    weights: np.ndarray
    defined: np.ndarray
    iterations: int
    converged: np.ndarray
    final_change: np.ndarray


# --------------------------------------------------------------------------------------------
# Directional MLE and IRLS (seed 003 eqs. 10-14, C.1, D.4)
# --------------------------------------------------------------------------------------------


class _DirectionalProblem:
    """Transported measured directions and their precisions ``kappa_ij`` (eq. 10)."""

    def __init__(self, model, z, t, mask, causal, tau_theta, eps):
        self.m = rt_model.check_model(model)
        self.data = rt_model.check_data(self.m, z, t, mask)
        self.pairs = rt_model.query_key_pairs(self.m, self.data, causal)
        tau_theta = validation.scalar("tau_theta", tau_theta, minimum=0.0)
        eps = validation.scalar("eps", eps, minimum=0.0)
        query_var = self.m.eta_t**2 + self.m.gamma_t**2  # sigma_Sigma_t^2(0)
        if query_var <= 0 and tau_theta <= 0:
            raise ValueError(
                "the directional precision is infinite at zero lag: give model.eta_t or "
                "model.gamma_t a positive value, or an angular floor tau_theta > 0"
            )
        self.magnitudes, self.directions = unit(self.data.z_s)
        self.precision = _directional_precision(
            self.magnitudes,
            self.pairs.decay,
            rt_model.variances(self.m, self.pairs).tangential,
            self.pairs.support,
            query_var=query_var,
            query_observed=self.data.observed,
            tau_theta=tau_theta,
            eps=eps,
        )
        self.transport = rt_model.Transport(self.m.Omega, self.data.t)
        self.keys = self.transport.tilde(self.directions)

    def cosines(self, u: np.ndarray) -> np.ndarray:
        """``u_i . u^_ij`` (B, T, T)."""
        return self.transport.gram(self.transport.tilde(u), self.keys)

    def consensus(self, weights: np.ndarray):
        """``u_bar`` (B, T, d) for effective precisions ``weights * kappa``; defined (B, T)."""
        W = weights * self.precision
        total = W.sum(-1)
        y = self.transport.aggregate(W, self.keys)
        u_bar = np.divide(y, total[..., None], out=np.zeros_like(y), where=total[..., None] > 0)
        length, u = unit(u_bar)
        return u_bar, length, u, (total > 0) & (length > 0)

    def robust_weights(self, u, nu, exponent) -> np.ndarray:
        d2 = self.mahalanobis(u)
        if np.isinf(nu):
            return np.where(self.pairs.support, 1.0, 0.0)
        return np.where(self.pairs.support, np.exp(-exponent * np.log1p(d2 / nu)), 0.0)

    def mahalanobis(self, u) -> np.ndarray:
        """``d_ij^2 = 2 kappa_ij (1 - u_i . u^_ij)`` (eq. 11); 1 - cos >= 0 up to round-off."""
        return 2.0 * self.precision * np.maximum(1.0 - self.cosines(u), 0.0)

    def estimate(self, u_bar, length, u, defined, weights, extra=()):
        nan = np.where(defined, 1.0, np.nan)
        out = (u * nan[..., None], u_bar, length, self.precision, weights, defined, *extra)
        if self.data.squeeze:
            out = tuple(x[0] if isinstance(x, np.ndarray) and x.ndim else x for x in out)
        return out


def _directional_precision(
    magnitudes,
    decay,
    key_variance,
    support,
    *,
    query_var: float,
    query_observed,
    tau_theta: float = 0.0,
    eps: float = 0.0,
) -> np.ndarray:
    """Directional precision ``kappa_ij`` of seed 003 eq. 10 (B.5) from its ingredients.

    ``kappa_ij = (q / (m_i^2 + eps) + v_ij / (m^_ij^2 + eps) + tau_theta^2)^-1``, where ``q =
    sigma_Sigma_t^2(0) = eta_t^2 + gamma_t^2`` is the query's tangential variance, ``v_ij =
    sigma_Sigma_t^2(dt_ij)`` the transported key's, and ``m^_ij = m_j decay_ij``: angular
    variance is tangential variance over squared magnitude (linearised normalisation, eq. 4).

    * ``eps`` >= 0 keeps a zero-magnitude token finite: its term becomes ``q / eps`` (large),
      so it carries little directional weight instead of dividing by zero. With ``eps = 0`` a
      zero magnitude gives an infinite variance, i.e. ``kappa = 0``, which is its limit.
    * ``tau_theta`` >= 0 is an angular noise floor: ``kappa <= 1 / tau_theta^2`` even when
      every variance vanishes (the flat-prior limit, digest C24).
    * A query without a measurement (``query_observed`` False) has no query term.

    Shapes: magnitudes (B, T); decay, key_variance, support (B, T, T); query_observed (B, T).
    Returns (B, T, T), zero outside `support`.
    """
    m2 = magnitudes**2
    mhat2 = (decay * magnitudes[:, None, :]) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        query = np.where(query_observed, _safe_ratio(query_var, m2 + eps), 0.0)[..., None]
        key = _safe_ratio(key_variance, mhat2 + eps)
        total = query + key + tau_theta**2
        return np.where(support & (total < np.inf), 1.0 / total, 0.0)


def _safe_ratio(numerator, denominator):
    """``numerator / denominator`` with ``x / 0 = inf`` for ``x > 0`` and ``0 / 0 = 0``.

    A zero variance over a zero magnitude (``0/0``) contributes nothing; a positive variance
    over a zero magnitude is an infinite angular variance.
    """
    numerator, denominator = np.broadcast_arrays(numerator, denominator)
    out = np.full(numerator.shape, np.inf)
    pos = denominator > 0
    out[pos] = numerator[pos] / denominator[pos]
    out[~pos & (numerator == 0)] = 0.0
    return out


def directional_precision(
    model: RTModel,
    z,
    t,
    *,
    tau_theta: float = 0.0,
    eps: float = 0.0,
    causal: bool = True,
    mask=None,
) -> np.ndarray:
    """``kappa_ij`` (seed 003 eq. 10) of the measurements `z` at times `t`, (B, T, T).

    ``kappa_ij = ((eta_t^2 + gamma_t^2) / (m_i^2 + eps) + (sigma_Vt^2(dt_ij) + gamma_t^2) /
    (m^_ij^2 + eps) + tau_theta^2)^-1``. Magnitudes are the observed ``m_j = |z_s,j|`` (seed 003
    C.1 conditions on them), ``m^_ij = m_j e^{-mu_r s_ij}``, variances from `RTModel` (module
    docstring). Zero outside the support (keys after the query when `causal`, missing keys).

    Parameters
    ----------
    model, z, t, causal, mask : as in `rt_mle`.
    tau_theta : >= 0, angular noise floor: ``kappa <= 1 / tau_theta^2`` even where every
        variance vanishes (the flat-prior limit of standard attention, digest C24).
    eps : >= 0, stability constant: a zero-magnitude token's term becomes ``variance / eps``
        instead of a division by zero; with ``eps = 0`` it is infinite and ``kappa = 0``.
        A query without a measurement has no query term.
    """
    prob = _DirectionalProblem(model, z, t, mask, causal, tau_theta, eps)
    return prob.precision[0] if prob.data.squeeze else prob.precision


@batch_input.guard
def directional_mle(
    model: RTModel,
    z,
    t,
    *,
    tau_theta: float = 0.0,
    eps: float = 0.0,
    causal: bool = True,
    mask=None,
) -> DirectionalEstimate:
    """Exact directional MLE ``u_i* = Norm(sum_j kappa_ij u^_ij)`` (seed 003 eqs. 12-13).

    The maximiser on the sphere of the concentrated log-likelihood ``u . sum_j kappa_ij u^_ij``
    (equivalently the minimiser of ``sum_j kappa_ij |u - u^_ij|^2``), with
    ``u^_ij = e^{Omega s_ij} u_z,j`` and ``kappa`` from eq. 10 (`directional_precision`). The
    attention form ``u_bar_i = sum_j A_ij u^_ij``, ``A = kappa / sum kappa`` is returned as
    ``resultant``; its length is the mean resultant length in [0, 1].

    Parameters
    ----------
    model, z, t, causal, mask : as in `rt_mle` (directions come back in eigen-coordinates).
    tau_theta, eps : the angular floor and stability constant of eq. 10.
    """
    prob = _DirectionalProblem(model, z, t, mask, causal, tau_theta, eps)
    ones = np.where(prob.pairs.support, 1.0, 0.0)
    return DirectionalEstimate(*prob.estimate(*prob.consensus(ones), ones))


def directional_consensus(
    model: RTModel,
    z,
    t,
    anchors,
    *,
    nu: float = np.inf,
    exponent: float = 1.0,
    tau_theta: float = 0.0,
    eps: float = 0.0,
    causal: bool = True,
    mask=None,
) -> DirectionalEstimate:
    """One robust attention step anchored at `anchors` (seed 003 eqs. 11, 13, 14).

    ``d_ij^2 = 2 kappa_ij (1 - a_i . u^_ij)``, ``w_ij = (1 + d_ij^2 / nu)^-exponent``,
    ``u_bar_i = sum_j w kappa u^_ij / sum_j w kappa``. Anchored at the measured query directions
    this is Alg. 1's layer; anchored at the current estimate it is one IRLS step (D.4).

    Parameters
    ----------
    anchors : (B, T, d) or (T, d) directions in eigen-coordinates (normalised here; zero rows
        give ``d^2 = 2 kappa``).
    nu : > 0, ``inf`` for the Gaussian (all weights 1). exponent : > 0.
    Other parameters as in `directional_mle`.
    """
    nu = batch_input.robust_scale("nu", nu)
    exponent = validation.scalar("exponent", exponent, minimum=0.0, strict=True)
    prob = _DirectionalProblem(model, z, t, mask, causal, tau_theta, eps)
    anchors = _anchors(prob, anchors)
    w = prob.robust_weights(anchors, nu, exponent)
    return DirectionalEstimate(*prob.estimate(*prob.consensus(w), w))


def _anchors(prob: _DirectionalProblem, anchors) -> np.ndarray:
    a = validation.real_array("anchors", anchors)
    if prob.data.squeeze and a.ndim == 2:
        a = a[None]
    if a.shape != prob.data.z_s.shape:
        want = prob.data.z_s.shape[1:] if prob.data.squeeze else prob.data.z_s.shape
        raise ValueError(f"anchors must have shape {want}, got {np.shape(anchors)}")
    return unit(a)[1]


def directional_loss(
    model: RTModel,
    z,
    t,
    directions,
    *,
    nu: float = np.inf,
    exponent: float = 1.0,
    tau_theta: float = 0.0,
    eps: float = 0.0,
    causal: bool = True,
    mask=None,
) -> np.ndarray:
    """Robust directional loss ``L_i(u) = (1/2) sum_j rho(d_ij^2(u_i))`` (seed 003 C.1, eq. 14).

    ``rho(x) = int_0^x (1 + y/nu)^-p dy``: ``nu log1p(x/nu)`` for ``p = 1``,
    ``nu ((1 + x/nu)^(1-p) - 1) / (1 - p)`` otherwise, and ``x`` for ``nu = inf``, so that
    ``rho' = w`` is the weight of eq. 14 and ``L`` at ``nu = inf`` is seed 003's
    ``L_T = sum_j kappa_ij (1 - u . u^_ij)``. `directional_irls` never increases it.

    Returns (B, T) (or (T,)). Other parameters as in `directional_consensus`; `directions` are
    the points u_i at which the loss is evaluated.
    """
    nu = batch_input.robust_scale("nu", nu)
    p = validation.scalar("exponent", exponent, minimum=0.0, strict=True)
    prob = _DirectionalProblem(model, z, t, mask, causal, tau_theta, eps)
    d2 = prob.mahalanobis(_anchors(prob, directions))
    if np.isinf(nu):
        rho = d2
    elif p == 1.0:
        rho = nu * np.log1p(d2 / nu)
    else:
        rho = nu * np.expm1((1.0 - p) * np.log1p(d2 / nu)) / (1.0 - p)
    loss = 0.5 * np.where(prob.pairs.support, rho, 0.0).sum(-1)
    return loss[0] if prob.data.squeeze else loss


@batch_input.guard
def directional_irls(
    model: RTModel,
    z,
    t,
    *,
    nu: float,
    exponent: float = 1.0,
    tau_theta: float = 0.0,
    eps: float = 0.0,
    anchor: str = "estimate",
    init: str = "mle",
    causal: bool = True,
    mask=None,
    max_iter: int = 200,
    tol: float = 1e-12,
) -> DirectionalIRLSResult:
    """Robust directional IRLS (seed 003 eq. 14, C.1, D.4): ``u <- Norm(sum_j w(u) kappa u^)``.

    ``w_ij = (1 + d_ij^2(u_i) / nu)^-exponent`` with ``d^2 = 2 kappa (1 - u . u^_ij)``. As a
    majorise-minimise iteration it never increases `directional_loss`; its fixed points satisfy
    ``P_T(u_i) sum_j w_ij kappa_ij u^_ij = 0`` (module docstring). Stops when every row moves by
    at most `tol` radians, or after `max_iter` iterations.

    Parameters
    ----------
    nu : Student-t scale (> 0; ``inf`` gives `directional_mle` after one step).
    exponent : power of the weight, > 0. 1 (default) is the Student-t IRLS weight;
        ``(nu + d)/d`` is seed 003 Alg. 1's, whose ``nu -> inf`` limit is ``exp(-d^2/d)``.
    anchor : ``"estimate"`` (re-anchor at the current iterate: IRLS, D.4) or ``"query"``
        (weights from the measured query direction ``u_z,i``: Alg. 1's single step; returned
        after one iteration with ``final_change`` 0).
    init : ``"mle"`` (start at `directional_mle`) or ``"query"`` (the measured query direction,
        as D.4 starts from the token; missing queries start at the MLE).
    tau_theta, eps, causal, mask : as in `directional_mle`. max_iter >= 1, tol >= 0.
    """
    nu = batch_input.robust_scale("nu", nu)
    exponent = validation.scalar("exponent", exponent, minimum=0.0, strict=True)
    validation.choice("anchor", anchor, ANCHORS)
    validation.choice("init", init, INITS)
    tol, max_iter = rt_model.iteration_options(tol, max_iter)
    prob = _DirectionalProblem(model, z, t, mask, causal, tau_theta, eps)
    ones = np.where(prob.pairs.support, 1.0, 0.0)
    _, _, u, defined = prob.consensus(ones)
    B = u.shape[0]
    queries = prob.data.observed & (prob.magnitudes > 0)
    if anchor == "query":
        w = prob.robust_weights(prob.directions, nu, exponent)
        # A row without a query direction has no anchor: its weights are those of the MLE.
        w = np.where(queries[..., None], w, ones)
        u_bar, length, u, defined = prob.consensus(w)
        extra = (1, np.ones(B, dtype=bool), np.zeros(B))
        return DirectionalIRLSResult(*prob.estimate(u_bar, length, u, defined, w, extra))
    if init == "query":
        u = np.where(queries[..., None], prob.directions, u)
    change = np.zeros(B)
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        w = prob.robust_weights(u, nu, exponent)
        u_bar, length, new_u, ok = prob.consensus(w)
        new_u = np.where(ok[..., None], new_u, u)
        change = rt_model.sequence_change(angle(new_u, u), defined)
        u = new_u
        if np.all(change <= tol):
            break
    w = prob.robust_weights(u, nu, exponent)
    u_bar, length, _, ok = prob.consensus(w)
    extra = (iterations, change <= tol, change)
    return DirectionalIRLSResult(*prob.estimate(u_bar, length, u, defined & ok, w, extra))

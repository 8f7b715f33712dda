"""Radial-tangential (RT) reference estimators: RT-Kalman IRLS, and the RT estimators' entry point.

The RT estimators share the model of `estimators.rt_model` (``RTModel``; keys transported to the
query time, ``z^_ij = e^{-mu_r s_ij} e^{Omega s_ij} z_s,j``, with radial and tangential
variances ``sigma_Vr^2``, ``sigma_Vt^2``; every estimator is mean-field). This module holds
RT-Kalman IRLS (`rt_mle`, `rt_irls`) and is where users import all of them from: the
directional MLE / IRLS (`estimators.directional`) and the steps on the sphere
(`estimators.sphere`) are importable from here too.

**RT-Kalman IRLS (seed 000 5.3).** Separate radial and tangential weighted least squares in the
frame of the current iterate ``z_i^(k) = m_i^(k) u_i^(k)``, with Student-t weights:

    c_ij = u_i^(k) . z^_ij                 (radial estimate m^_z,ij of seed 000)
    l_ij = m_i^(k) - c_ij,  |d_ij|^2 = |z^_ij|^2 - c_ij^2      (radial, tangential residual)
    w_r = 1 / (1 + l^2 / (nu_r a_ij)),    w_t = 1 / (1 + |d|^2 / (nu_t b_ij)),
    a_ij = sigma_Vr^2 + gamma_r^2,        b_ij = sigma_Vt^2 + gamma_t^2,
    m_i^(k+1) = sum_j (w_r / a) c_ij / sum_j (w_r / a),
    v_i = P_T(u_i^(k)) sum_j (w_t / b) z^_ij / sum_j (w_t / b),
    u_i^(k+1) = exp_{u_i^(k)}(v_i / |m_i^(k)|)     ("geodesic": the spherical exponential map)
             or Norm(u_i^(k) + v_i / |m_i^(k)|)    ("first-order"),
    z_i^(k+1) = damping z_i^(k) + (1 - damping) m_i^(k+1) u_i^(k+1)   (the "conservative update").

Seed 000 5.3 prints the geodesic angle as ``theta = |v|``; ``v`` is a Cartesian tangent offset (of
size ``m theta``), so the angle is ``|v| / m^(k)``, the form that agrees with its own first-order
step (verify check ``rt_irls.seed000-geodesic-angle``). The radial mean ``m`` is signed: it is
negative where the radially weighted keys point away from ``u`` (keys spread over more than a
quarter turn, e.g. old keys that the radial precision favours when ``sigma_r = 0``); the step
uses ``|m|`` so that ``u`` always turns towards the tangential consensus. The iteration is
linear (a majorise-minimise scheme per subproblem); it slows down where a query's few keys
nearly split into two modes of the Student-t likelihood. The weights are seed 000's rational
``1/(1 + m/nu)``, the Student-t IRLS weight up to a constant (`robust_weights.rational_weight`);
``nu = inf`` gives the Gaussian estimator. A fixed point ``(m*, u*)`` solves both weighted
least-squares problems in its own frame:

    P_T(u*) sum_j w_t p_t z^_ij = 0,    m* = sum_j w_r p_r (u* . z^_ij) / sum_j w_r p_r,

with ``p = 1/a, 1/b`` and the weights evaluated at ``(m*, u*)``. With ``nu = inf`` this has the
closed form `rt_mle`: ``u* = Norm(sum_j p_t z^_ij)``, ``m* = sum_j p_r (u* . z^_ij) / sum_j p_r``.
(It is the self-consistent-frame solution the seed iterates towards, not the stationary point of
the likelihood with the frame ``x/|x|`` differentiated; the two differ where key magnitudes do.)
The seed's superscript ``(k)`` on the keys ``z_sj^(k)`` reads as a stack of layers that also
update the keys; this module keeps the keys fixed (an M-estimator per query).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from estimators import batch_input, rt_model
from estimators.directional import (
    ANCHORS,
    DirectionalEstimate,
    DirectionalIRLSResult,
    directional_consensus,
    directional_irls,
    directional_loss,
    directional_mle,
    directional_precision,
)
from estimators.rt_model import INITS, RTModel
from estimators.sphere import (
    angular_step,
    exp_map,
    first_order_step,
    geodesic_step,
    geometric_update,
    slerp,
    unit,
)
from sde_sim import validation

RT_STEPS = ("geodesic", "first-order")


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


class RTEstimate(NamedTuple):
    """Output of `rt_mle`.

    means : (B, T, d) ambient estimates ``basis (m u)``; magnitudes (B, T) (the signed radial
    mean, module docstring); directions (B, T, d) unit, eigen-coordinates; defined (B, T) False
    where no observed key carries weight (those rows are NaN).
    """

    means: np.ndarray
    magnitudes: np.ndarray
    directions: np.ndarray
    defined: np.ndarray


class RTIRLSResult(NamedTuple):
    """Output of `rt_irls`: `RTEstimate`'s fields plus the weights and convergence report.

    radial_weights, tangential_weights : (B, T, T) Student-t weights ``w_r``, ``w_t`` at the
        last iterate (0 outside the causal / observed support).
    iterations : iterations run (all sequences together).
    converged : (B,) whether the last relative change ``|z^(k+1) - z^(k)| / |z^(k+1)|`` of
        every defined row of the sequence is <= tol.
    final_change : (B,) that largest relative change.
    """

    means: np.ndarray
    magnitudes: np.ndarray
    directions: np.ndarray
    defined: np.ndarray
    radial_weights: np.ndarray
    tangential_weights: np.ndarray
    iterations: int
    converged: np.ndarray
    final_change: np.ndarray


# --------------------------------------------------------------------------------------------
# RT-Kalman IRLS (seed 000 5.3)
# --------------------------------------------------------------------------------------------


class _RTProblem:
    """Per-query radial and tangential weighted least squares with fixed transported keys."""

    def __init__(self, model, z, t, mask, causal):
        self.m = rt_model.check_model(model)
        if self.m.eta_r**2 + self.m.gamma_r**2 <= 0 or self.m.eta_t**2 + self.m.gamma_t**2 <= 0:
            raise ValueError(
                "the zero-lag variances eta_r^2 + gamma_r^2 and eta_t^2 + gamma_t^2 must be > 0: "
                "a noiseless measurement has infinite precision (give model.eta_r, model.eta_t "
                "or the floors model.gamma_r, model.gamma_t a positive value)"
            )
        self.data = rt_model.check_data(self.m, z, t, mask)
        self.pairs = rt_model.query_key_pairs(self.m, self.data, causal)
        var = rt_model.variances(self.m, self.pairs)
        self.a = np.where(self.pairs.support, var.radial, np.inf)
        self.b = np.where(self.pairs.support, var.tangential, np.inf)
        self.p_r = np.where(self.pairs.support, 1.0 / self.a, 0.0)
        self.p_t = np.where(self.pairs.support, 1.0 / self.b, 0.0)
        self.transport = rt_model.Transport(self.m.Omega, self.data.t)
        self.keys = self.transport.tilde(self.data.z_s)
        key_norm2 = np.sum(self.data.z_s**2, axis=-1)
        self.zhat_norm2 = self.pairs.decay**2 * key_norm2[:, None, :]  # |z^_ij|^2

    def radial_projection(self, u: np.ndarray) -> np.ndarray:
        """``c_ij = u_i . z^_ij``, (B, T, T)."""
        return self.pairs.decay * self.transport.gram(self.transport.tilde(u), self.keys)

    def tangential_mean(self, W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``sum_j W z^_ij / sum_j W`` (B, T, d) and the denominators (B, T)."""
        total = W.sum(axis=-1)
        y = self.transport.aggregate(W * self.pairs.decay, self.keys)
        return np.divide(
            y, total[..., None], out=np.zeros_like(y), where=total[..., None] > 0
        ), total

    def closed_form(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ``nu = inf`` fixed point: ``u = Norm(sum p_t z^)``, ``m = sum p_r c / sum p_r``."""
        y, total = self.tangential_mean(self.p_t)
        norm, u = unit(y)
        c = self.radial_projection(u)
        p_sum = self.p_r.sum(axis=-1)
        mag = np.divide((self.p_r * c).sum(-1), p_sum, out=np.zeros_like(p_sum), where=p_sum > 0)
        defined = (total > 0) & (norm > 0)
        return mag, u, defined

    def weights(self, mag, u, nu_r, nu_t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Effective precisions ``w_r / a``, ``w_t / b`` at the iterate ``m u``, and ``c``.

        Student-t weights of seed 000 5.3 (zero outside the support, where ``1/a = 1/b = 0``).
        """
        c = self.radial_projection(u)
        ell2 = (mag[..., None] - c) ** 2
        # |z^|^2 - c^2 >= 0 exactly; round-off can make it slightly negative.
        perp2 = np.maximum(self.zhat_norm2 - c**2, 0.0)
        W_r = self.p_r / (1.0 + ell2 * (self.p_r / nu_r))
        W_t = self.p_t / (1.0 + perp2 * (self.p_t / nu_t))
        return W_r, W_t, c

    def output(self, mag, u, defined):
        means_s = mag[..., None] * u
        means = means_s if self.m.basis is None else means_s @ self.m.basis.T
        nan = np.where(defined, 1.0, np.nan)
        out = (means * nan[..., None], mag * nan, u * nan[..., None], defined)
        if self.data.squeeze:
            out = tuple(x[0] for x in out)
        return out


@batch_input.guard
def rt_mle(model: RTModel, z, t, *, causal: bool = True, mask=None) -> RTEstimate:
    """Non-robust RT estimate: the ``nu = inf`` fixed point of RT-Kalman IRLS (seed 000 5.3).

    ``u_i = Norm(sum_j z^_ij / b_ij)``, ``m_i = sum_j (u_i . z^_ij) / a_ij / sum_j 1 / a_ij``
    over keys ``j <= i`` (all j if not `causal`) that are observed, with ``a, b`` the radial and
    tangential variances of the module docstring. Closed form: the tangential least-squares
    condition ``P_T(u) sum_j z^_ij / b_ij = 0`` holds exactly.

    Parameters
    ----------
    model : `RTModel`.
    z : (B, T, d) or (T, d) ambient measurements (NaN allowed where `mask` is False).
    t : (T,) or (B, T) strictly increasing times.
    causal : use keys ``j <= i`` only (default) or every key.
    mask : (B, T) bool, True where observed; default all observed.

    Returns
    -------
    RTEstimate with means (B, T, d), magnitudes (B, T), directions (B, T, d), defined (B, T)
    (the batch axis is dropped for 2-D `z`).
    """
    prob = _RTProblem(model, z, t, mask, causal)
    mag, u, defined = prob.closed_form()
    return RTEstimate(*prob.output(mag, u, defined))


@batch_input.guard
def rt_irls(
    model: RTModel,
    z,
    t,
    *,
    nu_r: float = np.inf,
    nu_t: float = np.inf,
    step: str = "geodesic",
    damping: float = 0.0,
    init: str = "mle",
    causal: bool = True,
    mask=None,
    max_iter: int = 200,
    tol: float = 1e-10,
) -> RTIRLSResult:
    """RT-Kalman IRLS (seed 000 5.3): radial and tangential Student-t weighted least squares.

    One iteration (module docstring): weights ``w_r = 1/(1 + l^2/(nu_r a))`` and
    ``w_t = 1/(1 + |d|^2/(nu_t b))`` at the iterate ``z^(k) = m^(k) u^(k)``; the radial weighted
    mean ``m^(k+1)``; the tangential weighted mean ``v = P_T(u^(k)) sum w_t z^/b / sum w_t/b``;
    the direction step ``exp_{u^(k)}(v / m^(k))`` (``"geodesic"``) or
    ``Norm(u^(k) + v / m^(k))`` (``"first-order"``); the conservative update
    ``z^(k+1) = damping z^(k) + (1 - damping) m^(k+1) u^(k+1)``. Stops when every row's relative
    change ``|z^(k+1) - z^(k)| / |z^(k+1)|`` is <= `tol`, or after `max_iter` iterations.

    Parameters
    ----------
    model, z, t, causal, mask : as in `rt_mle`.
    nu_r, nu_t : Student-t scales of the radial and tangential weights (> 0; ``inf``: Gaussian,
        whose fixed point is `rt_mle`).
    step : ``"geodesic"`` or ``"first-order"`` (same fixed points).
    damping : the seed's ``gamma`` in the conservative update, in [0, 1).
    init : ``"mle"`` (start at `rt_mle`, default) or ``"query"`` (the measurement ``z_i``, as
        the seed does; rows with a missing or zero measurement start at `rt_mle`). Redescending
        weights make the fixed point depend on the start: an outlying query, whose own key has
        zero residual, holds the iteration near itself.
    max_iter, tol : iteration cap (>= 1) and relative-change tolerance (>= 0).

    Returns
    -------
    RTIRLSResult (means ambient, directions in eigen-coordinates; see its docstring).
    """
    nu_r = batch_input.robust_scale("nu_r", nu_r)
    nu_t = batch_input.robust_scale("nu_t", nu_t)
    validation.choice("step", step, RT_STEPS)
    validation.choice("init", init, INITS)
    damping = validation.scalar("damping", damping, minimum=0.0)
    if damping >= 1:
        raise ValueError(f"damping must be in [0, 1) (1 never moves), got {damping:g}")
    tol, max_iter = rt_model.iteration_options(tol, max_iter)
    prob = _RTProblem(model, z, t, mask, causal)

    mag, u, defined = prob.closed_form()
    if init == "query":
        q_norm, q_dir = unit(prob.data.z_s)
        use = prob.data.observed & (q_norm > 0)
        mag = np.where(use, q_norm, mag)
        u = np.where(use[..., None], q_dir, u)
    state = mag[..., None] * u
    B = state.shape[0]
    change = np.zeros(B)
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        W_r, W_t, c = prob.weights(mag, u, nu_r, nu_t)
        wr_sum = W_r.sum(-1)
        new_mag = np.divide((W_r * c).sum(-1), wr_sum, out=mag.copy(), where=wr_sum > 0)
        y, _ = prob.tangential_mean(W_t)
        v = y - np.sum(u * y, axis=-1, keepdims=True) * u
        # v is a Cartesian offset at radius |m^(k)|, so the angle is |v| / |m^(k)| (module
        # docstring). The radial mean m is signed: it is negative only where the radially
        # weighted keys point away from u; |m| keeps the step towards the tangential consensus.
        radius = np.abs(mag)[..., None]
        scaled = np.divide(v, radius, out=np.zeros_like(v), where=radius > 0)
        # Renormalise the geodesic step too: exp_u keeps |u| only to round-off, and near a fixed
        # point with |y| > |m| / 2 a norm error grows by |1 - 2 |y| cos / |m|| per step.
        new_u = unit(exp_map(u, scaled) if step == "geodesic" else u + scaled)[1]
        new_state = damping * state + (1.0 - damping) * new_mag[..., None] * new_u
        if damping > 0:
            # Split the conservative update into a direction on new_u's side and a signed size.
            n, direction = unit(new_state)
            sign = np.where(np.sum(direction * new_u, axis=-1) < 0, -1.0, 1.0)
            new_u = np.where(n[..., None] > 0, sign[..., None] * direction, new_u)
            new_mag = sign * n
        size = np.linalg.norm(new_state, axis=-1)
        row_change = np.divide(
            np.linalg.norm(new_state - state, axis=-1),
            size,
            out=np.zeros_like(size),
            where=size > 0,
        )
        mag, u, state = new_mag, new_u, new_state
        change = rt_model.sequence_change(row_change, defined)
        if np.all(change <= tol):
            break
    W_r, W_t, _ = prob.weights(mag, u, nu_r, nu_t)
    # Report the weights themselves: w = W p^-1 on the support.
    w_r = np.divide(W_r, prob.p_r, out=np.zeros_like(W_r), where=prob.pairs.support)
    w_t = np.divide(W_t, prob.p_t, out=np.zeros_like(W_t), where=prob.pairs.support)
    means, mags, dirs, defined_out = prob.output(mag, u, defined)
    converged = change <= tol
    if prob.data.squeeze:
        w_r, w_t, converged, change = w_r[0], w_t[0], converged[0], change[0]
    return RTIRLSResult(
        means,
        mags,
        dirs,
        defined_out,
        w_r,
        w_t,
        iterations,
        converged,
        change,
    )


__all__ = [
    "ANCHORS",
    "INITS",
    "RT_STEPS",
    "DirectionalEstimate",
    "DirectionalIRLSResult",
    "RTEstimate",
    "RTIRLSResult",
    "RTModel",
    "angular_step",
    "directional_consensus",
    "directional_irls",
    "directional_loss",
    "directional_mle",
    "directional_precision",
    "first_order_step",
    "geodesic_step",
    "geometric_update",
    "rt_irls",
    "rt_mle",
    "slerp",
]

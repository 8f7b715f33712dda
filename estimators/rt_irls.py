"""Radial-tangential (RT) reference estimators: RT-Kalman IRLS and the directional MLE / IRLS.

Two estimators of the latent state of a radial-tangential SDE from its measurements, in real
eigen-coordinates ``x_s`` in R^d (seed 003 digest, section 8 item 7: ``d`` is the real dimension
and ``Omega`` a real skew generator, so ``e^{Omega s}`` is a rotation). A measurement
``z_s,j = m_j u_z,j`` (``m_j = |z_s,j|``) is carried to the query time ``t_i`` by the mean dynamics
``dx_s = (-mu_r I + Omega) x_s dt`` (the literal RT-SDE's drift, exactly linear):

    z^_ij = e^{-mu_r s_ij} e^{Omega s_ij} z_s,j,     s_ij = t_i - t_j,
    m^_ij = e^{-mu_r s_ij} m_j,   u^_ij = e^{Omega s_ij} u_z,j     (seed 003 eq. 9, B.3).

Lags use the suite's convention ``dt = t_j - t_i = -s_ij`` (``dt <= 0`` causal) when they enter
`estimators.closed_forms.radial_tangential.propagated_variances`, whose

    sigma_Vr^2(dt) = phi(mu_r, s) sigma_r^2 + e^{-2 mu_r s} eta_r^2,
    sigma_Vt^2(dt) = phi(mu_t, s) sigma_t^2 + e^{-2 mu_t s} eta_t^2      (seed 003 eq. 7)

are the radial and per-tangent-direction variances of ``z^_ij`` around ``x_s(t_i)``. Every
estimator is *mean-field* (seed 003 A.4, seed 000 2.2): the transported keys are treated as
independent, which they are not under process noise (they share its increments); the exact
posterior needs sequential filtering. Where process noise dominates the measurement noise over
the key window the mean-field estimate is worse than the raw measurement (the tests measure it).

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

**Directional MLE and IRLS (seed 003 eqs. 10-16, C.1-C.2, D.4).** Conditioning on the observed
magnitudes, each transported direction is a tangent-plane Gaussian observation of ``u_i`` with
directional precision (eq. 10)

    kappa_ij = ( (eta_t^2 + gamma_t^2) / (m_i^2 + eps)
                 + (sigma_Vt^2(dt_ij) + gamma_t^2) / (m^_ij^2 + eps) + tau_theta^2 )^-1

(``gamma_t`` enters both terms, as the seed writes it: digest section 8 item 8). With
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

Geometric update (eq. 15), angular step (eq. 16) and the exact geodesic step (C.2) are
`geometric_update`, `angular_step` and `geodesic_step`; see their docstrings for the corrected
form of the first-order agreement claim (digest C28).

Conventions: states on rows, batched over sequences ``z`` (B, T, d) (or (T, d)), times ``t``
(T,) or (B, T) strictly increasing, ``mask`` (B, T) True where observed (NaN allowed only where
False). ``model.basis`` maps eigen- to ambient coordinates (``x = basis x_s``); `rt_irls`
returns ambient means and eigen-coordinate directions. The measurement gain ``lambda_C`` of
seed 000 5.1 is 1, as in the simulator. Rotations are applied through the complex Schur form of
``Omega`` (``e^{Omega s} = Z diag(e^{i theta s}) Z^H``): rotate-aggregate-counter-rotate, so
no (B, T, T, d) array is formed; results are real.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import schur

from estimators import batch_input
from estimators.closed_forms import radial_tangential as rt
from sde_sim import RadialTangentialMeasurement, RadialTangentialSDE, validation
from sde_sim.models import skew_matrix

RT_STEPS = ("geodesic", "first-order")
INITS = ("mle", "query")
ANCHORS = ("estimate", "query")

# A complex Schur form of a skew matrix is diagonal up to round-off (the matrix is normal);
# off-diagonal mass above this multiple of |Omega| means the input was not skew.
_SCHUR_RTOL = 1e-10


# --------------------------------------------------------------------------------------------
# Model and results
# --------------------------------------------------------------------------------------------


class RTModel(NamedTuple):
    """Parameters of the RT estimators, in eigen-coordinates (seed 000 5.1-5.2, seed 003 3.2-3.4).

    Omega : (d, d) real skew rotation generator (``Lambda_Omega`` of the seeds, real form).
    mu_r : decay of the mean magnitude (``m^ = m e^{-mu_r s}``) and of the radial variance.
    mu_t : decay rate in the tangential variance ``sigma_Vt^2``. For the literal RT-SDE the
        tangential spread decays at ``mu_r`` (digest C17); `from_sde` picks it by mode.
    sigma_r, sigma_t : process-noise scales; eta_r, eta_t : measurement-noise scales (>= 0).
    gamma_r, gamma_t : query-side noise floors of seed 003 section 3.4 (>= 0, default 0).
    basis : (d, d) invertible map from eigen- to ambient coordinates, or None (identity).
    """

    Omega: np.ndarray
    mu_r: float
    mu_t: float
    sigma_r: float
    sigma_t: float
    eta_r: float
    eta_t: float
    gamma_r: float = 0.0
    gamma_t: float = 0.0
    basis: np.ndarray | None = None

    @classmethod
    def from_sde(
        cls,
        sde: RadialTangentialSDE,
        measurement: RadialTangentialMeasurement,
        *,
        gamma_r: float = 0.0,
        gamma_t: float = 0.0,
    ) -> RTModel:
        """The model of a simulator system and measurement.

        ``mu_t`` is ``sde.mu_r`` in ``"literal"`` mode (the state's own direction frames the
        noise, ``P_T(u) x = 0`` and the tangential spread decays at ``mu_r``: digest C17) and
        ``sde.mu_t`` in ``"frozen-frame"`` mode (where Proposition 1 is exact).
        """
        if not isinstance(sde, RadialTangentialSDE):
            raise TypeError(f"sde must be a RadialTangentialSDE, got {type(sde).__name__}")
        if not isinstance(measurement, RadialTangentialMeasurement):
            raise TypeError(
                "measurement must be a RadialTangentialMeasurement, got "
                f"{type(measurement).__name__}"
            )
        mu_t = sde.mu_r if sde.mode == "literal" else sde.mu_t
        return cls(
            np.array(sde.Omega),
            sde.mu_r,
            mu_t,
            sde.sigma_r,
            sde.sigma_t,
            measurement.eta_r,
            measurement.eta_t,
            gamma_r,
            gamma_t,
            np.array(sde.basis),
        )


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
# Validation
# --------------------------------------------------------------------------------------------


class _Model(NamedTuple):
    Omega: np.ndarray
    mu_r: float
    mu_t: float
    sigma_r: float
    sigma_t: float
    eta_r: float
    eta_t: float
    gamma_r: float
    gamma_t: float
    basis: np.ndarray | None
    basis_inv: np.ndarray | None


def _check_model(model) -> _Model:
    if not isinstance(model, RTModel):
        raise TypeError(f"model must be an RTModel, got {type(model).__name__}")
    Omega = skew_matrix("model.Omega", model.Omega)
    d = Omega.shape[0]
    if d < 2:
        raise ValueError(f"model.Omega must be at least 2x2 (a sphere S^(d-1)), got {d}x{d}")
    mu_r = validation.scalar("model.mu_r", model.mu_r)
    mu_t = validation.scalar("model.mu_t", model.mu_t)
    scales = {
        name: validation.scalar(f"model.{name}", getattr(model, name), minimum=0.0)
        for name in ("sigma_r", "sigma_t", "eta_r", "eta_t", "gamma_r", "gamma_t")
    }
    basis = basis_inv = None
    if model.basis is not None:
        basis = validation.square_matrix("model.basis", model.basis, d)
        cond = np.linalg.cond(basis)
        if not np.isfinite(cond) or cond > 1e12:
            raise ValueError(
                f"model.basis must be invertible (z_s = basis^-1 z); its condition number is "
                f"{cond:.3g}"
            )
        if np.array_equal(basis, np.eye(d)):
            basis = None
        else:
            basis_inv = np.linalg.inv(basis)
    return _Model(Omega, mu_r, mu_t, **scales, basis=basis, basis_inv=basis_inv)


class _Data(NamedTuple):
    z_s: np.ndarray  # (B, T, d) eigen-coordinates, zeros where missing
    observed: np.ndarray  # (B, T)
    t: np.ndarray  # (B, T)
    squeeze: bool


def _check_data(m: _Model, z, t, mask) -> _Data:
    d = m.Omega.shape[0]
    if np.iscomplexobj(z):
        raise TypeError("z must be real (eigen-coordinates are real here), got complex entries")
    data = batch_input.measurements(z, mask, d)
    z = data.zero_filled()
    if m.basis_inv is not None:
        z = z @ m.basis_inv.T
    t = batch_input.times(t, *data.observed.shape)  # a zero-stride view marks shared times
    return _Data(z, data.observed, t, data.squeeze)


def _positive_or_inf(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if np.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be > 0 (inf for the Gaussian limit), got {value:g}")
    return value


def _options(tol, max_iter) -> tuple[float, int]:
    return validation.scalar("tol", tol, minimum=0.0), validation.count("max_iter", max_iter)


# --------------------------------------------------------------------------------------------
# Rotations by Omega: rotate, aggregate, counter-rotate
# --------------------------------------------------------------------------------------------


class _Transport:
    """``e^{Omega (t_i - t_j)}`` applied between every query i and key j of each sequence.

    ``Omega = Z diag(i theta) Z^H`` (complex Schur; Z unitary), so with ``y~_j = e^{-i theta t_j}
    Z^H y_j``: ``x_i . e^{Omega s_ij} y_j = Re(x~_i^H y~_j)`` and ``sum_j W_ij e^{Omega s_ij}
    y_j = Re(Z e^{i theta t_i} sum_j W_ij y~_j)``: matrix products over (B, T, T). Tilded
    arrays are stored as real ``[Re, Im]`` pairs (B, T, 2d), so that both products are real
    matrix products (``Re(a^H b) = Re a . Re b + Im a . Im b``).
    """

    def __init__(self, Omega: np.ndarray, t: np.ndarray):
        T_form, Z = schur(Omega.astype(complex), output="complex")
        off = np.max(np.abs(np.triu(T_form, 1)), initial=0.0)
        if off > _SCHUR_RTOL * max(1.0, float(np.max(np.abs(Omega), initial=0.0))):
            raise ValueError(f"model.Omega is not normal (Schur off-diagonal {off:.3g})")
        self.Z = Z
        self.d = Omega.shape[0]
        theta = T_form.diagonal().imag
        # Phases only enter through t_i - t_j: measuring time from each sequence's start keeps
        # theta t small, so the phase products lose no more than round-off of theta (t_i - t_j).
        self.phase = np.exp(-1j * (t - t[:, :1])[..., None] * theta)  # (B, T, d)

    def tilde(self, x: np.ndarray) -> np.ndarray:
        y = self.phase * (x @ self.Z.conj())
        return np.concatenate([y.real, y.imag], axis=-1)

    def gram(self, x_tilde: np.ndarray, y_tilde: np.ndarray) -> np.ndarray:
        """``G[b, i, j] = x_i . e^{Omega s_ij} y_j`` from tilded arrays; (B, T, T)."""
        return x_tilde @ np.swapaxes(y_tilde, 1, 2)

    def aggregate(self, W: np.ndarray, y_tilde: np.ndarray) -> np.ndarray:
        """``sum_j W[b, i, j] e^{Omega s_ij} y_j``; (B, T, d) real."""
        acc = W @ y_tilde
        acc = acc[..., : self.d] + 1j * acc[..., self.d :]
        return np.real((self.phase.conj() * acc) @ self.Z.T)


class _Pairs(NamedTuple):
    lag: np.ndarray  # (B, T, T) or (1, T, T) for shared times: s_ij = t_i - t_j
    support: np.ndarray  # (B, T, T) key j usable for query i
    decay: np.ndarray  # (B, T, T) e^{-mu_r s_ij} on the support, 0 elsewhere


def _pairs(m: _Model, data: _Data, causal: bool) -> _Pairs:
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    B, T = data.t.shape
    # Shared times (a (T,) input): one (1, T, T) lag array serves every sequence.
    t = data.t[:1] if data.t.strides[0] == 0 else data.t
    lag = t[:, :, None] - t[:, None, :]
    support = np.broadcast_to(data.observed[:, None, :], (B, T, T))
    if causal:
        support = support & np.tril(np.ones((T, T), dtype=bool))
    decay = np.where(support, np.exp(-m.mu_r * np.where(support, lag, 0.0)), 0.0)
    return _Pairs(lag, support, decay)


def _variances(m: _Model, pairs: _Pairs) -> rt.RTVariances:
    """``(a, b) = (sigma_Vr^2 + gamma_r^2, sigma_Vt^2 + gamma_t^2)`` at lags ``dt = -s``."""
    var = rt.propagated_variances(
        -pairs.lag,
        mu_r=m.mu_r,
        mu_t=m.mu_t,
        sigma_r=m.sigma_r,
        sigma_t=m.sigma_t,
        eta_r=m.eta_r,
        eta_t=m.eta_t,
    )
    return rt.RTVariances(var.radial + m.gamma_r**2, var.tangential + m.gamma_t**2)


def _unit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row norms and unit rows; a zero row keeps direction 0 (it has none)."""
    n = np.linalg.norm(x, axis=-1)
    u = np.divide(x, n[..., None], out=np.zeros_like(x), where=n[..., None] > 0)
    return n, u


def _exp_map(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``cos|v| u + sinc(|v|) v`` for tangent ``v`` (rows); exact at ``v = 0``."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.cos(n) * u + np.sinc(n / np.pi) * v


def _angle(u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Great-circle distance of unit rows, ``2 atan2(|u - w|, |u + w|)``."""
    return 2.0 * np.arctan2(np.linalg.norm(u - w, axis=-1), np.linalg.norm(u + w, axis=-1))


def _finish_sequence(change: np.ndarray, defined: np.ndarray) -> np.ndarray:
    return np.max(np.where(defined, change, 0.0), axis=1)


# --------------------------------------------------------------------------------------------
# RT-Kalman IRLS (seed 000 5.3)
# --------------------------------------------------------------------------------------------


class _RTProblem:
    """Per-query radial and tangential weighted least squares with fixed transported keys."""

    def __init__(self, model, z, t, mask, causal):
        self.m = _check_model(model)
        if self.m.eta_r**2 + self.m.gamma_r**2 <= 0 or self.m.eta_t**2 + self.m.gamma_t**2 <= 0:
            raise ValueError(
                "the zero-lag variances eta_r^2 + gamma_r^2 and eta_t^2 + gamma_t^2 must be > 0: "
                "a noiseless measurement has infinite precision (give model.eta_r, model.eta_t "
                "or the floors model.gamma_r, model.gamma_t a positive value)"
            )
        self.data = _check_data(self.m, z, t, mask)
        self.pairs = _pairs(self.m, self.data, causal)
        var = _variances(self.m, self.pairs)
        self.a = np.where(self.pairs.support, var.radial, np.inf)
        self.b = np.where(self.pairs.support, var.tangential, np.inf)
        self.p_r = np.where(self.pairs.support, 1.0 / self.a, 0.0)
        self.p_t = np.where(self.pairs.support, 1.0 / self.b, 0.0)
        self.transport = _Transport(self.m.Omega, self.data.t)
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
        norm, u = _unit(y)
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
    nu_r = _positive_or_inf("nu_r", nu_r)
    nu_t = _positive_or_inf("nu_t", nu_t)
    validation.choice("step", step, RT_STEPS)
    validation.choice("init", init, INITS)
    damping = validation.scalar("damping", damping, minimum=0.0)
    if damping >= 1:
        raise ValueError(f"damping must be in [0, 1) (1 never moves), got {damping:g}")
    tol, max_iter = _options(tol, max_iter)
    prob = _RTProblem(model, z, t, mask, causal)

    mag, u, defined = prob.closed_form()
    if init == "query":
        q_norm, q_dir = _unit(prob.data.z_s)
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
        new_u = _unit(_exp_map(u, scaled) if step == "geodesic" else u + scaled)[1]
        new_state = damping * state + (1.0 - damping) * new_mag[..., None] * new_u
        if damping > 0:
            # Split the conservative update into a direction on new_u's side and a signed size.
            n, direction = _unit(new_state)
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
        change = _finish_sequence(row_change, defined)
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


# --------------------------------------------------------------------------------------------
# Directional MLE and IRLS (seed 003 eqs. 10-14, C.1, D.4)
# --------------------------------------------------------------------------------------------


class _DirectionalProblem:
    """Transported measured directions and their precisions ``kappa_ij`` (eq. 10)."""

    def __init__(self, model, z, t, mask, causal, tau_theta, eps):
        self.m = _check_model(model)
        self.data = _check_data(self.m, z, t, mask)
        self.pairs = _pairs(self.m, self.data, causal)
        tau_theta = validation.scalar("tau_theta", tau_theta, minimum=0.0)
        eps = validation.scalar("eps", eps, minimum=0.0)
        query_var = self.m.eta_t**2 + self.m.gamma_t**2  # sigma_Sigma_t^2(0)
        if query_var <= 0 and tau_theta <= 0:
            raise ValueError(
                "the directional precision is infinite at zero lag: give model.eta_t or "
                "model.gamma_t a positive value, or an angular floor tau_theta > 0"
            )
        self.magnitudes, self.directions = _unit(self.data.z_s)
        self.precision = _directional_precision(
            self.magnitudes,
            self.pairs.decay,
            _variances(self.m, self.pairs).tangential,
            self.pairs.support,
            query_var=query_var,
            query_observed=self.data.observed,
            tau_theta=tau_theta,
            eps=eps,
        )
        self.transport = _Transport(self.m.Omega, self.data.t)
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
        length, u = _unit(u_bar)
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
    nu = _positive_or_inf("nu", nu)
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
    return _unit(a)[1]


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
    nu = _positive_or_inf("nu", nu)
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
    nu = _positive_or_inf("nu", nu)
    exponent = validation.scalar("exponent", exponent, minimum=0.0, strict=True)
    validation.choice("anchor", anchor, ANCHORS)
    validation.choice("init", init, INITS)
    tol, max_iter = _options(tol, max_iter)
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
        change = _finish_sequence(_angle(new_u, u), defined)
        u = new_u
        if np.all(change <= tol):
            break
    w = prob.robust_weights(u, nu, exponent)
    u_bar, length, _, ok = prob.consensus(w)
    extra = (iterations, change <= tol, change)
    return DirectionalIRLSResult(*prob.estimate(u_bar, length, u, defined & ok, w, extra))


# --------------------------------------------------------------------------------------------
# Steps on the sphere (seed 000 5.3; seed 003 eqs. 15-16, C.2)
# --------------------------------------------------------------------------------------------


def _rows(name: str, value, d: int | None = None) -> np.ndarray:
    arr = validation.real_array(name, value)
    if arr.ndim < 1 or arr.shape[-1] < 2 or (d is not None and arr.shape[-1] != d):
        want = f"(..., {d})" if d is not None else "(..., d) with d >= 2"
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    return arr


def geodesic_step(u, v) -> np.ndarray:
    """Exact geodesic step ``exp_u(v) = cos|v| u + sin|v| v/|v|`` (seed 000 5.3, seed 003 C.2).

    Moves the unit `u` along the great circle with tangent `v` by the angle ``|v|``; it is
    `radial_tangential.spherical_exp` (which validates ``|u| = 1`` and ``u . v = 0``).
    Shapes: u, v (..., d) -> (..., d).
    """
    return rt.spherical_exp(u, v)


def first_order_step(u, v) -> np.ndarray:
    """First-order (retraction) step ``Norm(u + v)`` (seed 000 5.3).

    For tangent ``v`` it moves by ``atan|v|`` along the same great circle as `geodesic_step`,
    so the two differ by ``|v| - atan|v| = |v|^3/3 + O(|v|^5)``. Shapes: (..., d).
    """
    u = _rows("u", u)
    v = _rows("v", v, u.shape[-1])
    n, y = _unit(u + v)
    if np.any(n == 0):
        raise ValueError("u + v must be nonzero to normalise")
    return y


def slerp(u, w, fraction) -> np.ndarray:
    """Spherical interpolation from unit `u` towards unit `w` by ``fraction`` of the angle.

    ``sin((1-f) W)/sin W u + sin(f W)/sin W w`` with ``W = angle(u, w)`` (seed 003 C.2 writes
    ``slerp(u, u*, alpha)``). Evaluated as ``exp_u(f W t)`` with ``t`` the unit tangent towards
    `w`, exact at ``W = 0``. Antipodal pairs have no unique geodesic and raise.
    Shapes: u, w (..., d); fraction broadcast against ``u.shape[:-1]``.
    """
    u = rt._direction("u", u)
    w = rt._direction("w", w)
    f = validation.real_array("fraction", fraction)
    tangent = w - np.sum(u * w, axis=-1, keepdims=True) * u
    norm = np.linalg.norm(tangent, axis=-1, keepdims=True)
    W = _angle(u, w)[..., None]
    if np.any((norm == 0) & (np.pi / 2 < W)):
        raise ValueError("u and w must not be antipodal: the geodesic between them is not unique")
    t_unit = np.divide(tangent, norm, out=np.zeros_like(tangent), where=norm > 0)
    return _exp_map(u, f[..., None] * W * t_unit)


def geometric_update(z_s, u_bar, r, *, project: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Seed 003 eq. 15: ``z+ = z + r Pi_z(u_bar)``, ``u+ = Norm(z+)``; ``project=False`` is C.2's
    unprojected ``z + r u_bar`` (D.4's layer update).

    ``Pi_z(u_bar) = u_bar - (z . u_bar / |z|^2) z`` is the tangent projection at ``z``. With it
    ``|z+|^2 = |z|^2 + r^2 |Pi u_bar|^2`` (the magnitude changes at second order, C26); without
    it ``|z+| = |z| + r u . u_bar + O(r^2/|z|)`` (C.2's magnitude update).

    Shapes: z_s, u_bar (..., d); r >= 0 broadcast against ``z_s.shape[:-1]``. Returns
    ``(z_plus, u_plus)``.
    """
    z_s = _rows("z_s", z_s)
    u_bar = _rows("u_bar", u_bar, z_s.shape[-1])
    r = validation.nonnegative("r", r)[..., None]
    n2 = np.sum(z_s * z_s, axis=-1, keepdims=True)
    if np.any(n2 == 0):
        raise ValueError("z_s must be nonzero: the tangent space at 0 is undefined")
    step = u_bar - np.sum(z_s * u_bar, axis=-1, keepdims=True) / n2 * z_s if project else u_bar
    z_plus = z_s + r * step
    n, u_plus = _unit(z_plus)
    if np.any(n == 0):
        raise ValueError("z_s + r u_bar is zero: the update has no direction")
    return z_plus, u_plus


def angular_step(z_s, u_bar, r, *, project: bool = True) -> np.ndarray:
    """The angle eq. 15 turns ``z`` by: ``atan2(r |P_T u_bar|, m + r u . u_bar)`` (seed 003 eq. 16).

    ``m = |z_s|``, ``u = z_s / m``; with ``project=True`` the radial term is dropped,
    ``atan2(r |P_T u_bar|, m)``. Eq. 16 states the size ``r |u_bar| / m``; the exact first-order
    form is ``r |P_T(u) u_bar| / m`` (digest C27), which eq. 16 bounds from above.

    Shapes: z_s, u_bar (..., d); r >= 0 -> (...).
    """
    z_s = _rows("z_s", z_s)
    u_bar = _rows("u_bar", u_bar, z_s.shape[-1])
    r = validation.nonnegative("r", r)
    m, u = _unit(z_s)
    if np.any(m == 0):
        raise ValueError("z_s must be nonzero: a zero state has no direction")
    along = np.sum(u * u_bar, axis=-1)
    perp = np.linalg.norm(u_bar - along[..., None] * u, axis=-1)
    return np.arctan2(r * perp, m if project else m + r * along)

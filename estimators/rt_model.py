"""The radial-tangential (RT) model shared by the RT estimators: parameters, checks, transport.

The RT estimators (`estimators.rt_irls`: RT-Kalman IRLS; `estimators.directional`: the
directional MLE / IRLS) estimate the latent state of a radial-tangential SDE from its
measurements, in real eigen-coordinates ``x_s`` in R^d (seed 003 digest, section 8 item 7:
``d`` is the real dimension and ``Omega`` a real skew generator, so ``e^{Omega s}`` is a
rotation). A measurement ``z_s,j = m_j u_z,j`` (``m_j = |z_s,j|``) is carried to the query time
``t_i`` by the mean dynamics ``dx_s = (-mu_r I + Omega) x_s dt`` (the literal RT-SDE's drift,
exactly linear):

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

This module owns `RTModel` and what both estimators build on it: the checks of the model and of
the data (`check_model`, `check_data`), the key/query pairs (`pairs`: lags, support, decay),
their variances (`variances`) and the transport `Transport`.

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

INITS = ("mle", "query")

# A complex Schur form of a skew matrix is diagonal up to round-off (the matrix is normal);
# off-diagonal mass above this multiple of |Omega| means the input was not skew.
_SCHUR_RTOL = 1e-10

# --------------------------------------------------------------------------------------------
# Model
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

    Public as ``estimators.rt_irls.RTModel``, the entry point of the RT estimators.
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


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


class CheckedModel(NamedTuple):
    """A checked `RTModel` (scalars as floats) with ``basis_inv``."""

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


def check_model(model) -> CheckedModel:
    """Check an `RTModel` and precompute ``basis^-1`` (None for the identity basis)."""
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
    return CheckedModel(Omega, mu_r, mu_t, **scales, basis=basis, basis_inv=basis_inv)


class Data(NamedTuple):
    """Checked measurements: ``z_s`` (B, T, d) in eigen-coordinates, zeros where missing;
    observed (B, T); t (B, T); shared: t was given as (T,); squeeze: no batch axis given."""

    z_s: np.ndarray
    observed: np.ndarray
    t: np.ndarray
    shared: bool
    squeeze: bool


def check_data(m: CheckedModel, z, t, mask) -> Data:
    """Check the measurements and times (`batch_input.batch`) and map ``z`` to eigen-coordinates
    ``z_s = basis^-1 z``."""
    d = m.Omega.shape[0]
    if np.iscomplexobj(z):
        raise TypeError("z must be real (eigen-coordinates are real here), got complex entries")
    data = batch_input.batch(z, t, mask, d)
    z = data.z
    if m.basis_inv is not None:
        z = z @ m.basis_inv.T
    return Data(z, data.observed, data.times, data.shared, data.squeeze)


def iteration_options(tol, max_iter) -> tuple[float, int]:
    """Checked ``(tol >= 0, max_iter >= 1)`` of an iteration."""
    return validation.scalar("tol", tol, minimum=0.0), validation.count("max_iter", max_iter)


# --------------------------------------------------------------------------------------------
# Rotations by Omega: rotate, aggregate, counter-rotate
# --------------------------------------------------------------------------------------------


class Transport:
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


class Pairs(NamedTuple):
    lag: np.ndarray  # (B, T, T) or (1, T, T) for shared times: s_ij = t_i - t_j
    support: np.ndarray  # (B, T, T) key j usable for query i
    decay: np.ndarray  # (B, T, T) e^{-mu_r s_ij} on the support, 0 elsewhere


def query_key_pairs(m: CheckedModel, data: Data, causal: bool) -> Pairs:
    """Lags ``s_ij``, the support (observed keys, ``j <= i`` if causal) and the decay
    ``e^{-mu_r s_ij}`` of every query i and key j."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    B, T = data.t.shape
    # Shared times (a (T,) input): one (1, T, T) lag array serves every sequence.
    t = data.t[:1] if data.shared else data.t
    lag = t[:, :, None] - t[:, None, :]
    support = np.broadcast_to(data.observed[:, None, :], (B, T, T))
    if causal:
        support = support & np.tril(np.ones((T, T), dtype=bool))
    decay = np.where(support, np.exp(-m.mu_r * np.where(support, lag, 0.0)), 0.0)
    return Pairs(lag, support, decay)


def variances(m: CheckedModel, pairs: Pairs) -> rt.RTVariances:
    """`lag_variances` at the pairs' lags."""
    return lag_variances(m, pairs.lag)


def lag_variances(m, lag) -> rt.RTVariances:
    """``(a, b) = (sigma_Vr^2 + gamma_r^2, sigma_Vt^2 + gamma_t^2)`` at lags ``dt = -s``
    (``m``: an `RTModel` or `CheckedModel`; ``lag`` any shape)."""
    var = rt.propagated_variances(
        -lag,
        mu_r=m.mu_r,
        mu_t=m.mu_t,
        sigma_r=m.sigma_r,
        sigma_t=m.sigma_t,
        eta_r=m.eta_r,
        eta_t=m.eta_t,
    )
    return rt.RTVariances(var.radial + m.gamma_r**2, var.tangential + m.gamma_t**2)


def sequence_change(change: np.ndarray, defined: np.ndarray) -> np.ndarray:
    """Largest change (B, T) -> (B,) over the rows where the estimate is defined."""
    return np.max(np.where(defined, change, 0.0), axis=1)

"""Propagated measurement covariance and the isotropic lag kernels (seed 000 2.1, A.1, A.3, 3.6;
seed 004 eq. 9, A.3, B.4).

Seed 000's convention: ``dt = t_j - t_i`` (negative for the causal case, measurement ``j``
before the target ``i``). With ``z_j = C x(t_j) + v_j``, ``v_j ~ N(0, R)`` and an invertible
``C``, the pulled-forward measurement and its law are (seed 000 A.1)

    z_hat_i(t_j) = Phi_z(dt) z_j,        Phi_z(dt) = C e^{-A dt} C^-1,
    z_hat_i(t_j) ~ N(C x(t_i), V^C(dt)),  V^C(dt) = C V(dt) C^T + Phi_z(dt) R Phi_z(dt)^T,

with ``V(dt)`` the propagated state covariance of `estimators.closed_forms.dle`. For
``A = S diag(lam) S^-1``, ``C = S diag(c) S^-1`` and any PSD ``Q``, ``R`` (with
``G_Q = S^-1 Q S^-H``, ``G_R = S^-1 R S^-H`` and ``a_kl = lam_k + conj(lam_l)``),

    V^C(dt) = S M(dt) S^H,   M_kl = c_k conj(c_l) G_Q,kl psi(a_kl, dt) + G_R,kl e^{-a_kl dt},

which for simultaneously diagonalizable ``Q = S diag(q) S^H``, ``R = S diag(r) S^H`` is the
seed's ``|Lambda_C|^2 Lambda_V + e^{-2 Re(Lambda) dt} Lambda_R`` (A.3, both signs of ``dt``
through ``sign(dt) phi``). The isotropic case ``A = alpha I + Omega`` gives the scalar kernel
``sigma_V^2(dt)`` (end of A.3).

Seed 004 (RFA) uses the opposite sign, ``lag = t_i - t_j >= 0`` for the causal case, decay
``mu = -alpha`` and an extra anchor noise ``gamma^2``: its eq. (9) kernel
``sigma_tilde^2 (1 - e^{-2 mu lag}) + eta^2 e^{-2 mu lag} + gamma^2 = a e^{-2 mu lag} + b``
(``a = eta^2 - sigma_tilde^2``, ``b = gamma^2 + sigma_tilde^2``; the paper calls them alpha and
beta) and its log-precision ("bias") in the integrative (``a > 0``) and diffusive (``a < 0``)
regimes are here too, with the ALiBi slope of the zero-decay limit (B.4).

Shapes: ``A``, ``Q``, ``C``, ``R`` (d, d); eigen-data (d,); ``dt``/``lag`` scalar or any array
shape; matrix results have shape ``dt.shape + (d, d)``, per-mode ones ``dt.shape + (d,)``, scalar
kernels ``lag.shape``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.linalg import expm
from scipy.special import expit

from estimators.closed_forms import dle
from sde_sim import validation

# |Im| of S M S^H that should be real, relative to its size: round-off only.
_REAL_RTOL = 1e-9
# Largest condition number accepted for C (Phi_z needs C^-1); validation.invertible's bound.
_MAX_COND = 1e12


# --- general (numeric) form -----------------------------------------------------------------


def _invertible_real(name: str, value, dim: int | None = None) -> np.ndarray:
    arr = validation.square_matrix(name, value, dim)
    validation.invertible(name, arr)
    return arr


def measurement_transition(A, C, dt) -> np.ndarray:
    """``Phi_z(dt) = C e^{-A dt} C^-1`` (seed 000 A.1), the pull of ``z_j`` to time ``t_i``.

    Seed 000 section 2.1 prints ``C e^{+A dt} C^-1``; that sign is wrong for its own
    ``x_hat_i(t_j) = e^{-A dt} x(t_j)`` (the check ``measurement.printed-sec2.1-transition``
    shows the printed form biases the estimate). When ``A`` and ``C`` commute this is
    ``e^{-A dt}``.

    Shapes: A, C (d, d) with C invertible; dt scalar or (...) -> dt.shape + (d, d).
    """
    A = validation.square_matrix("A", A)
    C = _invertible_real("C", C, A.shape[0])
    dt = validation.real_array("dt", dt)
    E = expm(-A * dt.reshape(-1, 1, 1)).reshape(*dt.shape, *A.shape)
    return C @ E @ np.linalg.inv(C)


def measurement_covariance(A, Q, C, R, dt) -> np.ndarray:
    """Numeric ``V^C(dt) = C V(dt) C^T + Phi_z(dt) R Phi_z(dt)^T`` for any real A (seed 000 A.1).

    ``V(dt)`` is Van Loan's `dle.propagated_covariance` (``V_B(dt)`` for ``dt > 0``, ``V_F(|dt|)``
    otherwise) and ``Phi_z`` the matrix exponential: the reference the eigenbasis closed form is
    checked against.

    Shapes: A, Q, C, R (d, d); dt scalar or (...) -> dt.shape + (d, d).
    """
    A = validation.square_matrix("A", A)
    d = A.shape[0]
    Q = validation.covariance("Q", Q, d)
    R = validation.covariance("R", R, d)
    C = _invertible_real("C", C, d)
    dt = validation.real_array("dt", dt)
    V = dle.propagated_covariance(A, Q, dt)
    Phi = measurement_transition(A, C, dt)
    out = C @ V @ C.T + Phi @ R @ np.swapaxes(Phi, -1, -2)
    return 0.5 * (out + np.swapaxes(out, -1, -2))


# --- eigenbasis closed forms (seed 000 A.3) ----------------------------------------------------


def _c_eigenvalues(C_eigenvalues, d: int) -> np.ndarray:
    if C_eigenvalues is None:
        return np.ones(d, dtype=complex)
    c = validation.complex_array("C_eigenvalues", C_eigenvalues, ndim=1)
    if c.shape != (d,):
        raise ValueError(f"C_eigenvalues must have shape ({d},), got {c.shape}")
    if np.any(c == 0):
        raise ValueError("C_eigenvalues must be nonzero (C must be invertible), got a zero entry")
    return c


def eigen_measurement_covariance(eigenvalues, S, Q, R, dt, *, C_eigenvalues=None) -> np.ndarray:
    """Closed-form ``V^C(dt) = S M(dt) S^H`` for ``C = S diag(c) S^-1`` and any PSD Q, R.

    ``M_kl = c_k conj(c_l) G_Q,kl psi(a_kl, dt) + G_R,kl e^{-a_kl dt}`` with
    ``a_kl = lam_k + conj(lam_l)``, ``G_X = S^-1 X S^-H`` and
    ``psi(a, dt) = sign(dt) (1 - e^{-a dt}) / a`` (`dle.psi`, limit ``|dt|`` at ``a = 0``). The
    first term is ``C V C^T`` (seed 000 A.3), the second ``Phi_z R Phi_z^T`` since
    ``Phi_z = S e^{-Lambda dt} S^-1`` when C commutes with A. Diagonal ``G_Q``, ``G_R`` give the
    seed's ``|Lambda_C|^2 Lambda_V + e^{-2 Re(Lambda) dt} Lambda_R``.

    Parameters
    ----------
    eigenvalues : (d,) eigenvalues of A (conjugate pairs for a real A).
    S : (d, d) eigenvectors (conjugate columns for conjugate eigenvalues).
    Q, R : (d, d) process and measurement noise covariances.
    dt : lag(s) ``t_j - t_i``, any shape.
    C_eigenvalues : (d,) nonzero eigenvalues of C in the basis S (conjugate pairs with those of
        A for a real C); default ones (``C = I``).

    Returns
    -------
    dt.shape + (d, d) real symmetric array.
    """
    lam, S, G_Q = dle.eigenbasis_noise(eigenvalues, S, Q)
    d = S.shape[0]
    R = validation.covariance("R", R, d)
    c = _c_eigenvalues(C_eigenvalues, d)
    S_inv = np.linalg.inv(S)
    G_R = S_inv @ R @ S_inv.conj().T
    dt = validation.real_array("dt", dt)[..., None, None]
    a = lam[:, None] + lam.conj()[None, :]
    M = np.outer(c, c.conj()) * G_Q * dle.psi(a, dt) + G_R * np.exp(-a * dt)
    return _real_symmetric(S @ M @ S.conj().T, "S M S^H")


def eigen_measurement_variances(
    eigenvalues, process_variances, measurement_variances, dt, *, C_eigenvalues=None
) -> np.ndarray:
    """Per-mode ``Lambda_V^C(dt) = sign(dt) |c|^2 q phi(lam, dt) + e^{-2 Re(lam) dt} r``.

    Seed 000 A.3 (the unified causal/non-causal form at its end), for ``Q = S diag(q) S^H``,
    ``R = S diag(r) S^H``, ``C = S diag(c) S^-1``; ``phi(lam, dt) = (e^{-2 Re(lam) dt} - 1) /
    (-2 Re(lam))`` with limit ``dt`` at ``Re(lam) = 0`` (expm1 form, `dle.eigen_mode_variances`).

    Shapes: eigenvalues, process_variances, measurement_variances, C_eigenvalues (d,);
    dt (...) -> dt.shape + (d,).
    """
    lam = validation.complex_array("eigenvalues", eigenvalues, ndim=1)
    r = validation.nonnegative("measurement_variances", measurement_variances)
    if r.shape != lam.shape:
        raise ValueError(f"measurement_variances must have shape {lam.shape}, got {r.shape}")
    c = _c_eigenvalues(C_eigenvalues, lam.size)
    dt = validation.real_array("dt", dt)
    process = dle.eigen_mode_variances(lam, process_variances, dt)
    return np.abs(c) ** 2 * process + r * np.exp(-2.0 * lam.real * dt[..., None])


def isotropic_measurement_variance(alpha, sigma2, eta2, dt, *, c_gain=1.0) -> np.ndarray:
    """Isotropic kernel ``sigma_V^2(dt)`` of seed 000 (end of A.3), ``dt = t_j - t_i``.

    For ``A = alpha I + Omega`` (Omega with imaginary eigenvalues), ``Q = sigma2 S S^H``,
    ``R = eta2 S S^H`` and ``C = c_gain I`` in the basis S, ``V^C(dt) = sigma_V^2(dt) S S^H`` with

        sigma_V^2(dt) = sign(dt) |c|^2 sigma2 (e^{-2 alpha dt} - 1) / (-2 alpha)
                        + e^{-2 alpha dt} eta2,

    and ``|c|^2 sigma2 |dt| + eta2`` at ``alpha = 0`` (the unitary limit, seed 000 3.8).
    Evaluated through the expm1 form `dle.psi`. The lag kernel of seed 000 section 3.6 for a
    causal lag of ``tau`` steps of ``step`` is ``isotropic_measurement_variance(alpha, sigma2,
    eta2, -step * tau)``: ``|c|^2 sigma2 (1 - e^{2 alpha step tau}) / (-2 alpha) + eta2
    e^{2 alpha step tau}`` (the printed 3.6 form, evaluated there at ``tau = |i - j|``, has
    the exponents' signs flipped).

    Shapes: dt any shape -> dt.shape.
    """
    alpha = validation.scalar("alpha", alpha)
    sigma2 = validation.scalar("sigma2", sigma2, minimum=0.0)
    eta2 = validation.scalar("eta2", eta2, minimum=0.0)
    gain = _gain(c_gain)
    dt = validation.real_array("dt", dt)
    process = dle.psi(2.0 * alpha, dt).real
    return gain * sigma2 * process + eta2 * np.exp(-2.0 * alpha * dt)


def _gain(c_gain) -> float:
    """``|lambda_C|^2`` for a real or complex gain; validates that it is nonzero."""
    c = complex(validation.complex_array("c_gain", c_gain, ndim=0))
    if c == 0:
        raise ValueError("c_gain must be nonzero (C must be invertible), got 0")
    return abs(c) ** 2


def _real_symmetric(V: np.ndarray, name: str) -> np.ndarray:
    scale = max(1.0, float(np.abs(V).max(initial=0.0)))
    imag = float(np.abs(V.imag).max(initial=0.0))
    if imag > _REAL_RTOL * scale:
        raise ValueError(
            f"{name} is not real (max |Im| = {imag:.3g}): the eigenvalues, C_eigenvalues and S "
            "must describe real A and C (conjugate pairs with conjugate columns)"
        )
    V = V.real
    return 0.5 * (V + np.swapaxes(V, -1, -2))


# --- seed 004 (RFA): eq. (9), regimes, zero-decay limit ----------------------------------------


class LagKernel(NamedTuple):
    """Coefficients of ``sigma_V^2(lag) = a e^{-2 mu lag} + b`` (seed 004 A.3, eq. 9).

    ``a = eta2 - sigma2_tilde`` (the paper's alpha: > 0 integrative, < 0 diffusive),
    ``b = gamma2 + sigma2_tilde`` (its beta, the long-lag floor) and
    ``sigma2_tilde = |lambda_C|^2 sigma2 / (2 mu)`` (steady-state process variance).
    """

    a: float
    b: float
    sigma2_tilde: float


def rfa_kernel_coefficients(mu, sigma2, eta2, gamma2, *, c_gain=1.0) -> LagKernel:
    """``LagKernel(a, b, sigma2_tilde)`` from the physical parameters (seed 004 A.3, eq. 9).

    ``mu > 0`` is needed: at ``mu = 0`` the steady state does not exist and the kernel is linear
    in the lag (`isotropic_residual_variance`).
    """
    mu = validation.scalar("mu", mu, minimum=0.0, strict=True)
    sigma2 = validation.scalar("sigma2", sigma2, minimum=0.0)
    eta2 = validation.scalar("eta2", eta2, minimum=0.0)
    gamma2 = validation.scalar("gamma2", gamma2, minimum=0.0)
    sigma2_tilde = _gain(c_gain) * sigma2 / (2.0 * mu)
    return LagKernel(eta2 - sigma2_tilde, gamma2 + sigma2_tilde, sigma2_tilde)


def _lag(lag) -> np.ndarray:
    lag = validation.real_array("lag", lag)
    if np.any(lag < 0):
        raise ValueError(f"lag must be >= 0 (seed 004 uses |t_i - t_j|), got min {lag.min():g}")
    return lag


def rfa_lag_variance(lag, *, mu, sigma2_tilde, eta2, gamma2) -> np.ndarray:
    """Seed 004 eq. (9): ``sigma2_tilde (1 - e^{-2 mu lag}) + eta2 e^{-2 mu lag} + gamma2``.

    ``lag = |t_i - t_j| >= 0``; ``mu >= 0`` (at ``mu = 0`` with fixed ``sigma2_tilde`` the
    kernel is the constant ``eta2 + gamma2``). ``1 - e^{-2 mu lag}`` is evaluated as
    ``-expm1(-2 mu lag)``, exact to round-off for small ``mu lag``.

    Shapes: lag any shape -> lag.shape.
    """
    lag = _lag(lag)
    mu = validation.scalar("mu", mu, minimum=0.0)
    sigma2_tilde = validation.scalar("sigma2_tilde", sigma2_tilde, minimum=0.0)
    eta2 = validation.scalar("eta2", eta2, minimum=0.0)
    gamma2 = validation.scalar("gamma2", gamma2, minimum=0.0)
    return -sigma2_tilde * np.expm1(-2.0 * mu * lag) + eta2 * np.exp(-2.0 * mu * lag) + gamma2


def isotropic_residual_variance(lag, *, mu, sigma2, eta2, gamma2, c_gain=1.0) -> np.ndarray:
    """Seed 004 A.3 isotropic residual variance with the ``mu -> 0`` branch.

    ``|c|^2 sigma2 (1 - e^{-2 mu lag}) / (2 mu) + eta2 e^{-2 mu lag} + gamma2`` for
    ``lag = t_i - t_j >= 0``; at ``mu = 0`` it is ``|c|^2 sigma2 lag + eta2 + gamma2`` (B.4.2,
    the Brownian / ALiBi limit). It is seed 000's `isotropic_measurement_variance` at
    ``alpha = -mu``, ``dt = -lag``, plus the anchor noise ``gamma2``.

    Shapes: lag any shape -> lag.shape.
    """
    lag = _lag(lag)
    mu = validation.scalar("mu", mu, minimum=0.0)
    gamma2 = validation.scalar("gamma2", gamma2, minimum=0.0)
    return isotropic_measurement_variance(-mu, sigma2, eta2, -lag, c_gain=c_gain) + gamma2


def _regime(a, b) -> tuple[float, float]:
    a = validation.scalar("a", a)
    b = validation.scalar("b", b, minimum=0.0, strict=True)
    if a + b <= 0:
        raise ValueError(
            f"a + b = eta2 + gamma2 must be > 0 (the zero-lag variance), got a={a:g}, b={b:g}"
        )
    return a, b


def rfa_log_precision(lag, *, a, b, mu) -> np.ndarray:
    """``B(lag) = log P = -log(a e^{-2 mu lag} + b)`` in the paper's regime forms (seed 004 B.4.1).

    * integrative (``a > 0``): ``-log b - softplus(log(a/b) - 2 mu lag)``;
    * diffusive (``a < 0``): ``-log b - log1p(-(|a|/b) e^{-2 mu lag})``;
    * ``a = 0``: ``-log b``.

    ``softplus`` is ``logaddexp(0, .)`` and ``log1p`` keeps full precision when ``|a|/b
    e^{-2 mu lag}`` is small; neither overflows at long lags. The inputs themselves cancel when
    ``sigma2_tilde >> eta2 + gamma2`` (small ``mu``): ``a + b = eta2 + gamma2`` is then lost to
    rounding of ``a`` and ``b``, and ``-log(isotropic_residual_variance(...))`` (built from
    ``sigma2``, with its ``mu -> 0`` branch) is the accurate form.

    Parameters
    ----------
    lag : lags ``>= 0``, any shape.
    a, b : kernel coefficients (`rfa_kernel_coefficients`); ``b > 0`` and ``a + b > 0``.
    mu : decay ``>= 0``.
    """
    lag = _lag(lag)
    a, b = _regime(a, b)
    mu = validation.scalar("mu", mu, minimum=0.0)
    if a > 0:
        return -np.log(b) - np.logaddexp(0.0, np.log(a / b) - 2.0 * mu * lag)
    if a < 0:
        return -np.log(b) - np.log1p(-(-a / b) * np.exp(-2.0 * mu * lag))
    return np.full(lag.shape, -np.log(b))


def rfa_precision(lag, *, a, b, mu) -> np.ndarray:
    """``P(lag) = 1 / (a e^{-2 mu lag} + b)`` in the regime forms (seed 004 B.4.1).

    Integrative (``a > 0``): ``sigmoid(2 mu lag - log(a/b)) / b`` ("opening gate", rising with
    the lag); diffusive (``a < 0``): ``1 / (b - |a| e^{-2 mu lag})`` ("closing gate").
    """
    lag = _lag(lag)
    a, b = _regime(a, b)
    mu = validation.scalar("mu", mu, minimum=0.0)
    if a > 0:
        return expit(2.0 * mu * lag - np.log(a / b)) / b
    return 1.0 / (b + a * np.exp(-2.0 * mu * lag))


def zero_decay_bias(lag, *, c, s, kappa, nu) -> np.ndarray:
    """Seed 004 B.4.2 combined bias ``log P - (2 kappa / nu) P``, ``P = 1 / (c lag + s)``.

    The ``mu = 0`` (zero-decay) variance is ``c lag + s`` with ``c = |lambda_C|^2 sigma2`` and
    ``s = eta2 + gamma2``; the bias is the part of the paper's approximate logit that does not
    depend on the query-key product.
    """
    lag = _lag(lag)
    c = validation.scalar("c", c, minimum=0.0)
    s = validation.scalar("s", s, minimum=0.0, strict=True)
    kappa = validation.scalar("kappa", kappa, minimum=0.0, strict=True)
    nu = validation.scalar("nu", nu, minimum=0.0, strict=True)
    P = 1.0 / (c * lag + s)
    return np.log(P) - 2.0 * kappa / nu * P


def alibi_slope(*, c, s, kappa, nu) -> float:
    """ALiBi slope ``m = c/s - (2 kappa/nu) c/s^2`` of `zero_decay_bias` at lag 0 (seed 004 B.4.2).

    ``zero_decay_bias(lag) = const - m lag + O(lag^2)``: ``m = -dB/dlag`` at ``lag = 0``. The
    first term is Brownian variance growth, the second the Student-t correction (small when
    ``nu`` is of order d).
    """
    c = validation.scalar("c", c, minimum=0.0)
    s = validation.scalar("s", s, minimum=0.0, strict=True)
    kappa = validation.scalar("kappa", kappa, minimum=0.0, strict=True)
    nu = validation.scalar("nu", nu, minimum=0.0, strict=True)
    return c / s - 2.0 * kappa / nu * c / s**2

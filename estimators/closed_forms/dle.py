"""Propagated state covariance: the differential Lyapunov equation (seed 000 2.1, A.1, A.3).

Sign convention of the seed: ``dt = t_j - t_i`` is the lag of the measurement ``j`` used to
estimate the state at ``t_i``, and the pulled-forward estimate is ``x_hat_i(t_j) = e^{-A dt}
x(t_j) ~ N(x(t_i), V(dt))`` with

    V(dt) = V_B(dt)     for dt > 0 (non-causal: j after i),
    V(dt) = V_F(|dt|)   for dt <= 0 (causal: j before i),

    V_F(s) = int_0^s e^{A r} Q e^{A^T r} dr     (solves dV/ds = A V + V A^T + Q, V(0) = 0),
    V_B(s) = int_0^s e^{-A r} Q e^{-A^T r} dr   (the same with -A).

For a diagonalizable ``A = S diag(lam) S^-1`` and any PSD ``Q``, with ``G = S^-1 Q S^-H``
(seed 000 A.3), ``V(dt) = S L(dt) S^H`` where, with ``a_kl = lam_k + conj(lam_l)``,

    L_kl(dt) = G_kl psi(a_kl, dt),   psi(a, dt) = sign(dt) (1 - e^{-a dt}) / a,   psi(0, dt) = |dt|.

When ``Q = S diag(q) S^H`` (simultaneously diagonalizable) ``G`` is diagonal and this is the
seed's ``sign(dt) q_k phi(lam_k, dt)``, ``phi = (e^{-2 Re(lam) dt} - 1) / (-2 Re(lam))``.

Shapes: ``A``, ``Q`` (d, d); eigenvalues (d,); ``S`` (d, d) complex; ``dt`` scalar or (n,); the
result has shape ``dt.shape + (d, d)``.
"""

from __future__ import annotations

import numpy as np

from sde_sim import validation
from sde_sim.exact import van_loan

# |Im| of S L S^H that should be real, relative to its size: round-off only.
_REAL_RTOL = 1e-9
# |off-diagonal| of S^-1 Q S^-H relative to its diagonal, below which Q counts as
# simultaneously diagonalizable with A.
_DIAGONAL_RTOL = 1e-9


def forward_covariance(A, Q, s) -> np.ndarray:
    """``V_F(s) = int_0^s e^{Ar} Q e^{A^T r} dr`` for ``s >= 0``, any real A (numeric reference).

    Van Loan's block exponential with scaling and doubling (`sde_sim.exact.van_loan`), which
    stays accurate for strongly stable A over long lags.
    """
    A = validation.square_matrix("A", A)
    Q = validation.covariance("Q", Q, A.shape[0])
    s = validation.real_array("s", s)
    if np.any(s < 0):
        raise ValueError(f"s must be >= 0, got min {s.min():g}")
    return van_loan(A, Q, s.ravel())[1].reshape(*s.shape, *A.shape)


def backward_covariance(A, Q, s) -> np.ndarray:
    """``V_B(s) = int_0^s e^{-Ar} Q e^{-A^T r} dr`` (seed 000 A.1): `forward_covariance` of -A."""
    A = validation.square_matrix("A", A)
    return forward_covariance(-A, Q, s)


def propagated_covariance(A, Q, dt) -> np.ndarray:
    """Numeric ``V(dt)``: ``V_B(dt)`` if ``dt > 0``, else ``V_F(|dt|)`` (seed 000 A.1)."""
    dt = validation.real_array("dt", dt)
    forward = forward_covariance(A, Q, np.abs(dt))
    backward = backward_covariance(A, Q, np.abs(dt))
    return np.where((dt > 0)[..., None, None], backward, forward)


def psi(a, dt) -> np.ndarray:
    """``sign(dt) (1 - e^{-a dt}) / a`` with its ``a -> 0`` limit ``|dt|`` (complex ``a`` allowed).

    Evaluated as ``-sign(dt) expm1(-a dt) / a``: ``expm1`` keeps full relative precision when
    ``a dt`` is tiny (the seed's ``Re(lambda) -> 0`` branch), where ``1 - e^{-a dt}`` would
    cancel catastrophically; ``a == 0`` exactly takes the limit.
    """
    a, dt = np.broadcast_arrays(np.asarray(a, dtype=complex), np.asarray(dt, dtype=float))
    out = np.array(np.abs(dt), dtype=complex)
    nz = a != 0
    out[nz] = -np.sign(dt[nz]) * np.expm1(-a[nz] * dt[nz]) / a[nz]
    return out


def eigenbasis_noise(eigenvalues, S, Q) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate eigen-data and return ``(lam, S, G)`` with ``G = S^-1 Q S^-H`` (seed 000 A.3)."""
    S = validation.invertible("S", S)
    d = S.shape[0]
    lam = validation.complex_array("eigenvalues", eigenvalues, ndim=1)
    if lam.shape != (d,):
        raise ValueError(f"eigenvalues must have shape ({d},) to match S, got {lam.shape}")
    Q = validation.covariance("Q", Q, d)
    S_inv = np.linalg.inv(S)
    return lam, S, S_inv @ Q @ S_inv.conj().T


def eigen_propagated_covariance(eigenvalues, S, Q, dt) -> np.ndarray:
    """Closed-form ``V(dt) = S L(dt) S^H`` with ``L_kl = G_kl psi(lam_k + conj(lam_l), dt)``.

    Valid for any PSD ``Q`` (``G = S^-1 Q S^-H`` need not be diagonal) and both signs of
    ``dt`` (seed 000 A.3, including its ``sign(dt)`` form). The result is real when the
    eigen-data describe a real ``A`` (conjugate pairs with conjugate columns).

    Shapes: eigenvalues (d,), S (d, d), Q (d, d), dt scalar or (n,) -> dt.shape + (d, d).
    """
    lam, S, G = eigenbasis_noise(eigenvalues, S, Q)
    dt = validation.real_array("dt", dt)
    a = lam[:, None] + lam.conj()[None, :]
    L = G * psi(a, dt[..., None, None])
    V = S @ L @ S.conj().T
    return _real(V, "S L S^H")


def eigen_mode_variances(eigenvalues, process_variances, dt) -> np.ndarray:
    """Diagonal case: ``lam_V,k(dt) = sign(dt) q_k phi(lam_k, dt)`` per mode (seed 000 A.3).

    ``phi(lam, dt) = (e^{-2 Re(lam) dt} - 1) / (-2 Re(lam))``, and ``dt`` when ``Re(lam) = 0``.
    Shapes: eigenvalues (d,), process_variances (d,) >= 0, dt scalar or (n,) -> dt.shape + (d,).
    """
    lam = validation.complex_array("eigenvalues", eigenvalues, ndim=1)
    q = validation.nonnegative("process_variances", process_variances)
    if q.shape != lam.shape:
        raise ValueError(f"process_variances must have shape {lam.shape}, got {q.shape}")
    dt = validation.real_array("dt", dt)
    return q * psi(2.0 * lam.real, dt[..., None]).real


def diagonal_propagated_covariance(eigenvalues, S, Q, dt) -> np.ndarray:
    """``V(dt) = S diag(lam_V(dt)) S^H`` when ``Q`` is simultaneously diagonalizable with A.

    Raises
    ------
    ValueError
        If ``S^-1 Q S^-H`` is not diagonal (then use `eigen_propagated_covariance`).
    """
    lam, S, G = eigenbasis_noise(eigenvalues, S, Q)
    diag = np.diag(G)
    off = np.abs(G - np.diag(diag)).max(initial=0.0)
    if off > _DIAGONAL_RTOL * max(np.abs(diag).max(initial=0.0), np.finfo(float).tiny):
        raise ValueError(
            "Q is not simultaneously diagonalizable with A: S^-1 Q S^-H has off-diagonal "
            f"entries up to {off:.3g} (use eigen_propagated_covariance for a general Q)"
        )
    variances = eigen_mode_variances(lam, diag.real, dt)
    V = (S * variances[..., None, :]) @ S.conj().T
    return _real(V, "S diag(lam_V) S^H")


def _real(V: np.ndarray, name: str) -> np.ndarray:
    scale = max(1.0, float(np.abs(V).max(initial=0.0)))
    imag = float(np.abs(V.imag).max(initial=0.0))
    if imag > _REAL_RTOL * scale:
        raise ValueError(
            f"{name} is not real (max |Im| = {imag:.3g}): the eigenvalues and S "
            "must describe a real A (conjugate pairs with conjugate columns)"
        )
    V = V.real
    return 0.5 * (V + np.swapaxes(V, -1, -2))

"""Batch precision-weighted maximum-likelihood estimates of a linear SDE's trajectory.

Seed 000 sections 2.1, 2.2 and A.2 (drift and bias: 3.9, 3.10). Model (rows here, columns in
the seed)::

    dx = (A x + u) dt + G dw,   z_j = C x(t_j + delay) + b + v_j,   v_j ~ N(0, R),

with a square, invertible ``C``. With the seed's lag convention ``dt_ij = t_j - t_i`` (``<= 0``
causal: the measurement ``j`` is not after the target ``i``), each measurement is pulled to
the target time (`estimators.closed_forms.drift.pulled_back_measurement`, whose delay
cancels)::

    z_hat_ij = Phi_z(dt_ij) z_j + (I - Phi_z(dt_ij)) b + C G_u(-dt_ij) u,
    Phi_z(dt) = C e^{-A dt} C^-1,   G_u(s) = int_0^s e^{A r} dr,

and ``z_hat_ij ~ N(z^C_i, V^C(dt_ij))`` around the output ``z^C_i = C x(t_i + delay) + b``,
``V^C(dt) = C V(dt) C^T + Phi_z(dt) R Phi_z(dt)^T`` (`estimators.closed_forms.measurement`,
``V`` the propagated state covariance of `estimators.closed_forms.dle`). Treating the
``z_hat_ij`` as independent, the log-likelihood of ``z^C_i`` is maximised by the
precision-weighted average (A.2)::

    z_bar_i = (sum_j P^C_ij)^-1 sum_j P^C_ij z_hat_ij,   P^C_ij = V^C(dt_ij)^-1,

over ``j <= i`` (causal) or all ``j`` (non-causal), observed ``j`` only. The state estimate is
``x_bar_i = C^-1 (z_bar_i - b)`` and the one-step prediction of the next measurement (A.2,
2.3) is ``z_plus_{i+1} = Phi_z(t_i - t_{i+1}) z_bar_i + offset = C e^{A h} C^-1 z_bar_i +
offset``, ``h = t_{i+1} - t_i``.

Two forms:

* `batch_mle`: the general matrix form, any ``A``, ``Q``, ``R`` (positive definite) and
  invertible ``C``: ``V^C`` by Van Loan's block exponential at every distinct lag, a ``d x d``
  precision per pair, a ``d x d`` solve per target. Cost ``O(L d^3 + B T^2 d^2)`` for ``L``
  distinct lags (``2T - 1`` on a regular grid, up to ``T^2`` on an irregular one).
* `eigen_batch_mle`: the tensor form of seed 000 2.2 for simultaneously diagonalizable systems
  (`DiagonalizableModel`: ``A = S Lambda S^-1``, ``C = S Lambda_C S^-1``, ``Q = S diag(q) S^H``,
  ``R = S diag(r) S^H``): per-mode scalar precisions ``1 / lambda^C_V(dt)``, per-mode
  weighted means in ``z_s = S^-1 z``, ``O(B T^2 d)``, no matrix inversions.

Zero process noise (``Q = 0``) makes the pulled-forward estimates truly independent (the state
moves deterministically between measurements), and then the causal MLE *is* the Kalman filter
started from a diffuse prior, and the non-causal MLE the RTS smoother, to round-off; both share
``(sum_j P^C_ij)^-1`` as the exact error covariance (`tests/estimators/test_mle.py`).

**The gap with process noise.** With ``Q > 0`` the pulled-forward estimates are correlated:
``z_hat_ij`` and ``z_hat_ik`` from the same side of ``t_i`` share the process noise between
the nearer measurement and ``t_i``, ``Cov = C V(dt*) C^T`` with ``dt*`` the lag of smaller
magnitude (zero across sides). The batch MLE ignores these correlations (seed 004 A.4 makes the
same conditional-independence approximation), so it is an unbiased linear estimator but not
the Kalman posterior mean, and ``(sum_j P^C_ij)^-1`` is not its error covariance.
`mle_error_covariance` gives the exact error covariance including the shared noise (derived
here; Monte Carlo confirms it, ``mle.error-covariance-monte-carlo``). Measured on the ``afa-2d``
preset, variant b (``sigma^2 = 0.3``, ``eta^2 = 0.5``, 101 measurements 0.1 apart), 400 paths
from the exact sampler (seed 11), squared state error summed over the two coordinates and
averaged over steps 10..100 (+- one standard error over paths):

==============================  ====================  ==========================
quantity                        causal MLE vs filter  non-causal MLE vs smoother
==============================  ====================  ==========================
MSE of the batch MLE            0.869 +- 0.023        0.490 +- 0.011
MSE of the Kalman estimate      0.220 +- 0.002        0.120 +- 0.001
exact MLE MSE (trace)           0.886                 0.504
Kalman covariance (trace)       0.220                 0.120
nominal tr (sum_j P^C_ij)^-1    0.056                 0.030
RMS distance MLE - Kalman       0.80                  0.61
==============================  ====================  ==========================

So the MLE's error is 4.0x (causal) and 4.1x (non-causal) the Kalman optimum (exact: 4.0x,
4.2x), and its nominal covariance understates its actual error 16-17x: it counts the shared
process noise once per measurement, as if independent, and believes it has averaged it down.
This is the diffusive regime (``sigma^2 / (2 |Re lambda|) = 1.5 > eta^2 = 0.5``, seed 004
A.4's R >> 1): with slow decay the precision falls only like ``1 / (sigma^2 |dt| + eta^2)``,
so the distant estimates, which share most of their process noise, keep a large share of the
total weight; seed 004's "self-regularization" argument (little weight where independence fails
most) does not hold here. The exact ratios ``tr(exact MLE covariance) / tr(Kalman
covariance)``, averaged after the first tenth of the steps, on the other presets (causal /
non-causal): afa-2d c 3.4 / 4.2, rotation-3d 3.7 / 4.7, ou 4.7 / 4.9, oscillator (under)
8.5 / 7.5, and 2.4 / 3.3 on rfa-ensemble-2d, the most integrative of them (``Q = 0.01 [[1, .5],
[.5, 1]]``, ``R = 0.25 [[1, .3], [.3, 1]]``).
The gap is a property of the estimator the papers' layers are derived from, not of this
implementation: with ``Q = 0`` the two agree to round-off. ``mle.kalman-gap`` checks the
ordering (Kalman <= MLE, PSD) exactly.

Shapes: ``z`` (B, T, d) or (T, d), time on rows; ``t`` (T,) shared or (B, T); ``mask`` (B, T) or
(T,), True where the measurement is observed. Results keep the batch axis of the input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from estimators import batch_input
from estimators import linear_gaussian as lg
from estimators.closed_forms import dle, drift
from estimators.closed_forms import measurement as meas
from estimators.linear_gaussian import real_part, sym
from sde_sim import LinearMeasurement, LinearSDE, validation
from sde_sim.models import covariance_from_eigen, real_from_eigen

# Lags equal to within this many ulps of the largest |time| are one lag: t_j - t_i is exact only
# to about 2 ulps of the times, so nominally equal lags on a regular grid differ by that much;
# merging them evaluates the matrix exponentials once per distinct lag (2T - 1 on a regular grid
# instead of T^2) and changes each by round-off only.
_LAG_MERGE_ULPS = 16.0
# Off-diagonal part of S^-1 X S^-H (or S^-1 X S) relative to its diagonal, below which X counts
# as diagonal in the basis S (DiagonalizableModel.from_linear).
_DIAGONAL_RTOL = 1e-9


# --------------------------------------------------------------------------------------------
# Results and the shared pairwise problem
# --------------------------------------------------------------------------------------------


class MLEResult(NamedTuple):
    """Output of `batch_mle`, `eigen_batch_mle` and `weighted_estimate`.

    outputs : (B, T, d) ``z_bar_i``, estimates of ``C x(t_i + delay) + b``; NaN where no
        measurement enters the estimate (a causal target before the first observed one).
    states : (B, T, d) ``x_bar_i = C^-1 (z_bar_i - b)``.
    covs : (B, T, d, d) ``(sum_j w_ij P^C_ij)^-1`` (``w = 1`` for the MLE): the error
        covariance of ``outputs`` if the pulled-forward estimates were independent, exact when
        ``Q = 0`` (see `mle_error_covariance` otherwise).
    state_covs : (B, T, d, d) ``C^-1 covs C^-T``.
    predictions : (B, T, d) row ``i >= 1``: ``z_plus_i``, the prediction of the measurement at
        ``t_i`` from ``z_bar_{i-1}`` (A.2); row 0 is NaN.
    n_used : (B, T) how many measurements enter each estimate.
    times : (B, T) the state times ``t + delay``.
    """

    outputs: np.ndarray
    states: np.ndarray
    covs: np.ndarray
    state_covs: np.ndarray
    predictions: np.ndarray
    n_used: np.ndarray
    times: np.ndarray


class PairwiseTerms(NamedTuple):
    """The pulled-forward estimates and precisions of every (target i, source j) pair.

    Shared by the MLE and the robust IRLS (`estimators.irls`). ``Bk`` is 1 when the sequences
    share their times, else B. In the general form every array is real and ``P`` holds
    matrices; in the eigenbasis form (``basis`` set) the arrays hold eigen-coordinates
    ``z_s = S^-1 z`` (complex) and ``P`` the per-mode precisions ``1 / lambda^C_V``.

    z : (B, T, d) measurements (zero where missing).
    transition : (Bk, T, T, d, d) ``Phi_z(dt_ij)``, or (Bk, T, T, d) ``e^{-lambda dt_ij}``.
    offset : (Bk, T, T, d) drift and bias part of ``z_hat_ij`` (zero without them).
    precision : (Bk, T, T, d, d) ``P^C_ij``, or (Bk, T, T, d) per mode.
    used : (B, T, T) bool, pair (i, j) enters target i's estimate (causal and observed j).
    basis : (d, d) ``S`` for the eigenbasis form, else None.
    C : (d, d) real measurement matrix.   b : (d,) bias.
    times : (B, T) state times.           squeeze : the input had no batch axis.
    """

    z: np.ndarray
    transition: np.ndarray
    offset: np.ndarray
    precision: np.ndarray
    used: np.ndarray
    basis: np.ndarray | None
    C: np.ndarray
    b: np.ndarray
    times: np.ndarray
    squeeze: bool

    @property
    def diagonal(self) -> bool:
        return self.basis is not None

    def z_hat(self) -> np.ndarray:
        """(B, T, T, d) pulled-forward estimates ``z_hat_ij`` (eigen-coordinates if diagonal)."""
        if self.diagonal:
            return self.transition * self.z[:, None] + self.offset
        return np.einsum("...ijkl,...jl->...ijk", self.transition, self.z) + self.offset

    def weighted_z_hat(self, z_hat: np.ndarray | None = None) -> np.ndarray:
        """(B, T, T, d) ``P^C_ij z_hat_ij`` (per mode if diagonal), 0 on unused pairs."""
        z_hat = self.z_hat() if z_hat is None else z_hat
        if self.diagonal:
            out = self.precision * z_hat
        else:
            out = np.einsum("...ijkl,...ijl->...ijk", self.precision, z_hat)
        return np.where(self.used[..., None], out, 0.0)

    def mahalanobis(self, estimate: np.ndarray, z_hat: np.ndarray | None = None) -> np.ndarray:
        """(B, T, T) ``d_ij^2 = r^T P^C_ij r``, ``r = estimate_i - z_hat_ij``; 0 on unused pairs.

        ``estimate`` (B, T, d) in the working coordinates (``z_s`` if diagonal, where
        ``r^T P r = sum_k lambda_P,k |r_s,k|^2``); ``z_hat`` the precomputed `z_hat()`.
        """
        z_hat = self.z_hat() if z_hat is None else z_hat
        r = estimate[:, :, None] - z_hat  # (B, T, T, d)
        if self.diagonal:
            d2 = np.sum(self.precision * (r.real**2 + r.imag**2), axis=-1)
        else:
            # r^T P r over the upper triangle of the symmetric P, one component pair at a
            # time: a few vector operations over the pairs instead of a generic contraction.
            P, d = self.precision, r.shape[-1]
            d2 = np.zeros(r.shape[:-1])
            for k in range(d):
                d2 += P[..., k, k] * r[..., k] ** 2
                for m in range(k + 1, d):
                    d2 += 2.0 * P[..., k, m] * r[..., k] * r[..., m]
        return np.where(self.used, np.maximum(d2, 0.0), 0.0)  # NaN rows (no estimate) -> 0


# --------------------------------------------------------------------------------------------
# Simultaneously diagonalizable systems (seed 000 2.2, A.3)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class DiagonalizableModel:
    """A linear SDE and measurement diagonal in one basis ``S`` (seed 000 2.2, A.3).

    ``A = S diag(eigenvalues) S^-1``, ``C = S diag(C_eigenvalues) S^-1``,
    ``Q = S diag(process_variances) S^H``, ``R = S diag(measurement_variances) S^H``; ``u`` (d,)
    drift and ``b`` (d,) bias in ambient coordinates. The eigen-data must describe real
    matrices (conjugate eigenvalues with conjugate columns of ``S`` and equal variances).

    Parameters
    ----------
    eigenvalues : (d,) complex.  S : (d, d) complex invertible.
    process_variances : (d,) >= 0.  measurement_variances : (d,) > 0.
    C_eigenvalues : (d,) nonzero, default ones (``C = I``).
    u, b : (d,) real, default zero.
    """

    eigenvalues: np.ndarray
    S: np.ndarray
    process_variances: np.ndarray
    measurement_variances: np.ndarray
    C_eigenvalues: np.ndarray | None = None
    u: np.ndarray | None = None
    b: np.ndarray | None = None

    def __post_init__(self) -> None:
        S = validation.invertible("S", self.S)
        d = S.shape[0]
        lam = validation.complex_array("eigenvalues", self.eigenvalues, ndim=1)
        if lam.shape != (d,):
            raise ValueError(f"eigenvalues must have shape ({d},) to match S, got {lam.shape}")
        q = validation.nonnegative("process_variances", self.process_variances)
        r = validation.nonnegative("measurement_variances", self.measurement_variances)
        for name, arr in (("process_variances", q), ("measurement_variances", r)):
            if arr.shape != (d,):
                raise ValueError(f"{name} must have shape ({d},), got {arr.shape}")
        if np.any(r <= 0):
            raise ValueError(
                "measurement_variances must be > 0 (R must be positive definite: P^C(0) = "
                f"R^-1), got min {r.min():.6g}"
            )
        c = np.ones(d, dtype=complex)
        if self.C_eigenvalues is not None:
            c = validation.complex_array("C_eigenvalues", self.C_eigenvalues, ndim=1)
            if c.shape != (d,):
                raise ValueError(f"C_eigenvalues must have shape ({d},), got {c.shape}")
            if np.any(c == 0):
                raise ValueError("C_eigenvalues must be nonzero (C must be invertible)")
        u = np.zeros(d) if self.u is None else validation.vector("u", self.u, d)
        b = np.zeros(d) if self.b is None else validation.vector("b", self.b, d)
        for name, value in (
            ("S", S),
            ("eigenvalues", lam),
            ("process_variances", q),
            ("measurement_variances", r),
            ("C_eigenvalues", c),
            ("u", u),
            ("b", b),
        ):
            object.__setattr__(self, name, validation.readonly(np.array(value)))
        # Real A, C, Q, R: raises naming the matrix when the eigen-data are not closed under
        # conjugation.
        for name, value in (
            ("A", real_from_eigen(lam, S)),
            ("C", real_from_eigen(c, S, name="C")),
            ("Q", covariance_from_eigen(S, q, name="Q")),
            ("R", covariance_from_eigen(S, r, name="R")),
        ):
            object.__setattr__(self, f"_{name}", validation.readonly(value))

    @property
    def dim(self) -> int:
        return self.S.shape[0]

    @property
    def A(self) -> np.ndarray:
        return self._A

    @property
    def C(self) -> np.ndarray:
        return self._C

    @property
    def Q(self) -> np.ndarray:
        return self._Q

    @property
    def R(self) -> np.ndarray:
        return self._R

    def sde(self) -> LinearSDE:
        """The same system as a `sde_sim.LinearSDE` (for the general form, simulation, Kalman)."""
        return LinearSDE.from_covariance(self.A, self.Q, self.u)

    def measurement(self) -> LinearMeasurement:
        """The same measurement as a `sde_sim.LinearMeasurement`."""
        return LinearMeasurement(self.C, self.R, self.b)

    @classmethod
    def from_linear(
        cls, sde: LinearSDE, measurement: LinearMeasurement, *, S=None
    ) -> DiagonalizableModel:
        """Eigen-data of a system that is simultaneously diagonalizable in ``S``.

        ``S`` defaults to the eigenvectors of ``A`` (``numpy.linalg.eig``); give it when ``A``
        has repeated eigenvalues and ``Q``, ``R``, ``C`` are diagonal in a particular basis.

        Raises
        ------
        ValueError
            If ``A``, ``C``, ``S^-1 Q S^-H`` or ``S^-1 R S^-H`` is not diagonal in ``S`` (then
            use the general form, `batch_mle`), or ``measurement.delay`` is nonzero.
        """
        _check_models(sde, measurement)
        if measurement.delay != 0:
            raise ValueError(
                f"measurement.delay must be 0 for the eigenbasis form, got {measurement.delay:g} "
                "(the estimates do not depend on it: shift t instead)"
            )
        if S is None:
            S = np.linalg.eig(sde.A)[1]
        S = validation.invertible("S", S, sde.dim)
        S_inv = np.linalg.inv(S)
        parts = {}
        for name, value, right in (
            ("A", sde.A, S),
            ("C", measurement.C, S),
            ("Q", sde.Q, S_inv.conj().T),
            ("R", measurement.R, S_inv.conj().T),
        ):
            M = S_inv @ value @ right
            diag = np.diag(M).copy()
            off = float(np.abs(M - np.diag(diag)).max(initial=0.0))
            scale = max(float(np.abs(diag).max(initial=0.0)), np.finfo(float).tiny)
            if off > _DIAGONAL_RTOL * scale:
                raise ValueError(
                    f"{name} is not diagonal in the basis S (off-diagonal entries up to "
                    f"{off:.3g} against {scale:.3g}): the system is not simultaneously "
                    "diagonalizable in S; use batch_mle (the general form)"
                )
            parts[name] = diag
        return cls(
            parts["A"],
            S,
            parts["Q"].real,
            parts["R"].real,
            C_eigenvalues=parts["C"],
            u=sde.u,
            b=measurement.b,
        )


# --------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------


def _check_models(sde, measurement) -> None:
    """The core's model checks, then what pulling measurements back needs: C square and
    invertible, R positive definite."""
    lg.check_model(sde, measurement)
    d = sde.dim
    if measurement.C.shape != (d, d):
        raise ValueError(
            f"measurement.C must be square ({d}, {d}) and invertible (pulled-forward estimates "
            f"need C^-1), got shape {measurement.C.shape}"
        )
    cond = np.linalg.cond(measurement.C)
    if not np.isfinite(cond) or cond > 1e12:
        raise ValueError(
            "measurement.C must be invertible (Phi_z = C e^{-A dt} C^-1 needs C^-1); its "
            f"condition number is {cond:.3g}"
        )
    eigs = np.linalg.eigvalsh(measurement.R)
    if eigs[0] <= 0:
        raise ValueError(
            "measurement.R must be positive definite (P^C(0) = R^-1); its smallest eigenvalue "
            f"is {eigs[0]:.6g}"
        )


def _batch(z, t, mask, d: int, *, delay: float = 0.0) -> batch_input.Batch:
    """`batch_input.batch` with the times (Bk, T): (1, T) when every sequence shares them, so
    that one set of lags serves the batch."""
    batch = batch_input.batch(z, t, mask, d, delay=delay)
    if np.all(batch.times == batch.times[:1]):
        batch = batch._replace(times=batch.times[:1])
    return batch


def _lags(times: np.ndarray) -> np.ndarray:
    """(Bk, T, T) ``dt_ij = t_j - t_i`` (seed 000's sign: <= 0 causal)."""
    return times[:, None, :] - times[:, :, None]


def _used(observed: np.ndarray, causal: bool) -> np.ndarray:
    T = observed.shape[1]
    used = np.broadcast_to(observed[:, None, :], (observed.shape[0], T, T))
    if causal:
        used = used & np.tri(T, dtype=bool)
    return np.ascontiguousarray(used)


def _needed(T: int, causal: bool) -> np.ndarray:
    """(T, T) pairs whose lag is evaluated: j <= i (causal, which holds the one-step lags
    [i, i-1] used by the prediction) or all."""
    return np.tri(T, dtype=bool) if causal else np.ones((T, T), dtype=bool)


def _distinct(lags: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of ``lags`` (n,) up to round-off and the index of each lag into them."""
    order = np.argsort(lags, kind="stable")
    ordered = lags[order]
    tol = _LAG_MERGE_ULPS * np.finfo(float).eps * max(scale, 1.0)
    start = np.concatenate([[True], np.diff(ordered) > tol])
    inverse = np.empty(lags.size, dtype=np.intp)
    inverse[order] = np.cumsum(start) - 1
    return ordered[start], inverse


# --------------------------------------------------------------------------------------------
# Pairwise terms: general and eigenbasis forms
# --------------------------------------------------------------------------------------------


def _general_kernels(sde: LinearSDE, measurement: LinearMeasurement, lags: np.ndarray):
    """``Phi_z``, offset and ``P^C`` at each lag (n,): (n, d, d), (n, d), (n, d, d)."""
    A, Q, C, R = sde.A, sde.Q, measurement.C, measurement.R
    d = sde.dim
    V = np.empty((lags.size, d, d))
    causal = lags <= 0
    # V(dt) = V_F(|dt|) for dt <= 0, V_B(dt) for dt > 0 (dle's convention), each side once.
    if np.any(causal):
        V[causal] = dle.forward_covariance(A, Q, -lags[causal])
    with np.errstate(over="ignore", invalid="ignore"):  # overflow handled below (`lost`)
        if np.any(~causal):
            V[~causal] = dle.backward_covariance(A, Q, lags[~causal])
        Phi = meas.measurement_transition(A, C, lags)
        VC = C @ V @ C.T + Phi @ R @ np.swapaxes(Phi, -1, -2)
    VC = sym(VC)
    # A measurement pulled back over a lag so long that e^{-A dt} overflows (a stable system,
    # dt > 0: a long pause before a later measurement) carries no information: its precision
    # P^C ~ e^{-2 a dt} and its weight P^C Phi_z ~ e^{-a dt} vanish. Give it exactly that,
    # P^C = 0 and Phi_z = 0, instead of 0 x inf = NaN.
    lost = ~(np.isfinite(Phi).all(axis=(-1, -2)) & np.isfinite(VC).all(axis=(-1, -2)))
    lost &= lags > 0
    if np.any(lost):
        Phi = np.where(lost[:, None, None], 0.0, Phi)
        VC = np.where(lost[:, None, None], np.eye(d), VC)  # placeholder; P is zeroed below
    try:
        L = np.linalg.cholesky(VC)
    except np.linalg.LinAlgError:
        worst = int(np.argmin(np.linalg.eigvalsh(VC)[:, 0]))
        raise ValueError(
            f"V^C(dt) is not positive definite at lag dt = {lags[worst]:.6g} (the propagated "
            "measurement covariance overflowed or underflowed: check A's stability and the "
            "span of t)"
        ) from None
    L_inv = np.linalg.inv(L)
    P = np.swapaxes(L_inv, -1, -2) @ L_inv
    P[lost] = 0.0
    offset = np.zeros((lags.size, d))
    if np.any(measurement.b):
        offset += measurement.b - Phi @ measurement.b
    if np.any(sde.u):
        offset += (C @ drift.drift_integral(A, -lags)) @ sde.u
    return Phi, offset, sym(P)


def pairwise_terms(
    sde: LinearSDE, measurement: LinearMeasurement, z, t, *, mask=None, causal: bool = True
) -> PairwiseTerms:
    """Pulled-forward estimates and precisions of all pairs, general matrix form (seed 000 2.1).

    ``Phi_z``, ``P^C = V^C^-1`` and the drift/bias offset are evaluated once per distinct lag
    ``dt_ij = t_j - t_i`` (pairs ``j <= i`` when causal, all pairs otherwise).

    Parameters
    ----------
    sde, measurement : the model; ``measurement.C`` square and invertible, ``R`` positive
        definite.
    z : (B, T, d) or (T, d) measurements; entries of missing ones are ignored.
    t : (T,) or (B, T) strictly increasing measurement times.
    mask : (B, T) or (T,) bool, True where observed; default all.
    causal : use ``j <= i`` only (True) or every ``j``.
    """
    _check_models(sde, measurement)
    batch = _batch(z, t, mask, sde.dim, delay=measurement.delay)
    d, T = sde.dim, batch.times.shape[1]
    lags = _lags(batch.times)
    needed = np.broadcast_to(_needed(T, causal), lags.shape)
    values, inverse = _distinct(lags[needed], float(np.abs(batch.times).max()))
    Phi_u, off_u, P_u = _general_kernels(sde, measurement, values)
    Bk = lags.shape[0]
    Phi = np.zeros((Bk, T, T, d, d))
    offset = np.zeros((Bk, T, T, d))
    P = np.zeros((Bk, T, T, d, d))
    Phi[needed], offset[needed], P[needed] = Phi_u[inverse], off_u[inverse], P_u[inverse]
    return PairwiseTerms(
        batch.z,
        Phi,
        offset,
        P,
        _used(batch.observed, causal),
        None,
        np.array(measurement.C),
        np.array(measurement.b),
        np.broadcast_to(batch.times, batch.observed.shape).copy(),
        batch.squeeze,
    )


def eigen_pairwise_terms(
    model: DiagonalizableModel, z, t, *, mask=None, causal: bool = True
) -> PairwiseTerms:
    """Eigenbasis pairwise terms (seed 000 2.2, A.3): per-mode decays and precisions.

    ``z_s = S^-1 z``; ``z_hat_s,ij = e^{-lambda dt_ij} z_s,j - expm1(-lambda dt_ij) b_s +
    lambda_C g(lambda, -dt_ij) u_s`` (`estimators.closed_forms.drift`, 3.10's final form) and
    ``lambda^C_P(dt) = 1 / (sign(dt) |lambda_C|^2 q phi(lambda, dt) + e^{-2 Re(lambda) dt} r)``
    (`estimators.closed_forms.measurement.eigen_measurement_variances`). Arguments as in
    `pairwise_terms`.
    """
    if not isinstance(model, DiagonalizableModel):
        raise TypeError(f"model must be a DiagonalizableModel, got {type(model).__name__}")
    d = model.dim
    batch = _batch(z, t, mask, d)
    T = batch.times.shape[1]
    lam, S, c = model.eigenvalues, model.S, model.C_eigenvalues
    S_inv = np.linalg.inv(S)
    lags = np.where(_needed(T, causal), _lags(batch.times), 0.0)[..., None]  # (Bk, T, T, 1)
    needed = _needed(T, causal)[None, :, :, None]
    variances = meas.eigen_measurement_variances(
        lam, model.process_variances, model.measurement_variances, lags[..., 0], C_eigenvalues=c
    )
    precision = np.where(needed, 1.0 / variances, 0.0)
    decay = np.where(needed, np.exp(-lam * lags), 0.0)
    offset = np.zeros(decay.shape, dtype=complex)
    if np.any(model.b):
        offset -= np.expm1(-lam * lags) * (S_inv @ model.b)
    if np.any(model.u):
        offset += c * drift.drift_factor(lam, -lags) * (S_inv @ model.u)
    offset = np.where(needed, offset, 0.0)
    return PairwiseTerms(
        batch.z @ S_inv.T,
        decay,
        offset,
        precision,
        _used(batch.observed, causal),
        S,
        np.array(model.C),
        np.array(model.b),
        np.broadcast_to(batch.times, batch.observed.shape).copy(),
        batch.squeeze,
    )


# --------------------------------------------------------------------------------------------
# The weighted estimate
# --------------------------------------------------------------------------------------------


def solve_weighted(
    terms: PairwiseTerms, weights, *, weighted_z_hat: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(sum_j w_ij P_ij)^-1 sum_j w_ij P_ij z_hat_ij`` and ``(sum_j w_ij P_ij)^-1``.

    In the working coordinates of `terms` (``z_s`` and per-mode for the eigenbasis form).
    ``weights`` (B, T, T) >= 0 multiply the precisions; unused pairs count as 0. Rows with no
    used pair (or all weights 0) are NaN. ``weighted_z_hat``: `PairwiseTerms.weighted_z_hat`,
    precomputed when solving repeatedly (IRLS); otherwise the right-hand side is contracted
    without forming the (B, T, T, d) pulled-forward estimates. Returns (B, T, d) and
    (B, T, d, d) or (B, T, d).
    """
    w = np.where(terms.used, weights, 0.0)
    empty = ~np.any(w > 0, axis=2)
    if terms.diagonal:
        wp = w[..., None] * terms.precision  # (B, T, T, d)
        H = np.sum(wp, axis=2)
        if weighted_z_hat is None:
            rhs = np.sum(wp * (terms.transition * terms.z[:, None] + terms.offset), axis=2)
        else:
            rhs = (w[:, :, None, :].astype(complex) @ weighted_z_hat)[:, :, 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            x = rhs / H
            cov = 1.0 / H
        x[empty], cov[empty] = np.nan, np.nan
        return x, cov
    B, T, d = terms.z.shape
    P = terms.precision
    # sum_j w_ij P_ij as a batched matrix product (B, T, 1, T) @ (Bk, T, T, d*d)
    H = (w[:, :, None, :] @ P.reshape(*P.shape[:3], d * d))[:, :, 0].reshape(B, T, d, d)
    if weighted_z_hat is None:
        K = terms.precision @ terms.transition  # P_ij Phi_ij
        Pc = np.einsum("...ijkl,...ijl->...ijk", terms.precision, terms.offset)
        rhs = np.einsum("...ij,...ijkl,...jl->...ik", w, K, terms.z, optimize=True)
        rhs = rhs + np.einsum("...ij,...ijk->...ik", w, Pc)
    else:
        rhs = (w[:, :, None, :] @ weighted_z_hat)[:, :, 0]
    H[empty] = np.eye(d)
    L = np.linalg.cholesky(H)
    x = np.linalg.solve(L, rhs[..., None])
    x = np.linalg.solve(np.swapaxes(L, -1, -2), x)[..., 0]
    L_inv = np.linalg.inv(L)
    cov = np.swapaxes(L_inv, -1, -2) @ L_inv
    cov = sym(cov)
    x[empty], cov[empty] = np.nan, np.nan
    return x, cov


def finish(terms: PairwiseTerms, x: np.ndarray, cov: np.ndarray) -> MLEResult:
    """Map working-coordinate estimates to an `MLEResult` (outputs, states, predictions)."""
    n_used = np.sum(terms.used, axis=2)
    T = x.shape[1]
    pred = np.full(x.shape, np.nan, dtype=x.dtype)
    if T > 1:
        idx = np.arange(1, T)
        # Phi_z(t_{i-1} - t_i) z_bar_{i-1} + offset: the pair (target i, source i - 1).
        step = terms.transition[:, idx, idx - 1]
        off = terms.offset[:, idx, idx - 1]
        if terms.diagonal:
            pred[:, 1:] = step * x[:, :-1] + off
        else:
            pred[:, 1:] = np.einsum("...ikl,...il->...ik", step, x[:, :-1]) + off
    C, b = terms.C, terms.b
    if terms.diagonal:
        S = terms.basis
        outputs = real_part(x @ S.T, "S z_bar_s")
        predictions = real_part(pred @ S.T, "S z_plus_s")
        covs = real_part((S * cov[..., None, :]) @ S.conj().T, "S diag(cov) S^H")
    else:
        outputs, predictions, covs = x, pred, cov
    C_inv = np.linalg.inv(C)
    states = (outputs - b) @ C_inv.T
    state_covs = C_inv @ covs @ C_inv.T
    result = MLEResult(
        outputs,
        states,
        sym(covs),
        sym(state_covs),
        predictions,
        n_used,
        terms.times,
    )
    if terms.squeeze:
        result = MLEResult(*(np.asarray(field)[0] for field in result))
    return result


def weighted_estimate(terms: PairwiseTerms, weights) -> MLEResult:
    """`MLEResult` of the estimate with precisions ``w_ij P^C_ij`` (``w = 1``: the MLE)."""
    x, cov = solve_weighted(terms, weights)
    return finish(terms, x, cov)


@batch_input.guard
def batch_mle(
    sde: LinearSDE,
    measurement: LinearMeasurement,
    z,
    t,
    *,
    mask=None,
    causal: bool = True,
) -> MLEResult:
    """Batch precision-weighted MLE of every state, general matrix form (seed 000 2.2, A.2).

    ``z_bar_i = (sum_j P^C_ij)^-1 sum_j P^C_ij z_hat_ij`` over observed ``j <= i`` (causal) or
    all observed ``j`` (non-causal), with ``z_hat_ij`` the pulled-forward measurement (drift
    and bias included, seed 000 3.9-3.10) and ``P^C_ij = V^C(t_j - t_i)^-1``.

    Parameters
    ----------
    sde : `sde_sim.LinearSDE` (any real A, PSD Q, drift u).
    measurement : `sde_sim.LinearMeasurement` with square invertible C and positive definite R;
        the states are estimated at ``t + delay``.
    z : (B, T, d) or (T, d) measurements; NaN allowed where ``mask`` is False.
    t : (T,) shared or (B, T) per-sequence times, strictly increasing (irregular allowed).
    mask : (B, T) or (T,) bool, True where observed; default all observed.
    causal : True for ``j <= i`` (a filter), False for all ``j`` (a smoother).

    Returns
    -------
    MLEResult; a (T, d) input gives results without the batch axis.

    Raises
    ------
    ValueError
        If C is not square or not invertible, R is not positive definite, shapes disagree,
        ``t`` is not increasing, or ``z`` has NaN at an observed entry.
    """
    return weighted_estimate(pairwise_terms(sde, measurement, z, t, mask=mask, causal=causal), 1.0)


@batch_input.guard
def eigen_batch_mle(
    model: DiagonalizableModel, z, t, *, mask=None, causal: bool = True
) -> MLEResult:
    """The tensor form of seed 000 2.2 for a simultaneously diagonalizable system.

    Per mode ``k``: ``z_bar_s,ik = sum_j lambda_P,ijk z_hat_s,ijk / sum_j lambda_P,ijk`` with
    ``z_s = S^-1 z``, ``z_hat_s,ij = e^{-lambda dt_ij} z_s,j`` (plus the drift/bias offset) and
    ``lambda_P = 1 / lambda^C_V(dt_ij)``; ``z_bar = S z_bar_s``. ``O(B T^2 d)``, no inversions;
    equal to `batch_mle` on ``model.sde()``, ``model.measurement()``. Arguments and result as
    in `batch_mle`.
    """
    return weighted_estimate(eigen_pairwise_terms(model, z, t, mask=mask, causal=causal), 1.0)


# --------------------------------------------------------------------------------------------
# Exact error covariance with shared process noise
# --------------------------------------------------------------------------------------------


def mle_error_covariance(
    sde: LinearSDE, measurement: LinearMeasurement, t, *, mask=None, causal: bool = True
) -> np.ndarray:
    """Exact error covariance ``E[(z_bar_i - z^C_i)(z_bar_i - z^C_i)^T]`` of the batch MLE.

    Derived here (not in the seeds). The error is ``sum_j K_ij e_ij`` with
    ``K_ij = H_i^-1 P^C_ij``, ``H_i = sum_j P^C_ij`` and ``e_ij = z_hat_ij - z^C_i =
    C (x_hat_ij - x_i) + Phi_z(dt_ij) v_j``. For ``j`` before ``t_i``, ``x_hat_ij - x_i =
    -int_{t_j}^{t_i} e^{A (t_i - s)} G dw(s)``; after it, ``int_{t_i}^{t_j} e^{-A (s - t_i)} G
    dw(s)``. Two such integrals on the same side overlap on the shorter interval and on
    opposite sides not at all, so

        Cov(e_ij, e_ik) = C V(dt*) C^T + [j = k] Phi_z R Phi_z^T,

    ``dt*`` the lag of smaller magnitude when ``dt_ij``, ``dt_ik`` have the same sign, and 0
    otherwise. The sum over pairs ``(j, k)`` is taken by grouping them by the nearer index
    (prefix sums of ``K`` before ``t_i``, suffix sums after), ``O(T^2 d^3)``. With ``Q = 0``
    this is ``H_i^-1``, the MLE's own ``covs``.

    Parameters
    ----------
    sde, measurement, mask, causal : as in `batch_mle`.
    t : (T,) measurement times (shared by the batch).

    Returns
    -------
    (T, d, d) for a (T,) mask or none, else (B, T, d, d).
    """
    _check_models(sde, measurement)
    t = validation.real_array("t", t, ndim=1)
    T, d = t.size, sde.dim
    squeeze = mask is None or np.ndim(mask) == 1
    z = np.zeros((T, d)) if squeeze else np.zeros((np.shape(mask)[0], T, d))
    terms = pairwise_terms(sde, measurement, z, t, mask=mask, causal=causal)
    P = terms.precision  # (1, T, T, d, d)
    w = terms.used.astype(float)
    H = np.einsum("bij,xijkl->bikl", w, P)
    empty = ~np.any(terms.used, axis=2)
    H[empty] = np.eye(d)
    H_inv = np.linalg.inv(H)
    K = np.einsum("bikl,xijlm,bij->bijkm", H_inv, P, w)  # (B, T, T, d, d)
    lags = _lags(terms.times[:1])[0]  # (T, T), between the state times
    needed = _needed(T, causal)
    values, inverse = _distinct(lags[needed], float(np.abs(terms.times).max()))
    V = np.empty((values.size, d, d))
    neg = values <= 0
    if np.any(neg):
        V[neg] = dle.forward_covariance(sde.A, sde.Q, -values[neg])
    if np.any(~neg):
        V[~neg] = dle.backward_covariance(sde.A, sde.Q, values[~neg])
    C = measurement.C
    Vp = np.zeros((T, T, d, d))
    Vp[needed] = (C @ V @ C.T)[inverse]  # process part C V(dt_ij) C^T
    Phi = terms.transition[0]
    Vm = Phi @ measurement.R @ np.swapaxes(Phi, -1, -2)  # measurement part, j = k only
    before = np.tri(T, dtype=bool)  # j <= i: the causal side (dt <= 0)
    total = np.einsum("bijkl,ijlm,bijnm->bikn", K, Vm, K)
    for side, order in ((before, slice(None)), (~before, slice(None, None, -1))):
        Ks = np.where(side[None, :, :, None, None], K, 0.0)
        # nearer index on this side: the largest j <= i, the smallest j > i: prefix / suffix sums
        cum = np.cumsum(Ks[:, :, order], axis=2)[:, :, order]
        KV = np.einsum("bijkl,ijlm->bijkm", Ks, Vp)
        total += np.einsum("bijkl,bijml->bikm", KV, cum)
        total += np.einsum("bijkl,bijml->bikm", cum, KV)
        total -= np.einsum("bijkl,bijml->bikm", KV, Ks)
    total = sym(total)
    total[empty] = np.nan
    return total[0] if squeeze else total


__all__ = [
    "DiagonalizableModel",
    "MLEResult",
    "PairwiseTerms",
    "batch_mle",
    "eigen_batch_mle",
    "eigen_pairwise_terms",
    "finish",
    "mle_error_covariance",
    "pairwise_terms",
    "solve_weighted",
    "weighted_estimate",
]

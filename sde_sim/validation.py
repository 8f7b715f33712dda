"""Argument validation for the suite: every error names the argument and what was wrong.

Used by `sde_sim` and `estimators` (which may import `sde_sim`); `kernels` has its own.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

# Relative tolerance below which a negative eigenvalue of a covariance counts as round-off.
PSD_RTOL = 1e-10


def real_array(name: str, value: Any, *, ndim: int | None = None) -> np.ndarray:
    """Return `value` as a finite float64 array, or raise naming `name`."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # numpy raises many types for ragged input
        raise TypeError(f"{name} must be array-like, got {type(value).__name__}") from exc
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_)
    ):
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    if np.iscomplexobj(arr):
        if np.any(arr.imag != 0):
            raise TypeError(f"{name} must be real, got complex entries")
        arr = arr.real
    arr = arr.astype(np.float64)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
    if bad:
        raise ValueError(f"{name} has {bad} NaN or infinite entr{'y' if bad == 1 else 'ies'}")
    return arr


def square_matrix(name: str, value: Any, dim: int | None = None) -> np.ndarray:
    """A finite real (d, d) matrix; `dim` fixes d."""
    arr = real_array(name, value, ndim=2)
    if arr.shape[0] != arr.shape[1]:
        raise ValueError(f"{name} must be square, got shape {arr.shape}")
    if dim is not None and arr.shape[0] != dim:
        raise ValueError(f"{name} must have shape ({dim}, {dim}), got {arr.shape}")
    return arr


def vector(name: str, value: Any, dim: int | None = None) -> np.ndarray:
    """A finite real (d,) vector; `dim` fixes d."""
    arr = real_array(name, value, ndim=1)
    if dim is not None and arr.shape[0] != dim:
        raise ValueError(f"{name} must have shape ({dim},), got {arr.shape}")
    return arr


def covariance(name: str, value: Any, dim: int | None = None) -> np.ndarray:
    """A symmetric positive semidefinite (d, d) matrix, returned exactly symmetric.

    Raises
    ------
    ValueError
        If the matrix is not symmetric, or its smallest eigenvalue is below
        ``-PSD_RTOL * max(1, largest |eigenvalue|)``; the message names the matrix and the
        smallest eigenvalue.
    """
    arr = square_matrix(name, value, dim)
    scale = max(1.0, float(np.max(np.abs(arr), initial=0.0)))
    if not np.allclose(arr, arr.T, rtol=0.0, atol=1e-12 * scale):
        raise ValueError(
            f"{name} must be symmetric; max |{name} - {name}^T| = {np.max(np.abs(arr - arr.T)):.3g}"
        )
    sym = 0.5 * (arr + arr.T)
    eigs = np.linalg.eigvalsh(sym) if sym.size else np.zeros(0)
    if eigs.size and eigs[0] < -PSD_RTOL * max(1.0, float(np.max(np.abs(eigs)))):
        raise ValueError(
            f"{name} must be positive semidefinite; its smallest eigenvalue is {eigs[0]:.6g}"
        )
    return sym


def scalar(name: str, value: Any, *, minimum: float | None = None, strict: bool = False) -> float:
    """A finite real number, optionally bounded below (`strict` makes the bound exclusive)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    val = float(value)
    if not math.isfinite(val):
        raise ValueError(f"{name} must be finite, got {val}")
    if minimum is not None:
        if strict and val <= minimum:
            raise ValueError(f"{name} must be > {minimum:g}, got {val:g}")
        if not strict and val < minimum:
            raise ValueError(f"{name} must be >= {minimum:g}, got {val:g}")
    return val


def count(name: str, value: Any, *, minimum: int = 1) -> int:
    """An integer >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def choice(name: str, value: Any, options: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}")
    return value


def psd_factor(matrix: np.ndarray) -> np.ndarray:
    """A factor ``L`` with ``L @ L.T == matrix`` for a PSD matrix (singular allowed).

    Cholesky fails on singular covariances (zero process noise, noise on a subset of states),
    so the symmetric eigendecomposition is used; eigenvalues below zero are round-off of a PSD
    matrix that `covariance` has already accepted, and are set to zero.
    """
    if not np.all(np.isfinite(matrix)):
        raise ValueError(
            "a covariance to factor (Q, or the step covariance Q_d it integrates to) has NaN "
            "or infinite entries: it overflowed float64; rescale Q"
        )
    eigs, vecs = np.linalg.eigh(0.5 * (matrix + np.swapaxes(matrix, -1, -2)))
    return vecs * np.sqrt(np.clip(eigs, 0.0, None))[..., None, :]


def readonly(arr: np.ndarray) -> np.ndarray:
    """Mark an array owned by a frozen dataclass as read-only and return it."""
    arr.setflags(write=False)
    return arr


def complex_array(name: str, value: Any, *, ndim: int | None = None) -> np.ndarray:
    """A finite complex128 array, or raise naming `name`."""
    try:
        arr = np.asarray(value)
    except Exception as exc:
        raise TypeError(f"{name} must be array-like, got {type(value).__name__}") from exc
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.complex128)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has NaN or infinite entries")
    return arr


def invertible(name: str, value: Any, dim: int | None = None) -> np.ndarray:
    """A complex invertible (d, d) matrix (condition number at most 1e12)."""
    arr = complex_array(name, value, ndim=2)
    if arr.shape[0] != arr.shape[1] or (dim is not None and arr.shape[0] != dim):
        want = f"({dim}, {dim})" if dim is not None else "square"
        raise ValueError(f"{name} must be {want}, got shape {arr.shape}")
    cond = np.linalg.cond(arr)
    if not np.isfinite(cond) or cond > 1e12:
        raise ValueError(f"{name} must be invertible; its condition number is {cond:.3g}")
    return arr


def nonnegative(name: str, value: Any) -> np.ndarray:
    """A finite real array with every entry >= 0."""
    arr = real_array(name, value)
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0, got min {arr.min():.6g}")
    return arr


class EulerStabilityWarning(UserWarning):
    """Euler-Maruyama amplifies a decaying mode at this step: paths grow without bound although
    the system itself is stable (a stiff system; use the exact method or a smaller step)."""


def euler_stability(system, steps) -> None:
    """Warn (`EulerStabilityWarning`, naming the rates and the step) when an Euler step
    multiplies a decaying mode ``lambda`` (``Re lambda < 0``) by ``|1 + lambda h| > 1``
    (the message is `euler_instability`'s)."""
    message = euler_instability(system, steps)
    if message is not None:
        import warnings

        warnings.warn(message, EulerStabilityWarning, stacklevel=3)


def euler_instability(system, steps) -> str | None:
    """Why an Euler step is unstable for `system`, or None: a decaying mode ``lambda``
    (``Re lambda < 0``) multiplied by ``|1 + lambda h| > 1`` per step, with the stable bound
    ``h < min(-2 Re lambda / |lambda|^2)``.

    `system` is a linear SDE (``A``) or a radial-tangential one (``mu_r``, ``mu_t``,
    ``Omega``: the literal drift ``-mu_r I + Omega``, and ``-mu_t`` on the tangent plane in
    the frozen frame); a mode with ``Re lambda >= 0`` is left to the instability warning.
    `steps` are the step sizes (the largest counts).
    """
    h = float(np.max(np.asarray(steps, dtype=float), initial=0.0))
    if hasattr(system, "A"):
        A, names = np.asarray(system.A, dtype=float), "A"
        lam = np.linalg.eigvals(A) if A.size else np.zeros(0)
    elif hasattr(system, "mu_r") and hasattr(system, "Omega"):
        omega = np.linalg.eigvals(np.asarray(system.Omega, dtype=float))
        lam = np.concatenate([-system.mu_r + omega, -system.mu_t + omega])
        names = "mu_r, mu_t"
    else:
        return None
    lam = lam[np.isfinite(lam) & (lam.real < 0)]
    if not lam.size or not math.isfinite(h):
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        factor = np.abs(1.0 + lam * h)
        worst = float(np.max(factor))
        limit = float(np.min(-2.0 * lam.real / np.abs(lam) ** 2))
    if worst <= 1.0 + 1e-12:
        return None
    return (
        f"Euler-Maruyama is unstable for these rates ({names}) at the step dt = {h:g}: a "
        f"decaying mode is multiplied by |1 + lambda dt| = {worst:.4g} > 1 per step, so "
        f"paths grow without bound; use method 'exact' or dt < {limit:.3g}"
    )


def numeric_array(name: str, value: Any) -> np.ndarray:
    """`value` as a float64 array (NaN and inf kept), or a TypeError naming `name`."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged input
        raise TypeError(f"{name} must be array-like, got {type(value).__name__}") from exc
    if (
        arr.dtype == object
        or not (np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.bool_))
        or np.iscomplexobj(arr)
    ):
        raise TypeError(f"{name} must be a real numeric array, got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


def axis_index(name: str, value: Any, ndim: int) -> int:
    """An integer axis of an `ndim`-dimensional array (negative counts from the end)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if not -ndim <= value < ndim:
        raise ValueError(f"{name} must be in [{-ndim}, {ndim - 1}], got {value}")
    return int(value)

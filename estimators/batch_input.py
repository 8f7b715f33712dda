"""Batched measurement input shared by every estimator: validation and batch preparation.

Every estimator takes measurements ``z`` as ``(B, T, k)`` or ``(T, k)``, a missing-value mask
(``True`` = observed) as ``(B, T)`` or ``(T,)``, and times ``t`` as ``(T,)`` (shared) or
``(B, T)``. `batch` checks them once, with errors that name the argument, and returns the
prepared `Batch` (zero-filled measurements, the observed flags, the state times ``t + delay``);
`measurements`, `times` and `state_times` are its parts. `robust_scale` checks the scale
``nu`` of the robust estimators (IRLS, the recurrent filter, the RT estimators).

This module knows arrays, not models: the radial-tangential estimators use it as the linear
ones do. What the estimators of a linear SDE share beyond their input (model checks, priors,
step maps, the predict/update pair) is `estimators.linear_gaussian`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sde_sim import validation


class Batch(NamedTuple):
    """Prepared input of an estimator (batch axis first).

    z : (B, T, k) measurements, zeros where missing.   observed : (B, T) bool.
    times : (B, T) state times ``t + delay``, C-contiguous.
    shared : True when ``t`` was given as (T,) (one time grid for every sequence).
    squeeze : True when the input had no batch axis.
    """

    z: np.ndarray
    observed: np.ndarray
    times: np.ndarray
    shared: bool
    squeeze: bool


def batch(z, t, mask, k: int, *, delay: float = 0.0) -> Batch:
    """Check ``z`` (B, T, k) or (T, k), ``mask`` and ``t`` (T,) or (B, T); prepare them.

    The state times are ``t + delay`` (`state_times`); ``delay = 0`` gives the measurement
    times themselves.
    """
    data = measurements(z, mask, k)
    B, T, _ = data.z.shape
    t = times(t, B, T)
    shared = t.strides[0] == 0
    state = np.ascontiguousarray(state_times(t, delay))
    return Batch(data.zero_filled(), data.observed, state, shared, data.squeeze)


class Measurements(NamedTuple):
    """Validated measurements.

    z : (B, T, k) float, as given (NaN may remain at missing entries).
    observed : (B, T) bool.   squeeze : True when the input had no batch axis.
    """

    z: np.ndarray
    observed: np.ndarray
    squeeze: bool

    def zero_filled(self) -> np.ndarray:
        """``z`` with missing measurement vectors replaced by zeros (B, T, k)."""
        return np.where(self.observed[..., None], self.z, 0.0)


def measurements(z, mask, k: int) -> Measurements:
    """Check ``z`` (B, T, k) or (T, k) and ``mask``; NaN/inf only where ``mask`` is False."""
    z = np.asarray(z)
    if z.dtype == object or not (
        np.issubdtype(z.dtype, np.floating) or np.issubdtype(z.dtype, np.integer)
    ):
        raise TypeError(f"z must be a real numeric array, got dtype {z.dtype}")
    z = z.astype(float, copy=False)
    squeeze = z.ndim == 2
    if squeeze:
        z = z[None]
    if z.ndim != 3 or z.shape[2] != k:
        shape = z.shape[1:] if squeeze else z.shape
        raise ValueError(f"z must have shape (B, T, {k}) or (T, {k}), got {shape}")
    B, T, _ = z.shape
    if B < 1:
        raise ValueError(f"z must hold at least one sequence, got shape {z.shape} (B = 0)")
    if T < 1:
        raise ValueError("z must hold at least one time step")
    observed = _observed(mask, B, T, squeeze)
    bad = observed & ~np.isfinite(z).all(axis=2)
    if np.any(bad):
        b, step = np.argwhere(bad)[0]
        raise ValueError(
            f"z has NaN or infinite entries at observed measurements (first: sequence {b}, "
            f"step {step}); mark missing ones with mask"
        )
    return Measurements(z, observed, squeeze)


def _observed(mask, B: int, T: int, squeeze: bool) -> np.ndarray:
    if mask is None:
        return np.ones((B, T), dtype=bool)
    observed = np.asarray(mask)
    if observed.dtype != bool:
        raise TypeError(f"mask must be boolean (True = observed), got dtype {observed.dtype}")
    if observed.shape == (T,):
        return np.broadcast_to(observed, (B, T)).copy()
    if observed.shape != (B, T):
        want = f"({T},)" if squeeze else f"({T},) or ({B}, {T})"
        raise ValueError(
            f"mask must have shape {want} (one flag per measurement vector), got {np.shape(mask)}"
        )
    return observed


def times(t, B: int, T: int) -> np.ndarray:
    """Check ``t`` (T,) or (B, T), strictly increasing; return (B, T).

    Shared times come back as a zero-stride broadcast view, so callers can detect them with
    ``t.strides[0] == 0``.
    """
    t = validation.real_array("t", t)
    if t.shape == (T,):
        t = np.broadcast_to(t, (B, T))
    if t.shape != (B, T):
        raise ValueError(f"t must have shape ({T},) or ({B}, {T}), got {t.shape}")
    if T > 1 and np.any(np.diff(t, axis=1) <= 0):
        raise ValueError("t must be strictly increasing along each sequence")
    return t


def robust_scale(name: str, value) -> float:
    """A robust estimator's scale ``nu``: a real number > 0; ``inf`` is the Gaussian limit."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number (inf allowed), got {type(value).__name__}")
    value = float(value)
    if not value > 0:  # also catches NaN
        raise ValueError(f"{name} must be > 0 (inf for the Gaussian limit), got {value:g}")
    return value


def state_times(t: np.ndarray, delay: float) -> np.ndarray:
    """``t + delay``, the times of the states the measurements read, checked: a delay so large
    that adding it rounds distinct stamps together (``1e300``), or overflows, is refused."""
    times = t + delay
    if not np.all(np.isfinite(times)):
        raise ValueError(f"t + measurement.delay overflows (delay {delay:g})")
    if times.shape[-1] > 1 and np.any(np.diff(times, axis=-1) <= 0):
        raise ValueError(
            f"t + measurement.delay is not strictly increasing: the delay {delay:g} rounds "
            "distinct time stamps together"
        )
    return times

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

import functools
import inspect
import re
from typing import NamedTuple

import numpy as np

from sde_sim import LinearMeasurement, LinearSDE, validation


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


def batch(z, t, mask, k: int, *, delay: float = 0.0, zero_fill: bool = True) -> Batch:
    """Check ``z`` (B, T, k) or (T, k), ``mask`` and ``t`` (T,) or (B, T); prepare them.

    The state times are ``t + delay`` (`state_times`); ``delay = 0`` gives the measurement
    times themselves. ``zero_fill=False`` keeps ``z`` as given (no copy; NaN may remain at
    missing entries), for an estimator that never reads a missing measurement.
    """
    data = measurements(z, mask, k)
    B, T, _ = data.z.shape
    t = times(t, B, T)
    shared = t.strides[0] == 0
    state = np.ascontiguousarray(state_times(t, delay))
    z = data.zero_filled() if zero_fill else data.z
    return Batch(z, data.observed, state, shared, data.squeeze)


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


def measurements(z, mask, k: int | None) -> Measurements:
    """Check ``z`` (B, T, k) or (T, k) and ``mask``; NaN/inf only where ``mask`` is False.

    ``k = None`` takes ``z``'s own last axis (a caller that checks it against a model later).
    """
    try:
        z = np.asarray(z)
    except (TypeError, ValueError):  # ragged nested lists
        raise TypeError(f"z must be a (B, T, k) or (T, k) array, got {type(z).__name__}") from None
    if z.dtype == object or not (
        np.issubdtype(z.dtype, np.floating) or np.issubdtype(z.dtype, np.integer)
    ):
        raise TypeError(f"z must be a real numeric array, got dtype {z.dtype}")
    z = z.astype(float, copy=False)
    squeeze = z.ndim == 2
    if squeeze:
        z = z[None]
    if k is None and z.ndim in (2, 3):
        k = z.shape[-1]
    if z.ndim != 3 or z.shape[2] != k:
        shape = z.shape[1:] if squeeze else z.shape
        want = "k" if k is None else k
        raise ValueError(f"z must have shape (B, T, {want}) or (T, {want}), got {shape}")
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
    bounded("z", z, observed=observed)
    return Measurements(z, observed, squeeze)


def _observed(mask, B: int, T: int, squeeze: bool) -> np.ndarray:
    if mask is None:
        return np.ones((B, T), dtype=bool)
    try:
        observed = np.asarray(mask)
    except (TypeError, ValueError):  # ragged nested lists
        raise TypeError(f"mask must be a boolean array, got {type(mask).__name__}") from None
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
    bounded("t", t)
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


# Magnitudes of measurements and time stamps beyond this cannot be squared in float64 (the
# innovations' quadratic forms, the log-likelihood, the lags' products with the drift); refused.
MAX_MAGNITUDE = 1e150


def bounded(name: str, arr: np.ndarray, *, observed: np.ndarray | None = None) -> None:
    """Refuse finite entries of `arr` beyond `MAX_MAGNITUDE` (where `observed`, if given)."""
    if np.fmax.reduce(np.abs(arr), axis=None, initial=0.0) <= MAX_MAGNITUDE:
        return  # no entry at all beyond the bound (NaN ignored): nothing to select
    values = np.abs(arr if observed is None else arr[observed])
    worst = float(np.max(values[np.isfinite(values)], initial=0.0))
    if worst > MAX_MAGNITUDE:
        raise ValueError(
            f"{name} has entries of magnitude up to {worst:.3g}, beyond {MAX_MAGNITUDE:.0e}: "
            "their squares overflow float64; rescale it"
        )


def _magnitude(value) -> float:
    """Largest |entry| of an array-like input (0 for empty or non-numeric)."""
    try:
        arr = np.abs(np.asarray(value, dtype=complex if np.iscomplexobj(value) else float))
    except (TypeError, ValueError):
        return 0.0
    arr = arr[np.isfinite(arr)]
    return float(arr.max()) if arr.size else 0.0


def _expand(inputs: dict) -> dict:
    """Argument values by name, models and priors split into their matrices and numbers."""
    out = {}
    for name, value in inputs.items():
        if value is None or isinstance(value, (str, bool)) or callable(value):
            continue
        if isinstance(value, LinearSDE):
            out.update({"A": value.A, "Q": value.Q, "u": value.u})
        elif isinstance(value, LinearMeasurement):
            out.update({"C": value.C, "R": value.R, "b": value.b, "delay": value.delay})
        elif hasattr(value, "_fields") or hasattr(value, "__dataclass_fields__"):
            fields = getattr(value, "_fields", None) or tuple(value.__dataclass_fields__)
            prefix = "prior." if name == "prior" else ""
            for field in fields:
                item = getattr(value, field, None)
                if item is not None and not isinstance(item, (str, bool)):
                    out[prefix + field] = item
        else:
            out[name] = value
    if "A" in out and "t" in out:  # e^{A h}: the drift's size times the span of the times
        span = (
            _magnitude(np.ptp(np.asarray(out["t"], dtype=float), axis=-1))
            if np.size(out["t"])
            else 0.0
        )
        out["A (times the span of t)"] = _magnitude(out["A"]) * span
    return out


def _scales(inputs: dict) -> str:
    """``"name size, ..."`` for the three inputs whose magnitudes are furthest from 1."""
    scales = []
    for name, value in _expand(inputs).items():
        size = _magnitude(value)
        if size > 0:
            scales.append((abs(np.log10(size)), name, size))
    scales.sort(reverse=True)
    return ", ".join(f"{name} {size:.3g}" for _, name, size in scales[:3])


class ScaleError(ValueError):
    """Raised by `guard`: finite input overflowed float64 inside an estimator."""

    def __init__(self, message: str, function: str):
        super().__init__(message)
        self.function = function


def _all_finite(arr: np.ndarray, chunk: int = 1 << 20) -> bool:
    """``np.all(np.isfinite(arr))`` in slices of about `chunk` entries along the first axis, so
    that a large result (the covariances of every step) needs no full-size boolean copy."""
    arr = np.asarray(arr)
    if arr.ndim == 0 or arr.size <= chunk:
        return bool(np.all(np.isfinite(arr)))
    rows = max(1, chunk // max(1, arr[0].size))
    return all(np.all(np.isfinite(arr[i : i + rows])) for i in range(0, arr.shape[0], rows))


def finite_outputs(function: str, outputs: dict, **inputs) -> None:
    """Raise `ValueError` when an output that must be finite is not (see `guard`).

    `outputs` maps names to arrays that must be finite (leave out entries that are NaN by
    design); `inputs` are the arguments by name (``sde``, ``measurement`` and ``prior`` are
    split into ``A, Q, u``, ``C, R, b, delay`` and ``prior.mean, prior.cov``).
    """
    bad = [name for name, arr in outputs.items() if not _all_finite(arr)]
    if bad:
        raise ScaleError(
            f"{function}: {', '.join(bad)} came out NaN or infinite from finite input: the "
            "computation overflows float64 at these scales (the magnitudes furthest from 1 "
            f"first: {_scales(inputs)}); rescale the input",
            function,
        )


# Result fields that must come out finite (where the result's own mask says they are defined).
_FINITE_FIELDS = (
    "means",
    "covs",
    "log_likelihood",
    "outputs",
    "states",
    "magnitudes",
    "directions",
    "resultant",
    "mean",
    "variance",
    "info_mean",
    "mode_variances",
)


def _must_be_finite(result) -> dict:
    if isinstance(result, (float, np.floating)):
        return {"result": np.asarray(result)}
    fields = getattr(result, "_fields", ())
    rows = None
    if "n_used" in fields:
        rows = np.asarray(result.n_used) > 0
    elif "defined" in fields:
        rows = np.asarray(result.defined, dtype=bool)
    elif "info_mean" in fields:  # KLA: mean and variance are NaN/inf where lam = 0 (diffuse)
        rows = np.asarray(result.precision) > 0
        rows &= np.isfinite(result.precision)
    out = {}
    for name in ("precision", "prior_precision"):  # KLA's: finite everywhere (0 when diffuse)
        value = getattr(result, name, None) if "info_mean" in fields else None
        if isinstance(value, np.ndarray):
            out[name] = value
    for name in fields:
        value = getattr(result, name)
        if name not in _FINITE_FIELDS or not isinstance(value, np.ndarray):
            continue
        if value.dtype.kind not in "fc":
            continue
        out[name] = value[rows] if rows is not None and value.ndim >= rows.ndim else value
    return out


def _names_an_input(message: str, names) -> bool:
    word = r"(?<![A-Za-z0-9_]){}(?![A-Za-z0-9_])"
    return any(re.search(word.format(re.escape(n)), message) for n in names)


def guard(function):
    """Decorate an estimator with the output guard of the error contract.

    Finite input can still overflow float64 inside an estimator (entries near 1e300 in a model
    matrix, a stiff drift times a long time span in ``e^{A h}``, a prior covariance whose
    product with ``C`` overflows). Instead of returning NaN or inf, or failing deep inside
    numpy, the decorated estimator raises `ValueError` naming the inputs whose magnitudes are
    furthest from 1 (the likely cause first) when

    * an output that must be finite is not (means, covariances, log-likelihoods, ... where the
      result itself says they are defined: ``n_used > 0``, ``defined``, ``precision > 0``);
    * numpy raises ``LinAlgError`` (a Cholesky factor of an overflowed covariance), or a
      ``ValueError`` that names none of the arguments (an internal quantity gone non-finite).
    """
    signature = inspect.signature(function)

    @functools.wraps(function)
    def guarded(*args, **kwargs):
        try:
            result = function(*args, **kwargs)
        except ValueError as exc:  # LinAlgError is a ValueError
            inputs = _bound(signature, args, kwargs)
            names = set(_expand(inputs)) | set(inputs)
            message = " ".join(str(exc).split())
            if isinstance(exc, ScaleError) and exc.function == function.__name__:
                raise
            inner = isinstance(exc, (ScaleError, np.linalg.LinAlgError))
            if not inner and _names_an_input(message, names):
                raise
            raise ScaleError(
                f"{function.__name__}: {message} (the computation fails at these scales; "
                f"the magnitudes furthest from 1 of its arguments first: {_scales(inputs)})",
                function.__name__,
            ) from None
        finite_outputs(
            function.__name__, _must_be_finite(result), **_bound(signature, args, kwargs)
        )
        return result

    return guarded


def _bound(signature, args, kwargs) -> dict:
    try:
        return dict(signature.bind(*args, **kwargs).arguments)
    except TypeError:
        return {}


_FILTER_FIELDS = ("means", "covs", "group", "transition", "noise", "offset")


def filter_result(name: str, value) -> None:
    """Check that `value` is a `kalman_filter` result (the smoother's input), naming `name`.

    Only stored fields are read (the predictions are computed on access).
    """
    missing = [f for f in _FILTER_FIELDS if not isinstance(getattr(value, f, None), np.ndarray)]
    if missing:
        raise TypeError(
            f"{name} must be the FilterResult of estimators.kalman.kalman_filter, got "
            f"{type(value).__name__} (without {', '.join(missing)})"
        )
    means, covs = value.means, value.covs
    if means.ndim not in (2, 3):
        raise ValueError(f"{name}.means must have shape (B, T, d) or (T, d), got {means.shape}")
    T, d = means.shape[-2:]
    for field in ("covs", "transition", "noise"):
        arr = getattr(value, field)
        if arr.ndim != 4 or arr.shape[1:] != (T, d, d) or arr.shape[0] != covs.shape[0]:
            raise ValueError(f"{name}.{field} must have shape (G, {T}, {d}, {d}), got {arr.shape}")
    if value.offset.shape != (covs.shape[0], T, d):
        raise ValueError(
            f"{name}.offset must have shape ({covs.shape[0]}, {T}, {d}), got {value.offset.shape}"
        )

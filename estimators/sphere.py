"""Steps on the unit sphere S^(d-1) (seed 000 5.3; seed 003 eqs. 15-16, C.2).

The geometry the RT estimators move directions with: unit rows (`unit`), the exponential map
(`exp_map`; `geodesic_step`, the exact geodesic step of C.2), the great-circle distance
(`angle`), the first-order retraction (`first_order_step`), spherical interpolation (`slerp`),
and seed 003's geometric update of a state by an attention output (`geometric_update`, eq. 15)
with the angle it turns by (`angular_step`, eq. 16); see their docstrings for the corrected
form of the first-order agreement claim (digest C28).

Shapes: rows (..., d), ``d >= 2``. The public steps are importable from `estimators.rt_irls`,
the entry point of the RT estimators.
"""

from __future__ import annotations

import numpy as np

from estimators.closed_forms import radial_tangential as rt
from sde_sim import validation


def unit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row norms and unit rows; a zero row keeps direction 0 (it has none)."""
    n = np.linalg.norm(x, axis=-1)
    u = np.divide(x, n[..., None], out=np.zeros_like(x), where=n[..., None] > 0)
    return n, u


def exp_map(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``cos|v| u + sinc(|v|) v`` for tangent ``v`` (rows); exact at ``v = 0``."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.cos(n) * u + np.sinc(n / np.pi) * v


def angle(u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Great-circle distance of unit rows, ``2 atan2(|u - w|, |u + w|)``."""
    return 2.0 * np.arctan2(np.linalg.norm(u - w, axis=-1), np.linalg.norm(u + w, axis=-1))


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
    n, y = unit(u + v)
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
    W = angle(u, w)[..., None]
    if np.any((norm == 0) & (np.pi / 2 < W)):
        raise ValueError("u and w must not be antipodal: the geodesic between them is not unique")
    t_unit = np.divide(tangent, norm, out=np.zeros_like(tangent), where=norm > 0)
    return exp_map(u, f[..., None] * W * t_unit)


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
    n, u_plus = unit(z_plus)
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
    m, u = unit(z_s)
    if np.any(m == 0):
        raise ValueError("z_s must be nonzero: a zero state has no direction")
    along = np.sum(u * u_bar, axis=-1)
    perp = np.linalg.norm(u_bar - along[..., None] * u, axis=-1)
    return np.arctan2(r * perp, m if project else m + r * along)

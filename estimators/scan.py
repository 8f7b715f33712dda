"""KLA's information-form Kalman filter as two associative scans, sequential and parallel.

Seed 001 (KLA), Theorems 1-2 and Corollaries 1.1, 2.1. Every channel is an independent scalar
filter of the zero-mean OU prior observed through token-dependent keys:

    z_t | z_{t-1} ~ N(a_bar_t z_{t-1}, p_bar_t)            (eqs. (7)-(8)),
    v_t | z_t     ~ N(k_t z_t, 1 / Lambda^v_t)              (eq. (9)),

with the posterior ``N(mu_t, 1/lam_t)`` carried in information form ``(lam_t, eta_t = lam_t mu_t)``
(eq. (15)). With ``phi_t = k_t^2 Lambda^v_t`` and ``b_t = k_t Lambda^v_t v_t``:

* precision (Thm 1, eqs. (16)-(18)): ``lam_t = M_t(lam_{t-1})``, the linear-fractional map of

      M_t = [[1 + p_bar_t phi_t, a_bar_t^2 phi_t], [p_bar_t, a_bar_t^2]];

  maps compose by matrix products with the *later* step on the left, so
  ``lam_t = (M_t ... M_1)(lam_0)`` (Cor. 1.1) is an inclusive prefix scan of `mobius_combine`,
  whose identity is ``I_2``;
* information mean (Thm 2, eq. (19)): ``eta_t = f_t eta_{t-1} + b_t`` with the forget gate
  ``f_t = a_bar_t / (a_bar_t^2 + p_bar_t lam_{t-1})``. Given the precision path (shifted by one
  step, ``lam_0`` at t = 1) this is an affine map, and ``eta_t = F_t eta_0 + B_t`` with
  ``(F_t, B_t) = (f_t, b_t) o ... o (f_1, b_1)`` (Cor. 2.1), a prefix scan of
  `affine_combine`, ``(f2, b2) o (f1, b1) = (f2 f1, f2 b1 + b2)``, identity ``(1, 0)``;
* readouts: ``mu_t = eta_t / lam_t``, ``Var = 1 / lam_t`` and, with a query, ``y_t = q_t mu_t``
  with variance ``q_t^2 / lam_t`` (eqs. (11), App. A).

A Moebius map is unchanged when its matrix is scaled, and the unnormalised products grow or
shrink geometrically (their determinants multiply to ``prod a_bar^2``, their spectral radii to
``prod mu_+``): left alone they overflow float64 within a few hundred to a few thousand steps.
`mobius_combine` therefore divides every product by its trace, as the authors' kernels do
(digest section 1.13); all entries of KLA step matrices are >= 0 with positive diagonals, so the
trace of any product is > 0 and the normalised entries satisfy ``alpha + delta = 1``.

Scans (`associative_scan`) come in three groupings of the same operator, selected by
``method``: ``"sequential"`` (a left fold, depth T - 1), ``"hillis-steele"`` (doubling, depth
``ceil(log2 T)``, ``O(T log T)`` combines) and ``"blelloch"`` (up-sweep/down-sweep over a
power-of-two padding with the identity, depth ``2 log2 n + 1``, ``O(T)`` combines). `kla_filter`
also offers ``method="recursion"``, the direct information-filter step (18)-(19) one token at a
time (the O(1)-per-token streaming form), and `moment_filter` is an independent moment-form
scalar Kalman filter (Table 5, left column) for testing. All are vectorised with numpy over
sequences and channels; only time is looped over (sequentially or level by level).

Shapes: tokens are (B, T, D) for B sequences of D channels (or (T, D) for one sequence). The
state-expanded layer (App. A, eqs. (22)-(23): N slots per channel, each an independent scalar
filter) is the same filter on N * D channels: reshape (B, T, N, D) to (B, T, N * D).
Missing tokens have ``Lambda^v_t = 0`` (or ``mask`` False): the step is a pure prediction.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from estimators import batch_input
from estimators.closed_forms.kla import AFFINE_IDENTITY, AffineMap
from sde_sim import validation

SCAN_METHODS = ("sequential", "hillis-steele", "blelloch")
FILTER_METHODS = ("recursion", *SCAN_METHODS)


class Mobius(NamedTuple):
    """A batch of 2x2 matrices ``[[alpha, beta], [gamma, delta]]`` stored by entry.

    The map ``lam -> (alpha lam + beta) / (gamma lam + delta)`` (seed 001 eq. (16)). Each entry
    is an array of the same shape (e.g. (T, B, D)); storing entries separately keeps the combine
    elementwise (four products of arrays, no batched 2x2 matmul).
    """

    alpha: np.ndarray
    beta: np.ndarray
    gamma: np.ndarray
    delta: np.ndarray


MOBIUS_IDENTITY = Mobius(1.0, 0.0, 0.0, 1.0)
"""``I_2``, the identity of `mobius_combine` (not stated in seed 001: digest section 1.6)."""


class ScanStats(NamedTuple):
    """Cost of one prefix scan of T elements.

    method : the grouping used.
    depth : rounds of combines that must run one after another (the parallel time).
    combines : element combines in total per channel (the work).
    """

    method: str
    depth: int
    combines: int


class ScanOutput(NamedTuple):
    """Inclusive prefixes ``e_t o ... o e_0`` (same structure as the input) and `ScanStats`."""

    prefix: tuple
    stats: ScanStats


class KLAFilterResult(NamedTuple):
    """Output of `kla_filter`; arrays (B, T, D), or (T, D) for unbatched input.

    precision : posterior precision ``lam_t`` (eq. (16)).
    info_mean : information mean ``eta_t = lam_t mu_t`` (eq. (19)).
    mean : ``mu_t = eta_t / lam_t`` (NaN where ``lam_t = 0``: a diffuse prior with no token yet).
    variance : ``1 / lam_t`` (inf where ``lam_t = 0``).
    prior_precision : one-step predicted precision ``lam_{t-1} / (a_bar_t^2 + p_bar_t lam_{t-1})``
        (the "confidence history" of eq. (18)).
    output, output_variance : ``q_t mu_t`` and ``q_t^2 / lam_t`` (eq. (11) and Alg. 1's
        variance readout), or None without a query.
    stats : `ScanStats` of the precision scan (the mean scan has the same cost).
    """

    precision: np.ndarray
    info_mean: np.ndarray
    mean: np.ndarray
    variance: np.ndarray
    prior_precision: np.ndarray
    output: np.ndarray | None
    output_variance: np.ndarray | None
    stats: ScanStats


class MomentFilterResult(NamedTuple):
    """Output of `moment_filter`: posterior mean and variance, (B, T, D) or (T, D)."""

    mean: np.ndarray
    variance: np.ndarray


# --- combine operators -------------------------------------------------------------------------


def mobius_combine(later, earlier, *, normalise: bool = True) -> Mobius:
    """``later o earlier``: the product ``later @ earlier`` divided by its trace (Cor. 1.1).

    ``(L E)(lam) = L(E(lam))``: the later step goes on the left (the printed
    ``M_1 o M_2 o ... o M_T`` of Fig. 2 has the order reversed; digest section 8). The division by
    the trace leaves the map unchanged and keeps long prefix products in range; ``normalise=False``
    gives the plain product (to show that it over- or underflows).

    Parameters
    ----------
    later, earlier : `Mobius` (or 4-tuples) of arrays broadcasting together, any shape.

    Returns
    -------
    Mobius
        Entries of the broadcast shape. The trace of a product of entrywise nonnegative
        matrices with positive diagonals (every KLA step and product) is > 0; for other inputs
        a zero trace gives inf/NaN entries (this is the scan's inner loop and is not validated).
    """
    la, lb, lc, ld = later
    ea, eb, ec, ed = earlier
    alpha = la * ea + lb * ec
    beta = la * eb + lb * ed
    gamma = lc * ea + ld * ec
    delta = lc * eb + ld * ed
    if normalise:
        trace = alpha + delta
        alpha, beta, gamma, delta = alpha / trace, beta / trace, gamma / trace, delta / trace
    return Mobius(alpha, beta, gamma, delta)


def affine_combine(later, earlier) -> AffineMap:
    """``(f2, b2) o (f1, b1) = (f2 f1, f2 b1 + b2)`` with ``(f2, b2)`` the later step (Cor. 2.1).

    The composition of ``eta -> f1 eta + b1`` then ``eta -> f2 eta + b2``; identity ``(1, 0)``.
    Entries broadcast together; not validated (the scan's inner loop).
    """
    f2, b2 = later
    f1, b1 = earlier
    return AffineMap(f2 * f1, f2 * b1 + b2)


def mobius_apply(M, lam) -> np.ndarray:
    """``(alpha lam + beta) / (gamma lam + delta)`` (eq. (16)); shapes broadcast."""
    return (M[0] * lam + M[1]) / (M[2] * lam + M[3])


def kla_leaves(a_bar, p_bar, phi) -> Mobius:
    """The step matrices ``M_t`` of eq. (17) by entry: ``(1 + p_bar phi, a_bar^2 phi, p_bar,
    a_bar^2)``, each of the broadcast shape of the inputs (read-only broadcast views where an
    entry does not depend on ``phi``). Not validated: `kla_filter` validates its inputs."""
    a2 = a_bar * a_bar
    shape = np.broadcast_shapes(np.shape(a_bar), np.shape(p_bar), np.shape(phi))
    return Mobius(
        np.broadcast_to(1.0 + p_bar * phi, shape),
        np.broadcast_to(a2 * phi, shape),
        np.broadcast_to(p_bar, shape),
        np.broadcast_to(a2, shape),
    )


# --- generic prefix scans ----------------------------------------------------------------------


def _ceil_log2(n: int) -> int:
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def associative_scan(
    combine: Callable,
    elements: Sequence,
    *,
    identity: Sequence | None = None,
    method: str = "blelloch",
    axis: int = 0,
) -> ScanOutput:
    """Inclusive prefix scan ``out_t = e_t o e_{t-1} o ... o e_0`` of an associative operator.

    ``combine(later, earlier)`` takes and returns tuples of arrays of matching shapes
    (`mobius_combine`, `affine_combine`); it must be associative, and the scan's groupings of
    the products differ only by rounding:

    * ``"sequential"``: left fold ``out_t = e_t o out_{t-1}``; depth T - 1, T - 1 combines.
    * ``"hillis-steele"``: doubling, ``out_t <- out_t o out_{t - 2^j}`` for ``t >= 2^j``;
      depth ``ceil(log2 T)``, ``sum_j (T - 2^j)`` combines (``O(T log T)``).
    * ``"blelloch"``: pad to ``n = 2^ceil(log2 T)`` with `identity`, up-sweep (tree of partial
      products), set the root to the identity, down-sweep (exclusive prefixes: a right child
      gets ``(left subtree) o (parent prefix)``), then one combine with the elements for the
      inclusive prefix; depth ``2 log2 n + 1``, ``2 (n - 1) + T`` combines (``O(T)``).
      Needs `identity`.

    Parameters
    ----------
    combine : the associative operator, later element first.
    elements : tuple of arrays, each with T entries along `axis` (and the same shape).
    identity : tuple of scalars, the identity element (``"blelloch"`` only).
    method : one of ``SCAN_METHODS``.
    axis : the time axis of every array.

    Returns
    -------
    ScanOutput
        ``prefix``: a tuple of new arrays shaped like `elements`; ``stats``: depth and work.
    """
    method = validation.choice("method", method, SCAN_METHODS)
    arrays = [validation.numeric_array(f"elements[{i}]", e) for i, e in enumerate(elements)]
    if not arrays:
        raise ValueError("elements must hold at least one array")
    shape = arrays[0].shape
    if any(a.shape != shape for a in arrays):
        raise ValueError(f"elements must share one shape, got {[a.shape for a in arrays]}")
    axis = validation.axis_index("axis", axis, len(shape))
    if shape[axis] < 1:
        raise ValueError(f"elements must have at least one entry along axis {axis}, got {shape}")
    if method == "blelloch":
        if identity is None or len(identity) != len(arrays):
            raise ValueError(f"identity must be a tuple of {len(arrays)} scalars for 'blelloch'")
        prefix, stats = _blelloch(combine, arrays, tuple(identity), axis)
    elif method == "hillis-steele":
        prefix, stats = _hillis_steele(combine, arrays, axis)
    else:
        prefix, stats = _sequential(combine, arrays, axis)
    return ScanOutput(tuple(prefix), stats)


# Scans apply the operator level by level to blocks of about this many array entries: large
# enough to amortise numpy's per-call overhead, small enough that the temporaries of one
# combine stay in cache (and are recycled by the allocator instead of being fresh pages).
_BLOCK_ENTRIES = 1 << 15


def _block_rows(first: np.ndarray) -> int:
    """Rows (time steps) per block for arrays whose time axis is 0."""
    per_row = max(1, int(np.prod(first.shape[1:], dtype=np.int64)))
    return max(1, _BLOCK_ENTRIES // per_row)


def _copy(a: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """A contiguous copy of `a` in its own layout, and a time-first view of the copy."""
    out = np.array(a, dtype=float, order="C", copy=True)
    return out, np.moveaxis(out, axis, 0)


def _combine_into(combine, later, earlier, dest, rows: int, *, descending: bool = False) -> None:
    """``dest <- combine(later, earlier)`` block by block along axis 0 (time-first views).

    With ``descending`` the blocks run from the end: an in-place doubling step (dest overlaps
    earlier rows of its own sources) then never reads a row it has already overwritten.
    """
    m = later[0].shape[0]
    starts = range(0, m, rows)
    for i in reversed(starts) if descending else starts:
        block = slice(i, min(i + rows, m))
        new = combine(tuple(x[block] for x in later), tuple(x[block] for x in earlier))
        for d, s in zip(dest, new, strict=True):
            d[block] = s


def _sequential(combine, arrays, axis):
    src = [np.moveaxis(a, axis, 0) for a in arrays]
    out, views = zip(*(_copy(a, axis) for a in arrays), strict=True)
    T = src[0].shape[0]
    for t in range(1, T):
        step = combine(tuple(a[t] for a in src), tuple(o[t - 1] for o in views))
        for o, s in zip(views, step, strict=True):
            o[t] = s
    return out, ScanStats("sequential", T - 1, T - 1)


def _hillis_steele(combine, arrays, axis):
    # work time-first (each level's rows are whole contiguous slabs), then copy back
    views = [np.array(np.moveaxis(a, axis, 0), dtype=float, order="C") for a in arrays]
    T, rows = views[0].shape[0], _block_rows(views[0])
    shift, depth, work = 1, 0, 0
    while shift < T:  # out[t] <- out[t] o out[t - shift] for t >= shift, all t at once
        _combine_into(
            combine,
            [o[shift:] for o in views],
            [o[:-shift] for o in views],
            [o[shift:] for o in views],
            rows,
            descending=True,
        )
        depth, work, shift = depth + 1, work + T - shift, 2 * shift
    out = []
    for view in views:
        o = np.empty(arrays[0].shape)
        np.moveaxis(o, axis, 0)[...] = view
        out.append(o)
    return out, ScanStats("hillis-steele", depth, work)


def _blelloch(combine, arrays, identity, axis):
    src = [np.moveaxis(a, axis, 0) for a in arrays]
    T, rows = src[0].shape[0], _block_rows(src[0])
    n = 1 << _ceil_log2(T)
    tree = []
    for a, e in zip(src, identity, strict=True):
        # the tree is laid out time-first: a level's rows are then whole contiguous slabs
        x = np.empty((n, *a.shape[1:]))
        x[:T] = a
        x[T:] = e
        tree.append(x)
    depth = work = 0
    step = 1
    while step < n:  # up-sweep: node 2s-1 (mod 2s) becomes (its right half) o (its left half)
        left, right = slice(step - 1, n, 2 * step), slice(2 * step - 1, n, 2 * step)
        rights = [x[right] for x in tree]
        _combine_into(combine, rights, [x[left] for x in tree], rights, rows)
        depth, work, step = depth + 1, work + n // (2 * step), 2 * step
    for x, e in zip(tree, identity, strict=True):
        x[n - 1] = e
    step = n // 2
    while step >= 1:  # down-sweep to exclusive prefixes
        left, right = slice(step - 1, n, 2 * step), slice(2 * step - 1, n, 2 * step)
        lefts, rights = [x[left] for x in tree], [x[right] for x in tree]
        m = lefts[0].shape[0]
        for i in range(0, m, rows):
            block = slice(i, min(i + rows, m))
            # left child <- parent prefix; right child <- (left subtree) o (parent prefix)
            new = combine(tuple(x[block] for x in lefts), tuple(x[block] for x in rights))
            for lx, rx, s in zip(lefts, rights, new, strict=True):
                lx[block] = rx[block]
                rx[block] = s
        depth, work, step = depth + 1, work + n // (2 * step), step // 2
    out = [np.empty(arrays[0].shape) for _ in arrays]
    views = [np.moveaxis(o, axis, 0) for o in out]
    _combine_into(combine, src, [x[:T] for x in tree], views, rows)  # inclusive prefixes
    return out, ScanStats("blelloch", depth + 1, work + T)


# --- input handling ----------------------------------------------------------------------------


class _Tokens(NamedTuple):
    """Validated tokens, all (B, T, D) (a batch axis of 1 is added to (T, D) input)."""

    k: np.ndarray
    lam_v: np.ndarray  # Lambda^v, zero where missing
    v: np.ndarray  # zero where missing
    phi: np.ndarray  # k^2 Lambda^v
    b: np.ndarray  # k Lambda^v v
    a_bar: np.ndarray  # possibly a broadcast view
    p_bar: np.ndarray
    q: np.ndarray | None
    lam0: np.ndarray  # (B, D)
    eta0: np.ndarray
    squeeze: bool


def _tokens(k, value_precision, v, a_bar, p_bar, q, lam0, eta0, mask, *, proper: bool):
    """Validate and broadcast the filter's inputs (see `kla_filter`)."""
    k = validation.real_array("k", k)
    lam_v = validation.nonnegative("value_precision", value_precision)
    v = np.asarray(v)
    if v.dtype == object or not np.issubdtype(v.dtype, np.number) or np.iscomplexobj(v):
        raise TypeError(f"v must be a real numeric array, got dtype {v.dtype}")
    v = v.astype(np.float64, copy=False)
    try:
        shape = np.broadcast_shapes(k.shape, lam_v.shape, v.shape)
    except ValueError:
        raise ValueError(
            f"k, value_precision and v must broadcast together; got shapes {k.shape}, "
            f"{lam_v.shape}, {v.shape}"
        ) from None
    if len(shape) not in (2, 3) or 0 in shape:
        raise ValueError(
            "tokens must have shape (B, T, D) or (T, D) with every size >= 1; k, "
            f"value_precision and v broadcast to {shape}"
        )
    squeeze = len(shape) == 2

    def full(name, arr):
        try:
            out = np.broadcast_to(arr, shape)
        except ValueError:
            raise ValueError(
                f"{name} must broadcast to the token shape {shape}, got {np.shape(arr)}"
            ) from None
        return out[None] if squeeze else out

    v_full = full("v", v)
    if mask is None:
        if not np.all(np.isfinite(v_full)):
            raise ValueError(
                f"v has {int(np.sum(~np.isfinite(v_full)))} NaN or infinite entries; mark "
                "missing tokens with mask"
            )
        lam_v = full("value_precision", lam_v)
    else:
        m = np.asarray(mask)
        if m.dtype != bool:
            raise TypeError(f"mask must be boolean (True = observed), got dtype {m.dtype}")
        if m.ndim == len(shape) - 1:  # one flag per token: (B, T) or (T,)
            if m.shape != shape[:-1]:
                raise ValueError(
                    f"mask must have shape {shape[:-1]} (one flag per token) or broadcast to "
                    f"{shape} (one per channel), got {m.shape}"
                )
            m = m[..., None]
        observed = full("mask", m)
        bad = observed & ~np.isfinite(v_full)
        if np.any(bad):
            b_, t_, d_ = np.argwhere(bad)[0]
            where = f"step {t_}, channel {d_}" if squeeze else f"sequence {b_}, step {t_}, "
            where += "" if squeeze else f"channel {d_}"
            raise ValueError(
                f"v has {int(bad.sum())} NaN or infinite entries at observed tokens (first: "
                f"{where}); mark missing tokens with mask"
            )
        lam_v = np.where(observed, full("value_precision", lam_v), 0.0)
        v_full = np.where(observed, v_full, 0.0)
    k = full("k", k)

    a_bar = validation.real_array("a_bar", a_bar)
    if np.any(a_bar <= 0):
        raise ValueError(f"a_bar must be > 0 (a_bar = e^(-a dt)), got min {a_bar.min():.6g}")
    p_bar = validation.nonnegative("p_bar", p_bar)
    if q is not None:
        q = full("q", validation.real_array("q", q))

    state_shape = shape[1:] if squeeze else shape[:1] + shape[2:]

    def state(name, value, check):
        arr = check(name, value)
        try:
            out = np.broadcast_to(arr, state_shape)
        except ValueError:
            raise ValueError(
                f"{name} must broadcast to {state_shape} (one per sequence and channel), got "
                f"shape {arr.shape}"
            ) from None
        return np.array(out[None] if squeeze else out)

    lam0 = state("lam0", lam0, validation.nonnegative)
    eta0 = state("eta0", eta0, validation.real_array)
    if proper and np.any(lam0 == 0):
        raise ValueError("lam0 must be > 0 for the moment form (its variance is 1/lam0)")
    if np.any((lam0 == 0) & (eta0 != 0)):
        raise ValueError("eta0 must be 0 where lam0 = 0 (a diffuse prior has no mean)")
    k_lam_v = k * lam_v
    return _Tokens(
        k,
        lam_v,
        v_full,
        k_lam_v * k,
        k_lam_v * v_full,
        full("a_bar", a_bar),
        full("p_bar", p_bar),
        q,
        lam0,
        eta0,
        squeeze,
    )


# --- the filter --------------------------------------------------------------------------------


@batch_input.guard
def kla_filter(
    k,
    value_precision,
    v,
    a_bar,
    p_bar,
    *,
    q=None,
    lam0=1.0,
    eta0=0.0,
    mask=None,
    method: str = "blelloch",
) -> KLAFilterResult:
    """KLA's per-channel information-form Kalman filter (seed 001 Thms 1-2, Cors 1.1, 2.1).

    ``lam_t = (M_t ... M_1)(lam_0)`` with ``M_t`` of eq. (17) and ``eta_t = F_t eta_0 + B_t``
    with ``(F_t, B_t)`` the composition of the affine steps ``(f_t, b_t)`` of eq. (19),
    ``f_t = a_bar_t / (a_bar_t^2 + p_bar_t lam_{t-1})``, ``b_t = k_t Lambda^v_t v_t``; the mean
    scan runs after the precision scan, on the precision path shifted by one step. Readouts
    ``mu_t = eta_t / lam_t``, ``1 / lam_t``, ``y_t = q_t mu_t``, ``q_t^2 / lam_t``.

    Parameters
    ----------
    k : keys (observation operators) ``k_t``, broadcast with the values: (B, T, D) or (T, D).
    value_precision : ``Lambda^v_t >= 0``; 0 marks a missing token (a pure prediction step).
    v : values ``v_t``, (B, T, D) or (T, D); NaN allowed only where `mask` is False.
    a_bar : decay ``e^{-a dt} > 0`` (eq. (8)); (D,) for the paper's time-invariant prior, or
        anything broadcasting to the token shape (per-step ``a_bar_t`` for irregular steps).
    p_bar : transition variance ``>= 0`` (eq. (8)), broadcast like `a_bar`.
    q : optional queries ``q_t`` broadcasting to the token shape, for ``y_t = q_t mu_t``.
    lam0, eta0 : the belief before the first token, broadcasting to (B, D) (or (D,)); the paper
        never states them, the authors' code uses ``lam0 = 1, eta0 = 0`` (the defaults).
        ``lam0 = 0`` is a diffuse prior and needs ``eta0 = 0`` there.
    mask : optional bool, True where a token is observed: (B, T) (or (T,)) for whole tokens, or
        anything broadcasting to the token shape per channel.
    method : ``"recursion"`` (the direct step (18)-(19), token by token), or a scan grouping of
        `associative_scan`: ``"sequential"``, ``"hillis-steele"``, ``"blelloch"``.

    Returns
    -------
    KLAFilterResult
        Arrays of the token shape; ``stats`` gives the scan's depth and work.

    Raises
    ------
    ValueError
        Shapes that do not broadcast, ``a_bar <= 0``, negative ``value_precision``/``p_bar``/
        ``lam0``, NaN outside the mask, ``eta0 != 0`` where ``lam0 = 0``, an unknown method.
    TypeError
        Non-numeric input or a non-boolean mask.

    Notes
    -----
    With ``p_bar > 0`` every prefix is finite for any T (renormalised Moebius products; the
    affine prefix ``F_t <= a_bar^t / (p_bar lam_0)`` decays). With ``p_bar = 0`` the precision
    genuinely grows like ``a_bar^{-2t}`` (Thm 3) and overflows float64 after about
    ``354 / (a dt)`` tokens, whatever the method.
    """
    method = validation.choice("method", method, FILTER_METHODS)
    tok = _tokens(k, value_precision, v, a_bar, p_bar, q, lam0, eta0, mask, proper=False)
    T = tok.phi.shape[1]
    if method == "recursion":
        lam, eta, lam_prior = _recursion(tok)
        stats = ScanStats("recursion", T, T)
    else:
        lam, eta, lam_prior, stats = _scans(tok, method)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = eta / lam  # lam = 0 only before the first token of a diffuse prior: NaN there
        variance = 1.0 / lam
    output = output_variance = None
    if tok.q is not None:
        output = tok.q * mean
        output_variance = tok.q * tok.q * variance
    fields = (lam, eta, mean, variance, lam_prior, output, output_variance)
    if tok.squeeze:
        fields = tuple(None if x is None else x[0] for x in fields)
    return KLAFilterResult(*fields, stats)


def _scans(tok: _Tokens, method: str):
    """The Moebius scan for the precisions, then the affine scan for the information means."""
    a_b, p_b = tok.a_bar, tok.p_bar
    prefix, stats = associative_scan(
        mobius_combine,
        kla_leaves(a_b, p_b, tok.phi),
        identity=MOBIUS_IDENTITY,
        method=method,
        axis=1,
    )
    lam = mobius_apply(prefix, tok.lam0[:, None])
    lam_prev = np.concatenate([tok.lam0[:, None], lam[:, :-1]], axis=1)
    den = a_b * a_b + p_b * lam_prev
    lam_prior = lam_prev / den
    gates = a_b / den
    (F, B_sum), _ = associative_scan(
        affine_combine, (gates, tok.b), identity=AFFINE_IDENTITY, method=method, axis=1
    )
    # F eta_0 only where eta_0 != 0: with a diffuse start F may overflow while eta_0 = 0
    eta0 = np.broadcast_to(tok.eta0[:, None], F.shape)
    eta = B_sum + np.multiply(F, eta0, out=np.zeros_like(F), where=eta0 != 0)
    return lam, eta, lam_prior, stats


def _recursion(tok: _Tokens):
    """Eqs. (18)-(19) one token at a time: ``den = a_bar^2 + p_bar lam``, ``eta <- (a_bar/den)
    eta + b``, ``lam <- lam/den + phi``; arrays (B, T, D)."""
    lam_out, eta_out, prior_out = (np.empty(tok.phi.shape) for _ in range(3))
    lam, eta = tok.lam0.copy(), tok.eta0.copy()
    for t in range(tok.phi.shape[1]):
        a_b, p_b = tok.a_bar[:, t], tok.p_bar[:, t]
        den = a_b * a_b + p_b * lam
        eta = (a_b / den) * eta + tok.b[:, t]
        lam = lam / den
        prior_out[:, t] = lam
        lam = lam + tok.phi[:, t]
        lam_out[:, t], eta_out[:, t] = lam, eta
    return lam_out, eta_out, prior_out


@batch_input.guard
def moment_filter(
    k, value_precision, v, a_bar, p_bar, *, lam0=1.0, eta0=0.0, mask=None
) -> MomentFilterResult:
    """Moment-form scalar Kalman filter of the same model: a reference for `kla_filter`.

    Table 5's left column, per channel: ``m- = a_bar m``, ``P- = a_bar^2 P + p_bar``, gain
    ``K = P- k Lambda^v / (k^2 Lambda^v P- + 1)`` (``P- k / (k^2 P- + 1/Lambda^v)`` multiplied
    through by ``Lambda^v``, so a missing token, ``Lambda^v = 0``, gives ``K = 0``),
    ``m = m- + K (v - k m-)``, ``P = (1 - K k) P-``; starts from ``N(eta0 / lam0, 1 / lam0)``.
    It shares no formula with the information form beyond the model. Arguments and shapes as in
    `kla_filter` (``lam0 > 0``: a diffuse prior has no moment form).
    """
    tok = _tokens(k, value_precision, v, a_bar, p_bar, None, lam0, eta0, mask, proper=True)
    means, variances = np.empty(tok.phi.shape), np.empty(tok.phi.shape)
    m, P = tok.eta0 / tok.lam0, 1.0 / tok.lam0
    for t in range(tok.phi.shape[1]):
        k_t, lam_v, v_t, a_b = tok.k[:, t], tok.lam_v[:, t], tok.v[:, t], tok.a_bar[:, t]
        m_prior = a_b * m
        P_prior = a_b * a_b * P + tok.p_bar[:, t]
        gain = P_prior * k_t * lam_v / (k_t * k_t * lam_v * P_prior + 1.0)
        m = m_prior + gain * (v_t - k_t * m_prior)
        P = (1.0 - gain * k_t) * P_prior
        means[:, t], variances[:, t] = m, P
    if tok.squeeze:
        return MomentFilterResult(means[0], variances[0])
    return MomentFilterResult(means, variances)

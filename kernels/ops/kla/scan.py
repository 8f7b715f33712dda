"""KLA's filter in torch: the parallel prefix scans and the token step (seed 001, Thms 1-2).

The torch forms of `kernels.ops.kla` (the model and its equations are in the package docstring):

* `kla_scan_torch`: the whole sequence, by the Moebius precision scan and the affine mean scan
  (``method="parallel"``: odd-even; ``"hillis-steele"``: doubling), by a loop of the step
  (``"sequential"``) or by the chunked CPU scan of `kernels.ops.kla.chunked` (``"chunked"``,
  forward only);
* `kla_step`: one predict + update of the information filter, O(1) per token (decoding);
* `prefix_scan` with the combine operators `mobius_combine` and `affine_combine`.

Parallel scans are written with torch ops and differentiable by autograd: ``"parallel"`` is the
work-efficient odd-even recursion (``2 ceil(log2 T)`` levels, ``O(T)`` work),
``"hillis-steele"`` the doubling scan (``ceil(log2 T)`` levels, ``O(T log T)`` work);
``"sequential"`` loops the step, carrying ``(lam, eta)``.

Shapes: tokens ``(B, T, *S)``; ``a_bar``, ``p_bar``, ``q`` broadcast to the token shape;
``lam0``, ``eta0`` and the state to ``(B, *S)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernels.ops.kla.chunked import chunked_filter
from kernels.ops.kla.params import (
    SCAN_METHODS,
    KLAScanResult,
    KLAState,
    prepare,
    real_tensor,
)

# --- combine operators and the doubling scan ----------------------------------------------------


def mobius_combine(later, earlier):
    """``later @ earlier`` divided by its trace (Cor. 1.1; entries as 4-tuples of tensors).

    All KLA steps and products are entrywise >= 0 with positive diagonals, so the trace is > 0.
    """
    la, lb, lc, ld = later
    ea, eb, ec, ed = earlier
    alpha = la * ea + lb * ec
    beta = la * eb + lb * ed
    gamma = lc * ea + ld * ec
    delta = lc * eb + ld * ed
    trace = alpha + delta
    return alpha / trace, beta / trace, gamma / trace, delta / trace


def affine_combine(later, earlier):
    """``(g2, u2) o (g1, u1) = (g2 g1, g2 u1 + u2)``, later first (Cor. 2.1); identity (1, 0)."""
    g2, u2 = later
    g1, u1 = earlier
    return g2 * g1, g2 * u1 + u2


def prefix_scan(combine: Callable, elements: tuple, *, algorithm: str = "odd-even") -> tuple:
    """Inclusive prefix scan ``out_t = e_t o ... o e_0`` along axis 1 of every tensor.

    ``"odd-even"`` (work-efficient, the recursion of ``jax.lax.associative_scan``): combine the
    pairs ``e_{2i+1} o e_{2i}``, scan those T/2 pairs recursively (their prefixes are the odd
    outputs), then ``out_{2i} = e_{2i} o out_{2i-1}``; ``2 ceil(log2 T)`` levels, ``O(T)``
    combines and memory. ``"hillis-steele"`` (doubling): at level j every ``out_t`` with
    ``t >= 2^j`` becomes ``out_t o out_{t - 2^j}``; ``ceil(log2 T)`` levels, ``O(T log T)``
    combines. Both are out of place (autograd-safe) and differ from a left fold only by rounding.

    ``elements``: tuple of tensors of one shape with T entries along axis 1; ``combine(later,
    earlier)`` maps two such tuples (of equal shapes) to one.
    """
    if algorithm == "odd-even":
        return _odd_even(combine, tuple(elements))
    if algorithm != "hillis-steele":
        raise ValueError(f"algorithm must be 'odd-even' or 'hillis-steele', found {algorithm!r}")
    out = tuple(elements)
    steps = out[0].shape[1]
    shift = 1
    while shift < steps:
        new = combine(tuple(x[:, shift:] for x in out), tuple(x[:, :-shift] for x in out))
        out = tuple(torch.cat([x[:, :shift], n], dim=1) for x, n in zip(out, new, strict=True))
        shift *= 2
    return out


def _odd_even(combine: Callable, elements: tuple) -> tuple:
    steps = elements[0].shape[1]
    if steps < 2:
        return elements
    even = tuple(x[:, 0::2] for x in elements)  # e_0, e_2, ...: ceil(T/2)
    odd = tuple(x[:, 1::2] for x in elements)  # e_1, e_3, ...: floor(T/2)
    half = steps // 2
    odd_out = _odd_even(combine, combine(odd, tuple(x[:, :half] for x in even)))
    rest = steps - half - 1  # even outputs after out_0 = e_0
    even_rest = combine(tuple(x[:, 1:] for x in even), tuple(x[:, :rest] for x in odd_out))
    out = []
    for e, r, o in zip(even, even_rest, odd_out, strict=True):
        even_out = torch.cat([e[:, :1], r], dim=1)
        woven = torch.stack([even_out[:, :half], o], dim=2).flatten(1, 2)  # e0 o0 e1 o1 ...
        out.append(torch.cat([woven, even_out[:, half:]], dim=1) if steps % 2 else woven)
    return tuple(out)


# --- the filter ---------------------------------------------------------------------------------


def kla_step(
    state: KLAState,
    k_t,
    value_precision_t,
    v_t,
    a_bar,
    p_bar,
    *,
    q_t=None,
) -> tuple[KLAState, torch.Tensor | None]:
    """One predict + update of the information filter (eqs. (18)-(19)): O(1) per token.

    ``den = a_bar^2 + p_bar lam``; ``eta <- (a_bar / den) eta + k Lambda^v v``;
    ``lam <- lam / den + k^2 Lambda^v``. With ``p_bar = 0`` the state grows like
    ``a_bar^{-2t}`` (the ablation's true precision) and overflows fp32 after about
    ``44 / (a dt)`` steps; the parallel scan's mean and variance readouts do not.

    Parameters
    ----------
    state : `KLAState` of (B, *S) tensors.
    k_t, value_precision_t, v_t, a_bar, p_bar, q_t : broadcasting to (B, *S).

    Returns
    -------
    (new state, ``q_t mu_t`` or None)

    Raises
    ------
    TypeError for a state that is not two floating tensors, complex or non-tensor inputs;
    ValueError for ``state.lam < 0``, ``value_precision_t < 0``, ``a_bar <= 0``, ``p_bar < 0``,
    or token arguments that do not broadcast to the state's shape.
    """
    lam, eta = _step_state(state)
    k_t, value_precision_t, v_t, a_bar, p_bar = (
        real_tensor(name, x, lam)
        for name, x in (
            ("k_t", k_t),
            ("value_precision_t", value_precision_t),
            ("v_t", v_t),
            ("a_bar", a_bar),
            ("p_bar", p_bar),
        )
    )
    shapes = [x.shape for x in (k_t, value_precision_t, v_t, a_bar, p_bar)]
    try:
        fits = torch.broadcast_shapes(lam.shape, *shapes) == lam.shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"k_t, value_precision_t, v_t, a_bar and p_bar must broadcast to the state's shape "
            f"{tuple(lam.shape)}, found {[tuple(s) for s in shapes]}"
        )
    for name, bad, what in (
        ("state.lam", lam < 0, ">= 0 (a precision)"),
        ("value_precision_t", value_precision_t < 0, ">= 0 (0 marks a missing token)"),
        ("a_bar", a_bar <= 0, "> 0 (a_bar = e^(-a dt))"),
        ("p_bar", p_bar < 0, ">= 0 (a variance)"),
    ):
        if bool(bad.any()):
            raise ValueError(f"{name} must be {what}")
    k_lam_v = k_t * value_precision_t
    state = _step(lam, eta, k_lam_v * k_t, k_lam_v * v_t, a_bar, p_bar)
    out = None if q_t is None else q_t * (state.eta / state.lam)
    return state, out


def _step_state(state) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lam, eta)`` of a `KLAState`, checked: two floating tensors of one shape."""
    if not (isinstance(state, tuple) and len(state) == 2):
        raise TypeError(
            f"state must be a KLAState(lam, eta) of (B, *S) tensors, found {type(state).__name__}"
        )
    lam, eta = real_tensor("state.lam", state[0]), real_tensor("state.eta", state[1])
    if lam.shape != eta.shape:
        raise ValueError(
            f"state.lam and state.eta must have one shape, found {tuple(lam.shape)} and "
            f"{tuple(eta.shape)}"
        )
    return lam, eta


def _step(lam, eta, phi, b, a_bar, p_bar) -> KLAState:
    den = a_bar * a_bar + p_bar * lam
    return KLAState(lam / den + phi, (a_bar / den) * eta + b)


def kla_scan_torch(
    k,
    value_precision,
    v,
    a_bar,
    p_bar,
    *,
    q=None,
    lam0=1.0,
    eta0=0.0,
    method: str = "parallel",
) -> KLAScanResult:
    """`kernels.ops.kla.kla_scan` in torch (the ``backend="torch"`` path): same arguments,
    validation (`kernels.ops.kla.params.prepare`) and result.

    Precision by the Moebius scan of ``M_t = [[1 + p_bar phi_t, a_bar^2 phi_t], [p_bar,
    a_bar^2]]`` (Thm 1, Cor. 1.1), each product divided by its trace; mean by the affine scan of
    ``mu_t = g_t mu_{t-1} + u_t`` with ``g_t = a_bar (1 - phi_t / lam_t)``, ``u_t = b_t / lam_t``
    (Cor. 2.2, eq. (20)); ``method="sequential"`` loops `kla_step`'s update instead;
    ``method="chunked"`` runs `kernels.ops.kla.chunked.chunked_filter` (the step's homogeneous
    3x3 map composed within ~sqrt(T) chunks, then the moment-form step from each chunk's incoming
    belief; forward only).

    Parameters
    ----------
    k, value_precision, v : tokens (B, T, *S) or broadcasting there.
    a_bar, p_bar, q : broadcasting to the token shape. lam0, eta0 : broadcasting to (B, *S).
    method : ``"parallel"``, ``"hillis-steele"``, ``"sequential"`` or ``"chunked"``.

    Returns
    -------
    KLAScanResult of (B, T, *S) tensors in ``k``'s dtype; ``state`` is (B, *S).
    """
    if method not in SCAN_METHODS:
        raise ValueError(f"method must be one of {SCAN_METHODS}, found {method!r}")
    k, lam_v, v, a_bar, p_bar, q, lam0, eta0, shape = prepare(
        k, value_precision, v, a_bar, p_bar, q, lam0, eta0
    )
    if method == "chunked":
        readouts = chunked_filter(k, lam_v, v, a_bar, p_bar, lam0, eta0, shape)
        return _result(*readouts, q)
    k_lam_v = k * lam_v
    phi = (k_lam_v * k).expand(shape)
    b = (k_lam_v * v).expand(shape)
    if method == "sequential":
        return _sequential(phi, b, a_bar, p_bar, q, lam0, eta0)
    a2 = a_bar * a_bar
    algorithm = "odd-even" if method == "parallel" else "hillis-steele"
    leaves = (1.0 + p_bar * phi, a2 * phi, p_bar, a2)
    prefix = prefix_scan(mobius_combine, leaves, algorithm=algorithm)
    alpha, beta, gamma, delta = prefix
    lam0_t = lam0.unsqueeze(1)
    x = alpha * lam0_t + beta  # homogeneous (x, y): lam = x / y; x >= alpha lam0 > 0
    y = gamma * lam0_t + delta
    variance = y / x
    # 1 - phi / lam = lam_prior / lam in [0, 1]; rounding may dip below 0 by an ulp: clamp
    gate = a_bar * (1.0 - phi * variance).clamp_min(0.0)
    G, U = prefix_scan(affine_combine, (gate, b * variance), algorithm=algorithm)
    mean = G * (eta0 / lam0).unsqueeze(1) + U
    precision = x / y
    info_mean = precision * mean
    return _result(precision, info_mean, mean, variance, q)


def _sequential(phi, b, a_bar, p_bar, q, lam0, eta0) -> KLAScanResult:
    state = KLAState(lam0, eta0)
    lams, etas = [], []
    for t in range(phi.shape[1]):
        state = _step(*state, phi[:, t], b[:, t], a_bar[:, t], p_bar[:, t])
        lams.append(state.lam)
        etas.append(state.eta)
    precision, info_mean = torch.stack(lams, dim=1), torch.stack(etas, dim=1)
    return _result(precision, info_mean, info_mean / precision, 1.0 / precision, q)


def _result(precision, info_mean, mean, variance, q) -> KLAScanResult:
    output = output_variance = None
    if q is not None:
        output, output_variance = q * mean, q * q * variance
    state = KLAState(precision[:, -1], info_mean[:, -1])
    return KLAScanResult(precision, info_mean, mean, variance, output, output_variance, state)

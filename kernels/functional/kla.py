"""Kalman Linear Attention: the information-form Kalman filter as torch prefix scans (seed 001).

Every channel is an independent scalar filter of the zero-mean OU prior observed through
token-dependent keys (seed 001 eqs. (7)-(9); digest sections 1.2-1.7):

    z_t | z_{t-1} ~ N(a_bar_t z_{t-1}, p_bar_t),      v_t | z_t ~ N(k_t z_t, 1 / Lambda^v_t),

with the posterior ``N(mu_t, 1 / lam_t)``. With ``phi_t = k_t^2 Lambda^v_t`` and
``b_t = k_t Lambda^v_t v_t``:

* precision (Thm 1, eqs. (16)-(18)): ``lam_t = M_t(lam_{t-1})``, the Moebius map of
  ``M_t = [[1 + p_bar phi_t, a_bar^2 phi_t], [p_bar, a_bar^2]]``; ``lam_t = (M_t ... M_1)(lam_0)``
  (Cor. 1.1, later step on the *left*; the printed ``M_1 o ... o M_T`` has the order reversed,
  digest section 8), identity ``I_2`` (not stated in the seed, digest 1.6). Each product is
  divided by its trace (the authors' kernels, digest 1.13): the map is unchanged and the entries
  stay in ``[0, 1]``, so no product over- or underflows at any T, ``p_bar = 0`` included.
* mean: the paper scans the information mean ``eta_t = f_t eta_{t-1} + b_t`` with
  ``f_t = a_bar / (a_bar^2 + p_bar lam_{t-1})`` (Thm 2, eq. (19)). With ``p_bar = 0`` that gate is
  ``1 / a_bar > 1`` and ``eta`` grows like ``a_bar^{-t}``: fp32 overflows after about
  ``88 / (a dt)`` tokens (digest C11). Here the mean is scanned in the equivalent moment form of
  Cor. 2.2, eq. (20): ``mu_t = g_t mu_{t-1} + u_t`` with ``g_t = a_bar (1 - phi_t / lam_t)``
  (= ``a_bar lam^prior_t / lam_t``, in ``[0, a_bar]``) and ``u_t = b_t / lam_t``, an affine scan
  ``(g2, u2) o (g1, u1) = (g2 g1, g2 u1 + u2)`` (identity ``(1, 0)``) whose prefixes are bounded.
  ``1 / lam_t`` is read from the normalised homogeneous coordinates ``(x, y) = prefix @
  (lam_0, 1)`` as ``y / x``, so a precision beyond the float range gives variance 0, not NaN.
* readouts: ``mu_t``, ``Var = 1 / lam_t``, ``eta_t = lam_t mu_t`` and, with a query,
  ``y_t = q_t mu_t`` with variance ``q_t^2 / lam_t`` (eq. (11), Alg. 1). The state-expanded
  readout ``y = sum_n q_n mu[n, :]`` (App. A) is ``output.sum(dim=-2)`` on (B, T, N, D) tokens.

Shapes: tokens are ``(B, T, *S)`` with time on axis 1 and any state shape ``S`` (``(D,)`` for
D channels, ``(N, D)`` for N slots by D channels: keys (B, T, N, 1) and values (B, T, 1, D)
broadcast to (B, T, N, D), eqs. (22)-(23)). ``a_bar``, ``p_bar`` and ``q`` broadcast to the token
shape (``(N, D)`` for the paper's time-invariant prior, per-token for irregular steps);
``lam0``, ``eta0`` broadcast to the state shape ``(B, *S)``.

Parallel scans (`prefix_scan`) are written with torch ops and differentiable by autograd:
``"parallel"`` is the work-efficient odd-even recursion (``2 ceil(log2 T)`` levels, ``O(T)``
work), ``"hillis-steele"`` the doubling scan (``ceil(log2 T)`` levels, ``O(T log T)`` work);
``"sequential"`` loops `kla_step`, the O(1)-per-token streaming form carrying ``(lam, eta)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from kernels._validation import (
    as_parameter,
    check_class_indices,
    check_finite,
    check_nll_args,
    overflow_warning,
)
from kernels.backend import use_triton
from kernels.functional.lags import relaxation

SCAN_METHODS = ("parallel", "hillis-steele", "sequential")
P_CONVENTIONS = ("paper", "code")


class KLAState(NamedTuple):
    """The carried belief: precision ``lam`` and information mean ``eta = lam mu``, (B, *S)."""

    lam: torch.Tensor
    eta: torch.Tensor


class KLAScanResult(NamedTuple):
    """Output of `kla_scan`; tensors of the token shape (B, T, *S).

    precision : ``lam_t`` (eq. (16)); may be inf in fp32 where the true value exceeds the float
        range (``p_bar = 0`` over long sequences), while `variance` is then 0 and `mean` finite.
    info_mean : ``eta_t = lam_t mu_t`` (eq. (19)); same caveat.
    mean, variance : ``mu_t`` and ``1 / lam_t``.
    output, output_variance : ``q_t mu_t`` and ``q_t^2 / lam_t``, or None without a query.
    state : the final `KLAState` (the belief after token T), (B, *S), to continue with `kla_step`.
    """

    precision: torch.Tensor
    info_mean: torch.Tensor
    mean: torch.Tensor
    variance: torch.Tensor
    output: torch.Tensor | None
    output_variance: torch.Tensor | None
    state: KLAState


# --- OU prior, eq. (8) --------------------------------------------------------------------------


@overflow_warning
def ou_prior(a, p, dt, *, convention: str = "paper") -> tuple[torch.Tensor, torch.Tensor]:
    """Exact discretisation ``(a_bar, p_bar)`` of ``dz = -a z dt + p dW`` (seed 001 eq. (8)).

    ``a_bar = e^{-a dt}``; ``p_bar = p^2 (1 - e^{-2 a dt}) / (2a)`` with ``convention="paper"``
    (eq. (8): ``p`` a diffusion coefficient) or ``p (1 - e^{-2 a dt}) / (2a)`` with
    ``convention="code"`` (the authors' repository treats ``p`` as a variance, digest 1.2).
    ``(1 - e^{-2 a dt}) / (2a)`` is evaluated as ``dt * relaxation(2 a dt)``: exact to full
    relative precision as ``a dt -> 0`` and equal to ``dt`` (the Brownian limit) at ``a = 0``.

    Parameters
    ----------
    a : decay rate >= 0; p : diffusion (``"paper"``, any real) or variance (``"code"``, >= 0);
    dt : step >= 0. Tensors broadcasting together (e.g. (N, D), or (B, T, N, D) for per-token
    steps).

    Returns
    -------
    (a_bar, p_bar) of the broadcast shape.
    """
    if convention not in P_CONVENTIONS:
        raise ValueError(f"convention must be one of {P_CONVENTIONS}, found {convention!r}")
    like = next((x for x in (a, p, dt) if isinstance(x, torch.Tensor)), None)
    if like is None or not like.is_floating_point():
        raise TypeError("at least one of a, p, dt must be a floating torch.Tensor (sets dtype)")
    a, p, dt = (as_parameter(n, x, like) for n, x in (("a", a), ("p", p), ("dt", dt)))
    for name, x in (("a", a), ("p", p), ("dt", dt)):
        check_finite(name, x)
    if not ((a >= 0).all() and (dt >= 0).all()):
        raise ValueError("a and dt must be >= 0 (decay rate and step of the OU prior)")
    scale = p * p if convention == "paper" else p
    if convention == "code" and (p < 0).any():
        raise ValueError("p must be >= 0 with convention='code' (p is a variance there)")
    return torch.exp(-a * dt), scale * dt * relaxation(2.0 * a * dt)


# --- validation ---------------------------------------------------------------------------------


def _tensor(name: str, x, like: torch.Tensor | None = None) -> torch.Tensor:
    if like is None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, found {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, found dtype {x.dtype}")
        return x
    if not isinstance(x, torch.Tensor):  # Python numbers and arrays: straight to like's dtype
        if np.iscomplexobj(x):  # the cast would fail with no word of which argument
            raise TypeError(f"{name} must be real, found a complex value")
        x = as_parameter(name, x, like) if isinstance(x, (str, type(None))) else x
        x = torch.as_tensor(x, dtype=like.dtype, device=like.device)
    if x.is_complex() or not (x.is_floating_point() or x.dtype in (torch.int64, torch.int32)):
        raise TypeError(f"{name} must be real, found dtype {x.dtype}")
    return x.to(dtype=like.dtype, device=like.device)


def _broadcast(name: str, x: torch.Tensor, shape: torch.Size, what: str) -> torch.Tensor:
    try:
        return x.expand(shape) if x.shape != shape else x
    except RuntimeError:
        raise ValueError(
            f"{name} must broadcast to the {what} {tuple(shape)}, found {tuple(x.shape)}"
        ) from None


def _prepare(k, value_precision, v, a_bar, p_bar, q, lam0, eta0):
    k = _tensor("k", k)
    lam_v = _tensor("value_precision", value_precision, k)
    v = _tensor("v", v, k)
    try:
        shape = torch.broadcast_shapes(k.shape, lam_v.shape, v.shape)
    except RuntimeError:
        raise ValueError(
            "k, value_precision and v must broadcast together, found shapes "
            f"{tuple(k.shape)}, {tuple(lam_v.shape)}, {tuple(v.shape)}"
        ) from None
    if len(shape) < 3 or 0 in shape:
        raise ValueError(
            "tokens must have shape (B, T, *S) with every size >= 1; k, value_precision and v "
            f"broadcast to {tuple(shape)}"
        )
    if (lam_v < 0).any():
        raise ValueError("value_precision must be >= 0 (0 marks a missing token)")
    a_bar = _tensor("a_bar", a_bar, k)
    p_bar = _tensor("p_bar", p_bar, k)
    if (a_bar <= 0).any():
        raise ValueError(f"a_bar must be > 0 (a_bar = e^(-a dt)), found min {a_bar.min():.3g}")
    if (p_bar < 0).any():
        raise ValueError(f"p_bar must be >= 0 (a variance), found min {p_bar.min():.3g}")
    a_bar = _broadcast("a_bar", a_bar, shape, "token shape")
    p_bar = _broadcast("p_bar", p_bar, shape, "token shape")
    if q is not None:
        q = _broadcast("q", _tensor("q", q, k), shape, "token shape")
    state_shape = shape[:1] + shape[2:]
    lam0 = _broadcast("lam0", _tensor("lam0", lam0, k), state_shape, "state shape (B, *S)")
    eta0 = _broadcast("eta0", _tensor("eta0", eta0, k), state_shape, "state shape (B, *S)")
    if (lam0 <= 0).any():
        # a diffuse start (lam0 = 0) has no mean until the first token; not supported here
        raise ValueError("lam0 must be > 0 (the prior precision before the first token)")
    return k, lam_v, v, a_bar, p_bar, q, lam0, eta0, shape


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
        _tensor(name, x, lam)
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
    lam, eta = _tensor("state.lam", state[0]), _tensor("state.eta", state[1])
    if lam.shape != eta.shape:
        raise ValueError(
            f"state.lam and state.eta must have one shape, found {tuple(lam.shape)} and "
            f"{tuple(eta.shape)}"
        )
    return lam, eta


def _step(lam, eta, phi, b, a_bar, p_bar) -> KLAState:
    den = a_bar * a_bar + p_bar * lam
    return KLAState(lam / den + phi, (a_bar / den) * eta + b)


@overflow_warning
def kla_scan(
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
    backend: str = "auto",
) -> KLAScanResult:
    """KLA's per-channel Kalman filter over a sequence (seed 001 Thms 1-2, Cors 1.1, 2.1-2.2).

    Parameters
    ----------
    k : keys ``k_t``, (B, T, *S) or broadcasting there with `value_precision` and `v`.
    value_precision : ``Lambda^v_t >= 0``; 0 marks a missing token (a pure prediction step).
    v : values ``v_t``.
    a_bar : decay ``e^{-a dt} > 0`` broadcasting to the token shape (`ou_prior`).
    p_bar : transition variance ``>= 0``, broadcast like `a_bar` (0 is the p = 0 ablation).
    q : optional query broadcasting to the token shape; ``output = q mu`` elementwise.
    lam0, eta0 : belief before the first token, broadcasting to (B, *S); ``lam0 > 0``. The paper
        never states them; the defaults ``lam0 = 1, eta0 = 0`` are the authors' code (digest 1.13).
    method : ``"parallel"`` (odd-even scans: O(log T) depth, O(T) work), ``"hillis-steele"``
        (doubling scans: O(log T) depth, O(T log T) work) or ``"sequential"`` (a loop of
        `kla_step`; with ``p_bar = 0`` its information state overflows fp32 after about
        ``44 / (a dt)`` tokens, where the scans stay finite). Used by the torch backend.
    backend : ``"auto"`` (the Triton chunked scan `kernels.triton.kla_scan.kla_scan_triton` when
        ``k`` is a CUDA tensor of dtype float32/bfloat16/float16 and ``method="parallel"``, else
        torch), ``"torch"`` or ``"triton"`` (on CPU only under ``TRITON_INTERPRET=1``). Decided at
        each call from the inputs; Triton is imported only when it runs.

    Returns
    -------
    KLAScanResult

    Raises
    ------
    ValueError
        Shapes that do not broadcast, fewer than 3 token axes, ``a_bar <= 0``, negative
        ``value_precision`` or ``p_bar``, ``lam0 <= 0``, an unknown method or backend;
        ``backend="triton"`` with another method, dtype float64, or CPU tensors outside the
        Triton interpreter.
    TypeError
        A non-tensor or non-floating `k`, or complex arguments.
    """
    if method not in SCAN_METHODS:
        raise ValueError(f"method must be one of {SCAN_METHODS}, found {method!r}")
    if use_triton(backend, _tensor("k", k), {f"method={method!r}": method != "parallel"}):
        from kernels.triton.kla_scan import kla_scan_triton

        return kla_scan_triton(k, value_precision, v, a_bar, p_bar, q=q, lam0=lam0, eta0=eta0)
    k, lam_v, v, a_bar, p_bar, q, lam0, eta0, shape = _prepare(
        k, value_precision, v, a_bar, p_bar, q, lam0, eta0
    )
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


# --- KLA+ loss, eqs. (24)-(25) ------------------------------------------------------------------


def mc_marginal_nll(
    mean: torch.Tensor,
    variance: torch.Tensor,
    target: torch.Tensor,
    decoder: Callable[[torch.Tensor], torch.Tensor],
    *,
    num_samples: int = 10,
    generator: torch.Generator | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Monte-Carlo marginal negative log-likelihood of KLA+ (seed 001 eqs. (24)-(25)).

    ``-log p(o_t | X) ~ -logsumexp_s log p(o_t | y^(s)) + log S`` with reparameterised samples
    ``y^(s) = mean + sqrt(variance) eps^(s)``, ``eps ~ N(0, I)`` (the authors sample at the layer
    output, digest 1.14), and ``log p(o | y) = log_softmax(decoder(y))[o]``. ``S = 10`` in the
    paper (G.2). At S = 1 it is the cross-entropy of one posterior sample, not of the mean.

    Parameters
    ----------
    mean, variance : (..., F) readout mean and variance (variance >= 0).
    target : (...) int64 class indices.
    decoder : maps (S, ..., F) samples to (S, ..., C) logits.
    num_samples : S >= 1.
    generator : RNG for ``eps`` (None: the global one).
    reduction : ``"mean"``, ``"sum"`` or ``"none"`` over the token axes ``...``.
    """
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer, found {num_samples!r}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', found {reduction!r}")
    check_nll_args(mean, variance, target)
    if mean.shape != variance.shape:
        raise ValueError(
            f"mean and variance must share a shape, found {tuple(mean.shape)}, "
            f"{tuple(variance.shape)}"
        )
    if target.shape != mean.shape[:-1]:
        raise ValueError(
            f"target must have shape {tuple(mean.shape[:-1])}, found {tuple(target.shape)}"
        )
    eps = torch.randn(
        (num_samples, *mean.shape), generator=generator, dtype=mean.dtype, device=mean.device
    )
    samples = mean + variance.clamp_min(0.0).sqrt() * eps  # clamp: rounding may give -0 variance
    log_probs = torch.log_softmax(decoder(samples), dim=-1)
    check_class_indices("target", target, log_probs.shape[-1])
    index = target.unsqueeze(0).expand(num_samples, *target.shape).unsqueeze(-1)
    log_lik = log_probs.gather(-1, index).squeeze(-1)
    nll = -(torch.logsumexp(log_lik, dim=0) - math.log(num_samples))
    if reduction == "mean":
        return nll.mean()
    return nll.sum() if reduction == "sum" else nll

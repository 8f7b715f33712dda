"""KLA's argument preparation and types, shared by the torch scans and the Triton kernel (seed 001).

* `ou_prior`: the exact discretisation ``(a_bar, p_bar)`` of the OU prior (eq. (8));
* `prepare`: the one validation and broadcasting of `kla_scan`'s arguments, used by the torch
  scans (`kernels.ops.kla.scan`) and the fused kernel (`kernels.ops.kla.triton`) alike;
* `real_tensor`, `broadcast`: the argument checks behind it (also `kla_step`'s);
* the carried belief `KLAState` and the readouts `KLAScanResult`.

Shapes: tokens ``(B, T, *S)`` (time on axis 1, any state shape ``S``); ``a_bar``, ``p_bar``,
``q`` broadcast to the token shape; ``lam0``, ``eta0`` to the state shape ``(B, *S)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from kernels._validation import as_parameter, check_finite, overflow_warning
from kernels.ops.common.lags import relaxation

SCAN_METHODS = ("parallel", "hillis-steele", "sequential", "chunked")
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
    if not torch.compiler.is_compiling() and not ((a >= 0).all() and (dt >= 0).all()):
        raise ValueError("a and dt must be >= 0 (decay rate and step of the OU prior)")
    scale = p * p if convention == "paper" else p
    if convention == "code" and not torch.compiler.is_compiling() and (p < 0).any():
        raise ValueError("p must be >= 0 with convention='code' (p is a variance there)")
    return torch.exp(-a * dt), scale * dt * relaxation(2.0 * a * dt)


# --- validation ---------------------------------------------------------------------------------


def real_tensor(name: str, x, like: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` as a real tensor: without ``like`` it must be a floating tensor already (it sets
    the dtype); with ``like``, numbers and arrays are converted to ``like``'s dtype and device.

    Raises TypeError naming ``name`` for a non-tensor (without ``like``), a non-floating or a
    complex value.
    """
    if like is None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, found {type(x).__name__}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, found dtype {x.dtype}")
        return x
    if not isinstance(x, torch.Tensor):  # Python numbers and arrays: straight to like's dtype
        if not torch.compiler.is_compiling() and np.iscomplexobj(x):  # a cast naming nothing
            raise TypeError(f"{name} must be real, found a complex value")
        x = as_parameter(name, x, like) if isinstance(x, (str, type(None))) else x
        x = torch.as_tensor(x, dtype=like.dtype, device=like.device)
    if x.is_complex() or not (x.is_floating_point() or x.dtype in (torch.int64, torch.int32)):
        raise TypeError(f"{name} must be real, found dtype {x.dtype}")
    return x.to(dtype=like.dtype, device=like.device)


def broadcast(name: str, x: torch.Tensor, shape: torch.Size, what: str) -> torch.Tensor:
    """``x`` expanded to ``shape`` (a view); ValueError naming ``name`` and ``what`` if it
    does not broadcast there."""
    try:
        return x.expand(shape) if x.shape != shape else x
    except RuntimeError:
        raise ValueError(
            f"{name} must broadcast to the {what} {tuple(shape)}, found {tuple(x.shape)}"
        ) from None


def prepare(k, value_precision, v, a_bar, p_bar, q, lam0, eta0):
    """`kla_scan`'s arguments checked and broadcast (the one validation of both backends).

    Returns ``(k, value_precision, v, a_bar, p_bar, q, lam0, eta0, shape)``: ``k``,
    ``value_precision`` and ``v`` as given (in ``k``'s dtype, not yet broadcast), ``a_bar``,
    ``p_bar`` and ``q`` (or None) expanded to the token shape ``shape = (B, T, *S)``, ``lam0`` and
    ``eta0`` expanded to ``(B, *S)``.

    Raises
    ------
    ValueError
        Shapes that do not broadcast, fewer than 3 token axes or an empty one, negative
        ``value_precision`` or ``p_bar``, ``a_bar <= 0``, ``lam0 <= 0``.
    TypeError
        A non-tensor or non-floating ``k``; complex arguments.
    """
    k = real_tensor("k", k)
    lam_v = real_tensor("value_precision", value_precision, k)
    v = real_tensor("v", v, k)
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
    tracing = torch.compiler.is_compiling()  # value checks would break torch.compile's graph
    if not tracing and (lam_v < 0).any():
        raise ValueError("value_precision must be >= 0 (0 marks a missing token)")
    a_bar = real_tensor("a_bar", a_bar, k)
    p_bar = real_tensor("p_bar", p_bar, k)
    if not tracing and (a_bar <= 0).any():
        raise ValueError(f"a_bar must be > 0 (a_bar = e^(-a dt)), found min {a_bar.min():.3g}")
    if not tracing and (p_bar < 0).any():
        raise ValueError(f"p_bar must be >= 0 (a variance), found min {p_bar.min():.3g}")
    a_bar = broadcast("a_bar", a_bar, shape, "token shape")
    p_bar = broadcast("p_bar", p_bar, shape, "token shape")
    if q is not None:
        q = broadcast("q", real_tensor("q", q, k), shape, "token shape")
    state_shape = shape[:1] + shape[2:]
    lam0 = broadcast("lam0", real_tensor("lam0", lam0, k), state_shape, "state shape (B, *S)")
    eta0 = broadcast("eta0", real_tensor("eta0", eta0, k), state_shape, "state shape (B, *S)")
    if not tracing and (lam0 <= 0).any():
        # a diffuse start (lam0 = 0) has no mean until the first token; not supported here
        raise ValueError("lam0 must be > 0 (the prior precision before the first token)")
    return k, lam_v, v, a_bar, p_bar, q, lam0, eta0, shape

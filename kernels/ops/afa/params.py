"""AFA's argument preparation, shared by every form and by the fused kernel's packer.

A call's `Dynamics` and `Robust` (`kernels.ops.common.params`) are validated and broadcast here
once: `prepare` gives a `Problem` with the sizes, the per-head (or per-feature) dynamics of the
queries/keys and of the values as ``(H, width)`` tensors in the working dtype, ``nu`` and the
temperature per head. The torch forms (`tensor`, `isotropic`, `separable`) and the Triton
packer (`kernels.ops.afa.triton`) read nothing else, so a quantity keeps its name and is checked
once from the layer to the kernel.

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``; with frequencies the features are complex in
real pairs (``D = 2 n_qk``, ``Dv = 2 n_v``), without them real (``n_qk = D``, ``n_v = Dv``). A
per-head parameter is a number, ``(H,)`` or ``(H, 1)``; a per-feature one also ``(width,)`` or
``(H, width)``. Time stamps ``(T,)`` or ``(B, T)``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels._validation import check_qkv, check_times
from kernels.ops.common import complex_pairs
from kernels.ops.common.params import Dynamics, Robust
from kernels.ops.common.rotation import from_origin

PRECISIONS = ("exact", "separable")


class AFAOutput(NamedTuple):
    """Result of the AFA functions.

    output : (B, H, T, Dv) the filtered estimate ``Zbar_i`` at ``t_i`` (real pairs if complex).
    weights : the attention weights when requested, else None; see each function for the shape.
    """

    output: torch.Tensor
    weights: torch.Tensor | None


class HeadDynamics(NamedTuple):
    """Per-head ``(H, 1)`` or per-feature ``(H, n)`` dynamics; ``frequencies`` may be None."""

    decay: torch.Tensor
    frequencies: torch.Tensor | None
    process_var: torch.Tensor
    measurement_var: torch.Tensor


class Problem(NamedTuple):
    """One call's validated arguments (`prepare`).

    batch, heads, steps : ``B, H, T``.   n_qk, n_v : feature counts of q/k and of v.
    rotate_qk, rotate_v : whether q/k and v are complex (rotated) features.
    qk, vd : `HeadDynamics` of the queries/keys and of the values.
    shared_variance : the values' decay and noise are the q/k ones (one precision kernel).
    shared_rotation : the values' frequencies are the q/k ones (one rotation).
    nu : ``(H, 1)`` robust scale, or None for ``nu = inf`` (weight 1).
    temperature : ``(H, 1)`` exponent of the robust weight.
    """

    batch: int
    heads: int
    steps: int
    n_qk: int
    n_v: int
    rotate_qk: bool
    rotate_v: bool
    qk: HeadDynamics
    vd: HeadDynamics
    shared_variance: bool
    shared_rotation: bool
    nu: torch.Tensor | None
    temperature: torch.Tensor


def prepare(q, k, v, dynamics: Dynamics, robust: Robust, *, per_feature: bool, like) -> Problem:
    """Validate shapes and parameters once; parameters in ``like``'s dtype and device.

    ``per_feature``: the tensor and separable forms take ``(H, n)`` decays and noise, the
    isotropic form and the kernel one value per head.
    """
    batch, heads, steps, n_qk, n_v, rotate_qk, rotate_v = _widths(q, k, v, dynamics)
    values = dynamics.for_values
    qk = _head_dynamics("", dynamics, heads, n_qk, like, per_feature)
    vd = _head_dynamics("value_", values, heads, n_v, like, per_feature)
    shared = ("decay", "process_var", "measurement_var")
    return Problem(
        batch,
        heads,
        steps,
        n_qk,
        n_v,
        rotate_qk,
        rotate_v,
        qk,
        vd,
        shared_variance=all(values[name] is dynamics[name] for name in shared),
        shared_rotation=values.frequencies is dynamics.frequencies,
        nu=_nu(robust.nu, heads, like),
        temperature=_temperature(robust.temperature, heads, like),
    )


# ---------------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------------


def per_head(name: str, value, heads: int, width: int, like: torch.Tensor) -> torch.Tensor:
    """``value`` (number, ``(H,)``, ``(width,)`` or ``(H, width)``) as an ``(H, width)`` tensor."""
    if not isinstance(value, (torch.Tensor, int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number or a torch.Tensor, found {type(value).__name__}")
    if isinstance(value, torch.Tensor):
        x = value.to(dtype=like.dtype, device=like.device)
    else:  # straight to the target dtype: a float64 run must not round through float32
        x = torch.tensor(value, dtype=like.dtype, device=like.device)
    if x.ndim == 0:
        return x.expand(heads, width)
    if x.ndim == 1 and x.shape[0] == heads:
        return x.unsqueeze(-1).expand(heads, width)
    if x.ndim == 1 and x.shape[0] == width:
        return x.unsqueeze(0).expand(heads, width)
    if x.ndim == 2 and x.shape[0] in (1, heads) and x.shape[1] in (1, width):
        return x.expand(heads, width)
    raise ValueError(
        f"{name} must have shape (H,) = ({heads},) or (H, {width}), found {tuple(x.shape)}"
    )


def check_values(name: str, x: torch.Tensor, *, positive: bool) -> None:
    """Value checks, skipped while compiling (they would be data-dependent control flow)."""
    if torch.compiler.is_compiling():
        return
    if not x.numel():
        return
    # one reduction and one sync: min and max propagate NaN, and an inf is one of them
    low, high = torch.stack(torch.aminmax(x.detach())).tolist()
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"{name} must be finite, found NaN or inf")
    if positive and low <= 0:
        raise ValueError(f"{name} must be > 0, found a minimum of {low:.3g}")
    if not positive and low < 0:
        raise ValueError(f"{name} must be >= 0, found a minimum of {low:.3g}")


def _head_dynamics(prefix, dynamics: Dynamics, heads, width, like, per_feature) -> HeadDynamics:
    """Validated dynamics; ``width`` is the number of (complex or real) features."""
    cols = width if per_feature else 1
    a = per_head(f"{prefix}decay", dynamics.decay, heads, cols, like)
    s2 = per_head(f"{prefix}process_var", dynamics.process_var, heads, cols, like)
    e2 = per_head(f"{prefix}measurement_var", dynamics.measurement_var, heads, cols, like)
    check_values(f"{prefix}decay", a, positive=False)
    check_values(f"{prefix}process_var", s2, positive=False)
    # P(0) = 1 / eta^2: a noiseless measurement would have infinite precision at zero lag.
    check_values(f"{prefix}measurement_var", e2, positive=True)
    w = None
    if dynamics.frequencies is not None:
        w = per_head(f"{prefix}frequencies", dynamics.frequencies, heads, width, like)
    return HeadDynamics(a, w, s2, e2)


def _nu(nu, heads: int, like) -> torch.Tensor | None:
    """``nu`` as an ``(H, 1)`` tensor, or None for ``nu = inf`` (the Gaussian limit, W = 1)."""
    if isinstance(nu, (int, float)) and not isinstance(nu, bool):
        if not nu > 0:  # also catches NaN
            raise ValueError(f"nu must be > 0 (or math.inf for the Gaussian limit), found {nu}")
        if math.isinf(nu):
            return None
        return torch.full((heads, 1), float(nu), dtype=like.dtype, device=like.device)
    x = per_head("nu", nu, heads, 1, like)
    check_values("nu", x, positive=True)
    return x


def _temperature(temperature, heads: int, like) -> torch.Tensor:
    x = per_head("temperature", temperature, heads, 1, like)
    check_values("temperature", x, positive=False)
    return x


# ---------------------------------------------------------------------------------------------
# Shapes, times, biases, options
# ---------------------------------------------------------------------------------------------


def _widths(q, k, v, dynamics: Dynamics):
    """``(B, H, T, n_qk, n_v, rotate_qk, rotate_v)``: feature counts and which parts rotate."""
    batch, heads, steps, dim, vdim = check_qkv(q, k, v)
    if heads < 1:
        raise ValueError(f"q must have H >= 1 heads, found {tuple(q.shape)}")
    rotate_qk = dynamics.frequencies is not None
    value_frequencies = dynamics.for_values.frequencies
    inherited = value_frequencies is dynamics.frequencies
    if inherited and rotate_qk and vdim != dim:
        raise ValueError(
            f"value_frequencies is required when Dv ({vdim}) differs from D ({dim}) and "
            "frequencies are given (the value rotation cannot be shared)"
        )
    rotate_v = value_frequencies is not None
    for name, size, complex_ in (
        ("q/k feature size D", dim, rotate_qk),
        ("v feature size Dv", vdim, rotate_v),
    ):
        if complex_ and size % 2:
            raise ValueError(
                f"{name} must be even when frequencies are given (real and imaginary halves), "
                f"found {size}"
            )
    n_qk = dim // 2 if rotate_qk else dim
    n_v = vdim // 2 if rotate_v else vdim
    return batch, heads, steps, n_qk, n_v, rotate_qk, rotate_v


def relative_times(t, steps: int, like) -> torch.Tensor:
    """``t - t_0`` as ``(B or 1, 1, T)``: lags and rotations do not depend on the origin
    (`kernels.ops.common.rotation.from_origin`)."""
    return from_origin(check_times(t, steps, like=like))


def positions(t, steps: int, like) -> torch.Tensor:
    """The clock of the isotropic form and the kernel: ``t_i = i`` for ``t = None`` (as
    ``(1, 1, T)``), else `relative_times`."""
    if t is None:
        return torch.arange(steps, dtype=like.dtype, device=like.device).view(1, 1, steps)
    return relative_times(t, steps, like)


def uniform_spacing(positions: torch.Tensor) -> float | None:
    """``h`` when every sequence's clock is exactly ``0, h, 2h, ...`` (`positions`, ``(Bt, 1,
    T)``), so the lag kernels depend on ``i - j`` only and can be evaluated once per call on
    the lags ``h (i - j)``; None otherwise, and while compiling (the test is data-dependent) or
    when the stamps need a gradient. One comparison and one sync."""
    steps = positions.shape[-1]
    if torch.compiler.is_compiling() or positions.requires_grad:
        return None
    if steps < 2:
        return 1.0
    grid = positions[0, 0, 1] * torch.arange(steps, dtype=positions.dtype, device=positions.device)
    if not bool(torch.equal(positions, grid.expand_as(positions))):
        return None
    return float(positions[0, 0, 1])


def bias(name: str, value, heads: int, width: int, like) -> torch.Tensor | None:
    """A drift bias ``(H, width)`` or ``(width,)`` as ``(1, H, 1, width)`` (seed 000 3.9)."""
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, found {type(value).__name__}")
    if value.shape not in ((width,), (1, width), (heads, width)):
        raise ValueError(
            f"{name} must have shape (H, {width}) = ({heads}, {width}) or ({width},), "
            f"found {tuple(value.shape)}"
        )
    return value.to(dtype=like.dtype, device=like.device).reshape(-1, width)[None, :, None, :]


def unit(x: torch.Tensor) -> torch.Tensor:
    """``x / |x|`` over the last axis (QK-norm, seed 000 3.7-3.8); a zero vector stays zero."""
    norm2 = complex_pairs.squared_modulus(x).unsqueeze(-1)
    return x * torch.rsqrt(torch.clamp(norm2, min=torch.finfo(x.dtype).tiny))


def check_block_size(block_size) -> None:
    """``block_size``: queries per block (the tile of the fused kernel), a positive integer or
    None."""
    if block_size is None:
        return
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer or None, found {block_size!r}")

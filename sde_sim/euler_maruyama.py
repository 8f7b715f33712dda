"""Euler-Maruyama: a pure step and a batched simulator (seed 000 section 4.2 uses this scheme).

``x_{k+1} = x_k + f(t_k, x_k) h_k + g(t_k, x_k) dW_k`` with ``dW_k ~ N(0, h_k I)`` supplied by
the caller. For a `LinearSDE` the loop runs as the affine recursion ``x_{k+1} = (I + A h) x_k +
u h + G dW_k`` (identical in exact arithmetic, tested against the step); other systems iterate
`euler_maruyama_step`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from sde_sim import validation
from sde_sim.models import LinearSDE, RadialTangentialSDE, unit_rows
from sde_sim.recursion import AffineSteps, run_affine_recursion


class DriftDiffusion(Protocol):
    """What the step needs: batched drift ``f(t, x)`` and noise map ``g(t, x) dW``."""

    dim: int
    noise_dim: int

    def drift(self, t: float, x: np.ndarray) -> np.ndarray: ...

    def diffusion(self, t: float, x: np.ndarray, dW: np.ndarray) -> np.ndarray: ...


def euler_maruyama_step(
    system: DriftDiffusion, t: float, x: np.ndarray, h: float, dW: np.ndarray
) -> np.ndarray:
    """One Euler-Maruyama step ``x + f(t, x) h + g(t, x) dW``, its arguments checked.

    Parameters
    ----------
    system : anything with ``drift(t, x)`` and ``diffusion(t, x, dW)`` (and ``dim``,
        ``noise_dim``).
    t, h : current time (finite) and step size (finite, ``>= 0``).
    x : (P, d) finite states; dW : (P, m) finite Brownian increments with variance ``h``.

    Returns (P, d) in ``x``'s dtype. A bad argument is a ValueError/TypeError naming it;
    `simulate_euler` checks its inputs once and iterates the unchecked `_step`.
    """
    t = validation.scalar("t", t)
    h = validation.scalar("h", h, minimum=0.0)
    validation.real_array("x", x, ndim=2)  # numeric, real, finite
    validation.real_array("dW", dW, ndim=2)
    x, dW = np.asarray(x), np.asarray(dW)  # computed in the caller's dtype
    if x.shape[1] != system.dim:
        raise ValueError(f"x must have shape (P, {system.dim}), got {x.shape}")
    if dW.shape != (x.shape[0], system.noise_dim):
        raise ValueError(
            f"dW must have shape (P, m) = {(x.shape[0], system.noise_dim)}, got {dW.shape}"
        )
    return _step(system, t, x, h, dW)


def _step(system, t: float, x: np.ndarray, h: float, dW: np.ndarray) -> np.ndarray:
    """`euler_maruyama_step` without the checks (the per-step call of `simulate_euler`)."""
    return x + system.drift(t, x) * h + system.diffusion(t, x, dW)


def euler_affine_steps(sde: LinearSDE, step_sizes: np.ndarray, step_class: np.ndarray):
    """Per-class Euler maps ``(I + A h, u h, G)`` for the affine recursion."""
    h = np.asarray(step_sizes, dtype=float)[:, None, None]
    Phi = np.eye(sde.dim) + sde.A * h
    offset = sde.u * h[:, :, 0]
    B = np.broadcast_to(sde.G, (h.shape[0], *sde.G.shape))
    return AffineSteps(Phi, offset, B, step_class)


def simulate_euler(
    system: LinearSDE | RadialTangentialSDE | DriftDiffusion,
    x0: np.ndarray,
    noise,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Euler-Maruyama paths on the grid of `noise`.

    Parameters
    ----------
    system : a `LinearSDE`, a `RadialTangentialSDE` (its `mode` is honoured; the frozen frame
        is anchored at the grid's first time and each path's initial direction) or any object
        with ``drift``/``diffusion``.
    x0 : (P, d) initial states.
    noise : `BrownianPath` or `ArrayNoise` with increments (K, P, m) on grid ``t`` (K+1,).
    progress : called with (steps done, total steps) after each chunk.

    Returns
    -------
    (P, K+1, d) array in the noise's dtype.
    """
    grid = noise.grid
    x0 = validation.numeric_array("x0", x0).astype(noise.dtype)
    _check_batch(system, x0, noise)
    validation.euler_stability(system, grid.steps)
    if isinstance(system, LinearSDE):
        sizes, classes = grid.step_classes()
        maps = euler_affine_steps(system, sizes, classes)
        return run_affine_recursion(x0, maps, noise, progress=progress)
    if isinstance(system, RadialTangentialSDE) and system.mode == "frozen-frame":
        if np.any(np.linalg.norm(x0, axis=1) == 0):
            raise ValueError("x0 must be nonzero: the frozen frame starts at x0's direction")
        system = system.frozen_frame(grid.start, unit_rows(x0))
    out = np.empty((x0.shape[0], grid.n_steps + 1, x0.shape[1]), dtype=noise.dtype)
    out[:, 0] = x0
    x = x0
    t, h = grid.t, grid.steps
    for start, stop, dW in noise.chunks():
        for k in range(start, stop):
            x = _step(system, t[k], x, h[k], dW[k - start])
            out[:, k + 1] = x
        if progress is not None:
            progress(stop, noise.n_steps)
    return out


def _check_batch(system, x0: np.ndarray, noise, noise_dim: int | None = None) -> None:
    """Shapes of ``x0`` (P, d) and the noise (K, P, m) against the system."""
    noise_dim = system.noise_dim if noise_dim is None else noise_dim
    if x0.ndim != 2 or x0.shape[1] != system.dim:
        raise ValueError(f"x0 must have shape (P, {system.dim}), got {x0.shape}")
    if x0.shape[0] != noise.n_paths:
        raise ValueError(f"x0 has {x0.shape[0]} paths but the noise has {noise.n_paths}")
    if noise.dim != noise_dim:
        raise ValueError(f"the noise has dimension {noise.dim}; the system needs {noise_dim}")
    if not np.all(np.isfinite(x0)):
        raise ValueError("x0 has NaN or infinite entries")

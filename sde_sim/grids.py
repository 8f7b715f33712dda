"""Time grids: the points a path is computed at, with the exact step sizes the samplers use.

A uniform grid keeps its step ``dt`` exactly (``np.diff`` of ``k * dt`` differs from ``dt`` in
the last bits, and the samplers group steps by size); inserting observation times splits
steps, and only the split pieces get new sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sde_sim import validation


@dataclass(frozen=True, eq=False)
class TimeGrid:
    """Increasing time points ``t`` (T,) and the step sizes ``steps`` (T-1,) the samplers use."""

    t: np.ndarray
    steps: np.ndarray

    def __post_init__(self) -> None:
        t = validation.real_array("t", self.t, ndim=1)
        steps = validation.real_array("steps", self.steps, ndim=1)
        if t.size < 1:
            raise ValueError("a time grid needs at least one point")
        if steps.shape != (t.size - 1,):
            raise ValueError(f"steps must have shape ({t.size - 1},), got {steps.shape}")
        if np.any(steps <= 0):
            k = int(np.argmin(steps))
            raise ValueError(f"time points must be strictly increasing; step {k} is {steps[k]:g}")
        object.__setattr__(self, "t", validation.readonly(t))
        object.__setattr__(self, "steps", validation.readonly(steps))

    @classmethod
    def uniform(cls, dt: float, n_steps: int, t0: float = 0.0) -> TimeGrid:
        """``t_k = t0 + k dt`` for ``k = 0..n_steps``."""
        dt = validation.scalar("dt", dt, minimum=0.0, strict=True)
        n_steps = validation.count("n_steps", n_steps, minimum=1)
        t0 = validation.scalar("t0", t0)
        return cls(t0 + dt * np.arange(n_steps + 1), np.full(n_steps, dt))

    @classmethod
    def from_times(cls, t) -> TimeGrid:
        """A grid through arbitrary increasing times (steps are their differences)."""
        t = validation.real_array("t", t, ndim=1)
        return cls(t, np.diff(t))

    @property
    def n_steps(self) -> int:
        return self.steps.size

    @property
    def start(self) -> float:
        return float(self.t[0])

    @property
    def end(self) -> float:
        return float(self.t[-1])

    def coarsen(self, factor: int) -> TimeGrid:
        """Every `factor`-th point; the step sizes are sums of `factor` fine steps."""
        factor = validation.count("factor", factor)
        if self.n_steps % factor:
            raise ValueError(
                f"factor {factor} does not divide the {self.n_steps} steps of the grid"
            )
        steps = self.steps.reshape(-1, factor)
        uniform = np.all(steps == steps[0, 0])
        coarse = np.full(steps.shape[0], factor * steps[0, 0]) if uniform else steps.sum(axis=1)
        return TimeGrid(self.t[::factor], coarse)

    def insert(self, times: np.ndarray) -> tuple[TimeGrid, np.ndarray]:
        """Merge `times` into the grid.

        Returns the merged grid and the index of each entry of `times` in it. A time within
        ``1e-9`` of a step of an existing point is snapped onto that point, so no step becomes
        vanishingly small; every time must lie in ``[start, end]``.
        """
        times = validation.real_array("times", times, ndim=1)
        if times.size and (times.min() < self.start or times.max() > self.end):
            raise ValueError(
                f"times must lie in the grid's span [{self.start:g}, {self.end:g}]; "
                f"got [{times.min():g}, {times.max():g}]"
            )
        pos = np.clip(np.searchsorted(self.t, times), 0, self.t.size - 1)
        left = np.clip(pos - 1, 0, None)
        tol = 1e-9 * np.concatenate([self.steps, self.steps[-1:]])[left] if self.n_steps else 0
        near_right = np.abs(self.t[pos] - times) <= tol
        near_left = np.abs(self.t[left] - times) <= tol
        on_grid = near_right | near_left
        snapped = np.where(near_right, pos, left)
        new = np.unique(times[~on_grid])
        if new.size == 0:
            return self, snapped
        t = np.concatenate([self.t, new])
        order = np.argsort(t, kind="stable")
        t = t[order]
        is_old = order < self.t.size
        steps = np.diff(t)
        # A step keeps the original size when both of its ends are original grid points.
        old_index = np.cumsum(is_old) - 1
        both_old = is_old[:-1] & is_old[1:]
        steps[both_old] = self.steps[old_index[:-1][both_old]]
        merged = TimeGrid(t, steps)
        new_pos = np.empty(self.t.size + new.size, dtype=np.int64)
        new_pos[order] = np.arange(t.size)
        index = np.empty(times.size, dtype=np.int64)
        index[on_grid] = new_pos[snapped[on_grid]]
        index[~on_grid] = new_pos[self.t.size + np.searchsorted(new, times[~on_grid])]
        return merged, index

    def step_classes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(sizes, class_of_step)``: distinct step sizes and each step's index into them."""
        return np.unique(self.steps, return_inverse=True)

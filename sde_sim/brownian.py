"""Brownian increments from an explicit seed, fixed on a fine grid and readable at any coarsening.

The path is split into blocks of fine steps; block ``b`` is drawn from its own generator
``PCG64(SeedSequence(seed).spawn_key + (b,))``. So any stretch of the path can be regenerated
without the ones before it, reads give the same numbers in any order or chunking, blocks are
drawn in parallel threads (numpy releases the GIL while filling), and a coarse step's increment
is the exact sum of the fine increments it covers: several step sizes share one path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from sde_sim import validation
from sde_sim.grids import TimeGrid

# About this many float draws per block: large enough that a block costs far more than its
# generator set-up, small enough that a few blocks in flight stay inside the cache hierarchy.
BLOCK_ELEMENTS = 1 << 20
_PREFETCH = 2

_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)))
    return _pool


def seed_sequence(seed) -> np.random.SeedSequence:
    """A SeedSequence from an int, a SeedSequence or a Generator (which is advanced once)."""
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, np.random.Generator):
        return np.random.SeedSequence(int(seed.integers(2**63)))
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0:
        return np.random.SeedSequence(int(seed))
    raise TypeError(f"seed must be a non-negative int, SeedSequence or Generator; got {seed!r}")


class BrownianPath:
    """Increments ``dW_k = W(t_{k+1}) - W(t_k)`` of ``n_paths`` independent ``dim``-D Wiener paths.

    Parameters
    ----------
    seed : int, SeedSequence or Generator; the same seed and sizes give the same bits.
    grid : the fine grid the path is fixed on.
    n_paths, dim : batch size P and Wiener dimension m.
    dtype : float64 or float32 (the two give different streams).

    Reads return arrays of shape (steps, P, m).
    """

    def __init__(self, seed, grid: TimeGrid, n_paths: int, dim: int, *, dtype=np.float64):
        self.grid = grid
        self.n_paths = validation.count("n_paths", n_paths)
        self.dim = validation.count("dim", dim, minimum=0)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float64, np.float32):
            raise ValueError(f"dtype must be float64 or float32, got {self.dtype}")
        self._seed = seed_sequence(seed)
        self.block_steps = max(1, BLOCK_ELEMENTS // max(1, self.n_paths * self.dim))
        self._scale = np.sqrt(grid.steps).astype(self.dtype)
        self._blocks: dict[int, Future] = {}
        self._factor = 1
        self._fine = self

    @property
    def n_steps(self) -> int:
        return self.grid.n_steps

    def coarsen(self, factor: int) -> BrownianPath:
        """The same path on every `factor`-th grid point: each increment sums `factor` fine ones."""
        coarse = object.__new__(BrownianPath)
        coarse.__dict__.update(self.__dict__)
        coarse.grid = self.grid.coarsen(factor)
        coarse._factor = self._factor * factor
        coarse._fine = self._fine
        return coarse

    # -- fine blocks ---------------------------------------------------------------------------
    def _draw_block(self, b: int) -> np.ndarray:
        seq = np.random.SeedSequence(self._seed.entropy, spawn_key=(*self._seed.spawn_key, b))
        start = b * self.block_steps
        stop = min(start + self.block_steps, self.grid.n_steps)
        rng = np.random.Generator(np.random.PCG64(seq))
        draws = rng.standard_normal((stop - start, self.n_paths, self.dim), dtype=self.dtype)
        draws *= self._scale[start:stop, None, None]
        return draws

    def _block(self, b: int) -> np.ndarray:
        n_blocks = -(-self.grid.n_steps // self.block_steps)
        for ahead in range(b, min(b + 1 + _PREFETCH, n_blocks)):
            if ahead not in self._blocks:
                self._blocks[ahead] = _executor().submit(self._draw_block, ahead)
        for old in [k for k in self._blocks if k < b]:
            del self._blocks[old]
        return self._blocks[b].result()

    def _fine_increments(self, start: int, stop: int) -> np.ndarray:
        first, last = start // self.block_steps, (stop - 1) // self.block_steps
        parts = []
        for b in range(first, last + 1):
            block = self._block(b)
            lo = max(start - b * self.block_steps, 0)
            hi = min(stop - b * self.block_steps, block.shape[0])
            parts.append(block[lo:hi])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    # -- public reads --------------------------------------------------------------------------
    def increments(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Increments of steps ``start..stop-1`` on this path's grid, shape (stop-start, P, m)."""
        stop = self.n_steps if stop is None else stop
        if not 0 <= start <= stop <= self.n_steps:
            raise ValueError(f"step range [{start}, {stop}) is outside [0, {self.n_steps}]")
        if start == stop:
            return np.zeros((0, self.n_paths, self.dim), dtype=self.dtype)
        k = self._factor
        fine = self._fine._fine_increments(start * k, stop * k)
        if k == 1:
            return fine
        return fine.reshape(stop - start, k, self.n_paths, self.dim).sum(axis=1)

    def chunks(self, max_steps: int | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield ``(start, stop, increments)`` over the whole path, in order."""
        size = max_steps or max(1, self._fine.block_steps // self._factor)
        for start in range(0, self.n_steps, size):
            stop = min(start + size, self.n_steps)
            yield start, stop, self.increments(start, stop)


class ArrayNoise:
    """Explicit increments (steps, P, m) on a grid, read like a `BrownianPath`."""

    def __init__(self, increments: np.ndarray, grid: TimeGrid):
        increments = np.asarray(increments)
        if increments.ndim != 3 or increments.shape[0] != grid.n_steps:
            raise ValueError(
                f"noise must have shape ({grid.n_steps}, P, m), got {increments.shape}"
            )
        if not np.all(np.isfinite(increments)):
            raise ValueError("noise has NaN or infinite entries")
        self.grid, self._dW = grid, increments
        self.n_paths, self.dim = increments.shape[1:]
        self.dtype = increments.dtype

    @property
    def n_steps(self) -> int:
        return self.grid.n_steps

    def increments(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        return self._dW[start:stop]

    def chunks(self, max_steps: int | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
        size = max_steps or 256
        for start in range(0, self.n_steps, size):
            stop = min(start + size, self.n_steps)
            yield start, stop, self._dW[start:stop]

"""The batched affine recursion both linear samplers reduce to.

``x_{k+1} = Phi_c x_k + offset_c + B_c dW_k`` where ``c`` is the class of step ``k`` (steps of
equal size share their matrices). Euler-Maruyama has ``Phi = I + A h``, ``offset = u h``,
``B = G``; the exact sampler has ``Phi = e^{A h}``, ``offset = int_0^h e^{As} ds u`` and
``B = chol(Q_d) / sqrt(h)``.

The noise term of a whole chunk of steps is one matrix product; the sequential part is one
product and one add per step. Chunks are computed time-major (steps, P, d), in cache, and
copied once into the path-major output (P, T, d).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np


class AffineSteps(NamedTuple):
    """Per-class step maps and the class of each step.

    ``Phi`` (C, d, d), ``offset`` (C, d), ``B`` (C, d, m), ``step_class`` (K,).
    """

    Phi: np.ndarray
    offset: np.ndarray
    B: np.ndarray
    step_class: np.ndarray


def run_affine_recursion(
    x0: np.ndarray,
    maps: AffineSteps,
    noise,
    *,
    out: np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Iterate the recursion from ``x0`` (P, d) over every increment of `noise`.

    Parameters
    ----------
    x0 : (P, d) initial states.
    maps : the per-class matrices and the class of every step.
    noise : a `BrownianPath` or `ArrayNoise` with increments (K, P, m).
    out : optional (P, K+1, d) array to write into.
    progress : called with (steps done, total steps) after each chunk.

    Returns
    -------
    (P, K+1, d) path; ``out[:, 0] = x0``.
    """
    dtype = noise.dtype
    n_paths, d = x0.shape
    n_steps = maps.step_class.size
    if out is None:
        out = np.empty((n_paths, n_steps + 1, d), dtype=dtype)
    PhiT = np.ascontiguousarray(np.swapaxes(maps.Phi, 1, 2), dtype=dtype)
    BT = np.ascontiguousarray(np.swapaxes(maps.B, 1, 2), dtype=dtype)
    offset = maps.offset.astype(dtype)
    x = np.array(x0, dtype=dtype)
    out[:, 0] = x
    for start, stop, dW in noise.chunks():
        classes = maps.step_class[start:stop]
        if np.all(classes == classes[0]):
            c = classes[0]
            forcing = dW @ BT[c]
            forcing += offset[c]
            step_maps = None
        else:
            forcing = np.einsum("kpm,kmd->kpd", dW, BT[classes]) + offset[classes][:, None, :]
            step_maps = PhiT[classes]
        buf = np.empty((stop - start, n_paths, d), dtype=dtype)
        single = PhiT[classes[0]]
        for j in range(stop - start):
            np.matmul(x, single if step_maps is None else step_maps[j], out=buf[j])
            buf[j] += forcing[j]
            x = buf[j]
        out[:, start + 1 : stop + 1] = buf.transpose(1, 0, 2)
        if progress is not None:
            progress(stop, noise.n_steps)
    return out

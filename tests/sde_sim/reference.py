"""Test-side references: exact moments of the Euler recursion, and the whitened moment statistic.

Written independently of the simulator (plain loops), so the samplers are checked against
something they do not share code with. The statistic lives in `verify.tools`, which the
verification registry uses too.
"""

from __future__ import annotations

import numpy as np

from verify.tools import whitened_scores  # noqa: F401  (re-exported for the tests)

# Statistical assertions use this many standard deviations: ~6e-7 false-alarm rate per score.
SIGMA = 5.0


def euler_moments(A, G, u, h: float, n: int):
    """Law of ``n`` Euler steps ``x <- x + (A x + u) h + G dW``: ``x_n = M x_0 + c + N(0, S)``.

    Returns ``(M, c, S)`` with ``M = (I + A h)^n``, ``c = sum_i (I + A h)^i u h`` and
    ``S = sum_i (I + A h)^i G G^T h ((I + A h)^i)^T``.
    """
    d = A.shape[0]
    step = np.eye(d) + A * h
    M, c, S = np.eye(d), np.zeros(d), np.zeros((d, d))
    for _ in range(n):
        M = step @ M
        c = step @ c + u * h
        S = step @ S @ step.T + G @ G.T * h
    return M, c, S


def slope_with_error(h: np.ndarray, errors: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of log(error) on log(h), and its standard error over path batches.

    `errors` has shape (batches, levels): each row is the mean error over one batch of paths.
    The slope of the pooled means is returned with ``std(batch slopes) / sqrt(batches)``.
    """
    x = np.log(h)

    def fit(e):
        return np.polyfit(x, np.log(e), 1)[0]

    batch = np.array([fit(row) for row in errors])
    return fit(errors.mean(axis=0)), batch.std(ddof=1) / np.sqrt(len(batch))

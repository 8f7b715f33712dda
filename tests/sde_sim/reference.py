"""Test-side references: exact moments of the Euler recursion and a whitened moment statistic.

Written independently of the simulator (plain loops), so the samplers are checked against
something they do not share code with.
"""

from __future__ import annotations

import numpy as np

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


def whitened_scores(residuals: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """z-scores of the first two moments of `residuals` (N, d) against ``N(0, cov)``.

    With ``w = L^-1 r`` (``L L^T = cov``), under the hypothesis ``w ~ N(0, I)`` exactly, so
    ``sqrt(N) mean(w_i)`` is standard normal, ``(mean(w_i^2) - 1) / sqrt(2/N)`` and
    ``mean(w_i w_j) / sqrt(1/N)`` (i != j) are asymptotically standard normal. Returns all
    ``d + d(d+1)/2`` scores.
    """
    n, d = residuals.shape
    w = np.linalg.solve(np.linalg.cholesky(cov), residuals.T).T
    scores = [np.sqrt(n) * w.mean(axis=0)]
    second = w.T @ w / n
    iu = np.triu_indices(d)
    diag = iu[0] == iu[1]
    centred = second[iu] - diag
    scores.append(centred / np.where(diag, np.sqrt(2.0 / n), np.sqrt(1.0 / n)))
    return np.concatenate(scores)


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

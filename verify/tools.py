"""Helpers for the checks: symbolic zero tests, error measures, Monte Carlo scores, samplers."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import sympy as sp


def _simplifications(expr):
    yield expr
    yield sp.expand(expr)
    yield sp.cancel(sp.expand(expr))
    yield sp.simplify(expr)
    yield sp.simplify(sp.expand(expr.rewrite(sp.exp)))


def _is_zero(expr) -> bool:
    return any(form == 0 for form in _simplifications(expr))


def _sample_value(symbol: sp.Symbol, rng: np.random.Generator):
    if symbol.is_positive or symbol.is_nonnegative:
        return sp.Float(rng.uniform(0.2, 2.0))
    if symbol.is_real:
        return sp.Float(rng.uniform(-2.0, 2.0))
    return sp.Float(rng.uniform(-2.0, 2.0)) + sp.I * sp.Float(rng.uniform(-2.0, 2.0))


def symbolic_residual(expr, *, samples: int = 6, seed: int = 0) -> float:
    """0.0 if SymPy reduces `expr` (scalar or Matrix) to zero; else max |expr| at sample points.

    The sample points respect the symbols' assumptions (positive, real, complex). A nonzero
    return value is what a failing symbolic check reports: how far from zero the claimed
    identity is.
    """
    entries = list(expr) if isinstance(expr, sp.MatrixBase) else [expr]
    if all(_is_zero(e) for e in entries):
        return 0.0
    rng = np.random.default_rng(seed)
    symbols = sorted(set().union(*(sp.sympify(e).free_symbols for e in entries)), key=str)
    worst = 0.0
    for _ in range(samples):
        values = {s: _sample_value(s, rng) for s in symbols}
        for e in entries:
            worst = max(worst, float(abs(sp.N(sp.sympify(e).subs(values), 30))))
    # A form SymPy could not simplify but that vanishes numerically still is not a proof: report
    # at least a tiny positive residual so the check fails with tolerance 0.
    return max(worst, np.finfo(float).tiny)


def all_residuals_zero(exprs: Iterable) -> float:
    """The largest `symbolic_residual` of several expressions (0.0 when all are proved)."""
    return max(symbolic_residual(e) for e in exprs)


def relative_error(value, reference) -> float:
    """``max |value - reference| / max |reference|`` (absolute when the reference is zero)."""
    value, reference = np.asarray(value), np.asarray(reference)
    scale = float(np.max(np.abs(reference), initial=0.0))
    gap = float(np.max(np.abs(value - reference), initial=0.0))
    return gap / scale if scale > 0 else gap


def whitened_scores(residuals: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """z-scores of the first two moments of `residuals` (N, d) against ``N(0, cov)``.

    With ``w = L^-1 r`` (``L L^T = cov``), under the hypothesis ``w ~ N(0, I)`` exactly, so
    ``sqrt(N) mean(w_i)`` is standard normal, and ``(mean(w_i^2) - 1) / sqrt(2/N)`` and
    ``mean(w_i w_j) / sqrt(1/N)`` (i != j) are asymptotically standard normal. Returns all
    ``d + d(d+1)/2`` scores.
    """
    residuals = np.asarray(residuals, dtype=float)
    n, d = residuals.shape
    w = np.linalg.solve(np.linalg.cholesky(cov), residuals.T).T
    second = w.T @ w / n
    iu = np.triu_indices(d)
    diag = iu[0] == iu[1]
    centred = second[iu] - diag
    return np.concatenate(
        [np.sqrt(n) * w.mean(axis=0), centred / np.where(diag, np.sqrt(2.0 / n), np.sqrt(1.0 / n))]
    )


def random_eigensystem(rng: np.random.Generator, d: int, *, decay=(0.05, 1.0), freq=(0.2, 2.0)):
    """Eigenvalues (d,) and a complex basis S (d, d) giving a real, stable ``A = S L S^-1``.

    Complex eigenvalues ``-a +- i w`` come in conjugate pairs with conjugate columns of S; an
    odd d adds one real eigenvalue with a real column. S is random and well conditioned.
    """
    lam, cols = [], []
    for _ in range(d // 2):
        a, w = rng.uniform(*decay), rng.uniform(*freq)
        v = rng.normal(size=d) + 1j * rng.normal(size=d)
        lam += [-a + 1j * w, -a - 1j * w]
        cols += [v, v.conj()]
    if d % 2:
        lam.append(-rng.uniform(*decay) + 0j)
        cols.append(rng.normal(size=d) + 0j)
    S = np.stack(cols, axis=1)
    S /= np.linalg.norm(S, axis=0)
    return np.array(lam), S


def random_spd(rng: np.random.Generator, d: int, *, floor: float = 0.05) -> np.ndarray:
    """A random symmetric positive definite (d, d) matrix with eigenvalues >= `floor`."""
    L = rng.normal(size=(d, d))
    return L @ L.T / d + floor * np.eye(d)

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


# Random eigenbases are redrawn until cond(S) <= 30: numeric tolerances are derived with that
# bound (without it, about one draw in five at d = 4..5 has cond(S) ~ 1e2..1e4, and the float64
# references themselves lose up to 1e-8).
MAX_BASIS_COND = 30.0


def random_eigensystem(
    rng: np.random.Generator,
    d: int,
    *,
    decay=(0.05, 1.0),
    freq=(0.2, 2.0),
    max_cond: float = MAX_BASIS_COND,
):
    """Eigenvalues (d,) and a complex basis S (d, d) giving a real ``A = S L S^-1``.

    Complex eigenvalues ``-a +- i w`` (``a`` uniform in `decay`, ``w`` in `freq`) come in
    conjugate pairs with conjugate columns of S; an odd d adds one real eigenvalue with a real
    column. S has unit columns and is redrawn until ``cond(S) <= max_cond``.
    """
    while True:
        lam, S = _eigensystem_draw(rng, d, decay, freq)
        if np.linalg.cond(S) <= max_cond:
            return lam, S


def _eigensystem_draw(rng, d, decay, freq):
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


# A printed form is shown wrong only by a residual visibly above zero: expressions are evaluated
# at 30 digits, so a true identity samples below ~1e-25.
_VISIBLY_NONZERO = 1e-20


def sampled_residual(expr, *, samples: int = 6, seed_: int = 0) -> float:
    """max |expr| at sample points that respect the symbols' assumptions (no simplification).

    For printed forms expected to fail: `symbolic_residual` first tries to simplify, which is
    slow on a nonzero expression (tens of seconds for the Riccati tanh form) and ends at the
    same sampled value.
    Returns 0.0 when the sampled residual is not visibly nonzero, so a form that is in fact an
    identity makes an ``expect="fails"`` check fail.
    """
    import mpmath

    rng = np.random.default_rng(seed_)
    symbols = sorted(expr.free_symbols, key=str)
    f = sp.lambdify(symbols, expr, "mpmath")
    worst = 0.0
    with mpmath.workdps(30):
        for _ in range(samples):
            values = []
            for s in symbols:
                if s.is_positive:
                    values.append(mpmath.mpf(rng.uniform(0.2, 2.0)))
                elif s.is_real:
                    values.append(mpmath.mpf(rng.uniform(-2.0, 2.0)))
                else:
                    values.append(mpmath.mpc(rng.uniform(-2.0, 2.0), rng.uniform(-2.0, 2.0)))
            worst = max(worst, float(abs(f(*values))))
    return worst if worst > _VISIBLY_NONZERO else 0.0


def rational_residual(expr, *, samples: int = 6, seed_: int = 0) -> float:
    """`symbolic_residual` for a rational function, without its slow `simplify` attempts.

    ``cancel`` is a canonical form of rational functions (expanded coprime numerator and
    denominator), so the function is identically zero iff it cancels to 0: then 0.0 is a proof.
    Otherwise, as `symbolic_residual` does, the largest |value| at sample points of the
    (positive) symbols in [0.2, 2].
    """
    reduced = sp.cancel(sp.together(expr))
    if reduced == 0:
        return 0.0
    rng = np.random.default_rng(seed_)
    symbols = sorted(reduced.free_symbols, key=str)
    worst = 0.0
    for _ in range(samples):
        values = {s: sp.Float(rng.uniform(0.2, 2.0)) for s in symbols}
        worst = max(worst, float(abs(sp.N(reduced.subs(values), 30))))
    return max(worst, np.finfo(float).tiny)


def trig_residual(expr) -> float:
    """`symbolic_residual` after expanding trig functions of sums and clearing denominators.

    ``sin((a + b) t)`` is expanded into products of ``sin(a t)``, ``cos(b t)`` (SymPy's
    `simplify` finds these identities only slowly); the numerator of the result is then a
    polynomial in those functions, zero exactly when the identity holds.
    """
    for pre in (sp.expand, lambda e: e):  # expanding the arguments first is usually faster
        numerator, _ = sp.fraction(sp.together(sp.expand(sp.expand_trig(pre(expr)))))
        if sp.expand(numerator) == 0:
            return 0.0
    return symbolic_residual(expr)


def matrix_identity_residual(expr, symbols, *, seed_: int = 0) -> float:
    """0.0 if ``expand(expr)`` is the zero matrix (a proof), else max |expr| at random matrices.

    `expr` is built from `sympy.MatrixSymbol`s, whose products SymPy simplifies without
    entries (``S^-1 S = I``); on failure each symbol gets a random complex matrix.
    """
    expanded = sp.expand(expr)
    if expanded == 0 or isinstance(expanded, sp.ZeroMatrix):
        return symbolic_residual(sp.zeros(*expr.shape))
    rng = np.random.default_rng(seed_)
    values = {
        m: sp.Matrix(rng.normal(size=m.shape) + 1j * rng.normal(size=m.shape)) for m in symbols
    }
    value = np.array(sp.N(expr.subs(values).doit()), dtype=complex)
    return max(float(np.abs(value).max()), np.finfo(float).tiny)


def lag_grid(target: float, dts) -> tuple[np.ndarray, int, np.ndarray]:
    """Times containing 0, the target and target + dts; the target's index and the lags' ones."""
    times = np.unique(np.round(np.concatenate([[0.0, target], target + np.asarray(dts)]), 12))
    index = {t: n for n, t in enumerate(times)}
    return times, index[target], np.array([index[round(target + dt, 12)] for dt in dts])

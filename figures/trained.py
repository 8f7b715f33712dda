"""Trained layers shared by the figures (`verify.mle_convergence.trained_case`: each case is
trained once per process, so ``python -m figures`` makes several figures from the same run)."""

from __future__ import annotations

from verify.mle_convergence import ConvergenceReport, trained_case


def report(case: str, *, quick: bool, seed: int = 0) -> ConvergenceReport:
    """The trained `verify.mle_convergence.CASES` entry ``case`` and its scores."""
    return trained_case(case, quick=quick, seed=seed)

"""Trained layers shared by the figures (`verify.mle_convergence.trained_case`: each case is
trained once per process, so ``python -m figures`` makes several figures from the same run; on a
Dask cluster the runs are tasks of their own, `figures.distributed`)."""

from __future__ import annotations

from verify.mle_convergence import CASES, ConvergenceReport, trained_case
from verify.training import TrainConfig


def report(case: str, *, quick: bool, seed: int = 0) -> ConvergenceReport:
    """The trained `verify.mle_convergence.CASES` entry ``case`` and its scores."""
    return trained_case(case, quick=quick, seed=seed)


def case_configs(cases, *, quick: bool, seed: int = 0) -> tuple[TrainConfig, ...]:
    """The training runs of `report` for ``cases`` (a figure's ``trainings``)."""
    return tuple(CASES[case].config(quick=quick, seed=seed) for case in cases)

"""Figure tests train tiny versions of the `verify.mle_convergence` cases (6 steps on 8 paths):
the figures' plumbing is tested here, convergence in ``tests/verify`` and the ``slow`` tests.

`REAL_REPORT` is the unpatched `figures.trained.report` for the slow tests that want the real run.
"""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest

from figures import trained
from verify.mle_convergence import CASES, prediction_ratio

REAL_REPORT = trained.report


def tiny_report(case: str, *, quick: bool, seed: int = 0):
    """``CASES[case]`` shrunk to 6 optimizer steps on 8 training and 4 held-out paths (the tiny
    run stands in for both lengths)."""
    return _tiny(case, int(seed))


@cache
def _tiny(case: str, seed: int):
    config = dataclasses.replace(
        CASES[case].config(quick=True, seed=seed),
        steps=6,
        eval_every=2,
        n_paths=8,
        holdout_paths=4,
        batch_size=4,
    )
    return prediction_ratio(config)


@pytest.fixture(scope="session", autouse=True)
def tiny_training():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(trained, "report", tiny_report)
        yield

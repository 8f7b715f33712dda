"""Fuzz-suite fixtures: the `fuzz` runner (a CI and a `slow` variant of every fuzz test) and the
session's input counts (printed at the end; JSON in ``$FUZZ_COUNTS`` when set)."""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings

from tests.fuzz import contract


class Fuzz:
    """Runs a hypothesis strategy through a check with the variant's number of inputs.

    The CI variant runs under the ``fuzz`` profile, the `slow` one under ``fuzz-slow``; both are
    derandomized (a fixed seed per target), so counts and failures reproduce.
    """

    def __init__(self, mode: str):
        self.mode = mode

    def run(self, name: str, strategy, body, *, ci: int, slow: int) -> None:
        profile = settings.get_profile("fuzz" if self.mode == "ci" else "fuzz-slow")
        count = ci if self.mode == "ci" else slow

        def case(data):
            body(data)

        key = re.sub(r"\W", "_", f"fuzz_{name}")
        case.__name__ = case.__qualname__ = key  # the derandomized seed's key
        settings(profile, max_examples=count)(given(strategy)(case))()


@pytest.fixture(params=["ci", pytest.param("slow", marks=pytest.mark.slow)])
def fuzz(request) -> Fuzz:
    return Fuzz(request.param)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = contract.summary_lines()
    if not lines:
        return
    terminalreporter.section("fuzz inputs per target")
    for line in lines:
        terminalreporter.write_line(line)
    path = os.environ.get("FUZZ_COUNTS")
    if path:
        with open(path, "w") as fh:
            json.dump({t: dict(c) for t, c in sorted(contract.RECORD.items())}, fh, indent=1)

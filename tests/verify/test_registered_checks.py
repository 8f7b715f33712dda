"""Every registered check passes in quick mode (what `python -m verify --quick` runs)."""

import pytest

from verify.registry import select

CHECKS = select()


@pytest.mark.parametrize("check", CHECKS, ids=[c.id for c in CHECKS])
def test_check_passes_in_quick_mode(check):
    result = check.run(quick=True)
    assert result.error is None, result.error
    assert result.passed, f"{check.id}: residual {result.residual:.3g} ({result.detail})"

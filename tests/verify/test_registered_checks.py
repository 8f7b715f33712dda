"""Every registered check passes in quick mode (what `python -m verify --quick` runs)."""

import pytest

from verify.registry import select

CHECKS = select()


@pytest.mark.parametrize("check", CHECKS, ids=[c.id for c in CHECKS])
def test_check_passes_in_quick_mode(check):
    result = check.run(quick=True)
    assert result.error is None, result.error
    assert result.passed, f"{check.id}: residual {result.residual:.3g} ({result.detail})"


def test_every_check_is_well_formed():
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids))
    for c in CHECKS:
        assert len(c.id) <= 46, f"{c.id}: ids longer than 46 characters break the table"
        assert c.id.split(".")[0] == c.fn.__module__.rsplit(".", 1)[-1], c.id
        assert c.source.split()[0].endswith(".txt"), f"{c.id}: source must name the seed file"

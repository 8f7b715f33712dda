"""Training curves against the Kalman optimum and the learned-dynamics table.

The fast tests read a tiny run of the afa-2d-b case (`tests.figures.conftest.tiny_report`, 6
steps) through `figures.trained.report`; one slow test checks the real quick run.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from figures import cli, trained
from figures import training_curves as tc
from tests.figures.conftest import REAL_REPORT, tiny_report
from verify.mle_convergence import CASES, learned_dynamics


@pytest.fixture(scope="module")
def tiny():
    """(report, figure data): `compute` reads the tiny run through `figures.trained.report`."""
    return tiny_report("afa-2d-b", quick=True), tc.compute(tc.Config.quick())


def test_curve_is_heldout_mse_over_kalman(tiny):
    report, data = tiny
    (panel,) = data.panels
    assert panel.case == "afa-2d-b"
    kalman = report.references["kalman"]
    # The same numbers divided by the same float: equal to the round-off of one division.
    np.testing.assert_allclose(
        panel.ratios, [m["heldout_mse"] / kalman for m in report.metrics], rtol=1e-15
    )
    assert panel.steps.tolist() == [2, 4, 6]
    assert panel.final_ratio == report.ratios["kalman"]
    assert math.isclose(panel.ratios[-1], panel.final_ratio, rel_tol=1e-12)
    assert math.isclose(panel.untrained_ratio, report.untrained_mse / kalman)
    assert panel.references["kalman"] == 1.0
    assert set(panel.references) == {"kalman", "mle", "last"}
    for name in ("mle", "last"):
        assert math.isclose(panel.references[name], report.references[name] / kalman)
    assert panel.cpu_s == report.cpu_s > 0


def test_table_has_the_rows_of_learned_dynamics(tiny):
    report, data = tiny
    (panel,) = data.panels
    # Without the parameter fit (the dear part) the rows carry the same truth and learned values.
    expected = learned_dynamics(report, fit_mle=False)
    assert [r.name for r in panel.rows] == ["decay", "|omega|", "sigma2/eta2"]
    assert [(r.name, r.truth, r.learned, r.note) for r in panel.rows] == [
        (r.name, r.truth, r.learned, r.note) for r in expected
    ]
    cells = tc.table_cells(panel)
    assert len(cells) == len(panel.rows) and all(len(c) == len(tc.COLUMNS) for c in cells)
    for row, cell in zip(panel.rows, cells, strict=True):
        assert math.isfinite(row.mle) and row.mle_se > 0
        assert cell[0] == row.name
        assert cell[4].startswith("yes" if abs(row.z_score) <= tc.SE_LEVEL else "no")
    assert any("only the ratio is identified" in note for note in tc.notes(panel))


def test_plot_and_caption(tiny):
    _, data = tiny
    (panel,) = data.panels
    fig = tc.plot(data)
    assert len(fig.axes) == 3 * len(data.panels)
    curve_ax, param_ax, table_ax = fig.axes
    assert curve_ax.get_yscale() == "log"
    # One line per row with an se, at (learned - MLE) / se, plus the MLE line at 0.
    z = panel.z_trajectory()
    lines = param_ax.get_lines()
    assert len(lines) == 1 + len(z)
    for line, (name, values) in zip(lines[1:], z.items(), strict=True):
        assert line.get_label() == name
        np.testing.assert_allclose(line.get_ydata(), values)
        np.testing.assert_array_equal(line.get_xdata(), panel.trajectory_steps)
    # Every horizontal line sits at a reference ratio or the target, and each is drawn.
    levels = {round(float(line.get_ydata()[0]), 12) for line in curve_ax.get_lines()[1:]}
    assert levels == {round(v, 12) for v in (*panel.references.values(), tc.TARGET)}
    (table,) = table_ax.tables
    texts = {cell.get_text().get_text() for cell in table.get_celld().values()}
    assert {r.name for r in panel.rows} <= texts and set(tc.COLUMNS) <= texts
    text = tc.caption(data)
    assert f"final held-out MSE / Kalman {panel.final_ratio:.3f}" in text
    assert f"{panel.cpu_s:.1f} s CPU" in text
    assert all(f"{r.name}: truth {r.truth:.4g}" in text for r in panel.rows)


def test_trajectory_ends_at_the_learned_values(tiny):
    _, data = tiny
    (panel,) = data.panels
    assert panel.trajectory_steps.tolist() == [2, 4, 6]
    for row in panel.rows:
        assert panel.trajectory[row.name][-1] == row.learned


def test_config_rejects_unsupported_cases():
    with pytest.raises(ValueError, match="rt-sphere-3d-b"):
        tc.Config(cases=("rt-sphere-3d-b",))
    with pytest.raises(TypeError, match="cases must be"):
        tc.Config(cases="afa-2d-b")


def test_cli_writes_png_pdf_json(tiny, tmp_path, capsys, monkeypatch):
    _, data = tiny
    monkeypatch.setattr(tc, "compute", lambda cfg: data)
    code = cli.main([tc.NAME, "--quick", "--out", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 0, err
    folder = tmp_path / "figures"
    assert (folder / f"{tc.NAME}.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / f"{tc.NAME}.pdf").read_bytes()[:4] == b"%PDF"
    record = json.loads((folder / f"{tc.NAME}.json").read_text())
    assert record["caption"] == tc.caption(data) and record["title"] == tc.TITLE
    assert f'<img src="{tc.NAME}.png"' in (folder / "index.html").read_text()


@pytest.mark.slow
def test_quick_run_learns(monkeypatch):
    monkeypatch.setattr(trained, "report", REAL_REPORT)
    data = tc.compute(tc.Config.quick())
    (panel,) = data.panels
    report = trained.report("afa-2d-b", quick=True)
    assert panel.steps[-1] == report.steps == CASES["afa-2d-b"].quick
    # Training works: the layer ends far below its untrained ratio and below the
    # last-measurement predictor; and no predictor beats the Kalman filter in expectation
    # (64 held-out paths of ~100 errors give the MSE a ~2% relative standard error, so 0.95
    # is more than two standard errors below 1).
    assert 0.95 < panel.final_ratio < panel.references["last"] < panel.untrained_ratio
    assert np.all(np.diff(panel.ratios[:4]) < 0)

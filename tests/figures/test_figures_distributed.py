"""``python -m figures --workers N``: the figures computed on a real Dask ``LocalCluster`` are the
serial run's (same data, captions and index), written by the client."""

from __future__ import annotations

import json

import numpy as np
import pytest

import figures
from figures import cli

pytest.importorskip("distributed")

NAME = "covariance_vs_lag"  # the cheapest figure at quick size (a Monte Carlo, no training)


def test_workers_give_the_serial_figure(tmp_path, capsys):
    serial, _ = figures.computed(NAME, quick=True)
    code = cli.main([NAME, "--quick", "--workers", "2", "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    folder = tmp_path / "figures"
    record = json.loads((folder / f"{NAME}.json").read_text())
    module = figures.get(NAME)
    assert record["caption"] == module.caption(serial)
    assert record["command"].endswith("--workers 2 --out " + str(tmp_path))
    assert (folder / f"{NAME}.png").read_bytes()[:4] == b"\x89PNG"
    assert f'id="{NAME}"' in (folder / "index.html").read_text()


def test_cluster_data_equal_serial_data():
    from figures.distributed import computed_on_cluster

    serial, _ = figures.computed(NAME, quick=True)
    [(name, data, seconds)] = list(computed_on_cluster([NAME], quick=True, workers=1))
    assert name == NAME and seconds > 0
    for got, want in zip(data.panels, serial.panels, strict=True):
        np.testing.assert_array_equal(got.mc, want.mc)
        np.testing.assert_array_equal(got.curve, want.curve)


def test_workers_must_be_positive(capsys):
    code = cli.main([NAME, "--workers", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "--workers must be >= 1" in err


def test_figures_sharing_a_trained_case_form_one_group():
    ordered = figures.groups(figures.names())
    assert ordered[0] == ["fig1_trajectories", "training_curves"]  # afa-2d-b, trained once
    assert sorted(n for g in ordered for n in g) == sorted(figures.names())
    assert all(len(g) == 1 for g in ordered[1:])


def test_groups_are_connected_components(monkeypatch):
    from types import SimpleNamespace

    trained = {"a": ("x",), "b": ("y",), "c": ("x", "y"), "d": (), "e": ("z",)}
    modules = {n: SimpleNamespace(TRAINED_CASES=cases) for n, cases in trained.items()}
    monkeypatch.setattr(figures, "get", modules.__getitem__)
    # c links a and b through x and y; e trains alone; d trains nothing
    assert figures.groups(["d", "a", "b", "e", "c"]) == [["a", "b", "c"], ["e"], ["d"]]


def test_a_group_runs_its_figures_in_one_call():
    [(name, data, seconds)] = figures.computed_group([NAME], quick=True)
    serial, _ = figures.computed(NAME, quick=True)
    assert name == NAME and seconds > 0
    np.testing.assert_array_equal(data.panels[0].mc, serial.panels[0].mc)

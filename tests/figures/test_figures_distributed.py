"""``python -m figures --workers N``: the figures computed on a real Dask ``LocalCluster`` are the
serial run's (same data, captions and index), written by the client."""

from __future__ import annotations

import dataclasses
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
    [(name, data, seconds, files)] = list(computed_on_cluster([NAME], quick=True, workers=1))
    assert name == NAME and seconds > 0
    assert files["png"][:4] == b"\x89PNG" and files["pdf"][:4] == b"%PDF"
    for got, want in zip(data.panels, serial.panels, strict=True):
        np.testing.assert_array_equal(got.mc, want.mc)
        np.testing.assert_array_equal(got.curve, want.curve)


def test_workers_must_be_positive(capsys):
    code = cli.main([NAME, "--workers", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "--workers must be >= 1" in err


def test_a_run_shared_by_figures_is_one_training():
    from verify.mle_convergence import CASES, config_key

    fig1 = {config_key(c) for c in figures.trainings("fig1_trajectories", quick=False)}
    curves = {config_key(c) for c in figures.trainings("training_curves", quick=False)}
    shared = config_key(CASES["afa-2d-b"].config(quick=False))
    assert fig1 & curves == {shared}
    assert figures.trainings("covariance_vs_lag", quick=False) == ()  # trains nothing


def test_computed_with_adopts_the_reports_instead_of_training(monkeypatch):
    from figures import trained
    from tests.figures.conftest import REAL_REPORT, tiny_report
    from verify import mle_convergence

    [config] = figures.trainings("training_curves", quick=True)  # afa-2d-b, quick length
    report = dataclasses.replace(tiny_report("afa-2d-b", quick=True), config=config)
    monkeypatch.setattr(trained, "report", REAL_REPORT)  # the figure asks for the real run
    monkeypatch.setattr(mle_convergence, "_TRAINED", {})

    def no_training(config, **_):
        raise AssertionError("trained again")

    monkeypatch.setattr(mle_convergence, "prediction_ratio", no_training)
    with pytest.raises(AssertionError, match="trained again"):  # control: nothing adopted yet
        figures.computed("training_curves", quick=True)
    data, seconds, files = figures.computed_with("training_curves", True, [report])
    assert seconds > 0 and files["png"][:4] == b"\x89PNG"
    assert list(data.panels[0].steps) == [m["step"] for m in report.metrics]


# What the in-process cluster's tasks did: module-level, so that the tasks (pickled by reference)
# record here and not into copies.
STARTED: list = []
ADOPTED: list = []


def _case_of(config) -> str:
    from verify.mle_convergence import CASES, config_key

    [name] = [
        n for n, c in CASES.items() if config_key(c.config(quick=False)) == config_key(config)
    ]
    return name


def _fake_trained(config):
    from tests.figures.conftest import tiny_report

    STARTED.append(config)
    return dataclasses.replace(tiny_report(_case_of(config), quick=False), config=config)


def _recording_computed_with(name, quick, reports):
    ADOPTED.append((name, sorted(_case_of(r.config) for r in reports)))
    return (*figures.computed(name, quick), None)


def test_cluster_trains_each_run_once_longest_first(monkeypatch):
    """On an in-process cluster (so the patches reach the worker): fig1 (afa-2d a, b, c) and
    training_curves (five cases, afa-2d b among them) need seven runs at full size; each is
    trained once, the longest first, and each figure's task gets the reports of its runs."""
    from distributed import LocalCluster

    from figures import distributed
    from verify.mle_convergence import config_key

    monkeypatch.setattr(distributed, "trained", _fake_trained)
    monkeypatch.setattr(distributed, "computed_with", _recording_computed_with)
    STARTED.clear()
    ADOPTED.clear()
    names = ["fig1_trajectories", "training_curves"]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False) as cluster:
        address = cluster.scheduler_address
        done = list(distributed.computed_on_cluster(names, quick=False, scheduler=address))
    wanted = {config_key(c) for name in names for c in figures.trainings(name, quick=False)}
    assert len(wanted) == 7 and sorted(config_key(c) for c in STARTED) == sorted(wanted)
    costs = [distributed.training_cost(c) for c in STARTED]
    assert costs == sorted(costs, reverse=True) and costs[0] > costs[-1]
    fig1 = ["afa-2d-a", "afa-2d-b", "afa-2d-c"]
    curves = sorted(figures.get("training_curves").Config().cases)
    assert sorted(ADOPTED) == [("fig1_trajectories", fig1), ("training_curves", curves)]
    assert sorted(name for name, *_ in done) == names

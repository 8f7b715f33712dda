"""The figures package: compute() shapes, the Monte Carlo check, the CLI and the index page."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import figures
from figures import (
    cli,
    convergence_vs_data,
    covariance_vs_lag,
    fig1_trajectories,
    fig2_pulled_forward,
    fig3_attention_maps,
    kla_memorization,
    kla_runtime,
    kla_uncertainty,
    rfa_ensemble,
    rt_sphere_trajectories,
    trained,
)
from sde_sim import presets


@pytest.fixture(scope="module")
def cov_data():
    return covariance_vs_lag.compute(covariance_vs_lag.Config.quick())


@pytest.fixture(scope="module")
def fig1_data():
    return fig1_trajectories.compute(fig1_trajectories.Config.quick())


def test_registry_lists_both_figures():
    assert {"fig1_trajectories", "covariance_vs_lag"} <= set(figures.names())
    for name in figures.names():
        module = figures.get(name)
        assert name == module.NAME
        assert module.SOURCE and module.TITLE
    with pytest.raises(ValueError, match="known: fig1_trajectories"):
        figures.get("nope")


def test_every_figure_names_its_paper_and_checks():
    for name in figures.names():
        module = figures.get(name)
        assert module.SEED in figures.PAPERS, name
        ids = figures.checks_of(module)  # may be empty: a section with no registered check
        assert len(ids) == len(set(ids)) >= len(module.CHECKS), name


def test_checks_of_refuses_an_entry_that_matches_nothing(monkeypatch):
    module = figures.get("covariance_vs_lag")
    monkeypatch.setattr(module, "CHECKS", ("measurement.closed-form-vs-van-loan", "no.such-*"))
    with pytest.raises(ValueError, match="'no.such-\\*' matches no verify check"):
        figures.checks_of(module)


def test_index_groups_by_paper_and_links_the_checks():
    def record(name, seed, checks):
        return {
            "name": name,
            "title": name.upper(),
            "caption": "c",
            "source": "s",
            "seed": seed,
            "checks": checks,
            "command": "cmd",
            "files": [f"{name}.png", f"{name}.pdf"],
            "seconds": 1.0,
            "made": "now",
        }

    page = cli.index_html(
        [record("b", "002", []), record("a", "000", ["dle.mode-solution"]), record("c", "002", [])]
    )
    # Groups in paper order, whatever the order of the records; each figure once.
    assert page.index('id="seed-000"') < page.index('id="a"') < page.index('id="seed-002"')
    assert page.index('id="seed-002"') < page.index('id="b"') < page.index('id="c"')
    assert page.count("<h2") == 2 and page.count("<section") == 3
    assert '<a href="../verify.html#check-dle.mode-solution">' in page
    assert page.count("Checks of the same section") == 1


def test_covariance_vs_lag_shapes_and_finite(cov_data):
    assert len(cov_data.panels) == len(covariance_vs_lag.CASES)
    for p in cov_data.panels:
        L, q = p.mc.shape
        assert p.dt.shape == (L,) and L > 10
        assert p.mc_se.shape == p.closed_at_dt.shape == (L, q) == (L, len(p.labels))
        assert p.curve.shape == (p.curve_dt.size, q)
        assert q == (1 if p.preset == "rotation-3d" else 3)
        for arr in (p.dt, p.mc, p.mc_se, p.closed_at_dt, p.curve):
            assert np.all(np.isfinite(arr))
        assert np.all(p.mc_se > 0)
        assert np.any(p.dt < 0) and np.any(p.dt > 0) and np.any(p.dt == 0)


def test_monte_carlo_agrees_with_closed_form_within_5_sigma(cov_data):
    # Each point is a mean over independent paths (asymptotically normal); P(|z| > 5) per point
    # is ~6e-7, so over ~220 points a failure means the closed form or the estimator is wrong.
    assert cov_data.sigma_level == 5.0
    for p in cov_data.panels:
        z = np.abs(p.z_scores)
        assert z.max() < 5.0, (p.preset, p.variant, float(z.max()))


def test_monte_carlo_check_has_power(cov_data):
    # The check could fail: a closed form with the lag's sign flipped (the printed seed 000 3.6
    # form) is rejected by the same points and bars.
    p = next(p for p in cov_data.panels if p.preset == "rotation-3d")
    scenario = presets.get("rotation-3d").scenario()
    flipped = covariance_vs_lag._closed_form(scenario, -p.dt, isotropic=True)
    assert np.abs((p.mc - flipped) / p.mc_se).max() > 5.0


def test_closed_form_matches_numeric_reference(cov_data):
    from estimators.closed_forms import measurement

    p = cov_data.panels[1]
    scenario = presets.get(p.preset).scenario(p.variant)
    V = measurement.measurement_covariance(
        scenario.system.A, scenario.system.Q, np.eye(2), scenario.measurement.R, p.dt
    )
    ref = np.stack([V[:, 0, 0], V[:, 0, 1], V[:, 1, 1]], axis=-1)
    np.testing.assert_allclose(p.closed_at_dt, ref, rtol=1e-8, atol=1e-10)


def test_fig1_shapes_and_optimum(fig1_data):
    assert [p.variant for p in fig1_data.panels] == ["a", "b", "c"]
    for p in fig1_data.panels:
        T, M = p.t.size, p.t_obs.size
        assert p.x.shape == (T, 2) and p.z.shape == p.x_obs.shape == (M, 2)
        assert list(p.predictions) == [fig1_trajectories.TRAINED, fig1_trajectories.OPTIMUM]
        for pred in p.predictions.values():
            assert pred.shape == (M, 2)
            assert np.all(np.isnan(pred[0])) and np.all(np.isfinite(pred[1:]))
        assert np.all(np.isfinite(p.x)) and np.all(np.isfinite(p.z))
        # The optimal predictor beats predicting the last measurement (a random-walk guess).
        naive = np.mean(np.sum((p.z[:-1] - p.z[1:]) ** 2, -1))
        assert p.mse[fig1_trajectories.OPTIMUM] < naive


def test_fig1_trained_series_is_the_model_output_shifted_by_one(fig1_data):
    # row k predicts x_k from z_0..z_{k-1}: the model's output at row k - 1, on the harness's
    # clock (t in measurement intervals from the first measurement)
    for p in fig1_data.panels:
        model = trained.report(f"afa-2d-{p.variant}", quick=True).model
        t = (p.t_obs - p.t_obs[0]) / (p.t_obs[1] - p.t_obs[0])
        with torch.no_grad():
            out = model(torch.as_tensor(p.z[None], dtype=torch.float32), torch.as_tensor(t))
        np.testing.assert_allclose(
            p.predictions[fig1_trajectories.TRAINED][1:], out[0, :-1].double().numpy(), rtol=1e-6
        )


def test_fig1_accepts_another_series(fig1_data):
    extra = [p.z for p in fig1_data.panels]
    data = fig1_data.with_series("persistence", extra)
    assert all(
        list(p.predictions) == [fig1_trajectories.TRAINED, fig1_trajectories.OPTIMUM, "persistence"]
        for p in data.panels
    )
    fig = fig1_trajectories.plot(data)
    assert len(fig.axes) == 3
    with pytest.raises(ValueError, match="must be"):
        fig1_data.with_series("bad", [np.zeros((2, 2))] * 3)


def _run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small_cli(monkeypatch):
    """Make `--quick` tiny so the CLI tests are fast (the figures' content is tested above)."""
    monkeypatch.setattr(
        covariance_vs_lag.Config, "quick", classmethod(lambda cls: cls(n_paths=200, n_curve=21))
    )
    monkeypatch.setattr(
        fig1_trajectories.Config, "quick", classmethod(lambda cls: cls(n_steps=200))
    )
    monkeypatch.setattr(
        fig2_pulled_forward.Config,
        "quick",
        classmethod(lambda cls: cls(steps=4, stages=(1, 2, 4), n_paths=8, batch_size=8)),
    )
    monkeypatch.setattr(
        fig3_attention_maps.Config,
        "quick",
        classmethod(lambda cls: cls(steps=2, n_paths=8, batch_size=8)),
    )
    monkeypatch.setattr(
        convergence_vs_data.Config, "quick", classmethod(lambda cls: cls(sizes=(8, 16), steps=2))
    )
    monkeypatch.setattr(
        rt_sphere_trajectories.Config, "quick", classmethod(lambda cls: cls(n_paths=8))
    )
    monkeypatch.setattr(rfa_ensemble.Config, "quick", classmethod(lambda cls: cls(n_paths=8)))
    tiny_memo = kla_memorization.Config(
        n_keys=4, n_train=8, n_test=4, width=4, num_slots=2, steps=2
    )
    monkeypatch.setattr(kla_memorization.Config, "quick", classmethod(lambda cls: tiny_memo))
    monkeypatch.setattr(
        kla_uncertainty.Config, "quick", classmethod(lambda cls: cls(task=tiny_memo))
    )
    monkeypatch.setattr(
        kla_runtime.Config,
        "quick",
        classmethod(lambda cls: cls(lengths=(4, 8), slots=2, channels=2, repeats=1)),
    )


def test_cli_writes_refuses_and_forces(tmp_path, capsys, small_cli):
    code, out, err = _run(["--quick", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    folder = tmp_path / "figures"
    for name in figures.names():
        for ext in ("png", "pdf"):
            assert (folder / f"{name}.{ext}").stat().st_size > 1000
    assert (folder / "fig1_trajectories.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "covariance_vs_lag.pdf").read_bytes()[:4] == b"%PDF"
    assert not list(folder.glob(".*.tmp"))

    page = (folder / "index.html").read_text()
    for name in figures.names():
        record = json.loads((folder / f"{name}.json").read_text())
        assert record["command"] == f"python -m figures --quick --out {tmp_path}"
        assert f'<img src="{name}.png"' in page
        assert record["source"].split(" (")[0] in page
        assert record["command"] in page
        assert record["seed"] == figures.get(name).SEED and f'id="seed-{record["seed"]}"' in page
        assert record["checks"] == figures.checks_of(figures.get(name))
    assert page.count("<section") == len(figures.names())

    before = (folder / "fig1_trajectories.png").stat().st_mtime_ns
    code, out, err = _run(["fig1_trajectories", "--quick", "--out", str(tmp_path)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "exists" in err and "--force" in err
    assert (folder / "fig1_trajectories.png").stat().st_mtime_ns == before

    code, out, err = _run(
        ["fig1_trajectories", "--quick", "--force", "--out", str(tmp_path)], capsys
    )
    assert code == 0, err
    assert (folder / "fig1_trajectories.png").stat().st_mtime_ns != before
    # The index still lists both figures, each with the command that made it.
    page = (folder / "index.html").read_text()
    assert page.count("<section") == len(figures.names())
    assert "python -m figures fig1_trajectories --quick --force" in page


def test_cli_subset_adds_to_index(tmp_path, capsys, small_cli):
    code, _, err = _run(["covariance_vs_lag", "--quick", "--out", str(tmp_path)], capsys)
    assert code == 0, err
    page = (tmp_path / "figures" / "index.html").read_text()
    assert page.count("<section") == 1
    assert not (tmp_path / "figures" / "fig1_trajectories.png").exists()


def test_cli_failure_while_making_a_figure_is_status_1(tmp_path, capsys, monkeypatch):
    """A figure whose compute fails at run time: one line naming the error, status 1."""

    def broken(cfg):
        raise FloatingPointError("overflow in the propagated covariance")

    monkeypatch.setattr(covariance_vs_lag, "compute", broken)
    code, out, err = _run(["covariance_vs_lag", "--quick", "--out", str(tmp_path)], capsys)
    assert code == 1 and out == ""
    assert err == (
        "python -m figures: error: FloatingPointError: overflow in the propagated covariance\n"
    )
    assert not (tmp_path / "figures" / "covariance_vs_lag.png").exists()


def test_cli_rejects_unknown_names(tmp_path, capsys):
    code, out, err = _run(["fig9", "--out", str(tmp_path)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "fig9" in err and all(name in err for name in figures.names())
    assert not (tmp_path / "figures").exists()


def test_cli_bad_flag_is_one_line(capsys):
    code, _, err = _run(["--bogus"], capsys)
    assert code == 2 and err.count("\n") == 1


def test_cli_list(capsys):
    code, out, _ = _run(["--list"], capsys)
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == figures.names()

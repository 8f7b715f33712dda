"""``python -m verify``: table, JSON, selection, exit statuses."""

import json

import pytest

from verify import registry
from verify.cli import main


@pytest.fixture
def fake_checks(monkeypatch):
    """A registry of three cheap checks: one passing, one documented seed error, one failing."""
    fake: dict = {}
    monkeypatch.setattr(registry, "REGISTRY", fake)
    monkeypatch.setattr(registry, "select", _select_from(fake))
    monkeypatch.setattr("verify.cli.select", _select_from(fake))
    src = registry.seed(0, "A.3")
    registry.check("demo.ok", title="holds", source=src, kind="numeric", tolerance=1e-10)(
        lambda quick: 1e-12
    )
    registry.check(
        "demo.printed",
        title="printed form is wrong",
        source=src,
        kind="symbolic",
        tolerance=0.0,
        expect="fails",
    )(lambda quick: registry.Outcome(0.5, "off by 2"))
    registry.check("demo.bad", title="fails", source=src, kind="statistical", tolerance=5.0)(
        lambda quick: 7.0
    )
    return fake


def _select_from(fake):
    def select(pattern=None):
        import fnmatch

        if pattern is None:
            return list(fake.values())
        return [c for c in fake.values() if fnmatch.fnmatchcase(c.id, pattern) or pattern in c.id]

    return select


def test_table_json_and_exit_status(fake_checks, tmp_path, capsys):
    out = tmp_path / "v.json"
    table = tmp_path / "v.txt"
    code = main(["--json", str(out), "--table", str(table)])
    printed = capsys.readouterr().out
    assert code == 1  # demo.bad fails
    assert "PASS (printed form fails)" in printed and "FAILED: demo.bad" in printed
    data = json.loads(out.read_text())
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert statuses == {
        "demo.ok": "PASS",
        "demo.printed": "PASS (printed form fails)",
        "demo.bad": "FAIL",
    }
    assert data["passed"] is False and data["checks"][1]["detail"] == "off by 2"
    assert "source: 000_164c25b5097fc296.txt (AFA) A.3" in table.read_text()


def test_only_selects_and_passes(fake_checks, capsys):
    assert main(["--only", "demo.ok", "--quick"]) == 0
    assert main(["--only", "demo.[op]*"]) == 0


def test_only_without_match_is_a_usage_error(fake_checks, capsys):
    assert main(["--only", "nothing*"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matches no check" in err


def test_existing_outputs_need_force(fake_checks, tmp_path, capsys):
    out = tmp_path / "v.json"
    out.write_text("keep me")
    assert main(["--only", "demo.ok", "--json", str(out)]) == 2
    assert out.read_text() == "keep me"
    assert main(["--only", "demo.ok", "--json", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["passed"] is True


def test_list(fake_checks, capsys):
    assert main(["--list"]) == 0
    assert capsys.readouterr().out.count("demo.") == 3


def test_a_crashing_check_is_an_error_not_a_crash(fake_checks, capsys):
    def boom(quick):
        raise RuntimeError("kaput")

    registry.check("demo.crash", title="x", source="s", kind="numeric", tolerance=1.0)(boom)
    assert main(["--only", "demo.crash"]) == 1
    assert "ERROR" in capsys.readouterr().out


def test_registry_rejects_bad_registrations():
    with pytest.raises(ValueError, match="kind must be one of"):
        registry.check("x", title="", source="", kind="proof", tolerance=0)
    with pytest.raises(ValueError, match="symbolic check has tolerance 0"):
        registry.check("x", title="", source="", kind="symbolic", tolerance=1e-9)
    with pytest.raises(ValueError, match="seed must be one of"):
        registry.seed(7, "1.1")


def test_json_and_table_on_one_file_are_refused_before_any_write(fake_checks, tmp_path, capsys):
    """Both outputs on one path would write one and then fail on the other."""
    same = tmp_path / "out.txt"
    assert main(["--json", str(same), "--table", str(same)]) == 2
    assert "name the same file" in capsys.readouterr().err
    assert not same.exists()


def test_a_failed_write_after_the_checks_is_status_1(fake_checks, tmp_path, capsys, monkeypatch):
    """A failure at run time (here the disk refusing the JSON file after the checks ran) is one
    line and status 1 (the error contract, `sde_sim.plumbing.run_cli`), not a traceback."""

    def full_disk(path, write, *, overwrite=False):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("verify.cli.atomic_write", full_disk)
    assert main(["--only", "demo.ok", "--json", str(tmp_path / "v.json")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err and "Traceback" not in err


def test_train_failing_at_run_time_is_status_1(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr("verify.training.train", broken)
    assert main(["train", "--out", str(tmp_path / "run"), "--steps", "2"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "python -m verify train: error: RuntimeError: CUDA error: an illegal memory access "
        "was encountered\n"
    )

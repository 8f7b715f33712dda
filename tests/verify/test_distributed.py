"""`python -m verify --workers N` / `--scheduler ADDRESS` (issue 18, part 3): the checks run as
Dask tasks on a real cluster (worker processes, not a mock), with the serial run's table."""

import json
import sys

import pytest

from verify.cli import main

distributed = pytest.importorskip("distributed")

PATTERN = "rt_structure"  # six quick checks: symbolic, numeric and printed-form ones


def _run(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    status = main(["--quick", "--only", PATTERN, "--json", str(out), *extra])
    return status, json.loads(out.read_text())["checks"]


def _same(serial, parallel):
    assert [c["id"] for c in parallel] == [c["id"] for c in serial]  # the serial order
    for s, p in zip(serial, parallel, strict=True):
        assert p["status"] == s["status"], s["id"]
        assert p["residual"] == pytest.approx(s["residual"], rel=1e-9, abs=1e-300), s["id"]


def test_two_local_workers_give_the_serial_table(tmp_path, capsys):
    status, serial = _run(tmp_path, "serial")
    printed_serial = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:-1]]
    parallel_status, parallel = _run(tmp_path, "parallel", "--workers", "2")
    printed_parallel = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:-1]]
    assert status == parallel_status == 0
    _same(serial, parallel)
    assert printed_parallel == printed_serial  # rows printed in the same order


def test_a_scheduler_address(tmp_path):
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        status, parallel = _run(tmp_path, "remote", "--scheduler", cluster.scheduler_address)
    _, serial = _run(tmp_path, "serial")
    assert status == 0
    _same(serial, parallel)


def test_without_dask_one_line_says_how_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    status = main(["--quick", "--only", "kla.thm3", "--workers", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and "filtersuite[distributed]" in err[0], err


def test_workers_must_be_positive(capsys):
    assert main(["--only", "kla.thm3", "--workers", "0"]) == 2
    assert "--workers must be >= 1" in capsys.readouterr().err


def test_a_cluster_started_by_the_dask_commands(tmp_path, dask_commands_cluster):
    """`dask scheduler` and `dask worker` processes, as on a cluster; `--scheduler` reaches them
    (the processes: `tests/conftest.py`)."""
    status, parallel = _run(tmp_path, "commands", "--scheduler", dask_commands_cluster)
    _, serial = _run(tmp_path, "serial")
    assert status == 0
    _same(serial, parallel)


def test_results_carry_the_clients_checks():
    """A worker's Check is an unpickled copy; the HTML report reads each check function's source
    line, which a closure made at registration (the mle_convergence checks) loses in the copy
    ("could not get source code" ended `make reproduce`). The results carry the client's."""
    from verify.distributed import run_distributed
    from verify.registry import select
    from verify.report_html import source_line

    checks = select("well_specified.kla-ou")  # a closure; cheap
    assert len(checks) == 1
    results = run_distributed(checks, quick=True, workers=1)
    assert all(r.check is c for r, c in zip(results, checks, strict=True))
    assert all(source_line(r.check)[1] > 0 for r in results)

"""`sde_sim.distributed.cluster_client`: the local workers' environment.

Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` in every worker it spawns, which made a torch
training step 1.9x slower there than in a plain process (`cluster_client`'s docstring). The
suite's local cluster unsets it; the control is a ``LocalCluster`` on Dask's defaults, whose
workers do get it (if Dask ever drops the default, the control fails and this test with it
should go).
"""

from __future__ import annotations

import os

import pytest

from sde_sim.distributed import cluster_client

distributed = pytest.importorskip("distributed")

VARIABLE = "MALLOC_TRIM_THRESHOLD_"


@pytest.fixture
def unset(monkeypatch):
    """The variable unset here, and unset again afterwards: Dask's nanny also writes it into
    the environment of the process that starts the cluster (this one)."""
    monkeypatch.setenv(VARIABLE, "")  # records "absent" as the state to restore
    monkeypatch.delenv(VARIABLE)


def _worker_values(client) -> list:
    return list(client.run(lambda: os.environ.get(VARIABLE)).values())


def test_local_workers_run_without_the_trim_threshold(unset):
    with cluster_client(1, None) as client:
        assert _worker_values(client) == [None]
    assert VARIABLE not in os.environ


def test_control_dask_defaults_set_the_trim_threshold(unset):
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        assert _worker_values(client) == ["65536"]

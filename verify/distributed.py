"""Run independent checks on Dask workers: ``python -m verify --workers N`` or ``--scheduler ADDR``.

The checks of `verify.registry` share nothing (each builds its own problem from fixed seeds),
so they are submitted one task each to a Dask ``distributed`` cluster: a ``LocalCluster`` of
``N`` worker processes (one thread each) on this machine, or the scheduler at ``ADDR`` (started
with ``dask scheduler`` and ``dask worker ADDR`` on any machines that can import this package).
A worker runs a check by its id (`run_check`), so only ids and `Result`s travel. Results come
back in the order of the serial run, and a row is printed as soon as it and every row before it
are in, so the table, its order and its statuses are the serial run's; the times column is the
worker's time for each check.

Dask is an optional extra (``pip install 'filtersuite[distributed]'``): it is imported only when
``--workers`` or ``--scheduler`` is given, and a missing install is one line saying how to get
it (`DistributedUnavailable`). The cluster and that message are `sde_sim.distributed`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

# The cluster and the missing-extra message are the suite's shared ones (re-exported here for
# `verify.cli` and `figures.distributed`).
from sde_sim.distributed import INSTALL_HINT, DistributedUnavailable, cluster_client
from verify.registry import REGISTRY, Check, Result, select

__all__ = [
    "INSTALL_HINT",
    "DistributedUnavailable",
    "cluster_client",
    "run_check",
    "run_distributed",
]


def run_check(check_id: str, quick: bool) -> Result:
    """Run the registered check ``check_id`` (on a worker: the registry is imported there)."""
    select()  # importing verify.checks registers every check
    return REGISTRY[check_id].run(quick)


def run_distributed(
    checks: Sequence[Check],
    *,
    quick: bool,
    workers: int | None = None,
    scheduler: str | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """`verify.registry.run_all` on a Dask cluster: one task per check, results in order."""
    with cluster_client(workers, scheduler) as client:
        futures = [
            client.submit(run_check, c.id, quick, key=f"check-{c.id}", pure=False) for c in checks
        ]
        results = []
        for check, future in zip(checks, futures, strict=True):  # the serial run's order
            # the client's own Check, not the worker's unpickled copy: a check function made
            # at registration (a closure) loses its source file there, which the report links
            result = dataclasses.replace(future.result(), check=check)
            results.append(result)
            if on_result is not None:
                on_result(result)
        return results

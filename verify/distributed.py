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
it (`DistributedUnavailable`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from verify.registry import REGISTRY, Check, Result, select

INSTALL_HINT = "pip install 'filtersuite[distributed]' (or: make install)"


class DistributedUnavailable(RuntimeError):
    """``dask.distributed`` is not installed; the message says how to install it."""


def run_check(check_id: str, quick: bool) -> Result:
    """Run the registered check ``check_id`` (on a worker: the registry is imported there)."""
    select()  # importing verify.checks registers every check
    return REGISTRY[check_id].run(quick)


@contextlib.contextmanager
def cluster_client(workers: int | None, scheduler: str | None) -> Iterator[object]:
    """A ``distributed.Client``: a fresh ``LocalCluster`` of ``workers`` single-threaded
    processes, or the scheduler at ``scheduler``; closed (with its cluster) on exit."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise DistributedUnavailable(
            f"--workers and --scheduler need Dask distributed: {INSTALL_HINT}"
        ) from None
    if scheduler is not None:
        with Client(scheduler) as client:
            yield client
        return
    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


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
        for future in futures:  # in submission order: the serial run's order
            result = future.result()
            results.append(result)
            if on_result is not None:
                on_result(result)
        return results

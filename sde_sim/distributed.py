"""The suite's one way to reach a Dask cluster, shared by every ``--workers``/``--scheduler``.

``python -m sde_sim simulate --out FILE.zarr``, ``python -m verify`` and ``python -m figures``
run their tasks on a Dask ``distributed`` cluster: a ``LocalCluster`` of ``N`` single-threaded
worker processes on this machine (``--workers N``), or the scheduler at ``ADDR``
(``--scheduler ADDR``, started with ``dask scheduler`` and ``dask worker ADDR`` on any machines
that can import this package).

Dask is an optional extra (``pip install 'filtersuite[distributed]'``): this module imports it
only inside `cluster_client`, so importing the suite never imports Dask, and a missing install
is one line saying how to get it (`DistributedUnavailable`, turned into a usage error by the
CLIs). It sits on the lowest floor (``sde_sim``) so that every CLI can use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

INSTALL_HINT = "pip install 'filtersuite[distributed]' (or: make install)"
# Dask configuration for the local cluster's worker processes: None unsets a variable that the
# nanny would set before spawning a worker (see `cluster_client`).
LOCAL_WORKER_ENVIRON = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}


class DistributedUnavailable(RuntimeError):
    """``dask.distributed`` (or ``zarr``) is not installed; the message says how to install it."""


def require_distributed():
    """The ``distributed`` module, or `DistributedUnavailable` saying how to install it (a CLI
    calls this before it writes anything, so a missing extra leaves nothing behind)."""
    try:
        import distributed
    except ImportError:
        raise DistributedUnavailable(
            f"--workers and --scheduler need Dask distributed: {INSTALL_HINT}"
        ) from None
    return distributed


@contextlib.contextmanager
def cluster_client(workers: int | None, scheduler: str | None) -> Iterator[object]:
    """A ``distributed.Client``: a fresh ``LocalCluster`` of ``workers`` single-threaded
    processes, or the scheduler at ``scheduler``; closed (with its cluster) on exit.

    The local workers start without the ``MALLOC_TRIM_THRESHOLD_`` that Dask's nanny sets by
    default (`LOCAL_WORKER_ENVIRON`): with it glibc returns freed memory to the kernel at every
    64 KiB, and a torch training step, which frees and reallocates its small tensors every step,
    ran 1.9x slower in a worker than in a plain single-threaded process (400 steps of the
    ``afa-2d-b`` case: 16.4 s against 8.1 s; 15.6 s in a plain process given that variable).
    Workers started by hand (``dask worker``) keep whatever their environment says.
    """
    distributed = require_distributed()
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
    if scheduler is not None:
        with Client(scheduler) as client:
            yield client
        return
    import dask

    with (
        dask.config.set(LOCAL_WORKER_ENVIRON),
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client

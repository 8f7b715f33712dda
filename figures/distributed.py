"""Compute figures on Dask workers: ``python -m figures --workers N`` or ``--scheduler ADDR``.

Each figure's compute step (`figures.computed`) is one task; only its name goes out and its
data (numbers, no matplotlib) come back, so the client plots and writes every file itself and
the workers need no shared file system. The cluster is `sde_sim.distributed.cluster_client`'s: a
``LocalCluster`` of ``N`` single-threaded worker processes, or the scheduler at ``ADDR``.
Results are yielded as they complete, so each figure is written as soon as it is ready and a
failure in one does not discard those already made. A worker process keeps its trained models
between tasks (`figures.trained`), so figures that share a trained case share it when they run
on the same worker, and train it once more otherwise.

Dask is imported only here, and only with ``--workers`` or ``--scheduler``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from figures import computed
from sde_sim.distributed import cluster_client


def computed_on_cluster(
    names: Sequence[str], *, quick: bool, workers: int | None = None, scheduler: str | None = None
) -> Iterator[tuple[str, object, float]]:
    """``(name, data, seconds)`` for each figure, in completion order; ``seconds`` is the
    worker's time for the compute step."""
    from distributed import as_completed

    with cluster_client(workers, scheduler) as client:
        futures = {
            client.submit(computed, name, quick, key=f"figure-{name}", pure=False): name
            for name in names
        }
        for future in as_completed(futures):
            data, seconds = future.result()
            yield futures[future], data, seconds

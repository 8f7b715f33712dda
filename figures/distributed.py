"""Compute figures on Dask workers: ``python -m figures --workers N`` or ``--scheduler ADDR``.

Each group of figures that share a trained case (`figures.groups`; most figures are a group of
one) is one task (`figures.computed_group`): the figures of a group run one after another on
one worker, which keeps the trained models between them (`figures.trained`), so a case is
trained once. The groups with the most trained cases are submitted first, at a higher priority,
so the longest tasks start first. Only names go out and the data (numbers, no matplotlib) come
back, so the client plots and writes every file itself and the workers need no shared file
system. The cluster is `sde_sim.distributed.cluster_client`'s: a ``LocalCluster`` of ``N``
single-threaded worker processes, or the scheduler at ``ADDR``. Results are yielded as their
groups complete, so each figure is written as soon as its group is ready and a failure in one
group does not discard those already made.

Dask is imported only here, and only with ``--workers`` or ``--scheduler``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from figures import computed_group, groups
from sde_sim.distributed import cluster_client


def computed_on_cluster(
    names: Sequence[str], *, quick: bool, workers: int | None = None, scheduler: str | None = None
) -> Iterator[tuple[str, object, float]]:
    """``(name, data, seconds)`` for each figure, in completion order of their groups;
    ``seconds`` is the worker's time for the compute step."""
    from distributed import as_completed

    ordered = groups(list(names))
    with cluster_client(workers, scheduler) as client:
        futures = [
            client.submit(
                computed_group,
                group,
                quick,
                key=f"figures-{'+'.join(group)}",
                priority=len(ordered) - rank,
                pure=False,
            )
            for rank, group in enumerate(ordered)
        ]
        for future in as_completed(futures):
            yield from future.result()

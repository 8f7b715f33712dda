"""Compute figures on Dask workers: ``python -m figures --workers N`` or ``--scheduler ADDR``.

Every distinct training run the figures need (their ``trainings``, `figures.trainings`) is a
task of its own (`verify.mle_convergence.trained`), and each figure is a task
(`figures.computed_with`) that takes the reports of its runs and adopts them, so a run shared
by several figures is trained once and the figures that train nothing run beside the
trainings. Trainings go first, longest first (by the estimate `training_cost`: the longest
tasks start first, so the workers finish close together), then the figures. Only names and
configurations go out; the data and the drawn PNG and PDF bytes come back (a task draws its
figure too: drawing on the client alone took a fifth of a core and about 13 s for the
largest figure), so the client only writes the files and the workers need no shared file
system. The cluster is
`sde_sim.distributed.cluster_client`'s: a ``LocalCluster`` of ``N`` single-threaded worker
processes, or the scheduler at ``ADDR``. Results are yielded as the figures complete, so each
is written as soon as it is ready and a failure in one does not discard those already made.

Dask is imported only here, and only with ``--workers`` or ``--scheduler``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from figures import computed_with, trainings
from sde_sim.distributed import cluster_client
from verify.mle_convergence import config_key, trained
from verify.training import TrainConfig


def training_cost(config: TrainConfig) -> int:
    """A relative estimate of a run's time, for ordering only: optimizer steps x paths per
    step (measured on the figures' runs, it orders the long ones first)."""
    return config.steps * config.batch_size


def computed_on_cluster(
    names: Sequence[str], *, quick: bool, workers: int | None = None, scheduler: str | None = None
) -> Iterator[tuple[str, object, float]]:
    """``(name, data, seconds, files)`` for each figure, in completion order: ``files`` the
    drawn PNG and PDF (`figures.rendered`), ``seconds`` the worker's time to compute and draw
    (the trainings it adopted not included)."""
    from distributed import as_completed

    needs = {name: {config_key(c): c for c in trainings(name, quick)} for name in names}
    runs = {key: config for need in needs.values() for key, config in need.items()}
    longest_first = sorted(runs, key=lambda key: training_cost(runs[key]), reverse=True)
    with cluster_client(workers, scheduler) as client:
        reports = {
            key: client.submit(
                trained,
                runs[key],
                key=f"training-{rank}-{runs[key].layer}-{runs[key].preset}",
                priority=len(runs) - rank,
                pure=False,
            )
            for rank, key in enumerate(longest_first)
        }
        futures = {
            client.submit(
                computed_with,
                name,
                quick,
                [reports[key] for key in needs[name]],
                key=f"figure-{name}",
                priority=0,
                pure=False,
            ): name
            for name in names
        }
        for future in as_completed(futures):
            yield (futures[future], *future.result())

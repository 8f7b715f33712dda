"""Regeneration of the papers' figures: one module per figure, a shared style and a CLI.

Each figure module defines ``NAME``, ``TITLE``, ``SOURCE`` (seed and section), a frozen
``Config`` with ``Config.quick()`` / ``Config.full()``, ``compute(cfg) -> data`` (numbers only,
no matplotlib), ``plot(data) -> matplotlib.figure.Figure``, ``caption(data) -> str`` and
``main()``, plus ``SEED`` (the paper, ``"000"`` to ``"004"``) and ``CHECKS`` (ids or globs of
the ``python -m verify`` checks of the same section, which the index page links to). A module
that trains `verify.mle_convergence` runs names them in ``trainings(cfg)`` (optional): on a Dask
cluster each distinct run is a task of its own and the figures' tasks adopt the reports
(`trainings`, `computed_with`), so a run shared by figures is trained once.
``python -m figures [NAMES ...] [--quick] [--out DIR] [--force] [--list]`` writes
``DIR/figures/NAME.png`` and ``.pdf`` and an index page ``DIR/figures/index.html``.

Only this package (and the ``--plot`` flags of the CLIs) imports matplotlib; figure modules are
imported lazily through `get`.
"""

from __future__ import annotations

import importlib
import time
from types import ModuleType

# name -> module; the order is the order of the index page.
FIGURES: dict[str, str] = {
    "fig1_trajectories": "figures.fig1_trajectories",
    "fig2_pulled_forward": "figures.fig2_pulled_forward",
    "fig3_attention_maps": "figures.fig3_attention_maps",
    "covariance_vs_lag": "figures.covariance_vs_lag",
    "training_curves": "figures.training_curves",
    "convergence_vs_data": "figures.convergence_vs_data",
    "kla_ou_scan": "figures.kla_ou_scan",
    "kla_attention_matrix": "figures.kla_attention_matrix",
    "kla_memorization": "figures.kla_memorization",
    "kla_uncertainty": "figures.kla_uncertainty",
    "kla_runtime": "figures.kla_runtime",
    "osc_trajectories": "figures.osc_trajectories",
    "osc_irregular_rotation": "figures.osc_irregular_rotation",
    "osc_resonance_map": "figures.osc_resonance_map",
    "osc_logistic_map": "figures.osc_logistic_map",
    "rt_sphere_trajectories": "figures.rt_sphere_trajectories",
    "rfa_ensemble": "figures.rfa_ensemble",
    "rfa_regimes": "figures.rfa_regimes",
    "rfa_damping": "figures.rfa_damping",
    "rope_spectra": "figures.rope_spectra",
}


# The papers, in the order of the index page's groups (seed number -> short name).
PAPERS: dict[str, str] = {
    "000": "Adaptive Filter Attention (AFA)",
    "001": "Kalman Linear Attention (KLA)",
    "002": "The oscillator transformer (OsciFormer)",
    "003": "The RT-Transformer",
    "004": "Robust Filter Attention (RFA)",
}


def names() -> list[str]:
    """The registered figure names, in index order."""
    return list(FIGURES)


def get(name: str) -> ModuleType:
    """The module of figure `name`; the error lists the known ones."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; known: {', '.join(FIGURES)}")
    return importlib.import_module(FIGURES[name])


def trainings(name: str, quick: bool) -> tuple:
    """The `verify.training.TrainConfig` runs figure `name`'s compute step trains (its module's
    ``trainings(cfg)``; none without one), at quick or full size."""
    module = get(name)
    if not hasattr(module, "trainings"):
        return ()
    return tuple(module.trainings(module.Config.quick() if quick else module.Config.full()))


def computed_with(name: str, quick: bool, reports) -> tuple[object, float, dict[str, bytes]]:
    """``(data, seconds, files)``: `computed` after adopting ``reports``
    (`verify.mle_convergence.adopt`: runs trained by other tasks, so the compute step does not
    train them again), then drawn (`rendered`): a Dask task of `figures.distributed`, so the
    drawing runs on the workers too and the client only writes the bytes."""
    from verify.mle_convergence import adopt

    for report in reports:
        adopt(report)
    data, seconds = computed(name, quick)
    start = time.perf_counter()
    files = rendered(name, data)
    return data, seconds + time.perf_counter() - start, files


# The file formats of every figure (the PNG at `figures.style.DPI`; the PDF is vector).
FORMATS = ("png", "pdf")


def rendered(name: str, data) -> dict[str, bytes]:
    """Figure `name`'s plot of ``data`` in the house style, as ``{format: file bytes}`` for
    each of `FORMATS` (drawn on an Agg canvas; nothing is written)."""
    import io

    from figures import style

    fig = get(name).plot(data)
    files = {}
    with style.context():
        for ext in FORMATS:
            buffer = io.BytesIO()
            fig.savefig(buffer, format=ext, dpi=style.DPI)
            files[ext] = buffer.getvalue()
    return files


def computed(name: str, quick: bool) -> tuple[object, float]:
    """``(data, seconds)``: figure `name`'s compute step at quick or full size (what a Dask
    worker runs with ``--workers``/``--scheduler``: only the name goes out, the data come back)."""
    module = get(name)
    cfg = module.Config.quick() if quick else module.Config.full()
    start = time.perf_counter()
    data = module.compute(cfg)
    return data, time.perf_counter() - start


def checks_of(module: ModuleType) -> list[str]:
    """The registered `verify` check ids a figure module's ``CHECKS`` name, in registry order.

    Each entry is an exact id or a glob (``*?[``); an entry that matches no registered check is
    an error, so a renamed check cannot silently drop out of the index page.
    """
    import fnmatch

    from verify import registry

    known = [c.id for c in registry.select()]
    found: list[str] = []
    for entry in module.CHECKS:
        glob = any(ch in entry for ch in "*?[")
        hits = [i for i in known if (fnmatch.fnmatchcase(i, entry) if glob else i == entry)]
        if not hits:
            raise ValueError(f"{module.NAME}: CHECKS entry {entry!r} matches no verify check")
        found += [i for i in hits if i not in found]
    return found

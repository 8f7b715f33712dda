"""Regeneration of the papers' figures: one module per figure, a shared style and a CLI.

Each figure module defines ``NAME``, ``TITLE``, ``SOURCE`` (seed and section), a frozen
``Config`` with ``Config.quick()`` / ``Config.full()``, ``compute(cfg) -> data`` (numbers only,
no matplotlib), ``plot(data) -> matplotlib.figure.Figure``, ``caption(data) -> str`` and
``main()``. ``python -m figures [NAMES ...] [--quick] [--out DIR] [--force] [--list]`` writes
``DIR/figures/NAME.png`` and ``.pdf`` and an index page ``DIR/figures/index.html``.

Only this package (and the ``--plot`` flags of the CLIs) imports matplotlib; figure modules are
imported lazily through `get`.
"""

from __future__ import annotations

import importlib
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
}


def names() -> list[str]:
    """The registered figure names, in index order."""
    return list(FIGURES)


def get(name: str) -> ModuleType:
    """The module of figure `name`; the error lists the known ones."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; known: {', '.join(FIGURES)}")
    return importlib.import_module(FIGURES[name])

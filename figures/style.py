"""The shared look of the figures, applied through a context manager (no global state leaks).

`context()` wraps `matplotlib.rc_context` with `STYLE`; `new_figure` creates a `Figure` bound to
the Agg canvas directly, so neither pyplot nor the process-wide backend is touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import matplotlib as mpl
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

# Resolution of the PNGs (the PDFs are vector).
DPI = 150

STYLE: dict[str, object] = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.2,
    "lines.markersize": 3,
    "legend.frameon": False,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,  # TrueType in PDFs: editable text
}

# Series colours shared across figures.
TRUTH = "black"
MEASURED = "tab:red"
OPTIMUM = "tab:blue"
CLOSED_FORM = "black"


@contextmanager
def context() -> Iterator[None]:
    """Apply `STYLE` for the duration of the block; the previous rcParams come back after."""
    with mpl.rc_context(STYLE):
        yield


def new_figure(**kwargs) -> Figure:
    """A `Figure` with an Agg canvas (``layout="constrained"`` unless given); call in `context`."""
    kwargs.setdefault("layout", "constrained")
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig

"""Plots of simulated paths: latent state against measurements. Imported only by the CLI."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from sde_sim.scenario import Simulation

LATENT_COLOR = "black"
MEASURED_COLOR = "tab:red"
MAX_DOTS = 150


def plot_simulation(sim: Simulation, *, max_paths: int = 3, title: str | None = None) -> Figure:
    """State-space view (2-D or 3-D) of up to `max_paths` paths, and path 0 against time.

    Latent paths are lines, measurements dots; measurements are drawn in state space only when
    they live in it (as many components as the state).
    """
    d, k = sim.x.shape[-1], sim.z.shape[-1]
    n = min(max_paths, sim.x.shape[0])
    # Show at most ~150 measurements per path: denser dots hide the latent path.
    every = max(1, sim.t_obs.size // MAX_DOTS)
    t_obs, z_all = sim.t_obs[::every], sim.z[:, ::every]
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    phase = 2 <= d <= 3
    space = fig.add_subplot(1, 2, 1, projection="3d" if d == 3 else None)
    series = fig.add_subplot(1, 2, 2)
    same_space = k == d
    # Axis limits follow the latent paths: heavy-tailed outliers would otherwise squash them.
    lo, hi = np.min(sim.x[:n], axis=(0, 1)), np.max(sim.x[:n], axis=(0, 1))
    pad = 0.25 * np.maximum(hi - lo, 1e-9)
    lo, hi = lo - pad, hi + pad
    for p in range(n):
        alpha = 1.0 if p == 0 else 0.45
        latent = sim.x[p]
        if not phase:
            space.plot(
                sim.t,
                latent[:, 0],
                color=LATENT_COLOR,
                lw=1,
                alpha=alpha,
                label="latent" if p == 0 else None,
            )
            if same_space:
                space.plot(
                    t_obs,
                    z_all[p, :, 0],
                    ".",
                    color=MEASURED_COLOR,
                    ms=3,
                    alpha=alpha,
                    label="measured" if p == 0 else None,
                )
            continue
        space.plot(
            *latent.T,
            color=LATENT_COLOR,
            lw=1.2,
            alpha=alpha,
            zorder=3,
            label="latent" if p == 0 else None,
        )
        if same_space:
            z = z_all[p]
            inside = np.all((z >= lo) & (z <= hi), axis=-1)
            space.scatter(
                *z[inside].T,
                s=6,
                color=MEASURED_COLOR,
                alpha=alpha,
                label="measured" if p == 0 else None,
            )
    if phase:
        for axis, name in enumerate("xyz"[:d]):
            getattr(space, f"set_{name}lim")(lo[axis], hi[axis])
    else:
        space.set_ylim(lo[0], hi[0])
        space.set_xlabel("t")
    system_type = sim.meta.get("scenario", {}).get("system", {}).get("type")
    if d == 3 and system_type == "RadialTangentialSDE":
        _sphere_guide(space, float(np.median(np.linalg.norm(sim.x[:n], axis=-1))))
    plural = "s" if n > 1 else ""
    space.set_title(f"state space ({n} path{plural})" if phase else f"x1 of {n} path{plural}")
    space.legend(loc="upper right", fontsize=8)
    for i in range(d):
        color = f"C{i}"
        series.plot(sim.t, sim.x[0, :, i], color=color, lw=1, label=f"x{i + 1}")
        if same_space:
            series.plot(t_obs, z_all[0, :, i], ".", color=color, ms=3)
    if not same_space:
        for j in range(k):
            series.plot(t_obs, z_all[0, :, j], "x", color=f"C{d + j}", ms=3, label=f"z{j + 1}")
    series.set_ylim(lo.min(), hi.max())
    series.set_xlabel("t")
    shown = "" if every == 1 else f", every {every}th shown"
    series.set_title(f"path 0: latent (lines), measured (dots{shown})")
    series.legend(loc="upper right", fontsize=8, ncol=2)
    if title:
        fig.suptitle(title)
    return fig


def _sphere_guide(ax, radius: float) -> None:
    """A faint wireframe sphere of `radius` for 3-D paths near a sphere."""
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 25), np.linspace(0, np.pi, 13))
    ax.plot_wireframe(
        radius * np.cos(u) * np.sin(v),
        radius * np.sin(u) * np.sin(v),
        radius * np.cos(v),
        color="0.8",
        lw=0.4,
    )

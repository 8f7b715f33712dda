"""Propagated measurement covariance vs lag: closed form against Monte Carlo (seed 000 A.1, A.3).

For a measurement ``z_j = x(t_j) + v_j`` pulled to the target time ``t_i`` through the true
dynamics, ``z_hat_i(t_j) = e^{-A dt} z_j`` with ``dt = t_j - t_i`` (seed 000's sign: ``dt < 0``
causal), the error ``e_ij = z_hat_i(t_j) - x(t_i)`` is exactly ``N(0, V^C(dt))`` (seed 000 A.1).

Closed forms: for the three ``afa-2d`` variants (``Q = sigma^2 I`` is not diagonal in the
eigenbasis of A) the eigenbasis form `estimators.closed_forms.measurement.
eigen_measurement_covariance`, entries (1,1), (1,2), (2,2); for the isotropic ``rotation-3d``
preset the scalar kernel `isotropic_measurement_variance` (``V^C = sigma_V^2 I``).

Monte Carlo estimator (stated): P independent paths from `sde_sim.simulate(..., method="exact")`
(exact discretisation, so no time-step bias); one target index ``i`` (the middle measurement)
and lags ``j`` on a regular subset of the measurement indices. For each lag the estimate of the
entry ``(a, b)`` is ``mean_p e_a e_b`` (the mean of ``e`` is known to be zero, so no centring),
with standard error ``std_p(e_a e_b) / sqrt(P)``; the isotropic kernel pools the d diagonal
entries: ``mean_{p,a} e_a^2``, standard error ``std(e_a^2) / sqrt(P d)`` (the coordinates are
independent because ``V^C`` is a multiple of I). Each point is an average over independent paths,
so it is asymptotically normal and the 5-sigma bars hold it to the closed form; points at
different lags share paths and are correlated, which does not affect a single point's bar.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from scipy.linalg import expm

from estimators.closed_forms import measurement
from sde_sim import presets
from sde_sim.scenario import simulate

NAME = "covariance_vs_lag"
TITLE = "Propagated measurement covariance vs lag: closed form against Monte Carlo"
SOURCE = "seed 000 appendix A.1 (law of the pulled-forward measurement), A.3 (closed forms)"
SEED = "000"
CHECKS = (
    "measurement.closed-form-vs-van-loan",
    "measurement.isotropic-vs-van-loan",
    "measurement.pulled-forward-measurements",
)
# Width of the error bars in standard errors; the test holds every point to it.
SIGMA_LEVEL = 5.0
# (preset, variant) per panel.
CASES = (("afa-2d", "a"), ("afa-2d", "b"), ("afa-2d", "c"), ("rotation-3d", "default"))


@dataclass(frozen=True)
class Config:
    """``n_paths`` Monte Carlo paths per system; a lag point every ``lag_every`` measurements;
    ``n_curve`` points on each closed-form curve; ``seed`` of the simulation."""

    n_paths: int = 20_000
    lag_every: int = 5
    n_curve: int = 201
    seed: int = 0

    @classmethod
    def quick(cls) -> Config:
        return cls(n_paths=2_000)

    @classmethod
    def full(cls) -> Config:
        return cls()


@dataclass(frozen=True)
class Panel:
    """One system. Shapes: L lag points, N curve points, q plotted quantities.

    dt : (L,) Monte Carlo lags ``t_j - t_i``.   mc, mc_se : (L, q) estimates and standard errors.
    curve_dt : (N,) closed-form lags.           curve : (N, q) closed form; closed_at_dt (L, q).
    labels : (q,) names of the quantities.      n_samples : independent paths used.
    """

    preset: str
    variant: str
    summary: str
    dt: np.ndarray
    mc: np.ndarray
    mc_se: np.ndarray
    closed_at_dt: np.ndarray
    curve_dt: np.ndarray
    curve: np.ndarray
    labels: tuple[str, ...]
    n_samples: int

    @property
    def z_scores(self) -> np.ndarray:
        """(L, q) ``(mc - closed) / se``."""
        return (self.mc - self.closed_at_dt) / self.mc_se


@dataclass(frozen=True)
class Data:
    config: Config
    panels: tuple[Panel, ...]
    sigma_level: float = SIGMA_LEVEL

    @property
    def max_abs_z(self) -> float:
        return float(max(np.abs(p.z_scores).max() for p in self.panels))


def _closed_form(scenario, dt: np.ndarray, isotropic: bool) -> np.ndarray:
    A = scenario.system.A
    R = scenario.measurement.R
    if isotropic:
        d = A.shape[0]
        alpha = float(np.trace(A)) / d
        sigma2 = float(scenario.system.Q[0, 0])
        return measurement.isotropic_measurement_variance(alpha, sigma2, float(R[0, 0]), dt)[
            :, None
        ]
    lam, S = presets.AFA_EIGENVALUES, presets.AFA_BASIS
    V = measurement.eigen_measurement_covariance(lam, S, scenario.system.Q, R, dt)
    return np.stack([V[:, 0, 0], V[:, 0, 1], V[:, 1, 1]], axis=-1)


def _panel(preset_name: str, variant: str, cfg: Config, seed: int) -> Panel:
    preset = presets.get(preset_name)
    scenario = preset.scenario(variant)
    isotropic = preset_name == "rotation-3d"
    sim = simulate(scenario, cfg.n_paths, seed=seed, method="exact")
    M = sim.t_obs.size
    i = M // 2
    js = np.arange(0, M, cfg.lag_every)
    dt = sim.t_obs[js] - sim.t_obs[i]
    A = scenario.system.A
    # e_ij = e^{-A dt} z_j - x(t_i): (L, P, d); row vectors, so multiply by the transpose.
    Phi = np.stack([expm(-A * h) for h in dt])
    err = np.einsum("lab,plb->lpa", Phi, sim.z[:, js]) - sim.x_obs[None, :, i]
    if isotropic:
        sq = err**2  # (L, P, d): independent coordinates
        prod = sq.reshape(dt.size, -1)
        labels = ("sigma_V^2",)
        mc = prod.mean(axis=1)[:, None]
        se = (prod.std(axis=1, ddof=1) / np.sqrt(prod.shape[1]))[:, None]
    else:
        pairs = ((0, 0), (0, 1), (1, 1))
        prod = np.stack([err[..., a] * err[..., b] for a, b in pairs], axis=-1)  # (L, P, 3)
        labels = ("V_11", "V_12", "V_22")
        mc = prod.mean(axis=1)
        se = prod.std(axis=1, ddof=1) / np.sqrt(prod.shape[1])
    curve_dt = np.linspace(dt[0], dt[-1], cfg.n_curve)
    return Panel(
        preset=preset_name,
        variant=variant,
        summary=preset.variant(variant).summary,
        dt=dt,
        mc=mc,
        mc_se=se,
        closed_at_dt=_closed_form(scenario, dt, isotropic),
        curve_dt=curve_dt,
        curve=_closed_form(scenario, curve_dt, isotropic),
        labels=labels,
        n_samples=cfg.n_paths,
    )


def compute(cfg: Config | None = None) -> Data:
    """Closed form and Monte Carlo for every system in `CASES` (see the module docstring)."""
    cfg = Config.full() if cfg is None else cfg
    panels = tuple(
        _panel(name, variant, cfg, cfg.seed + k) for k, (name, variant) in enumerate(CASES)
    )
    return Data(cfg, panels)


def plot(data: Data):
    """One panel per system: closed form (lines), Monte Carlo (dots, 5-sigma bars)."""
    from figures import style

    with style.context():
        fig = style.new_figure(figsize=(11, 7.2))
        axes = fig.subplots(2, 2).ravel()
        for ax, p in zip(axes, data.panels, strict=True):
            for q, label in enumerate(p.labels):
                color = f"C{q}"
                ax.plot(p.curve_dt, p.curve[:, q], color=color, lw=1.2, label=f"{label} closed")
                ax.errorbar(
                    p.dt,
                    p.mc[:, q],
                    yerr=data.sigma_level * p.mc_se[:, q],
                    fmt="o",
                    ms=3,
                    color=color,
                    elinewidth=0.8,
                    capsize=1.5,
                    label=f"{label} MC",
                )
            ax.axvline(0.0, color="0.6", lw=0.6)
            ax.set_title(f"{p.preset} ({p.variant}): {p.summary}")
            ax.set_xlabel("dt = t_j - t_i   (< 0: causal)")
            ax.set_ylabel("covariance of z_hat_i(t_j) - x(t_i)")
            ax.legend(ncol=2, loc="upper left")
        fig.suptitle(
            f"{TITLE} ({data.config.n_paths} paths, bars {data.sigma_level:g} sigma, "
            f"max |z| = {data.max_abs_z:.2f})"
        )
    return fig


def caption(data: Data) -> str:
    return (
        "Covariance of the pulled-forward measurement error e = e^{-A dt} z_j - x(t_i) against "
        "the lag dt = t_j - t_i (negative: causal). Lines: closed forms (afa-2d: the eigenbasis "
        "V^C(dt) = S M(dt) S^H, entries 11, 12, 22; rotation-3d: the isotropic kernel "
        "sigma_V^2(dt)). Dots: Monte Carlo over "
        f"{data.config.n_paths} exact-discretisation paths per system, mean of e_a e_b with "
        f"{data.sigma_level:g}-sigma bars (standard error std(e_a e_b)/sqrt(P)). Largest "
        f"|MC - closed| / se over all points: {data.max_abs_z:.2f}."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.covariance_vs_lag [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

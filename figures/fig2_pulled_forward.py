"""Seed 000 Fig. 2: a trained AFA layer's "pulled-forward" estimates early, midway and late.

A one-layer AFA (`verify.training`, layer ``"afa"`` on the ``d = 2`` measurement coordinates,
``layer_options={"gate": None}``) is trained on ``afa-2d`` variant b (``sigma^2 = 0.3``,
``eta^2 = 0.5``) with the one-step prediction loss; `verify.training.train`'s callback reads
the model out at the steps ``Config.stages``.
At each stage and at four target measurements ``i`` of one held-out path, every earlier
measurement ``z_j`` (``j <= i``, optionally only the last ``window``) is propagated to ``t_i`` by
the layer's LEARNED dynamics (seed 000 2.1, A.1: ``z_hat_i(t_j) = C e^{A (t_i - t_j)} C^-1 z_j``,
read in the layer's eigenbasis):

    u_j        = L_V(lift(P_in(z_j / s)))                  value features (complex pairs)
    u_hat_ij   = e^{lambda (t_i - t_j)} u_j,  lambda = dt (-a + i omega)   (per head, feature)
    z_hat_ij   = s * P_out(Re L_P(u_hat_ij))

with ``s`` the model's data scale, ``L_V`` / ``L_P`` the layer's complex value and output maps
(with their biases: the layer pulls its biased value features forward in exactly this way, and
reads any latent vector out through ``Re L_P``) and ``P_in`` / ``P_out`` the predictor's
projections (none here). The propagation is `kernels.functional.predict` with a per-key
horizon ``t_i - t_j``.

The layer is trained without the residual gate (``gate=None``; Algorithm 1's ``(1 - delta) Z_v
+ delta Zbar``): with the gate, the current measurement reaches the output directly, and the
trained layer uses one of its two complex features (at a frequency near 1 rad per measurement,
which averages out of the attention sum) as a learned skip map of ``z_i``. Its dynamics then
need not describe the data, and the pulled-forward clouds stay 12-16 (RMS) away from the
truth through training (the default ``"afa"``, seeds 0 and 1, 1500 steps; the noise floor is
~1.5). Without the gate every output goes through the pulled-forward values, and the clouds
close in on the path (seed 0: 18.0, 10.5, 3.0 at steps 20, 120, 1500).

The figure draws each cloud ``{z_hat_ij}_j`` over the true path (black); the data hold the
spread of each cloud around the true state ``x(t_i)``, ``RMS_j |z_hat_ij - x(t_i)|``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch
from scipy.linalg import expm

from kernels.layers.complex_linear import lift
from kernels.layers.heads import merge_complex_heads, split_complex_heads
from kernels.ops import afa as afa_functional
from kernels.ops.common import complex_pairs
from sde_sim import presets
from verify.training import OneStepPredictor, TrainConfig, make_data, one_step_mse, train

NAME = "fig2_pulled_forward"
TITLE = "Seed 000 Fig. 2: an AFA layer's pulled-forward estimates during training (afa-2d b)"
SOURCE = "seed 000 section 4.2, Fig. 2 (pulled-forward estimates, section 2.1 / A.1)"
SEED = "000"
CHECKS = (
    "measurement.pulled-forward-measurements",
    "mle_convergence.afa-2d-b-learned-dynamics",
)
PRESET = "afa-2d"
VARIANT = "b"
STAGE_NAMES = ("early", "midway", "after training")


@dataclass(frozen=True)
class Config:
    """Training and read-out settings.

    seed : of the training run (`verify.training.TrainConfig.seed`: data, init, batches).
    steps : optimizer steps; ``stages`` : the steps (increasing, in ``1..steps``, one per panel)
        at which the model is kept.
    n_paths, batch_size, lr : as in `TrainConfig`.
    targets : fractions of the held-out path at which the four targets ``t_i`` sit.
    window : pull only the last ``window`` measurements ``j <= i`` (None: all of them).
    path : index of the held-out path drawn.
    """

    seed: int = 0
    steps: int = 1500
    stages: tuple[int, ...] = (20, 120, 1500)
    n_paths: int = 256
    batch_size: int = 32
    lr: float = 1e-2
    targets: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    window: int | None = None
    path: int = 0

    def __post_init__(self) -> None:
        stages = tuple(self.stages)
        if len(stages) < 1 or any(
            not isinstance(s, int) or isinstance(s, bool) or not 1 <= s <= self.steps
            for s in stages
        ):
            raise ValueError(f"stages must be integers in [1, steps={self.steps}]; found {stages}")
        if list(stages) != sorted(set(stages)):
            raise ValueError(f"stages must be strictly increasing; found {stages}")
        if not self.targets or any(not 0.0 < f <= 1.0 for f in self.targets):
            raise ValueError(f"targets must be fractions in (0, 1]; found {self.targets}")
        if self.window is not None and (not isinstance(self.window, int) or self.window < 1):
            raise ValueError(f"window must be None or an integer >= 1; found {self.window!r}")

    @classmethod
    def quick(cls) -> Config:
        return cls(steps=300, stages=(20, 120, 300), n_paths=64, batch_size=16)

    @classmethod
    def full(cls) -> Config:
        return cls()

    def train_config(self) -> TrainConfig:
        """The `verify.training` run: layer ``"afa"`` without its residual gate."""
        return TrainConfig(
            layer="afa",
            preset=PRESET,
            variant=VARIANT,
            steps=self.steps,
            seed=self.seed,
            lr=self.lr,
            n_paths=self.n_paths,
            holdout_paths=max(self.path + 1, 16),
            batch_size=min(self.batch_size, self.n_paths),
            eval_every=self.steps,
            checkpoint_every=self.steps,
            layer_options={"gate": None},
        )


@dataclass(frozen=True)
class Stage:
    """The model at one training step. K targets; cloud k has ``n_k`` points.

    clouds : K arrays (n_k, d), the pulled-forward estimates ``z_hat_ij``.
    spread : (K,) ``RMS_j |z_hat_ij - x(t_i)|`` per target.
    heldout_mse : one-step prediction MSE on the held-out paths at this step.
    decay, frequencies : the layer's learned ``dt a`` (H,) and ``dt omega`` (H, n), per unit of
        measurement index (the true system: ``0.01`` and ``+-0.1``).
    """

    step: int
    clouds: tuple[np.ndarray, ...]
    spread: np.ndarray
    heldout_mse: float
    decay: np.ndarray
    frequencies: np.ndarray

    @property
    def mean_spread(self) -> float:
        return float(np.mean(self.spread))


@dataclass(frozen=True)
class Data:
    """x (T, d) the held-out latent path at its grid times; x_obs (M, d), z (M, d) at the
    measurements; targets (K,) measurement indices ``i``; stages, one per training snapshot;
    true_spread (K,) the spread of the clouds pulled forward by the TRUE dynamics
    ``e^{A (t_i - t_j)} z_j`` (the floor set by the noise)."""

    config: Config
    x: np.ndarray
    x_obs: np.ndarray
    z: np.ndarray
    targets: np.ndarray
    stages: tuple[Stage, ...]
    true_spread: np.ndarray


@torch.no_grad()
def pulled_forward(model: OneStepPredictor, z: torch.Tensor, t: torch.Tensor, i: int):
    """Measurements ``z_j`` (``j <= i``) propagated to ``t_i`` by the model's AFA layer.

    ``z_hat_ij = s P_out(Re L_P(e^{lambda (t_i - t_j)} L_V(lift(P_in(z_j / s)))))`` (module
    docstring; seed 000 2.1, A.1).

    Parameters
    ----------
    model : a `verify.training.OneStepPredictor` around an AFA layer.
    z : (M, d) measurements.   t : (M,) stamps in the model's units.   i : target index.

    Returns
    -------
    (i + 1, d) tensor, row ``j`` the estimate of the measurement at ``t_i`` from ``z_j``.
    """
    if z.ndim != 2 or t.shape != z.shape[:1]:
        raise ValueError(f"z must be (M, d) and t (M,); found {tuple(z.shape)}, {tuple(t.shape)}")
    if not 0 <= i < z.shape[0]:
        raise ValueError(f"i must lie in [0, {z.shape[0] - 1}]; found {i}")
    layer = model.layer
    x = z[None, : i + 1] / model.scale
    if model.in_proj is not None:
        x = model.in_proj(x)
    value = split_complex_heads(layer.value(lift(x)), layer.num_heads)
    dyn = layer.dynamics()
    lag = t[i] - t[: i + 1]
    moved = afa_functional.predict(
        value,
        decay=dyn["decay"] * layer.step,
        frequencies=dyn["frequencies"] * layer.step,
        step=lag,
    )
    y = complex_pairs.split(layer.out_proj(merge_complex_heads(moved)))[0]
    if model.out_proj is not None:
        y = model.out_proj(y)
    return (y * model.scale)[0]


def _spread(cloud: np.ndarray, x: np.ndarray, window: int | None) -> tuple[np.ndarray, float]:
    """The cloud (last `window` points) and its RMS distance to ``x``."""
    if window is not None:
        cloud = cloud[-window:]
    return cloud, float(np.sqrt(np.mean(np.sum((cloud - x) ** 2, axis=-1))))


def _stage(step: int, model: OneStepPredictor, data, cfg: Config, targets) -> Stage:
    z = data.holdout[cfg.path]
    x_obs = data.holdout_sim.x_obs[cfg.path]
    clouds, spread = [], []
    for i in targets:
        cloud = pulled_forward(model, z, data.t, int(i)).double().numpy()
        cloud, rms = _spread(cloud, x_obs[i], cfg.window)
        clouds.append(cloud)
        spread.append(rms)
    with torch.no_grad():
        mse = one_step_mse(model, data.holdout, data.t).item()
    layer = model.layer
    dyn = layer.dynamics()
    return Stage(
        step=step,
        clouds=tuple(clouds),
        spread=np.array(spread),
        heldout_mse=mse,
        decay=(dyn["decay"] * layer.step).detach().double().numpy(),
        frequencies=(dyn["frequencies"] * layer.step).detach().double().numpy(),
    )


def _true_spread(data, cfg: Config, targets) -> np.ndarray:
    """Spread of the clouds pulled forward by the true ``e^{A (t_i - t_j)}``."""
    sim = data.holdout_sim
    A = presets.get(PRESET).scenario(VARIANT).system.A
    z, x_obs, t_obs = sim.z[cfg.path], sim.x_obs[cfg.path], sim.t_obs
    out = []
    for i in targets:
        cloud = np.stack([expm(A * (t_obs[i] - t_obs[j])) @ z[j] for j in range(i + 1)])
        out.append(_spread(cloud, x_obs[i], cfg.window)[1])
    return np.array(out)


def compute(cfg: Config | None = None) -> Data:
    """Train, read the model out at ``cfg.stages`` and pull the held-out measurements forward."""
    cfg = Config.full() if cfg is None else cfg
    tcfg = cfg.train_config()
    data = make_data(tcfg)
    M = data.t.shape[0]
    targets = np.array([max(1, round(f * (M - 1))) for f in cfg.targets])
    stages = []

    def keep(step: int, model: OneStepPredictor) -> None:
        if step in cfg.stages:
            stages.append(_stage(step, model, data, cfg, targets))

    train(tcfg, quiet=True, callback=keep)
    sim = data.holdout_sim
    return Data(
        config=cfg,
        x=sim.x[cfg.path],
        x_obs=sim.x_obs[cfg.path],
        z=data.holdout[cfg.path].double().numpy(),
        targets=targets,
        stages=tuple(stages),
        true_spread=_true_spread(data, cfg, targets),
    )


def plot(data: Data):
    """One panel per stage: the true path (black) and the four pulled-forward clouds."""
    from figures import style

    with style.context():
        n = len(data.stages)
        fig = style.new_figure(figsize=(4 * n, 4.3))
        axes = np.atleast_1d(fig.subplots(1, n, sharex=True, sharey=True))
        for k, (ax, stage) in enumerate(zip(axes, data.stages, strict=True)):
            ax.plot(*data.x.T, color=style.TRUTH, lw=1.0, label="ground truth", zorder=3)
            for c, (i, cloud) in enumerate(zip(data.targets, stage.clouds, strict=True)):
                color = f"C{c}"
                ax.scatter(*cloud.T, s=5, color=color, alpha=0.45, lw=0)
                ax.plot(
                    *data.x_obs[i],
                    "o",
                    ms=6,
                    mfc="none",
                    color=color,
                    mew=1.4,
                    zorder=4,
                    label=f"x(t_{i}): spread {stage.spread[c]:.2f}",
                )
            label = STAGE_NAMES[k] if n == len(STAGE_NAMES) else f"stage {k + 1}"
            ax.set_title(
                f"({chr(97 + k)}) {label}: step {stage.step}, held-out MSE {stage.heldout_mse:.3g}"
            )
            ax.set_xlabel("x1")
            ax.set_ylabel("x2")
            ax.legend(loc="upper right")
        # The late clouds set the scale; early clouds may reach far beyond the path.
        span = np.concatenate([data.x, *data.stages[-1].clouds])
        pad = 0.15 * np.ptp(span, axis=0)
        axes[0].set_xlim(span[:, 0].min() - pad[0], span[:, 0].max() + pad[0])
        axes[0].set_ylim(span[:, 1].min() - pad[1], span[:, 1].max() + pad[1])
        fig.suptitle(TITLE)
    return fig


def caption(data: Data) -> str:
    spreads = "; ".join(
        f"step {s.step}: {', '.join(f'{v:.2f}' for v in s.spread)} (mean {s.mean_spread:.2f}; "
        f"learned decay {s.decay.ravel()[0]:.3f}, frequencies "
        f"{', '.join(f'{w:.3f}' for w in s.frequencies.ravel())})"
        for s in data.stages
    )
    window = "all earlier" if data.config.window is None else f"the last {data.config.window}"
    indices = ", ".join(str(int(i)) for i in data.targets)
    floor = ", ".join(f"{v:.2f}" for v in data.true_spread)
    return (
        "A one-layer AFA (no residual gate) trained on afa-2d (b) (sigma^2 = 0.3, eta^2 = 0.5) "
        "with the one-step prediction loss, kept at three training steps. At four measurements "
        f"t_i of a held-out path (indices {indices}), {window} measurements z_j are propagated "
        "to t_i through the layer's learned dynamics, z_hat = s Re L_P(e^{lambda (t_i - t_j)} "
        "L_V(z_j / s)) (coloured clouds); black: the true path, circles: x(t_i). RMS distance "
        f"of each cloud to x(t_i) per stage: {spreads}. Pulled forward by the true dynamics "
        f"instead, the spread is {floor} (the noise floor). The true dynamics per measurement "
        "interval: decay 0.01, frequency +-0.1."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.fig2_pulled_forward [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

"""Seed 000 Fig. 3: attention matrices of two-layer softmax attention and of one AFA layer.

Both models are trained on ``afa-2d`` variant b (``sigma^2 = 0.3``, ``eta^2 = 0.5``: process and
measurement noise) with the one-step prediction loss by `verify.training.train`, with the same
data and seed streams (the two-layer softmax model, which the harness does not build, is built
here and passed to it), then their attention matrices on one held-out path are drawn as
``T x T`` images (rows: queries ``i``, columns: keys ``j <= i``):

* standard attention, two layers (seed 000 4.2): ``h0 = P_in(z / s) + PE(t)`` (the sinusoidal
  additive embedding of `kernels.layers.baselines.SoftmaxAttention`, added once at the input),
  ``h1 = h0 + Attn_1(h0)``, ``h2 = h1 + Attn_2(h1)`` (residual connections, no MLP or norm),
  ``y = s P_out(h2)``; panels (a) and (b) are the two layers' weights.
* AFA, one layer (Algorithm 1): layer ``"afa"`` with ``layer_options={"nu": 1, "gate": None}``,
  so that the weights are Algorithm 1's ``softmax_j(-tau_s log(V^C + |R|^2))`` up to the value
  precision: ``A[i, j] ~ P_v(tau_ij) (1 + P_qk(tau_ij) |R_ij|^2)^(-tau_s)`` with the residual
  ``R_ij = Zq_i - e^{lambda tau_ij} Zk_j``, and without the residual gate (as in Fig. 2). The
  training harness's ``"afa"`` layer has ``nu = inf``: weights ``P_v(tau)`` alone, a function of
  the lag only, which cannot show the residual's structure. Panel (c).

The periodic structure the seed describes is summarised by the AFA matrix's averaged lag
profile ``p(tau) = mean_i A[i, i - tau]`` (``tau = min_lag..M-1``, past the diagonal peak):
after removing its best-fitting smooth trend (a quadratic in ``tau``), the frequency
``omega*`` that maximises the least-squares periodogram ``|sum r(tau) e^{-i omega tau}|^2`` on
a fine grid, compared with the true oscillation frequency of the system per measurement
interval (``|Im lambda| dt_obs = 0.1`` rad) and with the layer's learned frequencies.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from kernels.layers.baselines import SoftmaxAttention
from kernels.layers.parameters import seeded_linear
from sde_sim import presets
from verify.training import TrainConfig, build_model, derived_seed, make_data, train

NAME = "fig3_attention_maps"
TITLE = "Seed 000 Fig. 3: attention matrices, two-layer softmax attention vs one AFA layer"
SOURCE = "seed 000 section 4.2, Fig. 3 (afa-2d with process and measurement noise)"
SEED = "000"
CHECKS = (
    "measurement.corrected-sec3.6-kernel",
    "well_specified.afa-2d-a-*",
)
PRESET = "afa-2d"
VARIANT = "b"
PANELS = ("softmax layer 1", "softmax layer 2", "AFA layer")
# Frequencies scanned by the periodogram (rad per measurement interval), from one cycle over
# the lags used up to Nyquist: a grid step of ~0.008 rad, well inside the main lobe's
# half-width 2 pi / L ~ 0.06 for L ~ 100 lags.
_N_FREQUENCIES = 400


@dataclass(frozen=True)
class Config:
    """Training settings shared by the two models.

    seed : data, initialisation and batches (`verify.training` streams).
    steps, lr, batch_size, n_paths : optimizer steps, Adam rate, paths per step, training paths.
    softmax_dim : width ``E`` of the softmax model (one head per layer).
    path : index of the held-out path whose attention is drawn.
    gate : the AFA layer's gate (None: no residual connection, see `figures.fig2_pulled_forward`
        for why).
    min_lag : lags below it are left out of the periodogram (the diagonal peak of the trained
        AFA, whose weight sits on lags 0-2, would otherwise dominate it).
    """

    seed: int = 0
    steps: int = 1000
    lr: float = 1e-2
    batch_size: int = 32
    n_paths: int = 256
    softmax_dim: int = 16
    path: int = 0
    gate: str | None = None
    min_lag: int = 3

    @classmethod
    def quick(cls) -> Config:
        return cls(steps=250, n_paths=64, batch_size=16)

    @classmethod
    def full(cls) -> Config:
        return cls()

    def train_config(self) -> TrainConfig:
        """The `verify.training` run of the AFA layer (``nu = 1``, no residual gate); its
        data, seeds and optimizer settings also train the softmax model."""
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
            layer_options={"nu": 1.0, "gate": self.gate},
        )


class SoftmaxStack(nn.Module):
    """Two residual softmax-attention layers between ``P_in: R^d -> R^E`` and ``P_out``
    (module docstring). ``z (B, M, d)`` -> one-step predictions ``(B, M, d)``; with
    ``need_weights`` also the two layers' weights, each ``(B, 1, M, M)``."""

    def __init__(self, dim: int, width: int, *, scale: float, generator, dtype):
        super().__init__()
        kw = {"generator": generator, "dtype": dtype}
        self.register_buffer("scale", torch.tensor(float(scale), dtype=dtype))
        self.in_proj = seeded_linear(dim, width, **kw)
        self.layers = nn.ModuleList(
            [
                SoftmaxAttention(width, 1, positional="sinusoidal", **kw),
                SoftmaxAttention(width, 1, positional=None, **kw),
            ]
        )
        self.out_proj = seeded_linear(width, dim, **kw)

    def forward(self, z, t=None, *, need_weights: bool = False):
        h = self.in_proj(z / self.scale)
        weights = []
        for k, layer in enumerate(self.layers):
            out, w = layer(h, t if k == 0 else None, need_weights=need_weights)
            h = h + out
            weights.append(w)
        y = self.out_proj(h) * self.scale
        return (y, weights) if need_weights else y


def lag_profile(weights: np.ndarray) -> np.ndarray:
    """``p(tau) = mean_{i >= tau} A[i, i - tau]``, ``tau = 0..T-1``, of a causal (T, T) matrix."""
    T = weights.shape[0]
    return np.array([np.mean(np.diagonal(weights, offset=-tau)) for tau in range(T)])


def dominant_frequency(
    profile: np.ndarray, *, min_lag: int = 0
) -> tuple[float, np.ndarray, np.ndarray]:
    """The periodogram peak of ``profile[min_lag:]`` after removing a quadratic trend.

    ``r = p - quadratic fit`` on the lags ``tau >= min_lag``; ``power(omega) = |sum_tau r(tau)
    e^{-i omega tau}|^2``. Returns ``(omega*, omegas, power)``; ``omegas`` run from ``2 pi /
    L`` (one cycle over the ``L`` lags used) to ``pi`` (Nyquist), rad per lag step.
    """
    if not isinstance(min_lag, int) or not 0 <= min_lag <= profile.size - 4:
        raise ValueError(
            f"min_lag must be an integer in [0, {profile.size - 4}] (a quadratic trend needs 4 "
            f"lags to leave a residual); found {min_lag!r}"
        )
    tau = np.arange(min_lag, profile.size, dtype=float)
    values = profile[min_lag:]
    resid = values - np.polyval(np.polyfit(tau, values, 2), tau)
    omegas = np.linspace(2 * np.pi / tau.size, np.pi, _N_FREQUENCIES)
    power = np.abs(np.exp(-1j * np.outer(omegas, tau)) @ resid) ** 2
    return float(omegas[np.argmax(power)]), omegas, power


@dataclass(frozen=True)
class Data:
    """weights: three (T, T) matrices (panels a-c); heldout_mse per model; afa_profile (T,)
    the averaged lag profile of (c); afa_frequency its dominant frequency and true_frequency the
    system's (rad per measurement interval); afa_dynamics the learned ``dt a`` and ``dt omega``;
    persistence_mse the held-out MSE of the guess ``z_{i+1} = z_i`` (a baseline)."""

    config: Config
    weights: tuple[np.ndarray, ...]
    heldout_mse: dict[str, float]
    afa_profile: np.ndarray
    afa_frequency: float
    true_frequency: float
    afa_dynamics: dict[str, np.ndarray]
    persistence_mse: float


def compute(cfg: Config | None = None) -> Data:
    """Train both models and read their attention on one held-out path."""
    cfg = Config.full() if cfg is None else cfg
    tcfg = cfg.train_config()
    data = make_data(tcfg)
    # The softmax model takes the AFA model's data scale and initialisation stream.
    scale = float(build_model(tcfg, data).scale)
    init = torch.Generator().manual_seed(derived_seed(cfg.seed, 0))
    softmax = SoftmaxStack(
        data.train.shape[-1], cfg.softmax_dim, scale=scale, generator=init, dtype=data.train.dtype
    )
    afa = train(tcfg, quiet=True)
    # The same loop, data and batch stream as the AFA (`config.layer` is unused with a model).
    mse = {"softmax": train(tcfg, model=softmax, quiet=True).heldout_mse, "afa": afa.heldout_mse}
    z = data.holdout[cfg.path : cfg.path + 1]
    layer = afa.model.layer
    with torch.no_grad():
        _, w_soft = softmax(z, data.t, need_weights=True)
        _, w_afa = layer(z / afa.model.scale, data.t, need_weights=True)
    weights = tuple(w[0, 0].double().numpy() for w in (*w_soft, w_afa))
    profile = lag_profile(weights[2])
    omega = dominant_frequency(profile, min_lag=cfg.min_lag)[0]
    t_obs = data.holdout_sim.t_obs
    interval = (t_obs[-1] - t_obs[0]) / (t_obs.size - 1)
    true = float(np.abs(presets.AFA_EIGENVALUES.imag).max() * interval)
    dyn = layer.dynamics()
    return Data(
        config=cfg,
        weights=weights,
        heldout_mse=mse,
        afa_profile=profile,
        afa_frequency=omega,
        true_frequency=true,
        afa_dynamics={
            "decay": (dyn["decay"] * layer.step).detach().double().numpy(),
            "frequencies": (dyn["frequencies"] * layer.step).detach().double().numpy(),
        },
        persistence_mse=float(torch.mean((data.holdout[:, 1:] - data.holdout[:, :-1]) ** 2)),
    )


def plot(data: Data):
    """Panels (a)-(c): the three attention matrices; (d): the AFA lag profile."""
    from matplotlib.colors import LogNorm

    from figures import style

    with style.context():
        fig = style.new_figure(figsize=(15, 4.2))
        axes = fig.subplots(1, 4)
        for k, (ax, w, label) in enumerate(zip(axes[:3], data.weights, PANELS, strict=True)):
            masked = np.ma.masked_where(np.triu(np.ones_like(w, dtype=bool), 1), w)
            # A log scale keeps the small off-diagonal weights (the bands) visible next to the
            # diagonal's; weights below 1e-4 (a hundredth of a uniform row's 1/M) share a colour.
            norm = LogNorm(vmin=1e-4, vmax=1.0, clip=True)
            image = ax.imshow(masked, cmap="viridis", norm=norm, interpolation="none")
            model = "afa" if k == 2 else "softmax"
            ax.set_title(f"({chr(97 + k)}) {label} (held-out MSE {data.heldout_mse[model]:.3g})")
            ax.set_xlabel("key j")
            ax.set_ylabel("query i")
            ax.grid(False)
            fig.colorbar(image, ax=ax, shrink=0.8)
        ax = axes[3]
        ax.semilogy(data.afa_profile, color="C2")
        ax.axvline(data.config.min_lag, color="0.6", lw=0.6)
        ax.set_title(
            f"(d) AFA lag profile: omega* = {data.afa_frequency:.3f} "
            f"(true {data.true_frequency:.3f})"
        )
        ax.set_xlabel("lag i - j")
        ax.set_ylabel("mean A[i, i - lag]")
        fig.suptitle(TITLE)
    return fig


def caption(data: Data) -> str:
    period = 2 * np.pi / data.afa_frequency
    learned = ", ".join(f"{w:.3f}" for w in data.afa_dynamics["frequencies"].ravel())
    mse = data.heldout_mse
    return (
        "Attention matrices on one held-out path of afa-2d (b) (sigma^2 = 0.3, eta^2 = 0.5) "
        f"after {data.config.steps} training steps with the one-step prediction loss (log "
        "colour scale): (a), (b) the two layers of a residual softmax-attention model with an "
        f"additive sinusoidal positional embedding (held-out MSE {mse['softmax']:.3g}); (c) one "
        "AFA layer with Algorithm 1's residual weighting (nu = 1, no residual gate; held-out "
        f"MSE {mse['afa']:.3g}; persistence z_(i+1) = z_i: {data.persistence_mse:.3g}). (d) "
        "The AFA matrix averaged along its diagonals; past lag "
        f"{data.config.min_lag} and after a quadratic trend is removed its periodogram peaks "
        f"at {data.afa_frequency:.3f} rad per measurement (period {period:.1f} measurements), "
        f"against the system's {data.true_frequency:.3f}; the layer's learned frequencies are "
        f"{learned} rad per measurement."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.fig3_attention_maps [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

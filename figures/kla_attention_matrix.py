"""Seed 001 Fig. 10 (App. E.4): the equivalent attention matrix of a KLA layer.

Unrolling the mean recursion gives, per channel d, a lower-triangular ``M_seq`` with
``y = M_seq v`` (plus a starting-state term, zero here since ``eta_0 = 0``): the paper's
``diag(q / lam) W`` with ``W[t, s] = (f_{s+1} ... f_t) k_s Lambda^v_s`` (App. E.4), computed by
`kernels.ops.kla.kla_attention_matrix` and returned by the layer with ``need_weights=True``
(`kernels.layers.kla.KalmanLinearAttention.attention_weights`, summed over the N slots).

A float64 layer at its initialisation (seeded) reads random tokens ``x ~ N(0, I)``; to make the
precision's role visible, the value-precision pre-activations of the tokens in
``Config.quiet`` are lowered by ``Config.quiet_shift`` (those tokens are observed with ~100x less
confidence). The data hold the matrices of four channels, the exactness ``max |M_seq v - y| /
max |y|`` (float64), the largest entry above the diagonal (exactly 0), and the mean |column| of
the quiet tokens relative to the others.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch

from kernels.layers.kla import KalmanLinearAttention

NAME = "kla_attention_matrix"
TITLE = "Seed 001 Fig. 10: the equivalent (Kalman) attention matrix of a KLA layer"
SOURCE = "seed 001 App. E.4, Fig. 10 (eq. (19) unrolled)"
SEED = "001"
CHECKS: tuple[str, ...] = ("kla.c14-attention-matrix",)
CHANNELS_SHOWN = 4


@dataclass(frozen=True)
class Config:
    """``length`` tokens through a layer of ``width`` channels and ``num_slots`` slots (seed
    ``seed``); tokens at ``quiet`` get their value-precision pre-activation shifted by
    ``quiet_shift`` (through the input, along the projection's row)."""

    length: int = 48
    width: int = 16
    num_slots: int = 8
    quiet: tuple[int, ...] = (10, 11, 12, 30, 31)
    quiet_shift: float = 6.0
    seed: int = 0

    @classmethod
    def quick(cls) -> Config:
        return cls(length=24, width=8, num_slots=4, quiet=(6, 7, 15))

    @classmethod
    def full(cls) -> Config:
        return cls()


@dataclass(frozen=True)
class Data:
    """weights (E, T, T) of one sequence; channels drawn; exactness, causal leak and the quiet
    columns' mean |weight| relative to the others."""

    config: Config
    weights: np.ndarray
    channels: np.ndarray
    exactness: float
    upper: float
    quiet_ratio: float


def _inputs(layer: KalmanLinearAttention, cfg: Config) -> torch.Tensor:
    """Random tokens; the quiet ones moved along the direction that raises every channel's
    value-variance pre-activation ``l_t`` by ``quiet_shift`` (least squares through in_proj)."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    x = torch.randn(1, cfg.length, cfg.width, generator=gen, dtype=torch.float64)
    rows = layer.in_proj.weight[-cfg.width :].detach()  # (E, E): the l_t block
    direction = torch.linalg.lstsq(
        rows, torch.full((cfg.width, 1), cfg.quiet_shift, dtype=rows.dtype)
    ).solution[:, 0]
    x[0, list(cfg.quiet)] += direction
    return x


def compute(cfg: Config | None = None) -> Data:
    cfg = Config.full() if cfg is None else cfg
    if any(not 0 <= i < cfg.length for i in cfg.quiet):
        raise ValueError(f"quiet must hold indices in [0, {cfg.length}); found {cfg.quiet}")
    gen = torch.Generator().manual_seed(cfg.seed)
    layer = KalmanLinearAttention(cfg.width, cfg.num_slots, generator=gen, dtype=torch.float64)
    x = _inputs(layer, cfg)
    with torch.no_grad():
        _, weights = layer(x, need_weights=True)
        y, _ = layer.readout(x)
        values = layer.values(x)
    rebuilt = torch.einsum("bdts,bsd->btd", weights, values)
    exactness = float((rebuilt - y).abs().max() / y.abs().max())
    w = weights[0].numpy()
    upper = float(np.abs(np.triu(w, 1)).max())
    col = np.abs(w).sum(axis=(0, 1)) / np.arange(cfg.length, 0, -1)  # mean |w| per source
    quiet = np.zeros(cfg.length, dtype=bool)
    quiet[list(cfg.quiet)] = True
    rng = np.random.default_rng(cfg.seed)
    channels = np.sort(rng.choice(cfg.width, size=min(CHANNELS_SHOWN, cfg.width), replace=False))
    return Data(
        config=cfg,
        weights=w,
        channels=channels,
        exactness=exactness,
        upper=upper,
        quiet_ratio=float(col[quiet].mean() / col[~quiet].mean()),
    )


def plot(data: Data):
    from figures import style

    with style.context():
        n = data.channels.size
        fig = style.new_figure(figsize=(3.2 * n, 3.4))
        axes = fig.subplots(1, n, squeeze=False)[0]
        for ax, c in zip(axes, data.channels, strict=True):
            image = ax.imshow(data.weights[c], cmap="RdBu_r", origin="upper")
            lim = np.abs(data.weights[c]).max()
            image.set_clim(-lim, lim)
            ax.set_title(f"channel {c}")
            ax.set_xlabel("source s")
            ax.set_ylabel("target t")
            ax.grid(False)
            fig.colorbar(image, ax=ax, shrink=0.75)
        fig.suptitle(f"{TITLE}; low-precision tokens at {list(data.config.quiet)}")
    return fig


def caption(data: Data) -> str:
    cfg = data.config
    fade = "their columns fade" if data.quiet_ratio < 1 else "their columns do not fade"
    return (
        "Paper (App. E.4, Fig. 10): unrolling eq. (19) gives a lower-triangular M_seq = "
        "diag(q / lam) W with W[t, s] = f_{s+1}...f_t k_s Lambda^v_s and y = M_seq v plus an "
        "initial-state term; it has the causal structure of an attention matrix. Here: a "
        f"float64 KLA layer at initialisation (width {cfg.width}, {cfg.num_slots} slots, "
        f"T = {cfg.length}); weights from need_weights=True reproduce the readout to "
        f"{data.exactness:.1e} (relative), the largest entry above the diagonal is "
        f"{data.upper:.1e}, and the {len(cfg.quiet)} tokens observed with low precision get "
        f"{data.quiet_ratio:.3f} of the others' mean |weight| ({fade})."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.kla_attention_matrix [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

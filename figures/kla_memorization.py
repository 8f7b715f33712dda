"""Seed 001 Fig. 13: a trained KLA layer's attention maps on the Memorization task (T = 32).

The task (MAD's Memorization, seed 001 F.1, Table 8; `verify.datasets.memorization`, reduced): a
fixed key -> value dictionary shared by every sequence; a sequence is ``T / 2`` pairs
``(key, [insert])`` with the keys drawn at random, and the target at each ``[insert]`` is the
value of the key before it (the values never appear in the input, so the dictionary must be
stored in the weights). ``python -m verify train --task memorization`` trains any layer on it.
The paper uses 128 keys, 128 values, 256 training sequences of T = 32 and d_model 128; here the
dictionary has ``n_keys`` entries (default 32) and the width is ``width`` so that training takes
seconds on one CPU thread.

The model is `verify.tasks.TaskModel` (embedding, ``h + layer(h)``, linear read-out) around one
`kernels.layers.kla.KalmanLinearAttention`; its loss and metric are `verify.tasks.batch_loss`
(cross-entropy at the ``[insert]`` positions) and `verify.tasks.evaluate` (held-out accuracy on
fresh sequences over the same dictionary), trained here with Adam for ``steps`` steps. KLA+
(``loss="mc"``, used by `figures.kla_uncertainty`) trains the same model with the Monte-Carlo
marginal likelihood `kernels.ops.kla.mc_marginal_nll` of the readout mean and variance instead.

The attention maps are the layer's equivalent attention matrices (App. E.4,
``layer(h, need_weights=True)``): (E, T, T) per sequence, of which four channels are drawn.
The paper's Fig. 13 claims a smooth, gradual decay and similar patterns across channels. The
data hold two numbers for that claim, for the trained and the untrained (initial) model:
``channel_similarity``, the mean pairwise Pearson correlation of the channels' |weights| over the
causal entries, and ``lag_profile``, the mean |weight| at each lag ``t - s`` (normalised to sum
1), with ``last_token_share`` its value at lag 1 (the ``[insert]`` rows' key).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import torch

from kernels.layers.kla import KalmanLinearAttention
from kernels.ops.kla import mc_marginal_nll
from verify import tasks

NAME = "kla_memorization"
TITLE = "Seed 001 Fig. 13: KLA attention maps on Memorization (T = 32)"
SOURCE = "seed 001 App. E.5, Fig. 13 (task: F.1, Table 8)"
SEED = "001"
CHECKS: tuple[str, ...] = ("kla.c14-attention-matrix",)
CHANNELS_SHOWN = 4


@dataclass(frozen=True)
class Config:
    """Task: ``n_keys`` dictionary entries, sequences of ``length`` tokens, ``n_train`` training
    and ``n_test`` held-out sequences. Model: ``width`` channels, ``num_slots`` state slots.
    Training: ``steps`` Adam steps of ``batch_size`` sequences at ``lr``; ``seed`` for the
    dictionary, the data, the initialisation and the batches."""

    n_keys: int = 32
    length: int = 32
    n_train: int = 256
    n_test: int = 64
    width: int = 32
    num_slots: int = 8
    steps: int = 200
    batch_size: int = 32
    lr: float = 1e-2
    seed: int = 0

    @classmethod
    def quick(cls) -> Config:
        return cls(n_keys=16, n_train=64, n_test=32, width=16, num_slots=4, steps=60)

    @classmethod
    def full(cls) -> Config:
        return cls()


def memorization_data(cfg: Config) -> tasks.TaskData:
    """The task as `verify.tasks.TaskData`: `verify.datasets.memorization` with ``n_train``
    training and ``n_test`` held-out sequences of ``length`` tokens over one ``n_keys``-entry
    dictionary (its seed and the sequences' from ``seed``; vocabulary and classes ``2 K + 1``).
    """
    options = {"n_keys": cfg.n_keys, "seq_len": cfg.length, "dictionary_seed": cfg.seed}
    return tasks.task_data(
        "memorization", n_train=cfg.n_train, n_holdout=cfg.n_test, seed=cfg.seed, options=options
    )


def build_model(cfg: Config, data: tasks.TaskData) -> tasks.TaskModel:
    gen = torch.Generator().manual_seed(cfg.seed)
    layer = KalmanLinearAttention(cfg.width, cfg.num_slots, generator=gen)
    return tasks.TaskModel(data, layer, cfg.width, generator=gen)


def kla_plus_loss(model: tasks.TaskModel, split: tasks.TaskSplit, generator) -> torch.Tensor:
    """KLA+'s loss (eqs. (24)-(25)): the MC marginal NLL of the targets with samples of the
    readout ``y ~ N(mean, variance)`` decoded by ``readout(h + out_proj(y))``."""
    h = model.embed(split.inputs)
    mean, variance = model.layer.readout(h)
    keep = split.targets != tasks.IGNORE_INDEX
    h_kept = h[keep]

    def decoder(y):
        return model.readout(h_kept + model.layer.out_proj(y))

    return mc_marginal_nll(
        mean[keep], variance[keep], split.targets[keep], decoder, generator=generator
    )


def train(cfg: Config, *, loss: str = "ce"):
    """``(model, data, initial_model, accuracies)``: Adam on the training split, the held-out
    accuracy before and after; ``loss`` ``"ce"`` (KLA) or ``"mc"`` (KLA+)."""
    if loss not in ("ce", "mc"):
        raise ValueError(f"loss must be 'ce' or 'mc'; found {loss!r}")
    # The model is tiny: intra-op threads only add synchronisation (many times the work on a
    # shared machine), so it trains on one thread; the caller's setting comes back after.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(cfg, loss)
    finally:
        torch.set_num_threads(threads)


def _train(cfg: Config, loss: str):
    data = memorization_data(cfg)
    model = build_model(cfg, data)
    initial = build_model(cfg, data)
    initial.load_state_dict(model.state_dict())
    before = tasks.evaluate(model, data)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    for _ in range(cfg.steps):
        index = torch.randint(0, data.n_train, (min(cfg.batch_size, data.n_train),), generator=gen)
        if loss == "ce":
            value = tasks.batch_loss(model, data, index)
        else:
            value = kla_plus_loss(model, data.train.take(index), gen)
        opt.zero_grad()
        value.backward()
        opt.step()
    return model, data, initial, (before, tasks.evaluate(model, data))


@torch.no_grad()
def attention_maps(model: tasks.TaskModel, inputs: torch.Tensor) -> np.ndarray:
    """The layer's equivalent attention matrices (B, E, T, T) on token sequences (B, T)."""
    _, weights = model.layer(model.embed(inputs), need_weights=True)
    return weights.double().numpy()


def channel_similarity(weights: np.ndarray) -> float:
    """Mean pairwise Pearson correlation across channels of |weights| (E, T, T), causal part."""
    T = weights.shape[-1]
    rows, cols = np.tril_indices(T)
    flat = np.abs(weights[:, rows, cols])
    corr = np.corrcoef(flat)
    off = ~np.eye(corr.shape[0], dtype=bool)
    return float(np.nanmean(corr[off]))


def lag_profile(weights: np.ndarray) -> np.ndarray:
    """Mean |weight| at each lag ``t - s = 0..T-1`` over channels and rows (E, T, T), summing
    to 1."""
    T = weights.shape[-1]
    prof = np.array(
        [np.abs(np.diagonal(weights, -lag, axis1=-2, axis2=-1)).mean() for lag in range(T)]
    )
    return prof / prof.sum()


@dataclass(frozen=True)
class Data:
    """``inputs`` (T,) the held-out sequence drawn; ``weights`` (E, T, T) its trained maps and
    ``initial_weights`` the untrained ones; ``channels`` the drawn channels; accuracies before
    and after training; similarity and lag profile (T,) of both models (mean over the held-out
    sequences); ``last_token_share`` the profile at lag 1."""

    config: Config
    inputs: np.ndarray
    weights: np.ndarray
    initial_weights: np.ndarray
    channels: np.ndarray
    accuracy_before: float
    accuracy_after: float
    similarity: float
    initial_similarity: float
    profile: np.ndarray
    initial_profile: np.ndarray

    @property
    def last_token_share(self) -> float:
        return float(self.profile[1])


def _summary(model, inputs) -> tuple[np.ndarray, float, np.ndarray]:
    maps = attention_maps(model, inputs)
    sims = [channel_similarity(w) for w in maps]
    prof = np.mean([lag_profile(w) for w in maps], axis=0)
    return maps, float(np.mean(sims)), prof


def compute(cfg: Config | None = None) -> Data:
    cfg = Config.full() if cfg is None else cfg
    model, data, initial, (before, after) = train(cfg)
    inputs = data.holdouts[0].inputs
    maps, sim, prof = _summary(model, inputs)
    maps0, sim0, prof0 = _summary(initial, inputs)
    rng = np.random.default_rng(cfg.seed)
    channels = np.sort(rng.choice(cfg.width, size=min(CHANNELS_SHOWN, cfg.width), replace=False))
    return Data(
        config=cfg,
        inputs=inputs[0].numpy(),
        weights=maps[0],
        initial_weights=maps0[0],
        channels=channels,
        accuracy_before=before,
        accuracy_after=after,
        similarity=sim,
        initial_similarity=sim0,
        profile=prof,
        initial_profile=prof0,
    )


def plot(data: Data):
    """Four channels' maps of the trained layer (top) and of the untrained one (bottom)."""
    from figures import style

    with style.context():
        n = data.channels.size
        fig = style.new_figure(figsize=(3 * n, 6))
        axes = fig.subplots(2, n, squeeze=False)
        for row, (weights, label) in enumerate(
            ((data.weights, "trained"), (data.initial_weights, "untrained"))
        ):
            for ax, c in zip(axes[row], data.channels, strict=True):
                image = ax.imshow(np.abs(weights[c]), cmap="viridis", origin="upper")
                ax.set_title(f"{label}, channel {c}")
                ax.set_xlabel("source s")
                ax.set_ylabel("target t")
                ax.grid(False)
                fig.colorbar(image, ax=ax, shrink=0.7)
        fig.suptitle(f"{TITLE}: |M_seq| of one held-out sequence")
    return fig


def caption(data: Data) -> str:
    cfg = data.config
    similar = (
        "similar by the threshold 0.5: agrees"
        if data.similarity >= 0.5
        else "below the threshold 0.5: the paper's similar channels are not reproduced"
    )
    return (
        "Paper (Fig. 13, 128-key dictionary, d_model 128): smooth, gradual decay; all channels "
        "show similar patterns (redundant storage, not selective attention). Here: a one-layer "
        f"KLA (width {cfg.width}, {cfg.num_slots} slots) trained {cfg.steps} steps on a "
        f"{cfg.n_keys}-key dictionary, T = {cfg.length}; held-out accuracy "
        f"{data.accuracy_before:.3f} before and {data.accuracy_after:.3f} after training. "
        f"Mean pairwise correlation of the channels' |M_seq|: {data.similarity:.2f} trained "
        f"({similar}), {data.initial_similarity:.2f} untrained. Share of "
        f"|M_seq| at lag 1 (the key before an [insert]): {data.last_token_share:.2f} trained, "
        f"{data.initial_profile[1]:.2f} untrained; at lag 0: {data.profile[0]:.2f} and "
        f"{data.initial_profile[0]:.2f}."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.kla_memorization [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

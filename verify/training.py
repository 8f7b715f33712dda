"""Train an attention layer on simulated measurements with the one-step prediction loss.

The model sees measurements only: from ``z_0..z_i`` it predicts ``z_{i+1}`` (seed 000 2.3, 3.1).
The loss (``TrainConfig.loss``) is the mean squared prediction error over ``i = 0..M-2``, all
paths and coordinates (``"mse"``), or the Gaussian negative log-likelihood of those predictions
(``"nll"``) under the predictive law the layer states itself (``predictive(x, t) -> (mean,
cov)``, available on layers that carry a variance: the unrolled AFA with ``predict=True``):

    NLL = sum_paths sum_{i=0}^{M-2} 1/2 (r_i^T Sigma_i^-1 r_i + log det Sigma_i + d log 2 pi),
    r_i = z_{i+1} - mean_i,

the innovations decomposition of the log-likelihood with a diffuse start (the first
measurement adds no term). For a Kalman-equivalent layer it *is* `estimators.fit`'s
``-log L``, so its minimiser is the parameter MLE within the layer's family.
A `OneStepPredictor` wraps one layer of `kernels.layers` between an optional input projection
``R^d -> R^E`` and an output projection ``R^E -> R^d`` (none when ``embed_dim`` is None: the layer
then works on the ``d`` measurement coordinates directly, as the seed's one-layer AFA does).

Training data are ``n_paths`` paths of a `sde_sim` preset; the held-out paths are simulated from a
different seed. With ``task`` set, the data are instead one of the synthetic tasks of
`verify.datasets` (A5, MQAR, irregular rotations and forecasting, the logistic map), the model a
`verify.tasks.TaskModel` around the layer, and the loss the task's (cross-entropy or MSE), all
through the same loop. `train` also takes a prebuilt ``model`` (any module mapping ``(z, t)`` to
one-step predictions with a ``scale`` buffer, such as Fig. 3's two-layer softmax stack).

Every random draw (simulation seeds, initialisation, batch order) derives from ``config.seed``
through explicit generators, so a run is bit-identical given its configuration; ``resume=True``
continues from the last checkpoint to the same final parameters.

A run directory holds ``config.json``, ``metrics.jsonl`` (one JSON object per evaluation: step,
train loss, held-out one-step MSE or a task's held-out metric, elapsed seconds) and
``checkpoint.pt`` (model, optimizer and generator states, step, configuration), each written
atomically.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from kernels.layers.parameters import seeded_linear
from sde_sim import presets
from sde_sim.plumbing import atomic_write
from sde_sim.scenario import METHODS as SIM_METHODS
from sde_sim.scenario import Scenario, Simulation, simulate
from verify import tasks

CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"
CONFIG = "config.json"
RUN_FILES = (CHECKPOINT, METRICS, CONFIG)
DTYPES = {"float32": torch.float32, "float64": torch.float64}
SCHEDULES = ("constant", "cosine", "tail")
LOSSES = ("mse", "nll", "ce")
TAIL = 0.2  # the share of the steps over which the "tail" schedule decays to 0
# Constructor arguments the harness sets itself (TrainConfig fields or derived from the data).
RESERVED_OPTIONS = ("embed_dim", "num_heads", "generator", "dtype", "device", "max_len")


def _afa(**kw):
    from kernels.layers.afa import AdaptiveFilterAttention

    return AdaptiveFilterAttention(**kw)


def _afa_tensor(**kw):
    from kernels.layers.afa import AdaptiveFilterAttention

    return AdaptiveFilterAttention(tensor_form=True, **kw)


def _rt_afa(**kw):
    from kernels.layers.rt_afa import RTAdaptiveFilterAttention

    return RTAdaptiveFilterAttention(**kw)


def _rfa(**kw):
    from kernels.layers.rfa import RobustFilterAttention

    return RobustFilterAttention(**kw)


def _rt_rfa(**kw):
    from kernels.layers.rt_transformer import RTRobustFilterAttention

    return RTRobustFilterAttention(**kw)


def _unrolled_afa(**kw):
    from kernels.layers.unrolled_afa import UnrolledAdaptiveFilterAttention

    return UnrolledAdaptiveFilterAttention(predict=True, **kw)


def _kla(*, embed_dim, num_heads, **kw):
    from kernels.layers.kla import KalmanLinearAttention

    del num_heads  # KLA has state slots, not heads
    return KalmanLinearAttention(embed_dim, **kw)


def _softmax(positional: str):
    def build(*, max_len, **kw):
        from kernels.layers.baselines import SoftmaxAttention

        extra = {"max_len": max(max_len, 2)} if positional == "learned" else {}
        return SoftmaxAttention(positional=positional, **extra, **kw)

    return build


# name -> builder(embed_dim=, num_heads=, generator=, dtype=, device=[, max_len=]) -> nn.Module
LAYERS: dict[str, Callable[..., nn.Module]] = {
    "afa": _afa,
    "afa-tensor": _afa_tensor,
    "rt-afa": _rt_afa,
    "rfa": _rfa,
    "rt-rfa": _rt_rfa,
    "unrolled-afa": _unrolled_afa,
    "kla": _kla,
    "softmax": _softmax("sinusoidal"),
    "softmax-learned": _softmax("learned"),
}


@dataclass(frozen=True)
class TrainConfig:
    """What to train on what; every field is recorded in the run directory.

    Parameters
    ----------
    layer : a key of `LAYERS`.
    preset, variant : the `sde_sim` preset and its variant (None: the preset's default).
    sim_method : ``"euler"`` (Euler-Maruyama) or ``"exact"`` (exact discretisation, linear
        systems only) for the simulated paths (`sde_sim.scenario.simulate`). Euler-Maruyama
        biases the dynamics by O(dt): with ``A``'s eigenvalues ``-a +- i w`` the simulated chain
        decays at ``a - (a^2 + w^2) dt / 2``, so a comparison with the true parameters wants
        ``"exact"``.
    n_steps : integration steps per path (the preset's grid step and measurement schedule;
        None: the preset's own length). Shorter paths make long presets cheap to train on.
    steps : optimizer steps in all (a resumed run may raise it).
    seed : every random draw derives from it (simulation seeds, initialisation, batches).
    lr : Adam learning rate.
    n_paths, holdout_paths : training and held-out paths (simulated from different seeds).
    batch_size : paths per step (drawn without replacement within a step).
    embed_dim : width of the layer; None works on the ``d`` measurement coordinates directly
        with no projections.
    num_heads : heads of the layer.
    eval_every : steps between held-out evaluations (one metrics line each).
    checkpoint_every : steps between checkpoints (the last step is always checkpointed).
    dtype : ``"float32"`` or ``"float64"`` for the model and data.
    device : torch device of the model and data (``"cpu"`` by default).
    schedule : learning rate over the run: ``"constant"``; ``"cosine"``
        (``lr_k = lr (1 + cos(pi k / steps)) / 2`` at step ``k``); or ``"tail"`` (constant for
        the first ``1 - TAIL`` of the steps, then linear to 0: the final steps average out
        Adam's fluctuation at a constant rate). The last two depend on ``steps``, so such a run
        cannot be resumed with a different ``steps``.
    layer_options : extra keyword options of the layer's constructor, JSON values only (for
        example ``{"nu": 1.0, "learn_nu": True}`` for a robust AFA).
    loss : ``"mse"`` (one-step mean squared error) or ``"nll"`` (the Gaussian negative
        log-likelihood of the one-step predictions under the layer's own predictive law; the
        layer must provide ``predictive``, see the module docstring); a task trains with its
        own loss: ``"ce"`` (cross-entropy, classification tasks) or ``"mse"`` (regression).
    task : a synthetic task of `verify.tasks.TASKS` to train on instead of the preset (None:
        the preset); ``preset``, ``variant``, ``sim_method`` and ``n_steps`` are then unused,
        ``n_paths``/``holdout_paths`` count training/held-out sequences, and ``embed_dim``
        None means `verify.tasks.DEFAULT_WIDTH`.
    task_options : keyword options of the task's generator (JSON values, for example
        ``{"train_length": 8}`` for ``a5``); sizes and seeds are set by the harness.
    """

    layer: str = "afa"
    preset: str = "afa-2d"
    variant: str | None = None
    sim_method: str = "euler"
    n_steps: int | None = None
    steps: int = 200
    seed: int = 0
    lr: float = 1e-2
    n_paths: int = 256
    holdout_paths: int = 64
    batch_size: int = 32
    embed_dim: int | None = None
    num_heads: int = 1
    eval_every: int = 10
    checkpoint_every: int = 50
    dtype: str = "float32"
    device: str = "cpu"
    schedule: str = "constant"
    layer_options: dict = dataclasses.field(default_factory=dict)
    loss: str = "mse"
    task: str | None = None
    task_options: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.layer not in LAYERS:
            raise ValueError(f"layer must be one of {', '.join(LAYERS)}; found {self.layer!r}")
        preset = presets.get(self.preset)
        preset.variant(self.variant)
        for name in (
            "steps",
            "n_paths",
            "holdout_paths",
            "batch_size",
            "num_heads",
            "eval_every",
            "checkpoint_every",
        ):
            _positive_int(name, getattr(self, name))
        _positive_int("seed", self.seed, minimum=0)
        if self.embed_dim is not None:
            _positive_int("embed_dim", self.embed_dim)
        if self.sim_method not in SIM_METHODS:
            raise ValueError(
                f"sim_method must be one of {', '.join(SIM_METHODS)}; found {self.sim_method!r}"
            )
        if self.n_steps is not None:
            _positive_int("n_steps", self.n_steps)
        if self.batch_size > self.n_paths:
            raise ValueError(
                f"batch_size must be <= n_paths ({self.n_paths}); found {self.batch_size}"
            )
        lr = self.lr
        if isinstance(lr, bool) or not (
            isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0
        ):
            raise ValueError(f"lr must be a finite number > 0; found {self.lr!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; found {self.dtype!r}")
        try:
            torch.device(self.device)
        except RuntimeError as exc:
            raise ValueError(f"device {self.device!r} is not a torch device: {exc}") from None
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f"schedule must be one of {', '.join(SCHEDULES)}; found {self.schedule!r}"
            )
        _check_layer_options(self.layer_options)
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}; found {self.loss!r}")
        if self.task is not None:
            tasks.check_task(self.task, self.loss, self.task_options)
        elif self.loss == "ce":
            raise ValueError("loss 'ce' (cross-entropy) needs a classification task (task)")
        elif self.task_options:
            raise ValueError("task_options need a task (task)")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _check_layer_options(options) -> None:
    if not isinstance(options, dict):
        raise TypeError(f"layer_options must be a dict, found {type(options).__name__}")
    for key, value in options.items():
        if not isinstance(key, str):
            raise ValueError(f"layer_options keys must be strings; found {key!r}")
        if key in RESERVED_OPTIONS:
            raise ValueError(
                f"layer_options may not set {key!r} (set by the harness: "
                f"{', '.join(RESERVED_OPTIONS)})"
            )
        try:
            json.dumps(value, allow_nan=True)
        except TypeError:
            raise ValueError(
                f"layer_options[{key!r}] must be a JSON value (number, string, bool, None, "
                f"list); found {type(value).__name__}"
            ) from None


def _positive_int(name: str, value, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; found {value!r}")


class OneStepPredictor(nn.Module):
    """``z (B, M, d)`` -> one-step predictions ``(B, M, d)``: row ``i`` predicts ``z_{i+1}``.

    ``y = scale * P_out(layer(P_in(z / scale), t))``; ``P_in``/``P_out`` are affine maps
    ``R^d <-> R^E`` (identity when ``embed_dim`` is None). ``scale`` (a buffer) is the training
    data's RMS, so the layer sees inputs of order one whatever the preset's units.

    Parameters
    ----------
    layer : a key of `LAYERS`.
    dim : measurement dimension ``d``.
    embed_dim, num_heads : of the layer (``embed_dim`` None: ``E = d`` and no projections).
    scale : positive data scale.
    max_len : longest sequence (the learned positional table's length).
    layer_options : extra keyword options of the layer's constructor.
    generator : ``torch.Generator`` for every initialisation (no global RNG).
    dtype, device : of the parameters.
    """

    def __init__(
        self,
        layer: str,
        dim: int,
        *,
        embed_dim: int | None = None,
        num_heads: int = 1,
        scale: float = 1.0,
        max_len: int = 4096,
        layer_options: dict | None = None,
        generator: torch.Generator | None = None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        if isinstance(scale, bool) or not (
            isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0
        ):
            raise ValueError(f"scale must be a finite number > 0, found {scale!r}")
        width = dim if embed_dim is None else embed_dim
        factory = {"dtype": dtype, "device": device}
        self.register_buffer("scale", torch.tensor(float(scale), **factory))
        self.layer = build_layer(
            layer,
            width,
            num_heads=num_heads,
            max_len=max_len,
            layer_options=layer_options,
            generator=generator,
            **factory,
        )
        if embed_dim is None:
            self.in_proj = self.out_proj = None
        else:
            self.in_proj = _projection(dim, width, generator, factory)
            self.out_proj = _projection(width, dim, generator, factory)

    def forward(self, z: torch.Tensor, t: torch.Tensor | None = None) -> torch.Tensor:
        x = z / self.scale
        if self.in_proj is not None:
            x = self.in_proj(x)
        y, _ = self.layer(x, t)
        if self.out_proj is not None:
            y = self.out_proj(y)
        return y * self.scale

    @property
    def has_predictive(self) -> bool:
        """Whether the layer states a predictive law (``predictive``; the ``"nll"`` loss)."""
        predictive = getattr(self.layer, "predictive", None)
        return callable(predictive) and getattr(self.layer, "predict", True)

    def predictive(
        self, z: torch.Tensor, t: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``z (B, M, d)`` -> one-step predictive ``(mean (B, M, d), cov (B, M, d, d))`` in the
        units of ``z``: the layer's law pushed through ``P_out`` and the scale."""
        if not self.has_predictive:
            raise ValueError(
                f"{type(self.layer).__name__} states no predictive law (it needs a "
                "predictive(x, t) method and predict=True; the unrolled AFA layer has one)"
            )
        x = z / self.scale
        if self.in_proj is not None:
            x = self.in_proj(x)
        mean, cov = self.layer.predictive(x, t)
        if self.out_proj is not None:
            mean = self.out_proj(mean)
            weight = self.out_proj.weight
            cov = weight @ cov @ weight.T
        return mean * self.scale, cov * self.scale**2


def build_layer(
    layer: str,
    width: int,
    *,
    num_heads: int = 1,
    max_len: int = 4096,
    layer_options: dict | None = None,
    generator: torch.Generator | None = None,
    dtype=None,
    device=None,
) -> nn.Module:
    """The layer ``LAYERS[layer]`` of width `width` with `layer_options` (ValueError naming the
    layer when an option does not fit its constructor); `max_len` is the longest sequence (the
    learned positional table's length)."""
    if layer not in LAYERS:
        raise ValueError(f"layer must be one of {', '.join(LAYERS)}; found {layer!r}")
    kw = {"embed_dim": width, "num_heads": num_heads, "generator": generator}
    kw.update(dtype=dtype, device=device)
    if layer.startswith("softmax"):
        kw["max_len"] = max_len
    options = dict(layer_options or {})
    _check_layer_options(options)
    try:
        return LAYERS[layer](**kw, **options)
    except TypeError as exc:  # an option the layer's constructor does not take
        raise ValueError(f"layer_options do not fit layer {layer!r}: {exc}") from None


def _projection(d_in: int, d_out: int, generator, factory) -> nn.Linear:
    """`kernels.layers.parameters.seeded_linear` (PyTorch's default init drawn from
    `generator`), drawn on the CPU, where the harness's generators live, then moved to the
    model's device."""
    linear = seeded_linear(d_in, d_out, generator=generator, dtype=factory["dtype"], device="cpu")
    return linear.to(factory["device"])


class Data(NamedTuple):
    """Training and held-out measurements ``(P, M, d)``, stamps ``t (M,)`` in units of the mean
    measurement interval, starting at 0, and the simulations they come from."""

    train: torch.Tensor
    holdout: torch.Tensor
    t: torch.Tensor
    train_sim: Simulation
    holdout_sim: Simulation

    @property
    def t_interval(self) -> float:
        """The mean measurement interval ``Delta`` (simulation time units): one unit of ``t``."""
        t_obs = self.train_sim.t_obs
        return float((t_obs[-1] - t_obs[0]) / (t_obs.shape[0] - 1))


def simulation_seeds(seed: int) -> tuple[int, int]:
    """The (training, held-out) simulation seeds derived from `seed` (distinct)."""
    a, b = np.random.SeedSequence([seed, 7]).generate_state(2)
    return int(a), int(b) if b != a else int(b) + 1


def scenario_of(config: TrainConfig) -> Scenario:
    """The `sde_sim` scenario of `config` (its preset and variant, ``n_steps`` applied)."""
    scenario = presets.get(config.preset).scenario(config.variant)
    if config.n_steps is not None:
        scenario = dataclasses.replace(scenario, n_steps=config.n_steps)
    return scenario


def make_data(config: TrainConfig) -> Data | tasks.TaskData:
    """Simulate the training and held-out paths of `config` (deterministic in ``config.seed``);
    with ``config.task`` set, generate the task's sequences (`verify.tasks.make_task_data`)."""
    if config.task is not None:
        return tasks.make_task_data(config)
    scenario = scenario_of(config)
    meta = {"preset": config.preset, "variant": config.variant}
    seed_train, seed_hold = simulation_seeds(config.seed)
    sims = [
        simulate(scenario, n, seed=s, method=config.sim_method, meta=meta)
        for n, s in ((config.n_paths, seed_train), (config.holdout_paths, seed_hold))
    ]
    for name, sim in zip(("training", "held-out"), sims, strict=True):
        if np.isnan(sim.z).any():
            raise ValueError(
                f"{config.preset}/{config.variant}: the {name} data have missing measurements; "
                "the training harness needs complete sequences"
            )
    t_obs = sims[0].t_obs
    if t_obs.shape[0] < 2:
        raise ValueError(f"{config.preset}: need at least 2 measurements, found {t_obs.shape[0]}")
    unit = (t_obs[-1] - t_obs[0]) / (t_obs.shape[0] - 1)
    factory = {"dtype": DTYPES[config.dtype], "device": torch.device(config.device)}
    t = torch.as_tensor((t_obs - t_obs[0]) / unit, **factory)
    train, hold = (torch.as_tensor(s.z, **factory) for s in sims)
    return Data(train, hold, t, *sims)


def one_step_mse(model: nn.Module, z: torch.Tensor, t: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``(model(z)[:, i] - z[:, i+1])^2`` over paths, ``i = 0..M-2`` and coordinates."""
    return torch.mean((model(z, t)[:, :-1] - z[:, 1:]) ** 2)


_LOG_2PI = math.log(2 * math.pi)


def one_step_nll(model: OneStepPredictor, z: torch.Tensor, t: torch.Tensor | None = None):
    """The Gaussian negative log-likelihood of the one-step predictions (module docstring),
    per path, ``(B,)``: ``sum_{i=0}^{M-2} 1/2 (r_i^T Sigma_i^-1 r_i + log det Sigma_i +
    d log 2 pi)`` with ``(mean, Sigma) = model.predictive(z, t)`` and ``r_i = z_{i+1} -
    mean_i``. Raises ValueError where a ``Sigma_i`` is not positive definite."""
    mean, cov = model.predictive(z, t)
    residual = z[:, 1:] - mean[:, :-1]
    factor, info = torch.linalg.cholesky_ex(cov[:, :-1])
    if bool((info != 0).any()):
        raise ValueError(
            "the model's predictive covariance is not positive definite (a degenerate output "
            "projection); the nll loss needs a full-rank predictive law"
        )
    white = torch.linalg.solve_triangular(factor, residual.unsqueeze(-1), upper=False)
    quadratic = white.squeeze(-1).pow(2).sum(-1)
    log_det = 2 * torch.log(torch.diagonal(factor, dim1=-2, dim2=-1)).sum(-1)
    d = z.shape[-1]
    return 0.5 * (quadratic + log_det + d * _LOG_2PI).sum(-1)


def training_loss(config: TrainConfig, model: OneStepPredictor, z, t) -> torch.Tensor:
    """The loss of one batch in the data's scaled units (order one whatever the preset):
    the MSE divided by ``scale^2``, or the NLL per scalar measurement plus ``log scale``."""
    if config.loss == "mse":
        return one_step_mse(model, z, t) / model.scale**2
    rows = z.shape[0] * (z.shape[1] - 1) * z.shape[2]
    return one_step_nll(model, z, t).sum() / rows - torch.log(model.scale)


class TrainResult(NamedTuple):
    """The trained model, the step reached and the last metrics (original units; ``train_loss``
    is the last batch's MSE or NLL per scalar measurement, per ``config.loss``; for a task its
    cross-entropy or MSE). ``heldout_mse`` is the held-out one-step MSE (a task: the held-out
    MSE of a regression task, NaN for a classification task); ``heldout`` names the held-out
    metric of the last evaluation and its value (``{"heldout_mse": ...}``, or a task's
    ``{"heldout_accuracy": ...}``)."""

    model: nn.Module
    step: int
    train_loss: float
    heldout_mse: float
    metrics: list[dict]
    heldout: dict | None = None


def heldout_name(config: TrainConfig) -> str:
    """The metrics key of the held-out metric: ``heldout_mse``, or a task's
    ``heldout_accuracy`` / ``heldout_mse``."""
    if config.task is None:
        return "heldout_mse"
    return f"heldout_{tasks.METRICS[tasks.TASKS[config.task].loss]}"


def build_model(config: TrainConfig, data: Data | tasks.TaskData) -> nn.Module:
    """The model of `config`, initialised from a generator seeded by ``config.seed``: a
    `OneStepPredictor`, or for a task a `verify.tasks.TaskModel` around the layer."""
    generator = torch.Generator().manual_seed(derived_seed(config.seed, 0))
    if config.task is not None:
        dtype, device = DTYPES[config.dtype], torch.device(config.device)
        width = tasks.DEFAULT_WIDTH if config.embed_dim is None else config.embed_dim
        layer = build_layer(
            config.layer,
            width,
            num_heads=config.num_heads,
            max_len=data.max_len,
            layer_options=config.layer_options,
            generator=generator,
            dtype=dtype,
            device=device,
        )
        return tasks.TaskModel(data, layer, width, generator=generator, dtype=dtype, device=device)
    scale = float(torch.sqrt(torch.mean(data.train.double() ** 2)))
    return OneStepPredictor(
        config.layer,
        data.train.shape[-1],
        embed_dim=config.embed_dim,
        num_heads=config.num_heads,
        scale=scale,
        max_len=data.train.shape[1],
        layer_options=config.layer_options,
        generator=generator,
        dtype=DTYPES[config.dtype],
        device=torch.device(config.device),
    )


def derived_seed(seed: int, index: int) -> int:
    """The seed of random stream ``index`` of a run seeded ``seed`` (0: initialisation, 1: batch
    order); distinct streams are independent (`numpy.random.SeedSequence`)."""
    return int(np.random.SeedSequence([seed, 11, index]).generate_state(1, dtype=np.uint64)[0] >> 1)


def train(
    config: TrainConfig,
    out: str | os.PathLike | None = None,
    *,
    model: nn.Module | None = None,
    resume: bool = False,
    force: bool = False,
    quiet: bool = False,
    callback: Callable[[int, OneStepPredictor], None] | None = None,
) -> TrainResult:
    """Train ``config.layer`` on ``config.preset`` with Adam and the one-step prediction loss.

    Parameters
    ----------
    config : the run (see `TrainConfig`).
    out : run directory (config, metrics, checkpoints); None keeps nothing on disk.
    model : a prebuilt model to train instead of `build_model`'s (``config.layer``,
        ``embed_dim``, ``num_heads`` and ``layer_options`` are then unused): a module mapping
        ``(z, t)`` to one-step predictions ``(B, M, d)`` with a ``scale`` buffer, as
        `OneStepPredictor`; trained in place. Its architecture is not recorded in the run
        directory: resume a run by passing the same model again.
    resume : continue from ``out/checkpoint.pt`` (the configuration must match, except
        ``steps``); with no checkpoint there yet, start from step 0.
    force : start afresh in an existing run directory, replacing its run files.
    quiet : no progress bar (it is also off when stderr is not a terminal).
    callback : called as ``callback(step, model)`` after each optimizer step.

    Returns
    -------
    TrainResult with the model after ``config.steps`` steps.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, found {type(config).__name__}")
    if resume and force:
        raise ValueError("pass resume or force, not both")
    if (resume or force) and out is None:
        raise ValueError("resume and force need a run directory (out)")
    run = None if out is None else Path(out)
    _check_device_available(config.device)
    data = make_data(config)
    if model is None:
        model = build_model(config, data)  # bad layer options fail here, before the run folder
    else:
        _check_model(model, config)
    if config.loss == "nll" and not getattr(model, "has_predictive", False):
        raise ValueError(
            f"loss 'nll' needs a layer that states its predictive law; {config.layer!r} "
            "does not (use 'unrolled-afa', or loss 'mse')"
        )
    checkpoint = _prepare_run(run, config, resume=resume, force=force)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    batches = torch.Generator().manual_seed(derived_seed(config.seed, 1))
    step, elapsed_before, metrics = 0, 0.0, []
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        batches.set_state(checkpoint["generator"])
        step, elapsed_before = checkpoint["step"], checkpoint["elapsed"]
        metrics = _truncate_metrics(run / METRICS, step)
    if run is not None and checkpoint is None:
        atomic_write(run / METRICS, lambda fh: None, overwrite=True)

    start = time.perf_counter()
    train_loss = heldout = math.nan
    progress = _progress_bar(config.steps, step, quiet)
    try:
        while step < config.steps:
            index = torch.randperm(config.n_paths, generator=batches)[: config.batch_size]
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(config, step)
            optimizer.zero_grad(set_to_none=True)
            loss = batch_loss(config, model, data, index)
            loss.backward()
            optimizer.step()
            step += 1
            train_loss = loss.item()
            if callback is not None:
                callback(step, model)
            if step % config.eval_every == 0 or step == config.steps:
                heldout = evaluate(model, data)
                line = {
                    "step": step,
                    f"train_{config.loss}": _original_units(config, model, train_loss),
                    heldout_name(config): heldout,
                    "elapsed_s": round(elapsed_before + time.perf_counter() - start, 3),
                }
                if config.loss == "nll":
                    line["heldout_nll"] = heldout_nll(model, data)
                metrics.append(line)
                if run is not None:
                    with open(run / METRICS, "a") as fh:
                        fh.write(json.dumps(line) + "\n")
                progress.set_postfix({heldout_name(config): f"{heldout:.4g}"}, refresh=False)
            if run is not None and (step % config.checkpoint_every == 0 or step == config.steps):
                save_checkpoint(
                    run / CHECKPOINT,
                    model=model,
                    optimizer=optimizer,
                    generator=batches,
                    step=step,
                    config=config,
                    elapsed=elapsed_before + time.perf_counter() - start,
                )
            progress.update(1)
    finally:
        progress.close()
    final_loss = _original_units(config, model, train_loss)
    if math.isnan(heldout):  # resumed at the final step: nothing trained in this call
        heldout = evaluate(model, data)
        final_loss = metrics[-1].get(f"train_{config.loss}", math.nan) if metrics else math.nan
    name = heldout_name(config)
    mse = heldout if name == "heldout_mse" else math.nan
    return TrainResult(model, step, final_loss, mse, metrics, {name: heldout})


def batch_loss(
    config: TrainConfig, model: nn.Module, data: Data | tasks.TaskData, index: torch.Tensor
) -> torch.Tensor:
    """The training loss of the training sequences at `index` (`training_loss`, or a task's
    `verify.tasks.batch_loss`)."""
    if config.task is not None:
        return tasks.batch_loss(model, data, index)
    return training_loss(config, model, data.train[index.to(data.train.device)], data.t)


def _check_model(model, config: TrainConfig) -> None:
    """A prebuilt model `train` can use: an ``nn.Module`` with a ``scale`` buffer (the one-step
    loss works in its units); a task's model is any ``nn.Module``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, found {type(model).__name__}")
    if config.task is None and not isinstance(getattr(model, "scale", None), torch.Tensor):
        raise TypeError(
            f"model {type(model).__name__} has no scale buffer (the data scale the one-step "
            "loss divides by; see OneStepPredictor)"
        )


def _check_device_available(device: str) -> None:
    """A device this machine can run on (CUDA, MPS), or a ValueError naming it."""
    kind = torch.device(device).type
    available = {
        "cuda": torch.cuda.is_available,
        "mps": lambda: torch.backends.mps.is_available(),
    }.get(kind, lambda: True)
    if not available():
        raise ValueError(f"device {device!r} is not available on this machine (use 'cpu')")


def _original_units(config: TrainConfig, model: nn.Module, loss: float) -> float:
    """`training_loss` back in the data's units: the MSE, or the NLL per scalar measurement (a
    task's loss is in its own units already)."""
    if config.task is not None:
        return loss
    scale = model.scale.item()
    return loss * scale**2 if config.loss == "mse" else loss + math.log(scale)


def learning_rate(config: TrainConfig, step: int) -> float:
    """The learning rate of optimizer step ``step + 1`` (``step`` steps taken) under
    ``config.schedule`` (see `TrainConfig`)."""
    if config.schedule == "cosine":
        return config.lr * 0.5 * (1.0 + math.cos(math.pi * step / config.steps))
    if config.schedule == "tail":
        remaining = (config.steps - step) / (TAIL * config.steps)
        return config.lr * min(1.0, remaining)
    return config.lr


@torch.no_grad()
def evaluate(model: nn.Module, data: Data | tasks.TaskData) -> float:
    """Held-out one-step prediction MSE (original units); a task's held-out metric
    (`verify.tasks.evaluate`)."""
    if isinstance(data, tasks.TaskData):
        return tasks.evaluate(model, data)
    return one_step_mse(model, data.holdout, data.t).item()


@torch.no_grad()
def heldout_nll(model: OneStepPredictor, data: Data) -> float:
    """Held-out one-step NLL per scalar measurement (original units, `one_step_nll`)."""
    z = data.holdout
    return one_step_nll(model, z, data.t).sum().item() / (
        z.shape[0] * (z.shape[1] - 1) * z.shape[2]
    )


@torch.no_grad()
def log_likelihood(model: OneStepPredictor, z: torch.Tensor, t=None) -> float:
    """``log L = -sum_paths one_step_nll``: the model's innovations log-likelihood of ``z``
    (original units), comparable with `estimators.fit`'s ``log_likelihood`` (diffuse prior)."""
    return -one_step_nll(model, z, t).sum().item()


def save_checkpoint(
    path: Path, *, model, optimizer, generator, step: int, config: TrainConfig, elapsed: float
) -> None:
    """Write the checkpoint atomically (a temporary file, then ``os.replace``)."""
    state = {
        "format": 1,
        "step": step,
        "elapsed": elapsed,
        "config": config.to_dict(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "generator": generator.get_state(),
    }
    atomic_write(path, lambda fh: torch.save(state, fh), overwrite=True)


CHECKPOINT_KEYS = ("step", "elapsed", "config", "model", "optimizer", "generator")


def load_checkpoint(path: str | os.PathLike) -> dict:
    """The checkpoint dictionary at `path` (`CHECKPOINT_KEYS`); a ValueError naming the file for
    one that cannot be read (truncated, corrupt, not a checkpoint)."""
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, EOFError, RuntimeError, ...
        raise ValueError(
            f"{path} is not a readable checkpoint ({type(exc).__name__}); pass force (--force) "
            "to start the run afresh"
        ) from None
    missing = [
        k for k in CHECKPOINT_KEYS if not isinstance(checkpoint, dict) or k not in checkpoint
    ]
    if missing:
        raise ValueError(f"{path} is not a training checkpoint: missing {', '.join(missing)}")
    step, config = checkpoint["step"], checkpoint["config"]
    if (
        isinstance(step, bool)
        or not isinstance(step, int)
        or step < 0
        or not isinstance(config, dict)
    ):
        raise ValueError(
            f"{path} is not a training checkpoint: step {step!r} (an integer >= 0 expected), "
            f"config of type {type(config).__name__} (a dict expected)"
        )
    return checkpoint


def _prepare_run(run: Path | None, config: TrainConfig, *, resume: bool, force: bool):
    """Check the run directory, write its config; return the checkpoint to resume or None."""
    if run is None:
        return None
    if run.exists() and not run.is_dir():
        raise ValueError(f"out {str(run)!r} exists and is not a directory")
    existing = run.is_dir() and any(run.iterdir())
    if existing and not (resume or force):
        raise FileExistsError(
            f"run directory {str(run)!r} is not empty; pass resume (--resume) to continue it "
            "or force (--force) to start afresh"
        )
    checkpoint = None
    if resume and (run / CHECKPOINT).exists():
        checkpoint = load_checkpoint(run / CHECKPOINT)
        defaults = TrainConfig().to_dict()  # fields added since the checkpoint was written
        saved = {k: v for k, v in {**defaults, **checkpoint["config"]}.items() if k != "steps"}
        wanted = {k: v for k, v in config.to_dict().items() if k != "steps"}
        if saved != wanted:
            diff = ", ".join(
                f"{k}: {saved.get(k)!r} -> {wanted[k]!r}"
                for k in wanted
                if saved.get(k) != wanted[k]
            )
            raise ValueError(f"resume: configuration differs from the checkpoint's ({diff})")
        if config.schedule != "constant" and checkpoint["config"]["steps"] != config.steps:
            raise ValueError(
                f"resume: the {config.schedule} schedule depends on steps; the checkpoint's run "
                f"has steps = {checkpoint['config']['steps']}, found {config.steps}"
            )
        if checkpoint["step"] > config.steps:
            raise ValueError(
                f"resume: the checkpoint is at step {checkpoint['step']}, beyond steps = "
                f"{config.steps}"
            )
    text = json.dumps(config.to_dict(), indent=2).encode()
    atomic_write(run / CONFIG, lambda fh: fh.write(text), overwrite=True)
    return checkpoint


def _truncate_metrics(path: Path, step: int) -> list[dict]:
    """Keep the metrics lines up to `step` (those after it are redone by the resumed run)."""
    lines = []
    if path.exists():
        for raw in path.read_text(errors="replace").splitlines():
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:  # a line cut short by the interruption
                continue
            if not isinstance(line, dict) or not isinstance(line.get("step"), (int, float)):
                continue  # not a metrics record (a damaged file): dropped like a cut line
            if line["step"] <= step:
                lines.append(line)
    text = "".join(json.dumps(line) + "\n" for line in lines).encode()
    atomic_write(path, lambda fh: fh.write(text), overwrite=True)
    return lines


def _progress_bar(total: int, initial: int, quiet: bool):
    from tqdm.auto import tqdm

    disable = quiet or not sys.stderr.isatty()
    return tqdm(total=total, initial=initial, disable=disable, unit="step", desc="train")


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """The metrics lines of a run (``run/metrics.jsonl`` or the file itself)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

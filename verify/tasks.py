"""The synthetic tasks of `verify.datasets` as training problems for `verify.training.train`.

``python -m verify train --task NAME`` (``TrainConfig(task=NAME)``) trains one layer of
`verify.training.LAYERS` on a task instead of a simulated preset, through the same loop (Adam,
seeded batches, checkpoints, ``--resume``). Per task:

==========================  ==============  ===========================================  ======
task                        inputs          target (read where)                          loss
==========================  ==============  ===========================================  ======
``a5``                      60 tokens       the running product, every position         ce
``mqar``                    V tokens        the value at each query key (other: none)    ce
``memorization``            2K + 1 tokens   the value of the key before each [insert]    ce
``irregular-rotation``      (x, y) at t     the frequency class, at the last time        ce
``irregular-forecast``      (y, 0) at t     y(t_future), at a query token (0, 1) there   mse
``logistic-map``            x_n             the next value, after the window             mse
==========================  ==============  ===========================================  ======

The model (`TaskModel`): an input map (a seeded ``nn.Embedding`` for tokens, a seeded linear
map for real features) to width ``E``, the layer, a residual connection, and a seeded linear
read-out to the classes (``ce``: cross-entropy of the logits) or to one value (``mse``). Time
stamps reach the layer where the task has them (irregular sampling); token tasks use the
positions. The held-out metric is the accuracy (``ce``) or the mean squared error (``mse``) on
sequences drawn from a different seed: for ``a5`` the longer test lengths (train short, test
long), for ``memorization`` new sequences over the same dictionary (``dictionary_seed``), for
``logistic-map`` one step ahead of the test windows.

The harness sets each generator's sizes and seed from the configuration (``n_paths`` training
sequences or windows, ``holdout_paths`` held-out ones, seeds derived from ``seed``);
``task_options`` passes the generator's other keywords (``train_length``, ``vocab_size``, ...).
"""

from __future__ import annotations

import inspect
import json
from typing import NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from kernels.layers.parameters import seeded_linear
from verify import datasets

IGNORE_INDEX = datasets.IGNORE_INDEX
# Width of the model when the configuration leaves ``embed_dim`` unset.
DEFAULT_WIDTH = 16


class TaskSpec(NamedTuple):
    """A task's loss (``"ce"`` or ``"mse"``) and the generator keywords the harness sets."""

    loss: str
    reserved: tuple[str, ...]


TASKS: dict[str, TaskSpec] = {
    "a5": TaskSpec("ce", ("seed", "n_train", "n_test")),
    "mqar": TaskSpec("ce", ("seed", "n_sequences")),
    "memorization": TaskSpec("ce", ("seed", "n_sequences")),
    "irregular-rotation": TaskSpec("ce", ("seed", "n_sequences")),
    "irregular-forecast": TaskSpec("mse", ("seed", "n_sequences")),
    "logistic-map": TaskSpec("mse", ("seed", "n_train", "n_test")),
}
METRICS = {"ce": "accuracy", "mse": "mse"}


def check_task(task: str, loss: str | None, options) -> None:
    """ValueError/TypeError naming what is wrong with a task, its loss (None: the task's own)
    or its options."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}; found {task!r}")
    expected = TASKS[task].loss
    if loss is not None and loss != expected:
        raise ValueError(
            f"task {task!r} trains with loss {expected!r} "
            f"({'classification' if expected == 'ce' else 'regression'}); found {loss!r}"
        )
    if not isinstance(options, dict):
        raise TypeError(f"task_options must be a dict, found {type(options).__name__}")
    accepted = inspect.signature(datasets.DATASETS[task]).parameters
    for key, value in options.items():
        if not isinstance(key, str):
            raise ValueError(f"task_options keys must be strings; found {key!r}")
        if key not in accepted:
            raise ValueError(
                f"task_options do not fit task {task!r}: no option {key!r} (its generator "
                f"takes {', '.join(k for k in accepted if k not in TASKS[task].reserved)})"
            )
        if key in TASKS[task].reserved:
            raise ValueError(
                f"task_options may not set {key!r} (set by the harness for task {task!r}: "
                f"{', '.join(TASKS[task].reserved)})"
            )
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"task_options[{key!r}] must be a JSON value; found {type(value).__name__}"
            ) from None


class TaskSplit(NamedTuple):
    """Sequences of a task.

    inputs : ``(N, T)`` int64 tokens, or ``(N, T, c)`` real features.
    t : ``(N, T)`` strictly increasing time stamps, or None (the positions ``0..T-1``).
    targets : ``(N, T)`` int64 classes with `IGNORE_INDEX` where there is none (per position),
        ``(N,)`` int64 classes, or ``(N,)`` real values (per sequence, read at ``readout``).
    readout : ``(N,)`` int64 position each sequence's target is read at; None for per-position
        targets.
    """

    inputs: torch.Tensor
    t: torch.Tensor | None
    targets: torch.Tensor
    readout: torch.Tensor | None

    def take(self, index: torch.Tensor) -> TaskSplit:
        """The sequences at `index` (a batch)."""
        return TaskSplit(*(None if a is None else a[index] for a in self))


class TaskData(NamedTuple):
    """A task's training split and held-out splits, with what the model needs to know.

    vocab : token count (token inputs) or None (real features, ``features`` per step).
    outputs : classes (loss ``ce``) or 1 (loss ``mse``).
    max_len : the longest sequence over every split.
    meta : the generators' recipes (JSON), training then held-out.
    """

    task: str
    loss: str
    train: TaskSplit
    holdouts: tuple[TaskSplit, ...]
    vocab: int | None
    features: int
    outputs: int
    max_len: int
    meta: list

    @property
    def n_train(self) -> int:
        return int(self.train.inputs.shape[0])


def task_seeds(seed: int) -> tuple[int, int]:
    """The (training, held-out) generator seeds derived from `seed` (distinct)."""
    a, b = np.random.SeedSequence([seed, 13]).generate_state(2)
    return int(a), int(b) if b != a else int(b) + 1


def make_task_data(config) -> TaskData:
    """Generate the task of `config` (``task``, ``task_options``, ``n_paths``,
    ``holdout_paths``, ``seed``, ``dtype``, ``device``); deterministic in ``config.seed``."""
    return task_data(
        config.task,
        n_train=config.n_paths,
        n_holdout=config.holdout_paths,
        seed=config.seed,
        options=config.task_options,
        loss=config.loss,
        dtype=config.dtype,
        device=config.device,
    )


def task_data(
    task: str,
    *,
    n_train: int,
    n_holdout: int,
    seed: int,
    options: dict | None = None,
    loss: str | None = None,
    dtype: str = "float32",
    device: str = "cpu",
) -> TaskData:
    """The task `task` of `TASKS` with ``n_train`` training and ``n_holdout`` held-out
    sequences (windows for ``logistic-map``), generated from seeds derived from ``seed``
    (`task_seeds`); ``options`` go to its generator and ``loss`` (None: the task's own) must
    be the task's (`check_task` says what is wrong)."""
    options = {} if options is None else dict(options)
    check_task(task, loss, options)
    splits, metas, vocab, outputs = _generate(task, options, n_train, n_holdout, seed)
    torch_dtype = {"float32": torch.float32, "float64": torch.float64}[dtype]
    splits = [_to(s, torch_dtype, torch.device(device)) for s in splits]
    features = 0 if vocab is not None else int(splits[0].inputs.shape[-1])
    max_len = max(int(s.inputs.shape[1]) for s in splits)
    loss, holdouts = TASKS[task].loss, tuple(splits[1:])
    return TaskData(task, loss, splits[0], holdouts, vocab, features, outputs, max_len, metas)


def _generate(task: str, options: dict, n_train: int, n_holdout: int, seed: int):
    """``(splits, metas, vocab, outputs)``: the training split first, then the held-out ones."""
    seed_train, seed_hold = task_seeds(seed)
    sizes = ((n_train, seed_train), (n_holdout, seed_hold))
    if task == "a5":
        data = datasets.a5_composition(
            n_train=n_train, n_test=n_holdout, seed=seed_train, **options
        )
        splits = [_tokens(s.tokens, s.targets) for s in (data.train, *data.tests)]
        return splits, [data.meta], datasets.A5_ORDER, datasets.A5_ORDER
    if task == "logistic-map":
        data = _logistic_map(n_train, n_holdout, seed_train, options)
        splits = [
            _windows(data.train_inputs, data.train_targets),
            _windows(data.test_context, data.test_future[:, 0]),
        ]
        return splits, [data.meta], None, 1
    made = [datasets.DATASETS[task](n, seed=seed, **options) for n, seed in sizes]
    metas = [m.meta for m in made]
    if task in ("mqar", "memorization"):
        vocab = made[0].meta["vocab_size"]
        return [_tokens(m.inputs, m.labels) for m in made], metas, vocab, vocab
    if task == "irregular-rotation":
        return [_rotation(m) for m in made], metas, None, made[0].meta["n_classes"]
    return [_forecast(m) for m in made], metas, None, 1


def _tokens(tokens: np.ndarray, targets: np.ndarray) -> TaskSplit:
    return TaskSplit(torch.as_tensor(tokens), None, torch.as_tensor(targets), None)


def _rotation(data: datasets.IrregularRotation) -> TaskSplit:
    """Observations at their times; the class is read at the last stamp (the query time)."""
    N, L = data.t.shape
    readout = torch.full((N,), L - 1, dtype=torch.int64)
    return TaskSplit(
        torch.as_tensor(data.x), torch.as_tensor(data.t), torch.as_tensor(data.labels), readout
    )


def _forecast(data: datasets.IrregularForecast) -> TaskSplit:
    """Features ``(y, 0)`` at the observation times, then a query token ``(0, 1)`` at
    ``t_future`` where the target is read; after it, zero padding at times ``t_future + 1, +2,
    ...`` (strictly increasing, and never seen by a causal layer at the query)."""
    N, L = data.t.shape
    t_future = float(data.meta["t_future"])
    rows, lengths = np.arange(N), data.lengths
    # position j >= length holds t_future + (j - length): the query, then the padding
    times = t_future + (np.arange(L + 1)[None, :] - lengths[:, None]).astype(np.float64)
    times[:, :L] = np.where(data.mask, data.t, times[:, :L])
    values = np.zeros((N, L + 1, 2))
    values[:, :L, 0] = np.where(data.mask, data.y, 0.0)
    values[rows, lengths, 1] = 1.0
    return TaskSplit(
        torch.as_tensor(values),
        torch.as_tensor(times),
        torch.as_tensor(data.target),
        torch.as_tensor(data.lengths, dtype=torch.int64),
    )


def _logistic_map(n_windows: int, n_test: int, seed: int, options: dict):
    """`verify.datasets.logistic_map` with ``n_windows`` training windows (``n_train = n_windows
    + window`` orbit values) and ``n_test`` test windows; unless given, ``n_steps`` leaves twice
    ``window + horizon`` values after the training part for the test windows."""
    window = options.get("window", 16)
    horizon = options.get("horizon", 50)
    n_train = n_windows + window if isinstance(window, int) else n_windows
    if "n_steps" not in options and isinstance(horizon, int) and isinstance(window, int):
        options = {**options, "n_steps": n_train + 2 * (window + horizon)}
    return datasets.logistic_map(n_train=n_train, n_test=n_test, seed=seed, **options)


def _windows(inputs: np.ndarray, targets: np.ndarray) -> TaskSplit:
    N, W = inputs.shape
    readout = torch.full((N,), W - 1, dtype=torch.int64)
    return TaskSplit(torch.as_tensor(inputs[..., None]), None, torch.as_tensor(targets), readout)


def _to(split: TaskSplit, dtype, device) -> TaskSplit:
    def convert(a):
        if a is None:
            return None
        return a.to(dtype=dtype, device=device) if a.dtype.is_floating_point else a.to(device)

    return TaskSplit(*(convert(a) for a in split))


def seeded_embedding(vocab: int, width: int, *, generator, dtype, device) -> nn.Embedding:
    """``nn.Embedding(vocab, width)`` with its default ``N(0, 1)`` initialisation drawn from
    `generator` (on the CPU, then moved)."""
    embedding = nn.utils.skip_init(nn.Embedding, vocab, width, device="cpu", dtype=dtype)
    with torch.no_grad():
        nn.init.normal_(embedding.weight, generator=generator)
    return embedding.to(device)


class TaskModel(nn.Module):
    """``inputs (N, T[, c])`` -> ``(N, T, outputs)``: ``readout(h + layer(h, t))`` with
    ``h = embed(inputs)`` (module docstring).

    Parameters
    ----------
    data : the task (`TaskData`: vocabulary or features, outputs).
    layer : the attention layer, an ``nn.Module`` on ``(N, T, width)`` called as
        ``layer(h, t) -> (out, weights)`` (`verify.training.build_layer` builds one).
    width : its width ``E``.
    generator : ``torch.Generator`` (CPU) for the input map's and the read-out's initialisation.
    dtype, device : of the parameters.
    """

    def __init__(
        self,
        data: TaskData,
        layer: nn.Module,
        width: int,
        *,
        generator: torch.Generator | None = None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        kw = {"generator": generator, "dtype": dtype}
        if data.vocab is not None:
            self.embed = seeded_embedding(data.vocab, width, device=device, **kw)
        else:
            self.embed = seeded_linear(data.features, width, device="cpu", **kw).to(device)
        self.layer = layer
        self.readout = seeded_linear(width, data.outputs, device="cpu", **kw).to(device)

    def forward(self, inputs: torch.Tensor, t: torch.Tensor | None = None) -> torch.Tensor:
        h = self.embed(inputs)
        y, _ = self.layer(h, t)
        return self.readout(h + y)


def _outputs(model: nn.Module, split: TaskSplit, loss: str):
    """(predictions, targets) where there are targets: logits ``(n, C)`` and classes ``(n,)``
    (``ce``), or values ``(n,)`` and targets ``(n,)`` (``mse``)."""
    out = model(split.inputs, split.t)
    if split.readout is None:  # per-position classes
        keep = split.targets != IGNORE_INDEX
        return out[keep], split.targets[keep]
    rows = torch.arange(out.shape[0], device=out.device)
    picked = out[rows, split.readout]
    return (picked if loss == "ce" else picked[:, 0]), split.targets


def batch_loss(model: nn.Module, data: TaskData, index: torch.Tensor) -> torch.Tensor:
    """The training loss of the sequences at `index`: mean cross-entropy over the targets
    (``ce``) or mean squared error (``mse``)."""
    prediction, target = _outputs(model, data.train.take(index), data.loss)
    if data.loss == "ce":
        return F.cross_entropy(prediction, target)
    return torch.mean((prediction - target) ** 2)


@torch.no_grad()
def evaluate(model: nn.Module, data: TaskData) -> float:
    """The held-out metric over every held-out target: accuracy (``ce``) or MSE (``mse``)."""
    total, count = 0.0, 0
    for split in data.holdouts:
        prediction, target = _outputs(model, split, data.loss)
        if data.loss == "ce":
            total += float((prediction.argmax(-1) == target).sum())
        else:
            total += float(((prediction - target) ** 2).sum())
        count += int(target.shape[0])
    return total / max(count, 1)

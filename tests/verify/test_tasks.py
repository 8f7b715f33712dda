"""The synthetic tasks trained through `verify.training.train` and ``python -m verify train
--task`` (`verify.tasks`): every task end to end at a tiny size, resume, refusals, and a task
that learns."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from verify import tasks
from verify.cli import main
from verify.training import TrainConfig, build_model, make_data, read_metrics, train

# Tiny generator options per task (the harness sets sizes and seeds).
TINY_OPTIONS = {
    "a5": ["train_length=4", "test_lengths=[6]"],
    "mqar": ["vocab_size=32", "n_pairs=4", "seq_len=20"],
    "memorization": ["n_keys=6", "seq_len=10"],
    "irregular-rotation": ["n_classes=4", "n_steps=8"],
    "irregular-forecast": ["gap_scale=0.5"],
    "logistic-map": ["window=6", "horizon=4"],
}
SIZES = ["--paths", "8", "--batch-size", "4", "--holdout-paths", "4", "--embed-dim", "8"]


def _options(task: str) -> list[str]:
    return [arg for option in TINY_OPTIONS[task] for arg in ("--task-option", option)]


@pytest.mark.parametrize("task", list(tasks.TASKS))
def test_cli_trains_every_task(task, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--task", task, "--layer", "afa", "--steps", "3", "--eval-every", "3"]
    assert main([*argv, *SIZES, *_options(task), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    loss = tasks.TASKS[task].loss
    metric = tasks.METRICS[loss]
    assert printed.startswith(f"afa on task {task}: step 3, train {loss.upper()} ")
    (line,) = read_metrics(out)
    assert set(line) == {"step", f"train_{loss}", f"heldout_{metric}", "elapsed_s"}
    value = line[f"heldout_{metric}"]
    assert np.isfinite(value) and (0 <= value <= 1 if metric == "accuracy" else value > 0)
    saved = json.loads((out / "config.json").read_text())
    assert saved["task"] == task and saved["loss"] == loss


def test_a_task_run_resumes_bit_for_bit(tmp_path):
    config = TrainConfig(
        task="a5",
        loss="ce",
        layer="softmax",
        steps=6,
        n_paths=8,
        batch_size=4,
        holdout_paths=4,
        eval_every=2,
        checkpoint_every=3,
        task_options={"train_length": 4, "test_lengths": [6]},
    )
    whole = train(config, quiet=True)
    again = train(config, quiet=True)
    with pytest.raises(KeyboardInterrupt):

        def stop_at_4(step, model):
            if step == 4:
                raise KeyboardInterrupt

        train(config, tmp_path / "run", quiet=True, callback=stop_at_4)
    resumed = train(config, tmp_path / "run", resume=True, quiet=True)
    for other in (again, resumed):
        for (name, a), b in zip(
            whole.model.state_dict().items(), other.model.state_dict().values(), strict=True
        ):
            assert torch.equal(a, b), name
    assert [m["step"] for m in read_metrics(tmp_path / "run")] == [2, 4, 6]
    assert resumed.heldout == whole.heldout and np.isnan(whole.heldout_mse)


def test_a_regression_task_learns():
    """Next value of the logistic map from a window of 8: after 60 steps the held-out MSE is
    below a quarter of the targets' variance (the MSE of predicting their mean); measured
    0.1 of it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        config = TrainConfig(
            task="logistic-map",
            layer="softmax",
            steps=60,
            lr=2e-2,
            n_paths=64,
            batch_size=16,
            holdout_paths=32,
            eval_every=60,
            task_options={"window": 8, "horizon": 5},
        )
        result = train(config, quiet=True)
    finally:
        torch.set_num_threads(threads)
    data = make_data(config)
    variance = float(torch.var(data.holdouts[0].targets))
    assert result.heldout["heldout_mse"] < 0.25 * variance
    assert result.heldout_mse == result.heldout["heldout_mse"]


def test_forecast_sequences_end_in_a_query_at_the_target_time():
    config = TrainConfig(task="irregular-forecast", n_paths=6, holdout_paths=2, batch_size=2)
    data = make_data(config)
    split = data.train
    assert torch.all(torch.diff(split.t, dim=1) > 0)  # strictly increasing, padding included
    rows = torch.arange(split.inputs.shape[0])
    assert torch.all(split.inputs[rows, split.readout, 1] == 1)  # the query flag
    assert torch.all(split.t[rows, split.readout] == 7.0)  # at t_future
    assert int(split.inputs[..., 1].sum()) == split.inputs.shape[0]  # one query per sequence
    model = build_model(config, data)
    assert isinstance(model, tasks.TaskModel)
    assert model(split.inputs, split.t).shape == (*split.inputs.shape[:2], 1)


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        (["--task", "nope"], "task must be one of a5, mqar"),
        (["--task", "a5", "--preset", "ou"], "pass --preset or --task, not both"),
        (["--task-option", "window=8"], "--task-option needs --task"),
        (["--task", "a5", "--loss", "mse"], "task 'a5' trains with loss 'ce'"),
        (["--task", "a5", "--task-option", "seed=1"], "task_options may not set 'seed'"),
        (["--task", "a5", "--task-option", "wings=2"], "task_options do not fit task 'a5'"),
        (["--task", "a5", "--task-option", "train_length=x"], "VALUE must be JSON"),
        (
            ["--task", "a5", "--task-option", "test_lengths=[2]"],
            "test_lengths must all exceed train_length",
        ),
        (["--loss", "ce"], "loss 'ce' (cross-entropy) needs a classification task"),
    ],
)
def test_cli_bad_task_input_one_line_exit_2(tmp_path, capsys, bad, words):
    assert main(["train", "--out", str(tmp_path / "run"), *bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_task_config_names_its_loss():
    with pytest.raises(ValueError, match="task 'mqar' trains with loss 'ce'"):
        TrainConfig(task="mqar")
    with pytest.raises(ValueError, match="task_options need a task"):
        TrainConfig(task_options={"window": 8})
    assert TrainConfig(task="logistic-map").loss == "mse"

"""Training harness: determinism, bit-exact resume, learning, atomic checkpoints, CLI."""

import json
import math
import os

import pytest
import torch

from verify import training
from verify.cli import main
from verify.training import OneStepPredictor, TrainConfig, read_metrics, train

# A tiny run: 16 paths of afa-2d (101 measurements each), batches of 4.
TINY = dict(layer="afa", preset="afa-2d", variant="b", n_paths=16, holdout_paths=4, batch_size=4)


def _params(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_identical(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs"


def test_same_seed_same_parameters_other_seed_differs():
    config = TrainConfig(**TINY, steps=6, eval_every=3)
    first, second = train(config, quiet=True), train(config, quiet=True)
    _assert_identical(_params(first.model), _params(second.model))
    assert first.metrics == [
        {**m, "elapsed_s": n["elapsed_s"]}
        for m, n in zip(second.metrics, first.metrics, strict=True)
    ]
    other = train(TrainConfig(**{**TINY, "seed": 1}, steps=6, eval_every=3), quiet=True)
    assert any(not torch.equal(v, _params(other.model)[k]) for k, v in _params(first.model).items())


def test_global_rng_untouched():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    train(TrainConfig(**TINY, steps=2), quiet=True)
    assert torch.equal(torch.get_rng_state(), before)


def test_resume_equals_uninterrupted_bit_exact(tmp_path):
    config = TrainConfig(**TINY, steps=20, eval_every=2, checkpoint_every=5)
    whole = train(config, tmp_path / "whole", quiet=True)

    class Interrupt(Exception):
        pass

    def stop_at_13(step, model):
        if step == 13:
            raise Interrupt

    run = tmp_path / "cut"
    with pytest.raises(Interrupt):
        train(config, run, quiet=True, callback=stop_at_13)
    assert training.load_checkpoint(run / "checkpoint.pt")["step"] == 10
    resumed = train(config, run, resume=True, quiet=True)
    assert resumed.step == 20
    _assert_identical(_params(whole.model), _params(resumed.model))
    # The metrics file is the uninterrupted run's (lines after step 10 redone once, not twice).
    strip = [{k: v for k, v in m.items() if k != "elapsed_s"} for m in read_metrics(run)]
    want = [
        {k: v for k, v in m.items() if k != "elapsed_s"} for m in read_metrics(tmp_path / "whole")
    ]
    assert strip == want and [m["step"] for m in strip] == list(range(2, 21, 2))
    # Extending a finished run continues it like a longer uninterrupted run.
    longer = train(TrainConfig(**TINY, steps=24, eval_every=2, checkpoint_every=5), quiet=True)
    extended = train(
        TrainConfig(**TINY, steps=24, eval_every=2, checkpoint_every=5),
        run,
        resume=True,
        quiet=True,
    )
    _assert_identical(_params(longer.model), _params(extended.model))


def test_resume_refuses_a_different_configuration(tmp_path):
    train(TrainConfig(**TINY, steps=2), tmp_path, quiet=True)
    with pytest.raises(ValueError, match="lr"):
        train(TrainConfig(**TINY, steps=4, lr=0.5), tmp_path, resume=True, quiet=True)


def test_afa_learns_afa_2d_within_a_few_dozen_steps():
    # Predicting with the untrained layer costs ~|z|^2 ~ 200 per coordinate (radius 17-23); a
    # layer that has learned the rotation and decay gets within a few units of eta^2 = 0.5.
    config = TrainConfig(
        layer="afa",
        preset="afa-2d",
        variant="b",
        n_paths=64,
        holdout_paths=16,
        batch_size=16,
        steps=60,
        lr=0.05,
        eval_every=10,
    )
    result = train(config, quiet=True)
    heldout = [m["heldout_mse"] for m in result.metrics]
    assert heldout[0] > 10.0
    assert result.heldout_mse < 5.0
    assert result.heldout_mse < heldout[0] / 5


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    config = TrainConfig(**TINY, steps=4, checkpoint_every=2)
    train(config, tmp_path, quiet=True)
    good = (tmp_path / "checkpoint.pt").read_bytes()

    def broken_save(obj, fh, *args, **kwargs):
        fh.write(b"partial checkpoint bytes")
        raise OSError("disk full")

    monkeypatch.setattr(training.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        train(TrainConfig(**TINY, steps=6, checkpoint_every=2), tmp_path, resume=True, quiet=True)
    assert (tmp_path / "checkpoint.pt").read_bytes() == good
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt", "config.json", "metrics.jsonl"]
    assert training.load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 4


def test_refuses_to_overwrite_a_run_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        train(TrainConfig(**TINY, steps=2), tmp_path, quiet=True)
    assert os.listdir(tmp_path) == ["notes.txt"]
    train(TrainConfig(**TINY, steps=2), tmp_path, force=True, quiet=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"  # force replaces run files only
    assert (tmp_path / "checkpoint.pt").exists()


def test_metrics_lines_parse(tmp_path):
    train(TrainConfig(**TINY, steps=6, eval_every=2), tmp_path, quiet=True)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    parsed = [json.loads(line) for line in lines]
    assert [m["step"] for m in parsed] == [2, 4, 6]
    for m in parsed:
        assert set(m) == {"step", "train_mse", "heldout_mse", "elapsed_s"}
        assert m["heldout_mse"] > 0 and m["elapsed_s"] >= 0
    assert json.loads((tmp_path / "config.json").read_text())["steps"] == 6


def test_cli_trains_and_writes_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--layer", "afa", "--preset", "afa-2d", "--variant", "b", "--steps", "3"]
    argv += ["--paths", "8", "--batch-size", "4", "--holdout-paths", "2", "--out", str(out)]
    assert main(argv) == 0
    assert "held-out one-step MSE" in capsys.readouterr().out
    assert read_metrics(out)[-1]["step"] == 3
    assert main(argv) == 2  # the directory exists now
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--resume" in err
    assert main([*argv[:8], "5", *argv[9:], "--resume"]) == 0
    assert read_metrics(out)[-1]["step"] == 5


@pytest.mark.parametrize(
    "bad, words",
    [
        (["--layer", "nope"], "layer must be one of"),
        (["--preset", "nope"], "unknown system 'nope'"),
        (["--variant", "z"], "unknown variant 'z'"),
        (["--steps", "0"], "steps must be an integer >= 1"),
        (["--lr", "-1"], "lr must be"),
        (["--steps", "x"], "invalid int value"),
        (["--schedule", "linear"], "schedule must be one of constant, cosine, tail"),
        (["--layer-option", "nu"], "--layer-option expects KEY=VALUE"),
        (["--layer-option", "nu=one"], "VALUE must be JSON"),
        (["--layer-option", "embed_dim=4"], "layer_options may not set 'embed_dim'"),
        (["--layer-option", "wings=2"], "layer_options do not fit layer 'afa'"),
    ],
)
def test_cli_bad_input_one_line_exit_2(tmp_path, capsys, bad, words):
    assert main(["train", "--out", str(tmp_path / "run"), *bad]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and words in captured.err
    assert "Traceback" not in captured.err
    assert not (tmp_path / "run").exists()


def test_cosine_schedule_starts_at_lr_and_ends_near_zero():
    config = TrainConfig(**TINY, steps=4, lr=0.02, schedule="cosine")
    rates = [training.learning_rate(config, k) for k in range(4)]
    assert rates[0] == pytest.approx(0.02)
    assert rates[2] == pytest.approx(0.01)
    assert rates == sorted(rates, reverse=True) and rates[-1] < 0.02 * 0.2
    constant = TrainConfig(**TINY, steps=4, lr=0.02)
    assert {training.learning_rate(constant, k) for k in range(4)} == {0.02}


def test_tail_schedule_is_constant_then_linear_to_zero():
    config = TrainConfig(**TINY, steps=10, lr=0.05, schedule="tail")
    rates = [training.learning_rate(config, k) for k in range(10)]
    # TAIL = 0.2: steps 0..8 at lr (the decay starts at 8 = (1 - TAIL) * 10), then 0.5 lr
    assert rates[:9] == [0.05] * 9
    assert rates[9] == pytest.approx(0.025)


def test_cosine_run_resumes_bit_exact_but_not_with_other_steps(tmp_path):
    config = TrainConfig(**TINY, steps=6, eval_every=2, checkpoint_every=3, schedule="cosine")
    whole = train(config, quiet=True)
    steps_seen = []
    with pytest.raises(KeyboardInterrupt):

        def stop_at_4(step, model):
            steps_seen.append(step)
            if step == 4:
                raise KeyboardInterrupt

        train(config, tmp_path / "run", quiet=True, callback=stop_at_4)
    resumed = train(config, tmp_path / "run", resume=True, quiet=True)
    _assert_identical(_params(whole.model), _params(resumed.model))
    longer = TrainConfig(**{**config.to_dict(), "steps": 8})
    with pytest.raises(ValueError, match="cosine schedule depends on steps"):
        train(longer, tmp_path / "run", resume=True, quiet=True)


def test_layer_options_reach_the_layer_and_are_recorded(tmp_path):
    config = TrainConfig(**TINY, steps=2, layer_options={"nu": 2.0, "learn_nu": True})
    result = train(config, tmp_path / "run", quiet=True)
    names = dict(result.model.named_parameters())
    assert "layer.raw_nu" in names  # learn_nu=True adds the robust scale
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["layer_options"] == {"nu": 2.0, "learn_nu": True}
    with pytest.raises(ValueError, match="configuration differs"):
        train(TrainConfig(**TINY, steps=3), tmp_path / "run", resume=True, quiet=True)


def test_a_bool_learning_rate_and_a_non_positive_scale_are_refused():
    """`TrainConfig(lr=True)` is not a rate (bool is an int in Python); a model's data scale
    must be a finite number > 0 (it divides the data)."""
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        TrainConfig(lr=True)
    for scale in (-1.0, 0.0, math.inf, math.nan, True):
        with pytest.raises(ValueError, match="scale must be a finite number > 0"):
            OneStepPredictor("afa", 2, scale=scale)
    assert float(OneStepPredictor("afa", 2, scale=2.5).scale) == 2.5


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"garbage", "is not a readable checkpoint"),
        (b"", "is not a readable checkpoint"),
        (None, "is not a training checkpoint: missing step"),
    ],
)
def test_resume_from_a_broken_checkpoint_is_refused_by_name(tmp_path, capsys, content, words):
    """A truncated, corrupt or keyless ``checkpoint.pt``: `train` raises a ValueError naming the
    file, and the CLI prints one line and exits 2 (no traceback); the run is left as it was."""
    train(TrainConfig(**TINY, steps=2), tmp_path, quiet=True)
    path = tmp_path / training.CHECKPOINT
    if content is None:
        torch.save({"a": 1}, path)
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    with pytest.raises(ValueError, match=words):
        train(TrainConfig(**TINY, steps=4), tmp_path, resume=True, quiet=True)
    assert main(["train", "--out", str(tmp_path), "--resume", "--steps", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err
    assert path.read_bytes() == before


def test_resuming_a_finished_run_reports_its_recorded_loss(tmp_path):
    """Nothing left to train: the result carries the last recorded training loss, not NaN."""
    first = train(TrainConfig(**TINY, steps=2, eval_every=1), tmp_path, quiet=True)
    again = train(TrainConfig(**TINY, steps=2, eval_every=1), tmp_path, resume=True, quiet=True)
    assert again.step == 2 and again.train_loss == pytest.approx(first.train_loss)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_an_unavailable_device_is_refused_before_any_file(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "run"), "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "device 'cuda' is not available" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_a_prebuilt_model_trains_as_the_harness_model(tmp_path):
    """`train(config, model=...)`: the harness's own model passed in trains to the same bits
    as `train(config)`; the loop is the one loop (Fig. 3's softmax stack goes through it)."""
    config = TrainConfig(**TINY, steps=4, eval_every=2)
    built = training.build_model(config, training.make_data(config))
    given = train(config, model=built, quiet=True)
    assert given.model is built
    _assert_identical(_params(given.model), _params(train(config, quiet=True).model))
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        train(config, model="afa", quiet=True)
    with pytest.raises(TypeError, match="has no scale buffer"):
        train(config, model=torch.nn.Linear(2, 2), quiet=True)


def test_projections_use_the_one_seeded_linear():
    """With ``embed_dim`` set the projections are `kernels.layers.parameters.seeded_linear`
    draws from the model's generator (nothing from the global RNG)."""
    from kernels.layers.parameters import seeded_linear

    torch.manual_seed(5)
    before = torch.get_rng_state()
    model = OneStepPredictor("afa", 2, embed_dim=4, generator=torch.Generator().manual_seed(3))
    assert torch.equal(torch.get_rng_state(), before)
    layer_draws = torch.Generator().manual_seed(3)
    training.build_layer("afa", 4, generator=layer_draws)  # the layer draws first
    expected = seeded_linear(2, 4, generator=layer_draws)
    torch.testing.assert_close(model.in_proj.weight, expected.weight, rtol=0, atol=0)
    torch.testing.assert_close(model.in_proj.bias, expected.bias, rtol=0, atol=0)

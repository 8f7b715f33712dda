"""Every quick convergence bound rejects a broken trainer (issue 13, "honest bounds").

For each registered `mle_convergence` check against the Kalman optimum, models that did not
learn the system must fail the quick bound: the untrained model, the trained model with its
per-head dynamics shuffled across heads, and a model trained on another preset
(`verify.mle_convergence.negative_controls`). The parameter checks must reject the untrained
and the shuffled model too. The trained runs are the ones the registered checks use (cached
per process), so these tests cost the controls only.
"""

import dataclasses

import pytest

from verify.checks.mle_convergence import BOUNDS, PARAMETER_BOUNDS
from verify.mle_convergence import (
    CASES,
    _shuffled,
    negative_controls,
    parameter_recovery,
    trained_case,
)
from verify.training import build_model, make_data

KALMAN_CASES = [name for name in BOUNDS if CASES[name].reference == "kalman"]


@pytest.mark.parametrize("name", KALMAN_CASES)
def test_quick_ratio_bound_rejects_every_control(name):
    quick_bound = BOUNDS[name][0]
    controls = negative_controls(name)
    assert {"untrained", "other preset"} <= set(controls)
    for control, ratio in controls.items():
        assert ratio > quick_bound, f"{name}: {control} model at {ratio:.3f} passes {quick_bound}"


@pytest.mark.parametrize("name", list(PARAMETER_BOUNDS))
def test_quick_parameter_bound_rejects_untrained_and_shuffled(name):
    quick_bound = PARAMETER_BOUNDS[name][0]
    report = trained_case(name, quick=True)
    untrained = build_model(report.config, make_data(report.config))
    shuffled = _shuffled(report.model, report.config.num_heads)
    controls = {"untrained": untrained, "shuffled heads": shuffled}
    for control, model in controls.items():
        if model is None:  # one head: nothing to shuffle
            assert report.config.num_heads == 1, f"{name}: no shuffled control"
            continue
        recovery = parameter_recovery(dataclasses.replace(report, model=model))
        assert recovery.max_z > quick_bound, f"{name}: {control} max |z| {recovery.max_z:.2f}"

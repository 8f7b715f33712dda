"""Trained layers approach the optimal one-step predictor and learn the dynamics (issue 7).

For every `verify.mle_convergence.CASES` entry a check trains the layer (quick or full length)
and bounds the held-out one-step MSE ratio to its reference (the Kalman filter with the true
parameters for linear systems, the mean-field RT estimator with the true parameters for the
radial-tangential one). The afa-2d b run also checks the learned dynamics against the truth
and the parameter MLE.

How the bounds were set (`benchmarks/bench_training.py`, recorded in BENCHMARKS.md,
"Training"): each case was trained with seeds 0, 1, 2 at both lengths. A full bound is the
largest of the three ratios plus three times their range (the seed-to-seed spread), rounded up
to a multiple of 0.05 (for afa-2d b that gives 1.10, issue 7's target); the well-specified cases
(whose family holds the Kalman filter, `verify.well_specified`) are held to issue 13's 1.01.
A quick bound is the same spread rule, capped by the negative controls
(`verify.mle_convergence.negative_controls`: the untrained model, the trained model with its
heads' dynamics shuffled, a model trained on another preset): at most the geometric mean of the
largest trained ratio and the smallest control ratio, rounded down to 0.05, so that the bound
sits as far (in ratio) from a broken trainer as from the trained one.
`tests/verify/test_negative_controls.py` asserts every control fails its quick bound. The
checks run seed 0. For the Kalman references the ratio must also be >= 0.95: no predictor beats
the Kalman filter in expectation (the held-out set has 64 paths of about 100 one-step errors
each, whose MSE has a relative standard error of about 2%), so a clearly smaller ratio means the
model sees the target it predicts (a leak). The RT reference is not an optimum (it ignores the
correlation of transported measurements, and the trained RT-AFA beats it), so that check has
no lower bound and its id says what it measures (``-vs-mean-field``).
"""

from __future__ import annotations

from verify.consistency import SLOPE, SLOPE_BAND, consistency
from verify.mle_convergence import CASES, learned_dynamics, parameter_recovery, trained_case
from verify.registry import Outcome, check, seed

LOWER_BOUND = 0.95

# case -> (quick bound, full bound); measured ratios (seeds 0, 1, 2) and the smallest control.
BOUNDS: dict[str, tuple[float, float]] = {
    # sigma^2 fixed at 0: quick 1.032 1.046 1.104 (control 60); full 1.017 1.018 1.019, held to
    # issue 13's target 1.02 (the true-parameter layer: 1.016 1.017 1.019)
    "afa-2d-a": (1.35, 1.02),
    "afa-2d-b": (1.55, 1.10),  # quick 1.37 1.31 1.32 (control 96); full 1.031 1.037 1.029
    "afa-2d-c": (1.80, 1.15),  # quick 1.07 1.18 1.25 (control 27); full 1.044 1.046 1.027
    "rotation-3d": (1.05, 1.05),  # quick 1.008 1.014 1.006 (control 1.71); full 1.003-1.005
    "ou": (1.20, 1.10),  # quick 1.064 1.011 1.023 (control 1.46); full 1.004 1.003 1.019
    "rt-sphere-3d-b": (1.45, 1.10),  # quick 1.28 1.26 1.23; full 0.82 0.75 0.74
    "unrolled-afa-ou": (1.05, 1.01),  # quick 1.0001 0.9999 1.0003 (control 1.22); full 1.000
    "unrolled-afa-ou-nll": (1.05, 1.01),  # quick 1.0002 1.0000 1.0003 (control 1.21); full 1.000
    # unitary basis: quick 1.0000 1.0002 1.0001 (controls 5.3, 1.71); full 1.0000 1.0002 1.0000
    "unrolled-afa-rotation-3d": (1.05, 1.01),
    "kla-ou": (1.10, 1.01),  # quick 1.058 1.058 (control 1.29); full 1.003 1.004
}
# Well-specified cases: the target at full length is <= 1.01 x Kalman.

SOURCES = {
    "afa-2d": seed(0, "2.3, 3.1, 4.2 (Fig. 1)"),
    "rotation-3d": seed(0, "3.6, 5.1 (isotropic family)"),
    "ou": seed(1, "eqs. (7)-(8) (OU prior)"),
    "unrolled": seed(0, "B.2 (Algorithm 4, the recursive form)"),
    "rt-sphere-3d": seed(3, "Fig. 1, eq. 9 (RT model)"),
}


def _ratio_check(name: str) -> None:
    case = CASES[name]
    quick_bound, full_bound = BOUNDS[name]
    lower = LOWER_BOUND if case.reference == "kalman" else 0.0
    # The mean-field RT estimator is not an optimum (the trained layer beats it): the check
    # measures the ratio to it, not convergence, and its id says so.
    suffix = "" if case.reference == "kalman" else "-vs-mean-field"
    source = SOURCES["unrolled" if case.base["layer"] == "unrolled-afa" else case.base["preset"]]

    @check(
        f"mle_convergence.{name}{suffix}",
        title=f"{case.base['layer']} trained on {name}: held-out one-step MSE / {case.reference} "
        f"within [{lower}, bound] (quick {quick_bound}, full {full_bound}; residual: ratio / "
        "bound)",
        source=source,
        kind="numeric",
        tolerance=1.0,
    )
    def _check(quick: bool) -> Outcome:
        report = trained_case(name, quick=quick)
        ratio = report.ratios[case.reference]
        bound = quick_bound if quick else full_bound
        residual = ratio / bound if ratio >= lower else float("inf")
        return Outcome(residual, report.summary())


for _name in BOUNDS:
    _ratio_check(_name)


MLE_SIGMAS = 4.0


@check(
    "mle_convergence.afa-2d-b-learned-dynamics",
    title="afa-2d b: the parameter MLE recovers decay, |omega| and sigma^2/eta^2 within 4 se; "
    "the trained AFA predicts better than the AFA with the true parameters (full run), so "
    "training does not pull it to them (residual: max(|MLE - truth| / 4 se, full: MSE ratio "
    "to the true-parameter layer))",
    source=seed(0, "2.3, 3.1, 4.2"),
    kind="statistical",
    tolerance=1.0,
)
def _afa_2d_b_learned_dynamics(quick: bool) -> Outcome:
    """The learned-vs-true table of the afa-2d b run (`learned_dynamics`).

    The parameter MLE (`estimators.fit`, the spiral family with the preset's eigenbasis, on the
    256 exactly simulated training paths) must lie within 4 standard errors of the truth for
    every row: the data identify the dynamics. The layer with the true parameters (``W_v =
    S^-1``, ``W_p = S``, ``nu = inf``) computes the batch MLE (chain of trust link 4, tested in
    ``tests/kernels``), whose one-step MSE is the ``"mle"`` reference; a trained layer below it
    (ratio < 1, asserted for the full run) has found parameters that predict better than the
    true ones within the layer's family, so the loss does not identify the true parameters:
    the mean-field weights ignore the correlation of pulled-forward measurements under process
    noise, and the learned decay, frequency and noise ratio compensate. The learned values are
    reported in the detail, not bounded. Measured at full length, seeds 0, 1, 2 (truth 0.1, 1,
    0.6): decay 0.25, 0.53, 0.35; |omega| 0.97, 0.66, 0.99; sigma^2/eta^2 0.033, 0.035, 0.018,
    all at held-out MSE 1.03-1.04 x Kalman and 0.67-0.69 x the true-parameter layer: the loss is
    nearly flat along these directions, and the MLE's z-scores stay below 2.
    """
    report = trained_case("afa-2d-b", quick=quick)
    rows = learned_dynamics(report)
    z = max(abs(r.mle - r.truth) / r.mle_se for r in rows)
    residual = z / MLE_SIGMAS
    if not quick:
        residual = max(residual, report.ratios["mle"])
    table = "; ".join(
        f"{r.name}: truth {r.truth:.4g}, MLE {r.mle:.4g} +- {r.mle_se:.2g}, learned {r.learned:.4g}"
        for r in rows
    )
    return Outcome(residual, f"{table}; trained / true-parameter layer {report.ratios['mle']:.3f}")


# Well-specified cases: the learned parameters against the parameter MLE of the layer's own
# family on the training paths (`verify.mle_convergence.parameter_recovery`).
# case -> (quick max |z|, full max |z|, full log-likelihood gap or None); measured in comments
# (seeds 0, 1, 2); quick bounds by the rule of the ratios (spread, capped by the controls).
PARAMETER_BOUNDS: dict[str, tuple[float, float, float | None]] = {
    # MSE training: a consistent estimator, not the MLE; the bound, 3 se, at full length.
    # quick 1.48 1.38 1.44 (controls: untrained 24, shuffled 175); full 0.55 0.98 0.26
    "unrolled-afa-ou": (2.0, 3.0, None),
    # likelihood training: the MLE itself, to optimizer tolerance (0.2 se, 1e-6 relative).
    # quick 1.52 1.22 1.11 (controls 262, 160); full 0.000 (gap -1.5e-12, 3.5e-14, -2.7e-12)
    "unrolled-afa-ou-nll": (3.0, 0.2, 1e-6),
    # MSE training on a learned unitary eigenbasis (one head: no shuffled control).
    # quick 1.29 1.51 2.20 (control: untrained 490); full 0.54 1.67 2.66
    "unrolled-afa-rotation-3d": (5.0, 3.0, None),
}


PARAMETER_SOURCES = {
    "ou": seed(1, "eqs. (7)-(8); seed 000 B.2 (Algorithm 4)"),
    "rotation-3d": seed(0, "3.6, 5.1; B.2 (Algorithm 4)"),
}


def _parameter_check(name: str) -> None:
    quick_bound, full_bound, gap_bound = PARAMETER_BOUNDS[name]
    config = CASES[name].base
    gap_text = "" if gap_bound is None else f" and log-likelihood gap <= {gap_bound:g} (full)"

    @check(
        f"mle_convergence.{name}-mle",
        title=f"{config['layer']} ({config.get('loss', 'mse')} loss) trained on {name}: every "
        f"learned parameter within {full_bound} se of the parameter MLE (quick {quick_bound})"
        f"{gap_text} (residual: max |z| / bound, or gap / bound)",
        source=PARAMETER_SOURCES[config["preset"]],
        kind="statistical",
        tolerance=1.0,
    )
    def _check(quick: bool) -> Outcome:
        recovery = parameter_recovery(trained_case(name, quick=quick))
        residual = recovery.max_z / (quick_bound if quick else full_bound)
        if gap_bound is not None and not quick:
            residual = max(residual, recovery.loglik_gap / gap_bound)
        return Outcome(residual, recovery.summary())


for _name in PARAMETER_BOUNDS:
    _parameter_check(_name)


@check(
    "mle_convergence.consistency-slope",
    title="unrolled AFA (likelihood loss) on ou trained on N = 16, 64, 256 paths (quick 8, "
    "32, 128; up to 4 (quick 2) replicates each): the learned parameters' error falls like "
    f"N^-1/2, fitted slope within {SLOPE} +- {SLOPE_BAND[False]} (quick {SLOPE_BAND[True]}; "
    "residual: |slope + 0.5| / band)",
    source=seed(1, "eqs. (7)-(8); seed 000 B.2 (Algorithm 4)"),
    kind="statistical",
    tolerance=1.0,
)
def _consistency_slope(quick: bool) -> Outcome:
    """`verify.consistency`: the band is derived there (3 standard errors of the slope)."""
    result = consistency(quick=quick)
    return Outcome(abs(result.slope - SLOPE) / SLOPE_BAND[quick], result.summary())

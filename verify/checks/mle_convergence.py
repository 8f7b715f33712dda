"""Trained layers approach the optimal one-step predictor and learn the dynamics (issue 7).

For every `verify.mle_convergence.CASES` entry a check trains the layer (quick or full length)
and bounds the held-out one-step MSE ratio to its reference (the Kalman filter with the true
parameters for linear systems, the mean-field RT estimator with the true parameters for the
radial-tangential one). The afa-2d b run also checks the learned dynamics against the truth
and the parameter MLE.

How the bounds were set (`benchmarks/bench_training.py`, recorded in BENCHMARKS.md,
"Training"): each case was trained with seeds 0, 1, 2 at both lengths; a bound is the largest of
the three ratios plus three times their range (the seed-to-seed spread), rounded up to a
multiple of 0.05. For afa-2d b at full length that gives 1.10, the issue's target. Every bound is
far below the untrained model's ratio (hundreds), so a harness that does not learn fails; the
checks run seed 0. For the Kalman references the ratio must also be >= 0.95: no predictor beats
the Kalman filter in expectation (the held-out set has 64 paths of about 100 one-step errors
each, whose MSE has a relative standard error of about 2%), so a clearly smaller ratio means the
model sees the target it predicts (a leak). The RT reference is not an optimum (it ignores the
correlation of transported measurements), so it has no lower bound.
"""

from __future__ import annotations

from verify.mle_convergence import CASES, learned_dynamics, trained_case
from verify.registry import Outcome, check, seed

LOWER_BOUND = 0.95

# case -> (quick bound, full bound); measured ratios (seeds 0, 1, 2) in the comments.
BOUNDS: dict[str, tuple[float, float]] = {
    "afa-2d-a": (3.55, 1.35),  # quick 1.27 1.41 1.84; full 1.10 1.15 1.13
    "afa-2d-b": (1.55, 1.10),  # quick 1.37 1.31 1.32; full 1.031 1.037 1.029
    "afa-2d-c": (1.80, 1.15),  # quick 1.07 1.18 1.25; full 1.044 1.046 1.027
    "rotation-3d": (1.05, 1.05),  # quick 1.008 1.014 1.006; full 1.003 1.004 1.005
    "ou": (1.25, 1.10),  # quick 1.064 1.011 1.023; full 1.004 1.003 1.019
    "rt-sphere-3d-b": (1.45, 1.10),  # quick 1.28 1.26 1.23; full 0.82 0.75 0.74
}

SOURCES = {
    "afa-2d": seed(0, "2.3, 3.1, 4.2 (Fig. 1)"),
    "rotation-3d": seed(0, "3.6, 5.1 (isotropic family)"),
    "ou": seed(1, "eqs. (7)-(8) (OU prior)"),
    "rt-sphere-3d": seed(3, "Fig. 1, eq. 9 (RT model)"),
}


def _ratio_check(name: str) -> None:
    case = CASES[name]
    quick_bound, full_bound = BOUNDS[name]
    lower = LOWER_BOUND if case.reference == "kalman" else 0.0

    @check(
        f"mle_convergence.{name}",
        title=f"{case.base['layer']} trained on {name}: held-out one-step MSE / {case.reference} "
        f"within [{lower}, bound] (quick {quick_bound}, full {full_bound}; residual: ratio / "
        "bound)",
        source=SOURCES[case.base["preset"]],
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

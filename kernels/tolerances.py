"""The accuracy contract of the fused kernels: per (kernel, backend, dtype, quantity) a tolerance
and the reason for it.

A Triton kernel is tested against the torch function it must equal (DESIGN.md section 2, link 5).
Each entry gives ``atol``/``rtol`` for `tests.kernels.helpers.assert_close` and says where the
number comes from (the accumulation order, the input rounding, the size of the terms), so a
tolerance is never widened without a derivation. `tolerance` looks an entry up and names the
missing key in its error.
"""

from __future__ import annotations

from typing import NamedTuple


class Tolerance(NamedTuple):
    """``|actual - expected| <= atol + rtol |expected|`` elementwise; ``reason`` derives it."""

    atol: float
    rtol: float
    reason: str


# (kernel, backend, dtype, quantity) -> Tolerance
TOLERANCES: dict[tuple[str, str, str, str], Tolerance] = {
    # --- filtering attention (kernels/ops/common/fused_filtering.py) --------------------------
    # Reference: the torch function in float64 on the same (already rounded) inputs. Inputs are
    # O(1) (standard normal); ``atol`` is in units of max(1, max|expected|) of the compared
    # tensor (the tests scale it), so one entry covers outputs, gradients and per-head sums.
    ("filtering_attention", "triton", "float32", "output"): Tolerance(
        2e-5,
        1e-5,
        "float32 logits of size |L| <= ~20 carry ~8 roundings each, 20 * 8 * 6e-8 ~ 1e-5 "
        "absolute, which moves the normalised weights (and a convex combination of O(1) "
        "values) by as much; the rotation in and out adds ~4 roundings of the output",
    ),
    ("filtering_attention", "triton", "float32", "grad"): Tolerance(
        1e-4,
        1e-4,
        "the output bound (1e-5) times the O(1) chain factors of the backward (dL = p(E dY - "
        "delta), c / (1 + u), 2 P E), summed over up to T = 64 keys with random-sign errors "
        "(sqrt(64) = 8); per-head parameter sums over B H T^2 terms grow the same way, and "
        "relax'(x) loses eps/x ~ 1e-5 relative near its series switch at x = 0.1",
    ),
    ("filtering_attention", "triton", "bfloat16", "output"): Tolerance(
        3e-2,
        1.6e-2,
        "8 unit roundoffs of bfloat16 (u = 2^-9): q~, k~, v~ rounded after the float32 "
        "rotation (3u, the logit gain c P E |q||k| / (1 + u) is <= ~2 at these scales), "
        "p E rounded before the value product (1u), the output rounded (1u), margin 2x",
    ),
    ("filtering_attention", "triton", "bfloat16", "grad"): Tolerance(
        6e-2,
        3e-2,
        "the bfloat16 output bound doubled: ds and Y are rounded to bfloat16 before their "
        "products (2u more). Per-head sums such as d temperature cancel (each softmax-gradient "
        "row sums to zero), so the tests add 4x the measured change of the float64 reference "
        "under a one-roundoff move of q, k, v and of the upstream gradient (the kernel's "
        "backward error: the re-rounded rotated operands, the rounded rotated upstream "
        "gradient and the rounded weights, about four roundings). Not covered: non-causal "
        "RFA's frequency gradient at T = 1024 (an xfail in the GPU test)",
    ),
    ("filtering_attention", "triton", "float16", "output"): Tolerance(
        8e-3,
        4e-3,
        "the bfloat16 derivation with float16's unit roundoff 2^-11 (4x smaller)",
    ),
    # --- end filtering attention ---------------------------------------------------------------
    # --- KLA chunked scan (kernels/ops/kla/triton.py) ------------------------------------------
    # Triton (fp32 arithmetic) against the torch scan in float64 on the same rounded inputs.
    # u = 2^-24 (fp32 unit roundoff). One chunk of 64 tokens is a scan of depth at most
    # 2 log2(64) = 12 combines plus the carry and its renormalisation: 14 dependent combines of
    # <= 4 roundings each (two products, a sum, the division by the trace), 56 u = 3.3e-6.
    ("kla_scan", "triton", "float32", "variance"): Tolerance(
        atol=0.0,
        rtol=1e-5,
        reason="variance, precision (= 1/variance), output_variance, state.lam: relative. 56 u "
        "per chunk (above); the carried precision's relative error is not amplified (its "
        "relative sensitivity a^2 / (a^2 + p lam) <= 1), so chunks add at most their own "
        "rounding: 3x the per-chunk 3.3e-6 covers the p_bar = 0 case, where nothing contracts",
    ),
    ("kla_scan", "triton", "float32", "mean"): Tolerance(
        atol=1e-5,
        rtol=1e-5,
        reason="mean, info_mean, output: the variance's 1e-5 relative error enters u = b var "
        "(relative 1e-5) and g = a (1 - phi var) (absolute <= a phi var 1e-5 <= 1e-5); the "
        "affine scan (14 combines, 2 roundings each: 28 u = 1.7e-6) sums these with weights "
        "prod g <= 1, so the error is 1e-5 of the terms' size: rtol 1e-5, plus atol 1e-5 for "
        "means near 0 built from unit-scale terms (test data |v| ~ N(0, 1), |mean| <= 3)",
    ),
    ("kla_scan", "triton", "float32", "grad"): Tolerance(
        atol=3e-5,
        rtol=0.0,
        reason="every gradient divided by its largest entry (sums that cancel have no relative "
        "accuracy): the local derivatives carry var^2 (twice var's 1e-5 relative error) and "
        "the two reverse affine scans add 28 u = 1.7e-6, like the forward mean; broadcast "
        "sums over B T terms in fp32 add <= B T u = 1e-5 relative to the largest term at "
        "B T <= 160 (the interpreter tests)",
    ),
    # bfloat16 inputs are upcast exactly; the fp32 result is rounded once to bfloat16, whose
    # unit roundoff is 2^-8 = 3.9e-3 (8 significant bits): rtol 2^-8 + the fp32 error 1e-5.
    ("kla_scan", "triton", "bfloat16", "variance"): Tolerance(
        atol=0.0,
        rtol=3.92e-3,
        reason="one rounding of an fp32 result (relative error <= 1e-5, see float32) to "
        "bfloat16: <= 2^-8 = 3.906e-3 relative, plus 1e-5",
    ),
    ("kla_scan", "triton", "bfloat16", "mean"): Tolerance(
        atol=1e-5,
        rtol=3.92e-3,
        reason="one rounding to bfloat16 (<= 2^-8 relative) of the fp32 mean, whose own error "
        "is the float32 entry's atol 1e-5 + rtol 1e-5",
    ),
    # float16: the same single rounding with unit roundoff 2^-11 = 4.88e-4 (11 significant bits)
    ("kla_scan", "triton", "float16", "variance"): Tolerance(
        atol=3e-8,
        rtol=5e-4,
        reason="one rounding of an fp32 result (relative error <= 1e-5, see float32) to "
        "float16: <= 2^-11 = 4.88e-4 relative, plus 1e-5; below 2^-14 float16 is subnormal "
        "with spacing 2^-24, so absolute half-spacing 2^-25 = 3e-8 (small output_variance)",
    ),
    ("kla_scan", "triton", "float16", "mean"): Tolerance(
        atol=1e-5,
        rtol=5e-4,
        reason="one rounding to float16 (<= 2^-11 relative) of the fp32 mean, whose own error "
        "is the float32 entry's atol 1e-5 + rtol 1e-5",
    ),
    # --- end KLA chunked scan ------------------------------------------------------------------
}


def tolerance(kernel: str, backend: str, dtype: str, quantity: str) -> Tolerance:
    """The entry for ``(kernel, backend, dtype, quantity)``; KeyError naming it if absent."""
    key = (kernel, backend, dtype, quantity)
    if key not in TOLERANCES:
        known = sorted({k[:3] for k in TOLERANCES})
        raise KeyError(f"no tolerance for {key}; entries exist for {known}")
    return TOLERANCES[key]

"""Checks of seed 000 B.5, the extension to 2-D data (four axial 1-D SDEs around a pixel).

Between pixels ``b`` and ``a`` with transformed offsets ``(dx', dy')``, the seed picks each
axis's parameters by the sign of its offset,

    alpha_x = alpha_l 1(dx' > 0) + alpha_r 1(dx' < 0),   alpha_y = alpha_b 1(dy' > 0) + ...,
    sigma_x = sigma_l 1(dx' > 0) + sigma_r 1(dx' < 0),   sigma_y = sigma_t 1(dy' > 0) + ...,

(``omega`` as ``alpha``), so ``sigma_y`` takes the top SDE's noise where ``alpha_y`` and
``omega_y`` take the bottom SDE's decay and frequency: the pairing is swapped on the y axis.
It then takes the state covariance as the *product* of the two axes' 1-D propagated variances,

    sigma_V^2 = (sigma_x^2 k(alpha_x^2, |dx'|)) (sigma_y^2 k(alpha_y^2, |dy'|))
                + eta^2 e^{-2 alpha_x^2 |dx'| - 2 alpha_y^2 |dy'|},
    k(a, s) = (1 - e^{-2 a s}) / (2 a),

which has no process variance at all on either axis (``dx' = 0`` or ``dy' = 0``), where the 1-D
SDE it is built from gives ``sigma_y^2 k(alpha_y^2, |dy'|)``. A path of two independent legs (x,
then y) gives the sum ``sigma_x^2 k_x e^{-2 alpha_y^2 |dy'|} + sigma_y^2 k_y + eta^2 e^{...}``,
which is the 1-D variance on each axis.
"""

from __future__ import annotations

import numpy as np

from estimators.closed_forms import dle
from verify.registry import Outcome, check, seed
from verify.tools import relative_error

# The printed selectors: the direction whose SDE each quantity takes for a positive and a
# negative offset (seed 000 B.5, as printed).
_PRINTED = {
    "x": {"alpha": ("l", "r"), "omega": ("l", "r"), "sigma": ("l", "r")},
    "y": {"alpha": ("b", "t"), "omega": ("b", "t"), "sigma": ("t", "b")},
}


@check(
    "image_2d.printed-direction-pairing",
    title="seed error: printed B.5 sigma_y takes sigma_t for dy' > 0 while alpha_y and omega_y "
    "take the bottom SDE's (alpha_b, omega_b): axes whose noise comes from another SDE than "
    "their decay",
    source=seed(0, "B.5 (alpha_y, omega_y, sigma_y)"),
    kind="numeric",
    tolerance=0.0,
    expect="fails",
    printed=(
        r"\alpha_y = \alpha_b\,\mathbb{1}(\Delta y'>0) + \alpha_t\,\mathbb{1}(\Delta "
        r"y'<0),\quad \sigma_y = \sigma_t\,\mathbb{1}(\Delta y'>0) + "
        r"\sigma_b\,\mathbb{1}(\Delta y'<0)"
    ),
    corrected=(
        r"\sigma_y = \sigma_b\,\mathbb{1}(\Delta y'>0) + \sigma_t\,\mathbb{1}(\Delta "
        r"y'<0)\ \text{(the SDE that gives } \alpha_y, \omega_y)"
    ),
)
def _printed_pairing(quick: bool) -> Outcome:
    mismatched = [
        axis
        for axis, picks in _PRINTED.items()
        if not picks["alpha"] == picks["omega"] == picks["sigma"]
    ]
    return Outcome(float(len(mismatched)), f"axes with a mismatched sigma: {mismatched}")


def _printed_variance(ax2, ay2, sx2, sy2, eta2, dx, dy):
    """The printed product form (``ax2 = alpha_x^2``, ``sx2 = sigma_x^2``, ...)."""
    kx = (np.exp(-2 * ax2 * abs(dx)) - 1) / (-2 * ax2)
    ky = (np.exp(-2 * ay2 * abs(dy)) - 1) / (-2 * ay2)
    return (sx2 * kx) * (sy2 * ky) + eta2 * np.exp(-2 * ax2 * abs(dx) - 2 * ay2 * abs(dy))


def _leg_variance(a2, s2, length):
    """The 1-D SDE's propagated variance over ``length`` (`dle.forward_covariance` of
    ``dx = -a2 x ds + s dw``): the reference the 2-D form is built from."""
    return float(dle.forward_covariance(np.array([[-a2]]), np.array([[s2]]), length)[0, 0])


def _axis_cases(quick: bool):
    rng = np.random.default_rng(52)
    for _ in range(4 if quick else 40):
        ax2, ay2 = rng.uniform(0.05, 1.0, size=2)
        sx2, sy2, eta2 = rng.uniform(0.1, 2.0, size=3)
        yield ax2, ay2, sx2, sy2, eta2, rng.uniform(0.5, 6.0)


@check(
    "image_2d.printed-product-covariance",
    title="seed error: printed B.5 sigma_V^2 as a product of the axes' 1-D variances has no "
    "process variance on an axis (dx' = 0): it misses the 1-D SDE's sigma_y^2 k(alpha_y^2, |dy'|)",
    source=seed(0, "B.5 (sigma_V^2)"),
    kind="numeric",
    tolerance=1e-10,
    expect="fails",
    printed=(
        r"\sigma_V^2 = \bigl(\sigma_x^2 k(\alpha_x^2,|\Delta x'|)\bigr)\bigl(\sigma_y^2 "
        r"k(\alpha_y^2,|\Delta y'|)\bigr) + \eta^2 e^{-2\alpha_x^2|\Delta x'| - "
        r"2\alpha_y^2|\Delta y'|}"
    ),
    corrected=(
        r"\sigma_V^2 = \sigma_x^2 k_x\, e^{-2\alpha_y^2|\Delta y'|} + \sigma_y^2 k_y + "
        r"\eta^2 e^{-2\alpha_x^2|\Delta x'| - 2\alpha_y^2|\Delta y'|},\quad k(a,s) = "
        r"\frac{1-e^{-2as}}{2a}"
    ),
    correction="image_2d.corrected-two-leg-covariance",
)
def _printed_product(quick: bool) -> Outcome:
    best = np.inf
    for ax2, ay2, sx2, sy2, eta2, dy in _axis_cases(quick):
        printed = _printed_variance(ax2, ay2, sx2, sy2, eta2, 0.0, dy)
        one_d = _leg_variance(ay2, sy2, dy) + eta2 * np.exp(-2 * ay2 * dy)
        best = min(best, relative_error(printed, one_d))
    return Outcome(best, "smallest relative error on the y axis over the cases")


@check(
    "image_2d.corrected-two-leg-covariance",
    title="B.5 corrected: two independent legs (x, then y) give sigma_x^2 k_x e^{-2 alpha_y^2 "
    "|dy'|} + sigma_y^2 k_y + eta^2 e^{-2 alpha_x^2 |dx'| - 2 alpha_y^2 |dy'|}, the 1-D "
    "variance on each axis",
    source=seed(0, "B.5 (sigma_V^2)"),
    kind="numeric",
    tolerance=1e-12,
)
def _two_legs(quick: bool) -> float:
    # Van Loan against expm1-free closed forms of O(1) quantities: ~1e-15; 1e-12 is generous.
    rng = np.random.default_rng(53)
    worst = 0.0
    for ax2, ay2, sx2, sy2, eta2, dy in _axis_cases(quick):
        dx = rng.uniform(0.5, 6.0)
        kx = (1 - np.exp(-2 * ax2 * dx)) / (2 * ax2)
        ky = (1 - np.exp(-2 * ay2 * dy)) / (2 * ay2)
        closed = sx2 * kx * np.exp(-2 * ay2 * dy) + sy2 * ky
        closed += eta2 * np.exp(-2 * ax2 * dx - 2 * ay2 * dy)
        # the legs composed: the x leg's variance carried through the y leg's decay, plus the
        # y leg's own (the semigroup of the 1-D SDEs), and the measurement noise carried both
        composed = _leg_variance(ax2, sx2, dx) * np.exp(-2 * ay2 * dy) + _leg_variance(ay2, sy2, dy)
        composed += eta2 * np.exp(-2 * ax2 * dx - 2 * ay2 * dy)
        on_axis = sy2 * ky + eta2 * np.exp(-2 * ay2 * dy)  # the form at dx' = 0
        one_d = _leg_variance(ay2, sy2, dy) + eta2 * np.exp(-2 * ay2 * dy)
        worst = max(worst, relative_error(closed, composed), relative_error(on_axis, one_d))
    return worst

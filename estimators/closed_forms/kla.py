"""KLA's exact OU prior and its information-form precision and mean steps (seed 001 4.1-4.2).

Each channel of Kalman Linear Attention is an independent scalar linear-Gaussian filter. The
latent prior is the zero-mean Ornstein-Uhlenbeck SDE ``dz = -a z dt + p dW``, discretised exactly
over a step ``dt`` (seed 001 eqs. (7)-(8)):

    z_t | z_{t-1} ~ N(a_bar z_{t-1}, p_bar),
    a_bar = e^{-a dt},   p_bar = int_0^dt p^2 e^{-2 a s} ds = (p^2 / (2a)) (1 - e^{-2 a dt}).

A token gives the scalar observation ``v_t = k_t z_t + N(0, 1/Lambda^v_t)`` (eq. (9)). In
information form (precision ``lam = 1/Var``, information mean ``eta = lam mu``, eq. (15)) one
filter step is

    predict   lam_prior = (a_bar^2 / lam + p_bar)^{-1} = lam / (a_bar^2 + p_bar lam),
    update    lam_t = lam_prior + phi_t,            phi_t = k_t^2 Lambda^v_t      (eq. (18)),
              eta_t = f_t eta_{t-1} + b_t,          f_t = a_bar / (a_bar^2 + p_bar lam_{t-1}),
                                                    b_t = k_t Lambda^v_t v_t     (eq. (19)).

The precision step is the linear-fractional (Moebius) map of the matrix (Theorem 1, eq. (17))

    M_t = [[1 + p_bar phi_t, a_bar^2 phi_t], [p_bar, a_bar^2]],   lam_t = M_t(lam_{t-1}),

with ``det M_t = a_bar^2``. Moebius maps compose by matrix products, later on the left:
``lam_t = (M_t ... M_1)(lam_0)`` (Corollary 1.1); a map is unchanged when its matrix is scaled by
a nonzero number, so products may be renormalised after every combine. Given the precision path,
the mean step is the affine map ``eta -> f_t eta + b_t``; affine maps compose as
``(f2, b2) o (f1, b1) = (f2 f1, f2 b1 + b2)`` with identity ``(1, 0)`` (Theorem 2, Cor. 2.1).

The paper's KLA writes time-invariant ``a, p, dt`` of shape (N, D) (slots by channels, App. A)
and per-token ``phi_t, b_t`` of shape (T, N, D); every function here is elementwise and
broadcasts, so any ``(..., T, N, D)`` layout works, with ``(..., 2, 2)`` appended for matrices.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sde_sim import validation
from sde_sim.exact import ou_variance_factor


class OUDiscretisation(NamedTuple):
    """Exact one-step law of the zero-mean OU prior (seed 001 eq. (8)): decay and variance."""

    a_bar: np.ndarray
    p_bar: np.ndarray


class TokenEvidence(NamedTuple):
    """A token's precision ``phi = k^2 Lambda^v`` (Thm 1) and information ``b = k Lambda^v v``."""

    phi: np.ndarray
    b: np.ndarray


class AffineMap(NamedTuple):
    """The affine map ``eta -> f eta + b`` of the information mean (seed 001 Thm 2)."""

    f: np.ndarray
    b: np.ndarray


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr.setflags(write=False)
    return arr


MOBIUS_IDENTITY = _readonly(np.eye(2))
"""The identity element of the Moebius composition (``lam -> lam``); any ``c I``, ``c != 0``,
is the same map. Seed 001 never states it (digest section 1.6)."""

AFFINE_IDENTITY = AffineMap(_readonly(np.array(1.0)), _readonly(np.array(0.0)))
"""The identity element ``(1, 0)`` of the affine composition (``eta -> eta``); not stated in
seed 001 (digest section 1.7)."""


# --- validation helpers -------------------------------------------------------------------------


def _positive(name: str, value) -> np.ndarray:
    arr = validation.real_array(name, value)
    if np.any(arr <= 0):
        raise ValueError(f"{name} must be > 0, got min {arr.min():.6g}")
    return arr


def _broadcast(**arrays: np.ndarray) -> list[np.ndarray]:
    try:
        return list(np.broadcast_arrays(*arrays.values()))
    except ValueError:
        shapes = ", ".join(f"{name} {np.shape(arr)}" for name, arr in arrays.items())
        raise ValueError(
            f"{', '.join(arrays)} must broadcast together; got shapes {shapes}"
        ) from None


def _matrices(name: str, value) -> np.ndarray:
    arr = validation.real_array(name, value)
    if arr.ndim < 2 or arr.shape[-2:] != (2, 2):
        raise ValueError(f"{name} must have shape (..., 2, 2), got {arr.shape}")
    return arr


# --- OU discretisation, eq. (8) -----------------------------------------------------------------


def ou_discretisation(a, p, dt) -> OUDiscretisation:
    """Exact discretisation of ``dz = -a z dt + p dW`` over a step `dt` (seed 001 eq. (8)).

    ``a_bar = e^{-a dt}`` and ``p_bar = (p^2 / (2a)) (1 - e^{-2 a dt})``, the variance
    ``int_0^dt p^2 e^{-2as} ds`` of the transition ``z(t + dt) - a_bar z(t)``. ``p`` is the
    diffusion coefficient, so ``p_bar`` carries ``p^2`` as printed in eq. (8) (the authors'
    repository uses ``p`` there, i.e. treats ``p`` as a variance: digest section 1.2).

    ``p_bar`` is evaluated as ``p^2 (-expm1(-2 a dt)) / (2a)``
    (`sde_sim.exact.ou_variance_factor`), which keeps full relative precision as ``a dt -> 0``
    where ``1 - e^{-2 a dt}`` cancels; ``a = 0`` exactly takes the Brownian limit
    ``p_bar = p^2 dt``, ``a_bar = 1``.

    Parameters
    ----------
    a : mean-reversion rate, >= 0; any shape, e.g. (N, D).
    p : diffusion coefficient (real; only ``p^2`` enters).
    dt : step, >= 0.

    Returns
    -------
    OUDiscretisation
        ``(a_bar, p_bar)``, each of the broadcast shape of `a`, `p`, `dt`.
    """
    a = validation.nonnegative("a", a)
    p = validation.real_array("p", p)
    dt = validation.nonnegative("dt", dt)
    a, p, dt = _broadcast(a=a, p=p, dt=dt)
    return OUDiscretisation(np.exp(-a * dt), p**2 * ou_variance_factor(a, dt))


def ou_stationary_variance(a, p) -> np.ndarray:
    """``p^2 / (2a)``: the stationary variance of the OU prior, eq. (8)'s ``dt -> inf`` limit.

    It is also ``p_bar / (1 - a_bar^2)`` for every step: the fixed point of the prior variance
    recursion ``P -> a_bar^2 P + p_bar``. Shapes: `a` > 0 and `p` broadcast together.
    """
    a = _positive("a", a)
    p = validation.real_array("p", p)
    a, p = _broadcast(a=a, p=p)
    return p**2 / (2.0 * a)


# --- information-form precision step, Theorem 1 ------------------------------------------------


def token_evidence(k, value_precision, v) -> TokenEvidence:
    """``phi = k^2 Lambda^v`` (Thm 1) and ``b = k Lambda^v v`` (Thm 2) of tokens.

    Parameters
    ----------
    k : key (observation operator), any real.
    value_precision : ``Lambda^v`` > 0, the precision of the value's noise.
    v : value (the noisy observation ``v = k z + N(0, 1/Lambda^v)``).

    Returns
    -------
    TokenEvidence
        ``phi`` of the broadcast shape of `k` and `value_precision` (it does not depend on the
        value, so a batch of value sequences shares it) and ``b`` of the broadcast shape of all
        three; e.g. k (T, N, 1) and value_precision (T, 1, D) give phi (T, N, D), and values
        (P, T, 1, D) give b (P, T, N, D).
    """
    k = validation.real_array("k", k)
    lam_v = _positive("value_precision", value_precision)
    v = validation.real_array("v", v)
    k, lam_v = _broadcast(k=k, value_precision=lam_v)
    _broadcast(k=k, value_precision=lam_v, v=v)
    return TokenEvidence(k**2 * lam_v, k * lam_v * v)


def prior_precision(lam, a_bar, p_bar) -> np.ndarray:
    """Predict step in information form: ``lam / (a_bar^2 + p_bar lam)`` (seed 001 App. D).

    This is ``(a_bar^2 / lam + p_bar)^{-1}``, the inverse of the moment-form prior variance
    ``a_bar^2 P + p_bar``, written so that ``lam = 0`` (a diffuse belief) stays finite.
    Shapes: `lam` >= 0, `a_bar` > 0, `p_bar` >= 0 broadcast together.
    """
    lam = validation.nonnegative("lam", lam)
    a_bar = _positive("a_bar", a_bar)
    p_bar = validation.nonnegative("p_bar", p_bar)
    lam, a_bar, p_bar = _broadcast(lam=lam, a_bar=a_bar, p_bar=p_bar)
    return lam / (a_bar**2 + p_bar * lam)


def precision_step(lam, a_bar, p_bar, phi) -> np.ndarray:
    """One predict + update of the posterior precision (seed 001 eq. (18)).

    ``lam_t = lam_{t-1} / (a_bar^2 + p_bar lam_{t-1}) + phi_t``: the confidence history plus the
    confidence ``phi_t = k_t^2 Lambda^v_t`` in the current token. Equal to
    ``mobius_apply(mobius_matrix(a_bar, p_bar, phi), lam)``.

    Shapes: `lam` >= 0, `a_bar` > 0, `p_bar` >= 0 and `phi` >= 0 broadcast together.
    """
    phi = validation.nonnegative("phi", phi)
    return prior_precision(lam, a_bar, p_bar) + phi


def mobius_matrix(a_bar, p_bar, phi) -> np.ndarray:
    """The step matrix ``M = [[1 + p_bar phi, a_bar^2 phi], [p_bar, a_bar^2]]`` (seed 001 eq. (17)).

    ``lam_t = M_t(lam_{t-1}) = (alpha lam + beta) / (gamma lam + delta)`` (eq. (16)) reproduces
    `precision_step`; ``det M = a_bar^2 > 0``, so every step is an invertible map, and all
    entries are >= 0, so it is increasing on ``lam >= 0``.

    Parameters
    ----------
    a_bar : decay, > 0.
    p_bar : transition variance, >= 0.
    phi : token precision ``k^2 Lambda^v``, >= 0.

    Returns
    -------
    (..., 2, 2) array, ``...`` the broadcast shape of the inputs (e.g. (T, N, D)).
    """
    a_bar = _positive("a_bar", a_bar)
    p_bar = validation.nonnegative("p_bar", p_bar)
    phi = validation.nonnegative("phi", phi)
    a_bar, p_bar, phi = _broadcast(a_bar=a_bar, p_bar=p_bar, phi=phi)
    a2 = a_bar**2
    return np.stack(
        [np.stack([1.0 + p_bar * phi, a2 * phi], axis=-1), np.stack([p_bar, a2], axis=-1)],
        axis=-2,
    )


def mobius_apply(M, lam) -> np.ndarray:
    """``M(lam) = (M00 lam + M01) / (M10 lam + M11)`` (seed 001 eq. (16), App. C.1).

    Shapes: `M` (..., 2, 2); `lam` broadcasts against ``M.shape[:-2]``.

    Raises
    ------
    ValueError
        If a denominator ``M10 lam + M11`` is 0 (the map sends `lam` to infinity; never for a
        KLA step matrix applied to ``lam >= 0``).
    """
    M = _matrices("M", M)
    lam = validation.real_array("lam", lam)
    _broadcast(**{"M[..., 0, 0]": M[..., 0, 0], "lam": lam})
    num = M[..., 0, 0] * lam + M[..., 0, 1]
    den = M[..., 1, 0] * lam + M[..., 1, 1]
    if np.any(den == 0):
        raise ValueError("M sends lam to infinity: a denominator M10 lam + M11 is 0")
    return num / den


def mobius_compose(later, earlier, *, normalise: bool = False) -> np.ndarray:
    """The map ``later o earlier`` as the product ``later @ earlier`` (seed 001 Cor. 1.1).

    Matrix products are associative, so prefix compositions ``M_t ... M_1`` can be grouped in any
    order (a parallel scan); the later step goes on the left. With ``normalise=True`` the product
    is divided by its trace: a Moebius map is unchanged when its matrix is scaled by any nonzero
    number, and this keeps long products of KLA steps (whose determinants multiply to
    ``prod a_bar^2``) from under- or overflowing. The authors' kernels do the same
    (digest section 1.13).

    Shapes: `later`, `earlier` (..., 2, 2), broadcast together.

    Raises
    ------
    ValueError
        If ``normalise`` and a product has zero trace (never for KLA steps, whose products have
        positive entries on the diagonal).
    """
    later = _matrices("later", later)
    earlier = _matrices("earlier", earlier)
    try:
        product = later @ earlier
    except ValueError:
        raise ValueError(
            f"later and earlier must broadcast together; got shapes {later.shape}, {earlier.shape}"
        ) from None
    if not normalise:
        return product
    trace = product[..., 0, 0] + product[..., 1, 1]
    if np.any(trace == 0):
        raise ValueError("cannot normalise by the trace: a product of later @ earlier has trace 0")
    return product / trace[..., None, None]


def steady_state_precision(a_bar, p_bar, phi) -> np.ndarray:
    """The attractive fixed point ``lam*`` of a constant KLA step (the scalar filtering DARE).

    A fixed point of ``lam = lam / (a_bar^2 + p_bar lam) + phi`` solves

        p_bar lam^2 - c lam - a_bar^2 phi = 0,   c = 1 - a_bar^2 + p_bar phi,

    whose roots are ``(c +- sqrt(c^2 + 4 p_bar a_bar^2 phi)) / (2 p_bar)``. Their product
    ``-a_bar^2 phi / p_bar`` is <= 0, so exactly one root is >= 0: the larger one, ``lam*``.
    The roots are the ratios ``x/y`` of the eigenvectors of ``M`` and ``M'(lam) = det M /
    (p_bar lam + a_bar^2)^2`` equals ``mu_- / mu_+`` at ``lam*`` (the eigenvalues of ``M``,
    ``mu_+ > mu_- > 0``), so ``lam*`` (the Perron eigenvector) attracts every ``lam >= 0`` and the
    other root repels. With ``phi = 0`` and eq. (8), ``lam* = (1 - a_bar^2) / p_bar = 2a / p^2``,
    the stationary precision of the prior. Not stated in seed 001 (digest C12).

    Evaluated without cancellation: ``(c + sqrt(D)) / (2 p_bar)`` for ``c >= 0`` (always the case
    for ``a_bar <= 1``) and ``2 a_bar^2 phi / (sqrt(D) - c)`` for ``c < 0``. With ``p_bar = 0``
    and ``a_bar <= 1`` the precision grows without bound (digest C11) and ``inf`` is returned;
    with ``p_bar = 0`` and ``a_bar > 1`` the map is affine with the attractive fixed point
    ``a_bar^2 phi / (a_bar^2 - 1)``.

    Shapes: `a_bar` > 0, `p_bar` >= 0 and `phi` >= 0 broadcast together.

    Raises
    ------
    ValueError
        If ``p_bar = phi = 0`` and ``a_bar = 1``: the step is the identity and every ``lam`` is
        a fixed point.
    """
    a_bar = _positive("a_bar", a_bar)
    p_bar = validation.nonnegative("p_bar", p_bar)
    phi = validation.nonnegative("phi", phi)
    a_bar, p_bar, phi = _broadcast(a_bar=a_bar, p_bar=p_bar, phi=phi)
    identity = (p_bar == 0) & (phi == 0) & (a_bar == 1)
    if np.any(identity):
        raise ValueError(
            "a_bar = 1 with p_bar = phi = 0 is the identity step: every lam is a fixed point"
        )
    a2 = a_bar**2
    c = (1.0 - a_bar) * (1.0 + a_bar) + p_bar * phi  # 1 - a_bar^2 without forming a_bar^2 - 1
    root = np.sqrt(c**2 + 4.0 * p_bar * a2 * phi)
    out = np.full(c.shape, np.inf)
    upper = (c >= 0) & (p_bar > 0)
    out[upper] = (c[upper] + root[upper]) / (2.0 * p_bar[upper])
    lower = c < 0  # here sqrt(D) - c >= -2c > 0, and p_bar = 0 is allowed
    out[lower] = 2.0 * a2[lower] * phi[lower] / (root[lower] - c[lower])
    return out


# --- affine information-mean step, Theorem 2 ---------------------------------------------------


def forget_gate(lam_prev, a_bar, p_bar) -> np.ndarray:
    """``f_t = a_bar / (a_bar^2 + p_bar lam_{t-1})`` (seed 001 eq. (19)).

    It is ``lam_prior a_bar / lam_{t-1}``: the information-form image of ``mu_prior = a_bar mu``.
    It depends on the *previous* posterior precision. Shapes: broadcast together.
    """
    lam_prev = validation.nonnegative("lam_prev", lam_prev)
    a_bar = _positive("a_bar", a_bar)
    p_bar = validation.nonnegative("p_bar", p_bar)
    lam_prev, a_bar, p_bar = _broadcast(lam_prev=lam_prev, a_bar=a_bar, p_bar=p_bar)
    return a_bar / (a_bar**2 + p_bar * lam_prev)


def affine_map(lam_prev, a_bar, p_bar, b) -> AffineMap:
    """The mean step ``eta_t = f_t eta_{t-1} + b_t`` as the pair ``(f_t, b_t)`` (seed 001 Thm 2).

    Parameters
    ----------
    lam_prev : posterior precision ``lam_{t-1}`` >= 0 before the step (``lam_0`` at t = 1).
    a_bar, p_bar : the OU step (eq. (8)).
    b : token information ``k_t Lambda^v_t v_t`` (`token_evidence`).

    Returns
    -------
    AffineMap
        ``(f, b)`` of the broadcast shape.
    """
    b = validation.real_array("b", b)
    f = forget_gate(lam_prev, a_bar, p_bar)
    f, b = _broadcast(f=f, b=b)
    return AffineMap(f, b)


def affine_apply(step, eta) -> np.ndarray:
    """``f eta + b`` for an `AffineMap` ``step`` (shapes broadcast)."""
    f = validation.real_array("step.f", step[0])
    b = validation.real_array("step.b", step[1])
    eta = validation.real_array("eta", eta)
    f, b, eta = _broadcast(**{"step.f": f, "step.b": b, "eta": eta})
    return f * eta + b


def affine_compose(later, earlier) -> AffineMap:
    """``later o earlier = (f2 f1, f2 b1 + b2)`` for ``later = (f2, b2)`` (seed 001 Cor. 2.1).

    Associative with identity `AFFINE_IDENTITY`, so the information means are a prefix scan:
    ``eta_t = F eta_0 + B`` with ``(F, B)`` the composition of steps ``t, ..., 1``.
    """
    f2 = validation.real_array("later.f", later[0])
    b2 = validation.real_array("later.b", later[1])
    f1 = validation.real_array("earlier.f", earlier[0])
    b1 = validation.real_array("earlier.b", earlier[1])
    f2, b2, f1, b1 = _broadcast(**{"later.f": f2, "later.b": b2, "earlier.f": f1, "earlier.b": b1})
    return AffineMap(f2 * f1, f2 * b1 + b2)

"""Damped, driven harmonic oscillator: propagators, driven responses, noise (seed 002 App. A).

The scalar oscillator ``x'' + 2 gamma x' + omega^2 x = F(t)`` (seed 002 eq. 6) in first-order
form ``z = [x, x']``, ``dz/dt = A z + [0, F(t)]`` with (eq. 7)

    A = [[0, 1], [-omega^2, -2 gamma]],   eigenvalues  -gamma +- sqrt(gamma^2 - omega^2).

Its propagator ``e^{At}`` is, with ``u = omega_d^2 = omega^2 - gamma^2`` and ``N = A + gamma I``
(so ``N^2 = -u I``),

    e^{At} = e^{-gamma t} [ c(t) I + s(t) N ],   c = cos(sqrt(u) t),   s = sin(sqrt(u) t) / sqrt(u),

which is eq. (11) for ``u > 0`` (underdamped), the Jordan form of App. A.1.2 for ``u = 0``
(``c = 1``, ``s = t``) and the cosh/sinh form of App. A.1.3 for ``u < 0`` (``sigma^2 = -u``).
`propagator` evaluates this single analytic function of ``u`` stably in every regime (see its
notes); `propagator_underdamped`, `propagator_critical` and `propagator_overdamped` transcribe
the three printed forms.

A cosine drive ``F = p cos(w t) + q sin(w t)`` has the steady state of App. A.3 (eqs. 37-45,
64); the response started from rest at an anchor ``t_i`` is the steady state plus the transient
``e^{As} (-z_ss(t_i))`` (eqs. 66-70 and A.5.4), which gives the particular solution of eqs.
(21)-(35) in all three regimes. The seed prints two wrong forms: eq. (30) adds the ``lambda_+``
term that must be subtracted, and the overdamped transient coefficients U, V of A.5.4 miss the
initial conditions; the corrected forms are implemented here (`damped_sine_integrals`,
`overdamped_transient_coefficients`) and ``python -m verify --only 'oscillator.*'`` shows the
printed ones fail.

Conventions: every parameter broadcasts against the others (numpy rules); ``omega, gamma >= 0``;
time arrays may have any shape; states are ``(..., 2)`` = (position, velocity), propagators and
covariances ``(..., 2, 2)``.
"""

from __future__ import annotations

import math

import numpy as np

from sde_sim import validation

# Below |u t^2| = 1 the entire functions c and s/t are summed as power series in z = u t^2 (no
# 1/omega_d or 1/sigma anywhere); the first omitted terms are 1/20! ~ 4e-19 and 1/21! ~ 2e-20
# relative to the leading 1, below double rounding.
_SERIES_RADIUS = 1.0
_SERIES_TERMS = 10
_COS_SERIES = np.array([(-1.0) ** k / math.factorial(2 * k) for k in range(_SERIES_TERMS)])
_SINC_SERIES = np.array([(-1.0) ** k / math.factorial(2 * k + 1) for k in range(_SERIES_TERMS)])


# --- parameters ---------------------------------------------------------------------------------


def _nonnegative(name: str, value) -> np.ndarray:
    return validation.nonnegative(name, value)


def omega_d_squared(omega, gamma) -> np.ndarray:
    """``u = omega^2 - gamma^2`` as ``(omega - gamma)(omega + gamma)`` (seed 002 A.1).

    The factored product keeps a relative error of a few ``eps`` (unit round-off) even where
    ``omega^2`` and ``gamma^2`` agree to many digits (near critical damping), where the plain
    difference of squares cancels. ``u > 0``: underdamped (``omega_d = sqrt(u)``); ``u = 0``:
    critical; ``u < 0``: overdamped (``sigma = sqrt(-u)``).
    """
    omega = _nonnegative("omega", omega)
    gamma = _nonnegative("gamma", gamma)
    return (omega - gamma) * (omega + gamma)


def drift_matrix(omega, gamma) -> np.ndarray:
    """``A = [[0, 1], [-omega^2, -2 gamma]]`` (seed 002 eq. 7); shape ``broadcast + (2, 2)``."""
    omega, gamma = np.broadcast_arrays(_nonnegative("omega", omega), _nonnegative("gamma", gamma))
    A = np.zeros(omega.shape + (2, 2))
    A[..., 0, 1] = 1.0
    A[..., 1, 0] = -(omega**2)
    A[..., 1, 1] = -2.0 * gamma
    return A


def _assemble(c, s, omega, gamma) -> np.ndarray:
    """``c I + s N`` with ``N = [[gamma, 1], [-omega^2, -gamma]]`` (c, s already damped)."""
    E = np.empty(c.shape + (2, 2))
    E[..., 0, 0] = c + gamma * s
    E[..., 0, 1] = s
    E[..., 1, 0] = -(omega**2) * s
    E[..., 1, 1] = c - gamma * s
    return E


# --- propagators e^{At} ---------------------------------------------------------------------------


def damped_cos_sinc(omega, gamma, t) -> tuple[np.ndarray, np.ndarray]:
    """``(e^{-gamma t} c(t), e^{-gamma t} s(t))`` for every damping regime, without blow-up.

    ``c = cos(sqrt(u) t)`` and ``s = sin(sqrt(u) t) / sqrt(u)`` with ``u = omega^2 - gamma^2``,
    continued analytically through ``u = 0`` (``c = 1``, ``s = t``) to ``u < 0`` (``cosh``,
    ``sinh(sigma t)/sigma``). Three branches, each good to a few ``eps`` (unit round-off):

    * ``|u| t^2 <= 1``: power series in ``z = u t^2`` (``c = sum (-z)^k/(2k)!``,
      ``s = t sum (-z)^k/(2k+1)!``), continuous and analytic across critical damping;
    * ``u t^2 > 1`` (underdamped): ``cos(omega_d t)``, ``sin(omega_d t)/omega_d`` with
      ``omega_d |t| > 1``;
    * ``u t^2 < -1`` (overdamped): ``e^{-gamma t} cosh(sigma t) = e^{x}(1 + e^{-2 sigma |t|})/2``
      and ``e^{-gamma t} sinh(sigma t)/sigma = sign(t) e^{x} (-expm1(-2 sigma |t|))/(2 sigma)``
      with ``x = -gamma t + sigma |t|``, taken as ``-omega^2 t/(gamma + sigma)`` for ``t >= 0``
      (the slow rate ``gamma - sigma`` without cancellation) and ``(gamma + sigma)|t|`` for
      ``t < 0``. Unlike ``e^{-gamma t} cosh(sigma t)``, nothing overflows for large
      ``sigma t`` (the printed form gives ``0 * inf = NaN`` beyond ``sigma t ~ 710``).

    Shapes: omega, gamma >= 0 and t broadcast to a common shape S; returns two arrays of shape S.
    """
    omega, gamma = _nonnegative("omega", omega), _nonnegative("gamma", gamma)
    t = validation.real_array("t", t)
    omega, gamma, t = np.broadcast_arrays(omega, gamma, t)
    u = (omega - gamma) * (omega + gamma)
    z = u * t * t
    c = np.empty(z.shape)
    s = np.empty(z.shape)

    series = np.abs(z) <= _SERIES_RADIUS
    if np.any(series):
        zs = z[series]
        cos_sum = np.zeros(zs.shape)
        sinc_sum = np.zeros(zs.shape)
        for a_cos, a_sinc in zip(_COS_SERIES[::-1], _SINC_SERIES[::-1], strict=True):
            cos_sum = cos_sum * zs + a_cos
            sinc_sum = sinc_sum * zs + a_sinc
        damp = np.exp(-gamma[series] * t[series])
        c[series] = damp * cos_sum
        s[series] = damp * t[series] * sinc_sum

    under = z > _SERIES_RADIUS
    if np.any(under):
        wd = np.sqrt(u[under])
        tu = t[under]
        damp = np.exp(-gamma[under] * tu)
        c[under] = damp * np.cos(wd * tu)
        s[under] = damp * np.sin(wd * tu) / wd

    over = z < -_SERIES_RADIUS
    if np.any(over):
        sigma = np.sqrt(-u[over])
        g, to = gamma[over], t[over]
        # gamma + sigma > 0 here: z < -1 needs sigma > 0 and gamma > omega >= 0.
        exponent = np.where(to >= 0, -(omega[over] ** 2) * to / (g + sigma), (g + sigma) * -to)
        grow = np.exp(exponent)
        fast = np.exp(-2.0 * sigma * np.abs(to))
        c[over] = grow * 0.5 * (1.0 + fast)
        s[over] = np.sign(to) * grow * -np.expm1(-2.0 * sigma * np.abs(to)) / (2.0 * sigma)
    return c, s


def propagator(omega, gamma, t) -> np.ndarray:
    """``e^{At}`` for ``A = [[0, 1], [-omega^2, -2 gamma]]``, stable in all regimes (seed 002 A.1).

    ``e^{At} = e^{-gamma t} [c I + s (A + gamma I)]`` with the damped ``c, s`` of
    `damped_cos_sinc`: one formula for the under-, critically and overdamped cases (eq. 11 and
    the two unnumbered forms of A.1.2-A.1.3), with no division by ``omega_d`` or ``sigma`` and
    therefore no special case (or loss of accuracy) at or near critical damping.

    Parameters
    ----------
    omega, gamma : natural frequency and damping, >= 0 (arrays broadcast).
    t : time lag, any real (negative lags propagate backwards).

    Returns
    -------
    ``broadcast(omega, gamma, t).shape + (2, 2)``.
    """
    c, s = damped_cos_sinc(omega, gamma, t)
    omega, gamma = (np.broadcast_to(np.asarray(a, dtype=float), c.shape) for a in (omega, gamma))
    return _assemble(c, s, omega, gamma)


def _regime_arrays(omega, gamma, t, *, want: str, omega_name: str = "omega"):
    omega, gamma = _nonnegative(omega_name, omega), _nonnegative("gamma", gamma)
    t = validation.real_array("t", t)
    omega, gamma, t = np.broadcast_arrays(omega, gamma, t)
    ok = {"under": gamma < omega, "over": gamma > omega}[want]
    if not np.all(ok):
        k = int(np.argmin(ok.ravel()))
        rel = "<" if want == "under" else ">"
        raise ValueError(
            f"gamma must be {rel} {omega_name} ({want}damped), got gamma = "
            f"{gamma.ravel()[k]:g}, {omega_name} = {omega.ravel()[k]:g}"
        )
    return omega, gamma, t


def propagator_underdamped(omega, gamma, t) -> np.ndarray:
    """Eq. (11) as printed (seed 002 A.1.1), for ``gamma < omega``.

    ``e^{At} = e^{-gamma t} [[cos + (gamma/omega_d) sin, sin/omega_d],
    [-(omega^2/omega_d) sin, cos - (gamma/omega_d) sin]]`` at ``omega_d t``, with
    ``omega_d = sqrt(omega^2 - gamma^2)``. Accurate right up to critical damping (the ratio
    ``sin(omega_d t)/omega_d`` does not cancel) but undefined at it; use `propagator` there.

    Shapes: broadcast(omega, gamma, t) + (2, 2).
    """
    omega, gamma, t = _regime_arrays(omega, gamma, t, want="under")
    wd = np.sqrt((omega - gamma) * (omega + gamma))
    damp = np.exp(-gamma * t)
    return _assemble(damp * np.cos(wd * t), damp * np.sin(wd * t) / wd, omega, gamma)


def propagator_critical(gamma, t) -> np.ndarray:
    """Critical damping ``omega = gamma``: the Jordan-form result of seed 002 A.1.2.

    ``e^{At} = e^{-gamma t} [[1 + gamma t, t], [-gamma^2 t, 1 - gamma t]]``.
    Shapes: broadcast(gamma, t) + (2, 2).
    """
    gamma = _nonnegative("gamma", gamma)
    t = validation.real_array("t", t)
    gamma, t = np.broadcast_arrays(gamma, t)
    damp = np.exp(-gamma * t)
    return _assemble(damp, damp * t, gamma, gamma)


def propagator_overdamped(omega, gamma, t) -> np.ndarray:
    """The cosh/sinh form of seed 002 A.1.3, as printed, for ``gamma > omega``.

    ``e^{At} = e^{-gamma t} [[cosh + (gamma/sigma) sinh, sinh/sigma],
    [-(omega^2/sigma) sinh, cosh - (gamma/sigma) sinh]]`` at ``sigma t``,
    ``sigma = sqrt(gamma^2 - omega^2)``. ``cosh(sigma t)`` overflows beyond ``sigma t ~ 710``
    (the product with ``e^{-gamma t}`` is then NaN); `propagator` has no such limit.

    Shapes: broadcast(omega, gamma, t) + (2, 2).
    """
    omega, gamma, t = _regime_arrays(omega, gamma, t, want="over")
    sigma = np.sqrt((gamma - omega) * (gamma + omega))
    damp = np.exp(-gamma * t)
    return _assemble(damp * np.cosh(sigma * t), damp * np.sinh(sigma * t) / sigma, omega, gamma)


# --- steady state and frequency response (App. A.3, A.5.2) ----------------------------------------


def _drive(omega0, gamma, drive_freq):
    omega0 = _nonnegative("omega0", omega0)
    gamma = _nonnegative("gamma", gamma)
    w = _nonnegative("drive_freq", drive_freq)
    omega0, gamma, w = np.broadcast_arrays(omega0, gamma, w)
    # omega0^2 - w^2 factored, as in `omega_d_squared`: accurate near resonance.
    detuning = (omega0 - w) * (omega0 + w)
    friction = 2.0 * gamma * w
    if np.any((detuning == 0) & (friction == 0)):
        raise ValueError(
            "no steady state at undamped resonance: gamma = 0 with drive_freq = omega0 "
            "(the response grows like t sin(omega0 t))"
        )
    return omega0, gamma, w, detuning, friction


def frequency_response(omega0, gamma, drive_freq) -> np.ndarray:
    """``H(w) = 1 / (omega0^2 - w^2 + 2 i gamma w)`` (seed 002 Introduction, beta = 1).

    The steady response to ``Re(F e^{i w t})`` is ``Re(H F e^{i w t})``. Complex, shape
    broadcast(omega0, gamma, drive_freq).
    """
    _, _, _, detuning, friction = _drive(omega0, gamma, drive_freq)
    return 1.0 / (detuning + 1j * friction)


def response_amplitude(omega0, gamma, drive_freq) -> np.ndarray:
    """``|H| = 1/sqrt((omega0^2 - w^2)^2 + (2 gamma w)^2)`` (seed 002 App. E, eq. 42).

    Evaluated as ``1/hypot(.,.)``, which neither overflows nor underflows in the squares.
    """
    _, _, _, detuning, friction = _drive(omega0, gamma, drive_freq)
    return 1.0 / np.hypot(detuning, friction)


def response_phase(omega0, gamma, drive_freq) -> np.ndarray:
    """``arg H = -atan2(2 gamma w, omega0^2 - w^2)`` in ``[-pi, 0]``: the response lags.

    A drive ``cos(w t)`` gives the steady state ``|H| cos(w t + arg H)``.
    """
    _, _, _, detuning, friction = _drive(omega0, gamma, drive_freq)
    return -np.arctan2(friction, detuning)


def steady_state_coefficients(omega0, gamma, drive_freq, p, q) -> tuple[np.ndarray, np.ndarray]:
    """``(C, D)`` of ``x_ss = C cos(w t) + D sin(w t)`` for the drive ``p cos(w t) + q sin(w t)``.

    Seed 002 eqs. (43)-(44) with ``alpha A_j = p``, ``alpha B_j = q`` (equivalently eq. 64):

        C = (p (omega0^2 - w^2) - q 2 gamma w) / det,
        D = (q (omega0^2 - w^2) + p 2 gamma w) / det,
        det = (omega0^2 - w^2)^2 + (2 gamma w)^2      (eq. 42).

    Several drive modes superpose (eq. 46): pass arrays and sum the responses.
    Shapes: all arguments broadcast; returns two arrays of the broadcast shape.

    Raises
    ------
    ValueError
        At undamped resonance (``gamma = 0``, ``drive_freq = omega0``), where ``det = 0``.
    """
    _, _, _, detuning, friction = _drive(omega0, gamma, drive_freq)
    p, q = validation.real_array("p", p), validation.real_array("q", q)
    det = detuning**2 + friction**2
    return (p * detuning - q * friction) / det, (q * detuning + p * friction) / det


def steady_state(omega0, gamma, drive_freq, p, q, t) -> np.ndarray:
    """Steady-state state ``[x_ss(t), x_ss'(t)]`` for ``p cos(w t) + q sin(w t)`` (eqs. 37, 45).

    Shapes: all arguments broadcast to S; returns ``S + (2,)``.
    """
    C, D = steady_state_coefficients(omega0, gamma, drive_freq, p, q)
    w = _nonnegative("drive_freq", drive_freq)
    t = validation.real_array("t", t)
    C, D, w, t = np.broadcast_arrays(C, D, w, t)
    cos, sin = np.cos(w * t), np.sin(w * t)
    return np.stack([C * cos + D * sin, w * (D * cos - C * sin)], axis=-1)


# --- transients (A.5.3-A.5.4) ---------------------------------------------------------------------


def _anchor_state(x_ss, v_ss):
    return validation.real_array("x_ss", x_ss), validation.real_array("v_ss", v_ss)


def underdamped_transient_coefficients(omega0, gamma, x_ss, v_ss):
    """``(E, F)`` of ``x_tr(t_i + s) = e^{-gamma s}(E cos(omega_d s) + F sin(omega_d s))``.

    Seed 002 eqs. (66)-(67): ``E = -x_ss(t_i)``, ``F = (-gamma x_ss(t_i) - x_ss'(t_i))/omega_d``
    (eq. 67 writes ``-x_ss'(t_i)`` as ``sum_m C_m w_m sin(w_m t_i) - D_m w_m cos(w_m t_i)``), so
    that the particular key ``x_ss + x_tr`` starts from rest at the anchor. ``gamma < omega0``.
    """
    omega0, gamma, _ = _regime_arrays(omega0, gamma, 0.0, want="under", omega_name="omega0")
    x_ss, v_ss = _anchor_state(x_ss, v_ss)
    wd = np.sqrt((omega0 - gamma) * (omega0 + gamma))
    E, F = np.broadcast_arrays(-x_ss, (-gamma * x_ss - v_ss) / wd)
    return E, F


def critical_transient_coefficients(gamma, x_ss, v_ss):
    """``(E, F)`` of ``x_tr(t_i + s) = e^{-gamma s}(E + F s)`` (seed 002 A.5.4, critical).

    ``E = -x_ss(t_i)``, ``F = gamma E - x_ss'(t_i)``, as printed (correct).
    """
    gamma = _nonnegative("gamma", gamma)
    x_ss, v_ss = _anchor_state(x_ss, v_ss)
    E, F = np.broadcast_arrays(-x_ss, -gamma * x_ss - v_ss)
    return E, F


def overdamped_transient_coefficients(omega0, gamma, x_ss, v_ss):
    """Corrected ``(U, V)`` of ``x_tr(t_i + s) = U e^{-(gamma-sigma) s} + V e^{-(gamma+sigma) s}``.

    Seed 002 A.5.4 prints ``U = (-(gamma + sigma) x_ss + x_ss')/(2 sigma)`` and
    ``V = (-(gamma - sigma) x_ss - x_ss')/(2 sigma)``, for which ``U + V = -(gamma/sigma) x_ss``
    instead of ``-x_ss``: the key does not start from rest. The conditions ``U + V = -x_ss``,
    ``-(gamma - sigma) U - (gamma + sigma) V = -x_ss'`` give

        U = (-(gamma + sigma) x_ss(t_i) - x_ss'(t_i)) / (2 sigma),
        V = ((gamma - sigma) x_ss(t_i) + x_ss'(t_i)) / (2 sigma),

    with ``sigma = sqrt(gamma^2 - omega0^2)``, ``gamma > omega0``. ``U`` and ``V`` grow like
    ``1/sigma`` and cancel near critical damping (a relative error of about ``eps gamma/sigma``
    in ``x_tr``): `transient` has no such loss.
    """
    omega0, gamma, _ = _regime_arrays(omega0, gamma, 0.0, want="over", omega_name="omega0")
    x_ss, v_ss = _anchor_state(x_ss, v_ss)
    sigma = np.sqrt((gamma - omega0) * (gamma + omega0))
    # gamma - sigma as omega0^2 / (gamma + sigma): no cancellation when omega0 << gamma.
    slow = omega0**2 / (gamma + sigma)
    return (-(gamma + sigma) * x_ss - v_ss) / (2.0 * sigma), (slow * x_ss + v_ss) / (2.0 * sigma)


def transient(omega0, gamma, z_ss, s) -> np.ndarray:
    """Transient state ``e^{As} (-z_ss)``: cancels the steady state ``z_ss`` at the anchor.

    The homogeneous solution that makes ``z_ss(t_i + s) + z_tr(s)`` start from rest at ``s = 0``
    (seed 002 A.5.3-A.5.4: ``x_part(t_i) = x_part'(t_i) = 0``); equal to the E/F forms and the
    corrected U/V, in every regime, via the stable `propagator`.

    Shapes: omega0, gamma, s broadcast to S; ``z_ss`` ``(..., 2)`` broadcasts with ``S + (2,)``;
    returns ``S' + (2,)`` (position, velocity).
    """
    z_ss = validation.real_array("z_ss", z_ss)
    if z_ss.ndim < 1 or z_ss.shape[-1] != 2:
        raise ValueError(f"z_ss must have shape (..., 2) (position, velocity), got {z_ss.shape}")
    E = propagator(omega0, gamma, s)
    return -np.einsum("...ij,...j->...i", E, z_ss)


def anchored_response(omega0, gamma, drive_freq, p, q, t_anchor, s) -> np.ndarray:
    """Driven key from rest at ``t_i``: ``z_ss(t_i + s) + e^{As}(-z_ss(t_i))`` (eq. 70, any regime).

    The drive is ``p cos(w t) + q sin(w t)`` in absolute time (eq. 63); the result solves
    ``x'' + 2 gamma x' + omega0^2 x = p cos(w t) + q sin(w t)`` with ``x(t_i) = x'(t_i) = 0``.
    For the seed's under-, critically and overdamped keys this is eqs. (66)-(70) and A.5.4 (with
    the corrected U, V), without their ``1/omega_d``, ``1/sigma`` cancellations.

    Shapes: all arguments broadcast to S; returns ``S + (2,)`` (position, velocity).
    """
    t_anchor = validation.real_array("t_anchor", t_anchor)
    s = validation.real_array("s", s)
    z_now = steady_state(omega0, gamma, drive_freq, p, q, t_anchor + s)
    z_anchor = steady_state(omega0, gamma, drive_freq, p, q, t_anchor)
    return z_now + transient(omega0, gamma, z_anchor, s)


# --- particular solution of a cosine drive from rest (App. A.2) -----------------------------------


def particular_solution(omega0, gamma, drive_freq, t, *, alpha=1.0) -> np.ndarray:
    """``z_p(t) = int_0^t e^{A(t - s)} [0, alpha cos(w s)] ds`` in closed form, all regimes.

    Seed 002 eqs. (16)-(21) with ``f = cos(w s)``: the state from rest driven by
    ``alpha cos(w t)``, equal to the steady state plus the transient that cancels it at 0
    (`anchored_response` with ``t_i = 0``). This fills the gaps the seed leaves for the critical
    (eq. 33) and overdamped (eq. 35) cases; `particular_solution_critical` and
    `particular_solution_overdamped` spell those out.

    Near ``t = 0`` the two parts cancel (``x_p ~ alpha t^2/2``): the absolute error is a few
    ``eps alpha |H|``, uniform in t, not relative to ``x_p(t)``.

    Shapes: omega0, gamma, drive_freq, t, alpha broadcast to S; returns ``S + (2,)``.
    """
    alpha = validation.real_array("alpha", alpha)
    return anchored_response(omega0, gamma, drive_freq, alpha, 0.0, 0.0, t)


def damped_sine_integrals(gamma, omega_d, drive_freq, t) -> tuple[np.ndarray, np.ndarray]:
    """``I1 = int_0^t e^{-gamma r} sin(omega_d r) cos(w r) dr`` and ``I2`` (with sin): eqs. 29-30.

    With ``lambda_+- = omega_d +- w`` and
    ``G(l) = (-gamma e^{-gamma t} cos(l t) + l e^{-gamma t} sin(l t) + gamma)/(gamma^2 + l^2)``
    (the integral of ``e^{-gamma r} cos(l r)`` over ``[0, t]``), the product-to-sum identities of
    eqs. (27)-(28) give

        I1 = 1/2 sum_{l = lambda_+, lambda_-} (-gamma e^{-gamma t} sin(l t)
                                               - l (e^{-gamma t} cos(l t) - 1))/(gamma^2 + l^2),
        I2 = (G(lambda_-) - G(lambda_+)) / 2.

    Eq. (30) as printed sums ``G(lambda_+) + G(lambda_-)``: a sign error (the ``cos((omega_d
    + w) r)`` term of eq. 28 enters with a minus sign).

    Shapes: all arguments broadcast; returns two arrays of the broadcast shape.

    Raises
    ------
    ValueError
        If ``gamma^2 + lambda^2 = 0`` (``gamma = 0`` with ``w = omega_d``): the formula's limit
        is not implemented.
    """
    gamma = _nonnegative("gamma", gamma)
    wd = _nonnegative("omega_d", omega_d)
    w = _nonnegative("drive_freq", drive_freq)
    t = validation.real_array("t", t)
    gamma, wd, w, t = np.broadcast_arrays(gamma, wd, w, t)
    lam_p, lam_m = wd + w, wd - w
    if np.any((gamma == 0) & (lam_m == 0)):
        raise ValueError("gamma must be > 0 where drive_freq = omega_d (gamma^2 + lambda^2 = 0)")
    damp = np.exp(-gamma * t)

    def sine_part(lam):  # int_0^t e^{-gamma r} sin(lam r) dr
        return (-gamma * damp * np.sin(lam * t) - lam * (damp * np.cos(lam * t) - 1.0)) / (
            gamma**2 + lam**2
        )

    def cosine_part(lam):  # G(lam) = int_0^t e^{-gamma r} cos(lam r) dr
        return (-gamma * damp * np.cos(lam * t) + lam * damp * np.sin(lam * t) + gamma) / (
            gamma**2 + lam**2
        )

    I1 = 0.5 * (sine_part(lam_p) + sine_part(lam_m))
    I2 = 0.5 * (cosine_part(lam_m) - cosine_part(lam_p))
    return I1, I2


def particular_solution_underdamped(omega0, gamma, drive_freq, t, *, alpha=1.0) -> np.ndarray:
    """Eq. (31) with the corrected eq. (30): ``x_p = (alpha/omega_d)(cos(w t) I1 + sin(w t) I2)``.

    The seed's underdamped route (A.2.1) for the drive ``alpha cos(w t)`` from rest;
    ``gamma < omega0``. Position only, shape broadcast(omega0, gamma, drive_freq, t, alpha).
    """
    omega0, gamma, t = _regime_arrays(omega0, gamma, t, want="under", omega_name="omega0")
    alpha = validation.real_array("alpha", alpha)
    w = _nonnegative("drive_freq", drive_freq)
    wd = np.sqrt((omega0 - gamma) * (omega0 + gamma))
    I1, I2 = damped_sine_integrals(gamma, wd, w, t)
    return alpha / wd * (np.cos(w * t) * I1 + np.sin(w * t) * I2)


def particular_solution_critical(gamma, drive_freq, t, *, alpha=1.0) -> np.ndarray:
    """Closed form of eq. (33), which the seed leaves open (A.2.2), for ``omega0 = gamma``.

    ``x_p(t) = alpha int_0^t r e^{-gamma r} cos(w (t - r)) dr``
    ``= C cos(w t) + D sin(w t) - e^{-gamma t} (C + (gamma C + w D) t)`` with
    ``C = alpha (gamma^2 - w^2)/(gamma^2 + w^2)^2`` and ``D = 2 alpha gamma w/(gamma^2 + w^2)^2``
    (the steady state of eqs. 43-44 at ``omega0 = gamma``, plus the critical transient).
    Position only, shape broadcast(gamma, drive_freq, t, alpha).
    """
    gamma = _nonnegative("gamma", gamma)
    w = _nonnegative("drive_freq", drive_freq)
    t = validation.real_array("t", t)
    alpha = validation.real_array("alpha", alpha)
    C, D = steady_state_coefficients(gamma, gamma, w, alpha, 0.0)
    return (
        C * np.cos(w * t) + D * np.sin(w * t) - np.exp(-gamma * t) * (C + (gamma * C + w * D) * t)
    )


def particular_solution_overdamped(omega0, gamma, drive_freq, t, *, alpha=1.0) -> np.ndarray:
    """Closed form of eq. (35), which the seed leaves open (A.2.3), for ``gamma > omega0``.

    ``x_p(t) = C cos(w t) + D sin(w t) + U e^{-(gamma - sigma) t} + V e^{-(gamma + sigma) t}``
    with ``(C, D)`` from eqs. (43)-(44) (``alpha A_j = alpha``, ``B_j = 0``) and the corrected
    ``(U, V)`` of `overdamped_transient_coefficients` at ``x_ss(0) = C``, ``x_ss'(0) = w D``.
    Loses about ``eps gamma/sigma`` relative accuracy near critical damping (U, V ~ 1/sigma
    cancel); `particular_solution` does not. Position only.
    """
    omega0, gamma, t = _regime_arrays(omega0, gamma, t, want="over", omega_name="omega0")
    w = _nonnegative("drive_freq", drive_freq)
    alpha = validation.real_array("alpha", alpha)
    C, D = steady_state_coefficients(omega0, gamma, w, alpha, 0.0)
    U, V = overdamped_transient_coefficients(omega0, gamma, C, w * D)
    sigma = np.sqrt((gamma - omega0) * (gamma + omega0))
    slow = omega0**2 / (gamma + sigma)  # gamma - sigma without cancellation
    return (
        C * np.cos(w * t)
        + D * np.sin(w * t)
        + U * np.exp(-slow * t)
        + V * np.exp(-(gamma + sigma) * t)
    )


# --- velocity noise -------------------------------------------------------------------------------


def _noise_params(omega, gamma, noise):
    omega = validation.real_array("omega", omega)
    gamma = validation.real_array("gamma", gamma)
    noise = validation.real_array("noise", noise)
    if np.any(omega <= 0):
        raise ValueError(f"omega must be > 0 for a stationary law, got min {omega.min():g}")
    if np.any(gamma <= 0):
        raise ValueError(f"gamma must be > 0 for a stationary law, got min {gamma.min():g}")
    return np.broadcast_arrays(omega, gamma, noise)


def stationary_covariance(omega, gamma, noise) -> np.ndarray:
    """Stationary covariance of ``dz = A z dt + [0, noise] dW`` (velocity noise ``s``).

    ``P = diag(s^2/(4 gamma omega^2), s^2/(4 gamma))`` solves ``A P + P A^T + diag(0, s^2) = 0``
    (position and velocity are uncorrelated at stationarity: ``d E[x^2]/dt = 2 E[x v] = 0``).
    Needs ``omega, gamma > 0``.
    Shapes: broadcast(omega, gamma, noise) + (2, 2).
    """
    omega, gamma, noise = _noise_params(omega, gamma, noise)
    P = np.zeros(omega.shape + (2, 2))
    P[..., 1, 1] = noise**2 / (4.0 * gamma)
    P[..., 0, 0] = P[..., 1, 1] / omega**2
    return P


def velocity_noise_covariance(omega, gamma, noise, t) -> np.ndarray:
    """``V_F(t) = int_0^t e^{Ar} Q e^{A^T r} dr = P - e^{At} P e^{A^T t}``, ``Q = diag(0, s^2)``.

    The covariance at lag ``t >= 0`` of the noisy oscillator started from a fixed state (seed
    000 A.1 for the oscillator of seed 002), with P the `stationary_covariance`: both sides
    solve ``dV/dt = A V + V A^T + Q``, ``V(0) = 0``. The difference cancels for small ``gamma t``
    (``V_F ~ s^2 t`` while ``P ~ s^2/gamma``): its absolute error is a few ``eps |P|``, so the
    relative error grows like ``eps/(gamma t)``; `estimators.closed_forms.dle.forward_covariance`
    has no such loss. Shapes: broadcast(omega, gamma, noise, t) + (2, 2).
    """
    t = validation.real_array("t", t)
    if np.any(t < 0):
        raise ValueError(f"t must be >= 0, got min {t.min():g}")
    P = stationary_covariance(omega, gamma, noise)
    E = propagator(omega, gamma, t)
    P, E = np.broadcast_arrays(P, E)
    V = P - E @ P @ np.swapaxes(E, -1, -2)
    return 0.5 * (V + np.swapaxes(V, -1, -2))

"""Oscillator attention (OsciFormer, seed 002): closed-form damped driven oscillator keys/values.

Shapes: ``q, k: (B, H, T, D)``, ``v: (B, H, T, Dv)``; time stamps ``t: (T,)`` or ``(B, T)``
(strictly increasing, irregular allowed); per-head, per-channel oscillator parameters
``(H, D)``. Index convention of the suite: row ``i`` is the query time ``t_i``, column ``j`` the
key anchored at ``t_j``, lag ``Delta_ij = t_i - t_j >= 0`` for causal pairs (the seed writes the
key index ``i`` and the query time ``t``).

Model (seed 002 App. A, A.5, section 6-7; digest 002 sections 1.2-1.9)
-----------------------------------------------------------------------
Every channel ``c`` of key ``j`` is a damped driven oscillator started at its anchor ``t_j``
(eqs. 2/7, 62)::

    x'' + 2 gamma_c x' + omega_c^2 x = F_jc(t),   x(t_j) = K_jc,   x'(t_j) = (U K_j)_c,
    F_jc(t_j + s) = sum_n (g_nc cos(w_n s) + h_nc sin(w_n s)) K_jc        (section 7 drive)

with ``gamma = zeta omega`` (the digest's reading of the damping ratio zeta) and the
initial-velocity map ``U`` (``U = 0`` at initialisation). Writing ``E(s) = e^{A s}`` (eq. 11 and
the critical / overdamped forms of A.1) and the steady state
``x_ss(s) = Re sum_n beta_n e^{i w_n s}``, ``beta_n = H(w_n) (g_n - i h_n) K_j``,
``H(w) = 1/(omega^2 - w^2 + 2 i gamma w)`` (eqs. 43-44, 64), the key is

    k_j(t_j + s) = e_1^T E(s) z_j + x_ss(s),   z_j = [K_j - x_ss(0), (U K_j) - x_ss'(0)],

i.e. the homogeneous solution ``E(s) [K, U K]`` plus the particular solution from rest: the steady
state and its transient ``E(s)(-z_ss(0))`` (eqs. 66-70; critical and overdamped transients of
A.5.4 with the *corrected* U, V: both are the same ``E(s)`` term here).

The query of row ``i`` is the ridge fit (A.4, A.5.1, section 7) of the projected queries
``Q_1..Q_i`` (causal prefix; ``causal_fit=False`` fits all ``T``, which uses future queries) on the
bank ``q(t) = sum_m A_m cos(omega_m t) + B_m sin(omega_m t) = Re sum_m a_m e^{i omega_m t}``,
``a_m = A_m - i B_m`` (eq. 49). Its rotation to the anchor ``t_j`` (eq. 50) is
``a_m e^{i omega_m t_j}``.

The logit is the interval average (Def. 1, eqs. 71-75)::

    alpha_ij = (1/Delta) int_0^Delta <q_i(t_j + s), k_j(t_j + s)> ds,   alpha_ii = <q_i(t_i), K_i>,

evaluated exactly as

    Delta alpha_ij = sum_{m,c} Re( a_imc e^{i omega_m t_j} [ w_mc(Delta) . z_jc
                     + 1/2 sum_n (beta_njc L(omega_m + w_n) + conj(beta_njc) L(omega_m - w_n)) ] ),

    w_mc(Delta) = e_1^T (A_c + i omega_m)^{-1} (E_c(Delta) e^{i omega_m Delta} - I),
    L(lam) = int_0^Delta e^{i lam s} ds = Delta e^{i lam Delta / 2} sinc(lam Delta / 2).

(`_homogeneous_logits` sums the ``w . z`` part over the bank without forming ``w`` per
frequency; `_steady_logits` takes the real part of the ``L`` terms directly.)
``w`` is the matrix form of the damped kernels ``C_gamma, S_gamma, I_cc, I_cs, I_sc, I_ss``
(eqs. 52-57, 73, 76, 77) and ``L`` of the undamped ones (eqs. 58-61, 72, with the ``a = b``
limits built in). This is the complete logit (75): the homogeneous term ``alpha^(hom)``, which
the seed omits (digest 1.8), is the ``[K, U K]`` part of ``z``; the driven terms are the rest.
(The constant ``c_i`` of eq. 75 is undefined in the seed and left out.) ``(A + i omega)^{-1}``
has determinant ``omega_c^2 - omega_m^2 - 2 i gamma_c omega_m``, the resonance denominator: no
``1/omega_d`` or ``1/sigma`` appears, so nothing blows up at or near critical damping, where
``E`` is summed as a power series (`damped_cos_sinc`). Only undamped exact resonance
(``gamma = 0``, ``omega_m = omega_c``) is singular; softplus keeps ``zeta > 0``.

Seed errors avoided: eq. (30) adds the ``lambda_+`` term that must be subtracted, and the
overdamped U, V of A.5.4 miss the initial conditions; neither printed form is used (the ``E(s)``
route above equals the corrected forms, tested against ``estimators.closed_forms.oscillator``).

Values (section 6 step 6, the "weighted value" the seed leaves open): ``readout="average"``
(ContiFormer / eq. 104) ``vbar_ij = (1/Delta) int_0^Delta v_j(t_j + s) ds`` with
``vbar_ii = V_i``, or ``readout="endpoint"`` (App. E.2) ``vbar_ij = v_j(t_i)``;
``y_i = sum_{j <= i} softmax_j(alpha_ij / sqrt(D)) vbar_ij`` (eq. 79, Def. 2).

Complex intermediates (``complex64``/``complex128``) are used for the mode algebra; inputs and
outputs are real.

This module is the closed form (the torch form of the family); the entry points are re-exported
by `kernels.ops.oscillator`, and its float64 oracle is `kernels.ops.oscillator.naive`.
"""

from __future__ import annotations

import math

import torch

from kernels._validation import check_qkv, check_times, overflow_warning
from kernels.ops.oscillator.params import OscillatorParams, check_params
from kernels.ops.oscillator.propagator import damped_cos_sinc
from kernels.ops.oscillator.query import fit_query, query_at

__all__ = ["oscillator_logits", "oscillator_values", "oscillator_attention"]


# --- shared pieces -------------------------------------------------------------------------------


def _masked_lags(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Delta, causal)``: ``Delta_ij = t_i - t_j`` set to 0 where ``j > i`` (``(Bt,1,T,T)``).

    Masked lags are zeroed before any exponential: ``e^{-gamma Delta}`` at ``Delta < 0`` would
    overflow (and poison gradients through ``where``).
    """
    lag = t.unsqueeze(-1) - t.unsqueeze(-2)
    steps = t.shape[-1]
    causal = torch.ones(steps, steps, dtype=torch.bool, device=t.device).tril()
    return torch.where(causal, lag, torch.zeros_like(lag)), causal


def _anchor_state(x, p: OscillatorParams):
    """Steady amplitudes ``beta`` and the propagated anchor state ``z`` of every key/value.

    x : ``(B, H, T, D)``. Returns ``beta (B, H, T, M, D)`` complex and ``z0, z1 (B, H, T, D)``.
    """
    w = p.drive_freqs.to(x.dtype)[:, None]  # (M, 1)
    om, ga = p.omega[:, None, :], p.gamma[:, None, :]  # (H, 1, D)
    # H(w) = 1/(omega^2 - w^2 + 2 i gamma w), with omega^2 - w^2 factored (accurate near w = omega)
    resp = 1.0 / torch.complex((om - w) * (om + w), 2.0 * ga * w)  # (H, M, D)
    gain = torch.complex(p.drive_cos, -p.drive_sin) * resp  # (H, M, D)
    beta = gain.unsqueeze(1) * x.unsqueeze(-2)  # (B, H, T, M, D)
    x_ss0 = beta.real.sum(-2)
    v_ss0 = -(w * beta.imag).sum(-2)  # Re(i w beta)
    velocity = torch.einsum("hcd,bhtd->bhtc", p.velocity, x)
    return beta, x - x_ss0, velocity - v_ss0


def _box_parts(half, lag):
    """``L = lag sinc(half) e^{i half}`` as ``(lag sinc(half), cos(half), sin(half))``.

    ``sinc(h) = sin(h) / h`` (1 at 0): no ``1/lam``, and ``sin h / h`` keeps its relative
    accuracy as ``h -> 0`` (``torch.sinc`` gives the same and took ~3x as long on CPU).
    """
    sin, cos = torch.sin(half), torch.cos(half)
    zero = half == 0
    return lag * torch.where(zero, 1.0, sin / torch.where(zero, 1.0, half)), cos, sin


def _homogeneous_logits(amp, z0, z1, params: OscillatorParams, freqs, t_rows, lag):
    """``Re sum_{m,c} a_imc e^{i omega_m t_j} w_mc(Delta_ij) . z_jc``: the ``z`` part of
    ``Delta alpha_ij`` (module docstring), real.

    With ``w`` written out (``(A + i omega_m)^{-1} = [[lead, -1], [omega^2, i omega_m]] / det``,
    ``lead = -2 gamma + i omega_m``, ``det = omega^2 - omega_m^2 - 2 i gamma omega_m`` the
    resonance denominator) and ``e^{i omega_m t_j} = e^{i omega_m t_i} e^{-i omega_m Delta}``,
    the pair's term is ``A_imc [lead (X - z_0) - (Y - z_1) + (1 - e^{-i omega_m Delta})
    (lead z_0 - z_1)]_ijc`` with ``A = a e^{i omega_m t_i} / det`` and ``[X, Y] = E(Delta) z_j``
    (the key's free motion: real, and the same for every query frequency). The first part
    sums over the bank before it meets the ``(i, j, c)`` tensors; the second is one product
    over ``c`` per frequency times a phase of ``Delta``. So ``E`` is formed once, in real
    arithmetic, instead of complex ``(T, T, D)`` kernels per frequency.

    Precision: both parts vanish as ``Delta -> 0`` and are formed small (``c - 1`` of the
    damped cosine, ``1 - e^{-i phi} = 2 sin^2(phi / 2) + i sin(phi)``) before the large
    ``A`` (``1/det`` near resonance) multiplies them, as ``E e^{i omega Delta} - I`` is in the
    kernel form; the logit divides by ``Delta``. Formed after, the two parts cancelled and
    float32 logits lost 10x more (5.8e-3 relative against 6.3e-4 at T = 128).
    Entries ``j > i`` are meaningless (masked by the caller).

    amp : ``(B, H, Ti, J, D)`` complex, the query rows; z0, z1 : ``(B, H, Tj, D)``, the keys;
    freqs : ``(J,)``; t_rows : ``(Bt, 1, Ti)`` the rows' times; lag : ``(Bt, 1, Ti, Tj)``
    masked lags. Returns ``(B, H, Ti, Tj)``.
    """
    om, ga = params.omega[:, None, :], params.gamma[:, None, :]  # (H, 1, D)
    f = freqs[:, None]  # (J, 1)
    det = torch.complex((om - f) * (om + f), -2.0 * ga * f)  # (H, J, D)
    lead = torch.complex(-2.0 * ga.expand_as(det.real), f.expand_as(det.real))
    turn = torch.polar(torch.ones_like(t_rows).unsqueeze(-1), t_rows.unsqueeze(-1) * freqs)
    A = amp * (turn.unsqueeze(-1) / det.unsqueeze(1))  # (B, H, T, J, D), rows i
    P = (A * lead.unsqueeze(1)).sum(-2).real  # (B, H, T, D)
    Q = A.sum(-2).real
    c, s = damped_cos_sinc(om.unsqueeze(1), ga.unsqueeze(1), lag.unsqueeze(-1))  # (Bt,H,T,T,D)
    c = c - 1.0
    z0j, z1j = z0.unsqueeze(2), z1.unsqueeze(2)  # columns j, (B, H, 1, T, D)
    moved = c * z0j + s * (ga.unsqueeze(1) * z0j + z1j)  # X - z_0, (B, H, T, T, D)
    sped = c * z1j - s * ((om * om).unsqueeze(1) * z0j + ga.unsqueeze(1) * z1j)  # Y - z_1
    free = (P.unsqueeze(3) * moved - Q.unsqueeze(3) * sped).sum(-1)
    start = lead.unsqueeze(1) * z0.unsqueeze(-2) - z1.unsqueeze(-2)  # (B, H, T, J, D), cols j
    G = torch.einsum("bhimc,bhjmc->bhmij", A, start)  # (B, H, J, T, T)
    phi = freqs[:, None, None] * lag.unsqueeze(2)  # omega_m Delta, (Bt, 1, J, T, T)
    shift = 2.0 * torch.sin(0.5 * phi) ** 2  # Re(1 - e^{-i phi}); Im is sin(phi)
    return free + (shift * G.real - torch.sin(phi) * G.imag).sum(2)


def _steady_logits(amp, beta, params: OscillatorParams, freqs, t_cols, lag):
    """``Re 1/2 sum_{m,n,c} a_imc e^{i omega_m t_j} (beta_njc L(omega_m + w_n) +
    conj(beta_njc) L(omega_m - w_n))``: the steady-state part of ``Delta alpha_ij``
    (eqs. 58-61, 72), real, with ``L`` of `_box_parts`, in real arithmetic.

    amp : ``(B, H, Ti, J, D)`` complex, the query rows; beta : ``(B, H, Tj, M, D)`` complex,
    the keys; t_cols : ``(Bt, 1, Tj)`` the keys' anchor times; lag : ``(Bt, 1, Ti, Tj)`` masked
    lags. Returns ``(B, H, Ti, Tj)``.
    """
    drive = params.drive_freqs.to(lag.dtype)[:, None, None]  # (M, 1, 1)
    lag_n = lag.unsqueeze(2)  # (Bt, 1, 1, T, T)
    total = lag.new_zeros((*amp.shape[:2], *lag.shape[-2:]))  # (B, H, Ti, Tj)
    for m in range(freqs.shape[0]):
        rot = 0.5 * torch.polar(torch.ones_like(t_cols), freqs[m] * t_cols)  # e^{i omega t_j}/2
        weighted = beta * rot.unsqueeze(-1).unsqueeze(-1)  # (B, H, T, M, D), columns j
        a_m = amp[..., m, :]
        pair = torch.einsum("bhic,bhjnc->bhnij", a_m, weighted)  # (B, H, M, T, T)
        pair_c = torch.einsum("bhic,bhjnc->bhnij", a_m, beta.conj() * rot[..., None, None])
        for sign, p in ((1.0, pair), (-1.0, pair_c)):
            half = 0.5 * (freqs[m] + sign * drive) * lag_n  # lam Delta / 2, (Bt, 1, M, T, T)
            size, cos, sin = _box_parts(half, lag_n)
            total = total + (size * (p.real * cos - p.imag * sin)).sum(2)
    return total


def _value_paths(beta, z0, z1, params: OscillatorParams, lag, readout: str):
    """Each value's driven oscillator read at the pairs' lags: ``v_j(t_j + Delta_ij)``
    (``readout="endpoint"``) or ``int_0^Delta v_j(t_j + s) ds`` (``"average"``, not yet divided
    by ``Delta``), ``(B, H, Ti, Tj, D)``.

    Free motion ``e_1^T E(Delta) z_j``, or its integral ``e_1^T A^{-1} (E(Delta) - I) z_j`` (the
    kernel ``w`` at frequency 0, real, with ``c - 1`` formed first: ``E - I`` is small at short
    lags), plus the drive ``sum_n Re(beta_njc X_ijn)`` with ``X = e^{i w_n Delta}`` or
    ``L(w_n)``: per column ``j`` a ``(Ti, M)`` by ``(M, D)`` product, in real arithmetic.

    beta : ``(B, H, Tj, M, D)`` complex; z0, z1 : ``(B, H, Tj, D)`` (`_anchor_state`);
    lag : ``(Bt, 1, Ti, Tj)`` masked lags.
    """
    om, ga = params.omega[:, None, None, :], params.gamma[:, None, None, :]  # (H, 1, 1, D)
    lag5 = lag.unsqueeze(-1)  # (Bt, 1, Ti, Tj, 1)
    c, s = damped_cos_sinc(om, ga, lag5)  # (Bt, H, Ti, Tj, D)
    z0j, z1j = z0.unsqueeze(2), z1.unsqueeze(2)  # columns j, (B, H, 1, Tj, D)
    half = 0.5 * params.drive_freqs.to(lag.dtype) * lag5  # (Bt, 1, Ti, Tj, M)
    if readout == "endpoint":
        out = (c + ga * s) * z0j + s * z1j
        cos, sin = torch.cos(2.0 * half), torch.sin(2.0 * half)  # e^{i w_n Delta}
    else:
        c = c - 1.0
        out = ((-2.0 * ga * (c + ga * s) + om * om * s) * z0j - (c + ga * s) * z1j) / (om * om)
        size, cos, sin = _box_parts(half, lag5)
        cos, sin = size * cos, size * sin
    drive = torch.einsum("bhijn,bhjnc->bhijc", cos, beta.real)
    return out + drive - torch.einsum("bhijn,bhjnc->bhijc", sin, beta.imag)


# --- logits and values ---------------------------------------------------------------------------


@overflow_warning
def oscillator_logits(
    q, k, t=None, *, params: OscillatorParams, freqs, ridge=1e-3, causal_fit=True
):
    """Resonance logits ``alpha_ij`` (seed 002 eqs. 71-75 + the homogeneous term, Def. 1).

    Parameters
    ----------
    q, k : ``(B, H, T, D)`` projected queries and keys (``k`` = anchor positions ``K_j``).
    t : ``None`` (``t_i = i``), ``(T,)`` or ``(B, T)`` strictly increasing time stamps.
    params : key `OscillatorParams`.  freqs : ``(J,)`` query bank ``omega_m > 0``.
    ridge, causal_fit : see `fit_query`.

    Returns
    -------
    ``(B, H, T, T)`` unscaled logits; entries with ``j > i`` (future keys) are 0 (mask them).
    """
    batch, heads, steps, dim, _ = check_qkv(q, k, k)
    check_params(params, heads, dim, "params")
    t = check_times(t, steps, like=q)
    freqs = torch.as_tensor(freqs, dtype=q.dtype, device=q.device)
    coef_cos, coef_sin = fit_query(q, t, freqs, ridge=ridge, causal=causal_fit)
    amp = torch.complex(coef_cos, -coef_sin)  # a_m = A_m - i B_m, (B, H, T, J, D)
    lag, causal = _masked_lags(t)  # (Bt, 1, T, T)
    beta, z0, z1 = _anchor_state(k, params)
    total = _homogeneous_logits(amp, z0, z1, params, freqs, t, lag)
    total = total + _steady_logits(amp, beta, params, freqs, t, lag)
    diag = lag == 0  # i = j (masked entries are also 0 but are discarded by the mask)
    safe = torch.where(diag, torch.ones_like(lag), lag)
    q_now = query_at(coef_cos, coef_sin, freqs, t)  # q_i(t_i), (B, H, T, D)
    on_diag = torch.diag_embed((q_now * k).sum(-1))
    logits = torch.where(diag, on_diag, total / safe)
    return torch.where(causal, logits, torch.zeros_like(logits))


def oscillator_values(v, t=None, *, params: OscillatorParams, readout: str = "average"):
    """Value trajectories read out per pair: ``(B, H, T, T, Dv)`` (seed 002 section 6 step 6).

    ``readout="average"``: ``vbar_ij = (1/Delta) int_0^Delta v_j(t_j + s) ds`` (ContiFormer,
    eq. 104), ``vbar_ii = V_i``; ``"endpoint"``: ``vbar_ij = v_j(t_i)`` (App. E.2). ``v_j`` is the
    driven oscillator of the module docstring with the value parameters. Entries ``j > i`` are 0.
    """
    if readout not in ("average", "endpoint"):
        raise ValueError(f"readout must be 'average' or 'endpoint', found {readout!r}")
    if v.ndim != 4:
        raise ValueError(f"v must have shape (B, H, T, Dv), found {tuple(v.shape)}")
    batch, heads, steps, dim = v.shape
    check_params(params, heads, dim, "params")
    t = check_times(t, steps, like=v)
    lag, causal = _masked_lags(t)
    out = _value_paths(*_anchor_state(v, params), params, lag, readout)
    if readout == "average":
        lag5 = lag.unsqueeze(-1)
        diag = lag5 == 0
        safe = torch.where(diag, torch.ones_like(lag5), lag5)
        out = torch.where(diag, v.unsqueeze(2).expand(batch, heads, steps, steps, dim), out / safe)
    return torch.where(causal.unsqueeze(-1), out, torch.zeros_like(out))


@overflow_warning
def oscillator_attention(
    q,
    k,
    v,
    t=None,
    *,
    key_params: OscillatorParams,
    value_params: OscillatorParams,
    freqs,
    ridge: float = 1e-3,
    causal_fit: bool = True,
    readout: str = "average",
    scale: float | None = None,
    need_weights: bool = False,
):
    """Causal oscillator attention ``y_i = sum_{j<=i} softmax_j(scale alpha_ij) vbar_ij``.

    Seed 002 eq. (79) and Def. 2 (future keys masked), logits from `oscillator_logits`, values
    from `oscillator_values`; ``scale`` defaults to ``1/sqrt(D)``. The layer is causal by
    construction (keys exist only after their anchor); it is invariant to ``t -> t + c`` (drives
    and keys live in ``t - t_j``, and the ridge fit of the query commutes with the shift, which
    rotates each ``(A_m, B_m)`` pair orthogonally).

    Returns ``(out (B, H, T, Dv), weights (B, H, T, T) or None)``.
    """
    check_qkv(q, k, v)
    logits = oscillator_logits(
        q, k, t, params=key_params, freqs=freqs, ridge=ridge, causal_fit=causal_fit
    )
    values = oscillator_values(v, t, params=value_params, readout=readout)
    steps = q.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    causal = torch.ones(steps, steps, dtype=torch.bool, device=q.device).tril()
    logits = torch.where(causal, logits * scale, torch.full_like(logits, float("-inf")))
    weights = torch.softmax(logits, dim=-1)
    out = torch.einsum("bhij,bhijd->bhid", weights, values)
    return out, (weights if need_weights else None)

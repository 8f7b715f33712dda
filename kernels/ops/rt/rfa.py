"""RT-RFA: radial-tangential robust filter attention (seed 003 Algorithm 1, eqs. 7-14, 18).

Each head is a radial-tangential SDE in its learned eigenbasis (seed 003 section 3.2): complex
features ``[re | im]`` (``D = 2n`` reals for ``n`` complex features) rotate as
``e^{i omega_k s}`` (RoPE) and decay at ``mu`` (``decay``, the radial rate ``mu_r``). Queries,
keys and values are rows; ``s_ij = t_i - t_j`` and ``tau_ij = |s_ij|`` (the seed's lag, used for
causal and non-causal keys alike). Everything is a function of the rotated Gram matrix
``G_ij = Re(q~_i^H k~_j) = Re(q_i^H e^{i omega s_ij} k_j)`` (one matmul, ``x~ = e^{-i omega t} x``),
the lags, and row norms, so memory is O(T^2 + T D) per head (processed in blocks of query rows:
O(rows T) when no weights are returned and no gradient is kept; causal blocks skip the keys
after their last row). With the default stamps ``t_i = i`` the lag terms are Toeplitz and are
evaluated once per lag.

**Directional precision (modification 1, eq. 10; Alg. 1 step 3).** With token magnitudes
``m_j = |v_j|`` (the value norm before normalisation, Alg. 1 step 1), ``m^_ij = m_j e^{-mu tau}``:

    kappa_ij = (sigma_t^2(0) / (m_i^2 + eps) + sigma_t^2(tau) / (m^_ij^2 + eps) + tau_theta^2)^-1,
    sigma_t^2(tau) = process_var phi(mu_t, tau) + measurement_var e^{-2 mu_t tau} + query_var,
    phi(mu, tau) = (1 - e^{-2 mu tau}) / (2 mu)   (tau at mu = 0),

the tangential variance of Proposition 1 (eq. 7) plus the query floor ``gamma_t^2`` (counted at
both ends, as the seed writes it: digest section 8 item 8; ``sigma_t^2(0) = eta_t^2 + gamma_t^2``).
Alg. 1 writes ``sigma~^2 (1 - E^2)`` with an undefined ``sigma~^2``; it is
``process_var / (2 mu)``, the form used here through ``phi`` (exact limit at ``mu -> 0``). The
squared distance is ``d_ij^2 = kappa_ij |R_ij|^2`` (eq. 11) and the log-precision bias
``log kappa_ij``; ``kappa`` is evaluated in log space (a ``logsumexp`` of the three terms), so
``e^{2 mu tau}`` never overflows at long lags.

Switched off, the precision is the lag-only radial-tangential one of Proposition 1 and its
Sherman-Morrison inverse (eq. 8), with the digest's corrected transition ordering (the
covariance is ``s_t (I - u u^T) + s_r u u^T`` around the query's direction ``u_i = q_i/|q_i|``):

    s_t = sigma_t^2(tau),  s_r = radial_process_var phi(mu, tau)
                              + radial_measurement_var e^{-2 mu tau} + radial_query_var,
    d_ij^2 = r^T P r = (|r|^2 - rho^2) / s_t + rho^2 / s_r,     rho = u_i . r_ij,
    bias   = (log(1/s_r) + (D - 1) log(1/s_t)) / D,

the mean log-precision per real dimension (``(2/D) (1/2) log det P``, which makes the logit
``2/D`` times a Student-t log density, as RFA's). ``rho = |q_i| - c_ij G_ij / |q_i|`` and
``|r|^2`` come from ``G``: no (T, T, D, D) tensor is formed. The geometry is real: ``u u^T`` is
the real projector on R^D (digest section 8 item 7), so ``rho = Re(u^H r)``. With equal radial
and tangential parameters this is isotropic RFA's ``P |r|^2`` and ``log P`` (seed 004 eq. 11).

**Directional states (modification 2, Alg. 1 steps 1-2, 4-5; eq. 9).** q, k, v are normalised
to unit length per head; a direction is carried by the rotation alone (``u^_ij = e^{i omega s}
u_j``), so the residual is ``|R_ij|^2 = |q_i|^2 + |k_j|^2 - 2 G_ij`` (= ``2 - 2 cos``) and the
output ``u_bar_i = sum_j A_ij e^{i omega s_ij} v_j`` (eq. 13; seed 003 A.7: no decay on values).
Switched off, the states are Euclidean as in isotropic RFA (seed 004 eqs. 10-11): the key's mean
decays, ``c_ij = e^{-mu tau}``, ``|R|^2 = |q_i|^2 + c^2 |k_j|^2 - 2 c G`` and the output is
``sum_j A_ij c_ij e^{i omega s_ij} v_j`` (the decayed attention ``A (.) E``).

**Logits (eq. 14, Alg. 1 step 4).** ``L = bias - p log1p(d^2 / nu)`` with ``p = (nu + n)/n``
(``n = D/2`` complex features per head, the RFA convention) unless `exponent` is given;
``A = softmax_j(temperature L + M_causal)``. ``nu = inf`` takes the limit: ``bias - d^2 / n``
for the default exponent (digest C25), ``bias`` alone for a fixed `exponent` (weight 1). The
directional MLE (eq. 12-13, ``A = kappa / sum kappa``) is ``nu = inf`` with a fixed exponent and
temperature 1; a finite ``nu`` at temperature 1 is one robust IRLS step anchored at the query
direction (eq. 14, D.4), with the power ``p``.

**Tangent-space residual (modification 3, Alg. 1 step 6, eq. 18).** The output is projected
onto the tangent space at the token's own value, ``u_bar - (v^_i . u_bar) v^_i`` (real inner
product, ``Re(v^H u_bar)``); the seed's C.1 ``u_bar - u`` is not a tangent vector (digest
section 8 item 9). Switched off, ``u_bar`` itself is returned (eq. 17's plain residual).

All switches off with equal radial and tangential parameters is isotropic RFA (seed 004 Alg. 1,
with values rotated and decayed as in its eq. 11).

Magnitudes, normalisation and the tangent projection are per head (the head's slice of ``v``).
Seed 003 D.3 describes heads as slices of a *globally* normalised state with global magnitudes
(digest section 8 item 12); that variant is not implemented here.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels._validation import check_qkv, check_times, overflow_warning
from kernels.ops.common import complex_pairs
from kernels.ops.common.lags import isotropic_variance
from kernels.ops.common.rotation import Rotation
from kernels.ops.rt import params

# Rows of queries processed together are chosen so that one (B, H, rows, T) block holds about
# this many elements (16 MiB in float32): the row loop bounds the working set at long T.
_BLOCK_ELEMENTS = 1 << 22


class RTRFAOutput(NamedTuple):
    """Result of :func:`rt_rfa`.

    output : (B, H, T, D) the estimate ``u_bar`` (tangent-projected when
        ``tangent_residual``), in the head's eigenbasis, ``[re | im]``.
    weights : (B, H, T, T) softmax attention ``A`` (rows sum to 1) or None. With
        ``normalize_qkv=False`` the values are aggregated with ``A_ij e^{-mu tau_ij}``.
    """

    output: torch.Tensor
    weights: torch.Tensor | None


def student_exponent(nu: float | torch.Tensor, dim: int) -> float | torch.Tensor:
    """Seed 003/004's robust power ``p = (nu + n) / n`` with ``n = dim / 2`` complex features.

    ``dim`` is the real head size ``D``. Seed 004's repository counts complex features (its
    digest, section 7); the seeds do not fix which ``d`` is meant (seed 003 digest 8.10).
    """
    n = dim // 2
    return (nu + n) / n


@overflow_warning
def rt_rfa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t=None,
    decay,
    frequencies: torch.Tensor,
    process_var,
    measurement_var,
    query_var=0.0,
    angular_var=0.0,
    tangential_decay=None,
    radial_process_var=None,
    radial_measurement_var=None,
    radial_query_var=None,
    eps: float = 0.0,
    nu=math.inf,
    exponent=None,
    temperature=1.0,
    causal: bool = True,
    return_weights: bool = False,
    magnitude_precision: bool = True,
    normalize_qkv: bool = True,
    tangent_residual: bool = True,
) -> RTRFAOutput:
    """Radial-tangential robust filter attention (seed 003 Algorithm 1; module docstring).

    Parameters
    ----------
    q, k, v : (B, H, T, D) real pairs ``[re | im]`` in the head's eigenbasis (``W_{q,k,v} z``);
        D even, equal for all three (values rotate with the query/key frequencies).
    t : None (``t_i = i``), (T,) or (B, T) strictly increasing time stamps.
    decay : ``mu >= 0`` (scalar or (H,)): the magnitude decay ``m^ = m e^{-mu tau}`` (``mu_r``),
        the key-mean decay of Euclidean states and the radial variance's rate.
    frequencies : (D/2,) or (H, D/2) rotation frequencies ``omega`` (RoPE).
    process_var, measurement_var, query_var : tangential ``sigma_t^2, eta_t^2, gamma_t^2 >= 0``
        (scalar or (H,)).
    angular_var : ``tau_theta^2 >= 0``, the angular noise floor of eq. 10 (``kappa <= 1 /
        tau_theta^2``; the flat-prior limit, digest C24); used by modification 1 only.
    tangential_decay : ``mu_t`` of ``sigma_t^2(tau)``; default `decay` (Alg. 1's single ``mu``;
        for the literal RT-SDE the tangential spread decays at ``mu_r``: digest C17).
    radial_process_var, radial_measurement_var, radial_query_var : ``sigma_r^2, eta_r^2,
        gamma_r^2``, used only when ``magnitude_precision=False``; each defaults to its
        tangential counterpart (isotropic noise).
    eps : ``>= 0``, eq. 10's stability constant (modification 1 only); with 0 a zero-magnitude
        token has ``kappa = 0`` in the forward pass (and no finite gradient).
    nu : ``> 0`` robustness (scalar or (H,)); ``math.inf`` for the Gaussian limit (float only).
    exponent : robust power ``p > 0``; None for ``(nu + D/2) / (D/2)`` (:func:`student_exponent`).
    temperature : softmax inverse temperature ``beta_s > 0`` (scalar or (H,)).
    causal : keys ``j <= i`` only (default) or all keys.
    return_weights : also return the (B, H, T, T) attention weights.
    magnitude_precision : modification 1, the magnitude-dependent directional precision
        ``kappa_ij`` (eq. 10). Off: the lag-only radial-tangential precision (eqs. 7-8).
    normalize_qkv : modification 2, unit q, k, v and rotation-only transport (hyperspherical
        states, eq. 9). Off: Euclidean states with the decayed key mean (isotropic RFA).
    tangent_residual : modification 3, project the output on the tangent space at ``v_i``
        (eq. 18, Alg. 1 step 6). Off: the plain consensus ``u_bar`` (eq. 17).

    Returns
    -------
    RTRFAOutput(output (B, H, T, D), weights (B, H, T, T) or None).

    Raises
    ------
    ValueError, TypeError
        Mismatched shapes, odd or unequal feature sizes, bad time stamps, negative or
        non-finite parameters, a zero lag-0 variance without an angular floor.
    """
    batch, heads, steps, dim, dim_v = check_qkv(q, k, v, even=True)
    if dim_v != dim:
        raise ValueError(
            f"v must have the feature size of q and k ({dim}; values rotate with their "
            f"frequencies), found {dim_v}"
        )
    for name, flag in (
        ("causal", causal),
        ("return_weights", return_weights),
        ("magnitude_precision", magnitude_precision),
        ("normalize_qkv", normalize_qkv),
        ("tangent_residual", tangent_residual),
    ):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, found {type(flag).__name__}")
    n = dim // 2
    times = check_times(t, steps, like=q)
    omega = params.frequencies(frequencies, heads, n, q)

    def param(name, value, **kw):
        return params.head_param(name, value, heads, q, **kw)

    mu = param("decay", decay)
    mu_t = mu if tangential_decay is None else param("tangential_decay", tangential_decay)
    sig_t = param("process_var", process_var)
    eta_t = param("measurement_var", measurement_var)
    gam_t = param("query_var", query_var)
    floor = param("angular_var", angular_var)
    temp = param("temperature", temperature, positive=True)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a float, found {type(eps).__name__}")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be finite and >= 0, found {eps!r}")
    gaussian = isinstance(nu, float) and nu == math.inf
    nu_t = None if gaussian else param("nu", nu, positive=True)
    if exponent is not None:
        exponent = param("exponent", exponent, positive=True)

    if magnitude_precision:
        lag0 = (eta_t + gam_t).detach()
        if ((lag0 <= 0) & (floor.detach() <= 0)).any():
            raise ValueError(
                "the directional precision is infinite at zero lag: give measurement_var + "
                "query_var > 0 or an angular floor angular_var > 0"
            )
        sig_r = eta_r = gam_r = None
    else:
        sig_r = (
            sig_t if radial_process_var is None else param("radial_process_var", radial_process_var)
        )
        eta_r = (
            eta_t
            if radial_measurement_var is None
            else param("radial_measurement_var", radial_measurement_var)
        )
        gam_r = gam_t if radial_query_var is None else param("radial_query_var", radial_query_var)
        for side, total in (("", eta_t + gam_t), ("radial_", eta_r + gam_r)):
            if (total.detach() <= 0).any():
                raise ValueError(
                    f"the zero-lag variance {side}measurement_var + {side}query_var must be > 0 "
                    "(a noiseless lag-0 residual has infinite precision)"
                )

    # Token magnitudes m = |v| before normalisation (Alg. 1 step 1).
    log_m2 = torch.log(complex_pairs.squared_modulus(v))  # (B, H, T); -inf for a zero value
    if normalize_qkv:
        # F.normalize divides by max(|x|, tiny): a zero vector has no direction and stays 0.
        tiny = torch.finfo(q.dtype).tiny
        q, k, v = (torch.nn.functional.normalize(x, dim=-1, eps=tiny) for x in (q, k, v))
    qq = complex_pairs.squared_modulus(q)  # (B, H, T)
    kk = complex_pairs.squared_modulus(k)

    # Phases from each sequence's first stamp: only t_i - t_j matters, and small angles keep
    # float32 phases accurate and the layer shift invariant up to the rounding of the stamps.
    t_rel = times - times[..., :1]  # (B or 1, 1, T)
    rotation = Rotation.at(t_rel, omega.reshape(-1, n))  # (B or 1, H or 1, T, D)
    q_rot, k_rot, v_rot = (rotation.apply(x, sign=-1) for x in (q, k, v))

    def lag_terms(tau):
        """``(mu tau, sigma_t^2(tau), sigma_r^2(tau) or None)`` for lags ``tau >= 0``."""
        var_t = isotropic_variance(tau, mu_t, sig_t, eta_t) + gam_t
        var_r = None if magnitude_precision else isotropic_variance(tau, mu, sig_r, eta_r) + gam_r
        return mu * tau, var_t, var_r

    if t is None:
        # Default stamps t_i = i: the lag terms depend on |i - j| only (Toeplitz); evaluate them
        # once per lag and gather them per block.
        tables = lag_terms(torch.arange(steps, dtype=q.dtype, device=q.device))
        tables = [None if x is None else x.reshape(x.shape[1], steps) for x in tables]
    position = torch.arange(steps, device=q.device)
    if magnitude_precision:
        # The query's term sigma_t^2(0) / (m_i^2 + eps) plus the floor tau_theta^2, per row.
        log_m2_rows = log_m2.unsqueeze(-1)  # (B, H, T, 1)
        if eps > 0:
            row = (eta_t + gam_t) / (torch.exp(log_m2_rows) + eps) + floor
        else:
            # With eps = 0 a key's term grows as e^{2 mu tau}: combine in log space instead.
            log_query = torch.log(eta_t + gam_t) - log_m2_rows
            log_row = torch.logaddexp(log_query, torch.log(floor).expand_as(log_query))
    rows = max(1, _BLOCK_ELEMENTS // max(1, batch * heads * steps))
    outputs, weights = [], []
    for start in range(0, steps, rows):
        stop = min(steps, start + rows)
        sl = slice(start, stop)
        keys = slice(0, stop if causal else steps)  # causal rows never see keys >= stop
        gram = complex_pairs.real_inner(q_rot[..., sl, :], k_rot[..., keys, :])  # (B, H, R, S)
        if t is None:
            lag_index = (position[sl].unsqueeze(-1) - position[keys]).abs()  # (R, S)
            mu_tau, var_t, var_r = (None if x is None else x[:, lag_index] for x in tables)
        else:
            tau = (times[..., sl].unsqueeze(-1) - times[..., keys].unsqueeze(-2)).abs()
            mu_tau, var_t, var_r = lag_terms(tau)
        euclid = None if normalize_qkv else torch.exp(-mu_tau)  # key-mean decay c_ij
        q2 = qq[..., sl].unsqueeze(-1)
        k2 = kk[..., keys].unsqueeze(-2)
        if euclid is None:
            cross = gram
            r2 = q2 + k2 - 2 * gram
        else:
            cross = euclid * gram
            r2 = q2 + euclid * euclid * k2 - 2 * cross
        # |R|^2 >= 0 exactly; round-off can make it slightly negative for q ~ transported k.
        r2 = r2.clamp_min(0)
        if magnitude_precision and eps > 0:
            # m^_ij^2 + eps >= eps: every term is finite even where e^{-2 mu tau} underflows.
            mhat2 = torch.exp(log_m2[..., keys].unsqueeze(-2) - 2 * mu_tau)
            total = row[..., sl, :] + var_t / (mhat2 + eps)
            bias = -torch.log(total)  # log kappa
            dist2 = r2 / total
        elif magnitude_precision:
            log_key = torch.log(var_t) - (log_m2[..., keys].unsqueeze(-2) - 2 * mu_tau)
            bias = -torch.logaddexp(log_row[..., sl, :], log_key)  # log kappa
            dist2 = torch.exp(bias) * r2
        else:
            # u_i . r_ij = |q_i| - c_ij G_ij / |q_i|; a zero query has no radial axis (rho = 0).
            q_norm = q2.sqrt().clamp_min(torch.finfo(q.dtype).tiny)
            rho = (q2 - cross) / q_norm
            rho2 = rho * rho
            tangential = (r2 - rho2).clamp_min(0)  # |r|^2 - rho^2 >= 0 up to round-off
            dist2 = tangential / var_t + rho2 / var_r
            bias = -(torch.log(var_r) + (dim - 1) * torch.log(var_t)) / dim
        if nu_t is None:
            logits = bias if exponent is not None else bias - dist2 / n
        else:
            power = student_exponent(nu_t, dim) if exponent is None else exponent
            logits = bias - power * torch.log1p(dist2 / nu_t)
        logits = temp * logits
        if causal:
            future = position[:stop] > position[sl].unsqueeze(-1)  # (R, S)
            logits = logits.masked_fill(future, -math.inf)
        attn = torch.softmax(logits, dim=-1)
        mix = attn if euclid is None else attn * euclid
        agg = mix @ v_rot[..., keys, :]  # (B, H, R, D)
        out = rotation.rows(sl).apply(agg)
        if tangent_residual:
            own = v[..., sl, :]
            along = (own * out).sum(-1, keepdim=True) / complex_pairs.squared_modulus(
                own
            ).unsqueeze(-1).clamp_min(torch.finfo(q.dtype).tiny)  # a zero value: nothing removed
            out = out - along * own
        outputs.append(out)
        if return_weights:
            weights.append(torch.nn.functional.pad(attn, (0, steps - attn.shape[-1])))
    output = torch.cat(outputs, dim=-2)
    return RTRFAOutput(output, torch.cat(weights, dim=-2) if return_weights else None)

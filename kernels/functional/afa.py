"""Adaptive Filter Attention (AFA), seed 000: tensor form, isotropic form, separable precision.

Model (seed 000 2.1-2.3, 3.1). Each head works in the eigenbasis of a linear SDE: complex
feature ``k`` evolves as ``dZ_k = lambda_k Z_k dt + noise`` with ``lambda_k = -a_k + i w_k``
(decay ``a_k = -Re lambda_k >= 0``, frequency ``w_k``), process variance ``sigma_k^2`` and
measurement variance ``eta_k^2`` (the seed's ``|lambda_C|^2`` is absorbed into ``sigma^2``, as
seed 000 4.1 does). With the lag ``tau_ij = t_i - t_j`` (``>= 0`` for the keys a causal query
sees), the key measured at ``t_j`` pulled forward to ``t_i`` is ``Zhat[k, i, j] = e^{lambda_k
tau_ij} Z[k, j]``, distributed around the true value with the propagated variance (the closed
form of the differential Lyapunov equation, seed 000 A.3)

    V_k(tau) = sigma_k^2 (1 - e^{-2 a_k tau}) / (2 a_k) + eta_k^2 e^{-2 a_k tau},   tau >= 0,

and, for the non-causal keys (``tau < 0``, the backward propagation; the ``sign(dt)`` form at
the end of A.3),

    V_k(tau) = e^{2 a_k |tau|} (sigma_k^2 (1 - e^{-2 a_k |tau|}) / (2 a_k) + eta_k^2).

Both are ``sigma^2 |tau| relax(2 a tau) + eta^2 e^{-2 a tau}``, ``relax(x) = (1 - e^{-x}) / x``,
evaluated here in log space (`_log_variance`) so that neither branch overflows. Seed 000
section 3.6 prints the kernel with the exponents' signs flipped (``e^{-2 alpha tau}`` with
``alpha = Re lambda < 0``); Algorithm 1 evaluates ``a -> 0`` with an epsilon. Here the corrected
form above is used, with the ``a -> 0`` limit ``sigma^2 |tau| + eta^2`` (seed 000 3.8) reached
smoothly through `kernels.functional.lags.relaxation` (see also
``estimators.closed_forms.measurement.isotropic_measurement_variance``, whose ``dt = -tau``).

The layer (seed 000 3.1) weighs the pulled-forward values by their model precisions
``P = 1 / V`` times a robust weight of the query-key residual ``R = Zq_i - Zhat_k[i, j]``:

    W[i, j] = (1 + sum_k P_qk[k, i, j] |R[k, i, j]|^2 / nu)^(-temperature),
    A[k, i, j] = W[i, j] P_v[k, i, j] / sum_{j'} W[i, j'] P_v[k, i, j'],
    Zbar[k, i] = sum_j A[k, i, j] e^{lambda_v,k tau_ij} Zv[k, j].

``temperature = 1`` is the seed's rational weight (the Student-t / Cauchy IRLS weight, A.4);
``nu = inf`` gives ``W = 1`` and the batch MLE (2.2). Seed 000 2.3 prints the rescaling as
``P <- P / w``; the layer (and the seed's own IRLS update) uses ``w P``.

Forms:

* `tensor_afa`: the tensor form of 3.1, per-feature dynamics, ``O(T^2 D)`` memory; the reference
  the others are tested against. ``precision="separable"`` uses B.1's approximation instead of
  the exact precision.
* `isotropic_afa`: Algorithm 1 (4.1) with 3.4-3.7: one decay and one noise pair per head, so the
  precision ``P(tau)`` and the decay ``E = e^{-a tau}`` are ``(T, T)`` matrices and the residual
  factorises into one matmul, ``O(T^2 + T D)`` memory (queries are processed in blocks).
* `separable_afa`: B.1, per-feature precisions ``c + f_i g_j`` through matrix products.
* `predict`: the one-step transition ``Z+ = e^{lambda dt} Zbar`` (3.1, Algorithm 1).

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``. With frequencies the features are complex in
real pairs (`kernels.functional.complex_pairs`: ``[re | im]``, ``D = 2n``); with
``frequencies=None`` they are real features of any width (no rotation; decay, precision and the
robust weight still apply). Time stamps ``t`` are ``(T,)`` or ``(B, T)``, strictly increasing;
``None`` means ``t_i = i`` (a uniform grid, where the lag kernels are Toeplitz, seed 000 3.3).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels._validation import check_data, check_qkv, check_times, overflow_warning
from kernels.backend import use_triton
from kernels.functional import complex_pairs
from kernels.functional.lags import lags, relaxation

PRECISIONS = ("exact", "separable")


class AFAOutput(NamedTuple):
    """Result of the AFA functions.

    output : (B, H, T, Dv) the filtered estimate ``Zbar_i`` at ``t_i`` (real pairs if complex).
    weights : the attention weights when requested, else None; see each function for the shape.
    """

    output: torch.Tensor
    weights: torch.Tensor | None


class _Dynamics(NamedTuple):
    """Per-head (``(H, 1)``) or per-feature (``(H, n)``) dynamics; ``frequency`` may be None."""

    decay: torch.Tensor
    frequency: torch.Tensor | None
    process_var: torch.Tensor
    measurement_var: torch.Tensor


# ---------------------------------------------------------------------------------------------
# Argument handling
# ---------------------------------------------------------------------------------------------


def _parameter(name: str, value, heads: int, width: int, like: torch.Tensor) -> torch.Tensor:
    """``value`` (number, ``(H,)``, ``(width,)`` or ``(H, width)``) as an ``(H, width)`` tensor."""
    if not isinstance(value, (torch.Tensor, int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number or a torch.Tensor, found {type(value).__name__}")
    if isinstance(value, torch.Tensor):
        x = value.to(dtype=like.dtype, device=like.device)
    else:  # straight to the target dtype: a float64 run must not round through float32
        x = torch.tensor(value, dtype=like.dtype, device=like.device)
    if x.ndim == 0:
        return x.expand(heads, width)
    if x.ndim == 1 and x.shape[0] == heads:
        return x.unsqueeze(-1).expand(heads, width)
    if x.ndim == 1 and x.shape[0] == width:
        return x.unsqueeze(0).expand(heads, width)
    if x.ndim == 2 and x.shape[0] in (1, heads) and x.shape[1] in (1, width):
        return x.expand(heads, width)
    raise ValueError(
        f"{name} must have shape (H,) = ({heads},) or (H, {width}), found {tuple(x.shape)}"
    )


def _check_values(name: str, x: torch.Tensor, *, positive: bool) -> None:
    """Value checks, skipped while compiling (they would be data-dependent control flow)."""
    if torch.compiler.is_compiling():
        return
    detached = x.detach()
    if not torch.isfinite(detached).all():
        raise ValueError(f"{name} must be finite, found NaN or inf")
    low = detached.min().item() if detached.numel() else 0.0
    if positive and low <= 0:
        raise ValueError(f"{name} must be > 0, found a minimum of {low:.3g}")
    if not positive and low < 0:
        raise ValueError(f"{name} must be >= 0, found a minimum of {low:.3g}")


def _dynamics(
    prefix: str,
    heads: int,
    width: int,
    like,
    *,
    decay,
    frequencies,
    process_var,
    measurement_var,
    per_feature: bool,
) -> _Dynamics:
    """Validated dynamics; ``width`` is the number of (complex or real) features."""
    cols = width if per_feature else 1
    a = _parameter(f"{prefix}decay", decay, heads, cols, like)
    s2 = _parameter(f"{prefix}process_var", process_var, heads, cols, like)
    e2 = _parameter(f"{prefix}measurement_var", measurement_var, heads, cols, like)
    _check_values(f"{prefix}decay", a, positive=False)
    _check_values(f"{prefix}process_var", s2, positive=False)
    # P(0) = 1 / eta^2: a noiseless measurement would have infinite precision at zero lag.
    _check_values(f"{prefix}measurement_var", e2, positive=True)
    w = None
    if frequencies is not None:
        w = _parameter(f"{prefix}frequencies", frequencies, heads, width, like)
    return _Dynamics(a, w, s2, e2)


def _robust_scale(nu, heads: int, like) -> torch.Tensor | None:
    """``1 / nu`` as an ``(H, 1)`` tensor, or None for ``nu = inf`` (the Gaussian limit, W = 1)."""
    if isinstance(nu, (int, float)) and not isinstance(nu, bool):
        if not nu > 0:  # also catches NaN
            raise ValueError(f"nu must be > 0 (or math.inf for the Gaussian limit), found {nu}")
        return (
            None
            if math.isinf(nu)
            else torch.full((heads, 1), 1.0 / nu, dtype=like.dtype, device=like.device)
        )
    x = _parameter("nu", nu, heads, 1, like)
    _check_values("nu", x, positive=True)
    return 1.0 / x


def _temperature(temperature, heads: int, like) -> torch.Tensor:
    x = _parameter("temperature", temperature, heads, 1, like)
    _check_values("temperature", x, positive=False)
    return x


def _widths(q, k, v, frequencies, value_frequencies):
    """``(B, H, T, n_qk, n_v, rotate_qk, rotate_v)``: feature counts and which parts rotate."""
    batch, heads, steps, dim, vdim = check_qkv(q, k, v)
    if heads < 1:
        raise ValueError(f"q must have H >= 1 heads, found {tuple(q.shape)}")
    rotate_qk = frequencies is not None
    if value_frequencies is None and rotate_qk and vdim != dim:
        raise ValueError(
            f"value_frequencies is required when Dv ({vdim}) differs from D ({dim}) and "
            "frequencies are given (the value rotation cannot be shared)"
        )
    rotate_v = value_frequencies is not None or rotate_qk
    for name, size, complex_ in (
        ("q/k feature size D", dim, rotate_qk),
        ("v feature size Dv", vdim, rotate_v),
    ):
        if complex_ and size % 2:
            raise ValueError(
                f"{name} must be even when frequencies are given (real and imaginary halves), "
                f"found {size}"
            )
    n_qk = dim // 2 if rotate_qk else dim
    n_v = vdim // 2 if rotate_v else vdim
    return batch, heads, steps, n_qk, n_v, rotate_qk, rotate_v


def _relative_times(t, steps: int, like) -> torch.Tensor:
    """``t - t_0`` as ``(B or 1, 1, T)``: lags and rotations do not depend on the origin."""
    times = check_times(t, steps, like=like)
    return times - times[..., :1]


def _bias(name: str, bias, heads: int, width: int, like) -> torch.Tensor | None:
    """A drift bias ``(H, width)`` or ``(width,)`` as ``(1, H, 1, width)`` (seed 000 3.9)."""
    if bias is None:
        return None
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, found {type(bias).__name__}")
    if bias.shape not in ((width,), (1, width), (heads, width)):
        raise ValueError(
            f"{name} must have shape (H, {width}) = ({heads}, {width}) or ({width},), "
            f"found {tuple(bias.shape)}"
        )
    return bias.to(dtype=like.dtype, device=like.device).reshape(-1, width)[None, :, None, :]


# ---------------------------------------------------------------------------------------------
# Lag kernels
# ---------------------------------------------------------------------------------------------


def _log_variance(lag, decay, process_var, measurement_var) -> torch.Tensor:
    """``log V(tau)`` for either sign of ``tau = t_i - t_j`` (module docstring, seed 000 A.3).

    ``V = e^{2 a max(-tau, 0)} (sigma^2 |tau| relax(2 a |tau|) + eta^2 e^{-2 a max(tau, 0)})``:
    the backward growth stays in the exponent, so no branch overflows. All arguments broadcast.
    """
    size = lag.abs()
    back = torch.clamp(-lag, min=0.0)
    inner = process_var * size * relaxation(2 * decay * size)
    inner = inner + measurement_var * torch.exp(-2 * decay * torch.clamp(lag, min=0.0))
    return 2 * decay * back + torch.log(inner)


def _log_separable_precision(lag, decay, process_var, measurement_var) -> torch.Tensor:
    """``log P~(tau)`` of seed 000 B.1 for causal lags ``tau >= 0``.

    ``P~(tau) = (1 / lam_eff) (ratio - (1 - ratio) expm1(-rate tau))`` with
    ``lam_eff = sigma^2 / (2 a)``, ``ratio = lam_eff / eta^2``, ``rate = sigma^2 / eta^2``: the
    exact ``P(tau) = 1 / (lam_eff + (eta^2 - lam_eff) e^{-2 a tau})`` matched in value and slope
    at ``tau = 0`` by ``1 - C e^{-D tau}`` (see
    ``estimators.closed_forms.separable.separable_precision``). Needs ``a > 0``, ``sigma^2 > 0``.
    """
    lam_eff = process_var / (2 * decay)
    ratio = lam_eff / measurement_var
    rate = process_var / measurement_var
    return torch.log(ratio - (1 - ratio) * torch.expm1(-rate * lag)) - torch.log(lam_eff)


# ---------------------------------------------------------------------------------------------
# Tensor form (seed 000 3.1)
# ---------------------------------------------------------------------------------------------


def _complex_parts(x: torch.Tensor, is_complex: bool):
    """Real-pair ``x`` -> ``(re, im)``; real features -> ``(x, 0)``."""
    if is_complex:
        return complex_pairs.split(x)
    return x, torch.zeros_like(x)


@overflow_warning
def tensor_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t=None,
    decay,
    frequencies,
    process_var,
    measurement_var,
    nu=math.inf,
    temperature=1.0,
    causal: bool = True,
    value_decay=None,
    value_frequencies=None,
    value_process_var=None,
    value_measurement_var=None,
    precision: str = "exact",
    return_weights: bool = False,
) -> AFAOutput:
    """Tensor-form AFA (seed 000 3.1): per-feature dynamics and precision tensors.

    For every feature ``k``, query ``i`` and key ``j`` (``tau = t_i - t_j``)::

        Zhat_k[k, i, j] = e^{lambda_k tau} Zk[k, j],        R = Zq[k, i] - Zhat_k[k, i, j],
        P_qk[k, i, j] = 1 / V_qk,k(tau),                    P_v[k, i, j] = 1 / V_v,k(tau),
        W[i, j] = (1 + sum_k P_qk |R|^2 / nu)^(-temperature),
        A[k, i, j] = W P_v / sum_{j' visible} W P_v,
        Zbar[k, i] = sum_j A[k, i, j] e^{lambda_v,k tau} Zv[k, j],

    all ``(B, H, T, T, n)`` tensors: ``O(T^2 D)`` memory, the reference for the other forms.
    With the true dynamics, ``Zq = Zk = Zv = S^-1 z`` and ``nu = inf`` this is the batch MLE of
    seed 000 2.2 in the eigenbasis; with a finite ``nu`` and ``temperature = 1``, one IRLS step
    (2.3) from the measurements.

    Parameters
    ----------
    q, k : (B, H, T, D); v : (B, H, T, Dv).
    t : None (``t_i = i``), (T,) or (B, T) strictly increasing time stamps.
    decay : ``a >= 0`` per head ``(H,)`` or per feature ``(H, n)`` (``lambda = -a + i w``).
    frequencies : ``w``, ``(H, n)`` with ``n = D / 2`` complex features, or None: real features
        (``n = D``), no rotation.
    process_var : ``sigma^2 >= 0``, (H,) or (H, n).  measurement_var : ``eta^2 > 0``, (H,)/(H, n).
    nu : robust scale, > 0 or ``math.inf`` (no reweighting); a number or an (H,) tensor.
    temperature : exponent of the robust weight (1: the rational weight); number or (H,).
    causal : keys ``t_j <= t_i`` only (True) or all keys, with the backward (``tau < 0``)
        covariance of A.3.
    value_decay, value_frequencies, value_process_var, value_measurement_var : separate value
        dynamics (3.1); default the q/k ones (``value_frequencies`` must then be given when
        ``Dv != D``).
    precision : ``"exact"`` or ``"separable"`` (B.1's approximation of both precisions; causal
        only, needs ``a > 0`` and ``sigma^2 > 0``).
    return_weights : also return ``A`` as ``(B, H, T, T, n_v)`` (query, key, value feature).

    Returns
    -------
    AFAOutput with ``output`` (B, H, T, Dv).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, found {precision!r}")
    if precision == "separable" and not causal:
        raise ValueError("precision='separable' is defined for causal lags only (seed 000 B.1)")
    batch, heads, steps, n_qk, n_v, rotate_qk, rotate_v = _widths(
        q, k, v, frequencies, value_frequencies
    )
    qk, vd = _both_dynamics(
        heads,
        n_qk,
        n_v,
        q,
        per_feature=True,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
        value_decay=value_decay,
        value_frequencies=value_frequencies,
        value_process_var=value_process_var,
        value_measurement_var=value_measurement_var,
    )
    inv_nu = _robust_scale(nu, heads, q)
    temp = _temperature(temperature, heads, q)
    lag = lags(_relative_times(t, steps, q)).unsqueeze(-1)  # (Bt, 1, T, T, 1)
    visible = lag >= 0 if causal else torch.ones_like(lag, dtype=torch.bool)
    lag = torch.where(visible, lag, torch.zeros_like(lag))  # masked pairs: keep exp finite
    log_prec = _log_separable_precision if precision == "separable" else _neg_log_variance

    a_v, w_v, s2_v, e2_v = _feature_view(vd)
    logits = log_prec(lag, a_v, s2_v, e2_v)  # log P_v, (Bt, H, T, T, n_v)
    if inv_nu is not None:
        a, w, s2, e2 = _feature_view(qk)
        qr, qi = _complex_parts(q, rotate_qk)
        kr, ki = _complex_parts(k, rotate_qk)
        pr, pi = _pull_forward(kr, ki, a, w, lag)
        rr = qr.unsqueeze(3) - pr  # R = Zq_i - Zhat_k[i, j]
        ri = qi.unsqueeze(3) - pi
        d2 = (torch.exp(log_prec(lag, a, s2, e2)) * (rr * rr + ri * ri)).sum(-1)
        log_w = -temp.view(1, heads, 1, 1) * torch.log1p(d2 * inv_nu.view(1, heads, 1, 1))
        logits = logits + log_w.unsqueeze(-1)
    logits = logits.masked_fill(~visible, -math.inf)
    log_attn = torch.log_softmax(logits, dim=3)
    vr, vi = _complex_parts(v, rotate_v)
    # A e^{lambda_v tau} Zv: the decay joins the log-weights (it grows for tau < 0).
    coef = torch.exp(log_attn - a_v * lag)
    er, ei = _rotate_pairs(vr.unsqueeze(2), vi.unsqueeze(2), w_v, lag)
    out_r, out_i = (coef * er).sum(3), (coef * ei).sum(3)
    output = complex_pairs.merge(out_r, out_i) if rotate_v else out_r
    weights = None
    if return_weights:
        weights = torch.exp(log_attn).expand(batch, heads, steps, steps, n_v)
    return AFAOutput(output, weights)


def _neg_log_variance(lag, decay, process_var, measurement_var):
    return -_log_variance(lag, decay, process_var, measurement_var)


def _feature_view(d: _Dynamics):
    """``(H, n)`` dynamics as ``(1, H, 1, 1, n)`` against ``(Bt, 1, T, T, 1)`` lags."""
    view = [None if x is None else x[None, :, None, None, :] for x in d]
    return view[0], view[1], view[2], view[3]


def _rotate_pairs(re, im, frequency, lag):
    """``e^{i w tau} (re + i im)``; identity when ``frequency`` is None."""
    if frequency is None:
        return re, im
    angle = frequency * lag
    cos, sin = torch.cos(angle), torch.sin(angle)
    return re * cos - im * sin, re * sin + im * cos


def _pull_forward(re, im, decay, frequency, lag):
    """``e^{lambda tau_ij} Z[j]`` for ``Z (B, H, T, n)``: ``(B, H, T, T, n)`` over (i, j)."""
    scale = torch.exp(-decay * lag)
    r, i = _rotate_pairs(re.unsqueeze(2), im.unsqueeze(2), frequency, lag)
    return scale * r, scale * i


def _both_dynamics(
    heads,
    n_qk,
    n_v,
    like,
    *,
    per_feature,
    decay,
    frequencies,
    process_var,
    measurement_var,
    value_decay,
    value_frequencies,
    value_process_var,
    value_measurement_var,
):
    """q/k and value dynamics; each value parameter defaults to its q/k counterpart."""
    qk = _dynamics(
        "",
        heads,
        n_qk,
        like,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
        per_feature=per_feature,
    )
    vd = _dynamics(
        "value_",
        heads,
        n_v,
        like,
        decay=decay if value_decay is None else value_decay,
        frequencies=frequencies if value_frequencies is None else value_frequencies,
        process_var=process_var if value_process_var is None else value_process_var,
        measurement_var=measurement_var if value_measurement_var is None else value_measurement_var,
        per_feature=per_feature,
    )
    return qk, vd


# ---------------------------------------------------------------------------------------------
# Isotropic form (seed 000 3.3-3.9, Algorithm 1)
# ---------------------------------------------------------------------------------------------


class _PairKernels(NamedTuple):
    """Lag kernels of the isotropic form on a set of (i, j) pairs (zero / -inf where masked).

    log_prior : ``log P_v(tau)``, -inf on masked pairs.
    value_decay : causal: ``E_v = e^{-a_v tau}``; non-causal: ``log E_v = -a_v tau`` (it grows
        for ``tau < 0`` and is combined with the weights in log space).
    query, key, cross : ``P_qk / nu``, ``P_qk E^2 / nu``, ``2 P_qk E / nu`` (None for
        ``nu = inf``); with normalized queries/keys ``query`` holds ``(P_qk + P_qk E^2) / nu``
        and ``key`` is None.
    """

    log_prior: torch.Tensor
    value_decay: torch.Tensor
    query: torch.Tensor | None
    key: torch.Tensor | None
    cross: torch.Tensor | None


def _flush(factor: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """``factor`` with entries whose decay exponent ``a tau`` exceeds ``2 log(1 / eps)`` set to 0.

    Such entries carry a factor ``e^{-a tau} < eps^2``: their terms are below the rounding of
    the zero-lag ones, and as subnormal numbers they would slow every later product 10-50x.
    """
    limit = -2.0 * math.log(torch.finfo(factor.dtype).eps)
    return torch.where(exponent > limit, torch.zeros((), dtype=factor.dtype), factor)


def _pair_kernels(
    lag, qk: _Dynamics, vd: _Dynamics, inv_nu, *, causal: bool, shared: bool, normalized: bool
) -> _PairKernels:
    """Evaluate the lag kernels on ``lag``; the parameters broadcast against it."""
    visible = lag >= 0
    if causal:
        lag = torch.clamp(lag, min=0.0)  # masked pairs: keep every exponential finite
    log_var_v = _log_variance(lag, vd.decay, vd.process_var, vd.measurement_var)
    log_prior = -log_var_v
    exponent_v = vd.decay * lag
    if causal:
        log_prior = log_prior.masked_fill(~visible, -math.inf)
        value_decay = _flush(torch.exp(-exponent_v), exponent_v).masked_fill(~visible, 0.0)
    else:
        value_decay = -exponent_v
    if inv_nu is None:
        return _PairKernels(log_prior, value_decay, None, None, None)
    log_var = (
        log_var_v if shared else _log_variance(lag, qk.decay, qk.process_var, qk.measurement_var)
    )
    log_p = torch.log(inv_nu) - log_var  # log(P_qk / nu)
    exponent = qk.decay * lag
    coefficients = [
        torch.exp(log_p),
        _flush(torch.exp(log_p - 2 * exponent), 2 * exponent),
        _flush(2 * torch.exp(log_p - exponent), exponent),
    ]
    if causal:
        coefficients = [c.masked_fill(~visible, 0.0) for c in coefficients]
    query, key, cross = coefficients
    if normalized:
        return _PairKernels(log_prior, value_decay, query + key, None, cross)
    return _PairKernels(log_prior, value_decay, query, key, cross)


class _ToeplitzKernels:
    """Uniform grid ``t_i = i`` (seed 000 3.3): every kernel depends on ``i - j`` only.

    The kernels are evaluated once per call on the ``2T - 1`` lags ``tau = m - (T - 1)``. With
    the keys of a block taken in *reverse* order (``j = j1 - 1 - r``) a tile reads them as the
    Hankel window ``x[T - j1 + i + r]``: a strided view, no copy or gather.
    """

    reversed_keys = True

    def __init__(self, steps: int, like, qk, vd, inv_nu, **options):
        lag = torch.arange(1 - steps, steps, dtype=like.dtype, device=like.device)

        def heads(x):
            return None if x is None else x.view(-1, 1)

        self.vectors = _pair_kernels(
            lag, _Dynamics(*map(heads, qk)), _Dynamics(*map(heads, vd)), heads(inv_nu), **options
        )
        self.steps = steps

    def tile(self, i0: int, i1: int, j1: int) -> _PairKernels:
        first = self.steps - j1 + i0

        def window(x):
            # slice before unfolding, so autograd's backward of the window touches only the
            # (i1 - i0) + j1 - 1 lags this tile reads, not every window of the vector
            rows = i1 - i0
            return x[:, first : first + rows + j1 - 1].unfold(-1, j1, 1).unsqueeze(0)

        return _PairKernels(*(None if x is None else window(x) for x in self.vectors))


class _IrregularKernels:
    """Arbitrary time stamps: the kernels are evaluated on each block's lags."""

    reversed_keys = False

    def __init__(self, times, qk, vd, inv_nu, **options):
        def heads(x):
            return None if x is None else x.view(-1, 1, 1)

        self.times = times  # (Bt, 1, T)
        self.qk = _Dynamics(*map(heads, qk))
        self.vd = _Dynamics(*map(heads, vd))
        self.inv_nu = heads(inv_nu)
        self.options = options

    def tile(self, i0: int, i1: int, j1: int) -> _PairKernels:
        lag = self.times[..., i0:i1].unsqueeze(-1) - self.times[..., :j1].unsqueeze(-2)
        return _pair_kernels(lag, self.qk, self.vd, self.inv_nu, **self.options)


def _attend(tile: _PairKernels, q, k, v, qn, kn, temperature, *, causal: bool, want_weights: bool):
    """One block of queries: logits, softmax over the keys, value decay, weighted values.

    ``L = log P_v - temperature log(1 + P_qk |R|^2 / nu)`` with the factorised residual
    ``P_qk |R|^2 / nu = query |Zq_i|^2 + key |Zk_j|^2 - cross Re(Zq~_i^H Zk~_j)`` (one matmul);
    ``A = softmax_j(L)``, ``A_hat = E_v * A``; returns ``(A_hat Zv~, A or None)``.
    """
    logits = tile.log_prior
    if tile.query is not None:
        s = tile.query if qn is None else tile.query * qn
        if tile.key is not None:
            s = torch.addcmul(s, tile.key, kn)
        s = torch.addcmul(s, tile.cross, complex_pairs.real_inner(q, k), value=-1.0)
        # |R|^2 >= 0: a negative value is round-off of the cancelling expansion; clamp it.
        s = torch.clamp(s, min=0.0)
        logits = torch.addcmul(logits, temperature, torch.log1p(s), value=-1.0)
    if causal:
        attn = torch.softmax(logits, dim=-1)
        return (attn * tile.value_decay) @ v, attn if want_weights else None
    lse = torch.logsumexp(logits, dim=-1, keepdim=True)
    out = torch.exp(logits + tile.value_decay - lse) @ v
    return out, torch.exp(logits - lse) if want_weights else None


def _phase(positions, frequency) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(cos, sin)`` of ``w_k t_i``: ``(Bt, 1, T)`` positions, ``(H, n)`` -> ``(Bt, H, T, n)``."""
    if frequency is None:
        return None
    angle = positions.unsqueeze(-1) * frequency[None, :, None, :]
    return torch.cos(angle), torch.sin(angle)


def _unrotate(x, phase):
    """``e^{-i w t} x`` (into the frame of ``t = 0``); identity without a phase."""
    return x if phase is None else complex_pairs.rotate(x, phase[0], -phase[1])


def _unit(x: torch.Tensor) -> torch.Tensor:
    """``x / |x|`` over the last axis; a zero vector stays zero (it has no direction)."""
    norm2 = complex_pairs.squared_modulus(x).unsqueeze(-1)
    return x * torch.rsqrt(torch.clamp(norm2, min=torch.finfo(x.dtype).tiny))


def _block_size(block_size, steps: int) -> int:
    if block_size is None:
        return max(steps, 1)
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer or None, found {block_size!r}")
    return block_size


@overflow_warning
def isotropic_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t=None,
    decay,
    frequencies,
    process_var,
    measurement_var,
    nu=math.inf,
    temperature=1.0,
    causal: bool = True,
    normalized_qk: bool = False,
    return_weights: bool = False,
    value_decay=None,
    value_frequencies=None,
    value_process_var=None,
    value_measurement_var=None,
    bias_qk=None,
    bias_v=None,
    block_size: int | None = 64,
    backend: str = "auto",
) -> AFAOutput:
    """Isotropic AFA, factorised (seed 000 3.4-3.7, Algorithm 1 of 4.1): ``O(T^2 + T D)`` memory.

    One decay ``a``, process variance ``sigma^2`` and measurement variance ``eta^2`` per head
    (``A = -a I + Omega``), so the precision ``P(tau) = 1 / V(tau)`` and the decay
    ``E(tau) = e^{-a tau}`` are ``(T, T)`` matrices. With ``Zq~_i = e^{-i w t_i} Zq_i`` (and the
    same for keys and values; seed 000 3.6) the squared residual factorises into one matmul::

        |R[i, j]|^2 = |Zq_i|^2 + E_ij^2 |Zk_j|^2 - 2 E_ij Re(Zq~_i^H Zk~_j),
        L[i, j] = log P_v(tau_ij) - temperature * log(1 + P_qk(tau_ij) |R[i, j]|^2 / nu),
        A = softmax_j(L) over visible keys,   A_hat = E_v * A,
        Zbar_i = e^{i w_v t_i} sum_j A_hat[i, j] Zv~_j.

    ``nu = inf`` gives ``L = log P_v`` (the batch MLE weights, content-free). Algorithm 1's
    ``L = -log(V^C + |R|^2)`` is the case ``nu = 1``: ``-log(V + |R|^2) = log P - log(1 + P
    |R|^2)``; any other ``nu`` is absorbed there into ``sigma, eta`` and the projections (4.1).
    Algorithm 1 also multiplies the whole ``L`` by its temperature, i.e. ``P_v^temperature``
    as the prior; here the temperature acts on the robust term only (the exponential-log form
    of the weight, 4.1), so ``temperature = 1`` is the rational weight of 3.1 exactly. Its
    printed mask (``L * M_causal``) would give masked keys the logit 0; they get ``-inf`` here.
    The decay is ``e^{-a (t_i - t_j)}`` on the lag (never ``e^{-a t_i} e^{a t_j}``, 3.6 (b)).

    On the uniform grid ``t = None`` every kernel is Toeplitz (3.3): it is evaluated once per
    call on the ``2T - 1`` lags. Queries are processed in blocks of ``block_size`` (causal
    blocks stop at their last query), so at most ``(B, H, block_size, T)`` scores exist at a
    time; there is no data-dependent control flow (``torch.compile`` traces it).

    Parameters
    ----------
    q, k : (B, H, T, D); v : (B, H, T, Dv).
    t : None (``t_i = i``), (T,) or (B, T) strictly increasing time stamps.
    decay : (H,) ``a >= 0`` (``Re lambda = -a``).
    frequencies : (H, D/2) ``w`` of the complex features, or None: no rotation, real features
        of any width (decay, precision and robust weights still apply).
    process_var : (H,) ``sigma^2 >= 0``.   measurement_var : (H,) ``eta^2 > 0``.
    nu : robust scale > 0, ``math.inf`` (W = 1), or an (H,) tensor.
    temperature : number or (H,) tensor.
    causal : keys with ``t_j <= t_i`` only; otherwise all, with the backward covariance.
    normalized_qk : normalise ``q`` and ``k`` to unit length (post-projection QK-norm, end of
        3.8) and use ``|Zq| = |Zk| = 1`` in the residual (3.7).
    return_weights : also return ``A`` (B, H, T, T) (rows sum to one over the visible keys;
        the value decay ``E_v`` is applied after it).
    value_decay, value_frequencies, value_process_var, value_measurement_var : separate value
        dynamics (3.1): ``P_v``, ``E_v`` and the value rotation; default the q/k ones
        (``value_frequencies`` (H, Dv/2) is then required when ``Dv != D``).
    bias_qk : (H, D) drift bias added to queries and keys (3.9: ``b_qk = lambda_C u_s /
        lambda``, so that ``Zhat_k = E (Zk + b) - b`` and ``R = (Zq + b) - E (Zk + b)``).
    bias_v : (H, Dv) value bias: added to the values and subtracted from the estimate,
        ``Zbar = sum_j A_hat (Zv_j + b) - b`` (3.9; the rows of ``A`` sum to one).
    block_size : queries per block, or None for all at once.
    backend : ``"auto"`` (the fused kernel `kernels.triton.filtering_attention` for CUDA inputs
        when it supports the options, else torch), ``"torch"`` or ``"triton"`` (unsupported
        options raise ValueError; see `kernels.backend.use_triton`).

    Returns
    -------
    AFAOutput: ``output`` (B, H, T, Dv), the filtered estimate at ``t_i`` in the query frame;
    ``weights`` (B, H, T, T) or None.
    """
    unsupported = {
        "return_weights": return_weights,
        "value dynamics (value_*)": any(
            x is not None
            for x in (value_decay, value_frequencies, value_process_var, value_measurement_var)
        ),
        "drift biases (bias_qk, bias_v)": bias_qk is not None or bias_v is not None,
    }
    if use_triton(backend, q, unsupported):
        from kernels.triton.filtering_attention import isotropic_afa_triton

        output = isotropic_afa_triton(
            q,
            k,
            v,
            t=t,
            decay=decay,
            frequencies=frequencies,
            process_var=process_var,
            measurement_var=measurement_var,
            nu=nu,
            temperature=temperature,
            causal=causal,
            normalized_qk=normalized_qk,
        )
        return AFAOutput(output, None)
    batch, heads, steps, n_qk, n_v, rotate_qk, rotate_v = _widths(
        q, k, v, frequencies, value_frequencies
    )
    qk, vd = _both_dynamics(
        heads,
        n_qk,
        n_v,
        q,
        per_feature=False,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
        value_decay=value_decay,
        value_frequencies=value_frequencies,
        value_process_var=value_process_var,
        value_measurement_var=value_measurement_var,
    )
    shared = value_decay is None and value_process_var is None and value_measurement_var is None
    inv_nu = _robust_scale(nu, heads, q)
    temperature = _temperature(temperature, heads, q).view(1, heads, 1, 1)
    block = _block_size(block_size, steps)
    b_qk = _bias("bias_qk", bias_qk, heads, q.shape[-1], q)
    b_v = _bias("bias_v", bias_v, heads, v.shape[-1], v)
    options = {"causal": causal, "shared": shared, "normalized": normalized_qk}
    if t is None:
        positions = torch.arange(steps, dtype=q.dtype, device=q.device).view(1, 1, steps)
        kernels = _ToeplitzKernels(steps, q, qk, vd, inv_nu, **options)
    else:
        positions = _relative_times(t, steps, q)
        kernels = _IrregularKernels(positions, qk, vd, inv_nu, **options)

    if b_qk is not None:
        q, k = q + b_qk, k + b_qk
    if b_v is not None:
        v = v + b_v
    if normalized_qk:
        q, k = _unit(q), _unit(k)
    phase_qk = _phase(positions, qk.frequency)
    phase_v = phase_qk if value_frequencies is None else _phase(positions, vd.frequency)
    q_t, k_t, v_t = _unrotate(q, phase_qk), _unrotate(k, phase_qk), _unrotate(v, phase_v)
    qn = kn = None
    if inv_nu is not None and not normalized_qk:
        qn = complex_pairs.squared_modulus(q).unsqueeze(-1)
        kn = complex_pairs.squared_modulus(k).unsqueeze(-2)

    output, weights = _attend_blocks(
        kernels,
        q_t,
        k_t,
        v_t,
        qn,
        kn,
        temperature,
        causal=causal,
        block=block,
        want_weights=return_weights,
    )
    if phase_v is not None:
        output = complex_pairs.rotate(output, *phase_v)
    if b_v is not None:
        output = output - b_v
    return AFAOutput(output, weights)


def _attend_blocks(kernels, q, k, v, qn, kn, temperature, *, causal, block, want_weights):
    """Run `_attend` over blocks of ``block`` queries; causal blocks stop at their last query.

    Returns ``(output (B, H, T, Dv), weights (B, H, T, T) or None)``.
    """
    batch, heads, steps, _ = q.shape
    flip = kernels.reversed_keys
    if flip:  # keys [0, j1) in reverse order are then the last j1 of the reversed sequence
        k, v = k.flip(-2), v.flip(-2)
        kn = None if kn is None else kn.flip(-1)

    def keys(x, dim, j1):
        return x.narrow(dim, steps - j1 if flip else 0, j1)

    outputs, weights = [], []
    for i0 in range(0, steps, block):
        i1 = min(i0 + block, steps)
        j1 = i1 if causal else steps
        out, attn = _attend(
            kernels.tile(i0, i1, j1),
            q[..., i0:i1, :],
            keys(k, -2, j1),
            keys(v, -2, j1),
            None if qn is None else qn[..., i0:i1, :],
            None if kn is None else keys(kn, -1, j1),
            temperature,
            causal=causal,
            want_weights=want_weights,
        )
        outputs.append(out)
        if want_weights:
            attn = attn.flip(-1) if flip else attn
            attn = torch.nn.functional.pad(attn, (0, steps - j1))
            weights.append(attn.expand(batch, heads, i1 - i0, steps))
    return torch.cat(outputs, dim=2), torch.cat(weights, dim=2) if want_weights else None


# ---------------------------------------------------------------------------------------------
# Separable precision (seed 000 B.1)
# ---------------------------------------------------------------------------------------------


def _separable_factors(d: _Dynamics, rel):
    """``(c, f, g)`` with ``c + f_i g_j = P~(t_i - t_j)`` (B.1); rel: (Bt, 1, T, 1) -> (.., n).

    ``c = 1 / lam_eff``, ``f_i = -c (1 - lam_eff / eta^2) e^{-D rel_i}``, ``g_j = e^{D rel_j}``,
    ``D = sigma^2 / eta^2``, ``lam_eff = sigma^2 / (2 a)``.
    """
    a, s2, e2 = (x[None, :, None, :] for x in (d.decay, d.process_var, d.measurement_var))
    lam_eff = s2 / (2 * a)
    rate = s2 / e2
    c = 1 / lam_eff
    f = -c * (1 - lam_eff / e2) * torch.exp(-rate * rel)
    return c, f, torch.exp(rate * rel)


def _transition(d: _Dynamics, rel):
    """``e^{lambda rel}`` as ``(magnitude, cos, sin)`` of shape (Bt, H, T, n)."""
    a = d.decay[None, :, None, :]
    magnitude = torch.exp(-a * rel)
    if d.frequency is None:
        return magnitude, torch.ones_like(magnitude), torch.zeros_like(magnitude)
    angle = d.frequency[None, :, None, :] * rel
    return magnitude, torch.cos(angle), torch.sin(angle)


@overflow_warning
def separable_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t=None,
    decay,
    frequencies,
    process_var,
    measurement_var,
    nu=math.inf,
    temperature=1.0,
    value_decay=None,
    value_frequencies=None,
    value_process_var=None,
    value_measurement_var=None,
    return_weights: bool = False,
) -> AFAOutput:
    """Causal AFA with B.1's separable per-feature precision, ``O(T^2 + T D)`` memory.

    B.1 replaces the per-feature precision by ``P~[k, i, j] = c_k + f_ik g_jk`` (value and slope
    matched at lag 0, `_log_separable_precision`), so that with the factorised residual of 3.5
    (``Phi = e^{lambda (t_i - t_ref)}``, ``Zhat = e^{-lambda (t - t_ref)} Z``)::

        D[i, j] = sum_k (c_k + f_ik g_jk) |Phi_ik|^2 |Zq^_ik - Zk^_jk|^2      (one matmul),
        W = (1 + D / nu)^(-temperature) on j <= i,
        N = c (W 1) + f (W g),   U = c (W Zv^) + f (W (g Zv^)),   Zbar = Phi_v U / N.

    (B.1 writes ``W = 1 / (1 + D)``, ``nu`` absorbed, and prints ``c[k]`` outside the sum over
    ``k``; it belongs inside.) Equal to ``tensor_afa(..., precision="separable")``. The factors
    grow like ``e^{max(a, sigma^2/eta^2) |t - t_ref|}`` with ``t_ref`` the middle of the time
    span, as B.1's factorisation does; keep ``max(a, sigma^2/eta^2) * span / 2`` well below
    the exponent range (about 80 in float32, 700 in float64).

    Parameters are those of `tensor_afa` (per-feature dynamics (H,) or (H, n); ``decay > 0`` and
    ``process_var > 0`` are needed for ``lam_eff``). ``return_weights`` gives the robust weight
    matrix ``W`` (B, H, T, T) (zero above the diagonal; the per-feature attention is
    ``W P~ / N``).
    """
    batch, heads, steps, n_qk, n_v, rotate_qk, rotate_v = _widths(
        q, k, v, frequencies, value_frequencies
    )
    qk, vd = _both_dynamics(
        heads,
        n_qk,
        n_v,
        q,
        per_feature=True,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
        value_decay=value_decay,
        value_frequencies=value_frequencies,
        value_process_var=value_process_var,
        value_measurement_var=value_measurement_var,
    )
    for prefix, d in (("", qk), ("value_", vd)):
        _check_values(f"{prefix}decay (separable precision)", d.decay, positive=True)
        _check_values(f"{prefix}process_var (separable precision)", d.process_var, positive=True)
    inv_nu = _robust_scale(nu, heads, q)
    temp = _temperature(temperature, heads, q).view(1, heads, 1, 1)
    times = check_times(t, steps, like=q)
    middle = 0.5 * (times.amax(-1, keepdim=True) + times.amin(-1, keepdim=True))
    rel = (times - middle).unsqueeze(-1)  # (Bt, 1, T, 1)
    causal = torch.ones(steps, steps, dtype=torch.bool, device=q.device).tril()

    weights = torch.ones((), dtype=q.dtype, device=q.device)
    if inv_nu is not None:
        distance = _separable_distance(q, k, qk, rel, rotate_qk)
        log_w = -temp * torch.log1p(torch.clamp(distance, min=0.0) * inv_nu.view(1, heads, 1, 1))
        weights = torch.exp(log_w)
    weights = torch.where(causal, weights, torch.zeros((), dtype=q.dtype, device=q.device))
    weights = weights.expand(batch, heads, steps, steps)

    c, f, g = _separable_factors(vd, rel)
    magnitude, cos, sin = _transition(vd, rel)
    vr, vi = _complex_parts(v, rotate_v)
    # Zv^ = e^{-lambda_v (t_j - t_ref)} Zv; right-hand sides [1, g, Zv^, g Zv^] of one matmul
    hat_r, hat_i = (vr * cos + vi * sin) / magnitude, (vi * cos - vr * sin) / magnitude
    g = g.expand_as(hat_r)
    right = torch.cat(
        (torch.ones_like(hat_r[..., :1]), g, hat_r, hat_i, g * hat_r, g * hat_i), dim=-1
    )
    sums = (weights @ right).split([1, n_v, n_v, n_v, n_v, n_v], dim=-1)
    norm = c * sums[0] + f * sums[1]
    u_r, u_i = c * sums[2] + f * sums[4], c * sums[3] + f * sums[5]
    out_r = magnitude * (u_r * cos - u_i * sin) / norm
    out_i = magnitude * (u_r * sin + u_i * cos) / norm
    output = complex_pairs.merge(out_r, out_i) if rotate_v else out_r
    return AFAOutput(output, weights if return_weights else None)


def _separable_distance(q, k, qk: _Dynamics, rel, rotate: bool) -> torch.Tensor:
    """``D[i, j] = sum_k (c_k + f_ik g_jk) |R[k, i, j]|^2`` through one matmul (B.1, 3.5)."""
    c, f, g = _separable_factors(qk, rel)
    magnitude, cos, sin = _transition(qk, rel)
    qr, qi = _complex_parts(q, rotate)
    kr, ki = _complex_parts(k, rotate)
    # x = conj(Phi) Zq and Zk^ = e^{-lambda rel_j} Zk, so Re(conj(Zq) Phi Zk^) = Re(x^H Zk^).
    xr, xi = magnitude * (qr * cos + qi * sin), magnitude * (qi * cos - qr * sin)
    kr_hat, ki_hat = (kr * cos + ki * sin) / magnitude, (ki * cos - kr * sin) / magnitude
    q2, k2_hat, phi2 = qr * qr + qi * qi, kr_hat * kr_hat + ki_hat * ki_hat, magnitude**2
    c, f, g, phi2 = (x.expand_as(q2) for x in (c, f, g, phi2))
    left = torch.cat(
        (c * phi2, f * q2, f * phi2, -2 * c * xr, -2 * c * xi, -2 * f * xr, -2 * f * xi), dim=-1
    )
    right = torch.cat((k2_hat, g, g * k2_hat, kr_hat, ki_hat, g * kr_hat, g * ki_hat), dim=-1)
    return (c * q2).sum(-1, keepdim=True) + left @ right.transpose(-1, -2)


# ---------------------------------------------------------------------------------------------
# Prediction (seed 000 2.3, 3.1, 3.9, Algorithm 1)
# ---------------------------------------------------------------------------------------------


@overflow_warning
def predict(estimate: torch.Tensor, *, decay, frequencies=None, step=1.0, bias=None):
    """One-step transition ``Z+ = e^{lambda step} (Zbar + b) - b``, ``lambda = -a + i w``.

    Seed 000 3.1 (``Z_v^+[k, i] = E_v[k, i + 1, i] Zbar[k, i]``), 2.3 and 3.9 (with the drift
    bias ``b``). Algorithm 1 prints ``e^{alpha dt} e^{lambda_Omega dt}`` with ``Re lambda =
    -alpha^2``: the decay factor is ``e^{-a dt}``.

    Parameters
    ----------
    estimate : (B, H, T, D) real pairs (with frequencies) or real features.
    decay : (H,) or (H, n) ``a >= 0``.   frequencies : (H, n) or None (no rotation).
    step : the horizon ``dt``: a number, or a tensor (T,) / (B, T) of per-step horizons (e.g.
        ``t_{i+1} - t_i``).
    bias : (H, D) drift bias of 3.9, or None.

    Returns
    -------
    (B, H, T, D).
    """
    if not isinstance(estimate, torch.Tensor) or estimate.ndim != 4:
        found = tuple(estimate.shape) if isinstance(estimate, torch.Tensor) else type(estimate)
        raise ValueError(f"estimate must be a (B, H, T, D) tensor, found {found}")
    check_data("estimate", estimate)
    _, heads, steps, dim = estimate.shape
    rotate = frequencies is not None
    if rotate and dim % 2:
        raise ValueError(
            f"estimate feature size D must be even when frequencies are given, found {dim}"
        )
    width = dim // 2 if rotate else dim
    a = _parameter("decay", decay, heads, width, estimate)
    _check_values("decay", a, positive=False)
    a = a[None, :, None, :]
    if isinstance(step, torch.Tensor) and step.ndim > 0:
        if step.shape[-1] != steps or step.ndim > 2:
            raise ValueError(
                f"step must be a number, (T,) or (B, T) with T = {steps}, found {tuple(step.shape)}"
            )
        step = step.to(estimate.dtype).reshape(-1, 1, steps, 1)
    b = _bias("bias", bias, heads, dim, estimate)
    x = estimate if b is None else estimate + b
    scale = torch.exp(-a * step)
    if rotate:
        angle = _parameter("frequencies", frequencies, heads, width, estimate)[None, :, None, :]
        x = complex_pairs.rotate(
            x, scale * torch.cos(angle * step), scale * torch.sin(angle * step)
        )
    else:
        x = x * scale
    return x if b is None else x - b

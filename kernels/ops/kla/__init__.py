"""Kalman Linear Attention (KLA), seed 001: the information-form Kalman filter as prefix scans.

Every channel is an independent scalar filter of the zero-mean OU prior observed through
token-dependent keys (seed 001 eqs. (7)-(9); digest sections 1.2-1.7):

    z_t | z_{t-1} ~ N(a_bar_t z_{t-1}, p_bar_t),      v_t | z_t ~ N(k_t z_t, 1 / Lambda^v_t),

with the posterior ``N(mu_t, 1 / lam_t)``. With ``phi_t = k_t^2 Lambda^v_t`` and
``b_t = k_t Lambda^v_t v_t``:

* precision (Thm 1, eqs. (16)-(18)): ``lam_t = M_t(lam_{t-1})``, the Moebius map of
  ``M_t = [[1 + p_bar phi_t, a_bar^2 phi_t], [p_bar, a_bar^2]]``; ``lam_t = (M_t ... M_1)(lam_0)``
  (Cor. 1.1, later step on the *left*; the printed ``M_1 o ... o M_T`` has the order reversed,
  digest section 8), identity ``I_2`` (not stated in the seed, digest 1.6). Each product is
  divided by its trace (the authors' kernels, digest 1.13): the map is unchanged and the entries
  stay in ``[0, 1]``, so no product over- or underflows at any T, ``p_bar = 0`` included.
* mean: the paper scans the information mean ``eta_t = f_t eta_{t-1} + b_t`` with
  ``f_t = a_bar / (a_bar^2 + p_bar lam_{t-1})`` (Thm 2, eq. (19)). With ``p_bar = 0`` that gate is
  ``1 / a_bar > 1`` and ``eta`` grows like ``a_bar^{-t}``: fp32 overflows after about
  ``88 / (a dt)`` tokens (digest C11). Here the mean is scanned in the equivalent moment form of
  Cor. 2.2, eq. (20): ``mu_t = g_t mu_{t-1} + u_t`` with ``g_t = a_bar (1 - phi_t / lam_t)``
  (= ``a_bar lam^prior_t / lam_t``, in ``[0, a_bar]``) and ``u_t = b_t / lam_t``, an affine scan
  ``(g2, u2) o (g1, u1) = (g2 g1, g2 u1 + u2)`` (identity ``(1, 0)``) whose prefixes are bounded.
  ``1 / lam_t`` is read from the normalised homogeneous coordinates ``(x, y) = prefix @
  (lam_0, 1)`` as ``y / x``, so a precision beyond the float range gives variance 0, not NaN.
* readouts: ``mu_t``, ``Var = 1 / lam_t``, ``eta_t = lam_t mu_t`` and, with a query,
  ``y_t = q_t mu_t`` with variance ``q_t^2 / lam_t`` (eq. (11), Alg. 1). The state-expanded
  readout ``y = sum_n q_n mu[n, :]`` (App. A) is ``output.sum(dim=-2)`` on (B, T, N, D) tokens.

Shapes: tokens are ``(B, T, *S)`` with time on axis 1 and any state shape ``S`` (``(D,)`` for
D channels, ``(N, D)`` for N slots by D channels: keys (B, T, N, 1) and values (B, T, 1, D)
broadcast to (B, T, N, D), eqs. (22)-(23)). ``a_bar``, ``p_bar`` and ``q`` broadcast to the token
shape (``(N, D)`` for the paper's time-invariant prior, per-token for irregular steps);
``lam0``, ``eta0`` broadcast to the state shape ``(B, *S)``.

The op folder (the house plan of ``kernels/ops``):

* `naive`: the float64 token loop in moment form (`naive_kla`), the oracle the fast forms are
  tested against;
* `params`: the OU prior `ou_prior`, the one argument check `prepare` and the types
  `KLAState`, `KLAScanResult`, shared by the torch forms and the kernel;
* `chunked`: the forward-only chunked CPU scan (`chunked_filter`, ``method="chunked"``);
* `scan`: the torch forms (`kla_scan_torch`: odd-even, doubling, sequential or chunked scans;
  `kla_step`, the O(1) decoding step; `prefix_scan` and its combine operators);
* `triton`: the chunked Triton scan, forward and backward (`kla_scan_triton`; imports `params`,
  never `scan`);
* `attention`: the equivalent attention matrix `kla_attention_matrix` (App. E.4), weights
  ``(B, *S, T, T)`` with ``output = weights @ v`` (plus the starting mean's term);
* `loss`: the KLA+ Monte-Carlo marginal likelihood `mc_marginal_nll` (eqs. (24)-(25));
* this module: the entry point `kla_scan`, which dispatches on ``backend``
  (`kernels.backend.use_triton`).
"""

from __future__ import annotations

from kernels._validation import overflow_warning
from kernels.backend import use_triton
from kernels.ops.kla.attention import KLAAttention, kla_attention_matrix
from kernels.ops.kla.loss import mc_marginal_nll
from kernels.ops.kla.naive import naive_kla
from kernels.ops.kla.params import (
    P_CONVENTIONS,
    SCAN_METHODS,
    KLAScanResult,
    KLAState,
    ou_prior,
    real_tensor,
)
from kernels.ops.kla.scan import (
    affine_combine,
    kla_scan_torch,
    kla_step,
    mobius_combine,
    prefix_scan,
)

__all__ = [
    "P_CONVENTIONS",
    "SCAN_METHODS",
    "KLAAttention",
    "KLAScanResult",
    "KLAState",
    "affine_combine",
    "kla_attention_matrix",
    "kla_scan",
    "kla_step",
    "mc_marginal_nll",
    "mobius_combine",
    "naive_kla",
    "ou_prior",
    "prefix_scan",
]


@overflow_warning
def kla_scan(
    k,
    value_precision,
    v,
    a_bar,
    p_bar,
    *,
    q=None,
    lam0=1.0,
    eta0=0.0,
    method: str = "parallel",
    backend: str = "auto",
) -> KLAScanResult:
    """KLA's per-channel Kalman filter over a sequence (seed 001 Thms 1-2, Cors 1.1, 2.1-2.2).

    Parameters
    ----------
    k : keys ``k_t``, (B, T, *S) or broadcasting there with `value_precision` and `v`.
    value_precision : ``Lambda^v_t >= 0``; 0 marks a missing token (a pure prediction step).
    v : values ``v_t``.
    a_bar : decay ``e^{-a dt} > 0`` broadcasting to the token shape (`ou_prior`).
    p_bar : transition variance ``>= 0``, broadcast like `a_bar` (0 is the p = 0 ablation).
    q : optional query broadcasting to the token shape; ``output = q mu`` elementwise.
    lam0, eta0 : belief before the first token, broadcasting to (B, *S); ``lam0 > 0``. The paper
        never states them; the defaults ``lam0 = 1, eta0 = 0`` are the authors' code (digest 1.13).
    method : ``"parallel"`` (odd-even scans: O(log T) depth, O(T) work), ``"hillis-steele"``
        (doubling scans: O(log T) depth, O(T log T) work), ``"sequential"`` (a loop of
        `kla_step`; with ``p_bar = 0`` its information state overflows fp32 after about
        ``44 / (a dt)`` tokens, where the scans stay finite) or ``"chunked"`` (forward only, for
        the CPU: each chunk's 3x3 homogeneous map composed at once for ~sqrt(T) chunks, then the
        step from each chunk's incoming belief, `kernels.ops.kla.chunked`; 9-17x the token loop
        on bench_scan's workload at T = 2^12 .. 2^16 on 2 CPU threads; raises RuntimeError when
        an input requires gradients). Used by the torch backend.
    backend : ``"auto"`` (the Triton chunked scan `kernels.ops.kla.triton.kla_scan_triton` when
        ``k`` is a CUDA tensor of dtype float32/bfloat16/float16 and ``method="parallel"``, else
        the torch form `kernels.ops.kla.scan.kla_scan_torch`), ``"torch"`` or ``"triton"`` (on
        CPU only under ``TRITON_INTERPRET=1``). Decided at each call from the inputs; Triton is
        imported only when it runs.

    Returns
    -------
    KLAScanResult

    Raises
    ------
    ValueError
        Shapes that do not broadcast, fewer than 3 token axes, ``a_bar <= 0``, negative
        ``value_precision`` or ``p_bar``, ``lam0 <= 0``, an unknown method or backend;
        ``backend="triton"`` with another method, dtype float64, or CPU tensors outside the
        Triton interpreter.
    TypeError
        A non-tensor or non-floating `k`, or complex arguments.
    RuntimeError
        ``method="chunked"`` while an input requires gradients (it is forward-only).
    """
    if method not in SCAN_METHODS:
        raise ValueError(f"method must be one of {SCAN_METHODS}, found {method!r}")
    if use_triton(backend, real_tensor("k", k), {f"method={method!r}": method != "parallel"}):
        from kernels.ops.kla.triton import kla_scan_triton

        return kla_scan_triton(k, value_precision, v, a_bar, p_bar, q=q, lam0=lam0, eta0=eta0)
    return kla_scan_torch(
        k, value_precision, v, a_bar, p_bar, q=q, lam0=lam0, eta0=eta0, method=method
    )

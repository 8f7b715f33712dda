"""Robust Filter Attention, isotropic (seed 004 Algorithm 1, eqs. 9-11, B.3, D.1).

Each head models its (complex) features as eigen-coordinates of a linear SDE with isotropic
decay and per-feature rotation, ``lambda_k = -mu + i omega_k``, process noise ``sigma^2``,
key-side measurement noise ``eta^2`` and query-side (anchor) noise ``gamma^2``. A key ``k_j`` is
transported to the query time ``t_i`` by ``e^{lambda (t_i - t_j)}``; its residual against the
query has the lag-dependent variance of eq. (9),

    V(tau) = sigma~^2 (1 - e^{-2 mu tau}) + eta^2 e^{-2 mu tau} + gamma^2,   tau = |t_i - t_j|,
           = a e^{-2 mu tau} + b,   a = eta^2 - sigma~^2,  b = gamma^2 + sigma~^2,

with ``sigma~^2 = sigma^2 / (2 mu)`` (``|lambda_C| = 1``: the gain is absorbed by the
projections). ``a > 0`` is the integrative regime (precision rising with the lag), ``a < 0``
the diffusive one. Given ``sigma^2`` (the default, what the paper's runs learned, D.2 Note) the
``mu -> 0`` limit is the Brownian ``sigma^2 tau + eta^2 + gamma^2`` (B.4.2, the ALiBi limit);
given ``sigma~^2`` (``steady_state=True``, Algorithm 1) it is the constant ``eta^2 + gamma^2``.
``V`` is evaluated from its non-negative parts, never as ``a e^{-2 mu tau} + b``, which cancels
when ``sigma~^2 >> eta^2 + gamma^2`` (see `estimators.closed_forms.measurement`); ``a + b =
eta^2 + gamma^2 > 0`` is all positivity needs (the paper's ``|a| <= b`` is not required).

Per head (rotations ``Phi^-_i = e^{-i omega t_i}``, ``E_ij = e^{-mu |t_i - t_j|}``,
``P = 1/V``, ``B = log P``; Algorithm 1)::

    q~, k~, v~ = Phi^- q, Phi^- k, Phi^- v                       (RoPE-type rotation)
    |R_ij|^2   = |q_i|^2 + E_ij^2 |k_j|^2 - 2 E_ij Re(q~_i^H k~_j)  (eq. 10, one matmul)
    L_ij       = B_ij - kappa log(1 + P_ij |R_ij|^2 / nu),  kappa = (nu + d)/d   (eq. 11)
    A^         = softmax_j(tau_s L + M_causal),   A = A^ * E        (post-softmax decay)
    out_i      = Phi^+_i sum_j A_ij v~_j = sum_j A^_ij e^{lambda (t_i - t_j)} v_j

``d`` is the number of complex features per head, ``D / 2`` (the public code's count; E.1's
"d_k = 64" counts reals): with features that are the eigen-coordinates of a real d-dimensional
system this is the dimension of the residual, so ``kappa = (nu + d)/d`` is the Student-t
exponent of `estimators.irls` (family ``"power"``). Two facts the paper leaves implicit:

* ``nu -> inf`` does not give the Gaussian estimator: ``kappa log(1 + x/nu) -> x/d``, so the
  limit logit is ``B - P |R|^2 / d`` (pass ``nu=math.inf`` for it). The plain precision-weighted
  average, eq. (4), is the exponential kernel (M2.1) at ``nu = inf``: ``L = B``.
* The anchor of the residual is the query itself, so one call is one IRLS step from the
  measurement initialisation (seed 004 C.3, ``z^(1)_ii = z_i``), not the fixed point.

Ablations of seed 004 E.2 (each relative to the full model; flags are keyword options):

* M2.1 ``weight_kernel="exponential"``: ``L = B - P |R|^2 / nu`` (weight ``exp(-d^2/nu)``).
* M2.2 ``precision_prior=False``: noise removed, ``P = 1`` and ``B = 0`` at every lag (the
  decay ``E`` and the rotations stay).
* M2.3 ``precision_gate=False``: the gate ``P`` inside the log is frozen at its lag-0 value
  ``1 / (eta^2 + gamma^2)``; the additive ``B`` is kept. (The paper says only "a constant"; the
  public code uses ``1/sqrt(d)``. The lag-0 value makes M2.3 differ from M2 only through the
  lag dependence of the gate.)
* M2.4 ``rotate_values=False``: values are neither rotated nor counter-rotated (``E`` kept).
* M2.5 ``rotate_qk=False, rotate_values=False``: no rotation anywhere (decay-only dynamics).
* M2.6 ``unitary_limit=True``: no decay, no noise, no magnitude terms: ``L = Re(q~^H k~) /
  sqrt(D)``, ``A = A^``, values rotated and counter-rotated (phase-only, RoPER-like). The
  ``1/sqrt(D)`` scale is the dot-product convention; the paper gives none.

SC-RFA (M2) differs from RFA (M1) only in the frequencies and decays: pass a
`kernels.ops.common.positional.SpectralCoupling` as ``frequencies`` (decay ``b max omega_h``).

Cost: ``O(T^2 D)`` time, ``O(T^2 + T D)`` memory (the torch form, `kernels.ops.rfa.isotropic`,
in blocks of query rows), ``O(T D)`` memory in the fused kernel (`kernels.ops.rfa.triton`).

The op folder: `naive` (the float64 complex loop over ``(i, j)`` with every switch, the oracle),
`params` (the argument preparation the torch form and the packer share), `precision` (eq. 9's
lag kernel), `isotropic` (the torch form), `triton` (the fused kernel's packer), and this
module, the entry point that takes the parameter objects (`Dynamics`, `Robust`) or their
keywords and dispatches on ``backend``.

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)`` real pairs ``[re | im]``, ``D = 2n``; ``t``
``(T,)`` or ``(B, T)``; output ``(B, H, T, Dv)``, weights ``(B, H, T, T)``.
"""

from __future__ import annotations

import torch

from kernels._validation import overflow_warning
from kernels.backend import tile_reason, use_triton
from kernels.ops.common.attention import AttentionOutput
from kernels.ops.common.params import NOT_GIVEN, Dynamics, Robust
from kernels.ops.rfa import isotropic as _isotropic
from kernels.ops.rfa.params import DYNAMICS_DEFAULTS, WEIGHT_KERNELS
from kernels.ops.rfa.precision import LagKernel, lag_variance, rfa_lag_kernel


@overflow_warning
def rfa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    dynamics: Dynamics | None = None,
    robust: Robust | None = None,
    frequencies=NOT_GIVEN,
    decay=NOT_GIVEN,
    t=None,
    process_var=NOT_GIVEN,
    measurement_var=NOT_GIVEN,
    anchor_var=0.0,
    steady_state: bool = False,
    nu=NOT_GIVEN,
    temperature=NOT_GIVEN,
    causal: bool = True,
    return_weights: bool = False,
    weight_kernel: str = "student-t",
    precision_prior: bool = True,
    precision_gate: bool = True,
    rotate_qk: bool = True,
    rotate_values: bool = True,
    unitary_limit: bool = False,
    block_size: int | None = None,
    backend: str = "auto",
) -> AttentionOutput:
    """Isotropic Robust Filter Attention (seed 004 Algorithm 1); see the module docstring.

    Parameters
    ----------
    q, k : (B, H, T, D) real pairs ``[re | im]`` of ``n = D/2`` complex features.
    v : (B, H, T, Dv), ``Dv`` even; ``Dv = D`` when ``rotate_values`` (the values share the
        frequencies).
    dynamics : a `Dynamics` (no value twin), or its keywords:
    frequencies : (n,) or (H, n) rotation frequencies ``omega_k`` (``lambda_k = -mu + i
        omega_k``), or a `kernels.ops.common.positional.SpectralCoupling` (SC-RFA), which also
        sets the decay. Required.
    decay : ``mu >= 0`` per head, scalar or (H,); required unless ``frequencies`` is a coupling.
    process_var : ``sigma^2 >= 0`` (or ``sigma~^2`` if ``steady_state``), scalar or (H,);
        default 0.
    measurement_var : ``eta^2 >= 0`` (default 1), with ``eta^2 + gamma^2 > 0``.
    anchor_var : ``gamma^2 >= 0``, the query-side (anchor) noise of eq. (9); default 0.
    t : (T,) or (B, T) strictly increasing time stamps; default ``t_i = i`` (Toeplitz kernels).
    steady_state : read ``process_var`` as the steady-state ``sigma~^2 = sigma^2 / (2 mu)``.
    robust : a `Robust`, or its keywords:
    nu : Student-t degrees of freedom ``> 0`` (scalar or (H,)), or ``math.inf`` (the limit, the
        default).
    temperature : inverse temperature ``tau_s > 0`` of Algorithm 1 (scalar or (H,); default 1).
    causal : keys ``j <= i`` only (default) or all keys.
    return_weights : also return ``A = A^ * E`` (B, H, T, T).
    weight_kernel, precision_prior, precision_gate, rotate_qk, rotate_values, unitary_limit :
        the ablations M2.1-M2.6 (module docstring).
    block_size : query rows per block (memory/speed only; the result does not depend on it);
        default about ``2^18 / (B H T)`` rows, within [16, 256] (the kernel's default tile on
        the fused path, which takes powers of two >= 16).
    backend : ``"auto"`` (the fused kernel `kernels.ops.rfa.triton` for CUDA inputs when it
        supports the options, else torch), ``"torch"`` or ``"triton"`` (unsupported options
        raise ValueError; see `kernels.backend.use_triton`).

    Returns
    -------
    AttentionOutput(output (B, H, T, Dv) ``Phi^+_i sum_j A_ij v~_j``, weights (B, H, T, T) the
    decayed ``A = A^ * E`` applied to the rotated values (rows do not sum to 1 when ``mu > 0``)
    or None).
    """
    dynamics = Dynamics.resolve(
        dynamics,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
        defaults=DYNAMICS_DEFAULTS,
    )
    if dynamics.value is not None:
        raise ValueError("rfa_attention takes one set of dynamics (values rotate with q and k)")
    robust = Robust.resolve(robust, nu=nu, temperature=temperature)
    unsupported = {
        "return_weights": return_weights,
        "steady_state": steady_state,
        f"weight_kernel={weight_kernel!r}": weight_kernel != "student-t",
        "precision_prior=False": not precision_prior,
        "precision_gate=False": not precision_gate,
        "rotate_qk=False": not rotate_qk,
        "rotate_values=False": not rotate_values,
        "unitary_limit": unitary_limit,
        **tile_reason(block_size),
    }
    if use_triton(backend, q, unsupported):
        from kernels.ops.rfa.triton import rfa_attention_triton  # imports Triton: only here

        output = rfa_attention_triton(
            q,
            k,
            v,
            dynamics=dynamics,
            robust=robust,
            t=t,
            anchor_var=anchor_var,
            causal=causal,
            block_size=block_size,
        )
        return AttentionOutput(output, None)
    return _isotropic.rfa_attention(
        q,
        k,
        v,
        t=t,
        dynamics=dynamics,
        robust=robust,
        anchor_var=anchor_var,
        steady_state=steady_state,
        causal=causal,
        return_weights=return_weights,
        weight_kernel=weight_kernel,
        precision_prior=precision_prior,
        precision_gate=precision_gate,
        rotate_qk=rotate_qk,
        rotate_values=rotate_values,
        unitary_limit=unitary_limit,
        block_size=block_size,
    )


__all__ = [
    "WEIGHT_KERNELS",
    "AttentionOutput",
    "Dynamics",
    "LagKernel",
    "Robust",
    "lag_variance",
    "rfa_attention",
    "rfa_lag_kernel",
]

"""Adaptive Filter Attention (AFA), seed 000: tensor form, isotropic form, separable precision.

Model (seed 000 2.1-2.3, 3.1). Each head works in the eigenbasis of a linear SDE: complex
feature ``k`` evolves as ``dZ_k = lambda_k Z_k dt + noise`` with ``lambda_k = -a_k + i w_k``
(decay ``a_k = -Re lambda_k >= 0``, frequency ``w_k``), process variance ``sigma_k^2`` and
measurement variance ``eta_k^2`` (the seed's ``|lambda_C|^2`` is absorbed into ``sigma^2``, as
seed 000 4.1 does): a `Dynamics` (`kernels.ops.common.params`). With the lag ``tau_ij = t_i -
t_j`` (``>= 0`` for the keys a causal query sees), the key measured at ``t_j`` pulled forward to
``t_i`` is ``Zhat[k, i, j] = e^{lambda_k tau_ij} Z[k, j]``, distributed around the true value
with the propagated variance ``V_k(tau)`` of seed 000 A.3 (both signs of ``tau``, in log space:
`kernels.ops.afa.precision`).

The layer (seed 000 3.1) weighs the pulled-forward values by their model precisions
``P = 1 / V`` times a robust weight of the query-key residual ``R = Zq_i - Zhat_k[i, j]``
(`Robust`: ``nu`` and the temperature):

    W[i, j] = (1 + sum_k P_qk[k, i, j] |R[k, i, j]|^2 / nu)^(-temperature),
    A[k, i, j] = W[i, j] P_v[k, i, j] / sum_{j'} W[i, j'] P_v[k, i, j'],
    Zbar[k, i] = sum_j A[k, i, j] e^{lambda_v,k tau_ij} Zv[k, j].

``temperature = 1`` is the seed's rational weight (the Student-t / Cauchy IRLS weight, A.4);
``nu = inf`` gives ``W = 1`` and the batch MLE (2.2). Seed 000 2.3 prints the rescaling as
``P <- P / w``; the layer (and the seed's own IRLS update) uses ``w P``.

The op folder (the house plan of ``kernels/ops``):

* `naive`: the float64 complex loop over ``(i, j)``, the oracle the forms are tested against;
* `params`: the argument preparation every form and the packer share;
* `precision`: the lag kernels (A.3's variance, B.1's separable precision);
* `tensor` (3.1, per-feature, ``O(T^2 D)``), `isotropic` (Algorithm 1, 3.3-3.9,
  ``O(T^2 + T D)``), `separable` (B.1), `transition` (`predict`): the torch forms;
* `triton`: the fused isotropic kernel's packer (imports `params`, never the torch forms);
* this module: the entry points, which take the parameter objects or their keywords and
  dispatch `isotropic_afa` on ``backend`` (`kernels.backend.use_triton`).

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``. With frequencies the features are complex in
real pairs (`kernels.ops.common.complex_pairs`: ``[re | im]``, ``D = 2n``); with
``frequencies=None`` they are real features of any width (no rotation; decay, precision and the
robust weight still apply). Time stamps ``t`` are ``(T,)`` or ``(B, T)``, strictly increasing;
``None`` means ``t_i = i`` (a uniform grid, where the lag kernels are Toeplitz, seed 000 3.3).
"""

from __future__ import annotations

import torch

from kernels._validation import overflow_warning
from kernels.backend import tile_reason, use_triton
from kernels.ops.afa import isotropic as _isotropic
from kernels.ops.afa import separable as _separable
from kernels.ops.afa import tensor as _tensor
from kernels.ops.afa.params import PRECISIONS, AFAOutput
from kernels.ops.afa.transition import predict
from kernels.ops.common.params import NOT_GIVEN, Dynamics, Robust


def _objects(dynamics, robust, **keywords) -> tuple[Dynamics, Robust]:
    """The parameter objects of a call: as given, or built from the documented keywords."""
    nu, temperature = keywords.pop("nu"), keywords.pop("temperature")
    return Dynamics.resolve(dynamics, **keywords), Robust.resolve(
        robust, nu=nu, temperature=temperature
    )


@overflow_warning
def tensor_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t=None,
    dynamics: Dynamics | None = None,
    robust: Robust | None = None,
    decay=NOT_GIVEN,
    frequencies=NOT_GIVEN,
    process_var=NOT_GIVEN,
    measurement_var=NOT_GIVEN,
    nu=NOT_GIVEN,
    temperature=NOT_GIVEN,
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
    dynamics : a `Dynamics` (with an optional value twin), or its keywords:
    decay : ``a >= 0`` per head ``(H,)`` or per feature ``(H, n)`` (``lambda = -a + i w``).
    frequencies : ``w``, ``(H, n)`` with ``n = D / 2`` complex features, or None: real features
        (``n = D``), no rotation.
    process_var : ``sigma^2 >= 0``, (H,) or (H, n).  measurement_var : ``eta^2 > 0``, (H,)/(H, n).
    robust : a `Robust`, or its keywords:
    nu : robust scale, > 0 or ``math.inf`` (no reweighting, the default); a number or an (H,)
        tensor.
    temperature : exponent of the robust weight (1, the default: the rational weight); number
        or (H,).
    causal : keys ``t_j <= t_i`` only (True) or all keys, with the backward (``tau < 0``)
        covariance of A.3.
    value_decay, value_frequencies, value_process_var, value_measurement_var : separate value
        dynamics (3.1; the keywords of ``Dynamics.value``); default the q/k ones
        (``value_frequencies`` must then be given when ``Dv != D``).
    precision : ``"exact"`` or ``"separable"`` (B.1's approximation of both precisions; causal
        only, needs ``a > 0`` and ``sigma^2 > 0``).
    return_weights : also return ``A`` as ``(B, H, T, T, n_v)`` (query, key, value feature).

    Returns
    -------
    AFAOutput with ``output`` (B, H, T, Dv).
    """
    dynamics, robust = _objects(
        dynamics,
        robust,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
        value_decay=value_decay,
        value_frequencies=value_frequencies,
        value_process_var=value_process_var,
        value_measurement_var=value_measurement_var,
        nu=nu,
        temperature=temperature,
    )
    return _tensor.tensor_afa(
        q,
        k,
        v,
        t=t,
        dynamics=dynamics,
        robust=robust,
        causal=causal,
        precision_form=precision,
        return_weights=return_weights,
    )


@overflow_warning
def isotropic_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t=None,
    dynamics: Dynamics | None = None,
    robust: Robust | None = None,
    decay=NOT_GIVEN,
    frequencies=NOT_GIVEN,
    process_var=NOT_GIVEN,
    measurement_var=NOT_GIVEN,
    nu=NOT_GIVEN,
    temperature=NOT_GIVEN,
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
    dynamics : a `Dynamics` (per head; an optional value twin), or its keywords:
    decay : (H,) ``a >= 0`` (``Re lambda = -a``).
    frequencies : (H, D/2) ``w`` of the complex features, or None: no rotation, real features
        of any width (decay, precision and robust weights still apply).
    process_var : (H,) ``sigma^2 >= 0``.   measurement_var : (H,) ``eta^2 > 0``.
    robust : a `Robust`, or its keywords:
    nu : robust scale > 0, ``math.inf`` (W = 1, the default), or an (H,) tensor.
    temperature : number or (H,) tensor (default 1).
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
    block_size : queries per block (the fused kernel's tile: a power of two >= 16 there), or
        None for all at once (the kernel's default tile).
    backend : ``"auto"`` (the fused kernel `kernels.ops.afa.triton` for CUDA inputs when it
        supports the options, else torch), ``"torch"`` or ``"triton"`` (unsupported options
        raise ValueError; see `kernels.backend.use_triton`).

    Returns
    -------
    AFAOutput: ``output`` (B, H, T, Dv), the filtered estimate at ``t_i`` in the query frame;
    ``weights`` (B, H, T, T) or None.
    """
    dynamics, robust = _objects(
        dynamics,
        robust,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
        value_decay=value_decay,
        value_frequencies=value_frequencies,
        value_process_var=value_process_var,
        value_measurement_var=value_measurement_var,
        nu=nu,
        temperature=temperature,
    )
    unsupported = {
        "return_weights": return_weights,
        "value dynamics (value_*)": dynamics.value is not None,
        "drift biases (bias_qk, bias_v)": bias_qk is not None or bias_v is not None,
        **tile_reason(block_size),
    }
    if use_triton(backend, q, unsupported):
        from kernels.ops.afa.triton import isotropic_afa_triton  # imports Triton: only here

        output = isotropic_afa_triton(
            q,
            k,
            v,
            t=t,
            dynamics=dynamics,
            robust=robust,
            causal=causal,
            normalized_qk=normalized_qk,
            block_size=block_size,
        )
        return AFAOutput(output, None)
    return _isotropic.isotropic_afa(
        q,
        k,
        v,
        t=t,
        dynamics=dynamics,
        robust=robust,
        causal=causal,
        normalized_qk=normalized_qk,
        return_weights=return_weights,
        bias_qk=bias_qk,
        bias_v=bias_v,
        block_size=block_size,
    )


@overflow_warning
def separable_afa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    t=None,
    dynamics: Dynamics | None = None,
    robust: Robust | None = None,
    decay=NOT_GIVEN,
    frequencies=NOT_GIVEN,
    process_var=NOT_GIVEN,
    measurement_var=NOT_GIVEN,
    nu=NOT_GIVEN,
    temperature=NOT_GIVEN,
    value_decay=None,
    value_frequencies=None,
    value_process_var=None,
    value_measurement_var=None,
    return_weights: bool = False,
) -> AFAOutput:
    """Causal AFA with B.1's separable per-feature precision, ``O(T^2 + T D)`` memory.

    B.1 replaces the per-feature precision by ``P~[k, i, j] = c_k + f_ik g_jk`` (value and slope
    matched at lag 0), so that with the factorised residual of 3.5 the robust distance and the
    weighted sums are matrix products (`kernels.ops.afa.separable`). Equal to
    ``tensor_afa(..., precision="separable")``.

    Parameters are those of `tensor_afa` (per-feature dynamics (H,) or (H, n); ``decay > 0`` and
    ``process_var > 0`` are needed for ``lam_eff``). ``return_weights`` gives the robust weight
    matrix ``W`` (B, H, T, T) (zero above the diagonal; the per-feature attention is
    ``W P~ / N``).
    """
    dynamics, robust = _objects(
        dynamics,
        robust,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
        value_decay=value_decay,
        value_frequencies=value_frequencies,
        value_process_var=value_process_var,
        value_measurement_var=value_measurement_var,
        nu=nu,
        temperature=temperature,
    )
    return _separable.separable_afa(
        q, k, v, t=t, dynamics=dynamics, robust=robust, return_weights=return_weights
    )


__all__ = [
    "PRECISIONS",
    "AFAOutput",
    "Dynamics",
    "Robust",
    "isotropic_afa",
    "predict",
    "separable_afa",
    "tensor_afa",
]

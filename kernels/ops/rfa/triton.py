"""Isotropic RFA (seed 004 Algorithm 1) in the fused kernel `kernels.ops.common.fused_filtering`.

The packer: RFA's prepared arguments (`kernels.ops.rfa.params`, nothing else of the family)
become the kernel's per-head `Coefficients` (``a = mu``, ``sigma^2``, ``eta^2``, ``gamma^2``, the
gate scale and exponent of the call's penalty, prior scale ``tau_s``: the RFA lag convention with
symmetric lags, eq. 9), the inputs are rotated by the one rotation, the kernel runs, and the
output is rotated back. It equals the torch form `kernels.ops.rfa.isotropic` to the tolerances
of `kernels.tolerances`. Parameters and rotations are evaluated in float32.

Supported: the default ablation switches (Student-t kernel, precision prior and gate, rotated
queries, keys and values, not the unitary limit, ``steady_state=False``), causal or not, any
stamps, finite or infinite ``nu``, per-head parameters, float32/bfloat16/float16 inputs, no
weights (`kernels.ops.rfa.rfa_attention` keeps the rest with torch).

Shapes: ``q, k, v (B, H, T, D)`` -> ``(B, H, T, D)`` in the input dtype.
"""

from __future__ import annotations

import torch

from kernels.ops.common import fused_filtering as fused
from kernels.ops.common.params import NOT_GIVEN, Dynamics, Robust
from kernels.ops.common.rotation import Rotation, from_origin
from kernels.ops.rfa import params


def rfa_attention_triton(
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
    nu=NOT_GIVEN,
    temperature=NOT_GIVEN,
    causal: bool = True,
    block_size: int | None = None,
) -> torch.Tensor:
    """`kernels.ops.rfa.rfa_attention` (default ablation switches) in one fused kernel.

    Parameters are those of `rfa_attention` (the objects or their keywords); ``block_size`` is
    the tile (a power of two >= 16; None: `kernels.backend.DEFAULT_TILE`). Returns the output
    ``(B, H, T, D)`` in the input dtype.
    """
    dynamics = Dynamics.resolve(
        dynamics,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
        defaults=params.DYNAMICS_DEFAULTS,
    )
    robust = Robust.resolve(robust, nu=nu, temperature=temperature)
    ref = q.detach()[..., :0].float()  # parameters and rotations in float32 for any input dtype
    p = params.prepare(
        q,
        k,
        v,
        t,
        dynamics,
        robust,
        anchor_var=anchor_var,
        steady_state=False,
        weight_kernel="student-t",
        precision_prior=True,
        precision_gate=True,
        unitary_limit=False,
        rotate_values=True,
        like=ref,
    )
    cfg = p.config
    stamps = from_origin(p.times)
    rotation = Rotation.at(stamps, p.frequencies)
    q_t, k_t, v_t = (rotation.apply(x.float(), sign=-1) for x in (q, k, v))
    coefficients = fused.Coefficients(
        decay=cfg.decay,
        process_var=cfg.process_var,
        measurement_var=cfg.measurement_var,
        anchor_var=cfg.anchor_var,
        gate_scale=cfg.gate_scale,
        exponent=-cfg.neg_coef if cfg.penalty == "log" else None,
        prior_scale=cfg.temperature,
    )
    out = fused.attend(
        q_t,
        k_t,
        v_t,
        stamps,
        coefficients,
        family=fused.RFA,
        penalty=fused.PENALTY_LOG if cfg.penalty == "log" else fused.PENALTY_LINEAR,
        causal=causal,
        block_size=block_size,
        dtype=q.dtype,
    )
    return rotation.apply(out, sign=1).to(v.dtype)

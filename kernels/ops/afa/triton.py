"""Isotropic AFA (seed 000 Algorithm 1) in the fused kernel `kernels.ops.common.fused_filtering`.

The packer: AFA's prepared arguments (`kernels.ops.afa.params`, nothing else of the family)
become the kernel's per-head `Coefficients` (``a = decay``, ``sigma^2``, ``eta^2``, gate scale
``1 / nu``, exponent = temperature, prior scale 1, no anchor variance: the AFA lag convention
with signed lags and the backward variance of seed 000 A.3), the inputs are rotated into the
frame of each sequence's first stamp by the one rotation (`from_origin`), the kernel
runs, and the output is rotated back. It equals the torch form `kernels.ops.afa.isotropic` to
the tolerances of `kernels.tolerances`.
Parameters and rotations are evaluated in float32 for every input dtype.

Supported: one set of dynamics for queries, keys and values, with or without frequencies,
``normalized_qk`` either way, causal or not, ``t`` None, ``(T,)`` or ``(B, T)``, finite or
infinite ``nu``, per-head parameters, float32/bfloat16/float16 inputs; no weights, no drift
biases (`kernels.ops.afa.isotropic_afa` keeps those with torch).

Shapes: ``q, k (B, H, T, D)``, ``v (B, H, T, Dv)`` -> ``(B, H, T, Dv)`` in the input dtype.
"""

from __future__ import annotations

import torch

from kernels.ops.afa import params
from kernels.ops.common import fused_filtering as fused
from kernels.ops.common.params import NOT_GIVEN, Dynamics, Robust
from kernels.ops.common.rotation import Rotation


def isotropic_afa_triton(
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
    block_size: int | None = None,
) -> torch.Tensor:
    """`kernels.ops.afa.isotropic_afa` (shared dynamics, no biases) in one fused kernel.

    Parameters are those of `isotropic_afa` (the objects or their keywords); ``block_size`` is
    the tile (a power of two >= 16; None: `kernels.backend.DEFAULT_TILE`). Returns the output
    ``(B, H, T, Dv)`` in the input dtype.
    """
    dynamics = Dynamics.resolve(
        dynamics,
        decay=decay,
        frequencies=frequencies,
        process_var=process_var,
        measurement_var=measurement_var,
    )
    robust = Robust.resolve(robust, nu=nu, temperature=temperature)
    if dynamics.value is not None:
        raise ValueError("the fused kernel takes one set of dynamics (no value dynamics)")
    ref = q.detach()[..., :0].float()  # parameters and rotations in float32 for any input dtype
    p = params.prepare(q, k, v, dynamics, robust, per_feature=False, like=ref)
    positions = params.positions(t, p.steps, ref)
    q32, k32, v32 = q.float(), k.float(), v.float()
    if normalized_qk:
        q32, k32 = params.unit(q32), params.unit(k32)
    phase = None if p.qk.frequencies is None else Rotation.at(positions, p.qk.frequencies)
    q_t, k_t, v_t = (x if phase is None else phase.apply(x, sign=-1) for x in (q32, k32, v32))
    coefficients = fused.Coefficients(
        decay=p.qk.decay,
        process_var=p.qk.process_var,
        measurement_var=p.qk.measurement_var,
        gate_scale=None if p.nu is None else torch.reciprocal(p.nu),
        exponent=p.temperature,
        prior_scale=torch.ones(p.heads, dtype=torch.float32, device=q.device),
    )
    out = fused.attend(
        q_t,
        k_t,
        v_t,
        positions,
        coefficients,
        family=fused.AFA,
        penalty=fused.PENALTY_NONE if p.nu is None else fused.PENALTY_LOG,
        causal=causal,
        block_size=block_size,
        dtype=q.dtype,
    )
    if phase is not None:
        out = phase.apply(out)
    return out.to(v.dtype)

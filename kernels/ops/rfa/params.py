"""RFA's argument preparation, shared by the torch form and the fused kernel's packer.

`prepare` validates a call once: shapes (``q, k (B, H, T, D)``, ``v (B, H, T, Dv)``, ``D`` and
``Dv`` even, ``Dv = D`` when the values rotate), the time stamps (``(Bt, 1, T)``), the per-head
spectrum (``(H, n)`` frequencies, ``n = D / 2``, from a tensor or a
`kernels.ops.common.positional.SpectralCoupling`, which also sets the decay) and the `Config`:
the per-head ``(H, 1, 1)`` parameters of seed 004 eq. (9)-(11) (decay ``mu``, ``sigma^2`` or
``sigma~^2``, ``eta^2``, the anchor variance ``gamma^2``, the inverse temperature ``tau_s``) and
the logit's penalty for the call's ``nu`` and weight kernel:

    "log"     L = tau_s log P - tau_s kappa log(1 + P |R|^2 / nu),  kappa = (nu + d) / d,
    "linear"  L = tau_s log P - g P |R|^2     (g = tau_s / d at nu = inf; tau_s / nu for the
              exponential kernel),
    "none"    L = tau_s log P                 (the exponential kernel at nu = inf, eq. 4).

The torch form (`kernels.ops.rfa.isotropic`) and the packer (`kernels.ops.rfa.triton`) read only
this, so ``nu`` and every other quantity is checked once per call.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels import _validation
from kernels.ops.common.attention import head_parameter
from kernels.ops.common.params import Dynamics, Robust
from kernels.ops.common.positional import head_spectrum

WEIGHT_KERNELS = ("student-t", "exponential")
# The defaults of RFA's dynamics keywords (`kernels.ops.rfa.rfa_attention`): the decay comes
# from a SpectralCoupling when not given; no process noise; unit measurement variance.
DYNAMICS_DEFAULTS = {"decay": None, "process_var": 0.0, "measurement_var": 1.0}


class Config(NamedTuple):
    """Static choices and per-head ``(H, 1, 1)`` parameters of one call."""

    decay: torch.Tensor
    process_var: torch.Tensor
    measurement_var: torch.Tensor
    anchor_var: torch.Tensor
    temperature: torch.Tensor
    penalty: str  # "log": tau kappa log(1 + u); "linear": u; "none"
    neg_coef: torch.Tensor | None  # -tau kappa ("log" only; otherwise folded into the gate)
    gate_scale: torch.Tensor | None  # 1/nu (log), tau/nu or tau/d (linear)
    steady_state: bool
    precision_prior: bool
    precision_gate: bool
    unitary_limit: bool
    dot_scale: float


class Problem(NamedTuple):
    """One call's validated arguments (`prepare`): sizes ``B, H, T, D, Dv, n = D / 2``, the
    stamps ``times (Bt, 1, T)``, the frequencies ``(H, n)`` and the `Config`."""

    batch: int
    heads: int
    steps: int
    dim: int
    vdim: int
    n: int
    times: torch.Tensor
    frequencies: torch.Tensor
    config: Config


def prepare(
    q,
    k,
    v,
    t,
    dynamics: Dynamics,
    robust: Robust,
    *,
    anchor_var,
    steady_state: bool,
    weight_kernel: str,
    precision_prior: bool,
    precision_gate: bool,
    unitary_limit: bool,
    rotate_values: bool,
    like,
) -> Problem:
    """Validate a call once; parameters in ``like``'s dtype and device (module docstring)."""
    batch, heads, steps, dim, vdim = _validation.check_qkv(q, k, v, even=True)
    n = dim // 2
    if rotate_values and vdim != dim:
        raise ValueError(
            f"v must have the feature size of q (D = {dim}) to be rotated with the same "
            f"frequencies, found {vdim}; pass rotate_values=False for other sizes"
        )
    times = _validation.check_times(t, steps, like=like)
    if times.shape[0] not in (1, batch):
        raise ValueError(f"t batch size must be 1 or {batch}, found {times.shape[0]}")
    freq, decay = head_spectrum(
        dynamics.frequencies, dynamics.decay, heads=heads, num_frequencies=n, like=like
    )
    if decay is None:
        raise TypeError("decay is required unless frequencies is a SpectralCoupling")
    config = _config(
        heads,
        n,
        like,
        decay=decay,
        process_var=dynamics.process_var,
        measurement_var=dynamics.measurement_var,
        anchor_var=anchor_var,
        steady_state=steady_state,
        nu=robust.nu,
        temperature=robust.temperature,
        weight_kernel=weight_kernel,
        precision_prior=precision_prior,
        precision_gate=precision_gate,
        unitary_limit=unitary_limit,
    )
    return Problem(batch, heads, steps, dim, vdim, n, times, freq, config)


def _config(
    heads: int,
    n: int,
    like,
    *,
    decay,
    process_var,
    measurement_var,
    anchor_var,
    steady_state,
    nu,
    temperature,
    weight_kernel,
    precision_prior,
    precision_gate,
    unitary_limit,
) -> Config:
    if weight_kernel not in WEIGHT_KERNELS:
        raise ValueError(f"weight_kernel must be one of {WEIGHT_KERNELS}, found {weight_kernel!r}")
    mu = head_parameter("decay", decay, heads, like)
    sigma2 = head_parameter("process_var", process_var, heads, like)
    eta2 = head_parameter("measurement_var", measurement_var, heads, like)
    gamma2 = head_parameter("anchor_var", anchor_var, heads, like)
    tau = head_parameter("temperature", temperature, heads, like, positive=True)
    if precision_prior and not unitary_limit:
        zero_lag = (eta2 + gamma2).detach()
        if not torch.compiler.is_compiling() and (zero_lag <= 0).any():
            raise ValueError(
                "measurement_var + anchor_var must be > 0 (the lag-0 variance), found "
                f"{zero_lag.flatten().tolist()}"
            )
    infinite = isinstance(nu, (int, float)) and not isinstance(nu, bool) and math.isinf(nu)
    if infinite and nu < 0:
        raise ValueError(f"nu must be > 0, found {nu!r}")
    dof = None if infinite else head_parameter("nu", nu, heads, like, positive=True)
    if unitary_limit:  # L = tau Re(q~^H k~) / sqrt(D), carried by the gs term
        penalty, coef, gate_scale = "linear", None, None
    elif weight_kernel == "student-t" and dof is not None:
        penalty, coef, gate_scale = "log", -tau * (dof + n) / n, 1.0 / dof  # -tau kappa, 1/nu
    elif weight_kernel == "student-t":  # kappa log(1 + x/nu) -> x/d
        penalty, coef, gate_scale = "linear", None, tau / n
    elif dof is not None:
        penalty, coef, gate_scale = "linear", None, tau / dof
    else:  # exponential kernel at nu = inf: weights P, eq. (4)
        penalty, coef, gate_scale = "none", None, None
    return Config(
        mu,
        sigma2,
        eta2,
        gamma2,
        tau,
        penalty,
        coef,
        gate_scale,
        steady_state,
        precision_prior,
        precision_gate,
        unitary_limit,
        1.0 / math.sqrt(2 * n),
    )

"""Unrolled AFA's argument preparation, shared by the loop and the chunked (Gaussian) form.

`prepare` validates a call once: the measurements ``values (B, H, T, D)`` (real pairs, ``D =
2n``), the stamps (``(B or 1, 1, T)``), the `Dynamics` per head (``a, sigma^2 >= 0``, ``eta^2
> 0``, frequencies ``(H, n)``), the `Robust` weighting (``nu > 0``, ``inf`` for the Kalman filter;
``temperature > 0``), the damping ``delta`` in (0, 1], ``K >= 1`` inner iterations, the weight
family and the optional prior at ``t_0``. The result, `Problem`, is all the forms read.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._validation import as_parameter, check_data, check_finite, check_times
from kernels.ops.common.params import Dynamics, Robust

WEIGHTS = ("rational", "student-t")
# "auto": the chunked attention form where it applies (nu = inf), the loop otherwise.
METHODS = ("auto", "loop")


class UnrolledAFAResult(NamedTuple):
    """Output of :func:`unrolled_afa`.

    output : (B, H, T, D) filtered estimates ``x_i = E[z^C_i | z_0..z_i]`` (real pairs).
    precision : (B, H, T) posterior precision ``p_i = 1/v_i`` per mode (the seed's ``p_i^+``).
    prediction : (B, H, T, D) one-step predictions ``x_i^-`` from ``z_0..z_{i-1}``; at ``i = 0``
        the prior mean (zeros for the diffuse start).
    prediction_precision : (B, H, T) ``1/v_i^-``; at ``i = 0`` the prior precision (0: diffuse).
    weight : (B, H, T) robust weight ``w`` of each measurement at the last inner iteration.
    """

    output: torch.Tensor
    precision: torch.Tensor
    prediction: torch.Tensor
    prediction_precision: torch.Tensor
    weight: torch.Tensor


class Problem(NamedTuple):
    """One call's validated arguments (`prepare`).

    batch, heads, steps, n : ``B, H, T`` and the complex features per head.
    times : (B or 1, 1, T).   decay, process_var, measurement_var, nu, temperature, damping :
    (H,) each.   frequencies : (H, n).   plain : ``delta = 1`` exactly and no gradient wanted.
    gaussian : ``nu = inf`` in every head (``w = 1``).   inner : inner iterations to run.
    weight : the weight family.   prior : ``(mean (B, H, D), variance (B, H))`` or None.
    """

    batch: int
    heads: int
    steps: int
    n: int
    times: torch.Tensor
    decay: torch.Tensor
    frequencies: torch.Tensor
    process_var: torch.Tensor
    measurement_var: torch.Tensor
    nu: torch.Tensor
    temperature: torch.Tensor
    damping: torch.Tensor
    plain: bool
    gaussian: bool
    inner: int
    weight: str
    prior: tuple | None


def check_options(iterations, weight, method) -> None:
    """The unrolled filter's discrete options: ``iterations`` an int >= 1, ``weight`` in
    `WEIGHTS`, ``method`` in `METHODS` (ValueError naming the option)."""
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an integer K >= 1, found {iterations!r}")
    if weight not in WEIGHTS:
        raise ValueError(f"weight must be one of {WEIGHTS}, found {weight!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, found {method!r}")


def prepare(
    values,
    t,
    dynamics: Dynamics,
    robust: Robust,
    *,
    iterations,
    damping,
    weight,
    method,
    prior_mean,
    prior_variance,
) -> Problem:
    """Validate a call of `kernels.ops.unrolled.unrolled_afa` once (module docstring)."""
    batch, heads, steps, dim = _check_values(values)
    n = dim // 2
    check_options(iterations, weight, method)
    if dynamics.value is not None:
        raise ValueError("unrolled_afa takes one set of dynamics (the values are the state)")
    times = check_times(t, steps, like=values)  # (B or 1, 1, T)
    a = _per_head("decay", dynamics.decay, heads, values, low=0.0, strict=False)
    q = _per_head("process_var", dynamics.process_var, heads, values, low=0.0, strict=False)
    r = _per_head("measurement_var", dynamics.measurement_var, heads, values, low=0.0, strict=True)
    nu = _per_head("nu", robust.nu, heads, values, low=0.0, strict=True, inf=True)
    tau = _per_head("temperature", robust.temperature, heads, values, low=0.0, strict=True)
    plain = _is_one(damping)
    delta = _per_head("damping", damping, heads, values, low=0.0, strict=True, high=1.0)
    omega = check_finite("frequencies", as_parameter("frequencies", dynamics.frequencies, values))
    if omega.shape not in ((n,), (heads, n)):
        raise ValueError(
            f"frequencies must have shape ({heads}, {n}) or ({n},) (one per complex feature, "
            f"D/2 = {n}), found {tuple(omega.shape)}"
        )
    omega = omega.expand(heads, n)
    gaussian = bool(torch.isinf(nu.detach()).all())
    inner = 1 if gaussian and plain else iterations  # all K updates coincide: w = 1, delta = 1
    if (prior_mean is None) != (prior_variance is None):
        raise ValueError("prior_mean and prior_variance must be given together (or neither)")
    prior = None if prior_mean is None else _prior(prior_mean, prior_variance, values)
    return Problem(
        batch, heads, steps, n, times, a, omega, q, r, nu, tau, delta, plain, gaussian, inner,
        weight, prior,
    )  # fmt: skip


def _per_head(name, value, heads: int, like: torch.Tensor, *, low, strict, high=None, inf=False):
    """A scalar or ``(H,)`` parameter as an ``(H,)`` tensor, range checked (NaN rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a float or a tensor of shape ({heads},), found {value!r}")
    value = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if value.shape not in ((), (heads,)):
        raise ValueError(
            f"{name} must be a scalar or have shape ({heads},) (one per head), "
            f"found {tuple(value.shape)}"
        )
    detached = value.detach()
    bad = torch.isnan(detached) | (detached <= low if strict else detached < low)
    if not inf:  # only nu may be infinite (the Gaussian limit)
        bad = bad | torch.isinf(detached)
    if high is not None:
        bad = bad | (detached > high)
    if bad.any():
        bound = f"> {low}" if strict else f">= {low}"
        if high is not None:
            bound = f"in ({low}, {high}]"
        found = detached[bad].flatten()[0].item()
        raise ValueError(f"{name} must be {bound}, found {found}")
    return value.expand(heads)


def _is_one(damping) -> bool:
    """``delta = 1`` exactly and no gradient wanted: the inner update is then ``x = x_*``."""
    if isinstance(damping, torch.Tensor):
        return not damping.requires_grad and bool((damping == 1).all())
    return isinstance(damping, (int, float)) and not isinstance(damping, bool) and damping == 1


def _check_values(values) -> tuple[int, int, int, int]:
    return check_data("values", values, even=True)


def _prior(prior_mean, prior_variance, values: torch.Tensor):
    """``(B, H, D)`` mean and ``(B, H)`` variance from broadcastable inputs, checked."""
    batch, heads, _, dim = values.shape
    x = torch.as_tensor(prior_mean, dtype=values.dtype, device=values.device)
    v = torch.as_tensor(prior_variance, dtype=values.dtype, device=values.device)
    try:
        x = x.expand(batch, heads, dim)
        v = v.expand(batch, heads)
    except RuntimeError:
        raise ValueError(
            f"prior_mean must broadcast to ({batch}, {heads}, {dim}) and prior_variance to "
            f"({batch}, {heads}), found {tuple(x.shape)} and {tuple(v.shape)}"
        ) from None
    if bool((torch.isnan(v.detach()) | (v.detach() < 0)).any()):
        raise ValueError("prior_variance must be >= 0, found a negative or NaN entry")
    return x, v

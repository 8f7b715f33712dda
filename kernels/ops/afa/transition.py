"""AFA's prediction: the one-step transition ``Z+ = e^{lambda dt} (Zbar + b) - b`` (seed 000 3.1).

Seed 000 3.1 (``Z_v^+[k, i] = E_v[k, i + 1, i] Zbar[k, i]``), 2.3 and 3.9 (with the drift bias
``b``); ``lambda = -a + i omega``. Algorithm 1 prints ``e^{alpha dt} e^{lambda_Omega dt}`` with
``Re lambda = -alpha^2``: the decay factor is ``e^{-a dt}``. The transition is the one rotation
(`kernels.ops.common.rotation`) with the magnitude ``e^{-a dt}``.

Shapes: ``estimate (B, H, T, D)`` (real pairs with frequencies, real features without) ->
``(B, H, T, D)``.
"""

from __future__ import annotations

import torch

from kernels._validation import check_data, overflow_warning
from kernels.ops.afa import params
from kernels.ops.common.params import NOT_GIVEN, Dynamics
from kernels.ops.common.rotation import Rotation


@overflow_warning
def predict(
    estimate: torch.Tensor,
    *,
    dynamics: Dynamics | None = None,
    decay=NOT_GIVEN,
    frequencies=NOT_GIVEN,
    step=1.0,
    bias=None,
):
    """One-step transition ``Z+ = e^{lambda step} (Zbar + b) - b``, ``lambda = -a + i w``.

    Parameters
    ----------
    estimate : (B, H, T, D) real pairs (with frequencies) or real features.
    dynamics : a `Dynamics` (only its decay and frequencies are used), or the keywords:
    decay : (H,) or (H, n) ``a >= 0``.   frequencies : (H, n) or None (no rotation; the default).
    step : the horizon ``dt``: a number, or a tensor (T,) / (B, T) of per-step horizons (e.g.
        ``t_{i+1} - t_i``).
    bias : (H, D) drift bias of 3.9, or None.

    Returns
    -------
    (B, H, T, D).
    """
    dynamics = Dynamics.resolve(
        dynamics,
        decay=decay,
        frequencies=frequencies,
        defaults={"frequencies": None, "process_var": 0.0, "measurement_var": 1.0},
    )
    if not isinstance(estimate, torch.Tensor) or estimate.ndim != 4:
        found = tuple(estimate.shape) if isinstance(estimate, torch.Tensor) else type(estimate)
        raise ValueError(f"estimate must be a (B, H, T, D) tensor, found {found}")
    if not estimate.is_floating_point():  # complex states travel as real pairs [re | im]
        raise TypeError(f"estimate must be a real floating tensor, found dtype {estimate.dtype}")
    check_data("estimate", estimate)  # B, H, T >= 1; warns when too large to square
    _, heads, steps, dim = estimate.shape
    rotate = dynamics.frequencies is not None
    if rotate and dim % 2:
        raise ValueError(
            f"estimate feature size D must be even when frequencies are given, found {dim}"
        )
    width = dim // 2 if rotate else dim
    a = params.per_head("decay", dynamics.decay, heads, width, estimate)
    params.check_values("decay", a, positive=False)
    a = a[None, :, None, :]
    if isinstance(step, torch.Tensor) and step.ndim > 0:
        if step.shape[-1] != steps or step.ndim > 2:
            raise ValueError(
                f"step must be a number, (T,) or (B, T) with T = {steps}, found {tuple(step.shape)}"
            )
        step = step.to(estimate.dtype).reshape(-1, 1, steps, 1)
    b = params.bias("bias", bias, heads, dim, estimate)
    x = estimate if b is None else estimate + b
    scale = torch.exp(-a * step)
    if rotate:
        w = params.per_head("frequencies", dynamics.frequencies, heads, width, estimate)
        angle = w[None, :, None, :] * step
        x = Rotation.of(scale * torch.cos(angle), scale * torch.sin(angle)).apply(x)
    else:
        x = x * scale
    return x if b is None else x - b

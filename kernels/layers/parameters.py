"""Parameter maps and initialisation shared by the layers.

Positive parameters are stored raw and mapped through ``softplus`` (DESIGN.md section 3);
`inverse_softplus` loads a given value. `seeded_linear` builds an ``nn.Linear`` whose
initialisation is drawn only from the given generator (the module is created uninitialised,
so the global RNG is never touched).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    """``r`` with ``softplus(r) = x`` for ``x >= 0``: ``x + log(-expm1(-x))``.

    Exact for all ``x > 0`` (no overflow of ``log(expm1(x))`` at large ``x``); ``-inf`` at 0 and
    ``+inf`` at ``+inf``.
    """
    return x + torch.log(-torch.expm1(-x))


def seeded_linear(
    fan_in: int,
    fan_out: int,
    *,
    generator: torch.Generator | None = None,
    bias: bool = True,
    std: float | None = None,
    device=None,
    dtype=None,
) -> nn.Linear:
    """``nn.Linear(fan_in, fan_out)`` initialised from ``generator`` (never the global RNG).

    Without ``std``, PyTorch's default: weight ``kaiming_uniform(a = sqrt 5)`` (that is
    ``U(-1, 1) / sqrt(fan_in)``), bias ``U(-1, 1) / sqrt(fan_in)``. With ``std``: weight
    ``N(0, std^2)`` (drawn in float64, then cast), bias 0 (the complex Glorot initialisation of
    `kernels.layers.rfa`).
    """
    if device is None:  # skip_init builds on "meta", then allocates on this device
        device = torch.get_default_device()
    layer = nn.utils.skip_init(nn.Linear, fan_in, fan_out, bias=bias, device=device, dtype=dtype)
    with torch.no_grad():
        if std is not None:
            shape, where = layer.weight.shape, layer.weight.device
            draw = torch.randn(shape, generator=generator, dtype=torch.float64, device=where)
            layer.weight.copy_(std * draw)
            if bias:
                layer.bias.zero_()
            return layer
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        if bias:
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return layer

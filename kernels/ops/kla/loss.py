"""The KLA+ training loss: the Monte-Carlo marginal likelihood of the readout (seed 001).

``-log p(o_t | X) ~ -logsumexp_s log p(o_t | y^(s)) + log S`` with ``y^(s) = mean +
sqrt(variance) eps^(s)`` (eqs. (24)-(25)): `mc_marginal_nll`. Shapes: readout ``mean``,
``variance`` ``(..., F)``; ``target`` ``(...)`` class indices.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kernels._validation import check_class_indices, check_nll_args


def mc_marginal_nll(
    mean: torch.Tensor,
    variance: torch.Tensor,
    target: torch.Tensor,
    decoder: Callable[[torch.Tensor], torch.Tensor],
    *,
    num_samples: int = 10,
    generator: torch.Generator | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Monte-Carlo marginal negative log-likelihood of KLA+ (seed 001 eqs. (24)-(25)).

    ``-log p(o_t | X) ~ -logsumexp_s log p(o_t | y^(s)) + log S`` with reparameterised samples
    ``y^(s) = mean + sqrt(variance) eps^(s)``, ``eps ~ N(0, I)`` (the authors sample at the layer
    output, digest 1.14), and ``log p(o | y) = log_softmax(decoder(y))[o]``. ``S = 10`` in the
    paper (G.2). At S = 1 it is the cross-entropy of one posterior sample, not of the mean.

    Parameters
    ----------
    mean, variance : (..., F) readout mean and variance (variance >= 0).
    target : (...) int64 class indices.
    decoder : maps (S, ..., F) samples to (S, ..., C) logits.
    num_samples : S >= 1.
    generator : RNG for ``eps`` (None: the global one).
    reduction : ``"mean"``, ``"sum"`` or ``"none"`` over the token axes ``...``.
    """
    if not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_samples must be a positive integer, found {num_samples!r}")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"reduction must be 'mean', 'sum' or 'none', found {reduction!r}")
    check_nll_args(mean, variance, target)
    if mean.shape != variance.shape:
        raise ValueError(
            f"mean and variance must share a shape, found {tuple(mean.shape)}, "
            f"{tuple(variance.shape)}"
        )
    if target.shape != mean.shape[:-1]:
        raise ValueError(
            f"target must have shape {tuple(mean.shape[:-1])}, found {tuple(target.shape)}"
        )
    eps = torch.randn(
        (num_samples, *mean.shape), generator=generator, dtype=mean.dtype, device=mean.device
    )
    samples = mean + variance.clamp_min(0.0).sqrt() * eps  # clamp: rounding may give -0 variance
    log_probs = torch.log_softmax(decoder(samples), dim=-1)
    check_class_indices("target", target, log_probs.shape[-1])
    index = target.unsqueeze(0).expand(num_samples, *target.shape).unsqueeze(-1)
    log_lik = log_probs.gather(-1, index).squeeze(-1)
    nll = -(torch.logsumexp(log_lik, dim=0) - math.log(num_samples))
    if reduction == "mean":
        return nll.mean()
    return nll.sum() if reduction == "sum" else nll

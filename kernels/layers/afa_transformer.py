"""The AFA Transformer block (seed 000 Algorithm 3 of 5.5): attention as an MLE on a hypersphere.

Per head, with ``n = E / H`` complex features (real pairs ``[re | im]``)::

    Z = [x, 0];  Zv = L_V(Z),  Zq = L_Q(Z),  Zk = L_K(Z)            complex projections
    m_x = max(|Zx|, eps),  U_x = gamma_1 Zx / m_x      (x = q, k, v; norms per head and token)
    m^ = AFA_mag(m_q, m_k, m_v)      isotropic AFA on the scalar magnitudes (no rotation)
    U^ = AFA_dir(U_q, U_k, U_v)      isotropic AFA on the directions (rotating, RoPE-like)
    Y = U_v + U^,   U~ = gamma_2 Y / max(|Y|, eps)                 geodesic (normalisation) step
    Zo = L_O(m^ U~);   out = x + FFN(Re Zo),   FFN = L_2 . ReLU . L_1

Both attentions are :func:`kernels.ops.afa.isotropic_afa` (Algorithm 1 without its
projections): each has its own decay, noise variances and temperature per head; the direction
attention also has rotation frequencies. Section 5.5 derives it from RT-AFA
(:mod:`kernels.layers.rt_afa`) by assuming the transported magnitudes nearly constant across
keys and dropping the tangent projection; the normalisation after attention is then the first-
order geodesic step ``Norm(u + u_bar)`` of 5.3.

Readings of the printed algorithm: ``Y = U + U^`` uses ``U = U_v`` (the current state's
direction, 5.5's ``u_zsi^(k)``); norms are taken per head (each head filters its own sphere);
``eps`` floors the norms, ``Z / max(|Z|, eps)``, instead of the printed ``Z / (|Z| + eps)``, so
the directions are exactly unit for ``|Z| >= eps`` (the two agree to ``eps / |Z|``); the
learnable scales ``gamma_1, gamma_2`` are one number per head. Alg. 3 has no prediction step
and no residual around the attention: the output is ``x`` plus the FFN of the attention.

Parameter maps (``softplus(r) = log(1 + e^r)``, initialised through its inverse): decays,
process and measurement variances and temperatures of both attentions through softplus;
frequencies unconstrained (RoPE's ``10000^{-k/n}`` initially), ``gamma_1 = gamma_2 = 1``
initially (unconstrained). Initial dynamics as the AFA layer's (``a = 0.1``, ``sigma^2 = 0.1``,
``eta^2 = 1``, temperature 1). The clock is ``dt * t`` (``step``), as in the AFA layer.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from kernels._validation import check_heads, check_input
from kernels.backend import BACKENDS
from kernels.layers.causal import finite_causal
from kernels.layers.complex_linear import ComplexLinear, lift
from kernels.layers.heads import merge_complex_heads, split_complex_heads
from kernels.layers.parameters import inverse_softplus, seeded_linear
from kernels.ops.afa import isotropic_afa
from kernels.ops.common import complex_pairs
from kernels.ops.common.params import Dynamics, Robust

PARTS = ("magnitude", "direction")

_INIT_DECAY = 0.1
_INIT_PROCESS_VAR = 0.1
_INIT_MEASUREMENT_VAR = 1.0
_ROPE_BASE = 10000.0


class AFABlockWeights(NamedTuple):
    """Attention weights of the block, each (B, H, T, T): of ``AFA_mag`` and of ``AFA_dir``."""

    magnitude: torch.Tensor
    direction: torch.Tensor


def _floored_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``max(|x|, eps)`` over the last axis, keepdim; differentiable everywhere (also at 0)."""
    return (x * x).sum(-1, keepdim=True).clamp_min(eps * eps).sqrt()


class AFATransformerBlock(nn.Module):
    """AFA Transformer block on ``(B, T, E)`` (seed 000 Algorithm 3), batch first.

    Parameters
    ----------
    embed_dim : E, the real width of input and output (lifted to E complex features).
    num_heads : H, dividing E; each head works on ``E / H`` complex features.
    ffn_hidden : hidden width of the FFN (default ``4 E``).
    causal : keys with ``t_j <= t_i`` only (default) or all keys.
    step : ``dt`` > 0, the time unit of ``t``.
    nu : robust scale > 0 of both attentions, or ``math.inf`` (precision weights only). The
        default 1 is Algorithm 1's printed ``-log(V + |R|^2)``.
    eps : > 0, floor on the norms of the normalisations.
    bias : biases of the projections (``L_O``'s is real: only ``Re L_O`` is used).
    block_size : query rows per block of the attentions (the fused kernel's tile).
    backend : ``"auto"``, ``"torch"`` or ``"triton"`` for both attentions
        (`kernels.ops.afa.isotropic_afa`).
    generator : ``torch.Generator`` for the initialisation of every weight.
    dtype, device : of the parameters.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        ffn_hidden: int | None = None,
        causal: bool = True,
        step: float = 1.0,
        nu: float = 1.0,
        eps: float = 1e-6,
        bias: bool = True,
        block_size: int | None = 128,
        backend: str = "auto",
        generator: torch.Generator | None = None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, found {backend!r}")
        head_features = check_heads(embed_dim, num_heads)
        ffn_hidden = 4 * embed_dim if ffn_hidden is None else ffn_hidden
        if isinstance(ffn_hidden, bool) or not isinstance(ffn_hidden, int) or ffn_hidden < 1:
            raise ValueError(f"ffn_hidden must be a positive integer, found {ffn_hidden!r}")
        for name, value, inf_ok in (("step", step, False), ("nu", nu, True), ("eps", eps, False)):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
            if not ok or (math.isinf(value) and not inf_ok):
                raise ValueError(f"{name} must be a number > 0, found {value!r}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_features = head_features
        self.causal = bool(causal)
        self.step = float(step)
        self.nu = float(nu)
        self.eps = float(eps)
        self.block_size = block_size
        self.backend = backend
        factory = {"dtype": dtype, "device": device}

        def complex_linear(with_bias=bias):
            return ComplexLinear(
                embed_dim, embed_dim, bias=with_bias, generator=generator, **factory
            )

        self.value = complex_linear()
        self.query = complex_linear()
        self.key = complex_linear()
        # Only Re L_O(z) is used, so L_O's bias is real (an imaginary bias would be inert).
        self.out_proj = complex_linear(False)
        self.out_bias = nn.Parameter(torch.zeros(embed_dim, **factory)) if bias else None
        self.ffn_in = seeded_linear(embed_dim, ffn_hidden, generator=generator, **factory)
        self.ffn_out = seeded_linear(ffn_hidden, embed_dim, generator=generator, **factory)

        def raw(value):
            return nn.Parameter(inverse_softplus(torch.full((num_heads,), float(value), **factory)))

        for part in PARTS:
            setattr(self, f"raw_{part}_decay", raw(_INIT_DECAY))
            setattr(self, f"raw_{part}_process_var", raw(_INIT_PROCESS_VAR))
            setattr(self, f"raw_{part}_measurement_var", raw(_INIT_MEASUREMENT_VAR))
            setattr(self, f"raw_{part}_temperature", raw(1.0))
        k = torch.arange(head_features, **factory)
        theta = _ROPE_BASE ** (-k / head_features)
        self.frequencies = nn.Parameter(theta.expand(num_heads, head_features).clone())
        self.gamma_1 = nn.Parameter(torch.ones(num_heads, **factory))
        self.gamma_2 = nn.Parameter(torch.ones(num_heads, **factory))

    # ------------------------------------------------------------------ parameters
    def dynamics(self, part: str) -> Dynamics:
        """Natural-unit dynamics of ``"magnitude"`` or ``"direction"`` (each (H,), frequencies
        (H, n) for the direction and None for the magnitude), before the time scaling."""
        if part not in PARTS:
            raise ValueError(f"part must be one of {PARTS}, found {part!r}")
        softplus = nn.functional.softplus
        return Dynamics(
            decay=softplus(getattr(self, f"raw_{part}_decay")),
            frequencies=self.frequencies if part == "direction" else None,
            process_var=softplus(getattr(self, f"raw_{part}_process_var")),
            measurement_var=softplus(getattr(self, f"raw_{part}_measurement_var")),
        )

    def robust(self, part: str) -> Robust:
        """The robust weighting of ``part``'s attention: the block's ``nu``, the part's
        temperature (H,)."""
        if part not in PARTS:
            raise ValueError(f"part must be one of {PARTS}, found {part!r}")
        temperature = nn.functional.softplus(getattr(self, f"raw_{part}_temperature"))
        return Robust(nu=self.nu, temperature=temperature)

    @torch.no_grad()
    def set_dynamics(
        self,
        part: str,
        *,
        decay=None,
        frequencies=None,
        process_var=None,
        measurement_var=None,
        temperature=None,
    ) -> None:
        """Load natural-unit values (scalars or (H,); frequencies (H, n)) of ``part``'s
        dynamics through the inverse maps; None leaves a parameter unchanged."""
        self.dynamics(part)  # validates part
        if frequencies is not None:
            if part != "direction":
                raise ValueError("frequencies belong to the direction attention only")
            omega = torch.as_tensor(frequencies, dtype=self.frequencies.dtype)
            if omega.shape != self.frequencies.shape:
                raise ValueError(
                    f"frequencies must have shape {tuple(self.frequencies.shape)}, "
                    f"found {tuple(omega.shape)}"
                )
            self.frequencies.copy_(omega)
        for name, value in (
            ("decay", decay),
            ("process_var", process_var),
            ("measurement_var", measurement_var),
            ("temperature", temperature),
        ):
            if value is None:
                continue
            raw = getattr(self, f"raw_{part}_{name}")
            x = torch.as_tensor(value, dtype=raw.dtype).expand(raw.shape)
            if not (x >= 0).all():
                raise ValueError(f"{part} {name} must be >= 0, found {x.tolist()}")
            raw.copy_(inverse_softplus(x))

    # ------------------------------------------------------------------ forward
    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, t=None, *, need_weights=False
    ):
        """The attention part of Algorithm 3 on projected heads.

        ``q, k, v`` (B, H, T, 2n) real pairs -> ``(m^ U~ (B, H, T, 2n), AFABlockWeights or
        None)`` (module docstring).
        """
        m_q, m_k, m_v = (_floored_norm(x, self.eps) for x in (q, k, v))
        gamma_1 = self.gamma_1.view(1, -1, 1, 1)
        u_q, u_k, u_v = gamma_1 * q / m_q, gamma_1 * k / m_k, gamma_1 * v / m_v
        common = {
            "t": t,
            "causal": self.causal,
            "return_weights": need_weights,
            "block_size": self.block_size,
            "backend": self.backend,
        }
        results = []
        for part, inputs in (("magnitude", (m_q, m_k, m_v)), ("direction", (u_q, u_k, u_v))):
            dynamics = self.dynamics(part).scaled(self.step)
            results.append(
                isotropic_afa(*inputs, dynamics=dynamics, robust=self.robust(part), **common)
            )
        magnitude, direction = results
        y = u_v + direction.output
        u_new = self.gamma_2.view(1, -1, 1, 1) * y / _floored_norm(y, self.eps)
        weights = AFABlockWeights(magnitude.weights, direction.weights) if need_weights else None
        return magnitude.output * u_new, weights

    @finite_causal
    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``x (B, T, E)``, ``t`` None or (T,) / (B, T) stamps -> ``(out (B, T, E), weights)``.

        ``weights`` is an :class:`AFABlockWeights` of (B, H, T, T) tensors when
        ``need_weights``, else None.
        """
        check_input(x, self.embed_dim)
        z = lift(x)
        q, k, v = (
            split_complex_heads(proj(z), self.num_heads)
            for proj in (self.query, self.key, self.value)
        )
        attended, weights = self.attend(q, k, v, t, need_weights=need_weights)
        z_o = complex_pairs.split(self.out_proj(merge_complex_heads(attended)))[0]
        if self.out_bias is not None:
            z_o = z_o + self.out_bias
        out = x + self.ffn_out(torch.relu(self.ffn_in(z_o)))
        return out, weights

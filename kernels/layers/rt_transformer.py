"""RT-RFA attention and the RT-Transformer block (seed 003 Algorithms 1-2, sections 3.5-3.6, D).

:class:`RTRobustFilterAttention` is Algorithm 1 steps 1-6 as an attention branch: real-to-complex
projections ``L_q, L_k, L_v`` (``E`` reals -> ``E`` complex features, ``E/H`` per head), the
functional :func:`kernels.ops.rt.rt_rfa` per head, and the complex-to-real output map
``L_o`` (``[W_r, -W_i] u + b_r``, seed 004 D.1). It returns ``Z_bar = L_o(U_bar)`` without the
residual, like ``nn.MultiheadAttention``.

:class:`RTTransformerBlock` is Algorithm 2 around it:

    Z+ = update(Z, Z_bar)       (Alg. 1 step 6: "first-order" Z + Z_bar, or "geodesic")
    U+ = Norm(Z+)               (Alg. 1 step 7: RMSNorm, the retraction; gain r = g sqrt(E))
    Z_out = Z+ + FFN(U+)        (Alg. 2; the FFN is not derived by the filter, digest 1.5)

There is no normalisation before attention: q, k, v are normalised after projection
(modification 2). ``update="geodesic"`` replaces the additive step by the exact spherical step
it approximates (seed 003 C.2, eq. 15-16): the direction of ``z`` turns along the great circle
towards ``Z_bar`` by the arc ``|P_T(u) Z_bar| / |z|`` and the magnitude changes by ``u . Z_bar``:

    z+ = (|z| + u . d) exp_u(P_T(u) d / |z|),   u = z / |z|,   exp_u(w) = cos|w| u + sinc|w| w,

which equals ``z + d`` to first order in ``|d| / |z|`` (:func:`spherical_update`). It acts in
residual-stream coordinates, which are the eigenbasis only when ``W_o W_v = I`` with an
orthogonal map (section 3.5).

Parameters per head, all through ``softplus`` (``x = log(1 + e^raw)``, initialised by its
inverse): decay ``mu``, tangential variances ``sigma_t^2, eta_t^2, gamma_t^2``, the angular
floor ``tau_theta^2``, robustness ``nu`` and inverse temperature ``beta_s``; radial variances
``sigma_r^2, eta_r^2, gamma_r^2`` exist only when ``magnitude_precision=False`` (the directional
precision uses none), the angular floor only when it is on (the lag-only precision has none).
Initial values are chosen here (the seed gives none): decays log-spaced from 1e-3 to 1e-1 over
heads (1e-3 for one head), ``sigma^2 = 0.2 mu`` (``sigma~^2 = 0.1``, seed 004's repository),
``eta^2 = 1``, ``gamma^2 = 0.1``, ``tau_theta^2 = 0.01``, ``nu = 4 n`` (seed 004 D.2's
quasi-Gaussian start, ``n = E / H`` complex features), ``beta_s = 1``. Frequencies are RoPE's
``10000^{-k/n}`` per head (a buffer unless ``learn_frequencies``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from kernels._validation import check_heads, check_input
from kernels.layers.causal import finite_causal
from kernels.layers.complex_linear import ComplexLinear
from kernels.layers.heads import merge_complex_heads, split_complex_heads
from kernels.layers.parameters import inverse_softplus
from kernels.ops.common import complex_pairs
from kernels.ops.rt import rt_rfa

UPDATES = ("first-order", "geodesic")
# Stability constant of eq. 10 (``m^2 + eps``): a zero-magnitude value token gets a large but
# finite angular variance instead of a division by zero; negligible for magnitudes >> 1e-3.
_MAGNITUDE_EPS = 1e-6


def spherical_update(z: torch.Tensor, delta: torch.Tensor, *, step: str) -> torch.Tensor:
    """Residual step ``z -> z+`` along the last axis (seed 003 eq. 15, C.2).

    ``"first-order"``: ``z + delta`` (Alg. 1 step 6). ``"geodesic"``:
    ``(|z| + u . delta) exp_u(P_T(u) delta / |z|)`` with ``u = z / |z|``: the direction moves
    along the great circle by the arc ``|P_T(u) delta| / |z|`` (the additive step turns it by
    ``atan2(|P_T(u) delta|, |z| + u . delta)``), the magnitude by the radial component; the two
    agree to first order in ``|delta| / |z|``. A zero state has no direction and takes the
    first-order step. Shapes: z, delta (..., E) -> (..., E).
    """
    if step not in UPDATES:
        raise ValueError(f"step must be one of {UPDATES}, found {step!r}")
    if step == "first-order":
        return z + delta
    norm = z.norm(dim=-1, keepdim=True)
    # The clamp keeps the unused geodesic branch of a zero state finite (torch.where below).
    m = norm.clamp_min(torch.finfo(z.dtype).tiny)
    u = z / m
    along = (u * delta).sum(-1, keepdim=True)
    w = (delta - along * u) / m
    # sqrt(|w|^2 + tiny) keeps the gradient finite at w = 0 (exp_u is smooth: sinc(0) = 1).
    angle = (w * w).sum(-1, keepdim=True).add(torch.finfo(z.dtype).tiny).sqrt()
    direction = torch.cos(angle) * u + torch.sinc(angle / math.pi) * w
    return torch.where(norm > 0, (m + along) * direction, z + delta)


def _real_to_complex(layer: ComplexLinear, x: torch.Tensor) -> torch.Tensor:
    """``L^{R->C}(x) = [W_r x + b_r | W_i x + b_i]`` (seed 004 D.1): ``(..., E) -> (..., 2E')``."""
    re = x @ layer.weight_real.T
    im = x @ layer.weight_imag.T
    if layer.bias_real is not None:
        re, im = re + layer.bias_real, im + layer.bias_imag
    return complex_pairs.merge(re, im)


def _complex_to_real(layer: ComplexLinear, u: torch.Tensor, bias: torch.Tensor | None):
    """``L^{C->R}(u) = W_r u_r - W_i u_i + b``, the real part of ``W u`` plus a real bias."""
    re, im = complex_pairs.split(u)
    out = re @ layer.weight_real.T - im @ layer.weight_imag.T
    return out if bias is None else out + bias


class RTRobustFilterAttention(nn.Module):
    """RT-RFA attention branch (seed 003 Algorithm 1 steps 1-6; module docstring).

    Parameters
    ----------
    embed_dim : real model width ``E``; the projections give ``E`` complex features.
    num_heads : ``H``, dividing ``E`` (each head has ``E/H`` complex features).
    causal : attend to keys ``j <= i`` only (default).
    magnitude_precision, normalize_qkv, tangent_residual : the three modifications
        (seed 003 section 3.6), as in :func:`kernels.ops.rt.rt_rfa`.
    robust : learn a finite ``nu`` (Student-t logits); False uses the ``nu -> inf`` limit
        ``log P - d^2 / n`` (digest C25).
    learn_frequencies : make the RoPE frequencies a parameter.
    bias : complex biases in the projections (seed 004 D.1; they start at zero).
    generator : optional ``torch.Generator`` for the projection initialisation.
    dtype, device : of the parameters.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        causal: bool = True,
        magnitude_precision: bool = True,
        normalize_qkv: bool = True,
        tangent_residual: bool = True,
        robust: bool = True,
        learn_frequencies: bool = False,
        bias: bool = True,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device=None,
    ):
        super().__init__()
        n = check_heads(embed_dim, num_heads)
        self.embed_dim, self.num_heads, self.head_features = embed_dim, num_heads, n
        self.causal = causal
        self.magnitude_precision = magnitude_precision
        self.normalize_qkv = normalize_qkv
        self.tangent_residual = tangent_residual
        self.robust = robust
        factory = {"dtype": dtype, "device": device}
        self.q_proj, self.k_proj, self.v_proj = (
            ComplexLinear(embed_dim, embed_dim, bias=bias, generator=generator, **factory)
            for _ in range(3)
        )
        # C -> R output: the real part of a complex map, with a real bias (seed 004 D.1).
        self.out_proj = ComplexLinear(
            embed_dim, embed_dim, bias=False, generator=generator, **factory
        )
        out_bias = nn.Parameter(torch.zeros(embed_dim, **factory)) if bias else None
        self.register_parameter("out_bias", out_bias)
        kw = {"dtype": torch.float64, "device": device}
        decay = torch.logspace(-3, -1, num_heads, **kw)
        ones = torch.ones(num_heads, **kw)
        initial = {
            "decay": decay,
            "process_var": 0.2 * decay,
            "measurement_var": ones,
            "query_var": 0.1 * ones,
            "temperature": ones,
        }
        if robust:
            initial["nu"] = 4.0 * n * ones
        if magnitude_precision:
            initial["angular_var"] = 0.01 * ones
        else:
            initial["radial_process_var"] = 0.2 * decay
            initial["radial_measurement_var"] = ones
            initial["radial_query_var"] = 0.1 * ones
        self._names = tuple(initial)
        for name, value in initial.items():
            raw = inverse_softplus(value).to(dtype or torch.get_default_dtype())
            self.register_parameter(f"raw_{name}", nn.Parameter(raw.to(device)))
        k = torch.arange(n, **kw)
        freqs = (10000.0 ** (-k / n)).expand(num_heads, n).to(dtype or torch.get_default_dtype())
        if learn_frequencies:
            self.frequencies = nn.Parameter(freqs.clone())
        else:
            self.register_buffer("frequencies", freqs.clone())

    def head_parameters(self) -> dict[str, torch.Tensor]:
        """The positive per-head values ``softplus(raw)``, each (H,)."""
        return {name: nn.functional.softplus(getattr(self, f"raw_{name}")) for name in self._names}

    @finite_causal
    def forward(
        self, x: torch.Tensor, t=None, *, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x: (B, T, E)``, ``t``: None, (T,) or (B, T) -> ``(Z_bar (B, T, E), weights)``.

        ``weights`` is the (B, H, T, T) attention when `need_weights`, else None.
        """
        check_input(x, self.embed_dim)
        heads = self.num_heads
        q, k, v = (
            split_complex_heads(_real_to_complex(proj, x), heads)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        params = self.head_parameters()
        result = rt_rfa(
            q,
            k,
            v,
            t=t,
            frequencies=self.frequencies,
            eps=_MAGNITUDE_EPS,
            nu=params.pop("nu", math.inf),
            causal=self.causal,
            return_weights=need_weights,
            magnitude_precision=self.magnitude_precision,
            normalize_qkv=self.normalize_qkv,
            tangent_residual=self.tangent_residual,
            **params,
        )
        out = _complex_to_real(self.out_proj, merge_complex_heads(result.output), self.out_bias)
        return out, result.weights


class _FeedForward(nn.Module):
    """``W_2 GELU(W_1 x + b_1) + b_2``; uniform init ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``."""

    def __init__(self, width: int, hidden: int, *, generator, dtype, device):
        super().__init__()
        factory = {"dtype": dtype, "device": device}
        self.w1 = nn.Parameter(torch.empty(hidden, width, **factory))
        self.b1 = nn.Parameter(torch.empty(hidden, **factory))
        self.w2 = nn.Parameter(torch.empty(width, hidden, **factory))
        self.b2 = nn.Parameter(torch.empty(width, **factory))
        with torch.no_grad():
            for p, fan_in in (
                (self.w1, width),
                (self.b1, width),
                (self.w2, hidden),
                (self.b2, hidden),
            ):
                bound = 1.0 / math.sqrt(fan_in)
                draw = torch.rand(
                    p.shape, generator=generator, dtype=torch.float64, device=p.device
                )
                p.copy_((2 * draw - 1) * bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(x @ self.w1.T + self.b1) @ self.w2.T + self.b2


class RTTransformerBlock(nn.Module):
    """RT-Transformer block (seed 003 Algorithm 2; module docstring).

    Parameters
    ----------
    embed_dim, num_heads, causal, magnitude_precision, normalize_qkv, tangent_residual, robust :
        as in :class:`RTRobustFilterAttention`.
    update : ``"first-order"`` (Alg. 1's additive residual, default) or ``"geodesic"`` (the
        exact spherical step, :func:`spherical_update`).
    ffn_hidden : FFN width, default ``4 E``.
    generator : optional ``torch.Generator`` for every initialisation.
    dtype, device : of the parameters.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        causal: bool = True,
        magnitude_precision: bool = True,
        normalize_qkv: bool = True,
        tangent_residual: bool = True,
        robust: bool = True,
        update: str = "first-order",
        ffn_hidden: int | None = None,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device=None,
    ):
        super().__init__()
        if update not in UPDATES:
            raise ValueError(f"update must be one of {UPDATES}, found {update!r}")
        hidden = 4 * embed_dim if ffn_hidden is None else ffn_hidden
        if not isinstance(hidden, int) or hidden < 1:
            raise ValueError(f"ffn_hidden must be a positive integer, found {ffn_hidden!r}")
        self.update = update
        self.attention = RTRobustFilterAttention(
            embed_dim,
            num_heads,
            causal=causal,
            magnitude_precision=magnitude_precision,
            normalize_qkv=normalize_qkv,
            tangent_residual=tangent_residual,
            robust=robust,
            generator=generator,
            dtype=dtype,
            device=device,
        )
        # eps=None: RMSNorm adds finfo(dtype).eps to the mean square, keeping a zero state finite.
        self.norm = nn.RMSNorm(embed_dim, dtype=dtype, device=device)
        self.ffn = _FeedForward(embed_dim, hidden, generator=generator, dtype=dtype, device=device)

    def forward(
        self, x: torch.Tensor, t=None, *, need_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``x: (B, T, E)`` -> ``(Z_out (B, T, E), weights (B, H, T, T) or None)``."""
        delta, weights = self.attention(x, t, need_weights=need_weights)
        z_plus = spherical_update(x, delta, step=self.update)
        return z_plus + self.ffn(self.norm(z_plus)), weights

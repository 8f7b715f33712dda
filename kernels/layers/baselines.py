"""Multi-head positional baselines on ``(B, T, E)`` (seed 004 E.2 B1-B4; seed 000 4.2).

`RotaryAttention` (RoPE), `ALiBiAttention`, `DecayedRotaryAttention` (decayed RoPE; with
``spectral_coupling=True`` SC-RoPE) and `SoftmaxAttention` (plain softmax attention with an
additive sinusoidal or learned positional embedding, the seed 000 Fig. 3 baseline). Each has
the interface of ``nn.MultiheadAttention(batch_first=True)`` restricted to self-attention:
``forward(x, t=None, *, need_weights=False) -> (out, weights or None)`` with per-head weights
``(B, H, T, T)``. Projections are ``E -> H D`` (``D = head_dim``, default ``E / H``; seed 004
uses ``2E / H`` to match RFA) and ``H D -> E``, initialised like ``nn.Linear`` but from an
optional ``torch.Generator`` (no global RNG is touched).
"""

from __future__ import annotations

import torch
from torch import nn

from kernels import _validation
from kernels.layers import heads as heads_mod
from kernels.layers.causal import finite_causal
from kernels.layers.parameters import seeded_linear
from kernels.ops import baselines
from kernels.ops.common import positional as posenc

POSITIONAL = ("sinusoidal", "learned", None)
# Standard deviation of the learned position table at initialisation (GPT-2's convention).
_LEARNED_STD = 0.02


class _ProjectedAttention(nn.Module):
    """Shared Q/K/V/O projections and head bookkeeping of the baselines."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None,
        causal: bool,
        bias: bool,
        even: bool,
        generator,
        device,
        dtype,
    ):
        super().__init__()
        default = _validation.check_heads(embed_dim, num_heads, even=even and head_dim is None)
        if head_dim is None:
            head_dim = default
        if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
            raise ValueError(f"head_dim must be a positive integer, found {head_dim!r}")
        if even and head_dim % 2:
            raise ValueError(f"head_dim must be even (rotation pairs [re | im]), found {head_dim}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.causal = causal
        inner = num_heads * head_dim
        kw = {"bias": bias, "generator": generator, "device": device, "dtype": dtype}
        self.q_proj = seeded_linear(embed_dim, inner, **kw)
        self.k_proj = seeded_linear(embed_dim, inner, **kw)
        self.v_proj = seeded_linear(embed_dim, inner, **kw)
        self.out_proj = seeded_linear(inner, embed_dim, **kw)

    def _project(self, x: torch.Tensor):
        _validation.check_input(x, self.embed_dim)
        return (
            heads_mod.split_heads(self.q_proj(x), self.num_heads),
            heads_mod.split_heads(self.k_proj(x), self.num_heads),
            heads_mod.split_heads(self.v_proj(x), self.num_heads),
        )

    def _finish(self, result: baselines.AttentionOutput, need_weights: bool):
        out = self.out_proj(heads_mod.merge_heads(result.output))
        return out, (result.weights if need_weights else None)


class RotaryAttention(_ProjectedAttention):
    """Multi-head rotary attention (seed 004 B1), `kernels.ops.baselines.rope_attention`.

    Parameters
    ----------
    embed_dim, num_heads : as in ``nn.MultiheadAttention``.
    head_dim : real features per head (even), default ``embed_dim / num_heads``.
    causal : mask future keys (default True).
    base : RoPE base, ``omega_k = base^(-2k/D)``.
    bias : projection biases.
    generator, device, dtype : initialisation RNG and factory options.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        causal: bool = True,
        base: float = 10000.0,
        bias: bool = True,
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__(
            embed_dim,
            num_heads,
            head_dim=head_dim,
            causal=causal,
            bias=bias,
            even=True,
            generator=generator,
            device=device,
            dtype=dtype,
        )
        freq = posenc.rope_frequencies(self.head_dim // 2, base=base, dtype=torch.float64)
        self.register_buffer("frequencies", freq.to(device=device, dtype=dtype or freq.dtype))

    @finite_causal
    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``x (B, T, E)``, ``t (T,) or (B, T)`` -> ``(out (B, T, E), weights (B, H, T, T))``."""
        q, k, v = self._project(x)
        result = baselines.rope_attention(
            q,
            k,
            v,
            t=t,
            frequencies=self.frequencies,
            causal=self.causal,
            return_weights=need_weights,
        )
        return self._finish(result, need_weights)


class ALiBiAttention(_ProjectedAttention):
    """Multi-head ALiBi attention (seed 004 B2): bias ``-m_h |t_i - t_j|``, slopes
    ``2^(-8h/H)`` (`kernels.ops.common.positional.alibi_slopes`). Arguments as in
    `RotaryAttention` (no ``base``; any ``head_dim``)."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        causal: bool = True,
        bias: bool = True,
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__(
            embed_dim,
            num_heads,
            head_dim=head_dim,
            causal=causal,
            bias=bias,
            even=False,
            generator=generator,
            device=device,
            dtype=dtype,
        )
        slopes = posenc.alibi_slopes(num_heads, dtype=torch.float64)
        self.register_buffer("slopes", slopes.to(device=device, dtype=dtype or slopes.dtype))

    @finite_causal
    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``x (B, T, E)``, ``t (T,) or (B, T)`` -> ``(out (B, T, E), weights (B, H, T, T))``."""
        q, k, v = self._project(x)
        result = baselines.alibi_attention(
            q, k, v, t=t, slopes=self.slopes, causal=self.causal, return_weights=need_weights
        )
        return self._finish(result, need_weights)


class DecayedRotaryAttention(_ProjectedAttention):
    """Decayed RoPE (seed 004 B3) and, with ``spectral_coupling=True``, SC-RoPE (B4).

    Frequencies and fixed per-head decays: with ``spectral_coupling`` the band-split bank of
    `kernels.ops.common.positional.spectral_coupling` and ``mu_h = damping * max omega_h``
    (``zero_decay_heads`` heads at 0); otherwise RoPE's full bank in every head with the same
    spread of decays, or the given ``decay`` (scalar or (H,)). ``decay_mode`` as in
    `kernels.ops.baselines.decayed_rope_attention`. Other arguments as in
    `RotaryAttention`.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        causal: bool = True,
        decay=None,
        spectral_coupling: bool = False,
        damping: float = 0.05,
        zero_decay_heads: int | None = None,
        decay_mode: str = "post-softmax",
        base: float = 10000.0,
        bias: bool = True,
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__(
            embed_dim,
            num_heads,
            head_dim=head_dim,
            causal=causal,
            bias=bias,
            even=True,
            generator=generator,
            device=device,
            dtype=dtype,
        )
        if decay_mode not in baselines.DECAY_MODES:
            raise ValueError(
                f"decay_mode must be one of {baselines.DECAY_MODES}, found {decay_mode!r}"
            )
        self.decay_mode = decay_mode
        n = self.head_dim // 2
        spectrum = posenc.spectral_coupling(
            num_heads,
            n,
            damping=damping,
            zero_decay_heads=zero_decay_heads,
            base=base,
            conjugate_pairs=False,
            dtype=torch.float64,
        )
        if spectral_coupling:
            freq = spectrum.frequencies
        else:
            freq = posenc.rope_frequencies(n, base=base, dtype=torch.float64)
            freq = freq.expand(num_heads, n).clone()
        mu = spectrum.decay
        if decay is not None:
            like = torch.empty(0, dtype=torch.float64)
            mu = baselines.head_parameter("decay", decay, num_heads, like).flatten().clone()
        factory = {"device": device, "dtype": dtype or freq.dtype}
        self.register_buffer("frequencies", freq.to(**factory))
        self.register_buffer("decay", mu.to(**factory))

    @finite_causal
    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``x (B, T, E)``, ``t (T,) or (B, T)`` -> ``(out (B, T, E), weights (B, H, T, T))``."""
        q, k, v = self._project(x)
        result = baselines.decayed_rope_attention(
            q,
            k,
            v,
            decay=self.decay,
            frequencies=self.frequencies,
            t=t,
            decay_mode=self.decay_mode,
            causal=self.causal,
            return_weights=need_weights,
        )
        return self._finish(result, need_weights)


class SoftmaxAttention(_ProjectedAttention):
    """Softmax attention with an additive positional embedding (seed 000 4.2, Fig. 3 baseline).

    ``positional="sinusoidal"``: ``x + PE(t)`` with the sinusoidal table of Vaswani et al. at
    the real stamps ``t`` (`kernels.ops.common.positional.sinusoidal_embedding`).
    ``"learned"``: ``x + W[t]`` for a learned ``(max_len, E)`` table (``N(0, 0.02^2)`` init, as
    GPT-2's position table), read by
    linear interpolation at real ``t`` in ``[0, max_len - 1]``. ``None``: no positional
    information. The embedding is absolute, so unlike the rotary layers the output changes
    under a time shift ``t -> t + c``. Other arguments as in `RotaryAttention`.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        causal: bool = True,
        positional: str | None = "sinusoidal",
        max_len: int = 4096,
        bias: bool = True,
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__(
            embed_dim,
            num_heads,
            head_dim=head_dim,
            causal=causal,
            bias=bias,
            even=False,
            generator=generator,
            device=device,
            dtype=dtype,
        )
        if positional not in POSITIONAL:
            raise ValueError(f"positional must be one of {POSITIONAL}, found {positional!r}")
        self.positional = positional
        if positional == "learned":
            if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2:
                raise ValueError(f"max_len must be an integer >= 2, found {max_len!r}")
            table = _LEARNED_STD * torch.randn(
                max_len, embed_dim, generator=generator, dtype=torch.float64, device=device
            )
            self.position_table = nn.Parameter(table.to(dtype or torch.get_default_dtype()))
        else:
            self.register_parameter("position_table", None)

    def embedding(self, t: torch.Tensor) -> torch.Tensor:
        """Additive embedding ``(B', T, E)`` at stamps ``t (B', 1, T)`` (checked stamps)."""
        stamps = t[:, 0]
        if self.positional == "sinusoidal":
            return posenc.sinusoidal_embedding(stamps, self.embed_dim)
        last = self.position_table.shape[0] - 1
        if (stamps < 0).any() or (stamps > last).any():
            raise ValueError(
                f"t must lie in [0, {last}] for the learned table (max_len = {last + 1}), found "
                f"[{stamps.min().item():.6g}, {stamps.max().item():.6g}]"
            )
        below = stamps.floor().clamp(max=last - 1)  # t = last reads the last row (frac = 1)
        frac = (stamps - below).unsqueeze(-1)
        lower = self.position_table[below.long()]
        upper = self.position_table[below.long() + 1]
        return lower + frac * (upper - lower)

    @finite_causal
    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``x (B, T, E)``, ``t (T,) or (B, T)`` -> ``(out (B, T, E), weights (B, H, T, T))``."""
        batch, steps = _validation.check_input(x, self.embed_dim)
        if self.positional is not None:
            times = _validation.check_times(t, steps, like=x)
            if times.shape[0] not in (1, batch):
                raise ValueError(f"t batch size must be 1 or {batch}, found {times.shape[0]}")
            x = x + self.embedding(times)
        elif t is not None:
            _validation.check_times(t, steps, like=x)
        q, k, v = self._project(x)
        result = baselines.softmax_attention(
            q, k, v, causal=self.causal, return_weights=need_weights
        )
        return self._finish(result, need_weights)

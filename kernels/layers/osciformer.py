"""OsciFormer attention: multi-head closed-form oscillator attention on ``(B, T, E)`` (seed 002).

Seed 002 section 6-7 and App. A.5 (digest 002 sections 1.8-1.9, Alg. A); the math is in
`kernels.ops.oscillator`.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from kernels._validation import check_heads, check_input
from kernels.layers.heads import merge_heads, split_heads
from kernels.layers.parameters import inverse_softplus
from kernels.ops.oscillator import OscillatorParams, oscillator_attention

__all__ = ["OscillatorAttention"]


class OscillatorAttention(nn.Module):
    """Causal multi-head oscillator attention (OsciFormer, seed 002 section 6).

    Per head ``h`` and channel ``c``, keys and values are damped driven oscillators with
    ``omega = softplus(raw_omega) > 0``, damping ratio ``zeta = softplus(raw_zeta) > 0`` and
    ``gamma = zeta omega`` (digest 1.9; softplus keeps ``zeta > 0``, which keeps the undamped
    resonance singularity away), initial-velocity maps ``U^k, U^v`` (``(H, D, D)``) and drive
    gains ``g, h`` (``(H, J, D)``) at the query bank frequencies (section 7 "collocation-matched"
    drive). The query of each row is the causal ridge fit on the fixed bank ``omega_m``
    (``J = num_modes``, log-uniform on ``freq_range``).

    Initialisation (seed 002 section 7, digest 1.9): ``omega`` log-uniform on ``omega_range``
    (default ``[1e-2, 1e1]``, meant for time normalised to ``[0, 1]``), ``zeta ~ U(zeta_range)``
    (default ``[0.05, 0.4]``), ``U^k = U^v = 0``; projections Xavier-uniform with zero biases.
    The drive-gain initialisation is not given by the seed: ``N(0, drive_scale^2)``.

    Parameters
    ----------
    embed_dim, num_heads : ``E`` and ``H``; head size ``D = E / H``.
    num_modes : query bank size ``J`` (default 8, section 7).
    freq_range : ``(low, high)`` of the log-uniform bank.
    ridge : ridge of the query fit.  readout : ``"average"`` or ``"endpoint"`` values.
    generator : optional ``torch.Generator`` for every random initial value.

    Forward: ``x (B, T, E)``, ``t`` ``None`` (``t_i = i``), ``(T,)`` or ``(B, T)``; returns
    ``(out (B, T, E), weights (B, H, T, T) or None)``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        num_modes: int = 8,
        freq_range: tuple[float, float] = (1e-2, 1e1),
        omega_range: tuple[float, float] = (1e-2, 1e1),
        zeta_range: tuple[float, float] = (0.05, 0.4),
        drive_scale: float = 0.1,
        ridge: float = 1e-3,
        readout: str = "average",
        bias: bool = True,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        head_dim = check_heads(embed_dim, num_heads)
        if not isinstance(num_modes, int) or num_modes < 1:
            raise ValueError(f"num_modes must be a positive integer, found {num_modes!r}")
        for name, (low, high) in (("freq_range", freq_range), ("omega_range", omega_range)):
            if not 0 < low <= high:
                raise ValueError(f"{name} must satisfy 0 < low <= high, found {(low, high)}")
        if not 0 < zeta_range[0] <= zeta_range[1]:
            raise ValueError(f"zeta_range must satisfy 0 < low <= high, found {zeta_range}")
        if readout not in ("average", "endpoint"):
            raise ValueError(f"readout must be 'average' or 'endpoint', found {readout!r}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, head_dim
        self.ridge, self.readout = ridge, readout
        kw = {"dtype": dtype, "device": device}
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **kw)
        freqs = torch.logspace(
            math.log10(freq_range[0]), math.log10(freq_range[1]), num_modes, **kw
        )
        self.register_buffer("freqs", freqs)
        shape = (num_heads, head_dim)
        for role in ("key", "value"):
            self.register_parameter(f"{role}_raw_omega", nn.Parameter(torch.empty(shape, **kw)))
            self.register_parameter(f"{role}_raw_zeta", nn.Parameter(torch.empty(shape, **kw)))
            self.register_parameter(
                f"{role}_velocity", nn.Parameter(torch.empty(num_heads, head_dim, head_dim, **kw))
            )
            for part in ("drive_cos", "drive_sin"):
                self.register_parameter(
                    f"{role}_{part}",
                    nn.Parameter(torch.empty(num_heads, num_modes, head_dim, **kw)),
                )
        self._ranges = (omega_range, zeta_range, drive_scale)
        self.reset_parameters(generator)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Seed 002 section 7 initialisation (see the class docstring)."""
        (w_low, w_high), (z_low, z_high), drive_scale = self._ranges
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight, generator=generator)
            if lin.bias is not None:
                lin.bias.zero_()
        for role in ("key", "value"):
            raw_omega = getattr(self, f"{role}_raw_omega")
            log_omega = torch.empty_like(raw_omega).uniform_(
                math.log(w_low), math.log(w_high), generator=generator
            )
            raw_omega.copy_(inverse_softplus(log_omega.exp()))
            raw_zeta = getattr(self, f"{role}_raw_zeta")
            zeta = torch.empty_like(raw_zeta).uniform_(z_low, z_high, generator=generator)
            raw_zeta.copy_(inverse_softplus(zeta))
            getattr(self, f"{role}_velocity").zero_()
            for part in ("drive_cos", "drive_sin"):
                gain = getattr(self, f"{role}_{part}")
                gain.normal_(0.0, drive_scale, generator=generator)

    def oscillator_params(self, role: str) -> OscillatorParams:
        """`OscillatorParams` of ``role`` (``"key"`` or ``"value"``) after the softplus maps."""
        omega = F.softplus(getattr(self, f"{role}_raw_omega"))
        zeta = F.softplus(getattr(self, f"{role}_raw_zeta"))
        return OscillatorParams(
            omega=omega,
            gamma=zeta * omega,
            velocity=getattr(self, f"{role}_velocity"),
            drive_cos=getattr(self, f"{role}_drive_cos"),
            drive_sin=getattr(self, f"{role}_drive_sin"),
            drive_freqs=self.freqs,
        )

    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``(out (B, T, E), weights (B, H, T, T) or None)``; see the class docstring."""
        check_input(x, self.embed_dim)
        q = split_heads(self.q_proj(x), self.num_heads)
        k = split_heads(self.k_proj(x), self.num_heads)
        v = split_heads(self.v_proj(x), self.num_heads)
        out, weights = oscillator_attention(
            q,
            k,
            v,
            t,
            key_params=self.oscillator_params("key"),
            value_params=self.oscillator_params("value"),
            freqs=self.freqs,
            ridge=self.ridge,
            readout=self.readout,
            need_weights=need_weights,
        )
        return self.out_proj(merge_heads(out)), weights

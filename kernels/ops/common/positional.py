"""Positional encodings shared by the rotary, ALiBi and filtering attention layers.

* Rotary frequency banks: RoPE's ``omega_k = base^(-k/n)`` (Su et al.; seed 004 digest 1.12) and
  the spectrally coupled bank of SC-RFA / SC-RoPE (seed 004 section 3.4, C.1, D.2).
* The per-head spectrum of a layer (`head_spectrum`); the rotations themselves are
  `kernels.ops.common.rotation`.
* ALiBi's head slopes (Press et al., 2022) and the sinusoidal embedding of Vaswani et al. (the
  additive embedding of the seed 000 section 4.2 baseline), both at real time stamps.

Nothing here holds parameters; the layers in `kernels.layers` own them.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from kernels._validation import check_real

# Share of heads given zero decay by the spectral coupling when `zero_decay_heads` is not given:
# 2 of 8 in seed 004 D.2 (the public code's ``zero_frac = 0.25``).
_ZERO_DECAY_FRACTION = 0.25


def rope_frequencies(
    num_frequencies: int, *, base: float = 10000.0, dtype=None, device=None
) -> torch.Tensor:
    """RoPE's bank ``omega_k = base^(-k / n)``, ``k = 0..n-1``: ``(n,)``.

    For a head of ``D = 2n`` real features this is the usual ``theta_k = base^(-2k/D)``.
    """
    _check_count("num_frequencies", num_frequencies)
    if not check_real("base", base) > 1:
        raise ValueError(f"base must be > 1, found {base!r}")
    k = torch.arange(num_frequencies, dtype=torch.float64, device=device)
    return (base ** (-k / num_frequencies)).to(dtype or torch.get_default_dtype())


def conjugate_frequencies(distinct: torch.Tensor) -> torch.Tensor:
    """``(..., m) -> (..., 2m)``: ``[omega_1..omega_m, -omega_1..-omega_m]``.

    Seed 004 D.1 enforces conjugate eigenvalues ``-mu +- i omega`` so that the latent state
    matrix is real; here the pair of each frequency is the feature ``m`` places later.
    """
    return torch.cat((distinct, -distinct), dim=-1)


class CoupledSpectrum(NamedTuple):
    """Per-head frequencies ``(H, n)`` and decays ``(H,)`` of a spectral coupling."""

    frequencies: torch.Tensor
    decay: torch.Tensor


class SpectralCoupling(NamedTuple):
    """Specification of the SC-RFA / SC-RoPE spectrum (seed 004 section 3.4, C.1, D.2).

    damping : ``b`` in ``mu_h = b * max(omega_h)``; the paper's main models use 0.05.
    zero_decay_heads : number of heads (the lowest-frequency ones) whose decay is set to 0
        ("lossless integrators"); default ``int(0.25 H)``, i.e. 2 of 8.
    base : base of the global RoPE-type bank.
    conjugate_pairs : frequencies come as ``(omega, -omega)`` pairs (seed 004 D.1).
    """

    damping: float = 0.05
    zero_decay_heads: int | None = None
    base: float = 10000.0
    conjugate_pairs: bool = True

    def build(self, num_heads: int, num_frequencies: int, *, dtype=None, device=None):
        """`spectral_coupling` with these settings: `CoupledSpectrum`."""
        return spectral_coupling(
            num_heads,
            num_frequencies,
            damping=self.damping,
            zero_decay_heads=self.zero_decay_heads,
            base=self.base,
            conjugate_pairs=self.conjugate_pairs,
            dtype=dtype,
            device=device,
        )


def spectral_coupling(
    num_heads: int,
    num_frequencies: int,
    *,
    damping: float = 0.05,
    zero_decay_heads: int | None = None,
    base: float = 10000.0,
    conjugate_pairs: bool = True,
    dtype=None,
    device=None,
) -> CoupledSpectrum:
    """Spectrally coupled frequencies and decays (seed 004 section 3.4, C.1, D.2).

    A global bank ``omega_m = base^(-m / (H m_h))``, ``m = 0..H m_h - 1`` (``m_h`` distinct
    frequencies per head), is sorted slowest first and split into contiguous bands, so head 0
    gets the lowest frequencies; each head's decay is ``mu_h = b max(omega_h)`` and the first
    ``zero_decay_heads`` heads get ``mu = 0``. The paper gives no formula for the bank; this is
    the public code's construction (seed 004 digest 1.12). With ``conjugate_pairs`` each band is
    returned as ``[omega, -omega]`` (`conjugate_frequencies`), so ``num_frequencies`` must be
    even and ``m_h = num_frequencies / 2``.

    Non-SC RFA (M1) uses "the same spread of decay rates" with the full bank
    `rope_frequencies` in every head: take ``.decay`` from here.

    Returns
    -------
    CoupledSpectrum(frequencies (H, num_frequencies), decay (H,)).
    """
    _check_count("num_heads", num_heads)
    _check_count("num_frequencies", num_frequencies)
    if not damping >= 0:
        raise ValueError(f"damping must be >= 0, found {damping!r}")
    if zero_decay_heads is None:
        zero_decay_heads = int(num_heads * _ZERO_DECAY_FRACTION)
    if not isinstance(zero_decay_heads, int) or not 0 <= zero_decay_heads <= num_heads:
        raise ValueError(
            f"zero_decay_heads must be an integer in [0, {num_heads}], found {zero_decay_heads!r}"
        )
    if conjugate_pairs and num_frequencies % 2:
        raise ValueError(
            f"num_frequencies must be even for conjugate pairs, found {num_frequencies}"
        )
    per_head = num_frequencies // 2 if conjugate_pairs else num_frequencies
    bank = rope_frequencies(num_heads * per_head, base=base, dtype=torch.float64, device=device)
    bands = bank.flip(0).reshape(num_heads, per_head)  # ascending: head 0 slowest
    decay = damping * bands.amax(dim=1)
    decay[:zero_decay_heads] = 0.0
    frequencies = conjugate_frequencies(bands) if conjugate_pairs else bands
    dtype = dtype or torch.get_default_dtype()
    return CoupledSpectrum(frequencies.to(dtype), decay.to(dtype))


def head_spectrum(frequencies, decay, *, heads: int, num_frequencies: int, like: torch.Tensor):
    """Resolve per-head ``(H, n)`` frequencies and the decay argument of a layer.

    ``frequencies`` is an ``(n,)`` or ``(H, n)`` tensor (``decay`` is returned as given), or a
    `SpectralCoupling`, which builds both (``decay`` must then be None). Tensors are cast to
    ``like``'s dtype and device.
    """
    n = num_frequencies
    if isinstance(frequencies, SpectralCoupling):
        if decay is not None:
            raise ValueError(
                "decay must be None when frequencies is a SpectralCoupling (the coupling sets "
                "mu_h = damping * max omega_h)"
            )
        spectrum = frequencies.build(heads, n, dtype=like.dtype, device=like.device)
        return CoupledSpectrum(spectrum.frequencies, spectrum.decay)
    if not isinstance(frequencies, torch.Tensor):
        raise TypeError(
            "frequencies must be a tensor of shape (n,) or (H, n) or a SpectralCoupling, found "
            f"{type(frequencies).__name__}"
        )
    freq = frequencies.to(dtype=like.dtype, device=like.device)
    if freq.ndim == 1:
        freq = freq.unsqueeze(0)
    if freq.ndim != 2 or freq.shape[-1] != n or freq.shape[0] not in (1, heads):
        raise ValueError(
            f"frequencies must have shape ({n},) or ({heads}, {n}) (one per complex feature, "
            f"D/2 = {n}), found {tuple(frequencies.shape)}"
        )
    if not torch.compiler.is_compiling() and not torch.isfinite(freq).all():
        raise ValueError("frequencies must be finite, found NaN or inf")
    return CoupledSpectrum(freq.expand(heads, n), decay)


def alibi_slopes(num_heads: int, *, dtype=None, device=None) -> torch.Tensor:
    """ALiBi's per-head slopes (Press et al., 2022): ``(H,)``.

    For ``H`` a power of two, ``m_h = 2^(-8 h / H)``, ``h = 1..H``. Otherwise the slopes of the
    nearest lower power of two ``P`` are followed by every other slope of ``2P`` heads, the rule
    of the ALiBi reference code.
    """
    _check_count("num_heads", num_heads)

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    lower = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(lower)
    if lower < num_heads:
        slopes += power_of_two(2 * lower)[0::2][: num_heads - lower]
    return torch.tensor(slopes, dtype=dtype or torch.get_default_dtype(), device=device)


def sinusoidal_embedding(t: torch.Tensor, dim: int, *, base: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding at real time stamps (Vaswani et al.): ``t (..., T) -> (..., T, dim)``.

    ``PE[t, 2k] = sin(t w_k)``, ``PE[t, 2k+1] = cos(t w_k)``, ``w_k = base^(-2k/dim)``; an odd
    ``dim`` drops the last cosine. Integer ``t`` gives the original table.
    """
    _check_count("dim", dim)
    half = (dim + 1) // 2
    k = torch.arange(half, dtype=t.dtype, device=t.device)
    w = base ** (-2.0 * k / dim)
    angles = t.unsqueeze(-1) * w
    out = torch.stack((torch.sin(angles), torch.cos(angles)), dim=-1).flatten(-2)
    return out[..., :dim]


def _check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, found {value!r}")

"""Seed 004 Fig. 5: eigenvalue spectra of RoPE with isotropic decay and of spectrally coupled RoPE.

Each head's positional dynamics in its eigenbasis are ``lambda = -mu_h +- i omega_k`` (seed 004
3.4, C.1, D.1: conjugate pairs keep the state matrix real). The two encodings, built by the
suite's banks in `kernels.ops.common.positional`:

* RoPE with isotropic decay (left): every head holds the whole RoPE bank
  ``omega_k = base^(-k/n)`` (`rope_frequencies`) and one decay ``mu_h``; the decays are "the
  same spread" as SC-RoPE's (seed 004 D.2), i.e. `spectral_coupling(...).decay`.
* Spectrally coupled RoPE (right): a global bank split into contiguous bands, head 0 slowest,
  with ``mu_h = b max(omega_h)`` and the lowest ``int(H / 4)`` heads at ``mu = 0``
  (`spectral_coupling`: the public code's construction; the paper gives no formula). Fig. 5
  uses ``b = 1``; whether its heads include zero-decay ones is not said.

Measured: whether each spectrum is closed under conjugation and stable (``Re lambda <= 0``);
Spearman's rank correlation between ``|omega|`` and ``mu`` over all eigenvalues; the mean decay
of the fastest and of the slowest quarter of the eigenvalues (by ``|omega|``); and the largest
number of oscillation cycles a decaying mode completes per e-folding time,
``|omega| / (2 pi mu)`` (SC-RoPE bounds it by ``1 / (2 pi b)``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr

from kernels.ops.common import positional

NAME = "rope_spectra"
TITLE = "Seed 004 Fig. 5: eigenvalue spectra of RoPE + isotropic decay and of SC-RoPE"
SOURCE = "seed 004 section 3.4, appendix C.1, Fig. 5 (b = 1.0)"
SEED = "004"
CHECKS: tuple[str, ...] = (
    "rfa_extensions.sc-equal-cycles",
    "rfa_extensions.printed-sc-balanced-b1",
    "rfa_extensions.corrected-sc-balanced",
)
ENCODINGS = ("RoPE + isotropic decay", "SC-RoPE")


@dataclass(frozen=True)
class Config:
    """``heads`` H, ``frequencies`` distinct frequencies per head n (a head has ``2n`` complex
    eigenvalues, the conjugate pairs), ``damping`` b, ``base`` of the RoPE bank."""

    heads: int = 8
    frequencies: int = 16
    damping: float = 1.0
    base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("heads", "frequencies"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, found {value!r}")
        if not self.damping > 0:
            raise ValueError(f"damping must be > 0, found {self.damping!r}")

    @classmethod
    def quick(cls) -> Config:
        return cls()

    @classmethod
    def full(cls) -> Config:
        return cls()


@dataclass(frozen=True)
class Spectrum:
    """One encoding: ``eigenvalues`` (H, 2n) complex, row h the eigenvalues of head h."""

    name: str
    eigenvalues: np.ndarray

    @property
    def decay(self) -> np.ndarray:
        return -self.eigenvalues.real.ravel()

    @property
    def speed(self) -> np.ndarray:
        return np.abs(self.eigenvalues.imag.ravel())

    @property
    def conjugate_closed(self) -> bool:
        """Every head's eigenvalues equal their conjugates as a multiset."""
        return all(
            np.allclose(np.sort_complex(row), np.sort_complex(row.conj()), rtol=0, atol=0)
            for row in self.eigenvalues
        )

    @property
    def stable(self) -> bool:
        return bool(np.all(self.eigenvalues.real <= 0))

    @property
    def rank_correlation(self) -> float:
        """Spearman's rho between ``|omega|`` and ``mu`` over all eigenvalues."""
        return float(spearmanr(self.speed, self.decay).statistic)

    def quartile_decay(self) -> tuple[float, float]:
        """Mean ``mu`` of the slowest and of the fastest quarter of eigenvalues by ``|omega|``."""
        order = np.argsort(self.speed, kind="stable")
        q = max(1, order.size // 4)
        return float(self.decay[order[:q]].mean()), float(self.decay[order[-q:]].mean())

    @property
    def max_cycles(self) -> float:
        """Largest ``|omega| / (2 pi mu)`` over the decaying eigenvalues (``mu > 0``)."""
        mu, w = self.decay, self.speed
        keep = mu > 0
        return float(np.max(w[keep] / (2 * np.pi * mu[keep])))


@dataclass(frozen=True)
class Data:
    config: Config
    spectra: tuple[Spectrum, ...]
    head_decay: np.ndarray


def _eigenvalues(frequencies: np.ndarray, decay: np.ndarray) -> np.ndarray:
    """``-mu_h + i omega`` per head: frequencies (H, 2n) with their conjugates, decay (H,)."""
    return -decay[:, None] + 1j * frequencies


def compute(cfg: Config | None = None) -> Data:
    """Both spectra from the suite's frequency banks (module docstring)."""
    cfg = Config.full() if cfg is None else cfg
    import torch

    coupled = positional.spectral_coupling(
        cfg.heads, 2 * cfg.frequencies, damping=cfg.damping, base=cfg.base, dtype=torch.float64
    )
    decay = coupled.decay.numpy()
    bank = positional.rope_frequencies(cfg.frequencies, base=cfg.base, dtype=torch.float64)
    full = positional.conjugate_frequencies(bank).numpy()
    rope = _eigenvalues(np.tile(full, (cfg.heads, 1)), decay)
    sc = _eigenvalues(coupled.frequencies.numpy(), decay)
    return Data(cfg, (Spectrum(ENCODINGS[0], rope), Spectrum(ENCODINGS[1], sc)), decay)


def plot(data: Data):
    """Two panels in the complex plane, one colour per head."""
    from figures import style

    H = data.config.heads
    with style.context():
        fig = style.new_figure(figsize=(11, 4.6))
        axes = fig.subplots(1, 2, sharey=True)
        for ax, s in zip(axes, data.spectra, strict=True):
            for h in range(H):
                lam = s.eigenvalues[h]
                color = f"C{h % 10}"
                ax.scatter(lam.real, lam.imag, s=10, color=color, label=f"head {h}")
            ax.axvline(0.0, color="0.5", lw=0.6)
            ax.set_xscale("symlog", linthresh=1e-3)
            ax.set_yscale("symlog", linthresh=1e-3)
            ax.set_xlim(-2.0 * max(1.0, float(s.decay.max())), 0.0)
            ax.set_xlabel("Re lambda = -mu (symlog)")
            ax.set_title(
                f"{s.name}\nSpearman(|omega|, mu) = {s.rank_correlation:.2f}, "
                f"max cycles per e-fold {s.max_cycles:.3g}"
            )
        axes[0].set_ylabel("Im lambda = omega (symlog)")
        axes[1].legend(loc="center left", bbox_to_anchor=(1.0, 0.5))
        fig.suptitle(
            f"{TITLE} (H = {H}, {data.config.frequencies} frequencies per head, "
            f"b = {data.config.damping:g})"
        )
    return fig


def caption(data: Data) -> str:
    rope, sc = data.spectra
    (rs, rf), (ss, sf) = rope.quartile_decay(), sc.quartile_decay()
    cfg = data.config
    return (
        f"Eigenvalues -mu_h +- i omega of H = {cfg.heads} heads with {cfg.frequencies} "
        f"frequencies each, b = {cfg.damping:g}; banks from kernels.ops.common.positional "
        "(head decays of SC-RoPE, including its 2 zero-decay heads, reused for the isotropic "
        "case). Paper: with isotropic decay every head spans the full frequency range; the "
        "spectrally coupled form makes decay grow with frequency, suppressing high-frequency "
        "modes and keeping low-frequency ones, in conjugate pairs. Here: conjugate-closed "
        f"{rope.conjugate_closed} / {sc.conjugate_closed}, stable {rope.stable} / {sc.stable}; "
        f"Spearman(|omega|, mu) = {rope.rank_correlation:.2f} (isotropic) vs "
        f"{sc.rank_correlation:.2f} (coupled); mean mu of the slowest / fastest quarter of "
        f"modes {rs:.3g} / {rf:.3g} (isotropic) vs {ss:.3g} / {sf:.3g} (coupled); largest "
        f"cycles per e-folding time of a decaying mode {rope.max_cycles:.3g} (isotropic) vs "
        f"{sc.max_cycles:.3g} (coupled; bound 1/(2 pi b) = {1 / (2 * np.pi * cfg.damping):.3g}). "
        "Paper (C.1): b ~ 1 makes the decay time match the rotation period; here at b = 1 a "
        "decaying head's fastest mode turns 1/(2 pi) ~ 0.16 of a cycle per e-folding time: "
        "the two match at b = 1/(2 pi) (check rfa_extensions.printed-sc-balanced-b1)."
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.rope_spectra [--quick] [--out DIR] [--force]``."""
    from figures.cli import main as cli_main

    return cli_main([NAME, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())

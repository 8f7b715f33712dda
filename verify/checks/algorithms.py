"""Seed 000's Algorithms 1-2 as printed, against the model of sections 3.1, 3.5-3.6 and 5.3.

The layers (`kernels.layers.afa`, `kernels.ops.rt.afa`) document where they depart from the
printed algorithms; these checks register each departure as a printed form that fails beside the
form the layers use:

* Algorithm 1's prediction ``e^{alpha dt} e^{lambda_Omega dt} Zbar`` with ``Re lambda =
  -alpha^2``: the decay factor has the wrong sign and the wrong exponent, so it is not the
  one-step mean ``e^{lambda dt}`` of the eigen-mode. The layers' transition,
  `kernels.ops.afa.predict`, is ``e^{-a dt} e^{i omega dt}``, the exponential of the real 2 x 2
  block of the mode.
* Algorithm 2's keys ``Z~_k = Phi^+ Z_k``: with queries ``Phi^- Z_q``, the scores
  ``Re(Z~_q^H Z~_k)`` carry ``e^{i omega (t_i + t_j)}``, so they change when every time stamp
  moves by the same amount. Counter-rotating the keys like the queries (Algorithm 1) leaves
  only the lag; `kernels.ops.rt.rt_afa` then gives the same output for shifted stamps.

Shapes: real pairs ``[re | im]`` of ``n`` complex features, ``(B, H, T, 2n)``.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.linalg import expm

from kernels.ops.afa import predict
from kernels.ops.rt import rt_afa
from verify.registry import Outcome, check, seed


def _mode_block(a: float, omega: float) -> np.ndarray:
    """The real 2 x 2 block of the eigenvalue ``-a + i omega`` acting on ``[re, im]``."""
    return np.array([[-a, -omega], [omega, -a]])


def _draws(rng, count: int):
    """Random ``(a, omega, dt)``: decays in (0.05, 2), frequencies in (-3, 3), steps in (0.1, 2)."""
    return zip(
        rng.uniform(0.05, 2.0, count),
        rng.uniform(-3.0, 3.0, count),
        rng.uniform(0.1, 2.0, count),
        strict=True,
    )


@check(
    "algorithms.printed-alg1-decay",
    title="seed 000 Algorithm 1's prediction e^{alpha dt} e^{lambda_Omega dt} (Re lambda = "
    "-alpha^2) against the mode's one-step mean e^{lambda dt}: the decay sign and exponent "
    "are wrong (residual: relative error)",
    source=seed(0, "Algorithm 1 (prediction step), 3.1"),
    kind="numeric",
    tolerance=1e-12,
    expect="fails",
    printed=r"e^{\alpha \Delta t} e^{\lambda_\Omega \Delta t} \bar Z_v, \quad "
    r"\mathrm{Re}\,\lambda = -\alpha^2",
    corrected=r"e^{-\alpha^2 \Delta t} e^{i \omega \Delta t} \bar Z",
    correction="algorithms.corrected-alg1-transition",
)
def _printed_alg1(quick: bool) -> Outcome:
    rng = np.random.default_rng(101)
    worst = np.inf
    for a, omega, dt in _draws(rng, 5 if quick else 50):
        alpha = np.sqrt(a)  # Re lambda = -alpha^2 = -a
        printed = np.exp(alpha * dt) * np.exp(1j * omega * dt)
        exact = np.exp((-a + 1j * omega) * dt)
        worst = min(worst, abs(printed - exact) / abs(exact))
    return Outcome(float(worst), "smallest relative error over the draws")


@check(
    "algorithms.corrected-alg1-transition",
    title="seed 000 3.1: the layers' transition kernels.ops.afa.predict is e^{(-a + i omega) dt}, "
    "the exponential of the mode's real block, on real pairs (against scipy expm)",
    source=seed(0, "3.1, Algorithm 1 (prediction step, corrected)"),
    kind="numeric",
    tolerance=1e-12,
)
def _corrected_alg1(quick: bool) -> float:
    # predict: a rotation and one exponential per entry, a few eps. The reference, scipy's expm
    # (scaling and squaring) at |A dt| up to ~7, loses up to ~2e2 eps (4e-14 seen): 1e-12 keeps
    # a factor 25.
    rng = np.random.default_rng(102)
    worst = 0.0
    for a, omega, dt in _draws(rng, 5 if quick else 50):
        z = rng.normal(size=2)
        got = predict(
            torch.tensor(z, dtype=torch.float64).reshape(1, 1, 1, 2),
            decay=torch.tensor([a], dtype=torch.float64),
            frequencies=torch.tensor([[omega]], dtype=torch.float64),
            step=dt,
        )
        want = expm(_mode_block(a, omega) * dt) @ z
        worst = max(worst, float(np.abs(got.reshape(2).numpy() - want).max() / np.abs(z).max()))
    return worst


def _rotate(pairs: np.ndarray, phase: np.ndarray) -> np.ndarray:
    """Real pairs ``(T, 2n)`` times ``e^{i phase}`` with ``phase`` (T, n)."""
    n = pairs.shape[-1] // 2
    z = (pairs[:, :n] + 1j * pairs[:, n:]) * np.exp(1j * phase)
    return np.concatenate([z.real, z.imag], axis=-1)


def alg2_scores(t: np.ndarray, omega: np.ndarray, q, k, *, printed: bool) -> np.ndarray:
    """``Re(Z~_q^H Z~_k)`` (T, T) with ``Z~_q = Phi^- Z_q`` and keys ``Phi^+ Z_k`` (printed) or
    ``Phi^- Z_k``; ``Phi^{-/+} = e^{-/+ i omega t}``."""
    queries = _rotate(q, -np.outer(t, omega))
    keys = _rotate(k, (1.0 if printed else -1.0) * np.outer(t, omega))
    return queries @ keys.T


def _shift_change(printed: bool, rng, shift: float) -> float:
    T, n = 12, 3
    t = np.cumsum(rng.uniform(0.5, 1.5, T))
    omega = rng.uniform(0.3, 2.0, n)
    q, k = rng.normal(size=(2, T, 2 * n))
    before = alg2_scores(t, omega, q, k, printed=printed)
    after = alg2_scores(t + shift, omega, q, k, printed=printed)
    return float(np.abs(after - before).max() / np.abs(before).max())


@check(
    "algorithms.printed-alg2-keys",
    title="seed 000 Algorithm 2's keys Phi^+ Z_k: the scores Re(Z~_q^H Z~_k) change when every "
    "time stamp moves by the same amount (they depend on t_i + t_j, not on the lag; residual: "
    "relative change under a shift)",
    source=seed(0, "Algorithm 2 (key rotation), 3.5-3.6"),
    kind="numeric",
    tolerance=1e-12,
    expect="fails",
    printed=r"\tilde Z_k = \Phi^{+} \cdot Z_k",
    corrected=r"\tilde Z_k = \Phi^{-} \cdot Z_k",
    correction="algorithms.corrected-alg2-keys",
)
def _printed_alg2(quick: bool) -> Outcome:
    rng = np.random.default_rng(103)
    worst = min(_shift_change(True, rng, s) for s in rng.uniform(1.0, 50.0, 3 if quick else 20))
    return Outcome(worst, "smallest relative change of the scores over the shifts")


@check(
    "algorithms.corrected-alg2-keys",
    title="seed 000 Algorithm 2 corrected: keys counter-rotated like queries (Phi^- Z_k) give "
    "lag-only scores, and kernels.ops.rt.rt_afa's output is unchanged by a shift of every "
    "time stamp",
    source=seed(0, "Algorithm 2 (key rotation, corrected), Algorithm 1, 3.5-3.6"),
    kind="numeric",
    tolerance=1e-10,
)
def _corrected_alg2(quick: bool) -> float:
    # Scores: e^{i omega t} products of size ~|q||k|, with phases up to omega (t + shift) ~ 1e2:
    # round-off ~1e2 eps relative. The layer: the same rotations plus a softmax-like weighting,
    # ~1e-13; 1e-10 keeps three orders of headroom.
    rng = np.random.default_rng(104)
    shifts = rng.uniform(1.0, 50.0, 3 if quick else 20)
    worst = max(_shift_change(False, rng, s) for s in shifts)
    B, H, T, n = 1, 2, 10, 3
    gen = torch.Generator().manual_seed(105)
    q, k, v = (torch.randn(B, H, T, 2 * n, generator=gen, dtype=torch.float64) for _ in range(3))
    t = torch.cumsum(torch.rand(T, generator=gen, dtype=torch.float64) + 0.5, 0)
    options = dict(
        decay=torch.tensor([0.1, 0.3], dtype=torch.float64),
        frequencies=torch.rand(H, n, generator=gen, dtype=torch.float64) * 2,
        sigma_r2=0.2,
        sigma_t2=0.1,
        eta_r2=0.5,
        eta_t2=0.4,
    )
    base = rt_afa(q, k, v, t=t, **options).output
    for shift in shifts[:3]:
        moved = rt_afa(q, k, v, t=t + float(shift), **options).output
        worst = max(worst, float((moved - base).abs().max() / base.abs().max()))
    return worst

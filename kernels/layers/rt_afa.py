"""Radial-tangential AFA as an ``nn.Module`` (seed 000 Algorithm 2 of 5.4).

One layer, multi-head (each head has its own dynamics and noise; the complex projections are
shared and split into heads, as in ``nn.MultiheadAttention`` and
:class:`kernels.layers.afa.AdaptiveFilterAttention`)::

    Z   = [x, 0]                     real input lifted to complex (or x itself: real pairs)
    Zv  = L_V(Z),  Zq = L_Q(Zv),  Zk = L_K(Zv)      (Algorithm 2; share_qk_values=False: from Z)
    Zbar = RT-AFA(Zq, Zk, Zv)        radial and tangential attention, geodesic step (5.3-5.4)
    gate "residual":   Zbar <- (1 - delta) Zv + delta Zbar                       (Algorithm 2)
    prediction         Z+ = e^{(-a + i omega) dt} Zbar                            (3.1)
    y = Re L_P(Z+)                   (real pairs with complex_input=True)

:func:`kernels.ops.rt.rt_afa` documents the attention and its corrections of the
printed algorithm. Algorithm 2 writes the prediction as ``E_v[:, 1] . Zbar`` (decay only); the
transition of the model also rotates, ``e^{-a dt} e^{i omega dt}`` (Algorithm 1 and 3.1), which
is used here (:func:`kernels.ops.afa.predict`).

Parameter maps (``softplus(r) = log(1 + e^r)``, initialised through its inverse): decay
``a = softplus(r_a)`` (Algorithm 2's ``alpha^2``), variances ``sigma_r^2, sigma_t^2, eta_r^2,
eta_t^2 = softplus(r)``, temperatures ``(tau_r, tau_t) = softplus(r_tau)``, learnable
``(nu_r, nu_t) = softplus(r_nu)``, learnable step ``dt = softplus(r_dt)``; ``omega`` is
unconstrained (RoPE's ``10000^{-k/n}`` initially); ``delta = sigmoid(r_delta)`` (0.5 initially).
Initial dynamics as the AFA layer's: ``a = 0.1``, ``sigma^2 = 0.1``, ``eta^2 = 1`` (radial and
tangential alike), temperatures 1.

Time: the clock is ``dt * t`` with ``t`` the given stamps (default ``0, 1, ..., T-1``), so the
dynamics passed to the functional are ``(a, omega, sigma^2) dt`` and the prediction horizon is
one unit of ``t`` (as the AFA layer).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from kernels._validation import check_heads, check_input
from kernels.layers.causal import finite_causal
from kernels.layers.complex_linear import ComplexLinear, lift
from kernels.layers.heads import merge_complex_heads, split_complex_heads
from kernels.layers.parameters import inverse_softplus
from kernels.ops import afa
from kernels.ops.common import complex_pairs
from kernels.ops.rt import rt_afa

GATES = ("residual", None)

_INIT_DECAY = 0.1
_INIT_PROCESS_VAR = 0.1
_INIT_MEASUREMENT_VAR = 1.0
_ROPE_BASE = 10000.0


class RTWeights(NamedTuple):
    """Attention weights of an RT-AFA layer, each (B, H, T, T): radial ``A_r``, tangential
    ``A_t`` (rows sum to 1 over the visible keys; the value decay is applied after them)."""

    radial: torch.Tensor
    tangential: torch.Tensor


def _features(embed_dim, complex_input: bool) -> int:
    if not isinstance(embed_dim, int) or isinstance(embed_dim, bool) or embed_dim < 1:
        raise ValueError(f"embed_dim must be a positive integer, found {embed_dim!r}")
    if not complex_input:
        return embed_dim
    if embed_dim % 2:
        raise ValueError(
            f"embed_dim must be even with complex_input=True (real and imaginary halves), "
            f"found {embed_dim}"
        )
    return embed_dim // 2


def _positive_number(name: str, value, *, inf_ok: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    if not ok or (math.isinf(value) and not inf_ok):
        bound = "> 0 (or math.inf)" if inf_ok else "finite and > 0"
        raise ValueError(f"{name} must be a number {bound}, found {value!r}")
    return float(value)


class RTAdaptiveFilterAttention(nn.Module):
    """Radial-tangential AFA on ``(B, T, E)`` (seed 000 Algorithm 2), batch first.

    Parameters
    ----------
    embed_dim : width ``E`` of input and output. Real input is lifted to ``E`` complex features;
        with ``complex_input=True`` it is already real pairs (``[all re | all im]``, ``E`` even).
    num_heads : heads ``H``; each gets ``n = (complex features) / H`` complex features.
    causal : keys with ``t_j <= t_i`` only (default) or all keys.
    complex_input : see ``embed_dim``; the output is then real pairs too, else the real part.
    step : ``dt`` > 0, the time unit of ``t`` and the prediction horizon.
    learn_step : learn ``dt`` (through softplus).
    share_qk_values : queries and keys from the values (Algorithm 2) or from the input.
    gate : ``"residual"`` (Algorithm 2's ``delta``) or None.
    predict : output the one-step prediction (Algorithm 2) or the estimate.
    nu : robust scale > 0 for both parts, or ``math.inf`` (Gaussian weights). The default 1 is
        Algorithm 2's printed ``-log(V + R^2)`` (4.1 absorbs ``nu`` into the other parameters).
    learn_nu : learn ``(nu_r, nu_t)`` per head (needs a finite ``nu``).
    exact_geodesic : the exact spherical step instead of the first-order one.
    bias : biases of the projections (``L_P``'s is real unless ``complex_input``).
    block_size : query rows per block of the functional (memory ``O(block_size T)``).
    generator : ``torch.Generator`` for the projections' initialisation.
    dtype, device : of the parameters.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        causal: bool = True,
        complex_input: bool = False,
        step: float = 1.0,
        learn_step: bool = False,
        share_qk_values: bool = True,
        gate: str | None = "residual",
        predict: bool = True,
        nu: float = 1.0,
        learn_nu: bool = False,
        exact_geodesic: bool = False,
        bias: bool = True,
        block_size: int | None = 256,
        generator: torch.Generator | None = None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        features = _features(embed_dim, complex_input)
        head_features = check_heads(features, num_heads)
        if gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, found {gate!r}")
        step = _positive_number("step", step)
        nu = _positive_number("nu", nu, inf_ok=True)
        if learn_nu and math.isinf(nu):
            raise ValueError("learn_nu=True needs a finite initial nu")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_features = head_features
        self.causal = bool(causal)
        self.complex_input = bool(complex_input)
        self.share_qk_values = bool(share_qk_values)
        self.gate = gate
        self.predict = bool(predict)
        self.exact_geodesic = bool(exact_geodesic)
        self.block_size = block_size
        factory = {"dtype": dtype, "device": device}

        def linear(with_bias=bias):
            return ComplexLinear(features, features, bias=with_bias, generator=generator, **factory)

        self.value = linear()
        self.query = linear()
        self.key = linear()
        # With real output only Re L_P(z) is used: its bias is then real (an imaginary bias
        # would be inert).
        real_bias = bias and not complex_input
        self.out_proj = linear(bias and complex_input)
        self.out_bias = nn.Parameter(torch.zeros(embed_dim, **factory)) if real_bias else None

        def raw(value, size=(num_heads,)):
            return nn.Parameter(inverse_softplus(torch.full(size, float(value), **factory)))

        self.raw_decay = raw(_INIT_DECAY)
        self.raw_sigma_r2 = raw(_INIT_PROCESS_VAR)
        self.raw_sigma_t2 = raw(_INIT_PROCESS_VAR)
        self.raw_eta_r2 = raw(_INIT_MEASUREMENT_VAR)
        self.raw_eta_t2 = raw(_INIT_MEASUREMENT_VAR)
        self.raw_temperatures = raw(1.0, (2, num_heads))
        k = torch.arange(head_features, **factory)
        theta = _ROPE_BASE ** (-k / head_features)
        self.frequencies = nn.Parameter(theta.expand(num_heads, head_features).clone())
        self.raw_nu = raw(nu, (2, num_heads)) if learn_nu else None
        self.nu_value = nu
        self.raw_step = raw(step, ()) if learn_step else None
        self.step_value = step
        self.raw_delta = (
            nn.Parameter(torch.zeros(num_heads, **factory)) if gate == "residual" else None
        )

    # ------------------------------------------------------------------ parameters
    @property
    def step(self) -> torch.Tensor | float:
        """``dt`` (a tensor when learned)."""
        return self.step_value if self.raw_step is None else nn.functional.softplus(self.raw_step)

    @property
    def nu(self):
        """``(nu_r, nu_t)``, each (H,), when learned; else the fixed number."""
        if self.raw_nu is None:
            return self.nu_value
        return tuple(nn.functional.softplus(self.raw_nu))

    def dynamics(self) -> dict:
        """Natural-unit dynamics: decay ``a`` (H,), frequencies ``omega`` (H, n), variances
        ``sigma_r2, sigma_t2, eta_r2, eta_t2`` (H,), temperatures ``(tau_r, tau_t)``."""
        softplus = nn.functional.softplus
        return {
            "decay": softplus(self.raw_decay),
            "frequencies": self.frequencies,
            "sigma_r2": softplus(self.raw_sigma_r2),
            "sigma_t2": softplus(self.raw_sigma_t2),
            "eta_r2": softplus(self.raw_eta_r2),
            "eta_t2": softplus(self.raw_eta_t2),
            "temperatures": tuple(softplus(self.raw_temperatures)),
        }

    # ------------------------------------------------------------------ forward
    @finite_causal
    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``x (B, T, E)``, ``t`` None or (T,) / (B, T) stamps -> ``(y (B, T, E), weights)``.

        ``weights`` is an :class:`RTWeights` of (B, H, T, T) tensors when ``need_weights``,
        else None.
        """
        check_input(x, self.embed_dim)
        z = x if self.complex_input else lift(x)
        zv = self.value(z)
        source = zv if self.share_qk_values else z
        q, k, v = (
            split_complex_heads(u, self.num_heads)
            for u in (self.query(source), self.key(source), zv)
        )
        dyn = self.dynamics()
        step = self.step
        decay, frequencies = dyn["decay"] * step, dyn["frequencies"] * step
        result = rt_afa(
            q,
            k,
            v,
            t=t,
            decay=decay,
            frequencies=frequencies,
            sigma_r2=dyn["sigma_r2"] * step,
            sigma_t2=dyn["sigma_t2"] * step,
            eta_r2=dyn["eta_r2"],
            eta_t2=dyn["eta_t2"],
            temperatures=dyn["temperatures"],
            nu=self.nu,
            causal=self.causal,
            return_weights=need_weights,
            exact_geodesic=self.exact_geodesic,
            block_size=self.block_size,
        )
        out = result.output
        if self.gate == "residual":
            delta = torch.sigmoid(self.raw_delta).view(1, -1, 1, 1)
            out = (1 - delta) * v + delta * out
        if self.predict:
            out = afa.predict(out, decay=decay, frequencies=frequencies, step=1.0)
        y = self.out_proj(merge_complex_heads(out))
        if not self.complex_input:
            y = complex_pairs.split(y)[0]
            if self.out_bias is not None:
                y = y + self.out_bias
        weights = RTWeights(result.radial_weights, result.tangential_weights)
        return y, weights if need_weights else None

    # ------------------------------------------------------------------ oracle construction
    @classmethod
    def from_eigen(
        cls,
        S,
        eigenvalues,
        *,
        sigma_r2: float,
        sigma_t2: float,
        eta_r2: float,
        eta_t2: float,
        dtype=torch.float64,
        **kwargs,
    ) -> RTAdaptiveFilterAttention:
        """The layer of a known RT system ``A = S diag(eigenvalues) S^-1`` (seed 000 5.1).

        One head on ``E = d`` real features: ``W_v = S^-1``, ``W_p = S``, ``W_q = W_k = I``
        when queries and keys come from the values (``S^-1`` otherwise), zero biases, decay
        ``a = -Re(eigenvalues)`` (one value: the RT model's decay is isotropic),
        ``omega = Im(eigenvalues)``, the radial and tangential variances in eigen-coordinates,
        temperatures 1. The RT geometry is that of the eigen-coordinates, so ``S`` should map
        an orthonormal complex basis (``S = B U`` with ``U`` unitary) for the layer to be the
        RT estimator of the real system with basis ``B``. With ``gate=None`` (the default
        here) and ``predict=False`` the output is one RT-Kalman IRLS iteration from the
        measurements (``estimators.rt_irls.rt_irls(..., init="query", max_iter=1)``).

        Parameters
        ----------
        S : (d, d) complex invertible.   eigenvalues : (d,) complex, common ``Re <= 0``.
        sigma_r2, sigma_t2 : >= 0.   eta_r2, eta_t2 : > 0.
        dtype : of the parameters (float64 by default, for oracle tests).
        **kwargs : other constructor arguments (``nu``, ``predict``, ``step``, ``causal``, ...).
        """
        S = torch.as_tensor(np.asarray(S, dtype=complex))
        if S.ndim != 2 or S.shape[0] != S.shape[1]:
            raise ValueError(f"S must be a square (d, d) matrix, found {tuple(S.shape)}")
        d = S.shape[0]
        lam = torch.as_tensor(np.asarray(eigenvalues, dtype=complex))
        if lam.shape != (d,):
            raise ValueError(f"eigenvalues must have shape ({d},), found {tuple(lam.shape)}")
        decay = -lam.real
        if (decay < 0).any() or not torch.allclose(decay, decay[:1].expand(d), rtol=1e-12):
            raise ValueError(
                "eigenvalues must share one real part <= 0 (isotropic decay), found "
                f"{lam.real.tolist()}"
            )
        kwargs.setdefault("gate", None)
        layer = cls(d, 1, dtype=dtype, **kwargs)
        S_inv = torch.linalg.inv(S)
        layer.value.set_complex(S_inv)
        layer.out_proj.set_complex(S)
        qk = torch.eye(d, dtype=S.dtype) if layer.share_qk_values else S_inv
        layer.query.set_complex(qk)
        layer.key.set_complex(qk)
        with torch.no_grad():
            for raw, value in (
                (layer.raw_decay, decay[0].item()),
                (layer.raw_sigma_r2, sigma_r2),
                (layer.raw_sigma_t2, sigma_t2),
                (layer.raw_eta_r2, eta_r2),
                (layer.raw_eta_t2, eta_t2),
            ):
                raw.copy_(inverse_softplus(torch.tensor(float(value), dtype=dtype)))
            layer.raw_temperatures.fill_(inverse_softplus(torch.tensor(1.0, dtype=dtype)).item())
            layer.frequencies.copy_(lam.imag.to(dtype).view(1, d))
        return layer

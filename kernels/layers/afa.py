"""Adaptive Filter Attention as an ``nn.Module`` (seed 000 Algorithm 1 of 4.1, 3.1, B.1).

One layer, multi-head (4.1: each head has its own dynamics ``alpha, omega, sigma, eta``; the
complex projections are shared across heads and split into them, as in ``nn.MultiheadAttention``)::

    Z   = [x, 0]                     real input lifted to complex (or x itself: real pairs)
    Zv  = L_V(Z),  Zq = L_Q(Zv),  Zk = L_K(Zv)      (Algorithm 1; share_qk_values=False: from Z)
    Zbar = AFA(Zq, Zk, Zv)           isotropic (Alg. 1), tensor form (3.1) or separable (B.1)
    gate "residual":        Zbar <- (1 - delta) Zv + delta Zbar              (Alg. 1, 2.3)
    prediction              Z+ = e^{lambda dt} Zbar                          (3.1, Alg. 1)
    gate "prediction-gate": out = (1 - g) Zbar + g Z+, g in (0, 1)^n          (3.1)
    y = Re L_P(out)                  (real pairs with complex_input=True)

Algorithm 1 prints the prediction as ``(e^{alpha dt} e^{lambda_Omega dt}) Zbar_v``, on the
estimate before the residual connection (which is then unused) and with the decay's sign
flipped; here the transition ``e^{-a dt} e^{i omega dt}`` acts on the gated estimate.

Parameter maps (every positive parameter through softplus, ``softplus(r) = log(1 + e^r)``):
decay ``a = softplus(r_a)`` (Algorithm 1 uses ``Re lambda = -alpha^2``; softplus avoids the
zero gradient of ``alpha^2`` at 0), process variance ``sigma^2 = softplus(r_sigma)``,
measurement variance ``eta^2 = softplus(r_eta)``, temperature ``softplus(r_tau)``, learnable
``nu = softplus(r_nu)``, learnable step ``dt = softplus(r_dt)``; ``omega`` is unconstrained;
``delta = sigmoid(r_delta)`` and ``g = sigmoid(r_g)``.

Time: the layer's clock is ``dt * t`` with ``t`` the given stamps (default ``0, 1, ..., T-1``),
so ``dt`` (``step``) sets the time scale (4.1: known or learned) and the prediction horizon is
one unit of ``t``. Equivalently the dynamics are rescaled, ``(a, omega, sigma^2) -> dt (a,
omega, sigma^2)`` (`Dynamics.scaled`), which is what is passed to `kernels.ops.afa`.

Parameters in natural units: `AdaptiveFilterAttention.dynamics` (a `Dynamics`) and
`AdaptiveFilterAttention.robust` (a `Robust`), the objects the functional forms take.

Memory (seed 000 2.3: IRLS as stacked layers with shared weights): ``forward(x, memory=m)``
takes queries from ``x`` and keys and values from ``m`` (same ``(B, T, E)``, same time stamps);
the residual gate mixes the estimate with ``L_V(x)``, the values of the queries' source. With
``memory=None`` (``m = x``) this is the layer; `verify.stacked_irls` iterates it with ``m`` the
measurements and ``x`` the previous layer's output.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from kernels._validation import check_heads, check_input
from kernels.backend import BACKENDS
from kernels.layers.causal import finite_causal
from kernels.layers.complex_linear import ComplexLinear, lift
from kernels.layers.heads import merge_complex_heads, split_complex_heads
from kernels.layers.parameters import inverse_softplus
from kernels.ops import afa
from kernels.ops.common import complex_pairs
from kernels.ops.common.params import Dynamics, Robust

GATES = ("residual", "prediction-gate", None)

# Initial values (in natural units, before the inverse softplus): slow decay, modest process
# noise against unit measurement noise, temperature 1; frequencies as RoPE's theta_k.
_INIT_DECAY = 0.1
_INIT_PROCESS_VAR = 0.1
_INIT_MEASUREMENT_VAR = 1.0
_ROPE_BASE = 10000.0


class AdaptiveFilterAttention(nn.Module):
    """Adaptive Filter Attention layer on ``(B, T, E)`` (seed 000 Algorithm 1, 3.1, B.1).

    Parameters
    ----------
    embed_dim : width ``E`` of the input and output. Real input is lifted to ``E`` complex
        features; with ``complex_input=True`` the input is already real pairs
        (``[all re | all im]``, ``E`` even, ``E/2`` complex features).
    num_heads : heads ``H``; each gets ``n = (complex features) / H`` complex features.
    causal : keys with ``t_j <= t_i`` only (default) or all keys.
    complex_input : see ``embed_dim``; the output is then real pairs too, else the real part.
    step : ``dt`` > 0, the time unit of ``t`` and the prediction horizon.
    learn_step : learn ``dt`` (through softplus).
    tensor_form : per-feature dynamics and the tensor form of 3.1 (``O(T^2 E)`` memory).
    separable : per-feature dynamics with B.1's separable precision (``O(T^2 + T E)``,
        causal only).
    share_qk_values : queries and keys from the values (Algorithm 1) or from the input.
    gate : ``"residual"`` (Algorithm 1's ``delta``), ``"prediction-gate"`` (3.1's ``g``) or
        None.
    predict : output the one-step prediction (True, Algorithm 1) or the estimate; must be True
        with the prediction gate.
    nu : robust scale > 0 or ``math.inf`` (no reweighting: the MLE weights).
    learn_nu : learn ``nu`` per head (needs a finite initial ``nu``).
    bias : biases of the complex projections (the drift biases of seed 000 3.9).
    process_noise : False fixes ``sigma^2 = 0`` (a buffer, not learned): the family of a system
        known to have no process noise, whose optimum lies on the boundary that the softplus
        map of a learned ``sigma^2`` reaches only as its parameter goes to ``-inf``.
    block_size : queries per block of the isotropic form (memory ``O(block_size T)``; the tile
        of the fused kernel, which takes powers of two >= 16).
    backend : ``"auto"``, ``"torch"`` or ``"triton"``: passed to `kernels.ops.afa.isotropic_afa`
        (the tensor and separable forms are torch only).
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
        tensor_form: bool = False,
        separable: bool = False,
        share_qk_values: bool = True,
        gate: str | None = "residual",
        predict: bool = True,
        nu: float = math.inf,
        learn_nu: bool = False,
        bias: bool = True,
        process_noise: bool = True,
        block_size: int | None = 64,
        backend: str = "auto",
        generator: torch.Generator | None = None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, found {backend!r}")
        if not isinstance(process_noise, bool):
            raise TypeError(f"process_noise must be a bool, found {process_noise!r}")
        features = _complex_features(embed_dim, complex_input)
        head_features = check_heads(features, num_heads)
        if gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, found {gate!r}")
        if gate == "prediction-gate" and not predict:
            raise ValueError("gate='prediction-gate' mixes estimate and prediction: predict=True")
        if tensor_form and separable:
            raise ValueError("choose one of tensor_form=True and separable=True, not both")
        if separable and not causal:
            raise ValueError("separable=True is causal only (seed 000 B.1)")
        if not (isinstance(step, (int, float)) and step > 0 and math.isfinite(step)):
            raise ValueError(f"step must be a finite number > 0, found {step!r}")
        if not (isinstance(nu, (int, float)) and nu > 0):
            raise ValueError(f"nu must be > 0 (or math.inf), found {nu!r}")
        if learn_nu and math.isinf(nu):
            raise ValueError("learn_nu=True needs a finite initial nu")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_features = head_features
        self.causal = causal
        self.complex_input = complex_input
        self.tensor_form = tensor_form
        self.separable = separable
        self.share_qk_values = share_qk_values
        self.gate = gate
        self.predict = predict
        self.block_size = block_size
        self.backend = backend
        factory = {"dtype": dtype, "device": device}

        def linear(imaginary_bias=True):
            return ComplexLinear(
                features,
                features,
                bias=bias,
                imaginary_bias=imaginary_bias,
                generator=generator,
                **factory,
            )

        self.value = linear()
        self.query = linear()
        self.key = linear()
        self.out_proj = linear(imaginary_bias=complex_input)  # real output: Re L_P only

        per_feature = tensor_form or separable
        shape = (num_heads, head_features) if per_feature else (num_heads,)

        def raw(value, size=shape):
            return nn.Parameter(inverse_softplus(torch.full(size, float(value), **factory)))

        self.raw_decay = raw(_INIT_DECAY)
        if process_noise:
            self.raw_process_var = raw(_INIT_PROCESS_VAR)
        else:  # softplus(-inf) = 0 exactly
            self.register_buffer("raw_process_var", torch.full(shape, -math.inf, **factory))
        self.raw_measurement_var = raw(_INIT_MEASUREMENT_VAR)
        self.raw_temperature = raw(1.0, (num_heads,))
        k = torch.arange(head_features, **factory)
        theta = _ROPE_BASE ** (-k / head_features)
        self.frequencies = nn.Parameter(theta.expand(num_heads, head_features).clone())
        if learn_nu:
            self.raw_nu = raw(nu, (num_heads,))
        else:
            self.register_parameter("raw_nu", None)
        self._nu = float(nu)
        if learn_step:
            self.raw_step = raw(step, ())
        else:
            self.register_parameter("raw_step", None)
        self.step_value = float(step)
        gates = {
            "raw_delta": (num_heads,) if gate == "residual" else None,
            "raw_gate": (num_heads, head_features) if gate == "prediction-gate" else None,
        }
        for name, size in gates.items():  # logits of sigmoid gates, initially 1/2
            param = None if size is None else nn.Parameter(torch.zeros(size, **factory))
            self.register_parameter(name, param)

    # ------------------------------------------------------------------ parameters
    @property
    def step(self) -> torch.Tensor | float:
        """``dt`` (a tensor when learned)."""
        return self.step_value if self.raw_step is None else nn.functional.softplus(self.raw_step)

    @property
    def nu(self) -> torch.Tensor | float:
        """``nu`` per head (H,) when learned, else the fixed number."""
        return self._nu if self.raw_nu is None else nn.functional.softplus(self.raw_nu)

    def dynamics(self) -> Dynamics:
        """The dynamics in natural units (unscaled by ``step``): decay ``a``, frequencies
        ``omega`` (H, n), ``sigma^2``, ``eta^2`` (per head (H,), or per head and feature)."""
        softplus = nn.functional.softplus
        return Dynamics(
            decay=softplus(self.raw_decay),
            frequencies=self.frequencies,
            process_var=softplus(self.raw_process_var),
            measurement_var=softplus(self.raw_measurement_var),
        )

    def robust(self) -> Robust:
        """The robust weighting: ``nu`` (`nu`) and the temperature (H,)."""
        return Robust(nu=self.nu, temperature=nn.functional.softplus(self.raw_temperature))

    # ------------------------------------------------------------------ forward
    @finite_causal
    def forward(self, x: torch.Tensor, t=None, *, memory=None, need_weights: bool = False):
        """``x (B, T, E)``, ``t`` None or (T,) / (B, T) stamps -> ``(y (B, T, E), weights)``.

        ``memory`` (B, T, E): the source of keys and values (module docstring); None: ``x``.
        ``weights`` (B, H, T, T) when ``need_weights``: the attention ``A`` of the isotropic
        form, its mean over the value features for the tensor form, and the robust weight
        matrix ``W`` for the separable form; else None.
        """
        check_input(x, self.embed_dim)
        z = x if self.complex_input else lift(x)
        zv = self.value(z)
        if memory is None:
            z_mem, mv = z, zv
        else:
            check_input(memory, self.embed_dim, name="memory")
            if memory.shape != x.shape:
                raise ValueError(
                    f"memory must have the shape of x {tuple(x.shape)} (one time axis), "
                    f"found {tuple(memory.shape)}"
                )
            z_mem = memory if self.complex_input else lift(memory)
            mv = self.value(z_mem)
        query_source = zv if self.share_qk_values else z
        key_source = mv if self.share_qk_values else z_mem
        q, k, v = (
            split_complex_heads(u, self.num_heads)
            for u in (self.query(query_source), self.key(key_source), mv)
        )
        dynamics = self.dynamics().scaled(self.step)
        result = self._attend(q, k, v, t, dynamics, self.robust(), need_weights)
        estimate = result.output
        if self.gate == "residual":
            delta = torch.sigmoid(self.raw_delta).view(1, -1, 1, 1)
            own = v if memory is None else split_complex_heads(zv, self.num_heads)
            estimate = (1 - delta) * own + delta * estimate
        out = estimate
        if self.predict:
            out = afa.predict(estimate, dynamics=dynamics, step=1.0)
        if self.gate == "prediction-gate":
            g = torch.sigmoid(self.raw_gate)
            g = torch.cat((g, g), dim=-1)[None, :, None, :]
            out = (1 - g) * estimate + g * out
        y = self.out_proj(merge_complex_heads(out))
        if not self.complex_input:
            y = complex_pairs.split(y)[0]
        weights = result.weights
        if weights is not None and weights.ndim == 5:
            weights = weights.mean(-1)
        return y, weights

    def _attend(self, q, k, v, t, dynamics: Dynamics, robust: Robust, need_weights):
        common = {"t": t, "dynamics": dynamics, "robust": robust, "return_weights": need_weights}
        if self.separable:
            return afa.separable_afa(q, k, v, **common)
        if self.tensor_form:
            return afa.tensor_afa(q, k, v, causal=self.causal, **common)
        return afa.isotropic_afa(
            q,
            k,
            v,
            causal=self.causal,
            block_size=self.block_size,
            backend=self.backend,
            **common,
        )

    # ------------------------------------------------------------------ oracle construction
    @classmethod
    def from_eigen(
        cls,
        S,
        eigenvalues,
        process_var,
        measurement_var,
        *,
        tensor_form: bool = False,
        separable: bool = False,
        dtype=torch.float64,
        **kwargs,
    ) -> AdaptiveFilterAttention:
        """The layer of a known system ``A = S diag(eigenvalues) S^-1`` (seed 000 3.1, 4.2).

        One head on ``E = d`` real features: ``W_v = S^-1``, ``W_p = S``, ``W_q = W_k = I``
        when queries/keys come from the values (``share_qk_values=True``, so ``Zq = Zk =
        S^-1 z``) and ``S^-1`` otherwise; zero biases; decay ``a = -Re(eigenvalues)``,
        ``omega = Im(eigenvalues)``, ``sigma^2 = process_var``, ``eta^2 = measurement_var``
        (the eigenbasis variances: ``Q = S diag(sigma^2) S^H``, ``R = S diag(eta^2) S^H``).
        With ``gate=None``, ``nu = inf`` and ``predict=False`` the output is the causal batch
        MLE of seed 000 2.2; with ``predict=True`` its one-step prediction.

        Parameters
        ----------
        S : (d, d) complex invertible.   eigenvalues : (d,) complex with ``Re < 0``.
        process_var : scalar or (d,) ``>= 0``.   measurement_var : scalar or (d,) ``> 0``.
        tensor_form, separable : per-feature dynamics; the isotropic layer (both False) needs
            one real part and scalar variances.
        dtype : of the parameters (float64 by default, for oracle tests).
        **kwargs : the other constructor arguments (``step``, ``gate``, ``nu``, ``predict``,
            ``share_qk_values``, ``causal``, ...); ``gate`` defaults to None here.
        """
        S = torch.as_tensor(np.array(S, dtype=complex))
        if S.ndim != 2 or S.shape[0] != S.shape[1]:
            raise ValueError(f"S must be a square (d, d) matrix, found {tuple(S.shape)}")
        d = S.shape[0]
        lam = torch.as_tensor(np.array(eigenvalues, dtype=complex))
        if lam.shape != (d,):
            raise ValueError(f"eigenvalues must have shape ({d},), found {tuple(lam.shape)}")
        if (lam.real >= 0).any():
            raise ValueError(
                "eigenvalues must have Re < 0 (decay a = -Re > 0), found max Re "
                f"{lam.real.max().item():.3g}"
            )
        per_feature = tensor_form or separable
        decay = -lam.real
        variances = [
            torch.as_tensor(np.array(x, dtype=float)).expand(d)
            for x in (process_var, measurement_var)
        ]
        if not per_feature:
            for name, values in (
                ("Re(eigenvalues)", decay),
                ("process_var", variances[0]),
                ("measurement_var", variances[1]),
            ):
                if not torch.allclose(values, values[0].expand(d), rtol=1e-12, atol=0):
                    raise ValueError(
                        f"{name} must be equal across modes for the isotropic layer, found "
                        f"{values.tolist()}; use tensor_form=True"
                    )
            decay, variances = decay[:1], [v[:1] for v in variances]
        kwargs.setdefault("gate", None)
        if kwargs.get("process_noise") is False and bool((variances[0] != 0).any()):
            raise ValueError(
                f"process_var must be 0 for a layer with process_noise=False, found "
                f"{variances[0].tolist()}"
            )
        layer = cls(d, 1, tensor_form=tensor_form, separable=separable, dtype=dtype, **kwargs)
        S_inv = torch.linalg.inv(S)
        layer.value.set_complex(S_inv)
        layer.out_proj.set_complex(S)
        qk = torch.eye(d, dtype=S.dtype) if layer.share_qk_values else S_inv
        layer.query.set_complex(qk)
        layer.key.set_complex(qk)
        with torch.no_grad():
            shape = layer.raw_decay.shape
            layer.raw_decay.copy_(inverse_softplus(decay.to(dtype)).view(shape))
            layer.raw_process_var.copy_(inverse_softplus(variances[0].to(dtype)).view(shape))
            layer.raw_measurement_var.copy_(inverse_softplus(variances[1].to(dtype)).view(shape))
            layer.frequencies.copy_(lam.imag.to(dtype).view(1, d))
        return layer


def _complex_features(embed_dim: int, complex_input: bool) -> int:
    """Number of complex features of the embedding."""
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

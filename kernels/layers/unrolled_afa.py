"""Unrolled adaptive filter attention: the recurrent inference form of AFA (seed 000 B.2, Alg. 4).

``x (B, T, E) -> out (B, T, E)``: lift to complex (zero imaginary part), project with ``L_V``
(a :class:`~kernels.layers.complex_linear.ComplexLinear`) into per-head eigen-coordinates,
run the iteratively reweighted recursive filter :func:`kernels.ops.unrolled.unrolled_afa`
per head (``K`` inner iterations per step, ``O(K T E)`` time, ``O(T E)`` memory, no ``(T, T)``
matrix), map back with ``L_P`` and keep the real part (seed 000 4.1, Algorithm 4's last lines).

Parameters per head (the dynamics/noise parameters of Algorithm 1, so that batch-trained values
can be loaded), each positive one through a documented map:

==================  =========================================  ================================
quantity            map from the stored parameter               initial value
==================  =========================================  ================================
decay ``a``         ``softplus(raw_decay)``                     0.1 (eigenvalue ``-a + i w``)
frequencies ``w``   identity, ``(H, E/H)``                      ``10000^{-k/n}``, ``k < n = E/H``
``sigma^2``         ``softplus(raw_process_var)``               0.1
``eta^2``           ``softplus(raw_measurement_var)``           1.0
``nu``              ``softplus(raw_nu)``                        ``nu`` argument (4.0)
temperature         ``softplus(raw_temperature)``               ``temperature`` argument (1.0)
damping ``delta``   ``sigmoid(raw_damping)``                    ``damping`` argument (1.0)
==================  =========================================  ================================

``nu = inf`` and ``delta = 1`` are stored as ``raw = +inf`` (``softplus(inf) = inf``,
``sigmoid(inf) = 1`` exactly); their gradients are then 0, so they stay there under training
(give a finite ``nu`` / ``delta < 1`` to learn them). Algorithm 1 writes the decay as
``alpha^2`` and the residual weight as ``sigmoid(delta)``; Algorithm 4 uses that residual weight
as the damping of the inner update, as here.

Time: the layer's clock is ``step * t`` with ``t`` the given stamps (default ``0, 1, ..., T-1``),
as in :class:`kernels.layers.afa.AdaptiveFilterAttention`; equivalently the dynamics
``(a, omega, sigma^2)`` are multiplied by ``step``. The output is the filtered estimate
(Algorithm 4) or, with ``predict=True``, its one-step prediction ``e^{(-a + i omega) step} x_i``
over one unit of ``t`` (Algorithm 1's output).

:meth:`UnrolledAdaptiveFilterAttention.from_afa` builds the recurrent layer from a batch
:class:`~kernels.layers.afa.AdaptiveFilterAttention` (isotropic form, ``gate`` ``"residual"``
or None): it copies ``L_V``, ``L_P``, the dynamics, ``nu``, the temperature, the step and the
output mode, and maps AFA's residual weight ``sigmoid(delta)`` to the damping, as Algorithm 4
does. AFA's ``L_Q`` and ``L_K`` are not used (Algorithm 4's weight reads the value innovation
only). The two layers then compute different estimators of the same model: the batch layer one
IRLS step over all pairs, this one the robust recursive filter. They agree exactly when the
batch layer is the MLE and the MLE is the filter: ``nu = inf``, no gate, and no process noise
(``tests/kernels/test_unrolled_afa.py``); with process noise the batch MLE discards the
cross-time correlation of the noise and the two differ (`estimators.mle` docstring).

The layer is causal by construction (a filter reads only the past): ``causal=False`` is refused,
and so is ``need_weights=True`` (no attention matrix is formed; the batch AFA layer has one).

Predictive distribution (:meth:`UnrolledAdaptiveFilterAttention.predictive`, ``predict=True``):
the filter carries a variance ``v_i`` per head, so the layer states how sure its prediction
is. The next measurement's eigen-coordinates have variance
``c_i = e^{-2 a step} v_i + sigma^2 step (1 - e^{-2 a step}) / (2 a step) + eta^2`` per mode,
and the real output ``y = Re(L_P w)`` covariance
``Sigma_i = sum_h c_{h,i} Re(L_P,h L_P,h^H)`` (``L_P,h``: the columns of head ``h``). With
``L_V = S^-1``, ``L_P = S`` for a real system in a unitary eigenbasis ``S`` (conjugate
pairs, ``S S^H`` real) and ``nu = inf`` this is the Kalman filter's innovation covariance
``C P^- C^T + R``, so the Gaussian negative log-likelihood of the predictions is the exact
innovations likelihood (`estimators.fit`); ``tests/kernels/test_unrolled_afa.py`` checks it.

Known structure can be fixed instead of learned: ``basis="identity"`` drops ``L_V`` and
``L_P`` (each measurement coordinate is one complex feature with zero imaginary part and the
output is the real part: the coordinates are the eigen-coordinates, as for independent OU
channels), and ``rotation=False`` fixes every frequency at 0 (real eigenvalues, a buffer
rather than a parameter). ``basis="tied"`` learns ``L_V`` and reads out with its inverse,
``L_P = L_V^-1`` (the seed's ``W_v = S^-1``, ``W_p = S``, with ``S`` learned);
``basis="unitary"`` ties them with ``L_V`` unitary (a
:class:`~kernels.layers.complex_linear.UnitaryLinear`, ``L_P = L_V^H``): the family of a
normal system with isotropic noise, whose eigenbasis is unitary, so the layer's noise is
isotropic in the measurement space as well (``Re(L_P L_P^H) = I``). Independent
``L_V`` and ``L_P`` leave the decay unidentified: the product of a feature's read-out and
read-in weights scales its prediction like ``e^{-a}`` does, so a faster decay with a larger
product predicts the same in the steady state; tying them removes that freedom.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from kernels._validation import check_heads, check_input
from kernels.layers.afa import AdaptiveFilterAttention
from kernels.layers.causal import finite_causal
from kernels.layers.complex_linear import ComplexLinear, UnitaryLinear, lift
from kernels.layers.heads import merge_complex_heads, split_complex_heads
from kernels.layers.parameters import inverse_softplus
from kernels.ops.common import complex_pairs
from kernels.ops.common.lags import relaxation
from kernels.ops.common.params import Dynamics, Robust
from kernels.ops.unrolled import unrolled_afa
from kernels.ops.unrolled.params import check_options

BASES = ("learned", "tied", "unitary", "identity")
# Initial frequencies ``omega_k = base^{-k/n}`` (RoPE's, as the batch AFA layer).
_ROPE_BASE = 10000.0


class UnrolledAdaptiveFilterAttention(nn.Module):
    """Recurrent (unrolled) AFA on ``(B, T, E)``, like ``nn.MultiheadAttention(batch_first=True)``.

    Parameters
    ----------
    embed_dim : E, the real input width; each of the ``num_heads`` heads filters ``E / H``
        complex features (``2 E / H`` real-pair entries).
    num_heads : H, dividing E.
    iterations : K >= 1 inner reweighting iterations per time step.
    causal : must be True (a recurrent filter is causal); False raises ValueError.
    nu : initial robust scale ``> 0`` per head (learned); ``math.inf`` gives the Kalman filter.
    temperature : initial ``tau > 0`` of the weight ``w^tau`` per head (learned).
    damping : initial damping ``delta`` in (0, 1] (learned as ``sigmoid``; 1 stays 1).
    weight : ``"student-t"`` (default) or ``"rational"``, see :func:`unrolled_afa`.
    step : the time unit: the clock is ``step * t`` (default ``t_i = i``).
    predict : output the one-step prediction (Algorithm 1) instead of the estimate (Algorithm 4).
    bias : complex biases in ``L_V`` and ``L_P``.
    basis : ``"learned"`` (``L_V``, ``L_P`` are parameters), ``"tied"`` (``L_V`` is, and
        ``L_P = L_V^-1``), ``"unitary"`` (``L_V`` unitary, ``L_P = L_V^H``) or ``"identity"``
        (no projections: the input coordinates are the eigen-coordinates; ``bias`` is then
        ignored).
    rotation : False fixes the frequencies at 0 (real eigenvalues; not a parameter).
    method : ``"auto"`` (chunked attention at ``nu = inf``, the loop otherwise) or ``"loop"``
        (see :func:`unrolled_afa`); an attribute, so it can be switched after construction.
    generator : optional ``torch.Generator`` for the projections' initialisation.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        iterations: int = 1,
        causal: bool = True,
        nu: float = 4.0,
        temperature: float = 1.0,
        damping: float = 1.0,
        weight: str = "student-t",
        step: float = 1.0,
        predict: bool = False,
        bias: bool = True,
        basis: str = "learned",
        rotation: bool = True,
        method: str = "auto",
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        n = check_heads(embed_dim, num_heads)
        if basis not in BASES:
            raise ValueError(f"basis must be one of {BASES}, found {basis!r}")
        if not isinstance(rotation, bool):
            raise TypeError(f"rotation must be a bool, found {rotation!r}")
        if causal is not True:
            raise ValueError(
                "causal must be True: unrolled AFA is a recurrent filter, causal by construction "
                f"(use the batch AFA layer for non-causal attention), found causal={causal!r}"
            )
        check_options(iterations, weight, method)
        for name, value in (("nu", nu), ("temperature", temperature), ("step", step)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{name} must be a number > 0, found {value!r}")
        if math.isinf(temperature) or math.isinf(step):
            raise ValueError(f"temperature and step must be finite, found {temperature}, {step}")
        if not isinstance(damping, (int, float)) or not 0 < damping <= 1:
            raise ValueError(f"damping must be in (0, 1], found {damping!r}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.iterations = iterations
        self.weight = weight
        self.step = float(step)
        self.predict = bool(predict)
        self.basis = basis
        self.rotation = rotation
        self.method = method
        factory = {"device": device, "dtype": dtype}

        def linear(imaginary_bias=True) -> ComplexLinear:
            return ComplexLinear(
                embed_dim,
                embed_dim,
                bias=bias,
                imaginary_bias=imaginary_bias,
                generator=generator,
                **factory,
            )

        if basis == "unitary":
            self.value_proj = UnitaryLinear(embed_dim, bias=bias, generator=generator, **factory)
        else:
            self.value_proj = None if basis == "identity" else linear()
        # only Re L_P of the output is returned; "tied" reads out with L_V^-1 instead
        self.out_proj = linear(imaginary_bias=False) if basis == "learned" else None

        def per_head() -> nn.Parameter:
            return nn.Parameter(torch.zeros(num_heads, **factory))

        self.raw_decay = per_head()
        if rotation:
            self.frequencies = nn.Parameter(torch.zeros(num_heads, n, **factory))
        else:
            self.register_buffer("frequencies", torch.zeros(num_heads, n, **factory))
        self.raw_process_var = per_head()
        self.raw_measurement_var = per_head()
        self.raw_nu = per_head()
        self.raw_temperature = per_head()
        self.raw_damping = per_head()
        rope = _ROPE_BASE ** (-torch.arange(n, dtype=torch.float64) / n)
        self.set_parameters(
            decay=0.1,
            frequencies=rope if rotation else None,
            process_var=0.1,
            measurement_var=1.0,
            nu=nu,
            temperature=temperature,
            damping=damping,
        )

    # --- the positive parameters -------------------------------------------------------------

    @property
    def decay(self) -> torch.Tensor:
        """``a = softplus(raw_decay)`` (H,)."""
        return F.softplus(self.raw_decay)

    @property
    def process_var(self) -> torch.Tensor:
        """``sigma^2 = softplus(raw_process_var)`` (H,)."""
        return F.softplus(self.raw_process_var)

    @property
    def measurement_var(self) -> torch.Tensor:
        """``eta^2 = softplus(raw_measurement_var)`` (H,)."""
        return F.softplus(self.raw_measurement_var)

    @property
    def nu(self) -> torch.Tensor:
        """``nu = softplus(raw_nu)`` (H,); ``inf`` where ``raw_nu = inf``."""
        return F.softplus(self.raw_nu)

    @property
    def temperature(self) -> torch.Tensor:
        """``tau = softplus(raw_temperature)`` (H,)."""
        return F.softplus(self.raw_temperature)

    @property
    def damping(self) -> torch.Tensor:
        """``delta = sigmoid(raw_damping)`` (H,); exactly 1 where ``raw_damping = inf``."""
        return torch.sigmoid(self.raw_damping)

    def dynamics(self) -> Dynamics:
        """The dynamics in natural units (unscaled by ``step``): `decay`, `frequencies`,
        `process_var`, `measurement_var`, each per head."""
        return Dynamics(self.decay, self.frequencies, self.process_var, self.measurement_var)

    def robust(self) -> Robust:
        """The robust weighting: `nu` and `temperature` per head."""
        return Robust(nu=self.nu, temperature=self.temperature)

    @torch.no_grad()
    def set_parameters(
        self,
        *,
        decay=None,
        frequencies=None,
        process_var=None,
        measurement_var=None,
        nu=None,
        temperature=None,
        damping=None,
    ) -> None:
        """Load dynamics/noise values (scalars or ``(H,)``; frequencies ``(H, E/H)`` or
        ``(E/H,)``) through the inverse maps; ``None`` leaves a parameter as it is.

        Use it (with ``value_proj.set_complex(S^-1)``, ``out_proj.set_complex(S)``) to run the
        layer with a known system (in units of the clock ``step * t``).
        """
        positive = (
            ("decay", decay, self.raw_decay, False),
            ("process_var", process_var, self.raw_process_var, False),
            ("measurement_var", measurement_var, self.raw_measurement_var, True),
            ("nu", nu, self.raw_nu, True),
            ("temperature", temperature, self.raw_temperature, True),
        )
        for name, value, raw, strict in positive:
            if value is not None:
                value = self._per_head(name, value)
                bad = ~(value > 0) if strict else ~(value >= 0)  # also catches NaN
                if bool(bad.any()):
                    bound = "> 0" if strict else ">= 0"
                    raise ValueError(f"{name} must be {bound}, found {value[bad][0].item()}")
                raw.copy_(inverse_softplus(value))
        if frequencies is not None:
            if not self.rotation:
                raise ValueError("frequencies are fixed at 0 in a layer with rotation=False")
            omega = torch.as_tensor(frequencies, dtype=torch.float64)
            try:
                self.frequencies.copy_(omega.expand(self.frequencies.shape))
            except RuntimeError:
                raise ValueError(
                    f"frequencies must have shape {tuple(self.frequencies.shape)} or "
                    f"({self.frequencies.shape[1]},), found {tuple(omega.shape)}"
                ) from None
        if damping is not None:
            delta = self._per_head("damping", damping)
            bad = ~((delta > 0) & (delta <= 1))
            if bool(bad.any()):
                raise ValueError(f"damping must be in (0, 1], found {delta[bad][0].item()}")
            self.raw_damping.copy_(torch.logit(delta))

    def _per_head(self, name: str, value) -> torch.Tensor:
        value = torch.as_tensor(value, dtype=torch.float64).detach().cpu()
        if value.shape not in ((), (self.num_heads,)):
            raise ValueError(
                f"{name} must be a scalar or have shape ({self.num_heads},), "
                f"found {tuple(value.shape)}"
            )
        return value.expand(self.num_heads)

    # --- forward ------------------------------------------------------------------------------

    @finite_causal
    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``x (B, T, E)``, optional time stamps ``t`` ((T,) or (B, T), strictly increasing;
        default ``0, 1, ..., T-1``; the clock is ``step * t``) -> ``(out (B, T, E), None)``."""
        if need_weights:
            raise ValueError(
                "need_weights=True is not available: unrolled AFA forms no (T, T) attention "
                "matrix (use the batch AFA layer to inspect weights)"
            )
        out, _ = self._filter(x, t)
        return self._read_out(out), None

    def predictive(self, x: torch.Tensor, t=None) -> tuple[torch.Tensor, torch.Tensor]:
        """The one-step predictive law of the next measurement (module docstring).

        ``x (B, T, E)``, ``t`` as in :meth:`forward` -> ``(mean (B, T, E), cov (B, T, E, E))``:
        row ``i`` is the law of the measurement one unit of ``t`` after ``t_i`` given
        ``x_0..x_i`` (``mean`` is :meth:`forward`'s output). Needs ``predict=True``.
        """
        if not self.predict:
            raise ValueError(
                "predictive needs a layer built with predict=True (its output is then the "
                "one-step prediction whose law this returns)"
            )
        out, result = self._filter(x, t)
        decay, q, r = self.decay * self.step, self.process_var * self.step, self.measurement_var
        variance = 1 / result.precision  # (B, H, T), the filtered variance v_i
        shrink2 = torch.exp(-2 * decay).view(1, -1, 1)
        added = (q * relaxation(2 * decay)).view(1, -1, 1)
        c = torch.addcmul(added, shrink2, variance) + r.view(1, -1, 1)
        n = self.embed_dim // self.num_heads
        weight = self._read_out_weight()
        if weight is None:  # identity basis: one coordinate per complex feature
            cov = torch.diag_embed(c.repeat_interleave(n, dim=1).transpose(1, 2))
        else:
            heads = weight.view(self.embed_dim, self.num_heads, n).permute(1, 0, 2)
            outer = torch.einsum("hen,hfn->hef", heads, heads.conj()).real  # (H, E, E)
            cov = torch.einsum("bht,hef->btef", c, outer)
        return self._read_out(out, weight), cov

    def _filter(self, x: torch.Tensor, t):
        """The recursive filter on the projected input: (output (B, H, T, 2n), its result)."""
        check_input(x, self.embed_dim)
        values = lift(x) if self.value_proj is None else self.value_proj(lift(x))
        values = split_complex_heads(values, self.num_heads)
        dynamics = self.dynamics().scaled(self.step)
        decay, frequencies = dynamics.decay, dynamics.frequencies
        result = unrolled_afa(
            values,
            t=t,
            dynamics=dynamics,
            robust=self.robust(),
            iterations=self.iterations,
            damping=self.damping,
            weight=self.weight,
            method=self.method,
        )
        out = result.output
        if self.predict:  # e^{(-a + i omega) step} x over one unit of t
            shrink = torch.exp(-decay).view(1, -1, 1, 1)
            angle = frequencies.view(1, self.num_heads, 1, -1)
            out = complex_pairs.rotate(out, torch.cos(angle), torch.sin(angle)) * shrink
        return out, result

    def _read_out_weight(self) -> torch.Tensor | None:
        """The complex ``L_P`` (E, E); None for the identity basis."""
        if self.out_proj is not None:
            return self.out_proj.complex_weight()
        if self.value_proj is None:
            return None
        read_in = self.value_proj.complex_weight()
        return read_in.mH if self.basis == "unitary" else torch.linalg.inv(read_in)

    def _read_out(self, out: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """``Re(L_P w)`` of the per-head features ``(B, H, T, 2n)`` -> ``(B, T, E)``;
        ``weight``: `_read_out_weight` when the caller has it already (tied basis)."""
        merged = merge_complex_heads(out)
        if self.out_proj is not None:
            return complex_pairs.split(self.out_proj(merged))[0]
        if self.value_proj is None:
            return complex_pairs.split(merged)[0]
        # tied or unitary: Re(L_V^-1 (w - b_V)), the inverse of the affine read-in
        proj = self.value_proj
        w = torch.complex(*complex_pairs.split(merged))
        if proj.bias_real is not None:
            w = w - torch.complex(proj.bias_real, proj.bias_imag)
        weight = self._read_out_weight() if weight is None else weight
        return (w @ weight.transpose(0, 1)).real

    # --- from a batch-trained AFA layer -------------------------------------------------------

    @classmethod
    def from_afa(
        cls, afa_module: AdaptiveFilterAttention, *, iterations: int = 1, weight: str = "rational"
    ) -> UnrolledAdaptiveFilterAttention:
        """The recurrent layer with the parameters of a batch AFA layer (seed 000 B.2, Alg. 4).

        Copies ``L_V`` (AFA's ``value``), ``L_P`` (``out_proj``), decay, frequencies,
        ``sigma^2``, ``eta^2``, temperature, ``nu`` (``inf`` when AFA does not reweight), the
        step (its current value when learned) and ``predict``; AFA's residual weight
        ``sigmoid(delta)`` becomes the damping (``gate=None``: damping 1). ``weight`` defaults
        to ``"rational"``, the form of AFA's weight. Dtype and device follow ``afa_module``.

        Raises
        ------
        TypeError if ``afa_module`` is not an ``AdaptiveFilterAttention``; ValueError for what
        the recurrent form cannot represent: per-feature dynamics (``tensor_form`` or
        ``separable``), ``complex_input=True``, the prediction gate, a non-causal layer.
        """
        if not isinstance(afa_module, AdaptiveFilterAttention):
            raise TypeError(
                "afa_module must be a kernels.layers.afa.AdaptiveFilterAttention, found "
                f"{type(afa_module).__name__}"
            )
        unsupported = (
            (afa_module.tensor_form or afa_module.separable, "per-feature dynamics"),
            (afa_module.complex_input, "complex_input=True"),
            (afa_module.gate == "prediction-gate", "gate='prediction-gate'"),
            (not afa_module.causal, "causal=False"),
        )
        for bad, what in unsupported:
            if bad:
                raise ValueError(
                    f"from_afa needs an isotropic, causal AFA layer on real input with gate "
                    f"'residual' or None; found {what}"
                )
        ref = afa_module.raw_decay
        step = afa_module.step
        step = float(step.detach()) if isinstance(step, torch.Tensor) else float(step)
        dynamics, robust = afa_module.dynamics(), afa_module.robust()
        layer = cls(
            afa_module.embed_dim,
            afa_module.num_heads,
            iterations=iterations,
            weight=weight,
            step=step,
            predict=afa_module.predict,
            bias=afa_module.value.bias_real is not None,
            device=ref.device,
            dtype=ref.dtype,
        )
        layer.value_proj.load_state_dict(afa_module.value.state_dict())
        layer.out_proj.load_state_dict(afa_module.out_proj.state_dict())
        delta = 1.0 if afa_module.gate is None else torch.sigmoid(afa_module.raw_delta.detach())
        nu = robust.nu
        layer.set_parameters(
            decay=dynamics.decay.detach(),
            frequencies=dynamics.frequencies.detach(),
            process_var=dynamics.process_var.detach(),
            measurement_var=dynamics.measurement_var.detach(),
            nu=nu.detach() if isinstance(nu, torch.Tensor) else nu,
            temperature=robust.temperature.detach(),
            damping=delta,
        )
        return layer

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"iterations={self.iterations}, weight={self.weight!r}, step={self.step}, "
            f"predict={self.predict}, basis={self.basis!r}, rotation={self.rotation}"
        )


__all__ = ["BASES", "UnrolledAdaptiveFilterAttention"]

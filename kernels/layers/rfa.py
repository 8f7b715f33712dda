"""Multi-head Robust Filter Attention (RFA, SC-RFA) on ``(B, T, E)`` (seed 004 D.1-D.3, E.1).

Real-valued implementation of seed 004 D.1: the query, key and value maps are single real
``nn.Linear(E, 2 H n)`` layers, ``L^{R->C}(x) = [W_r; W_i] x + [b_r; b_i]``, whose output is
read as ``[all real parts | all imaginary parts]`` of ``H n`` complex features (``n`` per head,
default ``E / H``, so the maps are the paper's ``d -> 2d``); the output map is
``nn.Linear(2 H n, E)``, ``L^{C->R}(y) = [W_r, -W_i] y + b_r``, the real part of a complex
linear map. Each head runs `kernels.ops.rfa.rfa_attention` with its own dynamics: the layer's
`RobustFilterAttention.dynamics` (a `Dynamics`), `RobustFilterAttention.robust` (a `Robust`) and
`RobustFilterAttention.anchor_var`, on the ``backend`` and tile ``block_size`` it was built with.

Parameters per head and their maps (``softplus(x) = log(1 + e^x)``):

* decay ``mu``: a fixed buffer (the public code's default, seed 004 digest 1.14) or, with
  ``learn_decay``, ``mu = softplus(raw)``.
* frequencies ``omega``: fixed (default) or learned, ``n/2`` distinct per head stacked as
  ``[omega, -omega]`` (conjugate pairs, D.1) unless ``conjugate_pairs=False``.
* ``sigma^2`` (or ``sigma~^2`` with ``steady_state``) ``= softplus(raw)``; ``eta^2, gamma^2 =
  softplus(raw) + variance_floor`` (the floor keeps the lag-0 variance ``eta^2 + gamma^2``
  positive when softplus underflows; ``mu = 0`` and ``sigma^2 = 0`` are valid and get none);
  ``anchor_noise=False`` fixes ``gamma^2 = 0``.
* ``nu = 2 + n softplus(raw)`` (the public code's map: ``nu > 2``, scaled with the head
  size), initialised at ``4 n`` (D.2); ``nu=math.inf`` fixes the limit instead.
* inverse temperature ``tau_s = softplus(raw)``, initialised at 1.

Initialisation (D.2): decays ``mu_h = b max(omega_h)`` of the spectral coupling
(`kernels.ops.common.positional.spectral_coupling`, ``b = damping``, 2 of 8 heads at 0); with
``spectral_coupling`` the heads also get the coupled frequency bands (SC-RFA, M2), otherwise
every head has RoPE's full bank (RFA, M1). Steady-state process variance ``sigma~^2 = 0.1`` in
every head (``sigma^2 = 2 mu sigma~^2``, plus ``1e-4`` so zero-decay heads stay representable
by softplus), ``eta^2 = gamma^2 = 1`` (integrative regime, ``eta^2 > sigma~^2``), ``nu = 4n``,
``tau_s = 1``. Complex weights ``W = W_r + i W_i`` with ``W_r, W_i ~ N(0, s^2)``, ``s^2 = 1 /
(d_in + d_out)`` (complex counts), i.e. Rayleigh magnitudes and uniform phases; the output map
is scaled by ``1/sqrt(2)``; biases 0.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from kernels import _validation
from kernels.backend import BACKENDS
from kernels.layers import heads as heads_mod
from kernels.layers.causal import finite_causal
from kernels.layers.parameters import inverse_softplus, seeded_linear
from kernels.ops import rfa
from kernels.ops.common import positional
from kernels.ops.common.attention import head_parameter
from kernels.ops.common.params import Dynamics, Robust

# Initial steady-state process variance, measurement and anchor variances (seed 004 D.2 and
# the public code's targets): integrative start, eta^2 > sigma~^2.
_INIT_STEADY_VAR = 0.1
_INIT_MEASUREMENT_VAR = 1.0
_INIT_ANCHOR_VAR = 1.0
# Added to the initial sigma^2 (and to a learned decay) so heads with mu = 0 have a finite raw
# parameter under the softplus map.
_INIT_OFFSET = 1e-4
# Lower bound of nu in the map nu = 2 + n softplus(raw): the Student-t variance exists.
_NU_MIN = 2.0


class RobustFilterAttention(nn.Module):
    """Multi-head isotropic RFA / SC-RFA (seed 004 Algorithm 1) on ``(B, T, E)``.

    Parameters
    ----------
    embed_dim, num_heads : as in ``nn.MultiheadAttention``.
    head_dim : complex features per head ``n`` (real size ``2n``); default ``embed_dim /
        num_heads``. Even when ``conjugate_pairs``.
    causal : mask future keys (default True).
    spectral_coupling : SC-RFA (M2) frequencies and decays; else RFA (M1).
    damping, zero_decay_heads, base : the coupling's ``b``, zero-decay head count (default
        ``int(0.25 H)``) and frequency base.
    decay : per-head decays (scalar or (H,)) replacing the coupling's spread.
    conjugate_pairs : frequencies in ``(omega, -omega)`` pairs (D.1).
    learn_decay, learn_frequencies : make ``mu`` / ``omega`` trainable.
    steady_state : parameterise the process noise by ``sigma~^2`` (Algorithm 1) instead of
        ``sigma^2`` (D.2 Note; its ``mu -> 0`` limit is Brownian, the ALiBi limit).
    anchor_noise : learn the query-side ``gamma^2`` (else 0, seed 000's model).
    variance_floor : added to ``eta^2`` and ``gamma^2``.
    nu : initial ``nu`` (> 2; default ``4 n``) or ``math.inf`` for the fixed limit.
    temperature : initial inverse temperature ``tau_s``.
    weight_kernel, precision_prior, precision_gate, rotate_qk, rotate_values, unitary_limit :
        the ablations M2.1-M2.6 of `kernels.ops.rfa`.
    bias : projection biases (the drift / measurement-bias terms of seed 004 C.2).
    block_size : query rows per block (the fused kernel's tile, a power of two >= 16 there);
        None: the functional's default.
    backend : ``"auto"``, ``"torch"`` or ``"triton"``, passed to `kernels.ops.rfa.rfa_attention`.
    generator, device, dtype : initialisation RNG and factory options.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        causal: bool = True,
        spectral_coupling: bool = False,
        damping: float = 0.05,
        zero_decay_heads: int | None = None,
        base: float = 10000.0,
        decay=None,
        conjugate_pairs: bool = True,
        learn_decay: bool = False,
        learn_frequencies: bool = False,
        steady_state: bool = False,
        anchor_noise: bool = True,
        variance_floor: float = 1e-6,
        nu: float | None = None,
        temperature: float = 1.0,
        weight_kernel: str = "student-t",
        precision_prior: bool = True,
        precision_gate: bool = True,
        rotate_qk: bool = True,
        rotate_values: bool = True,
        unitary_limit: bool = False,
        bias: bool = True,
        block_size: int | None = None,
        backend: str = "auto",
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, found {backend!r}")
        default = _validation.check_heads(embed_dim, num_heads)
        n = default if head_dim is None else head_dim
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"head_dim must be a positive integer, found {head_dim!r}")
        if conjugate_pairs and n % 2:
            raise ValueError(
                f"head_dim (complex features per head) must be even for conjugate pairs, found {n}"
            )
        if weight_kernel not in rfa.WEIGHT_KERNELS:
            raise ValueError(
                f"weight_kernel must be one of {rfa.WEIGHT_KERNELS}, found {weight_kernel!r}"
            )
        if not variance_floor >= 0:
            raise ValueError(f"variance_floor must be >= 0, found {variance_floor!r}")
        if not _validation.check_real("temperature", temperature) > 0:
            raise ValueError(f"temperature must be > 0, found {temperature!r}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = n
        self.causal = causal
        self.conjugate_pairs = conjugate_pairs
        self.steady_state = steady_state
        self.variance_floor = float(variance_floor)
        self.block_size = block_size
        self.backend = backend
        self.options = {
            "weight_kernel": weight_kernel,
            "precision_prior": precision_prior,
            "precision_gate": precision_gate,
            "rotate_qk": rotate_qk,
            "rotate_values": rotate_values,
            "unitary_limit": unitary_limit,
        }
        factory = {"device": device, "dtype": dtype or torch.get_default_dtype()}
        wide = num_heads * n
        self.q_proj = self._complex_in(embed_dim, wide, bias, generator, factory)
        self.k_proj = self._complex_in(embed_dim, wide, bias, generator, factory)
        self.v_proj = self._complex_in(embed_dim, wide, bias, generator, factory)
        self.out_proj = self._complex_out(wide, embed_dim, bias, generator, factory)

        spectrum = positional.spectral_coupling(
            num_heads,
            n,
            damping=damping,
            zero_decay_heads=zero_decay_heads,
            base=base,
            conjugate_pairs=conjugate_pairs,
            dtype=torch.float64,
        )
        distinct = n // 2 if conjugate_pairs else n
        if spectral_coupling:
            omega = spectrum.frequencies[:, :distinct]
        else:
            omega = positional.rope_frequencies(distinct, base=base, dtype=torch.float64)
            omega = omega.expand(num_heads, distinct)
        mu = spectrum.decay
        if decay is not None:
            like = torch.empty(0, dtype=torch.float64)
            mu = head_parameter("decay", decay, num_heads, like).flatten()
        self._store("frequencies", omega.clone(), learn_frequencies, factory)
        self.learn_decay = learn_decay
        raw_mu = inverse_softplus(mu + _INIT_OFFSET) if learn_decay else mu.clone()
        self._store("decay_param", raw_mu, learn_decay, factory)

        ones = torch.ones(num_heads, dtype=torch.float64)
        process = _INIT_STEADY_VAR * ones if steady_state else 2 * mu * _INIT_STEADY_VAR
        self.raw_process_var = nn.Parameter(inverse_softplus(process + _INIT_OFFSET).to(**factory))
        self.raw_measurement_var = nn.Parameter(
            inverse_softplus(_INIT_MEASUREMENT_VAR * ones).to(**factory)
        )
        if anchor_noise:
            self.raw_anchor_var = nn.Parameter(
                inverse_softplus(_INIT_ANCHOR_VAR * ones).to(**factory)
            )
        else:
            self.register_parameter("raw_anchor_var", None)
        if nu is None:
            nu = 4.0 * n
        if isinstance(nu, bool) or not isinstance(nu, (int, float)) or not nu > _NU_MIN:
            raise ValueError(f"nu must be a number > {_NU_MIN} (or math.inf), found {nu!r}")
        if math.isinf(nu):
            self.register_parameter("raw_nu", None)
        else:
            self.raw_nu = nn.Parameter(inverse_softplus((nu - _NU_MIN) / n * ones).to(**factory))
        self.raw_temperature = nn.Parameter(inverse_softplus(temperature * ones).to(**factory))

    # ---- construction helpers ------------------------------------------------------------

    @staticmethod
    def _complex_in(d_in: int, d_out: int, bias: bool, generator, factory) -> nn.Linear:
        """``R^{d_in} -> C^{d_out}`` as ``nn.Linear(d_in, 2 d_out)`` (rows ``[W_r; W_i]``)."""
        std = math.sqrt(1.0 / (d_in + d_out))
        return seeded_linear(d_in, 2 * d_out, std=std, bias=bias, generator=generator, **factory)

    @staticmethod
    def _complex_out(d_in: int, d_out: int, bias: bool, generator, factory) -> nn.Linear:
        """``C^{d_in} -> R^{d_out}`` as ``nn.Linear(2 d_in, d_out)`` (columns ``[W_r, -W_i]``)."""
        std = math.sqrt(1.0 / (d_in + d_out)) / math.sqrt(2.0)
        return seeded_linear(2 * d_in, d_out, std=std, bias=bias, generator=generator, **factory)

    def _store(self, name: str, value: torch.Tensor, learn: bool, factory) -> None:
        value = value.to(**factory)
        if learn:
            setattr(self, name, nn.Parameter(value))
        else:
            self.register_buffer(name, value)

    # ---- parameters -------------------------------------------------------------------------

    def dynamics(self) -> Dynamics:
        """The effective per-head dynamics passed to `rfa_attention`: ``decay`` (H,),
        ``frequencies`` (H, n) (conjugate pairs stacked), ``process_var`` (``sigma^2``, or
        ``sigma~^2`` with ``steady_state``), ``measurement_var`` (H,)."""
        decay = F.softplus(self.decay_param) if self.learn_decay else self.decay_param
        omega = self.frequencies
        if self.conjugate_pairs:
            omega = positional.conjugate_frequencies(omega)
        return Dynamics(
            decay=decay,
            frequencies=omega,
            process_var=F.softplus(self.raw_process_var),
            measurement_var=F.softplus(self.raw_measurement_var) + self.variance_floor,
        )

    def robust(self) -> Robust:
        """``nu`` (H,) or ``math.inf`` and the inverse temperature ``tau_s`` (H,)."""
        nu = math.inf
        if self.raw_nu is not None:
            nu = _NU_MIN + self.head_dim * F.softplus(self.raw_nu)
        return Robust(nu=nu, temperature=F.softplus(self.raw_temperature))

    @property
    def anchor_var(self):
        """The query-side (anchor) variance ``gamma^2`` (H,), or 0 without ``anchor_noise``."""
        if self.raw_anchor_var is None:
            return 0.0
        return F.softplus(self.raw_anchor_var) + self.variance_floor

    @torch.no_grad()
    def load_dynamics(
        self,
        *,
        decay=None,
        frequencies=None,
        process_var=None,
        measurement_var=None,
        anchor_var=None,
        nu=None,
        temperature=None,
    ) -> None:
        """Set the per-head parameters from their values (scalars or (H,); inverse maps).

        ``frequencies``: (H, n/2) distinct values with conjugate pairs, else (H, n).
        ``measurement_var``/``anchor_var`` must exceed ``variance_floor``; ``nu`` must exceed 2
        and needs a layer built with finite ``nu``; ``anchor_var`` needs ``anchor_noise``.
        """
        H = self.num_heads

        def heads(name, value, offset=0.0, scale=1.0):
            like = torch.empty(0, dtype=torch.float64)
            out = (torch.as_tensor(value, dtype=torch.float64) - offset) / scale
            if not (out > 0).all():
                raise ValueError(f"{name} must exceed {offset:g}, found {value!r}")
            return head_parameter(name, out, H, like).flatten()

        if decay is not None:
            like = torch.empty(0, dtype=torch.float64)
            mu = head_parameter("decay", decay, H, like).flatten()
            raw = inverse_softplus(mu) if self.learn_decay else mu
            self.decay_param.copy_(raw)
        if frequencies is not None:
            freq = torch.as_tensor(frequencies, dtype=self.frequencies.dtype)
            if freq.shape != self.frequencies.shape:
                raise ValueError(
                    f"frequencies must have shape {tuple(self.frequencies.shape)}, found "
                    f"{tuple(freq.shape)}"
                )
            self.frequencies.copy_(freq)
        if process_var is not None:
            self.raw_process_var.copy_(inverse_softplus(heads("process_var", process_var)))
        if measurement_var is not None:
            value = heads("measurement_var", measurement_var, self.variance_floor)
            self.raw_measurement_var.copy_(inverse_softplus(value))
        if anchor_var is not None:
            if self.raw_anchor_var is None:
                raise ValueError("anchor_var given but the layer was built with anchor_noise=False")
            value = heads("anchor_var", anchor_var, self.variance_floor)
            self.raw_anchor_var.copy_(inverse_softplus(value))
        if nu is not None:
            if self.raw_nu is None:
                raise ValueError("nu given but the layer was built with nu = inf")
            value = heads("nu", nu, _NU_MIN, self.head_dim)
            self.raw_nu.copy_(inverse_softplus(value))
        if temperature is not None:
            self.raw_temperature.copy_(inverse_softplus(heads("temperature", temperature)))

    @torch.no_grad()
    def set_complex_weights(self, *, query=None, key=None, value=None, output=None) -> None:
        """Load complex projection matrices, e.g. ``S^-1`` and ``S`` (seed 004's oracle setting).

        ``query``, ``key``, ``value``: complex ``(H n, E)`` (row ``h n + k`` is feature ``k`` of
        head ``h``); ``output``: complex ``(E, H n)``, applied as ``Re(W y)``. Biases are kept.
        """
        wide = self.num_heads * self.head_dim
        for name, layer, weight in (
            ("query", self.q_proj, query),
            ("key", self.k_proj, key),
            ("value", self.v_proj, value),
        ):
            if weight is None:
                continue
            if tuple(weight.shape) != (wide, self.embed_dim):
                raise ValueError(
                    f"{name} must have shape ({wide}, {self.embed_dim}), "
                    f"found {tuple(weight.shape)}"
                )
            layer.weight.copy_(torch.cat((weight.real, weight.imag), dim=0))
        if output is not None:
            if tuple(output.shape) != (self.embed_dim, wide):
                raise ValueError(
                    f"output must have shape ({self.embed_dim}, {wide}), found "
                    f"{tuple(output.shape)}"
                )
            self.out_proj.weight.copy_(torch.cat((output.real, -output.imag), dim=1))

    # ---- forward -----------------------------------------------------------------------------

    @finite_causal
    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``x (B, T, E)``, ``t (T,)/(B, T)`` -> ``(out (B, T, E), weights (B, H, T, T) or None)``.

        ``weights`` are the decayed attention ``A = A^ * E`` of each head.
        """
        _validation.check_input(x, self.embed_dim)
        H = self.num_heads
        q = heads_mod.split_complex_heads(self.q_proj(x), H)
        k = heads_mod.split_complex_heads(self.k_proj(x), H)
        v = heads_mod.split_complex_heads(self.v_proj(x), H)
        result = rfa.rfa_attention(
            q,
            k,
            v,
            t=t,
            dynamics=self.dynamics(),
            robust=self.robust(),
            anchor_var=self.anchor_var,
            causal=self.causal,
            steady_state=self.steady_state,
            return_weights=need_weights,
            block_size=self.block_size,
            backend=self.backend,
            **self.options,
        )
        out = self.out_proj(heads_mod.merge_complex_heads(result.output))
        return out, result.weights

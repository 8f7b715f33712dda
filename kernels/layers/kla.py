"""Kalman Linear Attention layer on ``(B, T, E)`` (seed 001 Alg. 1, App. A; digest 1.4, 1.15, 2.1).

Each of the ``E`` channels carries ``N`` state slots, every (slot n, channel d) pair an independent
scalar Kalman filter (eqs. (22)-(23)) of a zero-mean OU prior. Per token, one input projection
gives

* keys ``k_t`` and queries ``q_t`` (N per token), L2-normalised over the slots ("QK-norm",
  Fig. 7 caption; a floor of 1e-6 on the norm keeps the map differentiable at 0);
* values ``v_t`` (E per token) and value precisions ``Lambda^v_t = 1 / (softplus(l_t) + 1e-4)``
  (E per token; the authors' map, digest 1.3: the floor 1e-4 bounds the precision by 1e4).

The prior has learned ``a, p, Delta`` of shape (N, E), each ``softplus(raw)``: ``a`` initialised
to 1, ``p`` to 0.01 (seed 001 G.6), ``Delta`` log-uniform in [1e-3, 1e-1] (Mamba-style, digest
1.2); ``(a_bar, p_bar)`` from eq. (8) with the paper's ``p^2`` or the code's ``p``
(``p_convention``), or ``p_bar = 0`` with ``process_noise=False`` (the p = 0 ablation of
Table 6). Time stamps ``t`` scale the step: token i advances the prior by
``Delta (t_i - t_{i-1})``, the first token by ``Delta`` (default ``t_i = i``: every step
``Delta``). The readout is ``y_t[d] = sum_n q_t[n] mu_t[n, d]`` with variance
``sum_n q_t[n]^2 / lam_t[n, d]`` (Alg. 1), then an output projection E -> E. The filter starts
from ``lam_0 = 1, eta_0 = 0`` (the authors' code; the paper never states it). The scan is
`kernels.ops.kla.kla_scan`: ``backend`` picks its torch form or its chunked Triton scan
(`kernels.backend.use_triton`); the decoding `step` is always torch.

``forward(x, t, need_weights=True)`` also returns the equivalent attention matrix (App. E.4,
`attention_weights`): (B, E, T, T), lower triangular, one (T, T) matrix per channel, with
``y = weights @ values`` exactly.

The layer is causal by construction (a filter); the Mamba-style block around it (causal
convolution, gating, skip) is not part of this layer.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from kernels._validation import (
    check_decay_factor,
    check_input,
    check_positive,
    check_state,
    check_times,
)
from kernels.backend import BACKENDS
from kernels.layers.parameters import inverse_softplus, seeded_linear
from kernels.ops.kla import (
    P_CONVENTIONS,
    SCAN_METHODS,
    KLAState,
    kla_attention_matrix,
    kla_scan,
    kla_step,
    ou_prior,
)

# Floor of the value variance softplus(l) + floor (the authors' map): Lambda^v <= 1e4.
VALUE_VARIANCE_FLOOR = 1e-4
# Floor of the key/query norm in QK-norm: differentiable at 0, no division by 0.
_NORM_FLOOR = 1e-6
_INIT_DECAY = 1.0
_INIT_DIFFUSION = 0.01
_INIT_STEP_RANGE = (1e-3, 1e-1)


def _l2_normalise(x: torch.Tensor) -> torch.Tensor:
    return x / (x * x).sum(-1, keepdim=True).clamp_min(_NORM_FLOOR**2).sqrt()


class KalmanLinearAttention(nn.Module):
    """KLA mixer: token-dependent Kalman filtering as O(log T)-depth scans (seed 001).

    Parameters
    ----------
    embed_dim : E, the channels (expansion factor 1, as in the paper's experiments).
    num_slots : N state slots per channel (the paper's ``d_state``, default 16).
    p_convention : ``"paper"`` (``p_bar`` carries ``p^2``, eq. (8)) or ``"code"`` (``p``).
    process_noise : False gives ``p_bar = 0`` (the p = 0 ablation; no ``p`` parameter).
    method : ``"parallel"``, ``"sequential"`` or another of `kernels.ops.kla.SCAN_METHODS` (see
        `kernels.ops.kla.kla_scan`); ``"chunked"`` is forward-only (inference under
        ``torch.no_grad``): it raises when the parameters require gradients.
    backend : ``"auto"`` (the chunked Triton scan for CUDA tensors in float32, bfloat16 or
        float16 with ``method="parallel"``, torch otherwise), ``"torch"`` or ``"triton"``
        (`kernels.backend.use_triton`); passed to `kernels.ops.kla.kla_scan` at every forward.
    generator, device, dtype : initialisation RNG (no global RNG when given) and factory options.
    """

    def __init__(
        self,
        embed_dim: int,
        num_slots: int = 16,
        *,
        p_convention: str = "paper",
        process_noise: bool = True,
        method: str = "parallel",
        backend: str = "auto",
        generator: torch.Generator | None = None,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        for name, value in (("embed_dim", embed_dim), ("num_slots", num_slots)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, found {value!r}")
        if p_convention not in P_CONVENTIONS:
            raise ValueError(f"p_convention must be one of {P_CONVENTIONS}, found {p_convention!r}")
        if method not in SCAN_METHODS:
            raise ValueError(f"method must be one of {SCAN_METHODS}, found {method!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, found {backend!r}")
        self.embed_dim, self.num_slots = embed_dim, num_slots
        self.p_convention, self.method, self.backend = p_convention, method, backend
        factory = {"device": device, "dtype": dtype}
        self.in_proj = seeded_linear(
            embed_dim, 2 * num_slots + 2 * embed_dim, generator=generator, **factory
        )
        self.out_proj = seeded_linear(embed_dim, embed_dim, generator=generator, **factory)
        shape = (num_slots, embed_dim)
        ones = torch.ones(shape, dtype=torch.float64)
        # computed in float64, stored in the projections' dtype (the default one when None)
        factory["dtype"] = torch.get_default_dtype() if dtype is None else dtype
        self.raw_decay = nn.Parameter(inverse_softplus(_INIT_DECAY * ones).to(**factory))
        if process_noise:
            self.raw_diffusion = nn.Parameter(
                inverse_softplus(_INIT_DIFFUSION * ones).to(**factory)
            )
        else:
            self.register_parameter("raw_diffusion", None)
        lo, hi = (math.log(x) for x in _INIT_STEP_RANGE)
        gen_device = generator.device if generator is not None else device
        draw = torch.rand(shape, generator=generator, dtype=torch.float64, device=gen_device)
        step = torch.exp(lo + (hi - lo) * draw)
        self.raw_step = nn.Parameter(inverse_softplus(step).to(**factory))

    # --- pieces ---------------------------------------------------------------------------------

    def prior(self, gaps: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(a_bar, p_bar)`` of eq. (8): (N, E), or (..., N, E) for time gaps of shape (...)."""
        a = nn.functional.softplus(self.raw_decay)
        dt = nn.functional.softplus(self.raw_step)
        if gaps is not None:
            dt = dt * gaps[..., None, None]
        if self.raw_diffusion is None:
            a_bar = torch.exp(-a * dt)
            return check_decay_factor(a_bar, "t (or gap)"), torch.zeros_like(a_bar)
        p = nn.functional.softplus(self.raw_diffusion)
        a_bar, p_bar = ou_prior(a, p, dt, convention=self.p_convention)
        # a gap so long that e^(-a dt) underflows forgets the past, as a tiny a_bar does
        return a_bar.clamp_min(torch.finfo(a_bar.dtype).tiny), p_bar

    def _tokens(self, x: torch.Tensor):
        """Keys, queries (..., N, 1), values and value precisions (..., 1, E) of tokens x."""
        N, E = self.num_slots, self.embed_dim
        k, q, v, log_var = self.in_proj(x).split([N, N, E, E], dim=-1)
        lam_v = 1.0 / (nn.functional.softplus(log_var) + VALUE_VARIANCE_FLOOR)
        k, q = _l2_normalise(k), _l2_normalise(q)
        return k[..., None], q[..., None], v[..., None, :], lam_v[..., None, :]

    def _check(self, x: torch.Tensor, name: str = "x") -> None:
        if x.dtype != self.in_proj.weight.dtype:
            raise TypeError(
                f"{name} must have the layer's dtype {self.in_proj.weight.dtype}, found {x.dtype}"
            )

    # --- public API -----------------------------------------------------------------------------

    def readout(self, x: torch.Tensor, t=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior readout mean ``sum_n q_n mu[n, :]`` and variance ``sum_n q_n^2 / lam``.

        x : (B, T, E); t : None, (T,) or (B, T) strictly increasing. Returns two (B, T, E)
        tensors, before the output projection (the inputs of `mc_marginal_nll`).
        """
        (a_bar, p_bar), (k, q, v, lam_v) = self._prepared(x, t)
        res = kla_scan(k, lam_v, v, a_bar, p_bar, q=q, method=self.method, backend=self.backend)
        return res.output.sum(dim=-2), res.output_variance.sum(dim=-2)

    def _prepared(self, x: torch.Tensor, t):
        """``(a_bar, p_bar)`` and the tokens ``(k, q, v, lam_v)`` of x (checked) and stamps t."""
        batch, steps = check_input(x, self.embed_dim)
        self._check(x)
        gaps = None
        if t is not None:
            t = check_times(t, steps, like=x)[:, 0]  # (B or 1, T)
            gaps = torch.cat([torch.ones_like(t[:, :1]), t[:, 1:] - t[:, :-1]], dim=1)
        return self.prior(gaps), self._tokens(x)

    def values(self, x: torch.Tensor) -> torch.Tensor:
        """The values ``v_t`` of tokens x (B, T, E): what `attention_weights` weighs, (B, T, E)."""
        check_input(x, self.embed_dim)
        self._check(x)
        return self._tokens(x)[2][..., 0, :]

    def attention_weights(self, x: torch.Tensor, t=None) -> torch.Tensor:
        """The equivalent attention matrix (App. E.4): weights (B, E, T, T), one per channel.

        ``readout(x, t)[0][b, i, d] = sum_j weights[b, d, i, j] values(x)[b, j, d]`` exactly
        (the filter starts from ``eta_0 = 0``, so there is no starting-state term): channel d
        is a "head" of width 1. Row i, column j is ``sum_n q_i[n] (g_{j+1} ... g_i)[n, d]
        k_j[n] Lambda^v_j[d] / lam_j[n, d]`` (`kernels.ops.kla.attention`), zero for j > i.
        Computed by the torch form whatever the backend; O(B T^2 N E) time and memory.
        """
        (a_bar, p_bar), (k, q, _, lam_v) = self._prepared(x, t)
        return kla_attention_matrix(k, lam_v, a_bar, p_bar, q=q).weights.sum(dim=1)

    def forward(self, x: torch.Tensor, t=None, *, need_weights: bool = False):
        """``(out, weights)`` with ``out = out_proj(y)``, (B, T, E); ``weights`` is None, or
        with ``need_weights=True`` the equivalent attention matrix (B, E, T, T) of
        `attention_weights` (``y = weights @ values`` per channel, before ``out_proj``)."""
        mean, _ = self.readout(x, t)
        weights = self.attention_weights(x, t) if need_weights else None
        return self.out_proj(mean), weights

    def initial_state(self, batch: int, *, like: torch.Tensor) -> KLAState:
        """``lam_0 = 1, eta_0 = 0`` of shape (B, N, E) (the authors' code)."""
        shape = (batch, self.num_slots, self.embed_dim)
        return KLAState(
            torch.ones(shape, dtype=like.dtype, device=like.device),
            torch.zeros(shape, dtype=like.dtype, device=like.device),
        )

    def step(self, x_t: torch.Tensor, state: KLAState | None = None, *, gap: float = 1.0):
        """One decoding step, O(1) in the sequence length: ``(out_t (B, E), new state)``.

        x_t : (B, E) token; state : `KLAState` of (B, N, E) tensors (None: `initial_state`);
        gap : time since the previous token in units of ``t`` (1 for regular steps).
        """
        if not isinstance(x_t, torch.Tensor):
            raise TypeError(f"x_t must be a torch.Tensor, found {type(x_t).__name__}")
        if x_t.ndim != 2 or x_t.shape[-1] != self.embed_dim:
            raise ValueError(f"x_t must have shape (B, {self.embed_dim}), found {tuple(x_t.shape)}")
        self._check(x_t, "x_t")
        check_positive("gap", gap)
        if state is None:
            state = self.initial_state(x_t.shape[0], like=x_t)
        check_state("state", state, KLAState)
        expected = (x_t.shape[0], self.num_slots, self.embed_dim)
        if tuple(state.lam.shape) != expected or tuple(state.eta.shape) != expected:
            raise ValueError(
                f"state must hold two tensors of shape {expected}, found "
                f"{tuple(state.lam.shape)}, {tuple(state.eta.shape)}"
            )
        gaps = None if gap == 1.0 else torch.tensor(gap, dtype=x_t.dtype, device=x_t.device)
        a_bar, p_bar = self.prior(gaps)
        k, q, v, lam_v = self._tokens(x_t)
        state, out = kla_step(state, k, lam_v, v, a_bar, p_bar, q_t=q)
        return self.out_proj(out.sum(dim=-2)), state

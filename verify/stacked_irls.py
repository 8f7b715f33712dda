"""Stacked shared-weight AFA layers as iterations of IRLS, measured against its fixed point.

Seed 000 2.3 writes robust trajectory estimation as an IRLS iteration in the eigenbasis,

    x_i^MLE(k) = (sum_j w_ij^(k) lambda_P,ij)^-1 sum_j w_ij^(k) lambda_P,ij zhat_S,ij,
    w_ij^(k) = (1 + lambda_P,ij^T |x_i^(k) - zhat_S,ij|^2 / nu)^-1,
    x_i^(k+1) = (1 - delta) x_i^(k) + delta x_i^MLE(k),       x_i^(1) = z_S,i,

and says that it "can be implemented with a multi-layer neural network with learnable parameters
S, Lambda, Lambda_Q, Lambda_R shared across layers". Only the diagonal ``x_i = zhat_S,ii`` is
updated: the pulled-forward measurements ``zhat_S,ij = e^{lambda tau_ij} z_S,j`` stay fixed.
The stacking implemented here is that one, with one AFA layer (seed 000 3.1) per reweighting:

* keys and values are the measurements ``z`` in every layer;
* the queries of layer 1 are the measurements (the seed's ``x^(1) = z_S``, which is
  ``estimators.irls``' ``init="measurement"``), and the queries of layer ``l + 1`` are the
  output of layer ``l``;
* every layer has the same weights; the residual gate ``delta`` (Algorithm 1) mixes the layer's
  estimate with its queries' values ``L_V(x^(l))``, the seed's damping.

Each layer of the stack is the real layer's forward, ``layer(y_{l-1}, t, memory=z)`` (queries
from the previous output, keys and values from the measurements; the ``memory`` argument of
`kernels.layers.afa.AdaptiveFilterAttention`), so the stack cannot drift from the layer.

A layer's residual ``R = Zq_i - e^{lambda tau} Zk_j`` is then the IRLS residual ``x_i - zhat_ij``
and its weight ``(1 + sum_k P |R|^2 / nu)^(-temperature)`` is `estimators.irls`' ``"power"``
family with ``kappa = temperature`` (the rational weight at ``temperature = 1``): with the
eigen-data of ``model`` in the layer (``W_v = S^-1``, ``W_q = W_k = I``, ``W_p = S``, as
`kernels.layers.afa.AdaptiveFilterAttention.from_eigen` builds it) layer ``l``'s output is IRLS
iterate ``l`` (chain of trust link 4, one iteration at a time), and the stack approaches the
IRLS fixed point geometrically.

Layers without an eigen-IRLS reference (trained ones: learned ``L_Q != L_K``, ``L_P L_V !=
I``) are measured against the limit of their own stack instead (`limit_distances`).

Seed 000 4.1 (the note after Algorithm 1) describes another stacking, where queries, keys *and*
values all come from the previous layer's values (a standard transformer stack). Its values
change from layer to layer, so it is not the IRLS map and its limit is not the IRLS fixed
point; it is not measured here.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from estimators.irls import eigen_irls, robust_estimate
from estimators.mle import DiagonalizableModel, eigen_pairwise_terms
from kernels.layers.afa import AdaptiveFilterAttention
from sde_sim import Contamination, EveryKSteps, Scenario, SphericalShellInitial, simulate
from sde_sim.presets import AFA_BASIS, AFA_EIGENVALUES

# The afa-2d spiral (seed 000 4.2) with its noise diagonal in the eigenbasis, Q = S diag(0.3) S^H,
# R = S diag(0.5) S^H (the eigen-data an isotropic layer holds; the preset's Q = 0.3 I is not
# diagonal in S).
AFA_2D_PROCESS_VAR, AFA_2D_MEASUREMENT_VAR = 0.3, 0.5


def afa_2d_model(
    *, eigenvalues=AFA_EIGENVALUES, S=AFA_BASIS, process_var=None, measurement_var=None
) -> DiagonalizableModel:
    """Eigen-data of the afa-2d spiral (``AFA_2D_*`` variances by default), isotropic noise."""
    q = AFA_2D_PROCESS_VAR if process_var is None else process_var
    r = AFA_2D_MEASUREMENT_VAR if measurement_var is None else measurement_var
    return DiagonalizableModel(eigenvalues, S, np.full(2, float(q)), np.full(2, float(r)))


def measurements(
    model: DiagonalizableModel,
    *,
    paths: int,
    steps: int,
    outlier_fraction: float,
    seed: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(z (paths, steps, d), t (steps,))``: exact simulation of ``model`` measured every 0.1
    time units (afa-2d's grid), a fraction of the measurements replaced by Cauchy outliers of
    scale 10 (`sde_sim.Contamination`), started on afa-2d's shell ``|x_0|`` in [17, 23]."""
    scenario = Scenario(
        system=model.sde(),
        measurement=model.measurement(),
        initial=SphericalShellInitial(model.dim, 17.0, 23.0),
        dt=0.01,
        n_steps=10 * (steps - 1),
        observations=EveryKSteps(10),
        contamination=Contamination(outlier_fraction=outlier_fraction),
    )
    sim = simulate(scenario, paths, seed=seed, method="exact")
    return sim.z, sim.t_obs


class StackedDistances(NamedTuple):
    """Layer-by-layer distances of a shared-weight stack to the IRLS fixed point.

    outputs : (L, B, T, d) the outputs ``y_1..y_L`` of layers ``1..L`` (float64).
    fixed_point : (B, T, d) the IRLS fixed point ``x*`` (`estimators.irls.eigen_irls`).
    iterates : (L, B, T, d) IRLS iterates ``x^(1)..x^(L)`` from the same start (one
        reweighting each, `estimators.irls.robust_estimate`).
    distances : (L,) relative RMS ``||y_l - x*|| / ||x*||`` over paths, times and coordinates.
    contraction : (L - 1,) ``distances[l] / distances[l - 1]``, the per-layer contraction
        factor (meaningful until the distance reaches round-off).
    iterate_errors : (L,) ``max |y_l - x^(l)| / max |z|``: layer ``l`` against IRLS iterate ``l``.
    irls_iterations : reweighting steps `eigen_irls` took to its fixed point.
    irls_converged : whether it met its tolerance.
    """

    outputs: np.ndarray
    fixed_point: np.ndarray
    iterates: np.ndarray
    distances: np.ndarray
    contraction: np.ndarray
    iterate_errors: np.ndarray
    irls_iterations: int
    irls_converged: bool


def _check_layer(layer) -> None:
    if not isinstance(layer, AdaptiveFilterAttention):
        raise TypeError(f"layer must be an AdaptiveFilterAttention, found {type(layer).__name__}")
    if layer.predict or layer.gate == "prediction-gate":
        raise ValueError(
            "layer must output its estimate (predict=False, gate None or 'residual'): IRLS "
            f"iterates estimates, found predict={layer.predict}, gate={layer.gate!r}"
        )


def _measurements(z) -> torch.Tensor:
    if not isinstance(z, (torch.Tensor, np.ndarray)):
        raise TypeError(f"z must be a torch.Tensor or numpy array, found {type(z).__name__}")
    z = torch.as_tensor(z)
    if z.ndim != 3 or z.shape[1] < 1:
        raise ValueError(f"z must have shape (B, T, d), found {tuple(z.shape)}")
    if not torch.isfinite(z).all():
        raise ValueError("z must be finite (no missing measurements), found NaN or inf")
    return z


def _stack(layer: AdaptiveFilterAttention, z: torch.Tensor, t):
    """Yield ``y_1, y_2, ...`` of the shared-weight stack without end (see `stack_outputs`):
    ``y_l = layer(y_{l-1}, t, memory=z)``."""
    y = z
    while True:
        y, _ = layer(y, t, memory=z)
        yield y


def _check_stack(layer, z, layers: int, minimum: int) -> torch.Tensor:
    _check_layer(layer)
    z = _measurements(z)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < minimum:
        raise ValueError(f"layers must be an integer >= {minimum}, found {layers!r}")
    if z.shape[-1] != layer.embed_dim:
        raise ValueError(
            f"z must have E = embed_dim = {layer.embed_dim} features, found {z.shape[-1]}"
        )
    return z


@torch.no_grad()
def stack_outputs(layer: AdaptiveFilterAttention, z, t=None, *, layers: int) -> torch.Tensor:
    """Outputs of ``layers`` stacked copies of ``layer`` run as IRLS (module docstring).

    ``y_0 = z``; ``y_l = Re L_P(est_l)`` with ``est_l = (1 - delta) L_V(y_{l-1}) + delta
    AFA(Zq = L_Q(L_V(y_{l-1})), Zk = L_K(L_V(z)), Zv = L_V(z))`` (``delta = 1`` without the
    residual gate; ``L_Q, L_K`` act on the lifted input instead of the values when
    ``share_qk_values=False``), the dynamics and ``nu`` those of ``layer``.

    Parameters
    ----------
    layer : an `AdaptiveFilterAttention` with ``predict=False`` and gate None or
        ``"residual"``; its weights are shared by every layer of the stack.
    z : (B, T, E) measurements (real; real pairs with ``complex_input=True``), in the layer's
        dtype.
    t : None or (T,) / (B, T) time stamps, as for the layer.
    layers : ``L >= 1``.

    Returns
    -------
    (L, B, T, E) tensor, ``[y_1, ..., y_L]``.
    """
    z = _check_stack(layer, z, layers, 1)
    stack = _stack(layer, z, t)
    return torch.stack([next(stack) for _ in range(layers)])


class LimitDistances(NamedTuple):
    """Layer-by-layer distances of a shared-weight stack to its own limit.

    outputs : (L, B, T, E) the outputs of layers ``1..L`` (the layer's dtype).
    limit : (B, T, E) the stack run until a layer changes its output by at most ``tol``.
    depth : layers run to reach the limit.
    converged : whether the limit met ``tol`` within ``max_layers``.
    distances : (L,) relative RMS ``||y_l - y_inf|| / ||y_inf||``.
    contraction : (L - 1,) ``distances[l] / distances[l - 1]``.
    """

    outputs: torch.Tensor
    limit: torch.Tensor
    depth: int
    converged: bool
    distances: np.ndarray
    contraction: np.ndarray


@torch.no_grad()
def limit_distances(
    layer: AdaptiveFilterAttention,
    z,
    t=None,
    *,
    layers: int,
    tol: float = 1e-13,
    max_layers: int = 2000,
) -> LimitDistances:
    """Per-layer distance of a shared-weight stack to the stack's own limit (any weights).

    For a layer without an eigen-IRLS reference (learned ``L_Q != L_K``, several heads,
    ``W_p W_v != I``) the fixed point the shared weights can converge to is the limit of the
    stack itself: `stack_outputs` run until ``max |y_{l+1} - y_l| <= tol * max(1, max |y|)``.
    With the true eigen-data in the layer the limit is `stacked_distances`' IRLS fixed point.

    Parameters
    ----------
    layer, z, t : as in `stack_outputs`.
    layers : ``L >= 2`` layers whose distances are returned.
    tol : relative step size that defines the limit (float64 round-off is ~1e-16; a float32
        layer needs ~1e-6).
    max_layers : the most layers run looking for the limit (``>= layers``).

    Returns
    -------
    LimitDistances; ``converged`` is False when no limit was found (e.g. a residual gate whose
    skip path ``(1 - delta) Re(L_P L_V)`` expands).
    """
    z = _check_stack(layer, z, layers, 2)
    if isinstance(max_layers, bool) or not isinstance(max_layers, int) or max_layers < layers:
        raise ValueError(
            f"max_layers must be an integer >= layers ({layers}), found {max_layers!r}"
        )
    if not (isinstance(tol, float) and tol > 0):
        raise ValueError(f"tol must be a float > 0, found {tol!r}")
    outputs, previous, converged, depth = [], None, False, 0
    for y in _stack(layer, z, t):
        depth += 1
        if depth <= layers:
            outputs.append(y)
        if previous is not None:
            change = float((y - previous).abs().max())
            if not math.isfinite(change):
                break
            if change <= tol * max(1.0, float(y.abs().max())) and depth >= layers:
                converged = True
                break
        if depth >= max_layers:
            break
        previous = y
    outputs = torch.stack(outputs)
    limit = y

    def rms(a):
        return math.sqrt(float(torch.mean(a.double() ** 2)))

    distances = np.array([rms(o - limit) for o in outputs]) / rms(limit)
    with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 once a layer hits the limit
        contraction = distances[1:] / distances[:-1]
    return LimitDistances(outputs, limit, depth, converged, distances, contraction)


def _scalar(name: str, value) -> float:
    """A per-head parameter of a one-head layer as a float."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be one number (one head), found shape {value.shape}")
        return float(value.detach().reshape(()))
    return float(value)


def stacked_distances(
    layer: AdaptiveFilterAttention,
    model: DiagonalizableModel,
    z,
    t=None,
    *,
    layers: int,
    tol: float = 1e-14,
    max_iter: int = 2000,
) -> StackedDistances:
    """Per-layer distance of a shared-weight AFA stack to the float64 IRLS fixed point.

    The stack is `stack_outputs`; the reference is `estimators.irls.eigen_irls` on ``model``
    with the layer's weight (``"power"`` family, ``kappa`` = the layer's temperature, its
    ``nu``), its damping (``delta`` of the residual gate, else 1), its causality and its start
    (``init="measurement"``: the seed's ``x^(1) = z_S``), on the layer's clock ``step * t``.
    ``model`` holds the eigen-data the distance is measured against: the layer's own ones
    give the fixed point the stack converges to; other ones (e.g. the true system's when the
    layer's are perturbed) give the bias of the layer's fixed point.

    Parameters
    ----------
    layer : one-head `AdaptiveFilterAttention` with ``predict=False``, gate None or
        ``"residual"``, ``complex_input=False`` and ``embed_dim = d``.
    model : eigen-data ``(S, lambda, sigma^2, eta^2)`` of the reference, time in the layer's
        clock units (``step * t``).
    z : (B, T, d) or (T, d) real measurements (no missing values).
    t : None (``t_i = i``) or (T,) time stamps as passed to the layer.
    layers : depth ``L >= 2`` of the stack.
    tol, max_iter : `eigen_irls`' stopping rule for the fixed point (steps below ``tol *
        max(1, max |x|)``; with contraction factor ``rho`` the fixed point is then within about
        ``tol * rho / (1 - rho)`` of the exact one, relative: ~1e-13 at the default and
        ``rho = 0.9``).

    Returns
    -------
    StackedDistances; ``distances[l - 1]`` is layer ``l``'s, relative RMS over paths, times
    and coordinates.
    """
    _check_layer(layer)
    if not isinstance(model, DiagonalizableModel):
        raise TypeError(f"model must be a DiagonalizableModel, found {type(model).__name__}")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 2:
        raise ValueError(
            f"layers must be an integer >= 2 (contraction needs two), found {layers!r}"
        )
    if layer.num_heads != 1 or layer.complex_input:
        raise ValueError(
            "layer must have one head on real input (the eigen-IRLS reference has one weight "
            f"per pair), found num_heads={layer.num_heads}, complex_input={layer.complex_input}"
        )
    squeeze = isinstance(z, (torch.Tensor, np.ndarray)) and z.ndim == 2
    z_np = _measurements(z[None] if squeeze else z).detach().to(torch.float64).numpy()
    if z_np.shape[-1] != model.dim:
        raise ValueError(
            f"z must have d = model.dim = {model.dim} coordinates, found {z_np.shape[-1]}"
        )
    steps = z_np.shape[1]
    stamps = np.arange(steps, dtype=np.float64) if t is None else np.asarray(t, dtype=np.float64)
    if stamps.shape != (steps,):
        raise ValueError(f"t must have shape (T,) = ({steps},), found {stamps.shape}")
    clock = _scalar("step", layer.step) * stamps

    dtype = next(layer.parameters()).dtype
    stamps_t = None if t is None else torch.as_tensor(stamps, dtype=dtype)
    outputs = stack_outputs(layer, torch.as_tensor(z_np, dtype=dtype), stamps_t, layers=layers)
    outputs = outputs.to(torch.float64).numpy()

    robust = layer.robust()
    options = {
        "nu": _scalar("nu", robust.nu),
        "family": "power",
        "kappa": _scalar("temperature", robust.temperature),
        "causal": layer.causal,
        "damping": 1.0 if layer.gate is None else _scalar("delta", torch.sigmoid(layer.raw_delta)),
    }
    fixed = eigen_irls(
        model, z_np, clock, init="measurement", tol=tol, max_iter=max_iter, **options
    )
    terms = eigen_pairwise_terms(model, z_np, clock, causal=layer.causal)
    iterates, x = [], "measurement"
    options.pop("causal")
    for _ in range(layers):
        x = robust_estimate(terms, init=x, max_iter=1, **options).outputs
        iterates.append(x)
    iterates = np.stack(iterates)

    def rms(a):
        return math.sqrt(float(np.mean(np.abs(a) ** 2)))

    distances = np.array([rms(y - fixed.outputs) for y in outputs]) / rms(fixed.outputs)
    scale = float(np.abs(z_np).max())
    errors = np.abs(outputs - iterates).reshape(layers, -1).max(axis=1) / scale
    if squeeze:
        outputs, iterates = outputs[:, 0], iterates[:, 0]
    return StackedDistances(
        outputs=outputs,
        fixed_point=fixed.outputs[0] if squeeze else fixed.outputs,
        iterates=iterates,
        distances=distances,
        contraction=distances[1:] / distances[:-1],
        iterate_errors=errors,
        irls_iterations=fixed.iterations,
        irls_converged=fixed.converged,
    )


__all__ = [
    "LimitDistances",
    "StackedDistances",
    "limit_distances",
    "afa_2d_model",
    "measurements",
    "stack_outputs",
    "stacked_distances",
]

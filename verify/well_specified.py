"""Well-specified cases: layer families that contain the exact optimal predictor (issue 13).

A trained layer can only arrive at the maximum-likelihood estimate if some member of its family
*is* the optimal (Kalman) predictor of the data. This module builds that member from the true
parameters of a preset and measures how far it is from `estimators.kalman.kalman_filter` on
the same paths (chain of trust link 4, on the presets the training runs use):

* ``unrolled-afa-rotation-3d``: the unrolled AFA (seed 000 B.2, Algorithm 4) at ``nu = inf``
  on the unitary basis (``basis="unitary"``, the family the training run uses) with
  ``L_V = S^H``, ``L_P = L_V^H = S`` for the unitary eigenbasis ``S`` of
  ``A = -0.1 I + [omega]_x``. Isotropic noise stays ``sigma^2 I``, ``eta^2 I`` in a unitary
  basis, so each mode is an independent scalar Kalman filter: the layer's one-step prediction
  is the Kalman prediction and its `predictive` covariance ``c Re(S S^H) = c I`` the
  innovation covariance ``P^- + R``.
* ``unrolled-afa-ou``: the same layer with ``basis="identity"`` and ``rotation=False`` (the
  channels are the eigen-coordinates, as `estimators.fit.OUFamily` fixes ``C = I``), one head
  per channel with that channel's ``a``, ``p^2``, ``eta^2``.
* ``kla-ou``: Kalman Linear Attention (seed 001 eqs. (7)-(8), (22)-(23)) with one state slot
  per channel: constant unit keys and queries (zero weights, positive bias), values ``c z``,
  value precisions ``1 / (c^2 eta^2)``, the channel's OU prior with ``Delta = 1`` per
  measurement interval and the output projection ``diag(a_bar) / c``. KLA's filter starts at
  ``N(0, 1)`` one step before the first token; the value scale ``c = sqrt(2 a / p^2)`` makes
  that the stationary law ``N(0, p^2 / (2 a))``, which the prior step keeps: the layer is the
  Kalman filter with the stationary prior, the exact optimum for the preset (which starts
  stationary).

``afa-2d`` a (no process noise) is different: there the batch MLE is the Kalman filter, but no
AFA form holds it. Every form propagates each eigen-coordinate by its own ``e^{lambda tau}``, so
the features must be the eigen-coordinates ``S^-1 z`` up to one complex scale each, and it
weighs each pulled-forward feature with one real weight (isotropic: one per head; tensor and
separable: one per feature). The exact MLE weighs the pair ``(w, conj w)`` with the precision
of its noise ``S^-1 R S^-H``, whose off-diagonal entry is not zero when ``S`` is not unitary
(a non-circular complex noise whose ellipse turns with the lag). `eigen_noise_coherence`
measures it: 0.75 for the preset's ``S`` (`estimators` and the layers agree that the preset's
eigenbasis is not unitary); see `verify.checks.well_specified`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from estimators.kalman import GaussianPrior, kalman_filter
from kernels.layers.kla import VALUE_VARIANCE_FLOOR
from kernels.layers.parameters import inverse_softplus
from verify.training import (
    Data,
    OneStepPredictor,
    TrainConfig,
    build_model,
    log_likelihood,
    make_data,
    scenario_of,
)

# The true-parameter models are compared in float64 on the held-out paths of seed 0.
CONTAINMENT_CONFIGS: dict[str, TrainConfig] = {
    "unrolled-afa-rotation-3d": TrainConfig(
        layer="unrolled-afa",
        preset="rotation-3d",
        sim_method="exact",
        dtype="float64",
        layer_options={"nu": math.inf, "basis": "unitary"},
    ),
    "unrolled-afa-ou": TrainConfig(
        layer="unrolled-afa",
        preset="ou",
        num_heads=4,
        sim_method="exact",
        dtype="float64",
        layer_options={"nu": math.inf, "basis": "identity", "rotation": False},
    ),
    "kla-ou": TrainConfig(
        layer="kla",
        preset="ou",
        sim_method="exact",
        dtype="float64",
        layer_options={"num_slots": 1},
    ),
}


def true_parameter_model(config: TrainConfig, data: Data | None = None) -> OneStepPredictor:
    """The model of `config` (a `CONTAINMENT_CONFIGS` entry) holding the true parameters.

    Rates and the process variance are per measurement interval ``Delta`` (the layers' clock);
    variances are divided by the model's ``scale^2`` (it sees ``z / scale``).
    """
    data = make_data(config) if data is None else data
    model = build_model(config, data)
    sde = scenario_of(config).system
    meas = scenario_of(config).measurement
    A, Q = np.asarray(sde.A), np.asarray(sde.G) @ np.asarray(sde.G).T
    R = np.asarray(meas.R)
    delta = data.t_interval
    s2 = float(model.scale) ** 2
    layer = model.layer
    with torch.no_grad():
        if config.layer == "unrolled-afa" and config.preset == "rotation-3d":
            lam, S = np.linalg.eig(A)  # A is normal: S is unitary
            layer.value_proj.set_complex(torch.from_numpy(S.conj().T))
            if layer.out_proj is not None:  # learned basis; the unitary one reads out with S
                layer.out_proj.set_complex(torch.from_numpy(S))
            for proj in (layer.value_proj, layer.out_proj):
                for bias in () if proj is None else (proj.bias_real, proj.bias_imag):
                    if bias is not None:
                        bias.zero_()
            layer.set_parameters(
                decay=-lam.real.mean() * delta,
                frequencies=torch.from_numpy(lam.imag * delta),
                process_var=Q[0, 0] * delta / s2,
                measurement_var=R[0, 0] / s2,
            )
        elif config.layer == "unrolled-afa" and config.preset == "ou":
            layer.set_parameters(
                decay=torch.from_numpy(-np.diag(A) * delta),
                process_var=torch.from_numpy(np.diag(Q) * delta / s2),
                measurement_var=torch.from_numpy(np.diag(R) / s2),
            )
        elif config.layer == "kla" and config.preset == "ou":
            _load_kla(layer, -np.diag(A), np.diag(Q), np.diag(R), delta, s2)
        else:
            raise ValueError(f"no true-parameter model for {config.layer} on {config.preset}")
    return model


def _load_kla(layer, a, p2, eta2, delta: float, s2: float) -> None:
    """KLA with one slot per channel as the stationary-prior Kalman filter (module docstring)."""
    E = a.size
    if layer.num_slots != 1 or layer.p_convention != "paper":
        raise ValueError("the KLA oracle needs num_slots=1 and p_convention='paper'")
    # scaled units: p^2 -> p^2 / s2 per unit time; the stationary variance is p^2 / (2 a s2)
    value_scale = np.sqrt(2 * a * s2 / p2)  # c: N(0, 1) in value units is the stationary law
    weight = torch.zeros_like(layer.in_proj.weight)
    bias = torch.zeros_like(layer.in_proj.bias)
    bias[0] = bias[1] = 1.0  # key and query: constant 1 after the L2 normalisation
    weight[2 : 2 + E, :] = torch.diag(torch.from_numpy(value_scale))
    # the layer's value variance is softplus(l) + floor; it must be c^2 eta^2 / s2
    value_var = value_scale**2 * eta2 / s2 - VALUE_VARIANCE_FLOOR
    bias[2 + E :] = inverse_softplus(torch.from_numpy(value_var))
    layer.in_proj.weight.copy_(weight)
    layer.in_proj.bias.copy_(bias)
    shape = layer.raw_decay.shape
    layer.raw_decay.copy_(inverse_softplus(torch.from_numpy(a * delta)).view(shape))
    # in value units the diffusion is c^2 p^2 Delta / s2 = 2 a Delta per clock unit
    diffusion = np.sqrt(value_scale**2 * p2 * delta / s2)
    layer.raw_diffusion.copy_(inverse_softplus(torch.from_numpy(diffusion)).view(shape))
    layer.raw_step.copy_(inverse_softplus(torch.ones(shape, dtype=torch.float64)))
    a_bar = np.exp(-a * delta)
    layer.out_proj.weight.copy_(torch.diag(torch.from_numpy(a_bar / value_scale)))
    layer.out_proj.bias.zero_()


@dataclass(frozen=True)
class Containment:
    """The true-parameter model against the Kalman filter on the held-out paths.

    mean_error : ``max |prediction - Kalman prediction| / max |z|``.
    cov_error : ``max |Sigma - (C P^- C^T + R)| / max |C P^- C^T + R|`` (NaN: no predictive law).
    loglik_error : ``|log L_model - log L_Kalman| / |log L_Kalman|`` (NaN: no predictive law).
    kalman_prior : the Kalman filter's prior (``"diffuse"`` or ``"stationary"``).
    """

    name: str
    mean_error: float
    cov_error: float
    loglik_error: float
    kalman_prior: str

    @property
    def residual(self) -> float:
        return max(x for x in (self.mean_error, self.cov_error, self.loglik_error) if x == x)


def containment(name: str, model: OneStepPredictor | None = None) -> Containment:
    """Run the true-parameter model of ``CONTAINMENT_CONFIGS[name]`` (or `model`, e.g. one
    with a parameter changed: a negative control) against the Kalman filter."""
    if name not in CONTAINMENT_CONFIGS:
        raise ValueError(f"unknown case {name!r}; known: {', '.join(CONTAINMENT_CONFIGS)}")
    config = CONTAINMENT_CONFIGS[name]
    data = make_data(config)
    model = true_parameter_model(config, data) if model is None else model
    scenario = scenario_of(config)
    sde, meas = scenario.system, scenario.measurement
    sim = data.holdout_sim
    z = np.asarray(sim.z, dtype=np.float64)
    prior, kind = None, "diffuse"
    if config.layer == "kla":  # KLA starts from the stationary law (`_load_kla`)
        a = -np.diag(np.asarray(sde.A))
        p2 = np.diag(np.asarray(sde.G) @ np.asarray(sde.G).T)
        prior, kind = GaussianPrior(np.zeros(a.size), np.diag(p2 / (2 * a))), "stationary"
    kf = kalman_filter(sde, meas, z, sim.t_obs, prior=prior)
    C = np.asarray(meas.C)
    # (B, M-1, k, k): rows 1.. (row 0 of a diffuse filter has no prediction)
    innovation_cov = C @ kf.pred_covs[kf.group, 1:] @ C.T + np.asarray(meas.R)
    zt = torch.from_numpy(z)
    with torch.no_grad():
        mean = model(zt, data.t).numpy()
    reference = kf.pred_means[:, 1:] @ C.T + np.asarray(meas.b)
    mean_error = float(np.max(np.abs(mean[:, :-1] - reference)) / np.max(np.abs(z)))
    cov_error = loglik_error = math.nan
    if model.has_predictive:
        with torch.no_grad():
            cov = model.predictive(zt, data.t)[1].numpy()
        cov_error = float(
            np.max(np.abs(cov[:, :-1] - innovation_cov)) / np.max(np.abs(innovation_cov))
        )
        reference_ll = float(kf.log_likelihood.sum())
        loglik_error = abs(log_likelihood(model, zt, data.t) - reference_ll) / abs(reference_ll)
    return Containment(name, mean_error, cov_error, loglik_error, kind)


def eigen_noise_coherence(S, R) -> float:
    """``|M_12| / sqrt(M_11 M_22)`` of ``M = S^-1 R S^-H`` for a conjugate pair ``S = [s, s*]``:
    0 when the noise of the eigen-coordinate ``w = (S^-1 z)_1`` is circular (then a real weight
    per feature is the exact precision), up to 1 (a degenerate ellipse)."""
    S = np.asarray(S, dtype=complex)
    S_inv = np.linalg.inv(S)
    M = S_inv @ np.asarray(R, dtype=float) @ S_inv.conj().T
    return float(abs(M[0, 1]) / np.sqrt(M[0, 0].real * M[1, 1].real))

"""RT-RFA (seed 003 Algorithm 1) and the RT-Transformer block (Algorithm 2).

**Coordinates.** The float64 references (`estimators.rt_irls`) work in real eigen-coordinates
``x_s`` in R^d with a real skew generator ``Omega``; the layer works in complex pairs
``[re | im]`` (D = 2n reals) rotating as ``e^{i omega_k s}``. An isometry ``M: R^d -> R^D``
with ``M Omega = J M`` (``J`` the layer's rotation generator) carries one to the other: the layer
on ``M z_s`` equals ``M`` times the reference on ``z_s``, because every quantity is a norm, a
real inner product or a rotation (``Re(a^H b) = (M a) . (M b)``, ``M e^{Omega s} = e^{J s} M``).

* ``rt-sphere-3d`` (d = 3): with ``a`` the rotation axis, ``omega = |Omega|`` and ``e1 ⊥ a``,
  ``e2 = a x e1``, the complex features ``(x.e1 + i x.e2, x.a + 0 i)`` rotate at ``(omega, 0)``:
  ``M = rows [e1, a, e2, 0]`` (``[re0, re1, im0, im1]``), D = 4, and ``M^T M = I_3``.
* RoPE blocks (d = 2n, ``sde_sim.models.rotation_generator``): ``x_2k + i x_2k+1`` rotates at
  ``w_k``: ``M`` is the permutation to ``[x_0, x_2, .. | x_1, x_3, ..]``.

Tolerances: float64 comparisons with references computed by different float64 code (matmul
order, log-space precision) agree to ~1e-15 relative; 1e-10 is asserted (the issue's oracle
bound), 1e-12 against the explicit loop.
"""

import math

import numpy as np
import pytest
import torch

from estimators import rt_irls as rti
from estimators.closed_forms import measurement as meas
from estimators.closed_forms import radial_tangential as rt
from estimators.closed_forms import robust_weights as rw
from kernels.layers.rt_transformer import (
    RTRobustFilterAttention,
    RTTransformerBlock,
    spherical_update,
)
from kernels.ops.rt import rt_rfa, student_exponent
from kernels.ops.rt.naive import rt_rfa_loop
from sde_sim import (
    FixedTimes,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    Scenario,
    SphericalShellInitial,
    presets,
    simulate,
)
from sde_sim.models import rotation_generator
from tests.kernels.helpers import assert_close

F64 = torch.float64
TAU_THETA = 0.3  # angular floor of eq. 10 used with the references
EPS = 1e-3  # eq. 10's stability constant used with the references


# --------------------------------------------------------------------------------------------
# Reference data and the coordinate maps
# --------------------------------------------------------------------------------------------


def _embedding_3d(Omega):
    """``(M (4, 3), frequencies (2,))`` for a 3-D rotation generator (module docstring)."""
    w = np.array([Omega[2, 1], Omega[0, 2], Omega[1, 0]])
    omega = np.linalg.norm(w)
    a = w / omega
    e1 = np.cross(a, [1.0, 0.0, 0.0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(a, e1)
    return np.stack([e1, a, e2, np.zeros(3)]), np.array([omega, 0.0])


def _embedding_rope(n):
    """Permutation ``[x_0, x_1, ..] -> [x_0, x_2, .. | x_1, x_3, ..]`` for RoPE blocks."""
    return np.eye(2 * n)[np.r_[0 : 2 * n : 2, 1 : 2 * n : 2]]


class Problem:
    """Measurements ``z`` (P, T, d) at times ``t`` of an RT model, in the layer's coordinates."""

    def __init__(self, scenario, model, seed, M, frequencies):
        self.sim = simulate(scenario, 2, seed=seed)
        self.model, self.M = model, M
        self.t = self.sim.t_obs
        z_s = self.sim.z @ np.linalg.inv(model.basis).T
        self.x = torch.tensor(z_s @ M.T).unsqueeze(1)  # (P, 1, T, D)
        self.freqs = torch.tensor(frequencies)

    def layer(self, **kw):
        """`rt_rfa` on q = k = v = the measurements, with the model's true parameters."""
        m = self.model
        args = {
            "t": torch.tensor(self.t),
            "decay": m.mu_r,
            "tangential_decay": m.mu_t,
            "frequencies": self.freqs,
            "process_var": m.sigma_t**2,
            "measurement_var": m.eta_t**2,
            "query_var": m.gamma_t**2,
            "angular_var": TAU_THETA**2,
            "eps": EPS,
            "return_weights": True,
        }
        args.update(kw)
        return rt_rfa(self.x, self.x, self.x, **args)

    def to_reference(self, y):
        """Layer coordinates (P, 1, T, D) -> reference eigen-coordinates (P, T, d)."""
        return torch.as_tensor(y[:, 0] @ torch.tensor(self.M))

    def reference_kw(self):
        return {"tau_theta": TAU_THETA, "eps": EPS}


@pytest.fixture(scope="module")
def sphere():
    """``rt-sphere-3d`` b (rotation 0.6 rad/s about a tilted axis), 16 measurements, literal."""
    sc = presets.get("rt-sphere-3d").scenario("b").replace(n_steps=15)
    model = rti.RTModel.from_sde(sc.system, sc.measurement, gamma_t=0.1)
    M, freqs = _embedding_3d(model.Omega)
    return Problem(sc, model, 3, M, freqs)


def _rope_scenario(mode, mu_t, basis, times):
    system = RadialTangentialSDE(
        rotation_generator([0.7, 1.9]),
        mu_r=0.3,
        mu_t=mu_t,
        sigma_r=0.2,
        sigma_t=0.3,
        mode=mode,
        basis=basis,
    )
    return Scenario(
        system=system,
        measurement=RadialTangentialMeasurement(eta_r=0.1, eta_t=0.25),
        initial=SphericalShellInitial(4, 2.0, 3.0),
        dt=0.05,
        n_steps=int(round(times[-1] / 0.05)),
        observations=FixedTimes(times),
    )


IRREGULAR = np.array([0.0, 0.13, 0.2, 0.47, 0.5, 0.81, 1.3, 1.42, 1.9, 2.0])
# Ambient basis x = S x_s of the 4-D cases (well conditioned, not orthogonal).
BASIS = np.array(
    [[1.0, 0.3, 0.0, 0.2], [0.1, 0.9, 0.4, 0.0], [0.0, 0.2, 1.1, 0.3], [0.3, 0, 0.1, 1]]
)


@pytest.fixture(scope="module")
def rope():
    """4-D frozen-frame RT model (mu_t != mu_r), ambient basis S, irregular times."""
    sc = _rope_scenario("frozen-frame", 0.8, BASIS, IRREGULAR)
    model = rti.RTModel.from_sde(sc.system, sc.measurement, gamma_t=0.15)
    return Problem(sc, model, 4, _embedding_rope(2), np.array([0.7, 1.9]))


# --------------------------------------------------------------------------------------------
# Oracle: the directional MLE (eqs. 12-13) and one robust IRLS step (eq. 14)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sphere", "rope"])
def test_true_parameters_reproduce_the_directional_mle(name, request):
    """nu = inf, a fixed exponent, temperature 1: A = kappa / sum kappa and u_bar (eq. 13).

    Against `directional_mle` (float64): the resultant ``u_bar`` (tangent projection off),
    the weights, and with modification 3 on the tangent step ``P_T(u_z,i) u_bar`` of
    `radial_tangential.tangent_step`. rt-sphere-3d is literal (mu_t = mu_r) with a
    rotation about a tilted axis; the 4-D case is frozen-frame with mu_t != mu_r, an ambient
    basis S (``z_s = S^-1 z``), irregular times and gamma_t > 0.
    """
    prob = request.getfixturevalue(name)
    ref = rti.directional_mle(prob.model, prob.sim.z, prob.t, **prob.reference_kw())
    out = prob.layer(nu=math.inf, exponent=1.0, tangent_residual=False)
    assert_close("u_bar", prob.to_reference(out.output), torch.tensor(ref.resultant), atol=1e-10)
    attention = ref.precision / ref.precision.sum(-1, keepdims=True)
    assert_close("A", out.weights[:, 0], torch.tensor(attention), atol=1e-10)
    projected = prob.layer(nu=math.inf, exponent=1.0, tangent_residual=True)
    u_z = prob.sim.z @ np.linalg.inv(prob.model.basis).T
    expected = rt.tangent_step(u_z, ref.resultant)
    assert_close(
        "P_T u_bar", prob.to_reference(projected.output), torch.tensor(expected), atol=1e-10
    )


@pytest.mark.parametrize("exponent", [None, 1.0])
def test_finite_nu_is_one_directional_irls_step(sphere, exponent):
    """Finite nu, temperature 1: one RT-RFA layer = one IRLS step anchored at the query.

    ``directional_irls(anchor="query")`` is Alg. 1's single step (weights
    ``(1 + d^2/nu)^-p`` at the measured query direction): its resultant and its effective
    weights ``w kappa / sum w kappa`` equal the layer's. With ``anchor="estimate",
    init="query", max_iter=1`` (the D.4 iteration stopped after one step) its direction equals
    ``Norm(u_bar)`` of the layer. ``exponent=None`` is the seed's ``p = (nu + n)/n`` (n = 2
    complex features), passed to the reference explicitly.
    """
    nu = 3.0
    p = student_exponent(nu, 4) if exponent is None else exponent
    out = sphere.layer(nu=nu, exponent=exponent, tangent_residual=False)
    kw = sphere.reference_kw()
    ref = rti.directional_irls(
        sphere.model, sphere.sim.z, sphere.t, nu=nu, exponent=p, anchor="query", **kw
    )
    assert_close("u_bar", sphere.to_reference(out.output), torch.tensor(ref.resultant), atol=1e-10)
    effective = ref.weights * ref.precision
    attention = effective / effective.sum(-1, keepdims=True)
    assert_close("A", out.weights[:, 0], torch.tensor(attention), atol=1e-10)
    step = rti.directional_irls(
        sphere.model, sphere.sim.z, sphere.t, nu=nu, exponent=p, init="query", max_iter=1, **kw
    )
    assert step.iterations == 1
    direction = torch.nn.functional.normalize(sphere.to_reference(out.output), dim=-1)
    assert_close("Norm(u_bar)", direction, torch.tensor(step.directions), atol=1e-10)


def test_module_with_true_projections_is_one_irls_step():
    """RTRobustFilterAttention with W_q = W_k = W_v = S^-1 (to complex pairs), W_o = S.

    Literal 4-D model (one decay, as the module has), ambient basis S, irregular times. The
    eigen-coordinates fill 2 of the head's 4 complex features (the other two are zero and
    change no norm or inner product). With the true softplus-mapped parameters, eps equal to
    the module's, and tangent projection off, the branch output is ``S u_bar`` of
    ``directional_irls(anchor="query")`` with ``p = (nu + 4)/4``; with it on, ``S P_T u_bar``.
    """
    S = BASIS
    sc = _rope_scenario("literal", 0.3, S, IRREGULAR)
    model = rti.RTModel.from_sde(sc.system, sc.measurement, gamma_t=0.15)
    sim = simulate(sc, 2, seed=5)
    nu = 5.0
    perm = _embedding_rope(2)  # eigen (4,) -> [re0, re1, im0, im1]
    to_pairs = perm @ np.linalg.inv(S)  # ambient -> the 4 reals of 2 complex features
    W_in = np.zeros((4, 4), dtype=complex)
    W_in[:2] = to_pairs[:2] + 1j * to_pairs[2:]
    from_pairs = S @ perm.T  # (4 ambient, [re0, re1, im0, im1])
    W_out = np.zeros((4, 4), dtype=complex)
    W_out[:, :2] = from_pairs[:, :2] - 1j * from_pairs[:, 2:]  # Re(W u) = W_r u_r - W_i u_i
    true = {
        "decay": model.mu_r,
        "process_var": model.sigma_t**2,
        "measurement_var": model.eta_t**2,
        "query_var": model.gamma_t**2,
        "angular_var": TAU_THETA**2,
        "temperature": 1.0,
        "nu": nu,
    }
    x = torch.tensor(sim.z)
    t = torch.tensor(sim.t_obs)
    for tangent in (False, True):
        layer = RTRobustFilterAttention(4, 1, tangent_residual=tangent, dtype=F64)
        with torch.no_grad():
            for proj in (layer.q_proj, layer.k_proj, layer.v_proj):
                proj.set_complex(torch.tensor(W_in))
            layer.out_proj.set_complex(torch.tensor(W_out))
            layer.frequencies.copy_(torch.tensor([[0.7, 1.9, 0.0, 0.0]], dtype=F64))
            for name, value in true.items():
                getattr(layer, f"raw_{name}").fill_(value + math.log(-math.expm1(-value)))
        out, _ = layer(x, t)
        ref = rti.directional_irls(
            model,
            sim.z,
            sim.t_obs,
            nu=nu,
            exponent=(nu + 4) / 4,
            anchor="query",
            tau_theta=TAU_THETA,
            eps=1e-6,
        )
        u_bar = ref.resultant
        if tangent:
            u_bar = rt.tangent_step(sim.z @ np.linalg.inv(S).T, u_bar)
        assert_close(f"S u_bar (tangent={tangent})", out, torch.tensor(u_bar @ S.T), atol=1e-10)


# --------------------------------------------------------------------------------------------
# Equivalences: an explicit loop over (i, j), and each modification switched off
# --------------------------------------------------------------------------------------------

SWITCHES = [
    dict(magnitude_precision=a, normalize_qkv=b, tangent_residual=c)
    for a in (True, False)
    for b in (True, False)
    for c in (True, False)
]

PARAMS = {
    "decay": torch.tensor([0.3, 0.05], dtype=F64),
    "tangential_decay": torch.tensor([0.6, 0.0], dtype=F64),
    "process_var": torch.tensor([0.2, 0.5], dtype=F64),
    "measurement_var": torch.tensor([0.4, 0.1], dtype=F64),
    "query_var": torch.tensor([0.05, 0.2], dtype=F64),
    "angular_var": 0.02,
    "radial_process_var": torch.tensor([0.1, 0.3], dtype=F64),
    "radial_measurement_var": torch.tensor([0.2, 0.6], dtype=F64),
    "radial_query_var": torch.tensor([0.3, 0.01], dtype=F64),
    "eps": 1e-3,
    "nu": torch.tensor([2.5, 7.0], dtype=F64),
    "temperature": torch.tensor([0.8, 1.3], dtype=F64),
}


def _inputs(B=2, H=2, T=5, D=6, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, D, generator=g, dtype=dtype) for _ in range(3))
    t = torch.cumsum(0.2 + torch.rand(B, T, generator=g, dtype=dtype), dim=-1)
    freqs = torch.rand(H, D // 2, generator=g, dtype=dtype) * 2
    return q, k, v, t, freqs


@pytest.mark.parametrize("eps", [1e-3, 0.0])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "switches", SWITCHES, ids=lambda s: "".join(str(int(x)) for x in s.values())
)
def test_matches_explicit_loop_for_every_switch(switches, causal, eps):
    """All 8 combinations of the three modifications, causal and not, irregular (B, T) times,
    per-head parameters (mu_t != mu, radial != tangential), finite nu, temperature != 1, and
    both kappa paths (eps > 0 direct, eps = 0 in log space): the matmul layer equals the
    per-pair loop with explicit D x D Sherman-Morrison precisions to 1e-12."""
    q, k, v, t, freqs = _inputs()
    params = {**PARAMS, "eps": eps}
    out = rt_rfa(q, k, v, t=t, frequencies=freqs, causal=causal, return_weights=True,
                 **switches, **params)  # fmt: skip
    ref_out, ref_w = rt_rfa_loop(
        q, k, v, t, freqs, params, causal=causal,
        magnitude_precision=switches["magnitude_precision"],
        normalize_qkv=switches["normalize_qkv"], tangent=switches["tangent_residual"],
    )  # fmt: skip
    assert_close("weights", out.weights, ref_w, atol=1e-12)
    assert_close("output", out.output, ref_out, atol=1e-12)


def test_all_modifications_off_is_isotropic_rfa():
    """Switches off, radial = tangential, one decay: seed 004's isotropic RFA (eqs. 9-11).

    Built independently from seed 004 Alg. 1 in its own parameterisation: the lag kernel
    ``sigma~^2 (1 - E^2) + eta^2 E^2 + gamma^2`` with ``sigma~^2 = sigma^2 / (2 mu)``
    (`rfa_lag_variance`), the residual ``|Q|^2 + E^2 |K|^2 - 2 E Re(Q~^H K~)``, the logit
    `student_t_logit` (kappa = (nu + n)/n), ``A = softmax(beta L + M)``, ``V_bar = Phi+ (.)
    ((A (.) E) V~)``; complex numpy matrices (one head, B = 1).
    """
    q, k, v, t, freqs = _inputs(B=1, H=1, T=7, D=6, seed=2)
    mu, sig, eta, gam, nu, beta = 0.2, 0.3, 0.5, 0.1, 3.0, 1.2
    out = rt_rfa(q, k, v, t=t, decay=mu, frequencies=freqs, process_var=sig, measurement_var=eta,
                 query_var=gam, nu=nu, temperature=beta, magnitude_precision=False,
                 normalize_qkv=False, tangent_residual=False, return_weights=True)  # fmt: skip
    n = 3
    Q, K, V = (x[0, 0, :, :n].numpy() + 1j * x[0, 0, :, n:].numpy() for x in (q, k, v))
    tt, w = t[0].numpy(), freqs[0].numpy()
    phase = np.exp(-1j * tt[:, None] * w)  # Phi- (T, n)
    Qt, Kt, Vt = phase * Q, phase * K, phase * V
    lag = np.abs(tt[:, None] - tt[None, :])
    E = np.exp(-mu * lag)
    R2 = (
        (np.abs(Q) ** 2).sum(-1)[:, None]
        + E**2 * (np.abs(K) ** 2).sum(-1)
        - 2 * E * (Qt.conj() @ Kt.T).real
    )
    P = 1 / meas.rfa_lag_variance(lag, mu=mu, sigma2_tilde=sig / (2 * mu), eta2=eta, gamma2=gam)
    L = rw.student_t_logit(P * R2, nu, n, log_precision=np.log(P))
    L = np.where(np.tril(np.ones((7, 7), bool)), beta * L, -np.inf)
    A = np.exp(L - L.max(-1, keepdims=True))
    A /= A.sum(-1, keepdims=True)
    Vbar = phase.conj() * ((A * E) @ Vt)
    expected = np.concatenate([Vbar.real, Vbar.imag], axis=-1)
    assert_close("weights", out.weights[0, 0], torch.tensor(A), atol=1e-12)
    assert_close("output", out.output[0, 0], torch.tensor(expected), atol=1e-12)


def test_magnitude_precision_off_ignores_value_magnitudes():
    """Modification 1 is the only place magnitudes enter: with it off (directional states),
    rescaling each value token by a positive factor changes nothing (the lag-only RT
    precision of eq. 8); with it on the weights move (kappa depends on m_i, m_j)."""
    q, k, v, t, freqs = _inputs(seed=3)
    scale = 0.2 + 3 * torch.rand(2, 2, 5, 1, generator=torch.Generator().manual_seed(1), dtype=F64)
    kw = {**PARAMS, "t": t, "frequencies": freqs, "return_weights": True}
    off = [rt_rfa(q, k, x, magnitude_precision=False, **kw) for x in (v, v * scale)]
    assert_close("output", off[1].output, off[0].output, atol=1e-13)
    on = [rt_rfa(q, k, x, magnitude_precision=True, **kw) for x in (v, v * scale)]
    assert (on[1].weights - on[0].weights).abs().max() > 1e-2


def test_tangent_residual_projects_on_the_tangent_space_at_the_value():
    """Modification 3 = `radial_tangential.tangent_step(v^_i, u_bar_i)` of the output with the
    modification off (real geometry on R^D; eq. 18, digest 8.9); and it is orthogonal to v_i."""
    q, k, v, t, freqs = _inputs(seed=4)
    kw = {**PARAMS, "t": t, "frequencies": freqs}
    plain = rt_rfa(q, k, v, tangent_residual=False, **kw).output
    projected = rt_rfa(q, k, v, tangent_residual=True, **kw).output
    v_hat = torch.nn.functional.normalize(v, dim=-1)
    expected = rt.tangent_step(v_hat.numpy(), plain.numpy())
    assert_close("P_T u_bar", projected, torch.tensor(expected), atol=1e-13)
    assert (projected * v).sum(-1).abs().max() < 1e-13


# --------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("switches", [SWITCHES[0], SWITCHES[-1]], ids=["all-on", "all-off"])
def test_causal_no_leakage(switches):
    """Perturbing q, k, v at steps j > i leaves outputs and weights at rows <= i unchanged."""
    q, k, v, t, freqs = _inputs(T=7, seed=5)
    kw = {**PARAMS, **switches, "t": t, "frequencies": freqs, "return_weights": True}
    base = rt_rfa(q, k, v, **kw)
    i = 3
    noise = torch.zeros_like(q)
    noise[..., i + 1 :, :] = 10.0
    moved = rt_rfa(q + noise, k - noise, v + 2 * noise, **kw)
    assert_close("past output", moved.output[..., : i + 1, :], base.output[..., : i + 1, :], atol=0)
    assert_close(
        "past weights", moved.weights[..., : i + 1, :], base.weights[..., : i + 1, :], atol=0
    )
    assert (moved.output[..., i + 1 :, :] - base.output[..., i + 1 :, :]).abs().max() > 1e-3


@pytest.mark.parametrize("causal", [True, False])
def test_time_shift_invariance(causal):
    """t -> t + 1000.25 changes nothing (only lags and relative phases enter); float64,
    1e-10 (the shifted lags carry rounding of 1000 * 1e-16)."""
    q, k, v, t, freqs = _inputs(seed=6)
    kw = {**PARAMS, "frequencies": freqs, "causal": causal, "return_weights": True}
    a = rt_rfa(q, k, v, t=t, **kw)
    b = rt_rfa(q, k, v, t=t + 1000.25, **kw)
    assert_close("output", b.output, a.output, atol=1e-10)
    assert_close("weights", b.weights, a.weights, atol=1e-10)


@pytest.mark.parametrize("switches", [SWITCHES[0], SWITCHES[-1]], ids=["all-on", "all-off"])
@pytest.mark.parametrize("causal", [True, False])
def test_default_times_use_the_toeplitz_tables(switches, causal):
    """t = None (lag terms gathered from per-lag tables) equals t = arange(T) (lag terms
    evaluated per pair): outputs, weights and parameter gradients, float64, 1e-13."""
    q, k, v, _, freqs = _inputs(T=6, seed=11)
    results = []
    for t in (None, torch.arange(6, dtype=F64)):
        params = {x: y.clone().requires_grad_() if isinstance(y, torch.Tensor) else y
                  for x, y in PARAMS.items()}  # fmt: skip
        out = rt_rfa(q, k, v, t=t, frequencies=freqs, causal=causal, return_weights=True,
                     **switches, **params)  # fmt: skip
        grads = torch.autograd.grad(out.output.square().sum(), [params["decay"], params["nu"]])
        results.append((out.output, out.weights, *grads))
    for name, a, b in zip(("output", "weights", "d/d decay", "d/d nu"), *results, strict=True):
        assert_close(name, a, b, atol=1e-13)


@pytest.mark.parametrize(
    ("magnitude_precision", "eps", "default_times"),
    [(True, 1e-3, True), (True, 0.0, False), (False, 1e-3, False)],
)
def test_gradcheck_float64(magnitude_precision, eps, default_times):
    """Float64 gradcheck (B = 1, H = 2, T = 4, D = 4) through q, k, v, the decay, the variances,
    nu, the temperature and the frequencies: the directional precision (both kappa paths,
    default and irregular times) and the lag-only RT precision."""
    q, k, v, t, freqs = _inputs(B=1, H=2, T=4, D=4, seed=7)
    t = None if default_times else t[0]
    names = ["decay", "process_var", "measurement_var", "query_var", "nu", "temperature"]
    if not magnitude_precision:
        names += ["radial_process_var", "radial_measurement_var", "radial_query_var"]
    params = [PARAMS[x].clone() for x in names]
    inputs = [x.clone().requires_grad_() for x in (q, k, v, freqs, *params)]

    def f(q, k, v, freqs, *values):
        kw = dict(zip(names, values, strict=True))
        kw.update(angular_var=0.02, eps=eps, magnitude_precision=magnitude_precision)
        res = rt_rfa(q, k, v, t=t, frequencies=freqs, return_weights=True, **kw)
        return res.output, res.weights

    assert torch.autograd.gradcheck(f, inputs, atol=1e-7, rtol=1e-5, fast_mode=True)


def test_finite_at_long_sequences_in_float32():
    """T = 8192, one head, D = 4, float32, B = 1, all modifications on: outputs finite (decay
    0.05: e^{-2 mu tau} underflows to 0 past tau ~ 900 and m^2 + eps stays >= eps). Run once;
    the lag-only precision and the eps = 0 log-space path at T = 2048 (irregular times)."""
    g = torch.Generator().manual_seed(8)
    kw = {"decay": 0.05, "frequencies": torch.tensor([1.0, 0.01]), "process_var": 0.1,
          "measurement_var": 1.0, "query_var": 0.1, "angular_var": 0.01, "nu": 8.0}  # fmt: skip
    with torch.no_grad():
        q, k, v = (torch.randn(1, 1, 8192, 4, generator=g) for _ in range(3))
        assert torch.isfinite(rt_rfa(q, k, v, eps=1e-6, **kw).output).all()
        q, k, v = (x[..., :2048, :] for x in (q, k, v))
        t = torch.cumsum(0.5 + torch.rand(2048, generator=g), 0)
        for precision, eps in ((False, 1e-6), (True, 0.0)):
            out = rt_rfa(q, k, v, t=t, eps=eps, magnitude_precision=precision, **kw).output
            assert torch.isfinite(out).all()


@pytest.mark.parametrize("switches", [SWITCHES[0], SWITCHES[-1]], ids=["all-on", "all-off"])
def test_decay_to_zero_is_finite_and_continuous(switches):
    """decay = 0 exactly (phi(0, tau) = tau through the series branch) and 1e-9: finite outputs
    and gradients in float32 at T = 512, and float64 outputs differ by O(1e-9 T)."""
    q, k, v, _, freqs = _inputs(B=1, H=1, T=512, D=4, seed=9, dtype=torch.float32)
    kw = {**switches, "frequencies": freqs, "process_var": 0.1, "measurement_var": 1.0,
          "query_var": 0.1, "angular_var": 0.01, "eps": 1e-6, "nu": 8.0}  # fmt: skip
    decay = torch.tensor(0.0, requires_grad=True)
    out = rt_rfa(q, k, v, decay=decay, **kw).output
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(decay.grad)
    q64, k64, v64 = (x[..., :64, :].double() for x in (q, k, v))
    a = rt_rfa(q64, k64, v64, decay=0.0, **{**kw, "frequencies": freqs.double()}).output
    b = rt_rfa(q64, k64, v64, decay=1e-9, **{**kw, "frequencies": freqs.double()}).output
    assert (a - b).abs().max() < 1e-6


def test_clear_errors():
    q, k, v, t, freqs = _inputs(B=1, H=2, T=4, D=4)
    kw = {"decay": 0.1, "frequencies": freqs, "process_var": 0.1, "measurement_var": 0.5}
    cases = [
        ((q, k[..., :3, :], v), {}, "q and k must have equal shapes"),
        ((q[..., :3], k[..., :3], v[..., :3]), {}, "must be even"),
        ((q, k, v[..., :2]), {}, "v must have the feature size"),
        ((q, k, v), {"t": torch.tensor([0.0, 1.0, 1.0, 2.0])}, "strictly increasing"),
        ((q, k, v), {"t": torch.arange(5.0)}, "shape"),
        ((q, k, v), {"frequencies": freqs[:, :1]}, "frequencies must have shape"),
        ((q, k, v), {"decay": torch.tensor([0.1, 0.2, 0.3])}, "one per head"),
        ((q, k, v), {"process_var": -1.0}, "process_var must be >= 0"),
        ((q, k, v), {"measurement_var": 0.0}, "zero lag"),
        ((q, k, v), {"measurement_var": 0.0, "magnitude_precision": False}, "zero-lag variance"),
        ((q, k, v), {"nu": 0.0}, "nu must be > 0"),
        ((q, k, v), {"temperature": -1.0}, "temperature must be > 0"),
        ((q, k, v), {"eps": -1.0}, "eps must be finite"),
    ]
    for args, extra, message in cases:
        with pytest.raises(ValueError, match=message):
            rt_rfa(*args, **{**kw, **extra})
    with pytest.raises(TypeError, match="causal must be a bool"):
        rt_rfa(q, k, v, causal=1, **kw)
    with pytest.raises(TypeError, match="float64"):
        rt_rfa(q, k, v.float(), **kw)
    with pytest.raises(ValueError, match="divisible"):
        RTRobustFilterAttention(6, 4)
    with pytest.raises(ValueError, match="num_heads"):
        RTTransformerBlock(8, 0)
    with pytest.raises(ValueError, match="update must be one of"):
        RTTransformerBlock(8, 2, update="slerp")
    with pytest.raises(ValueError, match=r"\(B, T, 8\)"):
        RTRobustFilterAttention(8, 2)(torch.zeros(1, 3, 6))


# --------------------------------------------------------------------------------------------
# Modules
# --------------------------------------------------------------------------------------------


def _x(B=2, T=6, E=8, seed=10, dtype=torch.float32):
    return torch.randn(B, T, E, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("cls", [RTRobustFilterAttention, RTTransformerBlock])
@pytest.mark.parametrize("switches", [SWITCHES[0], SWITCHES[-1]], ids=["all-on", "all-off"])
def test_module_shapes_gradients_and_causality(cls, switches):
    """(B, T, E) -> (B, T, E) and (B, H, T, T) weights (rows sum to 1, None unless asked);
    every parameter receives a finite gradient, the learned per-head scalars a nonzero one;
    perturbing x at steps > i leaves outputs <= i unchanged."""
    g = torch.Generator().manual_seed(0)
    layer = cls(8, 2, generator=g, **switches)
    x = _x()
    out, weights = layer(x, need_weights=True)
    assert out.shape == (2, 6, 8) and weights.shape == (2, 2, 6, 6)
    assert_close("row sums", weights.sum(-1), torch.ones(2, 2, 6), atol=1e-5)
    assert layer(x)[1] is None
    out.pow(2).sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        if "raw_" in name:
            assert p.grad.abs().max() > 0, name
    x2 = x.clone()
    x2[:, 4:] += 5.0
    with torch.no_grad():
        assert_close("past", layer(x2)[0][:, :4], layer(x)[0][:, :4], atol=1e-6)


def test_module_time_shift_invariance_and_irregular_times():
    """Block output for (B, T) irregular times equals that for the times shifted by 100."""
    layer = RTTransformerBlock(8, 2, generator=torch.Generator().manual_seed(1), dtype=F64)
    x = _x(dtype=F64)
    g = torch.Generator().manual_seed(2)
    t = torch.cumsum(0.3 + torch.rand(2, 6, generator=g, dtype=F64), -1)
    with torch.no_grad():
        assert_close("shift", layer(x, t + 100)[0], layer(x, t)[0], atol=1e-10)


def test_generator_makes_initialisation_reproducible_without_global_rng():
    """Same generator seed -> identical parameters; the global RNG state is not touched."""
    state = torch.random.get_rng_state()
    a = RTTransformerBlock(8, 2, generator=torch.Generator().manual_seed(3))
    b = RTTransformerBlock(8, 2, generator=torch.Generator().manual_seed(3))
    assert torch.equal(torch.random.get_rng_state(), state)
    for (name, p), p2 in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, p2), name


def test_geodesic_update_is_the_exact_spherical_step():
    """``spherical_update(step="geodesic")`` = ``(|z| + u.d) geodesic_step(u, P_T d / |z|)``
    (`estimators.rt_irls.geodesic_step`, float64); it agrees with the additive step to first
    order: halving d divides the gap by 4 (measured ratio in [0.2, 0.3]). A zero state takes
    the first-order step."""
    g = torch.Generator().manual_seed(4)
    z = 3 * torch.randn(5, 6, generator=g, dtype=F64)
    d = torch.randn(5, 6, generator=g, dtype=F64)
    got = spherical_update(z, d, step="geodesic")
    m = z.norm(dim=-1, keepdim=True)
    u = z / m
    along = (u * d).sum(-1, keepdim=True)
    tangent = (d - along * u) / m
    expected = (m + along).numpy() * rti.geodesic_step(u.numpy(), tangent.numpy())
    assert_close("geodesic", got, torch.tensor(expected), atol=1e-12)
    gaps = [
        (spherical_update(z, s * d, step="geodesic") - (z + s * d)).norm(dim=-1)
        for s in (0.02, 0.01)
    ]
    ratio = gaps[1] / gaps[0]
    assert ((ratio > 0.2) & (ratio < 0.3)).all()
    assert torch.equal(spherical_update(z, d, step="first-order"), z + d)
    zero = torch.zeros(1, 6, dtype=F64)
    assert torch.equal(spherical_update(zero, d[:1], step="geodesic"), d[:1])


def test_geodesic_block_runs_and_differs_from_first_order():
    """The block with ``update="geodesic"`` gives finite outputs and gradients that differ from
    the first-order block with the same initialisation (second-order terms)."""
    blocks = [
        RTTransformerBlock(8, 2, update=u, generator=torch.Generator().manual_seed(5))
        for u in ("first-order", "geodesic")
    ]
    x = _x()
    outs = [b(x)[0] for b in blocks]
    outs[1].sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in blocks[1].parameters())
    assert (outs[0] - outs[1]).abs().max() > 1e-6

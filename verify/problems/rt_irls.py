"""Problems of the RT reference estimators (`estimators.rt_irls`; seed 000 5.3, seed 003 eqs.
10-16): random models, the per-query loop references that transport every key with `expm`, a dense
search on S^2, the fixed-point residual, measured orders of agreement and the mean-field
scenario, shared by `verify.checks.rt_irls` and the tests of `estimators.rt_irls`.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.linalg import expm

from estimators import rt_irls as rti
from estimators.rt_model import lag_variances
from sde_sim import EveryKSteps, RadialTangentialMeasurement, presets
from sde_sim.models import skew_from_vector

ALPHAS = 1e-2 * 2.0 ** -np.arange(5)


def random_problem(rng: np.random.Generator, B: int = 2, T: int = 6, *, missing: bool = False):
    """A random model, measurements (B, T, 3) near a rotating direction, and irregular times."""
    Omega = skew_from_vector(rng.uniform(-1.0, 1.0, 3))
    model = rti.RTModel(
        Omega,
        mu_r=rng.uniform(0.1, 0.5),
        mu_t=rng.uniform(0.1, 0.8),
        sigma_r=rng.uniform(0.1, 0.5),
        sigma_t=rng.uniform(0.1, 0.5),
        eta_r=rng.uniform(0.05, 0.3),
        eta_t=rng.uniform(0.05, 0.3),
        gamma_r=rng.uniform(0.0, 0.1),
        gamma_t=rng.uniform(0.0, 0.1),
    )
    t = np.cumsum(rng.uniform(0.05, 0.4, (B, T)), axis=1)
    base = rng.normal(size=(B, 1, 3))
    z = 2.0 * base / np.linalg.norm(base, axis=-1, keepdims=True) + 0.4 * rng.normal(size=(B, T, 3))
    mask = None
    if missing:
        mask = rng.random((B, T)) > 0.25
        mask[:, 0] = True
        z = np.where(mask[..., None], z, np.nan)
    return model, z, t, mask


def query_keys(model, z, t, mask, b, i, causal):
    """Observed keys of query i in sequence b: (j, s, rotation) with s = t_i - t_j."""
    T = z.shape[1]
    out = []
    for j in range(T):
        if (causal and j > i) or (mask is not None and not mask[b, j]):
            continue
        s = float(t[b, i] - t[b, j])
        out.append((j, s, _rotation(tuple(np.asarray(model.Omega, dtype=float).ravel()), s)))
    return out


@functools.lru_cache(maxsize=4096)
def _rotation(omega: tuple, s: float) -> np.ndarray:
    """``expm(Omega s)`` (cached: the references revisit every pair)."""
    d = int(round(len(omega) ** 0.5))
    return expm(np.array(omega).reshape(d, d) * s)


def _variances(model, s):
    v = lag_variances(model, s)
    return float(v.radial), float(v.tangential)


def reference_directional(
    model,
    z,
    t,
    anchors=None,
    *,
    nu=np.inf,
    exponent=1.0,
    tau_theta=0.0,
    eps=0.0,
    causal=True,
    mask=None,
):
    """Loop reference of eqs. 10, 11, 13, 14: ``(u_bar (B,T,d), kappa (B,T,T), w (B,T,T))``.

    ``anchors=None`` gives the MLE (all weights 1).
    """
    B, T, d = z.shape
    u_bar, kappa, w = np.zeros((B, T, d)), np.zeros((B, T, T)), np.zeros((B, T, T))
    q = model.eta_t**2 + model.gamma_t**2
    for b in range(B):
        for i in range(T):
            num, den = np.zeros(d), 0.0
            for j, s, R in query_keys(model, z, t, mask, b, i, causal):
                m_j = np.linalg.norm(z[b, j])
                u_hat = R @ (z[b, j] / m_j)
                m_hat = m_j * np.exp(-model.mu_r * s)
                var = _variances(model, s)[1] / (m_hat**2 + eps) + tau_theta**2
                if mask is None or mask[b, i]:
                    var += q / (np.linalg.norm(z[b, i]) ** 2 + eps)
                k = 1.0 / var
                wt = 1.0
                if anchors is not None and np.isfinite(nu):
                    a = anchors[b, i] / np.linalg.norm(anchors[b, i])
                    wt = (1.0 + 2.0 * k * (1.0 - a @ u_hat) / nu) ** -exponent
                kappa[b, i, j], w[b, i, j] = k, wt
                num += wt * k * u_hat
                den += wt * k
            u_bar[b, i] = num / den
    return u_bar, kappa, w


def reference_rt_irls(
    model,
    z,
    t,
    *,
    nu_r=np.inf,
    nu_t=np.inf,
    step="geodesic",
    damping=0.0,
    init="mle",
    iterations=5,
    causal=True,
    mask=None,
):
    """Loop reference of seed 000 5.3 (module docstring of `estimators.rt_irls`), per query.

    Runs exactly `iterations` iterations; returns (magnitudes (B, T), directions (B, T, d)).
    """
    B, T, d = z.shape
    mags, dirs = np.zeros((B, T)), np.zeros((B, T, d))
    for b in range(B):
        for i in range(T):
            keys = [
                (np.exp(-model.mu_r * s) * R @ z[b, j], *_variances(model, s))
                for j, s, R in query_keys(model, z, t, mask, b, i, causal)
            ]
            y = sum(zh / bt for zh, _, bt in keys)
            u = y / np.linalg.norm(y)
            m = sum((u @ zh) / a for zh, a, _ in keys) / sum(1 / a for _, a, _ in keys)
            if init == "query" and (mask is None or mask[b, i]):
                m, u = np.linalg.norm(z[b, i]), z[b, i] / np.linalg.norm(z[b, i])
            for _ in range(iterations):
                num_r = den_r = 0.0
                num_t, den_t = np.zeros(d), 0.0
                for zh, a, bt in keys:
                    c = u @ zh
                    w_r = 1.0 / (1.0 + (m - c) ** 2 / (nu_r * a))
                    w_t = 1.0 / (1.0 + (zh @ zh - c**2) / (nu_t * bt))
                    num_r += w_r * c / a
                    den_r += w_r / a
                    num_t += w_t * zh / bt
                    den_t += w_t / bt
                new_m = num_r / den_r
                v = num_t / den_t
                v = (v - (u @ v) * u) / abs(m)
                n = np.linalg.norm(v)
                if step == "geodesic":
                    new_u = np.cos(n) * u + (np.sin(n) / n * v if n > 0 else 0.0)
                else:
                    new_u = (u + v) / np.linalg.norm(u + v)
                x = damping * m * u + (1 - damping) * new_m * new_u
                sign = -1.0 if x @ new_u < 0 else 1.0
                m, u = sign * np.linalg.norm(x), sign * x / np.linalg.norm(x)
            mags[b, i], dirs[b, i] = m, u
    return mags, dirs


def fibonacci_sphere(n: int) -> np.ndarray:
    """``n`` nearly uniform points on S^2 (spacing about ``sqrt(4 pi / n)``)."""
    k = np.arange(n) + 0.5
    z = 1.0 - 2.0 * k / n
    phi = np.pi * (1.0 + 5.0**0.5) * k
    r = np.sqrt(1.0 - z * z)
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=-1)


def sphere_search(kappa: np.ndarray, u_hat: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """Maximise ``u . sum_j kappa_j u_hat_j`` on S^2: dense grid, then projected gradient ascent.

    Returns the ascent's end point and the grid's best value. Ascent step ``u <- Norm(u +
    h P_T(u) g)`` with ``h = 0.5/|g|`` (``g`` the constant Euclidean gradient).
    """
    g = kappa @ u_hat
    grid = fibonacci_sphere(n)
    values = grid @ g
    u = grid[np.argmax(values)]
    for _ in range(200):
        u = u + 0.5 / np.linalg.norm(g) * (g - (u @ g) * u)
        u /= np.linalg.norm(u)
    return u, float(values.max())


def rt_fixed_point_residual(model, z, t, mags, dirs, nu_r, nu_t) -> float:
    """Relative residuals of the two weighted least-squares conditions at ``(m, u)`` (loops)."""
    worst = 0.0
    B, T, _ = z.shape
    for b in range(B):
        for i in range(T):
            m, u = mags[b, i], dirs[b, i]
            num_r = den_r = 0.0
            y = np.zeros(3)
            for j, s, R in query_keys(model, z, t, None, b, i, True):
                zh = np.exp(-model.mu_r * s) * R @ z[b, j]
                a, bt = _variances(model, s)
                c = u @ zh
                w_r = 1.0 / (1.0 + (m - c) ** 2 / (nu_r * a))
                w_t = 1.0 / (1.0 + (zh @ zh - c**2) / (nu_t * bt))
                num_r, den_r = num_r + w_r * c / a, den_r + w_r / a
                y += w_t * zh / bt
            radial = abs(m - num_r / den_r) / abs(m)
            tangential = np.linalg.norm(y - (u @ y) * u) / np.linalg.norm(y)
            worst = max(worst, radial, tangential)
    return worst


def measured_order(errors: np.ndarray, alphas: np.ndarray = ALPHAS) -> float:
    """Least-squares slope of ``log(error)`` against ``log(alpha)``."""
    return float(np.polyfit(np.log(alphas), np.log(errors), 1)[0])


def mean_field_scenario(eta_t: float = 0.1, every: int = 2, n_steps: int = 100):
    """`rt-sphere-3d` (variant b) measured with tangential noise `eta_t` every `every` steps.

    With ``eta_t = 0.05`` and a measurement every 10 steps the whole window is in the
    process-noise-dominated regime, where every error is large and the small-angle prediction
    below does not apply (angles of 0.5 rad over the window).
    """
    sc = presets.get("rt-sphere-3d").scenario("b")
    return sc.replace(
        measurement=RadialTangentialMeasurement(eta_r=sc.measurement.eta_r, eta_t=eta_t),
        observations=EveryKSteps(every),
        n_steps=n_steps,
    )

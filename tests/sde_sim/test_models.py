"""Systems, measurements and constructors: algebra, eigen-data and the errors on bad input."""

import numpy as np
import pytest

from sde_sim import (
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    SphericalShellInitial,
    UnstableSystemWarning,
)
from sde_sim._record import record_from_dict
from sde_sim.models import (
    covariance_from_eigen,
    isotropic_sde,
    real_from_eigen,
    rotation_generator,
    skew_from_vector,
    spherical_exp,
    unit_rows,
)
from sde_sim.presets import AFA_BASIS, AFA_EIGENVALUES

# --- linear SDE -----------------------------------------------------------------------------


def test_afa_eigen_data_give_the_matrix_the_seed_computes():
    # Seed 000 section 4.2: S diag(-0.1-i, -0.1+i) S^-1; the RFA digest notes the demo's
    # comment names a different matrix, this is the one the eigen-data produce.
    A = real_from_eigen(AFA_EIGENVALUES, AFA_BASIS)
    np.testing.assert_allclose(A, [[0.9, -2.0], [1.0, -1.1]], atol=1e-14)
    np.testing.assert_allclose(np.sort_complex(np.linalg.eigvals(A)), AFA_EIGENVALUES, atol=1e-12)


def test_eigen_data_that_cannot_give_a_real_matrix_are_rejected():
    with pytest.raises(ValueError, match="conjugate pairs"):
        real_from_eigen([-0.1 - 1j, -0.2 + 1j], AFA_BASIS)
    unpaired = np.array([[1 - 1j, 1 + 2j], [1, 1]])  # second column is not the first's conjugate
    with pytest.raises(ValueError, match="real A"):
        real_from_eigen(AFA_EIGENVALUES, unpaired)
    with pytest.raises(ValueError, match="invertible"):
        real_from_eigen([-1, -2], [[1, 1], [1, 1]])


def test_simultaneously_diagonalizable_covariance():
    Q = covariance_from_eigen(AFA_BASIS, [0.3, 0.3])
    np.testing.assert_allclose(Q, 0.3 * (AFA_BASIS @ AFA_BASIS.conj().T).real, atol=1e-14)
    # In the eigenbasis S^-1 Q S^-H is the diagonal it was built from.
    Sinv = np.linalg.inv(AFA_BASIS)
    np.testing.assert_allclose(Sinv @ Q @ Sinv.conj().T, 0.3 * np.eye(2), atol=1e-14)
    with pytest.raises(ValueError, match="equal variances"):
        covariance_from_eigen(AFA_BASIS, [0.3, 0.5])
    with pytest.raises(ValueError, match=">= 0"):
        covariance_from_eigen(AFA_BASIS, [-0.3, -0.3])


@pytest.mark.parametrize("d", [2, 3, 5])
def test_isotropic_family_any_dimension(d):
    rng = np.random.default_rng(d)
    M = rng.normal(size=(d, d))
    Omega = M - M.T
    sde = isotropic_sde(-0.2, Omega, 0.4)
    np.testing.assert_allclose(sde.A + sde.A.T, -0.4 * np.eye(d), atol=1e-14)
    np.testing.assert_allclose(sde.Q, 0.4 * np.eye(d), atol=1e-14)
    # Every eigenvalue has real part alpha: decay is isotropic, the skew part only rotates.
    np.testing.assert_allclose(np.linalg.eigvals(sde.A).real, -0.2, atol=1e-12)
    with pytest.raises(ValueError, match="skew-symmetric"):
        isotropic_sde(-0.2, M, 0.4)


def test_3d_generator_is_a_rotation_about_its_axis():
    w = np.array([0.3, -1.0, 2.0])
    Om = skew_from_vector(w)
    v = np.array([1.0, 0.5, -0.2])
    np.testing.assert_allclose(Om @ v, np.cross(w, v), atol=1e-15)
    np.testing.assert_allclose(Om @ w, 0.0, atol=1e-15)
    R = rotation_generator([1.0, 3.0])
    np.testing.assert_allclose(R, -R.T)
    np.testing.assert_allclose(np.sort(np.abs(np.linalg.eigvals(R).imag)), [1, 1, 3, 3])


def test_q_and_g_constructors_agree():
    Q = np.array([[2.0, 0.5], [0.5, 1.0]])
    sde = LinearSDE.from_covariance(np.diag([-1.0, -2.0]), Q)
    np.testing.assert_allclose(sde.Q, Q, atol=1e-14)
    singular = LinearSDE.from_covariance(-np.eye(2), [[1.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(singular.Q, [[1, 0], [0, 0]], atol=1e-15)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"A": [[1.0, 2.0, 3.0]], "G": np.eye(1)}, r"A must be square, got shape \(1, 3\)"),
        ({"A": [[np.nan, 0], [0, -1]], "G": np.eye(2)}, "A has 1 NaN or infinite entry"),
        ({"A": -np.eye(2), "G": np.eye(3)}, "G must have 2 rows"),
        ({"A": -np.eye(2), "G": np.eye(2), "u": [1.0]}, r"u must have shape \(2,\)"),
        ({"A": "abc", "G": np.eye(2)}, "A must be numeric"),
    ],
)
def test_linear_sde_bad_input_names_the_argument(kwargs, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        LinearSDE(**kwargs)


def test_non_psd_covariances_name_the_matrix_and_smallest_eigenvalue():
    with pytest.raises(ValueError, match=r"Q must be positive semidefinite; .* -1"):
        LinearSDE.from_covariance(-np.eye(2), [[1.0, 0.0], [0.0, -1.0]])
    with pytest.raises(ValueError, match=r"R must be positive semidefinite; .* -0.5"):
        LinearMeasurement(np.eye(2), [[0.5, 1.0], [1.0, 0.5]])
    with pytest.raises(ValueError, match="R must be symmetric"):
        LinearMeasurement(np.eye(2), [[1.0, 0.2], [0.0, 1.0]])


def test_unstable_drift_is_allowed_but_warned_about():
    with pytest.warns(UnstableSystemWarning, match="largest real part .* 0.5"):
        sde = LinearSDE(np.diag([0.5, -1.0]), np.eye(2))
    assert sde.dim == 2
    # A pure rotation (eigenvalues on the imaginary axis) is not unstable.
    LinearSDE(skew_from_vector([0, 0, 2.0]), np.eye(3))


def test_records_are_read_only_and_round_trip():
    sde = LinearSDE(np.diag([-1.0, -2.0]), np.eye(2), [0.5, 0.0])
    with pytest.raises(ValueError):
        sde.A[0, 0] = 3.0
    for record in (
        sde,
        LinearMeasurement(np.eye(2), np.eye(2), b=[1.0, 2.0], delay=0.3),
        RadialTangentialSDE(skew_from_vector([0, 0, 1.0]), 0.3, 0.8, 0.1, 0.2, mode="frozen-frame"),
        RadialTangentialMeasurement(0.1, 0.2, model="geodesic"),
        GaussianInitial([1.0, 2.0], np.eye(2)),
        SphericalShellInitial(3, 1.0, 2.0),
    ):
        again = record_from_dict(record.to_dict())
        assert type(again) is type(record)
        assert again.to_dict() == record.to_dict()


# --- radial-tangential ----------------------------------------------------------------------


def _rt(mode="literal", **kw):
    params = {"mu_r": 0.3, "mu_t": 0.8, "sigma_r": 0.5, "sigma_t": 0.2}
    params.update(kw)
    return RadialTangentialSDE(skew_from_vector([0.2, -0.4, 0.9]), mode=mode, **params)


def test_literal_drift_equals_the_projector_form():
    # Seed 003 eq. 3 with u = x/|x|: (-mu_r P_R - mu_t P_T + Omega) x. P_T(u) x = 0, so the
    # implementation's (-mu_r I + Omega) x must agree to round-off whatever mu_t is.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 3)) * 3
    for mu_t in (0.0, 0.8, 5.0):
        sde = _rt(mu_t=mu_t)
        u = unit_rows(x)
        PR = np.einsum("pi,pj->pij", u, u)
        PT = np.eye(3) - PR
        generator = -sde.mu_r * PR - mu_t * PT + sde.Omega
        expected = np.einsum("pij,pj->pi", generator, x)
        np.testing.assert_allclose(sde.drift(0.0, x), expected, atol=1e-13)


def test_rt_diffusion_covariance_is_radial_plus_tangential():
    # G(u) G(u)^T = sigma_r^2 P_R + sigma_t^2 P_T (seed 003 C2): apply G to the identity columns.
    sde = _rt()
    x = np.array([[1.0, -2.0, 0.5]])
    G = np.stack([sde.diffusion(0.0, x, e[None])[0] for e in np.eye(3)], axis=1)
    u = x[0] / np.linalg.norm(x[0])
    expected = sde.sigma_r**2 * np.outer(u, u) + sde.sigma_t**2 * (np.eye(3) - np.outer(u, u))
    np.testing.assert_allclose(G @ G.T, expected, atol=1e-15)


def test_frozen_frame_transports_the_frame_by_the_rotation():
    sde = _rt(mode="frozen-frame")
    u0 = unit_rows(np.array([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0]]))
    frame = sde.frozen_frame(1.0, u0)
    from scipy.linalg import expm

    np.testing.assert_allclose(frame.direction(3.5), u0 @ expm(sde.Omega * 2.5).T, atol=1e-14)
    # Along the nominal direction the drift is radial decay plus rotation.
    x = 2.0 * frame.direction(3.5)
    np.testing.assert_allclose(frame.drift(3.5, x), x @ sde.Omega.T - sde.mu_r * x, atol=1e-14)


def test_rt_measurement_models():
    meas = RadialTangentialMeasurement(eta_r=0.0, eta_t=0.1, model="geodesic")
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 3)) * 4
    z = meas.observe(x, unit_rows(x), rng.normal(size=(200, 3)))
    # Geodesic model without radial noise keeps the magnitude exactly.
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), np.linalg.norm(x, axis=1), rtol=1e-13)
    u = unit_rows(x[:1])
    v = np.array([[0.0, 0.0, 0.0]])
    np.testing.assert_allclose(spherical_exp(u, v), u)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"Omega": np.ones((3, 3))}, "Omega must be skew-symmetric"),
        ({"Omega": np.zeros((1, 1))}, "at least 2x2"),
        ({"sigma_t": -0.1}, "sigma_t must be >= 0"),
        ({"mode": "frozen"}, "mode must be one of 'literal', 'frozen-frame'"),
        ({"basis": np.zeros((3, 3))}, "basis must be invertible"),
        ({"mu_r": float("nan")}, "mu_r must be finite"),
    ],
)
def test_rt_bad_input(kwargs, pattern):
    params = {
        "Omega": skew_from_vector([0, 0, 1.0]),
        "mu_r": 0.3,
        "mu_t": 0.3,
        "sigma_r": 0.1,
        "sigma_t": 0.1,
    }
    params.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=pattern):
        RadialTangentialSDE(**params)


def test_initial_states():
    rng = np.random.default_rng(0)
    shell = SphericalShellInitial(3, 2.0, 3.0).sample(rng, 1000)
    r = np.linalg.norm(shell, axis=1)
    assert r.min() >= 2.0 and r.max() <= 3.0
    fixed = GaussianInitial([1.0, 2.0]).sample(rng, 3)
    np.testing.assert_array_equal(fixed, [[1, 2]] * 3)
    with pytest.raises(ValueError, match="r_max must be >= r_min"):
        SphericalShellInitial(2, 3.0, 1.0)

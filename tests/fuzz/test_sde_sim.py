"""Fuzz the simulator's public API (`sde_sim` and its documented modules): constructors of systems,
measurements, initial laws, schedules and grids, the samplers, `simulate`, presets and datasets
(`verify.datasets`). One raw input spoilt at a time under the error contract; valid inputs
checked against references (closed forms, ``scipy.linalg.expm``/Van Loan, an explicit Euler
loop, and the same seed giving the same bits)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import strategies as st
from scipy.linalg import expm

import sde_sim
from sde_sim import (
    ArrayNoise,
    BrownianPath,
    Contamination,
    EveryKSteps,
    FixedTimes,
    GaussianInitial,
    LinearMeasurement,
    LinearSDE,
    PoissonTimes,
    RadialTangentialMeasurement,
    RadialTangentialSDE,
    Scenario,
    SphericalShellInitial,
    TimeGrid,
    presets,
)
from sde_sim.models import (
    covariance_from_eigen,
    isotropic_sde,
    real_from_eigen,
    rotation_generator,
    skew_from_vector,
)
from tests import strategies as S
from tests.fuzz.contract import expect, naming
from verify import datasets


def close(a, b, tol=1e-9, what=""):
    a, b = np.asarray(a), np.asarray(b)
    scale = 1.0 + np.max(np.abs(b), initial=0.0)
    err = np.max(np.abs(a - b), initial=0.0)
    assert err <= tol * scale, f"{what}: max error {err:.3g}"


def spoil_one(draw, raw: dict, scalars=(), p=0.8, keep=()):
    """Spoil one entry of `raw` (in place) with probability `p`; return (name, kind)."""
    if draw(st.floats(0, 1)) >= p:
        return None, None
    name = draw(st.sampled_from(sorted(n for n in raw if n not in keep)))
    if name in scalars or np.ndim(raw[name]) == 0 and not isinstance(raw[name], np.ndarray):
        kind, raw[name] = "scalar", draw(S.scalar_spoils())
    else:
        kind, raw[name] = draw(S.spoilt(raw[name]))
    return name, kind


def describe(name, kind):
    return f"{name} spoilt ({kind})" if name else "valid"


@st.composite
def model_raw(draw):
    A = draw(S.hurwitz_matrices(dims=st.integers(1, 3)))
    d = A.shape[0]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    k = draw(st.integers(1, 3))
    raw = {
        "A": A,
        "Q": draw(S.spd_matrices(d)),
        "u": rng.normal(size=d),
        "C": rng.normal(size=(k, d)),
        "R": draw(S.spd_matrices(k)),
        "b": rng.normal(size=k),
        "delay": draw(st.sampled_from([0.0, 0.1])),
    }
    name, kind = spoil_one(draw, raw, scalars=("delay",))
    return raw, name, kind


def test_linear_sde_and_measurement(fuzz):
    def body(case):
        raw, name, kind = case

        def call():
            sde = LinearSDE.from_covariance(raw["A"], raw["Q"], raw["u"])
            meas = LinearMeasurement(raw["C"], raw["R"], raw["b"], raw["delay"])
            return sde.A, sde.Q, sde.u, meas.C, meas.R, meas.b, meas.delay

        def reference(r):
            close(r[1], raw["Q"], what="G G^T = Q")

        expect(
            "sde_sim.LinearSDE+LinearMeasurement",
            call,
            names=naming(
                name,
                kind,
                {},
                {
                    "A": ("Q", "u"),
                    "Q": ("A",),
                    "u": ("A",),
                    "C": ("R", "b"),
                    "R": ("C",),
                    "b": ("C",),
                },
            ),
            valid=name is None,
            reference=reference if name is None else None,
            describe=describe(name, kind),
        )

    fuzz.run("linear_sde", model_raw(), body, ci=40, slow=400)


@st.composite
def eigen_raw(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a, w = rng.uniform(0.1, 1.0), rng.uniform(0.1, 2.0)
    s = rng.normal(size=2) + 1j * rng.normal(size=2)
    raw = {
        "eigenvalues": np.array([-a - 1j * w, -a + 1j * w]),
        "S": np.stack([s, s.conj()], axis=1),
        "variances": np.full(2, rng.uniform(0.1, 1)),
        "omega": rng.normal(size=3),
        "frequencies": rng.normal(size=draw(st.integers(1, 3))),
        "alpha": -a,
        "sigma2": rng.uniform(0.0, 1.0),
    }
    which = draw(
        st.sampled_from(
            [
                "real_from_eigen",
                "covariance_from_eigen",
                "skew_from_vector",
                "rotation_generator",
                "isotropic_sde",
            ]
        )
    )
    uses = {
        "real_from_eigen": ("eigenvalues", "S"),
        "covariance_from_eigen": ("S", "variances"),
        "skew_from_vector": ("omega",),
        "rotation_generator": ("frequencies",),
        "isotropic_sde": ("alpha", "omega", "sigma2"),
    }[which]
    name = kind = None
    if draw(st.floats(0, 1)) < 0.8:
        name = draw(st.sampled_from(uses))
        if name in ("alpha", "sigma2"):
            kind, raw[name] = "scalar", draw(S.scalar_spoils())
        else:
            value = raw[name]
            kind, raw[name] = draw(S.spoilt(value.real if name != "eigenvalues" else value.real))
            if name == "S" and kind in ("huge", "tiny", "negative", "zero"):
                raw[name] = raw[name] + 0j
    return raw, which, name, kind


def test_eigen_constructors(fuzz):
    def body(case):
        raw, which, name, kind = case
        calls = {
            "real_from_eigen": lambda: real_from_eigen(raw["eigenvalues"], raw["S"]),
            "covariance_from_eigen": lambda: covariance_from_eigen(raw["S"], raw["variances"]),
            "skew_from_vector": lambda: skew_from_vector(raw["omega"]),
            "rotation_generator": lambda: rotation_generator(raw["frequencies"]),
            "isotropic_sde": lambda: (
                isotropic_sde(raw["alpha"], skew_from_vector(raw["omega"]), raw["sigma2"]).A
            ),
        }

        def reference(r):
            if which == "real_from_eigen":
                S_ = raw["S"]
                close(r, (S_ @ np.diag(raw["eigenvalues"]) @ np.linalg.inv(S_)).real)
            elif which == "covariance_from_eigen":
                close(r, (raw["S"] @ np.diag(raw["variances"]) @ raw["S"].conj().T).real)
            elif which == "skew_from_vector":
                v = np.random.default_rng(0).normal(size=3)
                close(r @ v, np.cross(raw["omega"], v))
            elif which == "rotation_generator":
                close(r, -r.T)
            else:
                close(np.linalg.eigvals(r).real, np.full(3, raw["alpha"]))

        names = naming(
            name,
            kind,
            {"omega": ("omega", "Omega")},
            {"S": ("eigenvalues", "variances"), "eigenvalues": ("S",), "variances": ("S",)},
        )
        expect(
            f"sde_sim.models.{which}",
            calls[which],
            names=names,
            valid=name is None,
            reference=reference if name is None else None,
            describe=describe(name, kind),
        )

    fuzz.run("eigen_constructors", eigen_raw(), body, ci=40, slow=400)


def _van_loan(A, Q, u, h):
    d = A.shape[0]
    M = np.zeros((2 * d, 2 * d))
    M[:d, :d], M[:d, d:], M[d:, d:] = -A, Q, A.T
    E = expm(M * h)
    Phi = E[d:, d:].T
    Qd = Phi @ E[:d, d:]
    N = np.zeros((d + 1, d + 1))
    N[:d, :d], N[:d, d] = A, u
    offset = expm(N * h)[:d, d]
    return Phi, 0.5 * (Qd + Qd.T), offset


def test_linear_transition_is_van_loan(fuzz):
    @st.composite
    def cases(draw):
        raw, name, kind = draw(model_raw())
        h = np.abs(draw(S.small_arrays((draw(st.integers(1, 4)),)))) + 0.01
        raw["h"] = h
        if name is None and draw(st.floats(0, 1)) < 0.5:
            kind, raw["h"] = draw(S.spoilt(h))
            name = "h"
        return raw, name, kind

    def body(case):
        raw, name, kind = case

        def call():
            return sde_sim.linear_transition(
                LinearSDE.from_covariance(raw["A"], raw["Q"], raw["u"]), raw["h"]
            )

        def reference(r):
            for j, h in enumerate(raw["h"]):
                Phi, Qd, offset = _van_loan(raw["A"], raw["Q"], raw["u"], h)
                close(r.Phi[j], Phi, 1e-8, "Phi")
                close(r.Qd[j], Qd, 1e-8, "Qd")
                close(r.offset[j], offset, 1e-8, "offset")

        valid = name is None or name in ("C", "R", "b", "delay")
        expect(
            "sde_sim.linear_transition",
            call,
            names=(name,) if name in ("A", "Q", "u", "h") else (),
            valid=valid,
            reference=reference if valid else None,
            describe=describe(name, kind),
        )

    fuzz.run("linear_transition", cases(), body, ci=30, slow=300)


@st.composite
def sampler_cases(draw):
    raw, name, kind = draw(model_raw())
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d = np.shape(raw["A"])[0] if name != "A" else 1
    P, K = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    raw["x0"] = rng.normal(size=(P, d if name != "A" else np.shape(raw["Q"])[0]))
    raw["dt"] = draw(st.sampled_from([0.01, 0.1]))
    raw["K"] = K
    if name is None and draw(st.floats(0, 1)) < 0.6:
        name = draw(st.sampled_from(["x0", "dt"]))
        if name == "dt":
            kind, raw["dt"] = "scalar", draw(S.scalar_spoils())
        else:
            kind, raw["x0"] = draw(S.spoilt(raw["x0"]))
    return raw, name, kind, draw(st.sampled_from(["euler", "exact"])), draw(st.booleans())


def test_samplers_equal_explicit_recursions(fuzz):
    """`simulate_euler`/`simulate_exact` on `ArrayNoise`: with zero noise against the explicit
    recursions ``x + (A x + u) h`` and ``e^{A h} x + offset``; with noise, Euler against
    `euler_maruyama_step` in a loop."""

    def body(case):
        raw, name, kind, method, noisy = case

        def call():
            sde = LinearSDE.from_covariance(raw["A"], raw["Q"], raw["u"])
            grid = TimeGrid.uniform(raw["dt"], raw["K"])
            x0 = raw["x0"]
            dim = sde.noise_dim if method == "euler" else sde.dim
            P = np.shape(x0)[0] if np.ndim(x0) == 2 else 1
            inc = (
                np.random.default_rng(1).normal(size=(raw["K"], P, dim))
                * math.sqrt(raw["dt"])
                * noisy
            )
            noise = ArrayNoise(inc, grid)
            sampler = sde_sim.simulate_euler if method == "euler" else sde_sim.simulate_exact
            return sampler(sde, x0, noise), sde, inc

        def reference(r):
            path, sde, inc = r
            x = np.asarray(raw["x0"], float)
            h = raw["dt"]
            maps = sde_sim.linear_transition(sde, np.array([h]))
            for k in range(raw["K"]):
                if method == "euler":
                    x = sde_sim.euler_maruyama_step(sde, k * h, x, h, inc[k])
                elif not noisy:
                    x = x @ maps.Phi[0].T + maps.offset[0]
                else:
                    return
                close(path[:, k + 1], x, 1e-9, f"step {k + 1}")

        names = {"x0": ("x0",), "dt": ("dt",)}.get(name, (name,) if name else ())
        valid = name is None or name in ("C", "R", "b", "delay")
        expect(
            f"sde_sim.simulate_{method}",
            lambda: call(),
            names=names,
            valid=valid,
            finite=lambda r: [("path", r[0])],
            reference=reference if valid else None,
            describe=describe(name, kind),
        )

    fuzz.run("samplers", sampler_cases(), body, ci=40, slow=450)


@st.composite
def grid_cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, 6))
    steps = rng.uniform(0.01, 0.5, size=n)
    raw = {
        "t": np.concatenate([[0.0], np.cumsum(steps)]),
        "steps": steps,
        "dt": 0.1,
        "n_steps": n,
        "t0": 0.0,
        "n_paths": 2,
        "dim": 2,
        "seed": 3,
    }
    name, kind = spoil_one(draw, raw, scalars=("dt", "n_steps", "t0", "n_paths", "dim", "seed"))
    which = draw(st.sampled_from(["TimeGrid", "TimeGrid.uniform", "BrownianPath"]))
    return raw, name, kind, which


def test_time_grids_and_brownian_paths(fuzz):
    def body(case):
        raw, name, kind, which = case

        def call():
            if which == "TimeGrid":
                return TimeGrid(raw["t"], raw["steps"]).t
            grid = TimeGrid.uniform(raw["dt"], raw["n_steps"], raw["t0"])
            if which == "TimeGrid.uniform":
                return grid.t
            path = BrownianPath(raw["seed"], grid, raw["n_paths"], raw["dim"])
            return path.increments()

        def reference(r):
            if which == "BrownianPath":
                again = BrownianPath(
                    raw["seed"],
                    TimeGrid.uniform(raw["dt"], raw["n_steps"]),
                    raw["n_paths"],
                    raw["dim"],
                ).increments()
                assert np.array_equal(r, again), "same seed, different bits"

        used = {"TimeGrid": ("t", "steps"), "TimeGrid.uniform": ("dt", "n_steps", "t0")}.get(
            which, ("dt", "n_steps", "t0", "n_paths", "dim", "seed")
        )
        relevant = name in used
        expect(
            f"sde_sim.{which}",
            call,
            names=naming(
                name, kind, {"steps": ("steps", "step")}, {"t": ("steps",), "steps": ("t",)}
            )
            if relevant
            else (),
            valid=not relevant,
            reference=reference if not relevant else None,
            describe=describe(name, kind),
        )

    fuzz.run("grids", grid_cases(), body, ci=40, slow=400)


# ---- scenarios and `simulate` ------------------------------------------------------------------


@st.composite
def scenario_cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    raw = {
        "A": np.array([[-0.5, -1.0], [1.0, -0.5]]),
        "Q": 0.2 * np.eye(2),
        "R": 0.3 * np.eye(2),
        "mean": rng.normal(size=2),
        "cov": 0.1 * np.eye(2),
        "dt": 0.05,
        "n_steps": draw(st.integers(1, 30)),
        "every": draw(st.integers(1, 5)),
        "rate": 4.0,
        "times": np.sort(rng.uniform(0.0, 0.5, size=3)),
        "outlier_fraction": draw(st.sampled_from([0.0, 0.2])),
        "missing_fraction": draw(st.sampled_from([0.0, 0.2])),
        "t0": 0.0,
        "n_paths": draw(st.integers(1, 3)),
        "seed": draw(st.integers(0, 5)),
        "method": draw(st.sampled_from(["euler", "exact"])),
        "dtype": draw(st.sampled_from(["float64", "float32"])),
        "meta": {"note": "fuzz"},
    }
    raw["times"] = raw["times"] * raw["n_steps"] * raw["dt"] / 0.5
    schedule = draw(st.sampled_from(["every", "rate", "times"]))
    name = kind = None
    if draw(st.floats(0, 1)) < 0.8:
        name = draw(
            st.sampled_from([n for n in raw if n not in ("every", "rate", "times")] + [schedule])
        )
        if name in ("method", "dtype"):
            kind, raw[name] = "choice", draw(st.sampled_from(["", "EULER", "float16", None, 3]))
        elif name == "meta":
            kind, raw[name] = (
                "meta",
                draw(
                    st.sampled_from(
                        [[1, 2], "x", {"seed": 7}, {"n_paths": 1}, {1: 2}, {"x": object()}]
                    )
                ),
            )
        elif np.ndim(raw[name]) == 0:
            kind, raw[name] = "scalar", draw(S.scalar_spoils(extra=(10**12, 2.5, -3)))
        else:
            kind, raw[name] = draw(S.spoilt(raw[name]))
    return raw, schedule, name, kind


def _scenario(raw, schedule):
    observations = {
        "every": lambda: EveryKSteps(raw["every"]),
        "rate": lambda: PoissonTimes(raw["rate"]),
        "times": lambda: FixedTimes(raw["times"]),
    }[schedule]()
    return Scenario(
        LinearSDE.from_covariance(raw["A"], raw["Q"]),
        LinearMeasurement(np.eye(2), raw["R"]),
        GaussianInitial(raw["mean"], raw["cov"]),
        dt=raw["dt"],
        n_steps=raw["n_steps"],
        observations=observations,
        contamination=Contamination(
            outlier_fraction=raw["outlier_fraction"], missing_fraction=raw["missing_fraction"]
        ),
        t0=raw["t0"],
    )


def test_simulate_same_seed_same_bits(fuzz):
    def body(case):
        raw, schedule, name, kind = case

        def call():
            return sde_sim.simulate(
                _scenario(raw, schedule),
                raw["n_paths"],
                seed=raw["seed"],
                method=raw["method"],
                dtype=raw["dtype"],
                meta=raw["meta"],
            )

        def reference(sim):
            again = call()
            for field in ("t", "x", "t_obs", "z", "x_obs", "outlier", "missing"):
                a, b = getattr(sim, field), getattr(again, field)
                assert np.array_equal(a, b, equal_nan=True), f"{field}: same seed, other bits"
            assert sim.meta["seed"] == raw["seed"] and sim.meta["n_paths"] == raw["n_paths"]

        # mean and cov are checked against each other: a shape clash may name either
        names = {
            "mean": ("mean", "cov"),
            "cov": ("cov",),
            "every": ("every",),
            "rate": ("rate",),
            "times": ("times",),
            "meta": ("meta",),
        }.get(name, (name,) if name else ())
        # an absurd size (10**12 steps or paths) may be refused by numpy's allocator at once
        absurd = name in ("n_steps", "n_paths") and raw[name] == 10**12
        expect(
            "sde_sim.simulate",
            call,
            names=() if absurd else names,
            allowed=(ValueError, TypeError, MemoryError) if absurd else (ValueError, TypeError),
            valid=name is None,
            finite=lambda s: [("x", s.x), ("t_obs", s.t_obs), ("z", s.z[~s.missing])],
            reference=reference if name is None else None,
            describe=describe(name, kind),
        )

    fuzz.run("simulate", scenario_cases(), body, ci=40, slow=450)


@st.composite
def rt_cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    d = draw(st.sampled_from([2, 3]))
    w = rng.normal(size=(d, d))
    raw = {
        "Omega": w - w.T,
        "mu_r": 0.3,
        "mu_t": 0.2,
        "sigma_r": 0.2,
        "sigma_t": 0.1,
        "eta_r": 0.1,
        "eta_t": 0.1,
        "r_min": 0.8,
        "r_max": 1.2,
    }
    name, kind = spoil_one(draw, raw, scalars=tuple(k for k in raw if k != "Omega"))
    return raw, d, name, kind, draw(st.sampled_from(["literal", "frozen-frame"]))


def test_radial_tangential_simulation(fuzz):
    def body(case):
        raw, d, name, kind, mode = case

        def call():
            system = RadialTangentialSDE(
                raw["Omega"], raw["mu_r"], raw["mu_t"], raw["sigma_r"], raw["sigma_t"], mode=mode
            )
            scenario = Scenario(
                system,
                RadialTangentialMeasurement(raw["eta_r"], raw["eta_t"]),
                SphericalShellInitial(d, raw["r_min"], raw["r_max"]),
                dt=0.05,
                n_steps=10,
                observations=EveryKSteps(2),
            )
            return sde_sim.simulate(scenario, 2, seed=1)

        expect(
            "sde_sim.simulate(radial-tangential)",
            call,
            names=(name,) if name else (),
            valid=name is None,
            finite=lambda s: [("x", s.x), ("z", s.z)],
            describe=describe(name, kind),
        )

    fuzz.run("rt_simulate", rt_cases(), body, ci=25, slow=250)


def test_presets(fuzz):
    @st.composite
    def cases(draw):
        names = list(presets.PRESETS)
        name = draw(st.sampled_from([*names, "", "AFA-2D", "afa-2d ", None, 3, "nope"]))
        variant = draw(st.sampled_from([None, "a", "b", "zz", 1, ""]))
        return name, variant

    def body(case):
        name, variant = case

        def call():
            return presets.get(name).scenario(variant).system

        expect(
            "sde_sim.presets.get",
            call,
            names=("name", "variant", str(name), str(variant)),
            finite=lambda s: [],
            describe=f"{name!r}/{variant!r}",
        )

    fuzz.run("presets", cases(), body, ci=20, slow=150)


def test_datasets(fuzz):
    small = {
        "a5": {"n_train": 4, "n_test": 2, "train_length": 4, "test_lengths": (6,)},
        "mqar": {"n_sequences": 3, "vocab_size": 16, "n_pairs": 2, "seq_len": 12},
        "memorization": {"n_sequences": 3, "n_keys": 4, "seq_len": 6},
        "irregular-rotation": {"n_sequences": 3, "n_steps": 8},
        "irregular-forecast": {"n_sequences": 3},
        "logistic-map": {"n_steps": 60, "n_train": 20, "window": 4, "horizon": 5, "n_test": 2},
    }

    @st.composite
    def cases(draw):
        name = draw(st.sampled_from(sorted(small)))
        kwargs = dict(small[name], seed=draw(st.integers(0, 3)))
        key = None
        if draw(st.floats(0, 1)) < 0.8:
            key = draw(st.sampled_from(sorted(kwargs)))
            kwargs[key] = draw(
                S.scalar_spoils(extra=(-5, 0, (1, 2), "x"))
            )  # no 10**9: see RELIABILITY.md
        return name, kwargs, key

    def body(case):
        name, kwargs, key = case

        def call():
            return datasets.dataset(name, **kwargs)

        def reference(data):
            again = datasets.dataset(name, **kwargs)
            for a, b in zip(_leaves(data), _leaves(again), strict=True):
                assert np.array_equal(a, b, equal_nan=True), "same seed, other bits"

        expect(
            f"verify.datasets.dataset({name})",
            call,
            names=(key,) if key else (),
            valid=key is None,
            reference=reference if key is None else None,
            finite=_unpadded,
            describe=f"{key}={kwargs.get(key)!r}" if key else "valid",
        )

    fuzz.run("datasets", cases(), body, ci=25, slow=250)


def _unpadded(data):
    """Every float array of a dataset, restricted to ``mask`` where arrays are padded to the
    longest sequence with NaN by design (the irregular tasks)."""
    from tests.fuzz.contract import arrays

    mask = getattr(data, "mask", None)
    out = []
    for label, arr in arrays(data):
        if mask is not None and arr.shape[: np.ndim(mask)] == np.shape(mask):
            arr = arr[np.asarray(mask, dtype=bool)]
        out.append((label, arr))
    return out


def _leaves(value):
    from tests.fuzz.contract import arrays

    return [a for _, a in arrays(value)]


def test_io_save_and_atomic_write(fuzz):
    """`io.save`/`io.atomic_write` on bad targets: a folder, an existing file without
    overwrite, a parent that is a file, a wrong suffix, not a Simulation, a writer that fails:
    a clean error and the folder as it was (the target keeps its bytes, no stray file)."""
    import tempfile
    from pathlib import Path

    from sde_sim import io as sio
    from tests.fuzz.cli import snapshot
    from tests.fuzz.contract import FILE_ERRORS

    sim = sde_sim.simulate(presets.get("ou").scenario().replace(n_steps=20), 1, seed=0)

    @st.composite
    def cases(draw):
        return (
            draw(st.sampled_from(["save", "atomic_write"])),
            draw(
                st.sampled_from(
                    [
                        "new",
                        "existing",
                        "folder",
                        "under-file",
                        "suffix",
                        "not-a-simulation",
                        "failing-writer",
                        "overwrite",
                    ]
                )
            ),
        )

    def body(case):
        which, kind = case
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "mine.npz").write_bytes(b"mine")
            (folder / "afile").write_bytes(b"mine")
            (folder / "dir.npz").mkdir()
            target = {
                "new": "new.npz",
                "existing": "mine.npz",
                "folder": "dir.npz",
                "under-file": "afile/x.npz",
                "suffix": "new.txt",
                "not-a-simulation": "new.npz",
                "failing-writer": "mine.npz",
                "overwrite": "mine.npz",
            }[kind]
            path = folder / target
            overwrite = kind in ("overwrite", "failing-writer", "folder")
            before = snapshot(folder)

            def write(fh):
                if kind == "failing-writer":
                    fh.write(b"partial")
                    raise OSError("disk full")
                fh.write(b"complete")

            def call():
                if which == "save":
                    value = {"x": 1} if kind == "not-a-simulation" else sim
                    return sio.save(value, path, overwrite=overwrite)
                return sio.atomic_write(path, write, overwrite=overwrite)

            ok = (
                kind in ("new", "overwrite")
                or (which == "atomic_write" and kind in ("suffix", "not-a-simulation"))
                or (which == "save" and kind == "failing-writer")
            )  # save has its own writer
            try:
                expect(
                    f"sde_sim.io.{which}",
                    call,
                    allowed=(*FILE_ERRORS, OSError),
                    valid=ok,
                    finite=lambda r: [],
                    describe=kind,
                )
            finally:
                after = snapshot(folder)
            if not ok:  # refused: nothing changed, nothing left behind
                assert after == before, f"{which} ({kind}) changed the folder"
            else:
                assert set(after) - set(before) <= {str(path.relative_to(folder))}

    fuzz.run("io_save", cases(), body, ci=16, slow=160)


def test_euler_maruyama_step_equals_the_formula(fuzz):
    """The pure step ``x + f(t, x) h + g(t, x) dW`` against the formula (valid input; bad
    arguments: `test_euler_maruyama_step_names_a_bad_argument`)."""
    sde = LinearSDE.from_covariance(
        np.array([[-0.5, 1.0], [-1.0, -0.5]]), 0.2 * np.eye(2), np.ones(2)
    )

    @st.composite
    def cases(draw):
        rng = np.random.default_rng(draw(st.integers(0, 999)))
        P = draw(st.integers(1, 4))
        return rng.normal(size=(P, 2)), draw(st.floats(1e-4, 1.0)), rng.normal(size=(P, 2))

    def body(case):
        x, h, dW = case

        def reference(r):
            close(r, x + (x @ sde.A.T + sde.u) * h + dW @ sde.G.T, 1e-12, "Euler step")

        expect(
            "sde_sim.euler_maruyama_step",
            lambda: sde_sim.euler_maruyama_step(sde, 0.0, x, h, dW),
            valid=True,
            reference=reference,
            describe="valid",
        )

    fuzz.run("euler_maruyama_step", cases(), body, ci=10, slow=100)


_STEP_SDE = LinearSDE.from_covariance(-np.eye(2), np.eye(2))


@pytest.mark.parametrize(
    "x, h, dW, word",
    [
        (np.zeros((3, 2)), "0.1", np.zeros((3, 2)), "h"),  # numpy UFuncTypeError, unnamed
        (np.zeros((3, 2)), 0.1, np.zeros((3, 0)), "dW"),  # matmul core-dimension ValueError
        (np.zeros((3, 2)), float("nan"), np.zeros((3, 2)), "h"),  # NaN states, no error
        (np.zeros((3, 2)), -0.1, np.zeros((3, 2)), "h"),
        (np.full((3, 2), np.nan), 0.1, np.zeros((3, 2)), "x"),
        (np.zeros((3, 3)), 0.1, np.zeros((3, 2)), "x"),
        ([[0.0, 0.0], [0.0]], 0.1, np.zeros((2, 2)), "x"),  # ragged
        (np.zeros((3, 2)), 0.1, np.zeros((2, 2)), "dW"),
        (np.zeros((3, 2)), 0.1, "dW", "dW"),
    ],
)
def test_euler_maruyama_step_names_a_bad_argument(x, h, dW, word):
    with pytest.raises((ValueError, TypeError), match=rf"\b{word}\b"):
        sde_sim.euler_maruyama_step(_STEP_SDE, 0.0, x, h, dW)

"""Fuzz the attention functions of `kernels.functional` (via `tests.fuzz.api`).

Valid inputs run in float32 and are compared with the float64 run on the same (upcast) inputs.
One argument at a time is spoilt: a non-finite entry in the data (q, k, v, values: propagating
it is torch's convention and allowed, silently or not), extreme magnitudes (a non-finite output
then needs a warning naming the argument), negative or zero rates and variances, empty batches,
heads or steps, integer/complex/half dtypes, lists, arrays, strings, None, a wrong rank or
length; errors must name the argument.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import strategies as st

from tests.fuzz.api import functional as F
from tests.fuzz.contract import expect, record
from tests.fuzz.torch_spoils import (
    NON_FINITE,
    np_close,
    seeded,
    spoil_tensor,
    tensor_spoils,
    to64,
)

DATA = ("q", "k", "v", "values", "estimate")


def base_args(seed: int, B: int, H: int, T: int, D: int, irregular: bool) -> dict:
    g = seeded(seed)
    f32 = torch.float32

    def u(*shape, lo, hi):
        return (torch.rand(*shape, generator=g) * (hi - lo) + lo).to(f32)

    t = torch.cumsum(u(T, lo=0.2, hi=1.2), 0) if irregular else None
    return {
        "q": torch.randn(B, H, T, D, generator=g),
        "k": torch.randn(B, H, T, D, generator=g),
        "v": torch.randn(B, H, T, D, generator=g),
        "t": t,
        "decay": u(H, lo=0.05, hi=0.5),
        "frequencies": torch.randn(H, D // 2, generator=g),
        "process_var": u(H, lo=0.05, hi=0.5),
        "measurement_var": u(H, lo=0.3, hi=1.0),
        "value_precision": u(B, H, T, D, lo=0.1, hi=1.0),
        "a_bar": u(D, lo=0.4, hi=0.95),
        "p_bar": u(D, lo=0.05, hi=0.6),
        "slopes": u(H, lo=0.05, hi=0.5),
        "omega": u(H, D, lo=0.5, hi=2.0),
        "gamma": u(H, D, lo=0.05, hi=0.5),
        "velocity": 0.3 * torch.randn(H, D, D, generator=g),
        "drive": torch.randn(H, 2, D, generator=g),
        "freqs": torch.tensor([0.5, 1.3]),
        "dt": u(1, lo=0.05, hi=0.5)[0],
        "target": torch.zeros(B, H, T, dtype=torch.int64),
    }


@dataclass
class Spec:
    name: str
    call: Callable[[dict], object]
    spoil: tuple[str, ...]
    output: Callable[[object], torch.Tensor] = lambda r: r.output
    tol: float | None = 2e-4  # None: no float64 reference (a stochastic estimate)
    aliases: dict | None = None  # spoilt argument -> words an error may use
    data: tuple[str, ...] = ("q", "k", "v")  # NaN here may propagate (torch's convention)


def _afa(name, **extra):
    def call(a):
        return F(name)(
            a["q"],
            a["k"],
            a["v"],
            t=a["t"],
            decay=a["decay"],
            frequencies=a["frequencies"],
            process_var=a["process_var"],
            measurement_var=a["measurement_var"],
            **extra,
        )

    return call


def _rt_afa(a):
    return F("rt_afa")(
        a["q"],
        a["k"],
        a["v"],
        t=a["t"],
        decay=a["decay"],
        frequencies=a["frequencies"],
        sigma_r2=a["process_var"],
        sigma_t2=a["process_var"],
        eta_r2=a["measurement_var"],
        eta_t2=a["measurement_var"],
    )


def _unrolled(a, **extra):
    return F("unrolled_afa")(
        a["v"],
        t=a["t"],
        decay=a["decay"],
        frequencies=a["frequencies"],
        process_var=a["process_var"],
        measurement_var=a["measurement_var"],
        **extra,
    )


def _kalman_attention(a):
    """`kalman_attention` takes checked (B or 1, 1, T) times, (H,) and (H, n) tensors."""
    v, t = a["v"], a["t"]
    if t is None and isinstance(v, torch.Tensor) and v.ndim == 4:
        t = torch.arange(v.shape[2], dtype=torch.float32)
    if isinstance(t, torch.Tensor) and t.ndim == 1:
        t = t.view(1, 1, -1)
    return F("kalman_attention")(
        v,
        t,
        decay=a["decay"],
        frequencies=a["frequencies"],
        process_var=a["process_var"],
        measurement_var=a["measurement_var"],
    )


def _oscillator_params(a):
    P = F("OscillatorParams")
    return P(a["omega"], a["gamma"], a["velocity"], a["drive"], a["drive"], a["freqs"])


def _oscillator(a):
    p = _oscillator_params(a)
    return F("oscillator_attention")(
        a["q"], a["k"], a["v"], a["t"], key_params=p, value_params=p, freqs=a["freqs"]
    )


def _decoder(y):
    return torch.stack([y.sum(-1), -y.sum(-1), y[..., 0]], dim=-1)


def _nll(a):
    return F("mc_marginal_nll")(
        a["q"],
        a["value_precision"],
        a["target"],
        _decoder,
        num_samples=3,
        generator=seeded(0),
        reduction="none",
    )


PARAMS = ("t", "decay", "frequencies", "process_var", "measurement_var")
RT_NAMES = {"process_var": ("sigma_r2", "sigma_t2"), "measurement_var": ("eta_r2", "eta_t2")}

SPECS = [
    Spec("tensor_afa", _afa("tensor_afa"), ("q", "k", "v", *PARAMS)),
    Spec("isotropic_afa", _afa("isotropic_afa"), ("q", "k", "v", *PARAMS)),
    Spec(
        "isotropic_afa(nu=2)", _afa("isotropic_afa", nu=2.0, causal=False), ("q", "k", "v", *PARAMS)
    ),
    Spec("separable_afa", _afa("separable_afa"), ("q", "k", "v", *PARAMS)),
    Spec(
        "predict",
        lambda a: F("predict")(a["v"], decay=a["decay"], frequencies=a["frequencies"]),
        ("v", "decay", "frequencies"),
        output=lambda r: r,
        aliases={"v": ("estimate",)},
    ),
    Spec("rt_afa", _rt_afa, ("q", "k", "v", *PARAMS), aliases=RT_NAMES),
    Spec("unrolled_afa", _unrolled, ("v", *PARAMS), aliases={"v": ("values",)}),
    Spec(
        "unrolled_afa(nu=2)",
        lambda a: _unrolled(a, nu=2.0, iterations=2),
        ("v", *PARAMS),
        aliases={"v": ("values",)},
    ),
    Spec(
        "kalman_attention",
        _kalman_attention,
        ("v", *PARAMS),
        output=lambda r: r[0] if isinstance(r, tuple) else r,
        aliases={"v": ("values",), "t": ("times",)},
    ),
    Spec("rfa_attention", _afa("rfa_attention"), ("q", "k", "v", *PARAMS)),
    Spec("rt_rfa", _afa("rt_rfa"), ("q", "k", "v", *PARAMS)),
    Spec(
        "softmax_attention",
        lambda a: F("softmax_attention")(a["q"], a["k"], a["v"]),
        ("q", "k", "v"),
    ),
    Spec(
        "rope_attention",
        lambda a: F("rope_attention")(
            a["q"], a["k"], a["v"], t=a["t"], frequencies=a["frequencies"]
        ),
        ("q", "k", "v", "t", "frequencies"),
    ),
    Spec(
        "alibi_attention",
        lambda a: F("alibi_attention")(a["q"], a["k"], a["v"], t=a["t"], slopes=a["slopes"]),
        ("q", "k", "v", "t", "slopes"),
    ),
    Spec(
        "decayed_rope_attention",
        lambda a: F("decayed_rope_attention")(
            a["q"], a["k"], a["v"], t=a["t"], decay=a["decay"], frequencies=a["frequencies"]
        ),
        ("q", "k", "v", "t", "decay", "frequencies"),
    ),
    Spec(
        "oscillator_attention",
        _oscillator,
        ("q", "k", "v", "t", "omega", "gamma", "freqs"),
        output=lambda r: r[0],
        tol=1e-3,
        aliases={
            "omega": ("key_params.omega", "omega"),
            "gamma": ("key_params.gamma",),
            "freqs": ("freqs", "drive_freqs"),
        },
    ),
    Spec(
        "oscillator_logits",
        lambda a: F("oscillator_logits")(
            a["q"], a["k"], a["t"], params=_oscillator_params(a), freqs=a["freqs"]
        ),
        ("q", "k", "t", "omega", "gamma", "freqs"),
        output=lambda r: r,
        tol=1e-3,
        aliases={
            "omega": ("params.omega",),
            "gamma": ("params.gamma",),
            "freqs": ("freqs", "drive_freqs"),
        },
    ),
    Spec(
        "fit_query",
        lambda a: F("fit_query")(a["q"], a["t"], a["freqs"]),
        ("q", "t", "freqs"),
        output=lambda r: r[0] if isinstance(r, tuple) else r,
        tol=1e-3,
    ),
    Spec(
        "ou_prior",
        lambda a: F("ou_prior")(a["decay"], a["process_var"], a["dt"]),
        ("decay", "process_var", "dt"),
        output=lambda r: torch.stack(torch.broadcast_tensors(*r)),
        aliases={"decay": ("a",), "process_var": ("p",)},
    ),
    Spec(
        "mc_marginal_nll",
        _nll,
        ("q", "value_precision", "target"),
        output=lambda r: r,
        tol=None,  # Monte Carlo: float32 and float64 draw different samples
        aliases={"q": ("mean",), "value_precision": ("variance",)},
        data=("q", "value_precision"),
    ),
    Spec(
        "kla_scan",
        lambda a: F("kla_scan")(
            a["k"], a["value_precision"], a["v"], a["a_bar"], a["p_bar"], q=a["q"]
        ),
        ("q", "k", "v", "value_precision", "a_bar", "p_bar"),
        output=lambda r: r.output,
        tol=1e-3,
        data=("q", "k", "v", "value_precision"),
    ),
]
SPEC = {s.name: s for s in SPECS}


@st.composite
def cases(draw, spec: Spec):
    B, H, T = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 8))
    args = base_args(draw(st.integers(0, 2**31 - 1)), B, H, T, 4, draw(st.booleans()))
    name = kind = None
    if draw(st.floats(0, 1)) < 0.8:
        name = draw(st.sampled_from(spec.spoil))
        kind, pick = draw(tensor_spoils())
        if name == "t" and args["t"] is None:
            args["t"] = torch.arange(T, dtype=torch.float32)
        if kind == "empty" and name in ("q", "k", "v"):
            # an empty batch, head axis or sequence: every data argument alike
            axis = pick % 3
            for n in ("q", "k", "v", "value_precision"):
                args[n] = spoil_tensor(args[n], "empty", axis)
            if axis == 2 and args["t"] is not None:
                args["t"] = args["t"][:0]
        else:
            args[name] = spoil_tensor(args[name], kind, pick)
    return args, name, kind


def _run(spec: Spec, case) -> None:
    args, name, kind = case
    valid = name is None
    if name is not None and kind in NON_FINITE and name in spec.data:
        # NaN/inf in the data: torch's convention is to propagate it; only a clean run or a
        # clean error is required.
        expect(
            f"kernels.functional.{spec.name}",
            lambda: spec.call(args),
            names=_names(spec, name),
            finite=lambda r: [],
            describe=f"{name} spoilt ({kind})",
        )
        return
    if valid and spec.tol is None:
        expect(
            f"kernels.functional.{spec.name}",
            lambda: spec.call(args),
            valid=True,
            finite=lambda r: [("output", spec.output(r))],
            describe="valid",
        )
        return
    if valid:

        def reference(result):
            wide = spec.call(to64(args))
            np_close(spec.output(result), spec.output(wide), spec.tol, "float32 vs float64")

        expect(
            f"kernels.functional.{spec.name}",
            lambda: spec.call(args),
            valid=True,
            finite=lambda r: [("output", spec.output(r))],
            reference=reference,
            describe="valid",
        )
        return
    expect(
        f"kernels.functional.{spec.name}",
        lambda: spec.call(args),
        names=_names(spec, name),
        finite=lambda r: [("output", spec.output(r))],
        describe=f"{name} spoilt ({kind})",
    )


def _names(spec: Spec, name: str) -> tuple[str, ...]:
    extra = (spec.aliases or {}).get(name, ())
    if name in ("q", "k", "v"):  # q/k/v mismatches are reported on the set
        return (name, *extra, "q, k, v", "q and k", "k, value_precision and v")
    return (name, *extra)


def test_every_accessor_name_resolves():
    from tests.fuzz import api

    for name in api.FUNCTIONS:
        assert callable(api.functional(name)), name
    record("kernels.functional (names)", "agreed")


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_functional(fuzz, spec):
    fuzz.run(f"functional_{spec.name}", cases(spec), lambda c: _run(spec, c), ci=12, slow=150)

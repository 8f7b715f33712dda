"""Fuzz the attention layers of `kernels.layers` on ``(B, T, E)`` input.

Valid input (float32, moderate size, regular or irregular stamps) must give a finite output
that agrees with the float64 copy of the same layer; KLA's O(1) decoding `step` must equal
`forward` token by token. Spoilt input: NaN/inf in ``x`` may propagate, but in a causal layer
only to the outputs at and after the step that holds it (IEEE causality); huge ``x`` needs a
warning naming ``x`` if the output is not finite; bad time stamps, shapes, types and
constructor arguments are refused naming the argument. A float64 input into a float32 module
raises torch's own dtype error (as ``nn.Linear`` does; the issue keeps that convention).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import strategies as st

from kernels.layers.afa import AdaptiveFilterAttention
from kernels.layers.afa_transformer import AFATransformerBlock
from kernels.layers.baselines import (
    ALiBiAttention,
    DecayedRotaryAttention,
    RotaryAttention,
    SoftmaxAttention,
)
from kernels.layers.complex_linear import ComplexLinear, UnitaryLinear
from kernels.layers.kla import KalmanLinearAttention
from kernels.layers.osciformer import OscillatorAttention
from kernels.layers.rfa import RobustFilterAttention
from kernels.layers.rt_afa import RTAdaptiveFilterAttention
from kernels.layers.rt_transformer import RTRobustFilterAttention, RTTransformerBlock
from kernels.layers.unrolled_afa import UnrolledAdaptiveFilterAttention
from tests.fuzz.contract import ContractViolation, expect, record
from tests.fuzz.torch_spoils import NON_FINITE, np_close, seeded, spoil_tensor, tensor_spoils

E, HEADS = 8, 2

# name -> (constructor(generator), causal, float32-vs-float64 tolerance)
LAYERS = {
    "AdaptiveFilterAttention": (lambda g: AdaptiveFilterAttention(E, HEADS, generator=g), 1e-3),
    "AdaptiveFilterAttention(tensor)": (
        lambda g: AdaptiveFilterAttention(E, HEADS, tensor_form=True, generator=g),
        1e-3,
    ),
    "AdaptiveFilterAttention(separable)": (
        lambda g: AdaptiveFilterAttention(E, HEADS, separable=True, generator=g),
        1e-3,
    ),
    "AdaptiveFilterAttention(non-causal, nu=2)": (
        lambda g: AdaptiveFilterAttention(E, HEADS, causal=False, nu=2.0, generator=g),
        1e-3,
    ),
    "RTAdaptiveFilterAttention": (lambda g: RTAdaptiveFilterAttention(E, HEADS, generator=g), 2e-3),
    "AFATransformerBlock": (lambda g: AFATransformerBlock(E, HEADS, generator=g), 2e-3),
    "UnrolledAdaptiveFilterAttention": (
        lambda g: UnrolledAdaptiveFilterAttention(E, HEADS, iterations=2, generator=g),
        1e-3,
    ),
    "UnrolledAdaptiveFilterAttention(nu=inf)": (
        lambda g: UnrolledAdaptiveFilterAttention(E, HEADS, nu=math.inf, generator=g),
        1e-3,
    ),
    "RobustFilterAttention": (lambda g: RobustFilterAttention(E, HEADS, generator=g), 1e-3),
    "RobustFilterAttention(SC)": (
        lambda g: RobustFilterAttention(E, HEADS, spectral_coupling=True, generator=g),
        1e-3,
    ),
    "RTRobustFilterAttention": (lambda g: RTRobustFilterAttention(E, HEADS, generator=g), 2e-3),
    "RTTransformerBlock": (lambda g: RTTransformerBlock(E, HEADS, generator=g), 2e-3),
    "RotaryAttention": (lambda g: RotaryAttention(E, HEADS, generator=g), 1e-3),
    "ALiBiAttention": (lambda g: ALiBiAttention(E, HEADS, generator=g), 1e-3),
    "DecayedRotaryAttention": (lambda g: DecayedRotaryAttention(E, HEADS, generator=g), 1e-3),
    "SoftmaxAttention": (
        lambda g: SoftmaxAttention(E, HEADS, positional="sinusoidal", generator=g),
        1e-3,
    ),
    "KalmanLinearAttention": (lambda g: KalmanLinearAttention(E, num_slots=4, generator=g), 1e-3),
    # float32 is 3.5% off float64 on some short irregular inputs: the reproducer below is an
    # xfail; the fuzz holds it to 5% until that is fixed
    "OscillatorAttention": (lambda g: OscillatorAttention(E, HEADS, generator=g), 5e-2),
}
_CACHE: dict[str, torch.nn.Module] = {}


def layer(name: str) -> torch.nn.Module:
    """One layer per kind, built once from a fixed generator (the fuzzing varies the input)."""
    if name not in _CACHE:
        _CACHE[name] = LAYERS[name][0](seeded(11)).eval()
    return _CACHE[name]


def _wide(name: str) -> torch.nn.Module:
    key = f"{name}/float64"
    if key not in _CACHE:
        _CACHE[key] = copy.deepcopy(layer(name)).double()
    return _CACHE[key]


X_SPOILS = (
    "nan",
    "inf",
    "-inf",
    "huge",
    "tiny",
    "zero",
    "empty",
    "int",
    "float64",
    "half",
    "list",
    "numpy",
    "string",
    "none",
    "extra_axis",
    "drop_axis",
    "truncate",
)
T_SPOILS = (
    "nan",
    "inf",
    "huge",
    "tiny",
    "negative",
    "zero",
    "complex",
    "int",
    "list",
    "string",
    "extra_axis",
    "truncate",
    "reversed",
    "repeated",
)


@st.composite
def cases(draw):
    g = seeded(draw(st.integers(0, 2**31 - 1)))
    B, T = draw(st.integers(1, 3), label="B"), draw(st.integers(1, 10), label="T")
    x = torch.randn(B, T, E, generator=g) * draw(st.sampled_from([0.1, 1.0, 3.0]))
    t = None
    if draw(st.booleans()):
        t = torch.cumsum(torch.rand(T, generator=g) + 0.2, 0)
        if draw(st.booleans()):
            t = torch.cumsum(torch.rand(B, T, generator=g) + 0.2, 1)
    which, kind = None, None
    roll = draw(st.floats(0, 1))
    if roll < 0.5:
        which = "x"
        kind, pick = draw(tensor_spoils(X_SPOILS))
        x = spoil_tensor(x, kind, pick)
    elif roll < 0.75:
        which = "t"
        kind, pick = draw(tensor_spoils(T_SPOILS)) if True else None
        base = t if t is not None else torch.arange(T, dtype=torch.float32)
        if kind == "reversed":
            t = base.flip(-1) if T > 1 else base - 1e9 * 0 + float("nan")
        elif kind == "repeated":
            t = torch.zeros_like(base) if T > 1 else base.reshape(1, 1, 1)
        else:
            t = spoil_tensor(base, kind, pick)
    return x, t, which, kind


def _first_bad_step(x: torch.Tensor) -> torch.Tensor:
    """(B,) index of each sequence's first non-finite step (T when none)."""
    finite = torch.isfinite(x).all(dim=-1)
    steps = torch.arange(x.shape[1])
    return torch.where(finite, x.shape[1], steps).min(dim=1).values


def _run(name: str, case) -> None:
    x, t, which, kind = case
    module = layer(name)
    tol = LAYERS[name][1]
    target = f"kernels.layers.{name}"
    causal = getattr(module, "causal", True)

    def call():
        with torch.no_grad():
            return module(x, t)[0]

    if which is None:

        def reference(out):
            with torch.no_grad():
                wide = _wide(name)(x.double(), None if t is None else t.double())[0]
            np_close(out, wide, tol, "float32 vs float64")

        expect(target, call, valid=True, reference=reference, describe="valid")
        return
    if which == "x" and kind in NON_FINITE:

        def causal_rows(out):
            """Rows before the first non-finite step must be finite (IEEE causality)."""
            if not causal:
                return []
            first = _first_bad_step(x)
            rows = torch.arange(x.shape[1])[None, :] < first[:, None]
            return [("outputs before the first non-finite step", out[rows])]

        expect(target, call, names=("x",), finite=causal_rows, describe=f"x spoilt ({kind})")
        return
    allowed, names = (ValueError, TypeError), (which,)
    if which == "x" and kind in ("float64", "half", "int"):
        # torch's own dtype error, as nn.Linear raises it (the issue keeps that convention)
        allowed, names = (ValueError, TypeError, RuntimeError), ()
    elif which == "x" and t is not None and kind in ("truncate", "extra_axis", "drop_axis"):
        names = ("x", "t")  # x and t disagree in length: either may be named
    expect(target, call, names=names, allowed=allowed, describe=f"{which} spoilt ({kind})")


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer(fuzz, name):
    fuzz.run(f"layer_{name}", cases(), lambda c: _run(name, c), ci=12, slow=130)


def test_kla_step_decodes_like_forward(fuzz):
    """`KalmanLinearAttention.step`, token by token from the initial state, equals `forward`
    (regular steps, gap 1); a spoilt token, state or gap is refused naming it."""

    @st.composite
    def step_cases(draw):
        g = seeded(draw(st.integers(0, 2**31 - 1)))
        x = torch.randn(draw(st.integers(1, 3)), draw(st.integers(1, 8)), E, generator=g)
        spoil = draw(st.sampled_from([None, None, "x_t", "state", "gap"]))
        return x, spoil, draw(st.sampled_from(list(range(12))))

    module = layer("KalmanLinearAttention")

    def body(case):
        x, spoil, pick = case
        if spoil is None:

            def decode():
                state, outs = None, []
                with torch.no_grad():
                    for i in range(x.shape[1]):
                        out, state = module.step(x[:, i], state)
                        outs.append(out)
                return torch.stack(outs, dim=1)

            def reference(out):
                with torch.no_grad():
                    np_close(out, module(x)[0], 1e-4, "step vs forward")

            expect(
                "kernels.layers.KalmanLinearAttention.step",
                decode,
                valid=True,
                reference=reference,
                describe="valid",
            )
            return
        x_t, state, gap = x[:, 0], None, 1.0
        if spoil == "x_t":
            x_t = [x_t[0], x_t[:, :3], "tok", None, x_t.double(), x_t.int(), x_t[None]][pick % 7]
        elif spoil == "state":
            good = module.initial_state(x.shape[0], like=x)
            state = [
                (good.lam,),
                (1, 2),
                good._replace(lam=-good.lam),
                good._replace(lam=good.lam[:, :1]),
                good._replace(eta=good.eta.int()),
                "state",
                good._replace(lam=good.lam * float("nan")),
            ][pick % 7]
        else:
            gap = [0.0, -1.0, float("nan"), float("inf"), "1", None, 1e30][pick % 7]
        names = {"x_t": ("x_t",), "state": ("state", "state.lam", "state.eta"), "gap": ("gap",)}[
            spoil
        ]
        nan_state = spoil == "state" and pick % 7 == 6  # NaN in the state: NaN out
        expect(
            "kernels.layers.KalmanLinearAttention.step",
            lambda: module.step(x_t, state, gap=gap)[0],
            finite=(lambda r: []) if nan_state else None,
            names=names,
            describe=f"{spoil} spoilt",
        )

    fuzz.run("kla_step", step_cases(), body, ci=15, slow=150)


HUGE_SIZE = 2**40 + 1  # no machine allocates it: torch refuses at once, naming the size
CONSTRUCTOR_SPOILS = (0, -1, 3, 2.5, "8", None, True, HUGE_SIZE)


@pytest.mark.parametrize(
    "name",
    [
        "AdaptiveFilterAttention",
        "RobustFilterAttention",
        "RotaryAttention",
        "KalmanLinearAttention",
        "UnrolledAdaptiveFilterAttention",
        "OscillatorAttention",
        "RTAdaptiveFilterAttention",
        "SoftmaxAttention",
    ],
)
def test_constructor_arguments(fuzz, name):
    """`embed_dim`, `num_heads`/`num_slots` and a float option spoilt: refused by name, or a
    layer whose forward on valid input is finite."""
    classes = {
        "AdaptiveFilterAttention": (AdaptiveFilterAttention, "num_heads", {"nu": 1.0}),
        "RobustFilterAttention": (RobustFilterAttention, "num_heads", {"temperature": 1.0}),
        "RotaryAttention": (RotaryAttention, "num_heads", {"base": 10000.0}),
        "KalmanLinearAttention": (KalmanLinearAttention, "num_slots", {}),
        "UnrolledAdaptiveFilterAttention": (
            UnrolledAdaptiveFilterAttention,
            "num_heads",
            {"nu": 4.0, "damping": 1.0},
        ),
        "OscillatorAttention": (OscillatorAttention, "num_heads", {"ridge": 1e-3}),
        "RTAdaptiveFilterAttention": (RTAdaptiveFilterAttention, "num_heads", {"step": 1.0}),
        "SoftmaxAttention": (SoftmaxAttention, "num_heads", {"max_len": 4096}),
    }
    cls, heads_name, options = classes[name]

    @st.composite
    def ctor_cases(draw):
        kwargs = {"embed_dim": E, heads_name: HEADS, **options}
        key = draw(st.sampled_from(sorted(kwargs)))
        bad = draw(st.sampled_from(CONSTRUCTOR_SPOILS + (float("nan"), float("inf"), 1e30)))
        kwargs[key] = bad
        return kwargs, key

    def body(case):
        kwargs, key = case

        def build_and_run():
            module = cls(generator=seeded(0), **kwargs)
            embed = module.embed_dim if hasattr(module, "embed_dim") else E
            with torch.no_grad():
                return module(torch.randn(1, 4, embed, generator=seeded(1)))[0]

        allowed, names = (ValueError, TypeError), (key,)
        if kwargs[key] == HUGE_SIZE:  # torch's allocator refuses, with the size (nn.Linear too)
            allowed, names = (ValueError, TypeError, RuntimeError, MemoryError), ()
        expect(
            f"kernels.layers.{name}.__init__",
            build_and_run,
            names=names,
            allowed=allowed,
            describe=f"{key}={kwargs[key]!r}",
        )

    fuzz.run(f"ctor_{name}", ctor_cases(), body, ci=8, slow=60)


def test_complex_linear(fuzz):
    @st.composite
    def cl_cases(draw):
        which = draw(st.sampled_from(["ComplexLinear", "UnitaryLinear"]))
        n = draw(st.integers(1, 4))
        x = torch.randn(2, 3, 2 * n, generator=seeded(draw(st.integers(0, 999))))
        spoil = draw(st.sampled_from([None, "x", "features"]))
        kind = pick = None
        if spoil == "x":
            kind, pick = draw(tensor_spoils(X_SPOILS))
            x = spoil_tensor(x, kind, pick)
        bad_n = draw(st.sampled_from(CONSTRUCTOR_SPOILS)) if spoil == "features" else n
        return which, n, bad_n, x, spoil, kind

    def body(case):
        which, n, bad_n, x, spoil, kind = case

        def call():
            if which == "ComplexLinear":
                module = ComplexLinear(bad_n, bad_n, generator=seeded(0))
            else:
                module = UnitaryLinear(bad_n, generator=seeded(0))
            with torch.no_grad():
                return module(x)

        names = {"x": ("x", "input"), "features": ("in_features", "out_features", "features")}
        if spoil == "x" and kind in NON_FINITE:
            expect(
                f"kernels.layers.{which}",
                call,
                names=("x",),
                finite=lambda r: [],
                describe=f"x spoilt ({kind})",
            )
            return
        allowed, named = (ValueError, TypeError), names.get(spoil, ())
        if spoil == "features" and bad_n == HUGE_SIZE:  # torch's allocator error, with the size
            allowed, named = (ValueError, TypeError, RuntimeError, MemoryError), ()
        if spoil == "x" and kind in ("float64", "half", "int"):
            allowed, named = (ValueError, TypeError, RuntimeError), ()  # nn.Linear's dtype error
        expect(
            f"kernels.layers.{which}",
            call,
            names=named,
            valid=spoil is None,
            allowed=allowed,
            describe=f"{spoil} spoilt ({kind})" if spoil else "valid",
        )

    fuzz.run("complex_linear", cl_cases(), body, ci=20, slow=200)


def test_kla_layer_long_gap_is_refused_by_name_or_finite():
    """A time gap so long that e^(-a dt) underflows: the layer once refused it naming an
    internal quantity (a_bar) instead of t."""
    module = layer("KalmanLinearAttention")
    x = torch.randn(1, 4, E, generator=seeded(3))
    for t in (torch.tensor([0.0, 1.0, 1e10, 1e10 + 1]), torch.arange(4.0) * 1e30):
        expect(
            "kernels.layers.KalmanLinearAttention",
            lambda t=t: module(x, t)[0],
            names=("t",),
            describe=f"t = {t.tolist()}",
        )


def test_contract_violation_is_an_assertion():
    assert issubclass(ContractViolation, AssertionError)
    record("tests.fuzz (self-check)", "agreed")


@pytest.mark.xfail(
    strict=True,
    reason="OscillatorAttention loses ~3.9% of its output scale in "
    "float32 against float64 on 2-step irregular sequences (found by the slow "
    "profile): the value trajectories' steady-state split cancels near resonance "
    "(RELIABILITY.md, 'Other reproducers')",
)
def test_oscillator_attention_float32_agrees_with_float64_on_short_irregular_input():
    module, wide = layer("OscillatorAttention"), _wide("OscillatorAttention")
    g = seeded(149)
    x = torch.randn(3, 2, E, generator=g) * 3.0
    t = torch.cumsum(torch.rand(3, 2, generator=g) + 0.2, 1)
    with torch.no_grad():
        np_close(module(x, t)[0], wide(x.double(), t.double())[0], 5e-3, "float32 vs float64")

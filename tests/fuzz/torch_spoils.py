"""Spoiling torch arguments: non-finite, extreme, empty, wrong dtype/type/rank/shape."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st

TENSOR_SPOILS = (
    "nan",
    "inf",
    "-inf",
    "huge",
    "tiny",
    "negative",
    "zero",
    "empty",
    "int",
    "complex",
    "half",
    "float64",
    "list",
    "numpy",
    "string",
    "none",
    "extra_axis",
    "drop_axis",
    "truncate",
)
NON_FINITE = ("nan", "inf", "-inf")


def huge_for(dtype: torch.dtype) -> float:
    """A magnitude whose square overflows `dtype` (1e30 in float32, 1e300 in float64)."""
    return 1e300 if dtype == torch.float64 else 1e30


def spoil_tensor(x, kind: str, pick: int):
    """`x` spoilt by `kind`; `pick` chooses the entry or axis."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x, dtype=torch.float32)
    y = x.detach().clone()
    flat = y.reshape(-1)
    if kind in NON_FINITE:
        if flat.numel():
            flat[pick % flat.numel()] = float(kind)
        return y
    if kind == "huge":
        return y * huge_for(y.dtype) + (0 if y.numel() else 1)
    if kind == "tiny":
        return y * (1e-300 if y.dtype == torch.float64 else 1e-30)
    if kind == "negative":
        return -y.abs() - 1
    if kind == "zero":
        return torch.zeros_like(y)
    if kind == "empty":
        shape = list(y.shape) or [1]
        shape[pick % len(shape)] = 0
        return torch.zeros(shape, dtype=y.dtype)
    if kind == "int":
        return y.round().to(torch.int64)
    if kind == "complex":
        return y.to(torch.complex64)
    if kind == "half":
        return y.to(torch.float16)
    if kind == "float64":
        return y.to(torch.float64) if y.dtype != torch.float64 else y.to(torch.float32)
    if kind == "list":
        return y.tolist()
    if kind == "numpy":
        return y.numpy()
    if kind == "string":
        return "tensor"
    if kind == "none":
        return None
    if kind == "extra_axis":
        return y[None]
    if kind == "drop_axis":
        return y[0] if y.ndim else y[None]
    if kind == "truncate":
        if y.ndim == 0 or not y.numel():
            return torch.zeros(2, 3, dtype=y.dtype)
        axis = pick % y.ndim
        n = y.shape[axis]
        return y.narrow(axis, 0, n - 1) if n > 1 else torch.cat([y, y], dim=axis)
    raise ValueError(kind)


@st.composite
def tensor_spoils(draw, kinds=TENSOR_SPOILS):
    return draw(st.sampled_from(kinds)), draw(st.integers(0, 10**6))


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def to64(value):
    """Float tensors (also inside tuples/dicts/dataclasses of tensors) as float64."""
    if isinstance(value, torch.Tensor):
        return value.double() if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: to64(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(to64(v) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(to64(v) for v in value)
    return value


def np_close(a, b, tol: float, what: str = "") -> None:
    a = np.asarray(a.detach().double() if isinstance(a, torch.Tensor) else a, dtype=float)
    b = np.asarray(b.detach().double() if isinstance(b, torch.Tensor) else b, dtype=float)
    assert a.shape == b.shape, f"{what}: shapes {a.shape} and {b.shape}"
    scale = 1.0 + float(np.max(np.abs(b), initial=0.0))
    err = float(np.max(np.abs(a - b), initial=0.0))
    assert err <= tol * scale, f"{what}: max error {err:.3g} against scale {scale:.3g}"

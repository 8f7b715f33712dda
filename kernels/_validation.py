"""Argument checks shared by every attention layer.

Each check raises ``ValueError``/``TypeError`` naming the argument, what was expected and what was
found, so a caller sees at once which input is wrong.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings

import torch


class MagnitudeWarning(RuntimeWarning):
    """An input so large that attention's squares of it (logits, norms, residuals) overflow
    its dtype: the outputs may be inf or NaN."""


# Attention squares its inputs (q . k, |q - k|^2, |v|^2) and multiplies them by weights and
# sums of modest size: an entry beyond sqrt(dtype max) / SAFETY cannot be squared with room to
# spare (float32 and bfloat16: 1.8e14, float64: 1.3e149). float16's range is too narrow for
# that margin; its bound is sqrt(max) / 4 = 64.
SAFETY = 1e5


def safe_magnitude(dtype: torch.dtype) -> float:
    """The largest input magnitude whose square stays well inside `dtype`'s range."""
    root = torch.finfo(dtype).max ** 0.5
    return root / SAFETY if root > 1e6 else root / 4


def warn_if_huge(name: str, x: torch.Tensor) -> None:
    """Warn (`MagnitudeWarning`, naming `name`) when a finite entry of `x` exceeds
    `safe_magnitude` of its dtype. Skipped while compiling (data-dependent control flow)."""
    if torch.compiler.is_compiling() or not x.is_floating_point() or not x.numel():
        return
    low, high = torch.aminmax(x.detach())  # two scalars: no temporary of x's size
    worst = max(-float(low), float(high))
    if not math.isfinite(worst):  # NaN or inf present: the largest finite entry
        detached = x.detach()
        worst = float(torch.where(torch.isfinite(detached), detached.abs(), 0.0).max())
    bound = safe_magnitude(x.dtype)
    if worst > bound:
        warnings.warn(
            f"{name} has entries of magnitude up to {worst:.3g}, beyond {bound:.2g}: attention "
            f"squares its inputs, which overflows {x.dtype} at this size, so outputs may be inf "
            f"or NaN; rescale {name}",
            MagnitudeWarning,
            stacklevel=3,
        )


def check_data(name: str, x, *, even: bool = False) -> tuple[int, int, int, int]:
    """A ``(B, H, T, D)`` floating tensor with ``B, H, T >= 1`` (and ``D`` even with `even`);
    returns its shape. Warns when its magnitude cannot be squared (`warn_if_huge`)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, found {type(x).__name__}")
    if x.ndim != 4:
        raise ValueError(f"{name} must have shape (B, H, T, D), found {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, found dtype {x.dtype}")
    batch, heads, steps, dim = x.shape
    if even and dim % 2:
        raise ValueError(
            f"{name} feature size D must be even (real and imaginary halves), found {dim}"
        )
    if steps < 1:
        raise ValueError(f"{name} must hold at least one time step (T >= 1), found T = 0")
    if batch < 1 or heads < 1:
        raise ValueError(
            f"{name} must hold at least one sequence and one head, found B = {batch}, H = {heads}"
        )
    warn_if_huge(name, x)
    return batch, heads, steps, dim


def check_finite(name: str, x: torch.Tensor) -> torch.Tensor:
    """Refuse a parameter tensor with a NaN or infinite entry, naming it."""
    if not torch.compiler.is_compiling() and not bool(torch.isfinite(x.detach()).all()):
        raise ValueError(f"{name} must be finite, found NaN or inf")
    return x


def as_parameter(name: str, value, like: torch.Tensor) -> torch.Tensor:
    """A number or tensor as a real tensor in `like`'s dtype and device, naming `name` when it
    is neither (a string, None, a complex value)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a number or a torch.Tensor, found {type(value).__name__}")
    if isinstance(value, torch.Tensor) and value.is_complex():
        raise TypeError(f"{name} must be real, found dtype {value.dtype}")
    return torch.as_tensor(value, dtype=like.dtype, device=like.device)


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, even: bool = False):
    """Check ``q, k: (B, H, T, D)`` and ``v: (B, H, T, Dv)`` agree; return ``(B, H, T, D, Dv)``.

    ``even=True`` also requires ``D`` and ``Dv`` even (real/imaginary halves of complex features).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, found {type(x).__name__}")
        if x.ndim != 4:
            raise ValueError(f"{name} must have shape (B, H, T, D), found {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor, found dtype {x.dtype}")
    if q.shape != k.shape:
        raise ValueError(
            f"q and k must have equal shapes, found {tuple(q.shape)} and {tuple(k.shape)}"
        )
    if v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"v must share (B, H, T) with q: expected {tuple(q.shape[:3])}, "
            f"found {tuple(v.shape[:3])}"
        )
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError(f"q, k, v must share a dtype, found {q.dtype}, {k.dtype}, {v.dtype}")
    if even:
        for name, size in (("q/k feature size D", q.shape[-1]), ("v feature size Dv", v.shape[-1])):
            if size % 2:
                raise ValueError(f"{name} must be even (real and imaginary halves), found {size}")
    batch, heads, steps, dim = q.shape
    if steps < 1:
        raise ValueError(f"q, k, v must hold at least one time step, found T = {steps}")
    if batch < 1 or heads < 1:
        raise ValueError(
            f"q, k, v must hold at least one sequence and one head, found B = {batch}, H = {heads}"
        )
    for name, x in (("q", q), ("k", k), ("v", v)):
        warn_if_huge(name, x)
    return batch, heads, steps, dim, v.shape[-1]


def check_times(t, steps: int, *, like: torch.Tensor, name: str = "t") -> torch.Tensor:
    """Time stamps as a ``(B or 1, 1, T)`` tensor in ``like``'s dtype and device.

    ``t`` may be ``None`` (``t_i = i``), a ``(T,)`` or a ``(B, T)`` tensor/array. Stamps must be
    finite and strictly increasing along the last axis.
    """
    if t is None:
        return torch.arange(steps, dtype=like.dtype, device=like.device).view(1, 1, steps)
    try:
        raw = torch.as_tensor(t)
    except (TypeError, ValueError, RuntimeError):  # a string, a ragged list, a dict
        raise TypeError(f"{name} must be a tensor of time stamps, found {t!r:.60}") from None
    if raw.is_complex():  # a cast to the real dtype would drop the imaginary part
        raise TypeError(f"{name} must hold real time stamps, found a complex dtype")
    t = raw.to(dtype=like.dtype, device=like.device)
    if t.ndim not in (1, 2) or t.shape[-1] != steps:
        raise ValueError(
            f"{name} must have shape (T,) or (B, T) with T = {steps}, found {tuple(t.shape)}"
        )
    tracing = torch.compiler.is_compiling()  # value checks would break torch.compile's graph
    if not tracing and not torch.isfinite(t).all():
        raise ValueError(f"{name} must be finite, found NaN or inf")
    if steps > 1 and not tracing:
        gaps = t[..., 1:] - t[..., :-1]
        if (gaps <= 0).any():
            worst = gaps.min().item()
            raise ValueError(f"{name} must be strictly increasing, found a step of {worst:.3g}")
    t = t.view(1, 1, steps) if t.ndim == 1 else t.unsqueeze(1)
    if t.shape[0] not in (1, like.shape[0]):
        raise ValueError(f"{name} batch size must be 1 or {like.shape[0]}, found {t.shape[0]}")
    return t


def check_heads(embed_dim: int, num_heads: int, *, even: bool = False) -> int:
    """Head size ``embed_dim // num_heads``; ``even=True`` requires it even (complex pairs)."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive integer, found {num_heads!r}")
    if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim < 1:
        raise ValueError(f"embed_dim must be a positive integer, found {embed_dim!r}")
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
    head_dim = embed_dim // num_heads
    if even and head_dim % 2:
        raise ValueError(
            f"head size embed_dim / num_heads = {head_dim} must be even (real and imaginary halves)"
        )
    return head_dim


def check_input(x: torch.Tensor, embed_dim: int, *, name: str = "x") -> tuple[int, int]:
    """Check a module input ``x: (B, T, E)`` with ``E == embed_dim``; return ``(B, T)``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, found {type(x).__name__}")
    if x.ndim != 3 or x.shape[-1] != embed_dim:
        raise ValueError(f"{name} must have shape (B, T, {embed_dim}), found {tuple(x.shape)}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(
            f"{name} must hold at least one sequence and one step, found shape {tuple(x.shape)}"
        )
    warn_if_huge(name, x)
    return x.shape[0], x.shape[1]


def check_tensor(name: str, x) -> None:
    """A torch.Tensor (``nn.Linear`` raises TypeError for anything else; so does this)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, found {type(x).__name__}")


def check_decay_factor(a_bar: torch.Tensor, name: str) -> torch.Tensor:
    """``e^(-a dt)`` that must stay > 0: without process noise a gap so long that it underflows
    would make the state known exactly (infinite precision); refused naming the gaps' source."""
    if not torch.compiler.is_compiling() and bool((a_bar.detach() <= 0).any()):
        raise ValueError(
            f"{name} has a gap so long that e^(-a dt) underflows to 0; without process noise "
            "the state would be known exactly: shorten the gap or use process noise"
        )
    return a_bar


def check_kalman_attention(
    values,
    times,
    *,
    decay,
    frequencies,
    process_var,
    measurement_var,
    gain_scale=None,
    prior_mean=None,
    prior_variance=None,
) -> None:
    """The arguments of `kernels.functional.kalman_attention.kalman_attention`, named.

    ``values (B, H, T, D)`` with D even; ``times (B or 1, 1, T)`` finite and increasing;
    ``decay, process_var, measurement_var (H,)`` finite with ``a >= 0``, ``sigma^2 >= 0``,
    ``eta^2 > 0``; ``frequencies (H, D/2)`` finite; ``gain_scale (H,)`` in (0, 1];
    ``prior_mean (B, H, D)`` and ``prior_variance (B, H)`` (broadcastable), given together.
    """
    batch, heads, steps, dim = check_data("values", values, even=True)
    if not isinstance(times, torch.Tensor) or times.ndim != 3:
        found = tuple(times.shape) if isinstance(times, torch.Tensor) else type(times).__name__
        raise ValueError(f"times must be a (B or 1, 1, T) tensor, found {found}")
    if times.shape[1:] != (1, steps) or times.shape[0] not in (1, batch):
        raise ValueError(
            f"times must have shape ({batch} or 1, 1, {steps}), found {tuple(times.shape)}"
        )
    check_times(times.reshape(times.shape[0], steps), steps, like=values, name="times")
    for name, x, shape, low, strict in (
        ("decay", decay, (heads,), 0.0, False),
        ("process_var", process_var, (heads,), 0.0, False),
        ("measurement_var", measurement_var, (heads,), 0.0, True),
        ("frequencies", frequencies, (heads, dim // 2), None, False),
        ("gain_scale", gain_scale, (heads,), 0.0, True),
    ):
        if x is None and name == "gain_scale":
            continue
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, found {type(x).__name__}")
        if tuple(x.shape) != shape:
            raise ValueError(f"{name} must have shape {shape}, found {tuple(x.shape)}")
        if x.dtype != values.dtype:
            raise TypeError(f"{name} must have values' dtype {values.dtype}, found {x.dtype}")
        check_finite(name, x)
        if low is not None and not torch.compiler.is_compiling():
            bad = (x <= low) if strict else (x < low)
            if bool(bad.any()):
                raise ValueError(f"{name} must be {'>' if strict else '>='} {low}")
    if (prior_mean is None) != (prior_variance is None):
        raise ValueError("prior_mean and prior_variance must be given together (or neither)")
    for name, x, tail in (
        ("prior_mean", prior_mean, (heads, dim)),
        ("prior_variance", prior_variance, (heads,)),
    ):
        if x is None:
            continue
        if not isinstance(x, torch.Tensor) or tuple(x.shape[1:]) != tail:
            found = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(
                f"{name} must have shape (B, {', '.join(map(str, tail))}), found {found}"
            )


def _outputs(result) -> list:
    """The output tensors of an attention function's result: its ``output`` field, the result
    itself, or every tensor of a plain tuple (``(a_bar, p_bar)``, ``(output, variance, ...)``)."""
    if isinstance(result, torch.Tensor):
        return [result]
    output = getattr(result, "output", None)
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(result, tuple) and not hasattr(result, "_fields"):
        return [x for x in result if isinstance(x, torch.Tensor)]
    return []


def _floats(value):
    """Every floating tensor inside an argument (tensors, tuples, named tuples, dataclasses)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (tuple, list)):
        return [x for item in value for x in _floats(item)]
    if hasattr(value, "__dataclass_fields__"):
        return [x for f in value.__dataclass_fields__ for x in _floats(getattr(value, f))]
    return []


def _magnitude(value) -> float:
    if isinstance(value, bool) or value is None:
        return 0.0
    if isinstance(value, (int, float)):
        return abs(float(value)) if math.isfinite(value) else 0.0
    sizes = [x.detach().abs().max().item() for x in _floats(value) if x.numel()]
    return max(sizes, default=0.0)


def _all_finite(x: torch.Tensor) -> bool:
    """Whether every entry of ``x`` is finite, usually in one reduction: a NaN or infinite
    entry makes any sum of the entries NaN or infinite, so a finite sum proves them all
    finite (no temporary of ``x``'s size; ``isfinite().all()`` takes four passes and cost
    ~5% of an attention call at T = 1024). Only a non-finite sum, which finite entries can
    also give by overflowing, is settled by `torch.isfinite`."""
    x = x.detach()
    return bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all())


def overflow_warning(function=None, *, outputs=_outputs):
    """Decorate an attention function: warn (`MagnitudeWarning`) when its output holds a NaN
    or inf although every argument is finite, naming the arguments whose magnitudes are
    furthest from 1 (a variance of 1e-30, a decay of 1e30: the likely cause first).

    ``outputs(result)`` picks the tensors that must be finite (default `_outputs`); a function
    with an infinite entry by design (a diffuse prior's first prediction variance) leaves it
    out: ``@overflow_warning(outputs=...)``. Non-finite input is left to propagate, as torch
    does; skipped while compiling.
    """
    if function is None:
        return functools.partial(overflow_warning, outputs=outputs)
    signature = inspect.signature(function)

    @functools.wraps(function)
    def checked(*args, **kwargs):
        result = function(*args, **kwargs)
        produced = [x for x in outputs(result) if x.is_floating_point()]
        if not produced or torch.compiler.is_compiling():
            return result
        if all(_all_finite(x) for x in produced):
            return result
        output = produced[0]
        try:
            bound = signature.bind(*args, **kwargs).arguments
        except TypeError:
            return result
        inputs = {}
        for name, value in bound.items():
            if isinstance(value, tuple) and hasattr(value, "_fields"):  # parameters, by field
                inputs.update({f"{name}.{f}": getattr(value, f) for f in value._fields})
            elif _floats(value) or (
                isinstance(value, (int, float)) and not isinstance(value, bool)
            ):
                inputs[name] = value
        for value in inputs.values():
            for x in _floats(value):
                if not bool(torch.isfinite(x.detach()).all()):
                    return result  # NaN or inf in, NaN or inf out
            if isinstance(value, float) and math.isnan(value):
                return result
        scales = sorted(
            (
                (abs(math.log10(m)), name, m)
                for name, value in inputs.items()
                if (m := _magnitude(value)) > 0
            ),
            reverse=True,
        )
        named = ", ".join(f"{name} {m:.3g}" for _, name, m in scales[:3])
        warnings.warn(
            f"{function.__name__}: the output holds NaN or inf although every argument is "
            f"finite: the computation overflows {output.dtype} at these scales (the magnitudes "
            f"furthest from 1 first: {named}); rescale them",
            MagnitudeWarning,
            stacklevel=2,
        )
        return result

    return checked


def check_positive(name: str, value) -> float:
    """A finite real number > 0 (a time gap, a step), naming `name` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, found {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be finite and > 0, found {value!r}")
    return float(value)


def check_query_fit(q, t, freqs) -> torch.Tensor:
    """`fit_query`'s arguments: ``q (B, H, T, D)`` floating, ``freqs (J,)`` finite, ``t`` as
    `check_times` takes it (or its ``(Bt, 1, T)`` output); returns ``t`` as ``(Bt, 1, T)``."""
    if not isinstance(q, torch.Tensor) or q.ndim != 4 or not q.is_floating_point():
        found = (
            f"dtype {q.dtype}, shape {tuple(q.shape)}"
            if isinstance(q, torch.Tensor)
            else (type(q).__name__)
        )
        raise TypeError(f"q must be a floating (B, H, T, D) tensor, found {found}")
    if not isinstance(freqs, torch.Tensor) or freqs.ndim != 1:
        found = tuple(freqs.shape) if isinstance(freqs, torch.Tensor) else type(freqs).__name__
        raise TypeError(f"freqs must be a (J,) tensor, found {found}")
    check_finite("freqs", freqs)
    if isinstance(t, torch.Tensor) and t.ndim == 3 and t.shape[1] == 1:
        return check_times(t[:, 0], q.shape[2], like=q)
    return check_times(t, q.shape[2], like=q)


def check_nll_args(mean, variance, target) -> None:
    """`mc_marginal_nll`'s tensors: floating ``mean``/``variance`` of one dtype, integer
    ``target`` (class indices)."""
    for name, x in (("mean", mean), ("variance", variance)):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            found = f"dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise TypeError(f"{name} must be a floating tensor, found {found}")
    if variance.dtype != mean.dtype:
        raise TypeError(f"variance must have mean's dtype {mean.dtype}, found {variance.dtype}")
    if not isinstance(target, torch.Tensor) or target.is_floating_point() or target.is_complex():
        found = (
            f"dtype {target.dtype}" if isinstance(target, torch.Tensor) else (type(target).__name__)
        )
        raise TypeError(f"target must be an integer tensor of class indices, found {found}")


def check_real(name: str, value) -> float:
    """A real number (int or float, not bool), naming `name` otherwise; returned as float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, found {value!r}")
    return float(value)


def check_state(name: str, state, cls) -> None:
    """A decoding state of type `cls` (a named tuple of tensors), naming `name` otherwise."""
    if not isinstance(state, cls):
        raise TypeError(f"{name} must be a {cls.__name__}, found {type(state).__name__}")


def check_class_indices(name: str, target: torch.Tensor, classes: int) -> None:
    """Class indices in ``[0, classes)``."""
    if target.numel() and not torch.compiler.is_compiling():
        low, high = int(target.min()), int(target.max())
        if low < 0 or high >= classes:
            raise ValueError(
                f"{name} must hold class indices in [0, {classes}), found [{low}, {high}]"
            )

"""The backend choice of the functions that have a fused Triton kernel.

The kernels live in their own modules; this module imports no Triton itself, so
``import kernels`` stays free of it. `use_triton` is the one rule
the torch functions apply to their ``backend`` keyword, at call time, from the inputs' device.
"""

from __future__ import annotations

import os

import torch

BACKENDS = ("auto", "torch", "triton")
# Input dtypes the kernels take (they accumulate in float32; float64 stays with torch).
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def use_triton(backend: str, x: torch.Tensor, unsupported: dict[str, bool]) -> bool:
    """Whether a call runs its Triton kernel.

    Parameters
    ----------
    backend : ``"auto"`` (Triton when ``x`` is on a CUDA device and no option is unsupported),
        ``"torch"`` or ``"triton"`` (required; on CPU only under ``TRITON_INTERPRET=1``).
    x : an input tensor; its device and dtype decide.
    unsupported : ``{option name: True if the call uses it}`` for the options the kernel lacks.

    Raises
    ------
    ValueError
        for an unknown ``backend``, or ``backend="triton"`` with an unsupported option, dtype or
        a CPU tensor outside the interpreter.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, found {backend!r}")
    if backend == "torch" or not isinstance(x, torch.Tensor):
        return False  # a non-tensor input is left to the torch function's own checks
    used = [name for name, flag in unsupported.items() if flag]
    if x.dtype not in KERNEL_DTYPES:
        used.append(f"dtype {x.dtype} (the kernel takes {[str(d) for d in KERNEL_DTYPES]})")
    if backend == "auto":
        return x.is_cuda and not used
    if used:
        raise ValueError(f"backend='triton' does not support {', '.join(used)}; use 'torch'")
    if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            f"backend='triton' needs CUDA tensors (found device {x.device}) or the Triton "
            "interpreter (set TRITON_INTERPRET=1 before importing the kernels)"
        )
    return True

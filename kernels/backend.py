"""The backend choice of the functions that have a fused Triton kernel, and its tile.

The kernels live in their own modules (``kernels/ops/<family>/triton.py``); this module imports
no Triton itself, so ``import kernels`` stays free of it. `use_triton` is the one rule the
functional forms apply to their ``backend`` keyword, at call time, from the inputs' device.
Every layer with a fused kernel takes ``backend`` and passes it down unchanged.

The tile has one name, ``block_size``, on every path: the torch forms process that many query
rows at a time (any positive integer, or None for all), the fused kernels use it as their
``BLOCK_M = BLOCK_N`` tile, which must be a power of two >= 16 (`tile_supported`; None is
`DEFAULT_TILE`). A ``block_size`` the kernel cannot take is an unsupported option: ``"auto"``
then runs torch, ``"triton"`` raises.
"""

from __future__ import annotations

import os

import torch

BACKENDS = ("auto", "torch", "triton")
# Input dtypes the kernels take (they accumulate in float32; float64 stays with torch).
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# Rows and keys per tile of the fused kernels: 64 on a GPU (the tensor-core tile of Triton's
# tutorial 06 at D <= 128).
DEFAULT_TILE = 64


def tile_supported(block_size) -> bool:
    """Whether the fused kernels take ``block_size`` as their tile: None (`DEFAULT_TILE`) or a
    power of two >= 16 (``tl.dot``'s minimum)."""
    if block_size is None:
        return True
    if isinstance(block_size, bool) or not isinstance(block_size, int):
        return False
    return block_size >= 16 and not block_size & (block_size - 1)


def tile_reason(block_size) -> dict[str, bool]:
    """The `use_triton` ``unsupported`` entry for a tile: ``{reason: not tile_supported}``."""
    return {
        f"block_size={block_size!r} (the tile is a power of two >= 16)": not tile_supported(
            block_size
        )
    }


def tile(block_size) -> int:
    """The fused kernels' tile for ``block_size`` (`tile_supported`); ValueError otherwise."""
    if not tile_supported(block_size):
        raise ValueError(
            "block_size must be a power of two >= 16 (tl.dot's minimum) for the fused kernel, "
            f"found {block_size!r}"
        )
    return DEFAULT_TILE if block_size is None else block_size


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

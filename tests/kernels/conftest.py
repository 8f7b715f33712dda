"""Kernel tests: Triton runs in its CPU interpreter where CUDA is absent, compiled where present.

``TRITON_INTERPRET`` is read when a kernel is decorated (``@triton.jit``, at the import of its
module), so it is decided here, when pytest loads this directory and before any test imports
a kernel module; `torch.cuda.is_available` imports no Triton. The rule (`interpreter_setting`):

* an explicit ``TRITON_INTERPRET`` from the environment is kept, whatever its value
  (``TRITON_INTERPRET=1`` runs the interpreter tests on a GPU machine, ``0`` insists on
  compiling);
* otherwise ``1`` where CUDA is absent: the interpreter tests run on CPU tensors at tiny shapes;
* otherwise nothing where CUDA is present: the kernels compile, so ``pytest -m gpu`` tests the
  real kernels (it once ran them in the interpreter, silently, unless ``TRITON_INTERPRET=0``
  was given). The CPU-interpreter tests need ``TRITON_INTERPRET=1`` on such a machine: one
  process cannot hold both modes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch


def interpreter_setting(environ: Mapping[str, str], cuda_available: bool) -> str | None:
    """The value to give ``TRITON_INTERPRET``, or None to leave the environment as it is.

    ``environ`` is read only: an explicit ``TRITON_INTERPRET`` in it (any value) gives None;
    otherwise ``"1"`` without CUDA and None with it.
    """
    if "TRITON_INTERPRET" in environ or cuda_available:
        return None
    return "1"


_SETTING = interpreter_setting(os.environ, torch.cuda.is_available())
if _SETTING is not None:
    os.environ["TRITON_INTERPRET"] = _SETTING

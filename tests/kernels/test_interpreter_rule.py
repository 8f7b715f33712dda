"""The conftest's rule for ``TRITON_INTERPRET`` (`tests.kernels.conftest.interpreter_setting`).

The interpreter only where CUDA is absent, an explicit environment value always kept: a GPU run
of ``-m gpu`` must compile the kernels, not silently interpret them.
"""

from __future__ import annotations

import os

import pytest
import torch

from tests.kernels.conftest import interpreter_setting


@pytest.mark.parametrize(
    ("environ", "cuda", "expected"),
    [
        ({}, False, "1"),  # CPU only: the interpreter
        ({}, True, None),  # a GPU: compile (the trap was "1" here)
        ({"TRITON_INTERPRET": "0"}, False, None),  # explicit values are kept ...
        ({"TRITON_INTERPRET": "0"}, True, None),
        ({"TRITON_INTERPRET": "1"}, True, None),  # ... including the interpreter on a GPU
        ({"TRITON_INTERPRET": ""}, False, None),  # set, even if empty: the user's choice
        ({"PATH": "/usr/bin"}, False, "1"),  # other variables do not count
    ],
)
def test_interpreter_setting(environ, cuda, expected):
    before = dict(environ)
    assert interpreter_setting(environ, cuda) == expected
    assert environ == before  # a pure function: the environment is not touched


def test_this_session_follows_the_rule():
    """In this process: without CUDA the interpreter is on (set here or given explicitly)."""
    if not torch.cuda.is_available():
        assert "TRITON_INTERPRET" in os.environ

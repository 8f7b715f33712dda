"""Kernel tests: Triton runs in its CPU interpreter (set before any kernel module is imported)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

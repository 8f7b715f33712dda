"""The attention ops, one folder per kernel family (the house plan of ``kernels``).

Each family folder holds the same rooms:

* ``naive.py``: the float64 reference (a loop over tokens or pairs), the oracle the fast forms
  are tested against;
* ``params.py``: the argument preparation and types the torch forms and the fused kernel share;
* the torch forms;
* ``triton.py`` where there is a fused kernel: it imports ``params`` and never the torch forms;
* ``__init__.py``: the entry points, which dispatch on ``backend`` (`kernels.backend`) where
  there is a kernel.

Families here: `kla` (seed 001: the Kalman filter as prefix scans, with its chunked Triton
scan) and `oscillator` (seed 002: OsciFormer's closed form; no kernel). `common` holds what the
families share. The public functions are re-exported by `kernels.functional`. No module here
imports `kernels.functional` or `kernels.layers`; ``tests/test_import_graph.py`` keeps the
import graph acyclic.
"""

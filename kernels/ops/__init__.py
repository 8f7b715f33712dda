"""The attention ops, one folder per kernel family (the house plan of ``kernels``).

Each family folder holds the same rooms:

* ``naive.py``: the float64 complex-loop reference, the oracle the fast forms are tested against;
* ``params.py``: the argument preparation the torch forms and the fused kernel share (each
  quantity validated once, under the name the layers and the CLI use);
* the torch forms (``afa``: ``tensor.py``, ``isotropic.py``, ``separable.py``);
* ``triton.py`` where there is a fused kernel: the packer, which imports ``params`` and never
  the torch forms (the kernel itself, shared by AFA and RFA, is `common.fused_filtering`);
* ``__init__.py``: the entry points, which take the parameter objects (`common.params`) or
  their keywords and dispatch on ``backend`` (`kernels.backend`).

Families: `afa` (seed 000: tensor, isotropic, separable AFA and the prediction), `kla` (seed
001: the Kalman filter as prefix scans, with its chunked Triton scan), `oscillator` (seed 002:
OsciFormer's closed form; no kernel), `rfa` (seed 004), `rt` (RT-AFA, seed 000 Alg. 2; RT-RFA,
seed 003), `unrolled` (seed 000 B.2: the recursive filter and its chunked Gaussian form),
`baselines` (softmax, RoPE, ALiBi, decayed RoPE); `common` holds what they share (real pairs,
the one rotation, lags, parameter objects, positional banks, the fused kernel). The public
functions are re-exported by `kernels.functional`. No module here imports upward
(`kernels.functional`, `kernels.layers`) or sideways into another family except through
`common`, and `unrolled`, whose chunked form runs `kla`'s Moebius scan;
``tests/test_import_graph.py`` keeps the graph acyclic.
"""

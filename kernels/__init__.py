"""Filtering attention layers in torch (AFA, RT-AFA, RFA, RT-RFA, KLA and their baselines).

``kernels.ops`` holds the math, one folder per kernel family (``naive.py`` oracle, ``params.py``,
the torch forms, ``triton.py`` where a fused kernel exists, an entry point that dispatches on
``backend``); ``kernels.functional`` is its public namespace (functions of ``(q, k, v, t,
parameters)`` on ``(B, H, T, D)`` tensors, the parameters as `Dynamics` / `Robust` objects or
keywords); ``kernels.layers`` the ``nn.Module`` wrappers on ``(B, T, E)`` with their projections
and parameterisations; ``kernels.backend`` the backend rule and the tile; ``kernels.tolerances``
the fused kernels' accuracy contract. Complex features are real pairs
``[real half | imaginary half]`` (`kernels.ops.common.complex_pairs`). This package imports no
other package of the suite.
"""

"""Filtering attention layers in torch (AFA, RT-AFA, RFA, RT-RFA, KLA and their baselines).

``kernels.functional`` holds the math as functions of ``(q, k, v, t, parameters)`` on
``(B, H, T, D)`` tensors; ``kernels.layers`` the ``nn.Module`` wrappers on ``(B, T, E)`` with
their projections and parameterisations. Complex features are real pairs
``[real half | imaginary half]`` (`kernels.functional.complex_pairs`). This package imports no
other package of the suite.
"""

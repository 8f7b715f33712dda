"""``nn.Module`` attention layers on ``(B, T, E)`` (like ``nn.MultiheadAttention``, batch first).

`afa.AdaptiveFilterAttention`, `rt_afa.RTAdaptiveFilterAttention`,
`afa_transformer.AFATransformerBlock`, `unrolled_afa.UnrolledAdaptiveFilterAttention`,
`rfa.RobustFilterAttention`, `rt_transformer.RTRobustFilterAttention`,
`rt_transformer.RTTransformerBlock`, `kla.KalmanLinearAttention`; the baselines in
`baselines`; building blocks `complex_linear.ComplexLinear` and `heads`.

Each layer calls its op family in `kernels.ops` with its parameters as the objects of
`kernels.ops.common.params` (``layer.dynamics()`` a `Dynamics`, ``layer.robust()`` a `Robust`,
in natural units before the time scaling ``step``). The layers with a fused kernel (AFA, RFA,
the AFA Transformer block) take ``backend`` (``"auto"``, ``"torch"``, ``"triton"``) and the tile
``block_size`` and pass both down unchanged (`kernels.backend`).
"""

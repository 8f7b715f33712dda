"""``nn.Module`` attention layers on ``(B, T, E)`` (like ``nn.MultiheadAttention``, batch first).

`afa.AdaptiveFilterAttention`, `rt_afa.RTAdaptiveFilterAttention`,
`afa_transformer.AFATransformerBlock`, `unrolled_afa.UnrolledAdaptiveFilterAttention`,
`rfa.RobustFilterAttention`, `rt_transformer.RTRobustFilterAttention`,
`rt_transformer.RTTransformerBlock`, `kla.KalmanLinearAttention`; the baselines in
`baselines`; building blocks `complex_linear.ComplexLinear` and `heads`.
"""

"""``nn.Module`` attention layers on ``(B, T, E)`` (like ``nn.MultiheadAttention``, batch first)."""

"""Functional attention layers on ``(B, H, T, D)`` tensors: the math, no parameters."""

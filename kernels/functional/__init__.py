"""Functional attention layers on ``(B, H, T, D)`` tensors: the math, no parameters.

`afa` (tensor, isotropic and separable AFA, seed 000), `rt_afa` (seed 000 Algorithm 2),
`unrolled_afa` (seed 000 Algorithm 4), `rfa` (seed 004), `rt_rfa` (seed 003), `kla` (seed 001:
Moebius and affine scans, parallel and sequential), `baselines`
(softmax, RoPE, ALiBi, decayed RoPE), `positional` (rotary factors, ALiBi slopes, spectral
coupling, sinusoidal embeddings); shared pieces in `complex_pairs` and `lags`.
"""

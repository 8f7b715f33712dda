"""Pieces every op family shares.

`complex_pairs` (complex features as real pairs ``[re | im]``), `rotation` (the one rotation
``r e^{i theta}`` on real pairs), `lags` (time lags, the relaxation function, the isotropic
propagated variance), `params` (the parameter objects `Dynamics` and `Robust`), `positional`
(RoPE and spectrally coupled frequency banks, ALiBi slopes, sinusoidal embeddings),
`attention` (the softmax forms' output type, per-head parameters, the causal mask) and
`fused_filtering` (the fused isotropic filtering-attention kernel of AFA and RFA; it imports
Triton, so nothing here imports it).
"""

"""KLA's fused Triton scan (`kla_scan`), until the KLA family moves to ``kernels.ops.kla``.

The filtering-attention kernel of AFA and RFA is `kernels.ops.common.fused_filtering`, with its
packers in `kernels.ops.afa.triton` and `kernels.ops.rfa.triton` (see `kernels.backend`).
"""

"""Fused Triton kernels, each beside the torch function it must equal (see `kernels.backend`)."""

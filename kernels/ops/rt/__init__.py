"""Radial-tangential filtering attention: RT-AFA (seed 000 Alg. 2) and RT-RFA (seed 003 Alg. 1).

Each head's features rotate as ``e^{i omega_k s}`` and decay at ``a`` (``mu``); residuals and
values are split along the direction of the current state (radial) and across it
(tangential), with their own propagated precisions (seed 000 5.2-5.4; seed 003 eqs. 7-14):

* `rt_afa` (`kernels.ops.rt.afa`): one RT-Kalman IRLS iteration as attention, radial and
  tangential softmaxes and a geodesic step;
* `rt_rfa` (`kernels.ops.rt.rfa`): RT-RFA with its three modifications (the magnitude-
  dependent directional precision, hyperspherical states, the tangent-space residual).

The op folder: `naive` (the float64 complex loops, the oracles), `params` (the per-head
argument checks), `afa` and `rfa` (the torch forms; no fused kernel). Shapes:
``q, k, v (B, H, T, D)`` real pairs ``[re | im]`` (``D = 2n``; RT-AFA also takes real features
without frequencies), ``t`` None, ``(T,)`` or ``(B, T)``; outputs ``(B, H, T, D)``, weights
``(B, H, T, T)``.
"""

from kernels.ops.rt.afa import RTAFAOutput, rt_afa
from kernels.ops.rt.rfa import RTRFAOutput, rt_rfa, student_exponent

__all__ = ["RTAFAOutput", "RTRFAOutput", "rt_afa", "rt_rfa", "student_exponent"]

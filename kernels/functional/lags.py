"""Temporary: `kernels.ops.common.lags` under its old path, for `kernels.functional.kla` only.

The KLA family (`kernels.functional.kla`, moving to ``kernels.ops.kla`` in the KLA part of
issue 15) imports ``relaxation`` from here. Delete this module with that move; nothing else
imports it.
"""

from kernels.ops.common.lags import isotropic_variance, lags, relaxation

__all__ = ["isotropic_variance", "lags", "relaxation"]

"""The public functional names of `kernels`, looked up in one place.

`kernels.functional` is the public namespace of the attention functions. Today it re-exports
no functions (they live in its submodules, which are moving to ``kernels/ops/...``), so
`functional` first asks the namespace itself and only then the submodule it is in today: after
the move, when ``kernels.functional`` re-exports them, this module needs no edit, and if a name
moves elsewhere only `_WHERE` changes.
"""

from __future__ import annotations

import importlib
import types

from kernels import functional as _F

# name -> the submodule of kernels.functional that defines it today
_WHERE = {
    "tensor_afa": "afa",
    "isotropic_afa": "afa",
    "separable_afa": "afa",
    "predict": "afa",
    "rt_afa": "rt_afa",
    "unrolled_afa": "unrolled_afa",
    "kalman_attention": "kalman_attention",
    "rfa_attention": "rfa",
    "rt_rfa": "rt_rfa",
    "softmax_attention": "baselines",
    "rope_attention": "baselines",
    "alibi_attention": "baselines",
    "decayed_rope_attention": "baselines",
    "kla_scan": "kla",
    "kla_step": "kla",
    "KLAState": "kla",
    "ou_prior": "kla",
    "mc_marginal_nll": "kla",
    "oscillator_attention": "oscillator",
    "oscillator_logits": "oscillator",
    "fit_query": "oscillator",
    "OscillatorParams": "oscillator",
}


def functional(name: str):
    """``kernels.functional.<name>``, wherever it is defined today."""
    found = getattr(_F, name, None)
    if found is not None and not isinstance(found, types.ModuleType):
        return found
    module = importlib.import_module(f"kernels.functional.{_WHERE[name]}")
    return getattr(module, name)


FUNCTIONS = tuple(_WHERE)

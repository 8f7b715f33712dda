"""Parameter objects of the filtering layers: `Dynamics` and `Robust`.

The layers of seeds 000-004 filter each head's features as the eigen-coordinates of a linear
SDE (seed 000 2.1, 3.1; seed 004 eq. 9): feature ``k`` evolves as ``dZ_k = lambda_k Z_k dt +
noise`` with ``lambda_k = -a_k + i omega_k``, process variance ``sigma_k^2`` and measurement
variance ``eta_k^2``. `Dynamics` holds those four quantities, `Robust` the robust weighting of
the residuals (``nu`` and the temperature of seed 000 3.1 / 4.1, seed 004 eq. 11). Their field
names are the keywords of the functional forms, the layer options and the CLI's
``--layer-option``: each quantity has one name from the command line to the kernel.

The objects hold values as given (numbers or tensors, with their autograd graph); each op
family validates and broadcasts them once per call, in its ``params`` module, because the
accepted shapes and ranges are the family's (per head or per feature; ``temperature >= 0`` in
AFA, ``> 0`` in RFA). Both objects also read like the keyword dictionaries they replace:
``dynamics["decay"]``, ``dict(dynamics)`` and ``f(**dynamics)`` give the keywords.

Time: a layer's clock is ``step * t``; `Dynamics.scaled` gives the dynamics on that clock,
``(a, omega, sigma^2) -> step (a, omega, sigma^2)`` with ``eta^2`` unchanged (a rate times a
time; the measurement variance is not a rate).

Shapes: each field is a number, a per-head ``(H,)`` tensor or (where the family allows it) a
per-feature ``(H, n)`` tensor; ``frequencies`` is ``(H, n)`` / ``(n,)`` or None (real features,
no rotation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any


class _NotGiven:
    """Marks a keyword the caller left out (``None`` is a meaningful value for some)."""

    def __repr__(self) -> str:
        return "<not given>"


NOT_GIVEN: Any = _NotGiven()


class _Keywords:
    """Dictionary-style reading of a frozen dataclass by its keyword names."""

    def keys(self) -> tuple[str, ...]:
        return tuple(f.name for f in fields(self))  # type: ignore[arg-type]

    def __getitem__(self, name: str):
        if name not in self.keys():
            raise KeyError(name)
        return getattr(self, name)


@dataclass(frozen=True, eq=False)
class Robust(_Keywords):
    """Robust weighting of the residuals (seed 000 3.1, A.4, 4.1; seed 004 eq. 11).

    nu : the robust scale (AFA, unrolled AFA) or the Student-t degrees of freedom (RFA), > 0;
        ``math.inf`` is the Gaussian limit. A number or an (H,) tensor.
    temperature : the exponent of the robust weight (AFA: ``(1 + d^2 / nu)^-temperature``;
        RFA: the inverse temperature of the softmax). A number or an (H,) tensor.
    """

    nu: Any = math.inf
    temperature: Any = 1.0

    @classmethod
    def resolve(cls, robust: Robust | None, *, nu=NOT_GIVEN, temperature=NOT_GIVEN) -> Robust:
        """``robust``, or one built from the keywords (defaults ``nu = inf``, temperature 1).

        Raises TypeError when both the object and a keyword are given, or ``robust`` is not a
        `Robust`.
        """
        given = {n: x for n, x in (("nu", nu), ("temperature", temperature)) if x is not NOT_GIVEN}
        if robust is None:
            return cls(**given)
        if not isinstance(robust, Robust):
            raise TypeError(f"robust must be a Robust, found {type(robust).__name__}")
        if given:
            raise TypeError(f"give robust or its keywords, not both: found {', '.join(given)}")
        return robust


_DYNAMICS = ("decay", "frequencies", "process_var", "measurement_var")


@dataclass(frozen=True, eq=False)
class Dynamics(_Keywords):
    """Linear dynamics ``lambda = -decay + i frequencies`` with their noise (seed 000 2.1, 3.1).

    decay : ``a >= 0``, the eigenvalues' real part is ``-a``.
    frequencies : ``omega``, the imaginary parts, or None: real features, no rotation.
    process_var : ``sigma^2 >= 0`` (the seed's ``|lambda_C|^2`` absorbed, seed 000 4.1).
    measurement_var : ``eta^2 > 0``.
    value : the value-dynamics twin (seed 000 3.1: the values may have their own dynamics, used
        for their precision, decay and rotation), complete in itself; None: the values share
        these dynamics. `for_values` is the one to use for the values.
    """

    decay: Any
    frequencies: Any
    process_var: Any
    measurement_var: Any
    value: Dynamics | None = None

    def __post_init__(self):
        if self.value is not None:
            if not isinstance(self.value, Dynamics):
                raise TypeError(f"value must be a Dynamics, found {type(self.value).__name__}")
            if self.value.value is not None:
                raise ValueError("the value dynamics have no value twin of their own")

    @property
    def for_values(self) -> Dynamics:
        """The dynamics of the values: the twin, or these."""
        return self if self.value is None else self.value

    def scaled(self, step) -> Dynamics:
        """The dynamics on the clock ``step * t``: ``(a, omega, sigma^2) step``, ``eta^2`` as is.

        ``step`` is a number or a scalar tensor (a learned step keeps its gradient). Fields the
        twin shares with these dynamics (the same object) stay shared after scaling.
        """
        done: dict[int, Any] = {}

        def scale(x):
            if x is None:
                return None
            if id(x) not in done:
                done[id(x)] = x * step
            return done[id(x)]

        def one(d: Dynamics) -> Dynamics:
            return Dynamics(
                scale(d.decay), scale(d.frequencies), scale(d.process_var), d.measurement_var
            )

        twin = None if self.value is None else one(self.value)
        return Dynamics(*one(self).fields(), value=twin)

    def fields(self) -> tuple:
        """``(decay, frequencies, process_var, measurement_var)``."""
        return self.decay, self.frequencies, self.process_var, self.measurement_var

    def keys(self) -> tuple[str, ...]:
        """The keywords of the functional forms: the four fields, and ``value_*`` with a twin."""
        if self.value is None:
            return _DYNAMICS
        return _DYNAMICS + tuple(f"value_{name}" for name in _DYNAMICS)

    def __getitem__(self, name: str):
        if name in _DYNAMICS:
            return getattr(self, name)
        if self.value is not None and name.startswith("value_") and name[6:] in _DYNAMICS:
            return getattr(self.value, name[6:])
        raise KeyError(name)

    @classmethod
    def resolve(
        cls,
        dynamics: Dynamics | None,
        *,
        decay=NOT_GIVEN,
        frequencies=NOT_GIVEN,
        process_var=NOT_GIVEN,
        measurement_var=NOT_GIVEN,
        value_decay=None,
        value_frequencies=None,
        value_process_var=None,
        value_measurement_var=None,
        defaults: dict | None = None,
    ) -> Dynamics:
        """``dynamics``, or one built from the keyword arguments of the functional forms.

        Each ``value_*`` keyword that is given makes a value twin whose other fields are the
        q/k ones (the same objects: shared). ``defaults`` fills keywords left out (e.g. RFA's
        ``process_var = 0``); without a default a keyword is required.

        Raises
        ------
        TypeError
            both ``dynamics`` and a keyword given, a required keyword missing, or ``dynamics``
            not a `Dynamics`.
        """
        given = {
            "decay": decay,
            "frequencies": frequencies,
            "process_var": process_var,
            "measurement_var": measurement_var,
        }
        twin = {
            "decay": value_decay,
            "frequencies": value_frequencies,
            "process_var": value_process_var,
            "measurement_var": value_measurement_var,
        }
        named = [n for n, x in given.items() if x is not NOT_GIVEN]
        named += [f"value_{n}" for n, x in twin.items() if x is not None]
        if dynamics is not None:
            if not isinstance(dynamics, Dynamics):
                raise TypeError(f"dynamics must be a Dynamics, found {type(dynamics).__name__}")
            if named:
                raise TypeError(
                    f"give dynamics or its keywords, not both: found {', '.join(named)}"
                )
            return dynamics
        defaults = defaults or {}
        for name, x in given.items():
            if x is NOT_GIVEN:
                if name not in defaults:
                    raise TypeError(f"{name} is required (or dynamics=Dynamics(...))")
                given[name] = defaults[name]
        value = None
        if any(x is not None for x in twin.values()):
            value = cls(**{n: given[n] if twin[n] is None else twin[n] for n in _DYNAMICS})
        return cls(**given, value=value)


__all__ = ["NOT_GIVEN", "Dynamics", "Robust"]

"""JSON round-trip for the simulator's frozen dataclasses (systems, schedules, scenarios).

Every record type registers itself; ``to_dict`` writes ``{"type": ClassName, field: value, ...}``
with arrays as nested lists, and ``record_from_dict`` rebuilds the object through its constructor,
so a loaded record passes the same validation as a new one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make `cls` reconstructible by `record_from_dict`."""
    _REGISTRY[cls.__name__] = cls
    return cls


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "type" in value:
        return record_from_dict(value)
    return value


class Record:
    """Mixin for frozen dataclasses that serialise to JSON-compatible dicts."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type(self).__name__}
        for field in dataclasses.fields(self):
            if field.init:
                out[field.name] = _encode(getattr(self, field.name))
        return out


def record_from_dict(data: dict[str, Any]) -> Any:
    """Rebuild a registered record from `Record.to_dict` output."""
    if not isinstance(data, dict) or "type" not in data:
        raise ValueError("a serialised record must be a dict with a 'type' key")
    kind = data["type"]
    if kind not in _REGISTRY:
        raise ValueError(f"unknown record type {kind!r}; known: {', '.join(sorted(_REGISTRY))}")
    kwargs = {k: _decode(v) for k, v in data.items() if k != "type"}
    return _REGISTRY[kind](**kwargs)

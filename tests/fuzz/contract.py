"""The error contract every fuzz case is held to, and the counter of inputs fired.

`expect` runs one call and classifies it:

* **error**: the call raised one of the allowed exceptions (``ValueError``/``TypeError`` for the
  APIs, plus ``FileNotFoundError``/``FileExistsError`` for files) and its message names the
  argument that was made bad (``names``, matched as whole words);
* **agreed**: a valid input gave a finite result that agrees with its float64 reference;
* **finite**: an input gave a finite result (no reference to compare with: an input that is
  unusual but allowed, such as tiny values or integer dtypes);
* **warned**: a non-finite result from finite input, with a warning that names the argument;

and fails the test for the two outcomes the contract rules out, which are counted first:

* **traceback**: any other exception (``IndexError``, ``ZeroDivisionError``, torch's
  ``RuntimeError``, ``LinAlgError`` without the argument's name, ...), or an allowed one that
  does not name the argument, or a valid input refused;
* **wrong**: a silent non-finite result from finite input, or a valid input's result that
  disagrees with its reference.

The counts (per target and outcome) are printed at the end of the session and written as JSON
to ``$FUZZ_COUNTS`` when it is set (RELIABILITY.md records them for the `slow` profile).
"""

from __future__ import annotations

import re
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

OUTCOMES = ("error", "agreed", "finite", "warned", "traceback", "wrong")
API_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError)
FILE_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    FileNotFoundError,
    FileExistsError,
)

# target -> outcome -> count, for the whole session
RECORD: defaultdict[str, Counter] = defaultdict(Counter)


class ContractViolation(AssertionError):
    """A fuzz input broke the contract (a traceback or a wrong result)."""


def record(target: str, outcome: str) -> None:
    assert outcome in OUTCOMES, outcome
    RECORD[target][outcome] += 1


def mentions(message: str, names: Iterable[str]) -> bool:
    """Whether `message` names one of `names` as a whole word (``C`` in ``measurement.C``)."""
    for name in names:
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message):
            return True
    return False


def arrays(value: Any, label: str = "result") -> list[tuple[str, np.ndarray]]:
    """Every floating array or number inside a result (named tuples, tuples, dicts, tensors)."""
    out: list[tuple[str, np.ndarray]] = []
    if value is None or isinstance(value, (bool, str, int, np.integer, np.bool_)):
        return out
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex():
            out.append(
                (
                    label,
                    value.detach()
                    .cpu()
                    .to(torch.complex128 if value.is_complex() else torch.float64)
                    .numpy(),
                )
            )
        return out
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "fc":
            out.append((label, value))
        return out
    if isinstance(value, (float, complex, np.floating, np.complexfloating)):
        out.append((label, np.asarray(value)))
        return out
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        for field in value._fields:
            out += arrays(getattr(value, field), f"{label}.{field}")
        return out
    if isinstance(value, (tuple, list)):
        for k, item in enumerate(value):
            out += arrays(item, f"{label}[{k}]")
        return out
    if isinstance(value, dict):
        for key, item in value.items():
            out += arrays(item, f"{label}[{key!r}]")
        return out
    if hasattr(value, "__dataclass_fields__"):
        for field in value.__dataclass_fields__:
            out += arrays(getattr(value, field), f"{label}.{field}")
    return out


def not_finite(pairs: Iterable[tuple[str, Any]]) -> list[str]:
    """Labels of the arrays in `pairs` with a NaN or infinite entry."""
    bad = []
    for label, arr in pairs:
        arr = arr.detach().cpu().double().numpy() if isinstance(arr, torch.Tensor) else arr
        if not np.all(np.isfinite(np.asarray(arr))):
            bad.append(label)
    return bad


def expect(
    target: str,
    call: Callable[[], Any],
    *,
    names: Iterable[str] = (),
    valid: bool = False,
    allowed: tuple[type[BaseException], ...] = API_ERRORS,
    finite: Callable[[Any], Iterable[tuple[str, Any]]] | None = None,
    reference: Callable[[Any], None] | None = None,
    describe: str = "",
) -> Any:
    """Run ``call()`` under the contract; return its result (None when it raised cleanly).

    names : the argument(s) made bad; an error or warning must name one of them. Empty: any
        clean error is accepted (inputs that are bad in several arguments at once).
    valid : the input is valid: it must not be refused, and its result must be finite.
    finite : the parts of the result that must be finite (default: every floating array in it;
        pass a function to leave out entries that are NaN by design, such as a diffuse start).
    reference : called with the result of a valid input; asserts agreement (float64 reference).
    """
    names = tuple(names)
    where = f"{target}: {describe}" if describe else target
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call()
        except allowed as exc:
            message = " ".join(str(exc).split())
            if valid:
                record(target, "traceback")
                raise ContractViolation(f"{where}: a valid input was refused: {message}") from exc
            if names and not mentions(message, names):
                record(target, "traceback")
                raise ContractViolation(
                    f"{where}: {type(exc).__name__} does not name {' or '.join(names)}: {message}"
                ) from exc
            record(target, "error")
            return None
        except Exception as exc:
            record(target, "traceback")
            raise ContractViolation(
                f"{where}: {type(exc).__name__} outside the contract: {exc}"
            ) from exc
    checked = list(finite(result) if finite is not None else arrays(result))
    bad = not_finite(checked)
    if bad:
        said = [str(w.message) for w in caught]
        if valid or not (names and any(mentions(m, names) for m in said)):
            record(target, "wrong")
            raise ContractViolation(
                f"{where}: non-finite {', '.join(bad)} from finite input without a warning "
                f"naming {' or '.join(names) or 'the argument'} (warnings: {said})"
            )
        record(target, "warned")
        return result
    if reference is not None:
        try:
            reference(result)
        except AssertionError as exc:
            record(target, "wrong")
            raise ContractViolation(f"{where}: disagrees with its reference: {exc}") from exc
        record(target, "agreed")
    else:
        record(target, "finite")
    return result


def summary_lines() -> list[str]:
    """The session's counts as a table (target, then one column per outcome)."""
    if not RECORD:
        return []
    width = max(len(t) for t in RECORD)
    head = f"{'target':<{width}} " + " ".join(f"{o:>9}" for o in ("inputs", *OUTCOMES))
    lines = [head]
    total: Counter = Counter()
    for target in sorted(RECORD):
        counts = RECORD[target]
        total.update(counts)
        n = sum(counts.values())
        lines.append(f"{target:<{width}} {n:>9} " + " ".join(f"{counts[o]:>9}" for o in OUTCOMES))
    n = sum(total.values())
    lines.append(f"{'total':<{width}} {n:>9} " + " ".join(f"{total[o]:>9}" for o in OUTCOMES))
    return lines


# Spoils that change an argument's shape: an error may then name the argument it no longer
# matches (C against R, z against t, a mean against its covariance), which is a clean error.
SHAPE_SPOILS = ("empty", "truncate", "extra_axis", "drop_axis")


def naming(name: str | None, kind: str | None, words: dict, partners: dict) -> tuple[str, ...]:
    """The words an error about spoilt `name` may use: its own (`words`), and for a shape spoil
    also those of the arguments it is checked against (`partners`)."""
    if name is None:
        return ()
    own = tuple(words.get(name, (name,)))
    if kind in SHAPE_SPOILS or kind == "relation":
        for other in partners.get(name, ()):
            own += tuple(words.get(other, (other,)))
    return own

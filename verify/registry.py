"""One registry of checks: symbolic (SymPy), numeric (float64 against integration) and statistical.

A check is a function ``fn(quick: bool) -> float | Outcome`` returning its measured residual,
registered with an id, the seed section it comes from, its kind and its tolerance:

* ``symbolic``: the residual is 0 when SymPy reduces it to zero (a proof); otherwise the largest
  absolute value of the unsimplified residual at sample points (`verify.tools.symbolic_residual`).
  Tolerance 0.
* ``numeric``: the largest relative (or stated absolute) error against an independent numerical
  reference; the tolerance is stated with the check.
* ``statistical``: the largest absolute z-score of a Monte Carlo estimate; the tolerance is the
  sigma level.

``expect="fails"`` registers a printed formula that a seed gets wrong: the check passes when
the printed form's residual is *above* the tolerance, i.e. the error is demonstrated. Every such
check is paired with one (``expect="holds"``) for the corrected form, and records both formulas
in LaTeX (``printed=``, ``corrected=``) for the HTML report (`verify.report_html`).

``claim=`` is the check's claim in one sentence; without it, `Check.claim` is the title.
`Check.note` is the first sentence of the function's docstring (how the check measures).
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

KINDS = ("symbolic", "numeric", "statistical")
EXPECTATIONS = ("holds", "fails")

SEED_FILES = {
    0: "000_164c25b5097fc296.txt",
    1: "001_c787241617dd7cc3.txt",
    2: "002_df0369e6e67cc3db.txt",
    3: "003_e487b53dadaed6e2.txt",
    4: "004_b7f16d14ebb18042.txt",
}
SEED_NAMES = {0: "AFA", 1: "KLA", 2: "OsciFormer", 3: "RT-Transformer", 4: "RFA"}


def seed(number: int, where: str) -> str:
    """Source string for a check: seed file and equation/section, e.g. ``seed(0, "A.3")``."""
    if number not in SEED_FILES:
        raise ValueError(f"seed must be one of {sorted(SEED_FILES)}, got {number}")
    return f"{SEED_FILES[number]} ({SEED_NAMES[number]}) {where}"


@dataclass(frozen=True)
class Outcome:
    """A measured residual and an optional one-line detail (printed in the table)."""

    residual: float
    detail: str = ""


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    source: str
    kind: str
    tolerance: float
    fn: Callable[[bool], float | Outcome]
    expect: str = "holds"
    claim_text: str = ""
    # LaTeX of the printed (wrong) formula and of its correction, for expect="fails": a string,
    # or a function returning one or a SymPy expression (rendered by `sympy.latex` on demand)
    printed: str | Callable[[], object] = ""
    corrected: str | Callable[[], object] = ""
    correction: tuple[str, ...] = ()  # ids of the checks that prove the correction

    @property
    def printed_latex(self) -> str:
        return _latex(self.printed)

    @property
    def corrected_latex(self) -> str:
        return _latex(self.corrected)

    @property
    def claim(self) -> str:
        """The claim in one sentence: ``claim=`` if given, else the title (every title states
        its claim in one sentence)."""
        return self.claim_text or self.title

    @property
    def note(self) -> str:
        """The first sentence of the check function's docstring ("" without one): in this
        registry the docstrings say how a check measures, not what it claims."""
        doc = " ".join((self.fn.__doc__ or "").split())
        return re.split(r"(?<=[.!?])\s", doc, maxsplit=1)[0] if doc else ""

    def bound(self, at_most: str = "<=") -> str:
        """What the residual must satisfy, as shown: ``= 0`` / ``> 0`` (symbolic), else
        ``<= tol`` / ``> tol`` (``at_most``: the sign printed for "at most")."""
        if self.kind == "symbolic":
            return "> 0" if self.expect == "fails" else "= 0"
        return f"{'>' if self.expect == 'fails' else at_most} {self.tolerance:.0e}"

    def run(self, quick: bool) -> Result:
        start = time.perf_counter()
        try:
            outcome = self.fn(quick)
        except Exception as exc:  # a check that crashes is reported, not fatal to the run
            return Result(
                self,
                float("nan"),
                False,
                time.perf_counter() - start,
                "",
                f"{type(exc).__name__}: {exc}",
            )
        elapsed = time.perf_counter() - start
        if not isinstance(outcome, Outcome):
            outcome = Outcome(float(outcome))
        residual = float(outcome.residual)
        within = residual <= self.tolerance  # NaN compares False: never passes as "holds"
        passed = within if self.expect == "holds" else residual > self.tolerance
        return Result(self, residual, passed, elapsed, outcome.detail, None)


def _latex(form: str | Callable[[], object]) -> str:
    """LaTeX of a `Check.printed`/`Check.corrected` form: strings as they are; a function is
    called and a SymPy result converted with `sympy.latex`."""
    if callable(form):
        form = form()
    if isinstance(form, str):
        return form
    import sympy

    return sympy.latex(form)


@dataclass(frozen=True)
class Result:
    check: Check
    residual: float
    passed: bool
    seconds: float
    detail: str
    error: str | None

    @property
    def shown_residual(self) -> str:
        """The residual as the table and the report show it: ``-`` when there is none, ``0
        (proved)`` for a symbolic proof, else ``1.23e-04``."""
        if self.error is not None or self.residual != self.residual:
            return "-"
        if self.check.kind == "symbolic" and self.residual == 0:
            return "0 (proved)"
        return f"{self.residual:.2e}"

    @property
    def status(self) -> str:
        if self.error is not None:
            return "ERROR"
        if self.check.expect == "fails":
            return "PASS (printed form fails)" if self.passed else "FAIL (printed form holds)"
        return "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict:
        c = self.check
        return {
            "id": c.id,
            "title": c.title,
            "source": c.source,
            "kind": c.kind,
            "expect": c.expect,
            "tolerance": c.tolerance,
            "residual": None if self.residual != self.residual else self.residual,
            "passed": self.passed,
            "status": self.status,
            "seconds": round(self.seconds, 4),
            "detail": self.detail,
            "error": self.error,
        }


REGISTRY: dict[str, Check] = {}


def check(
    id: str,
    *,
    title: str,
    source: str,
    kind: str,
    tolerance: float,
    expect: str = "holds",
    claim: str = "",
    printed: str | Callable[[], object] = "",
    corrected: str | Callable[[], object] = "",
    correction: str | Iterable[str] = (),
) -> Callable:
    """Decorator registering ``fn(quick) -> residual`` as a check.

    `printed` and `corrected` (LaTeX, or a function returning LaTeX or a SymPy expression) are
    for ``expect="fails"`` checks only; `correction` names the check id(s) proving the
    corrected form."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {EXPECTATIONS}, got {expect!r}")
    if kind == "symbolic" and tolerance != 0:
        raise ValueError(f"{id}: a symbolic check has tolerance 0 (a proof), got {tolerance}")
    if (printed or corrected) and expect != "fails":
        raise ValueError(f"{id}: printed/corrected formulas belong to expect='fails' checks")
    correction = (correction,) if isinstance(correction, str) else tuple(correction)

    def register(fn: Callable[[bool], float | Outcome]) -> Callable:
        if id in REGISTRY:
            raise ValueError(f"check id {id!r} is registered twice")
        REGISTRY[id] = Check(
            id, title, source, kind, tolerance, fn, expect, claim, printed, corrected, correction
        )
        return fn

    return register


def select(pattern: str | None = None) -> list[Check]:
    """Checks whose id matches `pattern` (a glob if it has ``*?[``, else a substring)."""
    from verify import checks  # noqa: F401  (importing registers every check)

    if pattern is None:
        return list(REGISTRY.values())
    if any(ch in pattern for ch in "*?["):
        return [c for c in REGISTRY.values() if fnmatch.fnmatchcase(c.id, pattern)]
    return [c for c in REGISTRY.values() if pattern in c.id]


def run_all(
    checks: Iterable[Check], *, quick: bool, on_result: Callable[[Result], None] | None = None
) -> list[Result]:
    results = []
    for c in checks:
        result = c.run(quick)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results

"""Running a CLI in-process (`main(argv)`) under the contract, with its folder watched.

`cli_expect` calls ``main(argv)`` with stdout and stderr captured and classifies the run:

* exit 0: counted ``finite`` (or ``agreed`` when `check` confirms the output); user files not
  named with ``--force`` must be unchanged;
* exit 1 (a failure at run time) or 2 (bad usage): exactly one non-empty line on stderr, no
  ``Traceback``, and the watched folder exactly as before (no new files, nothing changed or
  lost): counted ``error``;
* an exception out of ``main`` or any other exit status: ``traceback``, the test fails.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from tests.fuzz.contract import ContractViolation, record


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` (relative) with its bytes (None for folders)."""
    out: dict[str, bytes | None] = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), folder)] = None
        for f in files:
            path = os.path.join(root, f)
            try:
                out[os.path.relpath(path, folder)] = Path(path).read_bytes()
            except OSError:
                out[os.path.relpath(path, folder)] = b"<unreadable>"
    return out


def run_cli(main, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's --help; the CLIs return their status
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def cli_expect(
    target: str,
    main,
    argv: list[str],
    folder: Path,
    *,
    protected=(),
    check=None,
    must_succeed: bool = False,
) -> int:
    """Run the CLI; `protected` lists user files (relative to `folder`) that exit 0 may replace
    only when ``--force`` is in `argv` (and they are its targets); `check(out)` verifies a
    successful run's output."""
    before = snapshot(folder)
    try:
        code, out, err = run_cli(main, argv)
    except Exception as exc:
        record(target, "traceback")
        raise ContractViolation(
            f"{target} {argv}: {type(exc).__name__} escaped main(): {exc}"
        ) from exc
    after = snapshot(folder)
    if code == 0:
        if "--force" not in argv:
            changed = [p for p in protected if before.get(p) != after.get(p)]
            if changed:
                record(target, "wrong")
                raise ContractViolation(f"{target} {argv}: replaced {changed} without --force")
        if check is not None:
            try:
                check(out)
            except AssertionError as exc:
                record(target, "wrong")
                raise ContractViolation(f"{target} {argv}: {exc}") from exc
            record(target, "agreed")
        else:
            record(target, "finite")
        return code
    lines = [line for line in err.splitlines() if line.strip()]
    problems = []
    if must_succeed:
        problems.append("a valid command failed")
    if code not in (1, 2):
        problems.append(f"exit status {code} (1 or 2 expected)")
    if "Traceback" in err or len(lines) != 1:
        problems.append(f"stderr is not one line: {err[-800:]!r}")
    if after != before:
        new = sorted(set(after) - set(before))
        lost = sorted(set(before) - set(after))
        changed = sorted(p for p in before if p in after and before[p] != after[p])
        problems.append(
            f"the failed command touched files: new {new}, lost {lost}, changed {changed}"
        )
    if problems:
        record(target, "traceback" if code not in (1, 2) or "Traceback" in err else "wrong")
        raise ContractViolation(f"{target} {argv}: {'; '.join(problems)}")
    record(target, "error")
    return code

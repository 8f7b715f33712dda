"""What the suite's three command-line interfaces share, written once: the error contract.

``python -m sde_sim``, ``python -m verify`` and ``python -m figures`` each define
``main(argv) -> int`` as ``run_cli(run, argv, prog=PROG)``, where ``run(argv)`` does the work and
raises on failure. `run_cli` turns what it raises into one line on stderr and an exit status:

* **2, bad usage**: the command line, an input file or a value the library refuses
  (`UsageError`, ``ValueError``, ``TypeError``, ``FileExistsError``, ``FileNotFoundError``);
* **1, a failure at run time**: anything else (a full disk, out of memory, a device error, a
  bug); the line names the exception's type;
* **130**: interrupted (Ctrl-C);

never a traceback, unless the environment variable ``FILTERSUITE_DEBUG=1`` is set: then the
traceback is printed before the line (same exit status). A closed stdout (``| head``) ends the
command quietly with status 1.

Also here: `OneLineParser` (argparse whose errors are `UsageError`s), `check_target` (an output
refused before anything runs: it exists without ``--force``, or its folder cannot be written),
`atomic_write` (temporary file + rename; never clobbers without ``overwrite``), `json_options`
(repeatable ``KEY=VALUE`` options, VALUEs in JSON) and `package_version`. This module sits at
the bottom of the dependency chain (``sde_sim`` <- ``estimators`` <- ``verify`` <- ``figures``)
and imports nothing of the suite.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

DEBUG_VARIABLE = "FILTERSUITE_DEBUG"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
# Exceptions that mean "the input is wrong" (exit 2); every other one is a run-time failure.
USAGE_ERRORS = (ValueError, TypeError, FileExistsError, FileNotFoundError)


class UsageError(Exception):
    """Bad command-line input; reported in one line with exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """``argparse`` parser whose errors raise `UsageError` (one line, exit 2) instead of
    printing the usage block; shared by the suite's command-line interfaces."""

    def error(self, message: str):  # one line instead of usage + message
        raise UsageError(message)


def debug_enabled() -> bool:
    """Whether ``FILTERSUITE_DEBUG`` asks for tracebacks (set, and not ``0``)."""
    return os.environ.get(DEBUG_VARIABLE, "").strip() not in ("", "0")


def exit_status(exc: BaseException) -> int:
    """The exit status of a command that raised `exc` (module docstring)."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, (UsageError, *USAGE_ERRORS)):
        return EXIT_USAGE
    return EXIT_FAILURE


def one_line(exc: BaseException) -> str:
    """`exc` as one line: its message with runs of whitespace (newlines too) made one space;
    a run-time failure other than an ``OSError`` (whose message names the file) is prefixed
    with its type, so that ``RuntimeError: ...`` or ``KeyError: 'x'`` reads as what it is."""
    message = " ".join(str(exc).split())
    if exit_status(exc) == EXIT_FAILURE and not isinstance(exc, OSError):
        name = type(exc).__name__
        message = f"{name}: {message}" if message else name
    return message or type(exc).__name__


def run_cli(
    run: Callable[[list[str]], int | None],
    argv: list[str] | None = None,
    *,
    prog: str,
    interrupted: str = "interrupted",
) -> int:
    """Call ``run(argv)`` under the error contract (module docstring); returns the exit status.

    Parameters
    ----------
    run : the command: takes the arguments, returns its exit status (None: 0) or raises.
    argv : the arguments (default ``sys.argv[1:]``).
    prog : the command's name, the prefix of its error line (``"python -m sde_sim"``).
    interrupted : the line printed on Ctrl-C (after ``prog: ``).

    ``SystemExit`` (``--help``) passes through.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        status = run(argv)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
    except BrokenPipeError:  # stdout closed early (piped into head): stop quietly
        _silence_stdout()
        return EXIT_FAILURE
    except (Exception, KeyboardInterrupt) as exc:
        if debug_enabled():
            traceback.print_exc(file=sys.stderr)
        if isinstance(exc, KeyboardInterrupt):
            print(f"{prog}: {interrupted}", file=sys.stderr)
        else:
            print(f"{prog}: error: {one_line(exc)}", file=sys.stderr)
        return exit_status(exc)
    return EXIT_OK if status is None else int(status)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush cannot fail again."""
    # stdout may be no real file (captured by a test): then there is nothing to redirect
    with contextlib.suppress(OSError, ValueError, AttributeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def check_target(path: Path | None, flag: str, *, force: bool, suffix: str | None = None) -> None:
    """Refuse an output before anything is computed, with a `UsageError` naming `flag`: a wrong
    suffix, an existing file without ``--force``, or no writable folder to put it in (the
    nearest existing ancestor must be a writable folder; missing folders are created later)."""
    if path is None:
        return
    path = Path(path)
    if suffix is not None and path.suffix != suffix:
        raise UsageError(f"{flag} must end in {suffix}, got {str(path)!r}")
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a folder, not a file")
    if path.exists() and not force:
        raise UsageError(f"{path} exists; pass --force to overwrite it")
    check_folder(path.parent, flag, shown=path)


def json_options(items: list[str], flag: str) -> dict:
    """``["nu=1.0", "learn_nu=true"]`` -> ``{"nu": 1.0, "learn_nu": True}``: the KEY=VALUE
    items of a repeatable option `flag`, VALUEs in JSON; a `UsageError` naming `flag` for an
    item that is not KEY=VALUE or a VALUE that is not JSON."""
    options = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} expects KEY=VALUE, found {item!r}")
        try:
            options[key] = json.loads(text)
        except json.JSONDecodeError:
            raise UsageError(
                f'{flag} {key}: VALUE must be JSON (1.0, true, "text"), found {text!r}'
            ) from None
    return options


def check_folder(folder: Path, flag: str, *, shown: Path | None = None) -> None:
    """Refuse, with a `UsageError` naming `flag`, an output folder that cannot be made: its
    nearest existing ancestor must be a folder this process may write into (missing levels are
    created later). The message names `shown` (default: the folder)."""
    folder = Path(folder)
    ancestor = folder
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not (ancestor.is_dir() and os.access(ancestor, os.W_OK | os.X_OK)):
        raise UsageError(f"{flag} {shown or folder}: {ancestor} is not a writable folder")


def atomic_write(path: str | os.PathLike, write: Callable, *, overwrite: bool = False) -> Path:
    """Write a file through ``write(file_object)`` into a temporary file, then move it to `path`.

    Readers never see a partial file. Without `overwrite`, an existing `path` is left untouched
    and `FileExistsError` is raised (the final link refuses to replace a file that appeared
    meanwhile). The temporary file ``.NAME.PID.*.tmp`` names its writer's process; one left by
    a writer that died (``kill -9``) is removed by the next write to the same target.
    """
    path = Path(path)
    if not overwrite and path.exists():
        raise FileExistsError(f"{path} exists; pass overwrite=True (CLI: --force) to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(path)
    prefix = f".{path.name}.{os.getpid()}."
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
    try:
        # mkstemp creates the file private (0600); give it the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise FileExistsError(
                    f"{path} exists; pass overwrite=True (CLI: --force) to replace it"
                ) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _remove_orphans(path: Path) -> None:
    """Delete ``.NAME.PID.*.tmp`` files beside `path` whose writer process no longer runs."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not _process_alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # it exists (another user's), or we cannot tell
        return True
    return True


def physical_memory() -> int | None:
    """This machine's physical memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system
        return None


def package_version() -> str:
    """The installed ``filtersuite`` version (recorded in every output file)."""
    try:
        return metadata.version("filtersuite")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"

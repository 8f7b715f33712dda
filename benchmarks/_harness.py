"""What the benchmark scripts share: contestants, interleaved timing, the machine, the table.

The scripts run as ``python benchmarks/bench_NAME.py`` (their folder is then first on
``sys.path``) and import this module as ``_harness``. A `Contestant` is one row: ``run(*args)``
does one timed call, ``warm()`` an untimed one. `run_all` warms every contestant up once, then
times ``repeats`` rounds in a rotating order, so that the noise of a shared machine hits all of
them alike; the best (minimum) time counts. `best_of` and `interleaved_best` time plain callables
the same way. `machine_lines` records the date, machine, CPUs, load and package versions the
results depend on; `print_table` prints a fixed-width table from `Column` specs.
`resident_high_water_kib` and `resident_peak_mb` measure resident memory, which sees every
allocator (numpy's, torch's, malloc's), where tracemalloc sees only what registers with it.

Used by ``bench_sde.py`` and ``bench_kalman.py`` (contestants, machine, table),
``bench_attention.py``, ``bench_scan.py`` and ``bench_oscillator.py`` (`interleaved_best`) and
``bench_backends.py`` (`best_of`). ``bench_triton.py`` keeps its own CUDA timing (it records a
failing contestant's error in its row) and ``bench_unrolled_afa.py`` times forward + backward
passes with a warm-up of its own.
"""

from __future__ import annotations

import ctypes
import datetime
import gc
import importlib
import os
import platform
import resource
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

NOT_INSTALLED = "not installed (pip install .[bench])"


def optional_import(name: str):
    """The module `name`, or None when it (or something it needs) cannot be imported."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def dist_version(name: str) -> str:
    """The installed distribution's version, or a word saying it is unknown."""
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - any metadata problem: report it as unknown
        return "installed (version unknown)"


def module_version(name: str) -> str:
    """``module.__version__`` (or its distribution's version), or ``not installed``."""
    module = optional_import(name)
    if module is None:
        return "not installed"
    return getattr(module, "__version__", None) or dist_version(name)


def load_text() -> str:
    """The 1/5/15-minute load averages (the machines are shared: context for the noise)."""
    try:
        return "load average " + " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what `platform` knows."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            models = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        cpu = models[0] if models else cpu
    except OSError:
        pass
    return cpu or "unknown"


def machine_lines(extra: Iterable[str] = (), packages: Iterable[str] = ()) -> list[str]:
    """``key : value`` lines: date, machine and CPU, CPU counts, Python, numpy; then `extra`
    lines as given, then one line per package of `packages` with its version."""
    import numpy as np

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    u = platform.uname()
    lines = [
        f"date      : {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"machine   : {u.system} {u.release} {u.machine}; cpu {cpu_model()}",
        f"cpus      : os.cpu_count() = {os.cpu_count()}, usable = {usable}",
        f"python    : {platform.python_version()}",
        f"numpy     : {np.__version__}",
        *extra,
    ]
    lines += [f"{name:<10}: {module_version(name)}" for name in packages]
    return lines


@dataclass
class Contestant:
    """One row of a benchmark: ``run(*args)`` does one timed call and returns its output;
    ``warm()`` (default: ``run()``) is the untimed warm-up. ``run`` is None when the contestant
    cannot run, with the reason in ``status``. ``items`` counts what one call processes
    (path-steps, filter-steps): ``rate`` is items per second of the best call."""

    name: str
    run: Callable[..., object] | None = None
    warm: Callable[[], object] | None = None
    status: str = ""  # why `run` is None ("not installed", "n/a", "skipped")
    note: str = ""
    items: float = 1.0
    times: list[float] = field(default_factory=list)
    output: object = None

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def rate(self) -> float:
        """Items (``items``) per second of the best call."""
        return self.items / self.best

    def label(self) -> str:
        """How the progress lines of `run_all` name this contestant."""
        return self.name


def time_call(contestant: Contestant, *args) -> None:
    """One timed call ``contestant.run(*args)``; its time and output are kept."""
    contestant.output = None  # drop the previous output before the next allocation
    gc.collect()
    start = time.perf_counter()
    output = contestant.run(*args)
    contestant.times.append(time.perf_counter() - start)
    contestant.output = output


def run_all(
    contestants: Sequence[Contestant],
    repeats: int,
    *,
    args: Callable[[int], tuple] = lambda r: (),
    warm_up: str = "one untimed call each",
) -> None:
    """One warm-up call each (``warm()``, else ``run()``), then `repeats` rounds in which every
    contestant that can run is timed once (`time_call` with ``args(round)``), each round
    starting further along the list, so that no contestant always runs first."""
    active = [c for c in contestants if c.run is not None]
    print(f"  warm-up: {warm_up} ({len(active)} contestants)", flush=True)
    for c in active:
        (c.warm or c.run)()
    for r in range(repeats):
        shift = (r * len(active)) // max(repeats, 1)
        for c in active[shift:] + active[:shift]:
            time_call(c, *args(r))
            print(f"  round {r + 1}/{repeats}  {c.label()}  {c.times[-1]:8.3f} s", flush=True)


def _status_kib(field: str) -> int | None:
    """A ``kB`` field of Linux's ``/proc/self/status`` (VmRSS, VmHWM, ...); None elsewhere."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def resident_high_water_kib() -> int:
    """This process's peak resident memory in KiB.

    Linux's ``VmHWM`` belongs to the current address space. ``ru_maxrss`` (the fallback
    elsewhere) would not do in a child: across ``exec`` it keeps the parent's peak, which hides
    the child's own.
    """
    peak = _status_kib("VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if peak is None else peak


def resident_peak_mb(fn: Callable[[], object]) -> float | None:
    """Peak resident memory (MB) of one call of `fn` above the resident size just before it.

    Free memory the allocator keeps is first handed back to the system (glibc's
    ``malloc_trim``), so that the call cannot reuse pages that are already resident: glibc
    serves even a 64 MB request from its heap when that much lies free there (a process that
    had freed many blocks under 32 MB reported a rise of 0 MB for a 64 MB block without the
    trim). Then the high-water mark is reset to the current resident size (Linux >= 4.0: ``5``
    written to ``/proc/self/clear_refs``), so the peak is this call's even after larger ones.
    The result is what the call adds to the process, every allocator's memory included.

    Each call first measures a 64 MiB probe block touched and freed inside a call, and gives
    None unless at least 90% of it shows: where this is not Linux, the reset is refused, or
    memory the measurement cannot release (another allocator's cache) hides it.
    """
    probe = _reset_peak_mb(_touch_probe_block)
    if probe is None or probe < 0.9 * _PROBE_BYTES / 1e6:
        return None
    return _reset_peak_mb(fn)


_PROBE_BYTES = 64 * 2**20


def _touch_probe_block() -> None:
    """Allocate 64 MiB, write one byte per 4 KiB page, free it."""
    block = bytearray(_PROBE_BYTES)
    block[::4096] = b"\x01" * (_PROBE_BYTES // 4096)


def _reset_peak_mb(fn: Callable[[], object]) -> float | None:
    """The measurement behind `resident_peak_mb`, unchecked; None where /proc lacks it."""
    gc.collect()
    _release_free_memory()
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return None
    before = _status_kib("VmRSS")
    if before is None:
        return None
    fn()
    return (resident_high_water_kib() - before) * 1024 / 1e6


def _release_free_memory() -> None:
    """glibc's ``malloc_trim(0)``: free heap pages go back to the system (nothing elsewhere)."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return
    trim(0)


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """The best wall time (s) of `repeats` calls of `fn`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def interleaved_best(
    calls: dict[str, Callable[[], object]],
    repeats: int,
    *,
    sync: Callable[[], None] | None = None,
) -> tuple[dict[str, float], dict[str, object]]:
    """Best wall time (s) per call over `repeats` interleaved rounds with a rotating order,
    and the last output of each; `sync` (a device synchronisation) brackets each timing."""
    names = list(calls)
    times: dict[str, list[float]] = {name: [] for name in names}
    outputs: dict[str, object] = {}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            if sync is not None:
                sync()
            start = time.perf_counter()
            outputs[name] = calls[name]()
            if sync is not None:
                sync()
            times[name].append(time.perf_counter() - start)
    return {name: min(ts) for name, ts in times.items()}, outputs


@dataclass(frozen=True)
class Column:
    """A table column: its title, width and alignment (``<`` or ``>``), and the text between
    it and the column before."""

    title: str
    width: int = 0
    align: str = "<"
    gap: str = " "


def table_line(columns: Sequence[Column], cells: Sequence[object]) -> str:
    """One line of cells under `columns` (fewer cells than columns: the line stops there)."""
    parts = []
    for k, (column, cell) in enumerate(zip(columns, cells, strict=False)):
        parts.append(("" if k == 0 else column.gap) + f"{cell!s:{column.align}{column.width}}")
    return "".join(parts).rstrip()


def print_table(columns: Sequence[Column], rows: Iterable[Sequence[object] | str]) -> None:
    """The header, a rule, then each row: a sequence of cells, or a string printed as it is
    (a note under a group)."""
    header = table_line(columns, [c.title for c in columns])
    print(header)
    print("-" * len(header))
    for row in rows:
        print(row if isinstance(row, str) else table_line(columns, row))

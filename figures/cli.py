"""``python -m figures [NAMES ...] [--quick] [--out DIR] [--force] [--list] [--workers N |
--scheduler ADDRESS]``.

Writes ``DIR/figures/NAME.png``, ``NAME.pdf`` and ``NAME.json`` (title, caption, source, the
command, the files) for each figure, then rebuilds ``DIR/figures/index.html`` from every
``*.json`` record in that folder, so runs of different subsets add up to one index. All files are
written atomically; an existing figure file is only replaced with ``--force`` (the index is a
derived page and is always rebuilt). Errors follow the suite's contract
(`sde_sim.plumbing.run_cli`): bad input prints one line on stderr and exits with status 2 before
anything is written; a failure while a figure is made exits with status 1.
"""

from __future__ import annotations

import argparse
import html
import json
import shlex
import time
from pathlib import Path

import figures
from sde_sim.plumbing import OneLineParser, UsageError, atomic_write, check_folder, run_cli
from verify.report_html import REPORT_NAME, report_link

PROG = "python -m figures"
SUBDIR = "figures"
INDEX = "index.html"
FORMATS = figures.FORMATS


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Regenerate the figures of the filtering-attention papers (PNG + PDF) and "
        "an index page DIR/figures/index.html.",
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME", help="figures to make (default: all; see --list)"
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples: a fast preview")
    parser.add_argument(
        "--out", type=Path, default=Path("out"), help="output folder (default: out)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite existing figure files")
    parser.add_argument("--list", action="store_true", help="list the figures and exit")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="compute the figures on N local Dask worker processes (needs "
        "filtersuite[distributed])",
    )
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="compute the figures on the Dask cluster at ADDRESS (e.g. tcp://host:8786)",
    )
    return parser


def _outputs(folder: Path, name: str) -> list[Path]:
    return [folder / f"{name}.{ext}" for ext in (*FORMATS, "json")]


def _write_text(path: Path, text: str, overwrite: bool) -> None:
    atomic_write(path, lambda fh: fh.write(text.encode()), overwrite=overwrite)


def _write(name: str, data, seconds: float, args, folder: Path, command: str, files=None) -> dict:
    """Write the PNG, PDF and JSON record of figure `name`; returns the record. ``files`` are
    the drawn files (`figures.rendered`, from a Dask task); None: drawn here."""
    module = figures.get(name)
    start = time.perf_counter()
    files = figures.rendered(name, data) if files is None else files
    for ext in FORMATS:
        atomic_write(
            folder / f"{name}.{ext}", lambda fh, ext=ext: fh.write(files[ext]), overwrite=args.force
        )
    record = {
        "name": name,
        "title": module.TITLE,
        "caption": module.caption(data),
        "source": module.SOURCE,
        "seed": module.SEED,
        "checks": figures.checks_of(module),
        "command": command,
        "quick": args.quick,
        "files": [f"{name}.{ext}" for ext in FORMATS],
        "seconds": round(seconds + time.perf_counter() - start, 2),
        "made": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    _write_text(folder / f"{name}.json", json.dumps(record, indent=2) + "\n", args.force)
    return record


def _computed_all(names: list[str], args):
    """``(name, data, seconds, files)`` for each figure, in order: here one after another
    (``files`` None: drawn by `_write`), or on a Dask cluster (`figures.distributed`, drawn
    there) with ``--workers``/``--scheduler``."""
    if args.workers is None and args.scheduler is None:
        for name in names:
            yield (name, *figures.computed(name, args.quick), None)
        return
    from figures.distributed import computed_on_cluster

    yield from computed_on_cluster(
        names, quick=args.quick, workers=args.workers, scheduler=args.scheduler
    )


VERIFY_REPORT = f"../{REPORT_NAME}"  # `make reproduce` writes out/verify.html beside out/figures/


def check_link(check_id: str) -> str:
    """The link from the index page to one check's row in the verification report."""
    return report_link(check_id, VERIFY_REPORT)


def _section(r: dict) -> list[str]:
    e = {k: html.escape(str(v)) for k, v in r.items() if k not in ("files", "checks")}
    png, pdf = (html.escape(f) for f in r["files"])
    quick = " (quick)" if r.get("quick") else ""
    checks = ", ".join(
        f'<a href="{html.escape(check_link(c))}"><code>{html.escape(c)}</code></a>'
        for c in r.get("checks", [])
    )
    return [
        f'<section id="{e["name"]}">',
        f"<h3>{e['title']}{quick}</h3>",
        f'<a href="{png}"><img src="{png}" alt="{e["name"]}"></a>',
        f"<p>{e['caption']}</p>",
        f"<p><b>Source:</b> {e['source']}</p>",
        *([f"<p><b>Checks of the same section:</b> {checks}</p>"] if checks else []),
        f"<p><b>Command:</b> <code>{e['command']}</code></p>",
        f'<p><b>Files:</b> <a href="{png}">{png}</a>, <a href="{pdf}">{pdf}</a>; made '
        f"{e['made']} in {e['seconds']} s</p>",
        "</section>",
    ]


def index_html(records: list[dict]) -> str:
    """The index page: the figures grouped by paper, each with its title, caption, source
    section, the `python -m verify` checks of that section (links into the report) and the
    command that made it."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><title>filtersuite figures</title>',
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}"
        "img{max-width:100%;border:1px solid #ddd}code{background:#f4f4f4;padding:2px 4px}"
        "section{margin-bottom:3em}</style></head><body>",
        "<h1>filtersuite figures</h1>",
        f'<p>Every closed form behind them: <a href="{VERIFY_REPORT}">the verification '
        "report</a>.</p>",
    ]
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r.get("seed", ""), []).append(r)
    order = [*figures.PAPERS, *sorted(set(groups) - set(figures.PAPERS))]
    for seed in (s for s in order if s in groups):
        title = figures.PAPERS.get(seed, "Other figures")
        heading = f"Seed {seed}: {title}" if seed in figures.PAPERS else title
        parts.append(f'<h2 id="seed-{html.escape(seed)}">{html.escape(heading)}</h2>')
        for r in groups[seed]:
            parts += _section(r)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _records(folder: Path) -> list[dict]:
    """Every figure record in `folder`, registered figures first in registry order."""
    found = {}
    for path in folder.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # not one of ours
        if isinstance(record, dict) and {"name", "caption", "command", "files"} <= set(record):
            found[record["name"]] = record
    order = {n: k for k, n in enumerate(figures.names())}
    return [found[n] for n in sorted(found, key=lambda n: (order.get(n, len(order)), n))]


def run(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    if args.list:
        for name in figures.names():
            module = figures.get(name)
            print(f"{name:<20} {module.TITLE}  [{module.SOURCE}]")
        return
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    unknown = [n for n in args.names if n not in figures.FIGURES]
    if unknown:
        raise UsageError(
            f"unknown figure{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"valid: {', '.join(figures.names())}"
        )
    names = list(dict.fromkeys(args.names)) or figures.names()
    folder = args.out / SUBDIR
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{folder} exists and is not a folder")
    check_folder(folder, "--out")  # before any figure is computed
    if not args.force:
        existing = [str(p) for n in names for p in _outputs(folder, n) if p.exists()]
        if existing:
            more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
            raise UsageError(f"{existing[0]} exists{more}; pass --force to overwrite")
    command = shlex.join([*PROG.split(), *argv])
    for name, data, seconds, files in _computed_all(names, args):
        record = _write(name, data, seconds, args, folder, command, files)
        print(f"{name}: wrote {folder / name}.{{png,pdf}} in {record['seconds']:.1f} s")
    _write_text(folder / INDEX, index_html(_records(folder)), overwrite=True)
    print(f"index: {folder / INDEX}")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI under the error contract; returns the exit status (0, 2 bad usage, 1 a
    failure while running)."""
    return run_cli(run, argv, prog=PROG)

"""The browsable report of a verification run: ``python -m verify --html FILE``.

One self-contained HTML file (KaTeX's script, style sheet and fonts inlined from
``verify/report_assets/katex``, so it opens without a network and without files beside it):

* a coverage table per paper: the claims listed in `verify.claims` that a registered check
  covers, out of all listed, and for each one not covered the reason;
* one table row per check (``<tr class="check" id="check-<id>">``): id, paper, section and
  equation, the claim in one sentence, kind, residual, tolerance, status and a link to the
  check's source line; a printed-form check (``expect="fails"``) shows the printed formula and
  its correction side by side, rendered by KaTeX.

Other pages link to a check's row with `report_link` (``verify.html#check-<id>``).
"""

from __future__ import annotations

import base64
import html
import inspect
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sde_sim.plumbing import atomic_write
from verify.claims import CLAIMS, Claim
from verify.registry import SEED_FILES, SEED_NAMES, Check, Result

ASSETS = Path(__file__).parent / "report_assets" / "katex"
REPORT_NAME = "verify.html"  # what `make reproduce` writes into out/
ANCHOR_PREFIX = "check-"
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent
_SOURCE = re.compile(r"(\d{3})_[0-9a-f]+\.txt \(([^)]*)\)\s*")


def anchor(check_id: str) -> str:
    """The HTML id of a check's row: ``check-<id>``."""
    return f"{ANCHOR_PREFIX}{check_id}"


def report_link(check_id: str, report: str = REPORT_NAME) -> str:
    """A link to a check's row from a page beside the report, e.g.
    ``verify.html#check-riccati.printed-tanh``."""
    return f"{report}#{anchor(check_id)}"


@dataclass(frozen=True)
class Where:
    """A check's source split for the table: the first seed's number and name, and the rest
    (section and equation, other seeds)."""

    seed: int | None
    paper: str
    section: str


def where(check: Check) -> Where:
    """Parse ``seed(n, "3.9 (...)")`` strings: ``000_....txt (AFA) 3.9 (...)``."""
    match = _SOURCE.search(check.source)
    if match is None:
        return Where(None, "", check.source)
    number = int(match.group(1))
    rest = (check.source[: match.start()] + check.source[match.end() :]).strip()
    # later seeds keep their short name: "...; 000_x.txt (AFA) 5.2" -> "...; AFA 5.2"
    rest = _SOURCE.sub(lambda m: f"seed {m.group(1)} ({m.group(2)}) ", rest)
    return Where(number, f"{number:03d} {SEED_NAMES.get(number, match.group(2))}", rest)


def source_line(check: Check) -> tuple[Path, int]:
    """The file and first line (its decorator) of the function that implements `check`."""
    fn = inspect.unwrap(check.fn)
    return Path(inspect.getsourcefile(fn)).resolve(), inspect.getsourcelines(fn)[1]


def _status_class(status: str) -> str:
    return "pass" if status.startswith("PASS") else "fail"


def _math(latex: str) -> str:
    return f'<span class="math">{html.escape(latex)}</span>'


@dataclass(frozen=True)
class Coverage:
    """Per paper: the claims listed, those covered by registered checks, the rest."""

    seed: int
    listed: tuple[Claim, ...]
    registered: tuple[Claim, ...]
    missing: tuple[Claim, ...]


def coverage(claims: Sequence[Claim] = CLAIMS) -> list[Coverage]:
    """Claims per seed; a claim counts as registered when it names at least one check id."""
    rows = []
    for number in sorted(SEED_FILES):
        listed = tuple(c for c in claims if c.seed == number)
        rows.append(
            Coverage(
                number,
                listed,
                tuple(c for c in listed if c.checks),
                tuple(c for c in listed if not c.checks),
            )
        )
    return rows


def _coverage_html(rows: list[Coverage]) -> str:
    out = [
        '<table id="coverage"><thead><tr><th>paper</th><th>registered</th><th>listed</th>'
        "<th>not registered, and why</th><th>registered, and by which checks</th></tr>"
        "</thead><tbody>"
    ]
    for row in rows:
        missing = "".join(
            f"<li><b>{html.escape(c.ref)}</b> {html.escape(c.text)}: "
            f'<span class="reason">{html.escape(c.reason)}</span></li>'
            for c in row.missing
        )
        covered = "".join(
            f"<li><b>{html.escape(c.ref)}</b> {html.escape(c.text)}: "
            + ", ".join(
                f'<a href="#{html.escape(anchor(i))}">{html.escape(i)}</a>' for i in c.checks
            )
            + "</li>"
            for c in row.registered
        )
        out.append(
            f'<tr class="paper" data-seed="{row.seed}">'
            f"<td>{row.seed:03d} {html.escape(SEED_NAMES[row.seed])}</td>"
            f'<td class="registered">{len(row.registered)}</td>'
            f'<td class="listed">{len(row.listed)}</td>'
            f'<td class="missing"><details><summary>{len(row.missing)} not registered</summary>'
            f"<ul>{missing}</ul></details></td>"
            f'<td class="covered"><details><summary>{len(row.registered)} registered</summary>'
            f"<ul>{covered}</ul></details></td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _check_row(r: Result, html_dir: Path, claims_by_check: dict[str, list[Claim]]) -> str:
    c = r.check
    loc = where(c)
    path, line = source_line(c)
    shown = path.relative_to(_PACKAGE_ROOT) if path.is_relative_to(_PACKAGE_ROOT) else path
    href = os.path.relpath(path, html_dir).replace(os.sep, "/")
    claim = f'<div class="claim">{html.escape(c.claim)}</div>'
    if c.title != c.claim:
        claim += f'<div class="title">{html.escape(c.title)}</div>'
    if c.note:
        claim += f'<div class="note">{html.escape(c.note)}</div>'
    if c.expect == "fails" and (c.printed or c.corrected):
        links = ", ".join(f'<a href="#{anchor(i)}">{html.escape(i)}</a>' for i in c.correction)
        claim += (
            '<div class="forms"><div class="printed"><span class="label">printed</span>'
            f"{_math(c.printed_latex)}</div>"
            '<div class="corrected"><span class="label">corrected'
            f"{' (' + links + ')' if links else ''}</span>{_math(c.corrected_latex)}</div></div>"
        )
    listed = claims_by_check.get(c.id, [])
    if listed:
        claim += '<div class="covers">covers: ' + "; ".join(
            html.escape(f"{cl.seed:03d} {cl.ref}") for cl in listed
        )
        claim += "</div>"
    if r.detail or r.error:
        claim += f'<div class="detail">{html.escape(r.error or r.detail)}</div>'
    return (
        f'<tr class="check" id="{html.escape(anchor(c.id))}" data-seed="{loc.seed}" '
        f'data-status="{html.escape(r.status)}" data-expect="{c.expect}">'
        f'<td class="id"><a href="#{html.escape(anchor(c.id))}">{html.escape(c.id)}</a></td>'
        f'<td class="paper">{html.escape(loc.paper)}</td>'
        f'<td class="section">{html.escape(loc.section)}</td>'
        f"<td>{claim}</td>"
        f'<td class="kind">{c.kind}</td>'
        f'<td class="residual">{r.shown_residual}</td>'
        f'<td class="tolerance">{html.escape(c.bound("≤"))}</td>'
        f'<td class="status {_status_class(r.status)}">{html.escape(r.status)}</td>'
        f'<td class="source"><a href="{html.escape(href)}#L{line}">'
        f"{html.escape(shown.as_posix())}:{line}</a></td></tr>"
    )


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; font-size: 14px; }
table { border-collapse: collapse; width: 100%; margin-bottom: 2em; }
th, td { border: 1px solid #ccc; padding: 4px 6px; vertical-align: top; text-align: left; }
th { background: #f0f0f0; position: sticky; top: 0; }
td.residual, td.tolerance, td.registered, td.listed { font-family: monospace; white-space: nowrap; }
td.id { font-family: monospace; min-width: 16em; overflow-wrap: anywhere; }
td.section { min-width: 8em; } td.status { min-width: 7em; }
td.source { min-width: 11em; overflow-wrap: anywhere; font-size: 90%; }
#coverage td:first-child { width: 12%; }
#coverage td.registered, #coverage td.listed { width: 6%; }
td.status.pass { color: #065f06; } td.status.fail { color: #a00000; font-weight: bold; }
.title, .note, .detail, .covers { color: #555; font-size: 90%; margin-top: 3px; }
.forms { display: flex; gap: 1em; margin-top: 6px; }
.forms > div { flex: 1; padding: 4px; border-radius: 3px; overflow-x: auto; }
.printed { background: #fdecec; } .corrected { background: #eaf6ea; }
.label { display: block; font-size: 80%; color: #555; }
.forms .katex-display { margin: 2px 0; text-align: left; }
.forms .katex-display > .katex { text-align: left; }
.reason { color: #555; }
tr:target { outline: 2px solid #3366cc; }
"""

# Each span.math holds LaTeX source; KaTeX replaces it with the rendered formula, or with a
# visible error (class katex-error) where it cannot parse it.
_RENDER = """
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("span.math").forEach(function (el) {
    katex.render(el.textContent, el, {throwOnError: false, displayMode: true});
  });
});
"""


def _inline_css() -> str:
    """KaTeX's style sheet with its woff2 fonts as data URIs (the woff/ttf fallbacks, which
    every browser with woff2 support skips, are dropped)."""
    css = (ASSETS / "katex.min.css").read_text(encoding="utf-8")

    def font(match: re.Match) -> str:
        name = match.group(1)
        data = base64.b64encode((ASSETS / "fonts" / f"{name}.woff2").read_bytes()).decode()
        return f'src:url(data:font/woff2;base64,{data}) format("woff2")'

    pattern = (
        r'src:url\(fonts/([\w-]+)\.woff2\) format\("woff2"\)(?:,url\([^)]*\) format\("\w+"\))*'
    )
    css, count = re.subn(pattern, font, css)
    if count == 0:
        raise RuntimeError(f"no @font-face found in {ASSETS / 'katex.min.css'}")
    return css


def render(
    results: Sequence[Result],
    *,
    html_path: Path,
    header: str,
    claims: Sequence[Claim] = CLAIMS,
) -> str:
    """The report's HTML text; `html_path` is where it will be written (for the source links,
    relative to its folder), `header` a one-line summary of the run."""
    html_dir = Path(html_path).resolve().parent
    claims_by_check: dict[str, list[Claim]] = {}
    for cl in claims:
        for i in cl.checks:
            claims_by_check.setdefault(i, []).append(cl)
    rows = "\n".join(_check_row(r, html_dir, claims_by_check) for r in results)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    tally = ", ".join(f"{n} {html.escape(s)}" for s, n in sorted(counts.items()))
    js = (ASSETS / "katex.min.js").read_text(encoding="utf-8")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>filtersuite verification report</title>
<style>{_inline_css()}</style>
<style>{_STYLE}</style>
<script>{js}</script>
<script>{_RENDER}</script>
</head><body>
<h1>filtersuite: verification report</h1>
<p id="summary">{html.escape(header)}: {len(results)} checks; {tally}.</p>
<h2>Coverage: the papers' checkable claims</h2>
<p>Claims listed per paper (the digests' checkable claims, the design notes for seed 000 and
issue 17), those covered by at least one registered check, and why the rest are not.</p>
{_coverage_html(coverage(claims))}
<h2>Checks</h2>
<p>A printed-form check passes when the formula as printed fails (its residual is above the
tolerance); its correction is proved by the check it links to. Maths rendered by KaTeX
(MIT license, bundled).</p>
<table id="checks"><thead><tr><th>id</th><th>paper</th><th>section and equation</th>
<th>claim</th><th>kind</th><th>residual</th><th>needs</th><th>status</th><th>source</th>
</tr></thead><tbody>
{rows}
</tbody></table>
</body></html>
"""


def write_html(
    path: Path, results: Sequence[Result], *, header: str, overwrite: bool = False
) -> Path:
    """Render and write the report atomically (`sde_sim.plumbing.atomic_write`)."""
    text = render(results, html_path=path, header=header).encode("utf-8")
    return atomic_write(path, lambda fh: fh.write(text), overwrite=overwrite)

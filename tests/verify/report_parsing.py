"""A small parser of the HTML report (`verify.report_html`) for the tests: what a reader sees,
collected from the markup with `html.parser`, not from the renderer's own data."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Row:
    attrs: dict
    cells: dict = field(default_factory=dict)  # td class -> text
    links: list = field(default_factory=list)  # hrefs inside the row
    maths: list = field(default_factory=list)  # (box class, LaTeX source)


class ReportParser(HTMLParser):
    """Rows of ``table#checks`` (``tr.check``), rows of ``table#coverage`` (``tr.paper``) and
    the reasons listed in the coverage table; math spans keep their LaTeX text."""

    def __init__(self):
        super().__init__()
        self.checks: list[Row] = []
        self.papers: list[Row] = []
        self._row: Row | None = None
        self._cell: str | None = None
        self._text: list[str] = []
        self._box: str | None = None
        self._math: list[str] | None = None
        self._depth = 0  # nesting inside the current math span
        self.summary = ""
        self._in_summary = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "tr" and "check" in classes:
            self._row = Row(attrs)
            self.checks.append(self._row)
        elif tag == "tr" and "paper" in classes:
            self._row = Row(attrs)
            self.papers.append(self._row)
        elif tag == "td" and self._row is not None:
            self._cell, self._text = (classes[0] if classes else ""), []
        elif tag == "a" and self._row is not None:
            self._row.links.append(attrs.get("href", ""))
        elif tag == "div" and ("printed" in classes or "corrected" in classes):
            self._box = classes[0]
        elif tag == "span" and "math" in classes:
            self._math, self._depth = [], 1
        elif tag == "span" and self._math is not None:
            self._depth += 1
        elif tag == "p" and attrs.get("id") == "summary":
            self._in_summary = True

    def handle_endtag(self, tag):
        if tag == "span" and self._math is not None:
            self._depth -= 1
            if self._depth == 0:
                self._row.maths.append((self._box, "".join(self._math)))
                self._math = None
        elif tag == "td" and self._row is not None and self._cell is not None:
            self._row.cells[self._cell] = " ".join("".join(self._text).split())
            self._cell = None
        elif tag == "tr":
            self._row = None
        elif tag == "p":
            self._in_summary = False

    def handle_data(self, data):
        if self._math is not None:
            self._math.append(data)
        if self._cell is not None:
            self._text.append(data)
        if self._in_summary:
            self.summary += data


def parse_report(text: str) -> ReportParser:
    parser = ReportParser()
    parser.feed(text)
    parser.close()
    return parser

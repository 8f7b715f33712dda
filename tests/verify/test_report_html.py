"""The HTML report (``python -m verify --html FILE``, `verify.report_html`): one row per check
with the registry's status, the coverage table from `verify.claims`, the CLI contract, and a
headless-browser run asserting KaTeX rendered the printed and corrected formulas."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.verify.report_parsing import parse_report
from tests.verify.test_cli import fake_checks  # noqa: F401  (the fixture)
from verify import claims as claims_module
from verify import report_html
from verify.cli import main
from verify.registry import Result, select


def _synthetic_results() -> list[Result]:
    """Every registered check with a made-up outcome, so that each status appears: no check is
    run (the statuses' logic is the registry's, tested in test_cli.py)."""
    results = []
    for n, c in enumerate(select()):
        error = "RuntimeError: boom" if n == 7 else None
        residual = float("nan") if error else 10.0 ** -(n % 5)
        results.append(
            Result(c, residual, n % 4 != 0 and error is None, 0.01, f"detail {n}", error)
        )
    return results


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "verify.html"
    results = _synthetic_results()
    report_html.write_html(path, results, header="test run")
    return path, results, parse_report(path.read_text(encoding="utf-8"))


def test_one_row_per_check_with_its_status(report):
    _, results, parsed = report
    assert [row.attrs["id"] for row in parsed.checks] == [f"check-{r.check.id}" for r in results]
    assert [row.attrs["data-status"] for row in parsed.checks] == [r.status for r in results]
    for row, r in zip(parsed.checks, results, strict=True):
        assert row.cells["status"] == r.status
        assert row.cells["kind"] == r.check.kind
        assert row.cells["id"] == r.check.id
    statuses = {row.cells["status"] for row in parsed.checks}
    assert {"PASS", "FAIL", "ERROR", "PASS (printed form fails)"} <= statuses
    assert "ERROR" in [row.attrs["data-status"] for row in parsed.checks if "boom" in str(row)]


def test_paper_section_and_claim(report):
    _, results, parsed = report
    names = {0: "AFA", 1: "KLA", 2: "OsciFormer", 3: "RT-Transformer", 4: "RFA"}
    for row, r in zip(parsed.checks, results, strict=True):
        number = int(r.check.source[:3])  # every source starts with its seed file
        assert row.cells["paper"] == f"{number:03d} {names[number]}"
        assert row.cells["section"] and "_" not in row.cells["section"][:4]
        assert r.check.claim.split()[0] in row.cells[""]  # the claim cell has no class


def test_printed_forms_side_by_side(report):
    _, results, parsed = report
    for row, r in zip(parsed.checks, results, strict=True):
        boxes = [box for box, _ in row.maths]
        if r.check.expect == "fails":
            assert boxes == ["printed", "corrected"], r.check.id
            assert [latex for _, latex in row.maths] == [
                r.check.printed_latex,
                r.check.corrected_latex,
            ]
            for target in r.check.correction:
                assert f"#check-{target}" in row.links
        else:
            assert boxes == []


def test_every_printed_form_check_has_both_formulas():
    fails = [c for c in select() if c.expect == "fails"]
    assert len(fails) >= 36
    forms = {c.id: (c.printed_latex.strip(), c.corrected_latex.strip()) for c in fails}
    assert [i for i, (printed, corrected) in forms.items() if not (printed and corrected)] == []
    assert [i for i, (printed, corrected) in forms.items() if printed == corrected] == []
    ids = {c.id for c in select()}
    assert [i for c in fails for i in c.correction if i not in ids] == []


def test_source_links_point_at_the_checks(report):
    path, results, parsed = report
    for row, r in zip(parsed.checks, results, strict=True):
        href = row.links[-1]
        file, line = href.split("#L")
        source = (path.parent / file).resolve()
        assert source.is_file(), href
        lines = source.read_text().splitlines()
        # the link's line opens the check's decorator or def, and the id appears below it
        assert lines[int(line) - 1].lstrip().startswith(("@check", "def ", "@")), href
        window = "\n".join(lines[int(line) - 1 : int(line) + 3])
        # a check registered in a loop names itself with an f-string of its module's prefix
        prefix = r.check.id.split(".")[0]
        assert f'"{r.check.id}"' in window or f'f"{prefix}.' in window, href
        assert row.cells["source"].endswith(f":{line}")


def test_coverage_table_counts(report):
    _, _, parsed = report
    by_seed: dict[int, list] = {}
    for claim in claims_module.CLAIMS:
        by_seed.setdefault(claim.seed, []).append(claim)
    assert [int(row.attrs["data-seed"]) for row in parsed.papers] == sorted(by_seed)
    for row in parsed.papers:
        listed = by_seed[int(row.attrs["data-seed"])]
        registered = [c for c in listed if c.checks]
        assert int(row.cells["listed"]) == len(listed)
        assert int(row.cells["registered"]) == len(registered)
        for claim in listed:
            if not claim.checks:
                assert claim.reason in row.cells["missing"]
            else:
                assert claim.text in row.cells["covered"]
        covered = {i for c in registered for i in c.checks}
        assert {h[len("#check-") :] for h in row.links} == covered


def test_claims_map_to_registered_checks():
    ids = {c.id for c in select()}
    unknown = [(c.seed, c.ref, i) for c in claims_module.CLAIMS for i in c.checks if i not in ids]
    assert unknown == []
    assert [(c.seed, c.ref) for c in claims_module.CLAIMS if not c.checks and not c.reason] == []
    keys = [(c.seed, c.ref) for c in claims_module.CLAIMS]
    assert len(keys) == len(set(keys))
    assert {c.seed for c in claims_module.CLAIMS} == {0, 1, 2, 3, 4}


def test_results_pickle_for_dask_workers():
    """`verify.distributed` sends `Result`s (holding their `Check`) back from workers: the
    printed/corrected forms must pickle by reference (module functions, partials; no lambdas)."""
    import pickle

    for r in _synthetic_results():
        if r.check.expect == "fails":
            back = pickle.loads(pickle.dumps(r))
            assert back.check.printed_latex == r.check.printed_latex


def test_sympy_forms_are_the_checked_expressions():
    """Where a check gives its forms as SymPy (a function), the report shows `sympy.latex` of the
    expression the check itself tests."""
    from verify.checks import oscillator, rt_structure

    c = select("rt_structure.printed-rank1-coefficient")[0]
    assert callable(c.printed) and callable(c.corrected)
    assert c.printed_latex == rt_structure._shown_rank_one(rt_structure._printed_rank_one_expr)
    assert r"\eta_t^2 + \sigma_r^2" in c.printed_latex  # the printed error, sigma_r^2 - eta_t^2
    assert r"\sigma_r^2 - \sigma_t^2" in c.corrected_latex
    c = select("oscillator.printed-od-transient")[0]
    assert c.corrected_latex == oscillator._shown_uv(oscillator._corrected_uv)


def test_claim_is_stated_or_the_title_and_the_note_the_docstring(report):
    c = select()[0]
    assert dataclasses.replace(c, claim_text="Stated.").claim == "Stated."
    assert dataclasses.replace(c, claim_text="").claim == c.title

    def fn(quick):
        """First sentence here. Second one."""

    assert dataclasses.replace(c, fn=fn).note == "First sentence here."
    assert dataclasses.replace(c, fn=lambda quick: 0.0).note == ""
    _, results, parsed = report
    noted = [(row, r) for row, r in zip(parsed.checks, results, strict=True) if r.check.note]
    assert noted and all(r.check.note[:20] in row.cells[""] for row, r in noted)


def test_anchor_and_link():
    assert report_html.anchor("riccati.printed-tanh") == "check-riccati.printed-tanh"
    assert report_html.report_link("a.b") == "verify.html#check-a.b"


# --- the CLI contract ---------------------------------------------------------------------------


def test_cli_writes_the_report(fake_checks, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "sub" / "v.html"
    assert main(["--html", str(out)]) == 1  # demo.bad fails; the report is still written
    parsed = parse_report(out.read_text(encoding="utf-8"))
    assert [(r.attrs["id"], r.attrs["data-status"]) for r in parsed.checks] == [
        ("check-demo.ok", "PASS"),
        ("check-demo.printed", "PASS (printed form fails)"),
        ("check-demo.bad", "FAIL"),
    ]
    assert "3 checks" in parsed.summary


def test_cli_html_needs_force(fake_checks, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "v.html"
    out.write_text("keep me")
    capsys.readouterr()
    assert main(["--only", "demo.ok", "--html", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err and "--force" in err
    assert out.read_text() == "keep me"
    assert main(["--only", "demo.ok", "--html", str(out), "--force"]) == 0
    assert len(parse_report(out.read_text()).checks) == 1


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--html", "{d}/v.txt"], "must end in .html"),
        (["--html", "{d}/v.html", "--json", "{d}/v.html"], "same file"),
        (["--html", "{d}/dir.html"], "is a folder"),
    ],
)
def test_cli_html_bad_targets(fake_checks, tmp_path, capsys, argv, words):  # noqa: F811
    argv = [a.format(d=tmp_path) for a in argv]
    (tmp_path / "dir.html").mkdir()
    capsys.readouterr()
    assert main(["--only", "demo.ok", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err
    assert not (tmp_path / "v.html").exists() and not (tmp_path / "v.txt").exists()


# --- a real browser -----------------------------------------------------------------------------


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def _rendered_dom(browser: str, page: Path) -> str:
    argv = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
    argv += ["--virtual-time-budget=5000", "--dump-dom", page.resolve().as_uri()]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


_KATEX = re.compile(r'<span class="katex">')
_KATEX_ERROR = re.compile(r'<span class="katex-error"')


@pytest.mark.skipif(
    _browser() is None,
    reason="no chromium on PATH (make test installs it where apt-get runs as root): the "
    "headless-browser test of the HTML report's maths is skipped",
)
def test_maths_render_in_a_headless_browser(tmp_path):
    """KaTeX, inlined, renders every printed and corrected formula (no network, no files beside
    the report); a formula KaTeX cannot parse shows as an error (the negative control)."""
    results = _synthetic_results()
    forms = sum(1 for r in results if r.check.expect == "fails")
    page = tmp_path / "verify.html"
    report_html.write_html(page, results, header="browser test")
    dom = _rendered_dom(_browser(), page)
    assert len(_KATEX.findall(dom)) == 2 * forms
    assert _KATEX_ERROR.findall(dom) == []

    # negative control: one malformed formula gives one KaTeX error element
    broken = dataclasses.replace(
        results[0].check, expect="fails", printed=r"\frac{1}{", corrected="x"
    )
    bad = tmp_path / "bad.html"
    report_html.write_html(bad, [dataclasses.replace(results[0], check=broken)], header="control")
    dom = _rendered_dom(_browser(), bad)
    assert len(_KATEX_ERROR.findall(dom)) == 1 and len(_KATEX.findall(dom)) == 1


def test_printed_forms_only_on_printed_form_checks():
    from verify import registry

    with pytest.raises(ValueError, match="belong to expect='fails'"):
        registry.check("demo.x", title="t", source="s", kind="numeric", tolerance=1.0, printed="x")

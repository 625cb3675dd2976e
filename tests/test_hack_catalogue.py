"""docs/hack_catalogue.md against what cites it and what it names.

The tests cite rows of the reward-hack catalogue (`CATALOGUE_ROWS` in tests/sandbox/test_hacks.py,
`row:` in every hack file, the brackets of docs/errors.md's hack-code table); each must be a row of
docs/hack_catalogue.md. Every hack code the catalogue names must be a `drkernel.hacks.HackCode`, and every
code must answer some row. No citation may point at the old external copy of the catalogue.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from drkernel.hacks import HackCode
from tests.sandbox.corpus import corpus

ROOT = Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "docs" / "hack_catalogue.md"
SCANNED = ("drkernel", "tests", "recipes", "experiments", "bench", "docs", "README.md")
SUFFIXES = {".py", ".md", ".sh", ".txt", ".toml", ".yaml", ".yml", ".cfg", ".ini"}
SKIPPED = {ROOT / "docs" / "benchmark_log.md"}  # a journal of past runs, kept as it was written
_OLD_PATH = "field" + ".md"  # the external catalogue; split so that this file does not name it
_ROW_ID = re.compile(r"[A-D]\d{1,2}")


def catalogue_rows() -> dict[str, list[str]]:
    """Row id -> the cells of its table row (row | attack | codes | status | answer | tests)."""
    rows: dict[str, list[str]] = {}
    for line in CATALOGUE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and _ROW_ID.fullmatch(cells[0]):
            assert cells[0] not in rows, f"row {cells[0]} appears twice"
            assert len(cells) == 6, f"row {cells[0]} has {len(cells)} cells, not 6"
            rows[cells[0]] = cells
    return rows


def codes_of(row: list[str]) -> list[str]:
    cell = row[2]
    if cell == "—":
        return []
    codes = re.findall(r"`([^`]*)`", cell)
    assert re.sub(r"`[^`]*`", "", cell).replace(",", "").strip() == "", f"{row[0]}: codes cell {cell!r}"
    return codes


def rows_of_test_hacks() -> set[str]:
    """CATALOGUE_ROWS of tests/sandbox/test_hacks.py, read without importing the judge."""
    tree = ast.parse((ROOT / "tests" / "sandbox" / "test_hacks.py").read_text(encoding="utf-8"))
    for node in tree.body:
        names = [getattr(target, "id", None) for target in getattr(node, "targets", [])]
        if isinstance(node, ast.Assign) and "CATALOGUE_ROWS" in names:
            return set(ast.literal_eval(node.value))
    raise AssertionError("no CATALOGUE_ROWS in tests/sandbox/test_hacks.py")


def test_the_catalogue_has_every_row_of_sections_a_to_d() -> None:
    expected = ([f"A{i}" for i in range(1, 7)] + [f"B{i}" for i in range(1, 13)]
                + [f"C{i}" for i in range(1, 12)] + [f"D{i}" for i in range(1, 4)])
    assert list(catalogue_rows()) == expected


def test_every_row_the_tests_cite_is_in_the_catalogue() -> None:
    rows = set(catalogue_rows())
    listed = rows_of_test_hacks()
    assert listed, "CATALOGUE_ROWS is empty"
    assert listed <= rows, sorted(listed - rows)
    in_assets = {a.meta["row"] for a in corpus("hacks") if "row" in a.meta}
    assert in_assets <= rows, sorted(in_assets - rows)


def test_every_code_the_catalogue_names_is_a_hack_code() -> None:
    known = {c.value for c in HackCode}
    named = {code for row in catalogue_rows().values() for code in codes_of(row)}
    assert named, "the catalogue names no hack code"
    assert named <= known, sorted(named - known)
    assert known <= named, f"codes that answer no row: {sorted(known - named)}"


def test_the_rows_of_docs_errors_agree_with_the_catalogue() -> None:
    """`decoy_kernel` [A2, A3] in docs/errors.md: A2 and A3 are rows whose codes include one of the
    table row's codes."""
    rows = catalogue_rows()
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    table = text.split("## Hack codes", 1)[1].split("\n## ", 1)[0]
    checked = 0
    for line in table.splitlines():
        m = re.match(r"\| (.*?) \[([^\]]+)\] \|", line)
        if not m:
            continue
        codes = set(re.findall(r"`([a-z_]+)`", m.group(1)))
        for row_id in (r.strip() for r in m.group(2).split(",")):
            assert row_id in rows, f"docs/errors.md cites row {row_id}, not in the catalogue"
            assert codes & set(codes_of(rows[row_id])), f"{row_id}: none of {sorted(codes)} in the catalogue"
            checked += 1
    assert checked >= 10, "the scan of docs/errors.md found suspiciously few row citations"


def test_no_citation_points_at_the_external_catalogue() -> None:
    stale = []
    for name in SCANNED:
        p = ROOT / name
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*")
                                               if f.is_file() and f.suffix in SUFFIXES)
        for f in files:
            if f in SKIPPED:
                continue
            for lineno, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if _OLD_PATH in line:
                    stale.append(f"{f.relative_to(ROOT)}:{lineno}")
    assert not stale, stale

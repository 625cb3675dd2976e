"""Every `docs/paper_spec.md §N` citation in the repository names a section that exists.

The code cites the paper through docs/paper_spec.md (the project's summary of the paper and the
authors' code); a citation of a missing section, or one left pointing at the old external file,
fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs" / "paper_spec.md"
SCANNED = ("drkernel", "tests", "recipes", "experiments", "bench", "docs", "README.md")
SUFFIXES = {".py", ".md", ".sh", ".txt", ".toml", ".yaml", ".yml", ".cfg", ".ini"}

_NUM = r"\d+(?:\.\d+)*"
_HEADING = re.compile(rf"^#{{2,3}} ({_NUM})\.? \S", re.MULTILINE)
# "docs/paper_spec.md §5.3", with follow-ons such as ", §9.3", " / §15", "-§9.3" or "–2.3"
_CITATION = re.compile(rf"docs/paper_spec\.md §({_NUM})((?:(?:\s*[,/]\s*§|\s*[-–]\s*§?){_NUM})*)")
_FOLLOW_ON = re.compile(rf"(?:\s*[,/]\s*§|\s*[-–]\s*§?)({_NUM})")
_OLD_CITATION = "paper-" + "spec §"  # split so that this file does not cite the old name itself
_OLD_FILE = "spec/" + "paper.md"


def _sections() -> list[str]:
    return _HEADING.findall(SPEC.read_text(encoding="utf-8"))


def _files() -> list[Path]:
    out: list[Path] = []
    for name in SCANNED:
        p = ROOT / name
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out.extend(f for f in sorted(p.rglob("*")) if f.is_file() and f.suffix in SUFFIXES)
    return out


def _citations() -> list[tuple[str, str]]:
    found = []
    for f in _files():
        text = f.read_text(encoding="utf-8", errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in _CITATION.finditer(line):
                where = f"{f.relative_to(ROOT)}:{lineno}"
                found.append((where, m.group(1)))
                found.extend((where, n) for n in _FOLLOW_ON.findall(m.group(2)))
    return found


def test_sections_are_numbered_once_and_in_order():
    nums = _sections()
    assert len(nums) == len(set(nums)), "a section number appears twice"
    top = [int(n) for n in nums if "." not in n]
    assert top == list(range(top[0], top[0] + len(top))), f"top-level sections out of order: {top}"
    for n in nums:
        if "." in n:
            assert n.split(".")[0] in nums, f"§{n} has no parent section"
    key = [tuple(int(x) for x in n.split(".")) for n in nums]
    assert key == sorted(key), "sections out of order"


def test_every_citation_names_an_existing_section():
    sections = set(_sections())
    cites = _citations()
    assert len(cites) > 100, "the citation scan found suspiciously few citations"
    missing = [f"{where}: §{n}" for where, n in cites if n not in sections]
    assert not missing, "citations of sections not in docs/paper_spec.md:\n" + "\n".join(missing)


def test_paper_index_sections_exist():
    sections = set(_sections())
    rows = (ROOT / "docs" / "paper_index.md").read_text(encoding="utf-8").splitlines()
    cells = [r.split("|")[2].strip() for r in rows if r.startswith("| ") and r.count("|") > 3]
    cited = [n for c in cells for n in re.findall(rf"§({_NUM})", c)]
    assert cited, "no sections found in the paper index table"
    assert not [n for n in cited if n not in sections]


@pytest.mark.parametrize("needle", [_OLD_CITATION, _OLD_FILE])
def test_no_citation_points_outside_the_repository(needle):
    stale = []
    for f in _files():
        for lineno, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if needle in line:
                stale.append(f"{f.relative_to(ROOT)}:{lineno}")
    assert not stale, f"{needle!r} still cited at:\n" + "\n".join(stale)

"""The one list of hack codes (`drkernel.hacks.HackCode`) against everything that names hack codes."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from drkernel.advice import GENERIC_HACK_ADVICE, HACK_ADVICE, hack_advice
from drkernel.hacks import HackCode
from drkernel.sandbox.static import check_source

ROOT = Path(__file__).resolve().parent.parent


def test_every_code_has_a_meaning_and_advice() -> None:
    for code in HackCode:
        assert code.doc.strip(), code
        assert HACK_ADVICE[code].strip(), code
    assert set(HACK_ADVICE) == set(HackCode)


def test_the_table_of_docs_errors_lists_exactly_the_codes() -> None:
    text = (ROOT / "docs" / "errors.md").read_text()
    table = text.split("## Hack codes", 1)[1].split("\n\n", 2)[2]  # past the heading's paragraph
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    named = {m for row in rows for m in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    assert named == {c.value for c in HackCode}


def test_a_code_travels_as_its_plain_name() -> None:
    assert json.dumps([HackCode.DECOY_KERNEL]) == '["decoy_kernel"]'
    assert HackCode("timer_mismatch") is HackCode.TIMER_MISMATCH
    assert hack_advice("decoy_kernel") == HACK_ADVICE[HackCode.DECOY_KERNEL]
    assert hack_advice("not_a_code") == GENERIC_HACK_ADVICE


def test_static_findings_are_members() -> None:
    report = check_source("import threading\nimport os\nclass ModelNew:\n    def f(self):\n"
                          "        return eval('1')\n")
    assert set(report.hacks) == {"thread_injection", "forbidden_import", "dynamic_code"}
    assert all(isinstance(code, HackCode) for code in report.hacks)


def test_no_hack_is_raised_by_a_bare_string() -> None:
    """Every `.hack(...)`/`.flag(...)` call of the judge names a member, so the list above is complete."""
    bare = []
    for path in (ROOT / "drkernel").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
                    and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
                    in ("hack", "flag") and node.args and isinstance(node.args[0], ast.Constant)):
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bare, bare

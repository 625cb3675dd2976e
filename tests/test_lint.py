"""The house rules, checked where CI checks everything: ruff (pyproject.toml: pycodestyle, pyflakes,
import order, lines of at most 110 characters) and strict mypy over the package. Both come with the
`dev` extra; without them the checks are skipped, saying why."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(module: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]')")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, input=stdin, capture_output=True,
                          text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    cp = _run("ruff", "check", "--no-cache", "drkernel", "tests", "bench", "experiments")
    assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-2000:]


def test_the_line_length_rule_is_on() -> None:
    """A line of 111 characters is an error: the rule cannot be off."""
    line = "x = " + repr("a" * 105) + "\n"
    assert len(line.rstrip("\n")) == 111
    cp = _run("ruff", "check", "--no-cache", "--stdin-filename", "drkernel/agent/probe_line.py", "-",
              stdin=line)
    assert cp.returncode == 1 and "E501" in cp.stdout, cp.stdout + cp.stderr


def test_mypy_strict_finds_nothing() -> None:
    cp = _run("mypy", "drkernel")
    assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-2000:]

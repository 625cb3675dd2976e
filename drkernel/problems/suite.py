"""The built-in suite: problem folders shipped in the package -> Problem objects, and their solutions.

Each folder builtin/<id>_<name>/ holds reference.py (KernelBench format, GPU-sized constants),
solution.py (an honest Triton ModelNew) and problem.json (level, size snippets, held-out shapes).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from drkernel.errors import ProblemError
from drkernel.types import Problem

__all__ = [
    "BUILTIN_DIR",
    "SIZES",
    "builtin_names",
    "builtin_problem",
    "builtin_solution",
    "load_builtin_suite",
    "with_size",
]

log = logging.getLogger(__name__)

BUILTIN_DIR = Path(__file__).with_name("builtin")
SIZES = ("cpu", "gpu")
_SIZE_MARK = "\n\n# --- size: {label} ---\n"


def with_size(problem: Problem, snippet: str, label: str = "variant") -> Problem:
    """A copy of `problem` whose module-level size constants are redefined by `snippet`.

    The reference's functions read their globals at call time, so appending the assignments after
    the definitions resizes get_inputs() and get_init_inputs().

    >>> p = Problem(name="p", reference_code="n = 4")
    >>> with_size(p, "n = 2").reference_code.endswith("n = 2\\n")
    True
    """
    if not snippet.strip():
        return problem
    try:
        compile(snippet, f"<size snippet of {problem.name}>", "exec")
    except SyntaxError as exc:
        raise ProblemError(f"{problem.name}: size snippet does not parse: {exc.msg}") from None
    code = problem.reference_code.rstrip("\n") + _SIZE_MARK.format(label=label) + snippet.strip() + "\n"
    return replace(problem, reference_code=code, metadata={**problem.metadata, "size": label})


def builtin_names() -> list[str]:
    """Folder names of the built-in problems, in id order."""
    return sorted(d.name for d in BUILTIN_DIR.iterdir() if (d / "problem.json").is_file())


@lru_cache(maxsize=None)
def _read(name: str) -> tuple[str, dict[str, Any]]:
    folder = BUILTIN_DIR / name
    if not (folder / "problem.json").is_file():
        raise ProblemError(f"no built-in problem named {name!r} (see `drkernel suite list`)")
    meta = json.loads((folder / "problem.json").read_text())
    for key in ("level", "sizes", "shape_variants"):
        if key not in meta:
            raise ProblemError(f"{folder / 'problem.json'}: missing {key!r}")
    return (folder / "reference.py").read_text(), meta


def builtin_problem(name: str, size: str = "cpu") -> Problem:
    """One built-in problem at size "cpu" (Triton interpreter) or "gpu" (KernelBench v0.1 scale)."""
    if size not in SIZES:
        raise ProblemError(f"unknown size {size!r}: expected one of {', '.join(SIZES)}")
    code, meta = _read(name)
    problem = Problem(
        name=name,
        reference_code=code,
        level=int(meta["level"]),
        shape_variants=tuple(meta["shape_variants"]),
        metadata={"suite": "builtin", "dtype": meta.get("dtype", "float32"),
                  "tags": list(meta.get("tags", [])), "size": "gpu"},
    )
    return with_size(problem, meta["sizes"].get(size, ""), size)


def load_builtin_suite(size: str = "cpu", levels: tuple[int, ...] | None = None) -> list[Problem]:
    """Every built-in problem at one size, optionally only some levels."""
    problems = [builtin_problem(n, size) for n in builtin_names()]
    return [p for p in problems if levels is None or p.level in levels]


def builtin_solution(problem_name: str) -> str:
    """Source of the honest Triton solution (a ModelNew) of a built-in problem."""
    path = BUILTIN_DIR / problem_name / "solution.py"
    if not path.is_file():
        raise ProblemError(f"no built-in solution for {problem_name!r}")
    return path.read_text()

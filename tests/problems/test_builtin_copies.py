"""Built-in solutions are single files, so shared kernels (the fp32 GEMM, the row norm, the conv2d, the
activations, ...) are copied into each file that uses them. One name, one body: a fix made in one copy
must be made in all of them, or this test fails and names the copies that drifted."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import drkernel.problems

BUILTIN = Path(drkernel.problems.__file__).parent / "builtin"
PER_PROBLEM = {"ModelNew"}  # the one definition each solution must have of its own


def shared_definitions(root: Path = BUILTIN) -> dict[str, dict[str, str]]:
    """name -> {problem: source} for every top-level function or class of the solutions."""
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for path in sorted(root.glob("*/solution.py")):
        source = path.read_text()
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name not in PER_PROBLEM:
                found[node.name][path.parent.name] = ast.get_source_segment(source, node) or ""
    return found


def test_a_kernel_copied_into_several_solutions_is_the_same_everywhere() -> None:
    copies = {name: where for name, where in shared_definitions().items() if len(where) > 1}
    assert {"_matmul_kernel", "_norm_kernel", "_conv2d_kernel"} <= set(copies)  # the copies the test guards
    assert len(copies["_matmul_kernel"]) >= 5 and len(copies["_conv2d_kernel"]) == 3
    drifted = {name: sorted(where) for name, where in copies.items() if len(set(where.values())) > 1}
    assert not drifted, f"copies that differ: {drifted}"


def test_the_drift_check_sees_a_changed_copy(tmp_path: Path) -> None:
    for name in ("207_Conv2d_ReLU_BiasAdd", "208_Conv2d_Tanh_MaxPool"):
        (tmp_path / name).mkdir()
        text = (BUILTIN / name / "solution.py").read_text()
        if name.startswith("208"):
            text = text.replace("def _conv2d_kernel(", "def _conv2d_kernel(  # changed here only\n    ", 1)
        (tmp_path / name / "solution.py").write_text(text)
    where = shared_definitions(tmp_path)["_conv2d_kernel"]
    assert len(where) == 2 and len(set(where.values())) == 2

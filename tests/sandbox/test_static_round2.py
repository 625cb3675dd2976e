"""The gate against the second round of attacks (issue 32, class 2): strings that become code, the
allowed modules' helpers that run a shell, build a function from text or load a native library, and
attribute getters reached through a container. And a source the gate cannot walk (too deep, too
large) is the candidate's compile error, never a crash of the judge's own check. The gate is a
filter: the sandbox, not the gate, is the barrier (test_takeover.py runs these past it)."""

from __future__ import annotations

import pytest

from drkernel.sandbox.static import MAX_CHECKED_BYTES, check_source
from tests.sandbox.corpus import corpus

HEADER = ("import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
          "import typing\nimport operator\nimport functools\nimport dataclasses\nimport numpy as np\n")
MODEL = "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"

ROUND2 = {
    # a string annotation that typing (or singledispatch) evaluates: the string is code
    "def f(x: \"__import__('os').system('id')\"): pass\ntyping.get_type_hints(f)": "dynamic_code",
    "def f(x) -> \"__import__('os')\": pass": "dynamic_code",
    "class C:\n    x: \"eval('1')\"": "dynamic_code",
    "def f(x: 'typing.List[__builtins__]'): pass": "introspection",
    "from typing import get_type_hints as hints\nhints(len)": "dynamic_code",
    "r = typing.ForwardRef('1')": "dynamic_code",
    "f.__annotations__ = {'x': 'print(1)'}": "introspection",
    "T = typing\nT._eval_type(1, {}, {})": "dynamic_code",
    # shells and functions from text through the allowed modules' helpers
    "torch.utils.collect_env.run('id')": "dynamic_code",
    "from torch.utils.collect_env import run\nrun('id')": "dynamic_code",
    "t = torch.utils.benchmark.Timer(stmt='1')": "dynamic_code",
    "fn = dataclasses._create_fn('f', [], ['return 1'])": "dynamic_code",
    "m = torch.fx.graph_module._exec_with_source('x = 1', {})": "dynamic_code",
    "m = torch._inductor.codecache.PyCodeCache.load('x = 1')": "dynamic_code",
    "s = torch.jit.CompilationUnit('def f(x): return x')": "dynamic_code",
    "k = torch.cuda.jiterator._create_jit_fn('template <typename T> T f(T x) { return x; }')": "dynamic_code",
    # native libraries through torch's and Triton's own helpers
    "torch.classes.load_library('x.so')": "dynamic_code",
    "lib = triton.runtime.build._build('m', 'm.c', '/tmp', [], [], [])": "dynamic_code",
    "mod = triton.backends.nvidia.driver.compile_module_from_src('int x;', 'm')": "dynamic_code",
    "d = triton.runtime.driver.active.utils.load_library": "dynamic_code",
    "c = torch._C._dl_open": "dynamic_code",
    # attribute getters kept in a container and called later (the gate only reads direct calls)
    "g = [operator.attrgetter][0]\nh = g('__class__')": "dynamic_code",
    "from operator import attrgetter as a\nfs = {'k': a}": "dynamic_code",
    "p = functools.partial(operator.methodcaller, 'system')": "dynamic_code",
    # the device's memory fraction (the reference's memory taken while it loads)
    "torch.cuda.set_per_process_memory_fraction(1.0)": "dynamic_code",
    "torch.cuda.memory.set_per_process_memory_fraction(1.0)": "dynamic_code",
}


@pytest.mark.parametrize(("snippet", "code"), ROUND2.items(), ids=list(ROUND2))
def test_round_two_escape_is_flagged(snippet: str, code: str) -> None:
    report = check_source(HEADER + snippet + "\n" + MODEL)
    assert report.too_complex is None and report.syntax_error is None
    assert code in report.hacks, report.hacks


@pytest.mark.parametrize("snippet", [
    "def f(x: 'torch.Tensor') -> 'torch.Tensor': return x",  # string annotations that are types
    "def f(x: typing.Optional['torch.Tensor'] = None): return x",
    "g = operator.attrgetter('shape')",  # called at once on a constant, harmless name
    "n = operator.itemgetter(0)([1])",
    "props = triton.runtime.driver.active.utils.get_device_properties(0)",  # the tutorials' NUM_SM
    "x = torch.cuda.memory_allocated()",
    "y = torch.compile",
])
def test_near_misses_stay_clean(snippet: str) -> None:
    report = check_source(HEADER + snippet + "\n" + MODEL)
    assert report.hacks == {}, report.hacks


@pytest.mark.parametrize("kernel", [*corpus("kernels")], ids=lambda a: a.name)
def test_honest_kernels_still_pass(kernel) -> None:  # type: ignore[no-untyped-def]
    assert check_source(kernel.code).hacks == {}


def test_builtin_solutions_still_pass() -> None:
    from pathlib import Path

    import drkernel.problems

    solutions = sorted(Path(drkernel.problems.__file__).parent.glob("builtin/*/solution.py"))
    assert len(solutions) >= 25
    for path in solutions:
        assert check_source(path.read_text()).hacks == {}, path.parent.name


@pytest.mark.parametrize("source", [
    HEADER + "x = " + " + ".join(["1"] * 2000) + "\n" + MODEL,  # the chain that crashed the walk
    HEADER + "x = " + "-" * 5000 + "1\n" + MODEL,
    HEADER + "x = (" + "lambda: " * 3000 + "1)\n" + MODEL,
])
def test_a_source_too_deep_to_walk_is_the_candidates_compile_error(source: str) -> None:
    report = check_source(source)  # never raises
    assert report.too_complex or report.syntax_error, report


@pytest.mark.parametrize("source", [
    HEADER + "x = " + "[" * 150 + "]" * 150 + "\n" + MODEL,
    HEADER + "".join(f"def f{i}(x: '{'(' * 80}1{')' * 80}'): pass\n" for i in range(3)) + MODEL,
    HEADER + "def f(x: '" + "+".join(["1"] * 3000) + "'): pass\n" + MODEL,  # deep, inside a string
])
def test_deep_but_walkable_sources_are_checked_without_a_crash(source: str) -> None:
    report = check_source(source)
    assert report.syntax_error is None and (report.too_complex or report.has_model_new)


def test_a_source_too_large_to_check_is_refused_unread() -> None:
    big = HEADER + "# " + "x" * MAX_CHECKED_BYTES + "\n" + MODEL
    report = check_source(big)
    assert report.too_complex and "KiB" in report.too_complex

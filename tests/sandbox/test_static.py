"""The AST gate (drkernel.sandbox.static.check_source): parse, find ModelNew, flag hack patterns."""

from __future__ import annotations

import textwrap

import pytest

from drkernel.sandbox.static import ALLOWED_IMPORT_ROOTS, StaticReport, check_source
from tests.sandbox.corpus import corpus

HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
MODEL = "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"


def check(body: str, **kwargs: object) -> StaticReport:
    return check_source(HEADER + textwrap.dedent(body) + MODEL, **kwargs)  # type: ignore[arg-type]


# -- parsing and the entry point -----------------------------------------------------------------
def test_syntax_error_is_reported_with_its_line() -> None:
    report = check_source("class ModelNew:\n    def forward(self, x)\n        return x\n")
    assert report.syntax_error is not None and report.syntax_error.startswith("line 2")
    assert not report.has_model_new


def test_null_bytes_are_a_syntax_error_not_an_exception() -> None:
    assert check_source("class ModelNew: pass\n\0").syntax_error


def test_missing_model_new() -> None:
    report = check_source(HEADER + "class MyModel(nn.Module):\n    pass\n")
    assert report.syntax_error is None and not report.has_model_new and report.hacks == {}


def test_entry_point_is_configurable() -> None:
    source = HEADER + "class NetNew(nn.Module):\n    pass\n"
    assert check_source(source, entry_point="Net").has_model_new
    assert not check_source(source).has_model_new


def test_policy_off_still_parses_and_finds_model_new_but_flags_nothing() -> None:
    report = check_source("import os\nimport gc\nclass ModelNew:\n    pass\n", policy=False)
    assert report.has_model_new and report.hacks == {}


@pytest.mark.parametrize("kernel", corpus("kernels"), ids=lambda a: a.name)
def test_honest_kernels_pass_the_gate(kernel) -> None:  # type: ignore[no-untyped-def]
    report = check_source(kernel.code)
    assert report.syntax_error is None and report.has_model_new
    assert report.hacks == {}


def test_allowed_imports_are_not_flagged() -> None:
    body = "".join(f"import {root}\n" for root in sorted(ALLOWED_IMPORT_ROOTS - {"__future__"}))
    body += "from torch import nn\nfrom torch.nn import functional as F\nfrom typing import Optional\n"
    assert check(body).hacks == {}


# -- one finding per hack code -------------------------------------------------------------------
FLAGGED = {
    "import threading": "thread_injection",
    "from concurrent.futures import ThreadPoolExecutor": "thread_injection",
    "import multiprocessing as mp": "thread_injection",
    "import asyncio": "thread_injection",
    "import gc": "introspection",
    "import inspect": "introspection",
    "from sys import _getframe": "introspection",
    "import time": "timer_tamper",
    "import timeit": "timer_tamper",
    "import os": "forbidden_import",
    "import subprocess": "forbidden_import",
    "import ctypes": "forbidden_import",
    "import socket": "forbidden_import",
    "from . import sibling": "forbidden_import",
    "import drkernel.sandbox.pipeline": "forbidden_import",
    "y = eval('1 + 1')": "dynamic_code",
    "exec('x = 1')": "dynamic_code",
    "f = __import__('os')": "dynamic_code",
    "g = globals()": "dynamic_code",
    "v = getattr(torch, 'al' + 'lclose')": "dynamic_code",
    "setattr(torch, 'allclose', lambda *a, **k: True)": "monkeypatch",
    "torch.allclose = lambda *a, **k: True": "monkeypatch",
    "torch.Tensor.__eq__ = lambda a, b: True": "monkeypatch",
    "nn.Module.__call__ = lambda self, *a: None": "monkeypatch",
    "torch.backends.cuda.matmul.allow_tf32 = True": "monkeypatch",
    "del torch.testing.assert_close": "monkeypatch",
    "__builtins__ = {}": "monkeypatch",
    "torch.manual_seed, torch.randn = None, None": "monkeypatch",
    "f = open('/etc/hostname')": "file_access",
    "s = torch.cuda.Stream()": "stream_injection",
    "ctx = torch.cuda.stream(None)": "stream_injection",
    "from torch.cuda import Stream": "stream_injection",
    "g = torch.cuda.CUDAGraph()": "graph_capture",
    "c = torch.cuda.graph": "graph_capture",
    "t = torch.Tensor._make_subclass": "tensor_subclass",
    "class Lazy(torch.Tensor):\n    pass": "tensor_subclass",
    "class Lazy:\n    def __torch_function__(self, *a):\n        pass": "tensor_subclass",
    "k = ModelNew.__mro__": "introspection",
    "c = (1).__class__.__subclasses__()": "introspection",
    "f = getattr(torch, '__dict__')": "introspection",
    "def f(frame):\n    return frame.f_back.f_locals": "introspection",
}


@pytest.mark.parametrize(("snippet", "code"), FLAGGED.items(), ids=list(FLAGGED))
def test_pattern_is_flagged(snippet: str, code: str) -> None:
    report = check(snippet)
    assert code in report.hacks, report.hacks
    assert report.hacks[code].removeprefix("policy: ").startswith("line ")


# -- issue 13, class 1: escapes that got past the gate (a first filter; the barrier is isolation) ---
ESCAPES = {
    "b = __builtins__": "introspection",
    "imp = __builtins__['__import__']": "introspection",
    "T = torch\no = T.os": "forbidden_import",
    "T = torch\nS = T\ns = S.sys": "forbidden_import",
    "m = np.os": "forbidden_import",
    "import operator\nf = operator.attrgetter('o' + 's')": "dynamic_code",
    "from operator import attrgetter\nname = 'os'\nf = attrgetter(name)": "dynamic_code",
    "import operator\nf = operator.methodcaller(''.join(['sys']))": "dynamic_code",
    "g = getattr\nm = g(torch, 'os')": "dynamic_code",
    "fns = [getattr]": "dynamic_code",
    "np.save('/tmp/x.npy', np.zeros(3))": "file_access",
    "a = np.fromfile('/proc/self/environ')": "file_access",
    "a = numpy.load('x.npy', allow_pickle=True)": "file_access",
    "L = np.load\na = L('x.npy')": "file_access",
    "from numpy import fromfile\na = fromfile('x')": "file_access",
    "t = torch.from_file('/etc/passwd', size=10)": "file_access",
    "torch.zeros(3).numpy().tofile('/tmp/x')": "file_access",
    "s = torch.UntypedStorage.from_file('x', False, 10)": "file_access",
    "torch.save(torch.zeros(3), 'x.pt')": "file_access",
    "m = torch.utils.cpp_extension.load_inline('m', '')": "dynamic_code",
    "from torch.utils.cpp_extension import load_inline": "dynamic_code",
    "import torch.utils.cpp_extension as ext": "dynamic_code",
    "T = torch\nm = T.utils.cpp_extension.load('m', [])": "dynamic_code",
    "m = torch.hub.load('someone/repo', 'model')": "dynamic_code",
    "t = torch.load('x.pt', weights_only=False)": "dynamic_code",
    "t = torch.load('x.pt')": "file_access",
    "torch.ops.load_library('x.so')": "dynamic_code",
}


@pytest.mark.parametrize(("snippet", "code"), ESCAPES.items(), ids=list(ESCAPES))
def test_escape_past_the_old_gate_is_flagged(snippet: str, code: str) -> None:
    report = check_source("import numpy\nimport numpy as np\n" + HEADER + snippet + "\n" + MODEL)
    assert code in report.hacks, report.hacks


@pytest.mark.parametrize("snippet", [
    "import math\nx = math.sqrt(2.0)",
    "y = tl.load(ptr)",  # Triton's load is not a file
    "x = torch.load('x.pt', weights_only=True)",  # still file access, but no code
    "f = getattr(torch, 'float16')",
    "n = np.asarray([1.0]).sum()",
])
def test_near_misses_are_not_escapes(snippet: str) -> None:
    report = check_source("import numpy as np\n" + HEADER + snippet + "\n" + MODEL)
    assert not {"introspection", "dynamic_code"} & set(report.hacks), report.hacks
    if "load(" not in snippet:
        assert report.hacks == {}, report.hacks


def test_inheritance_from_the_reference_is_flagged() -> None:
    source = HEADER + "class Model(nn.Module):\n    pass\n\nclass ModelNew(Model):\n    pass\n"
    report = check_source(source)
    assert report.has_model_new and "inheritance_bypass" in report.hacks


def test_attribute_access_on_a_local_object_is_not_a_monkeypatch() -> None:
    body = "class Cfg:\n    pass\n\ncfg = Cfg()\ncfg.block = 128\n"
    assert check(body).hacks == {}


def test_findings_keep_the_first_evidence() -> None:
    report = check("import os\nimport subprocess\n")
    assert report.hacks["forbidden_import"].startswith("policy: line 5: import os (")


def test_warnings_is_allowed() -> None:
    """An honest kernel often imports warnings; it is harmless (its .sys stays an escape)."""
    assert check("import warnings\nwarnings.warn('slow path')\n").hacks == {}
    assert "forbidden_import" in check("import warnings\ns = warnings.sys\n").hacks


def test_an_import_refused_by_the_rule_states_the_rule_and_is_a_policy_refusal() -> None:
    from drkernel.sandbox.static import is_policy_refusal

    hacks = check("import os\n").hacks
    assert hacks["forbidden_import"].startswith("policy: line 5: import os")
    assert "allows imports of these modules only: torch, triton," in hacks["forbidden_import"]
    assert "warnings" in hacks["forbidden_import"]
    assert is_policy_refusal(["forbidden_import"],
                             {"forbidden_import": "static: " + hacks["forbidden_import"]})
    # the same code found by more than the import is an attack, whatever came first
    caught = check("import sys\nf = sys._getframe\n").hacks
    assert not caught["introspection"].startswith("policy: ")
    assert not is_policy_refusal(["introspection"], {"introspection": "static: " + caught["introspection"]})
    assert not is_policy_refusal(["forbidden_import", "decoy_kernel"], {"forbidden_import": "policy: x"})
    assert not is_policy_refusal([], {})


def test_hack_corpus_files_that_rely_on_the_gate_are_flagged_by_it() -> None:
    static_codes = {"inheritance_bypass", "introspection", "dynamic_code", "thread_injection", "timer_tamper",
                    "monkeypatch", "file_access", "forbidden_import", "stream_injection", "graph_capture",
                    "tensor_subclass"}
    checked = 0
    for hack in corpus("hacks"):
        expected = set(hack.listed("hacks")) & static_codes
        if "static_policy=False" in hack.meta.get("options", "") or not expected or "xfail" in hack.meta:
            continue
        if ({"tensor_subclass"} == expected and "as_subclass" in hack.code
                and "(torch.Tensor)" not in hack.code):
            continue
        assert expected & set(check_source(hack.code).hacks), hack.name
        checked += 1
    assert checked >= 12


# -- known bypasses (see the report of the test corpus; each turns into a failure once fixed) ------
BYPASSES = {
    "torch.os": "torch.os.kill(torch.os.getppid(), 9)",
    "torch.builtins.open": "t = torch.builtins.open('/proc/self/status').read()",
    "torch.inspect.stack": "frames = torch.inspect.stack(0)",
    "torch.sys.modules": "m = torch.sys.modules['drkernel.sandbox.inside.worker']",
    "torch.ctypes": "torch.ctypes.string_at(0)",
    "dataclasses.inspect": "import dataclasses\nframes = dataclasses.inspect.stack(0)",
    "typing.sys": "import typing\nm = typing.sys.modules",
    "getattr-constant-module": "os_module = getattr(torch, 'os')",
    "operator.attrgetter": "import operator\nback = operator.attrgetter('f_back')",
}


@pytest.mark.parametrize("snippet", BYPASSES.values(), ids=list(BYPASSES))
def test_stdlib_module_reached_through_an_allowed_module_is_flagged(snippet: str) -> None:
    assert check(snippet).hacks != {}

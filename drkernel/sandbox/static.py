"""Static gate on candidate source: parse, find ModelNew, and flag hack patterns from the AST.

Source text in, a StaticReport out; runs in the judge without importing the candidate. Each finding
is a hack code (docs/hack_catalogue.md maps the catalogue's rows to codes) with a line number as evidence.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from drkernel.hacks import HackCode

__all__ = ["ALLOWED_IMPORT_ROOTS", "IMPORT_RULE", "MAX_CHECKED_BYTES", "POLICY", "StaticReport",
           "allowed_imports_text", "check_source", "is_policy_refusal"]

ALLOWED_IMPORT_ROOTS = frozenset(
    {
        "torch", "triton", "math", "typing", "typing_extensions", "functools", "itertools",
        "operator", "dataclasses", "collections", "enum", "abc", "__future__", "numbers",
        "numpy", "einops", "warnings",
    }
)


def allowed_imports_text() -> str:
    """The allow-list as a model reads it in its prompt and in feedback."""
    return ", ".join(
        sorted(ALLOWED_IMPORT_ROOTS - {"__future__"}, key=lambda m: (m not in ("torch", "triton"), m))
    )


IMPORT_RULE = f"the judge allows imports of these modules only: {allowed_imports_text()}"
POLICY = "policy: "  # evidence prefix of a finding made by an import statement alone

# import root -> hack code
_BANNED_IMPORTS: dict[str, HackCode] = {
    "threading": HackCode.THREAD_INJECTION,
    "_thread": HackCode.THREAD_INJECTION,
    "multiprocessing": HackCode.THREAD_INJECTION,
    "concurrent": HackCode.THREAD_INJECTION,
    "asyncio": HackCode.THREAD_INJECTION,
    "gc": HackCode.INTROSPECTION,
    "inspect": HackCode.INTROSPECTION,
    "sys": HackCode.INTROSPECTION,
    "traceback": HackCode.INTROSPECTION,
    "time": HackCode.TIMER_TAMPER,
    "timeit": HackCode.TIMER_TAMPER,
}
_DYNAMIC_CALLS = {"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint"}
_MONKEYPATCH_CALLS = {"setattr", "delattr"}
_INTROSPECTION_ATTRS = {
    "__class__", "__subclasses__", "__globals__", "__dict__", "__code__", "__builtins__", "__annotations__",
    "__closure__", "__bases__", "__mro__", "__self__", "__func__", "__getattribute__",
    "f_back", "f_globals", "f_locals", "f_code", "gi_frame", "cr_frame", "tb_frame",
    "_getframe", "get_referrers", "get_objects", "get_referents",
}
# stdlib modules that allowed modules re-export as attributes (torch.os, torch.sys, dataclasses.inspect...)
_ESCAPE_MODULES = {
    "os", "sys", "inspect", "builtins", "importlib", "ctypes", "threading", "_thread", "subprocess", "gc",
    "socket", "shutil", "pickle", "marshal", "multiprocessing", "traceback", "posix", "pty", "mmap",
}
# calls that read or write files, or run code that is not in the source (dotted, after aliases)
_FILE_CALLS = {
    "numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "numpy.load", "numpy.loadtxt",
    "numpy.genfromtxt", "numpy.fromfile", "numpy.memmap", "numpy.lib.format.open_memmap", "numpy.fromregex",
    "torch.save", "torch.load", "torch.from_file", "torch.Storage.from_file",
    "torch.UntypedStorage.from_file", "torch.TypedStorage.from_file",
}
_FILE_METHODS = {"tofile", "from_file"}
# Helpers of the allowed modules that turn text into code (a function, a module, TorchScript, a shell
# command), load a native library or start processes: none is needed to write a kernel.
_CODE_MODULES = ("torch.utils.cpp_extension", "torch.hub", "torch.ops.load_library", "torch.package",
                 "torch.utils.model_zoo", "torch.classes.load_library", "numpy.ctypeslib",
                 "torch.utils.collect_env", "torch.utils.benchmark", "torch.fx", "torch.jit",
                 "torch.cuda.jiterator", "torch.multiprocessing", "torch.distributed", "torch.utils.data",
                 "torch.cuda.set_per_process_memory_fraction", "torch.cuda.memory",
                 "triton.runtime.build", "triton.backends", "triton.tools", "triton.profiler",
                 "numpy.distutils", "numpy.f2py", "numpy.testing",
                 "typing.get_type_hints", "typing.ForwardRef", "typing_extensions.get_type_hints",
                 "typing_extensions.ForwardRef", "typing_extensions.evaluate_forward_ref")
# names that load native code or evaluate text wherever they are reached from
_CODE_ATTRS = {"load_library", "load_inline", "compile_module_from_src", "get_type_hints", "ForwardRef",
               "evaluate_forward_ref", "CDLL", "PyDLL", "cdll", "pydll", "LoadLibrary", "dlopen", "jiterator"}
_BUILTIN_VALUES = {"getattr", "setattr", "delattr", "__import__", "eval", "exec", "compile", "globals",
                   "locals", "vars", "open", "breakpoint"}
_GETTERS = {"attrgetter", "methodcaller"}  # operator's: allowed only called at once, on constant names
_STREAM_ATTRS = {"Stream", "stream", "wait_stream", "record_stream", "ExternalStream", "set_stream"}
_GRAPH_ATTRS = {"CUDAGraph", "graph", "make_graphed_callables"}
_SUBCLASS_DEFS = {"__torch_function__", "__torch_dispatch__"}


@dataclass(slots=True)
class StaticReport:
    syntax_error: str | None = None
    too_complex: str | None = None  # nested past the gate's reach: the candidate's compile error
    has_model_new: bool = False
    hacks: dict[HackCode, str] = field(default_factory=dict)  # code -> first evidence
    beyond_imports: set[HackCode] = field(default_factory=set)  # codes found by more than an import statement

    def flag(self, code: HackCode, evidence: str, *, by_import: bool = False) -> None:
        self.hacks.setdefault(code, evidence)
        if not by_import:
            self.beyond_imports.add(code)

    def mark_policy(self) -> None:
        """Codes found only by import statements are the import rule's refusals: say so, and state it."""
        for code, evidence in self.hacks.items():
            if code not in self.beyond_imports:
                self.hacks[code] = f"{POLICY}{evidence} ({IMPORT_RULE})"


def is_policy_refusal(hacks: list[str], hack_details: dict[str, str]) -> bool:
    """Whether every hack of a result is an import the rule refuses (not an attack that was caught)."""
    return bool(hacks) and all(
        hack_details.get(code, "").removeprefix("static: ").startswith(POLICY) for code in hacks
    )


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


class _SourceTooComplex(Exception):
    """The source nests deeper than the gate walks: the candidate's compile error, never the judge's."""


class _Visitor(ast.NodeVisitor):
    def __init__(self, report: StaticReport, entry_point: str) -> None:
        self.report = report
        self.entry_point = entry_point
        self.module_aliases: set[str] = set()
        self.origins: dict[str, str] = {}  # local name -> dotted origin (np -> numpy, T -> torch)
        self._called: set[int] = set()  # ids of Name nodes that are the function of a call

    def _import(self, module: str, alias: str | None, line: int) -> None:
        root = module.split(".")[0]
        self.module_aliases.add(alias or root)
        if root in _BANNED_IMPORTS:
            self.report.flag(_BANNED_IMPORTS[root], f"line {line}: import {module}", by_import=True)
        elif root not in ALLOWED_IMPORT_ROOTS:
            self.report.flag(HackCode.FORBIDDEN_IMPORT, f"line {line}: import {module}", by_import=True)

    def _dotted(self, node: ast.AST) -> str | None:
        """`np.lib.format.open_memmap` -> "numpy.lib.format.open_memmap", through import and
        assignment aliases."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.origins:
            return None
        return ".".join([self.origins[node.id], *reversed(parts)])

    def _check_dotted(self, dotted: str | None, line: int) -> None:
        if dotted is None:
            return
        if dotted in _FILE_CALLS:
            self.report.flag(HackCode.FILE_ACCESS, f"line {line}: {dotted}")
        if any(dotted == m or dotted.startswith(m + ".") for m in _CODE_MODULES):
            self.report.flag(HackCode.DYNAMIC_CODE, f"line {line}: {dotted} (code that is not in the source)")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._import(a.name, a.asname.split(".")[0] if a.asname else None, node.lineno)
            if a.asname:
                self.origins[a.asname] = a.name
            else:
                self.origins[a.name.split(".")[0]] = a.name.split(".")[0]
            self._check_dotted(a.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.report.flag(HackCode.FORBIDDEN_IMPORT, f"line {node.lineno}: relative import")
            return
        module = node.module or ""
        self._import(module, None, node.lineno)
        for a in node.names:
            self.module_aliases.add(a.asname or a.name)
            self.origins[a.asname or a.name] = f"{module}.{a.name}"
            self._check_dotted(f"{module}.{a.name}", node.lineno)
            if a.name in _ESCAPE_MODULES:
                self.report.flag(HackCode.FORBIDDEN_IMPORT,
                                 f"line {node.lineno}: from {module} import {a.name}")
            if module.split(".")[0] == "torch" and a.name in _STREAM_ATTRS:
                self.report.flag(HackCode.STREAM_INJECTION,
                                 f"line {node.lineno}: from {module} import {a.name}")

    def visit_Call(self, node: ast.Call) -> None:
        func = self._dotted(node.func)
        if func == "torch.load":
            weights_only = next((k.value for k in node.keywords if k.arg == "weights_only"), None)
            if not (isinstance(weights_only, ast.Constant) and weights_only.value is True):
                self.report.flag(
                    HackCode.DYNAMIC_CODE,
                    f"line {node.lineno}: torch.load without weights_only=True (unpickles code)",
                )
        if isinstance(node.func, ast.Attribute) and node.func.attr in _FILE_METHODS:
            self.report.flag(HackCode.FILE_ACCESS, f"line {node.lineno}: .{node.func.attr}(...)")
        if isinstance(node.func, ast.Attribute):
            self._called.add(id(node.func))
        if isinstance(node.func, ast.Name):
            self._called.add(id(node.func))
            if node.func.id in _DYNAMIC_CALLS:
                self.report.flag(HackCode.DYNAMIC_CODE, f"line {node.lineno}: {node.func.id}(...)")
            elif node.func.id in _MONKEYPATCH_CALLS:
                self.report.flag(HackCode.MONKEYPATCH, f"line {node.lineno}: {node.func.id}(...)")
            elif node.func.id == "getattr" and len(node.args) >= 2:
                if not isinstance(node.args[1], ast.Constant):
                    self.report.flag(HackCode.DYNAMIC_CODE,
                                     f"line {node.lineno}: getattr with a computed name")
                elif str(node.args[1].value) in _ESCAPE_MODULES:
                    self.report.flag(
                        HackCode.FORBIDDEN_IMPORT, f"line {node.lineno}: getattr(..., {node.args[1].value!r})"
                    )
                elif str(node.args[1].value) in _INTROSPECTION_ATTRS:
                    self.report.flag(
                        HackCode.INTROSPECTION, f"line {node.lineno}: getattr(..., {node.args[1].value!r})"
                    )
            elif node.func.id == "open":
                self.report.flag(HackCode.FILE_ACCESS, f"line {node.lineno}: open(...)")
        if isinstance(node.func, (ast.Attribute, ast.Name)) and (
            func in ("operator.attrgetter", "operator.methodcaller")
            or (isinstance(node.func, ast.Attribute) and node.func.attr in ("attrgetter", "methodcaller"))
        ):
            if any(not isinstance(arg, ast.Constant) for arg in node.args):
                self.report.flag(HackCode.DYNAMIC_CODE,
                                 f"line {node.lineno}: attribute name computed at run time")
            for arg in node.args:
                if isinstance(arg, ast.Constant) and set(str(arg.value).split(".")) & (
                    _INTROSPECTION_ATTRS | _ESCAPE_MODULES
                ):
                    self.report.flag(
                        HackCode.INTROSPECTION, f"line {node.lineno}: {ast.unparse(node.func)}({arg.value!r})"
                    )
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "__builtins__" and isinstance(node.ctx, ast.Load):
            self.report.flag(HackCode.INTROSPECTION, f"line {node.lineno}: __builtins__")
        elif node.id in _BUILTIN_VALUES and id(node) not in self._called and isinstance(node.ctx, ast.Load):
            self.report.flag(HackCode.DYNAMIC_CODE, f"line {node.lineno}: {node.id} used as a value")
        elif node.id in self.origins and isinstance(node.ctx, ast.Load):
            self._check_dotted(self.origins[node.id], node.lineno)
            origin = self.origins[node.id].rsplit(".", 1)[-1]
            if origin in _GETTERS and id(node) not in self._called:  # kept in a list, passed, called later
                self.report.flag(HackCode.DYNAMIC_CODE, f"line {node.lineno}: {node.id} used as a value")

    # annotations: a string there is code that typing, dataclasses or singledispatch may evaluate
    def _annotation(self, node: ast.AST | None) -> None:
        if node is None:
            return
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                self._string_code(sub.value, sub.lineno)

    def _string_code(self, text: str, line: int) -> None:
        """Check a string that may be evaluated as an expression as if it were written as code."""
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return  # never code: typing would refuse it too
        for sub in ast.walk(tree):
            for child in ast.iter_child_nodes(sub):
                if hasattr(child, "lineno"):
                    child.lineno = line  # type: ignore[attr-defined]
        self.visit(tree)

    def visit_arg(self, node: ast.arg) -> None:
        self._annotation(node.annotation)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._annotation(node.returns)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._annotation(node.annotation)
        self._check_target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        attr = node.attr
        self._check_dotted(self._dotted(node), node.lineno)
        rooted = _root_name(node) in self.module_aliases
        if attr in _CODE_ATTRS:
            self.report.flag(HackCode.DYNAMIC_CODE,
                             f"line {node.lineno}: .{attr} (code that is not in the source)")
        elif attr in _GETTERS and rooted and id(node) not in self._called:
            self.report.flag(HackCode.DYNAMIC_CODE, f"line {node.lineno}: .{attr} used as a value")
        elif rooted and attr.startswith("_") and not (attr.startswith("__") and attr.endswith("__")):
            # torch._C, torch._inductor, triton._C, dataclasses._create_fn, typing._eval_type: the
            # modules' internals, where text becomes code and native libraries load
            self.report.flag(HackCode.DYNAMIC_CODE, f"line {node.lineno}: .{attr} (a module's internals)")
        if attr in _ESCAPE_MODULES:  # torch.os, T.os with T = torch, np.ctypes...: a module, not data
            self.report.flag(HackCode.FORBIDDEN_IMPORT,
                             f"line {node.lineno}: module {attr} reached as .{attr}")
        elif attr in _INTROSPECTION_ATTRS:
            self.report.flag(HackCode.INTROSPECTION, f"line {node.lineno}: .{attr}")
        elif attr in _STREAM_ATTRS and _root_name(node) in self.module_aliases:
            self.report.flag(HackCode.STREAM_INJECTION, f"line {node.lineno}: .{attr}")
        elif attr in _GRAPH_ATTRS and _root_name(node) in self.module_aliases:
            self.report.flag(HackCode.GRAPH_CAPTURE, f"line {node.lineno}: .{attr}")
        elif attr == "_make_subclass":
            self.report.flag(HackCode.TENSOR_SUBCLASS, f"line {node.lineno}: ._make_subclass")
        self.generic_visit(node)

    def _check_target(self, target: ast.AST, line: int) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t, line)
        elif isinstance(target, ast.Attribute) and _root_name(target) in self.module_aliases:
            self.report.flag(HackCode.MONKEYPATCH, f"line {line}: assignment to {ast.unparse(target)}")
        elif isinstance(target, ast.Name) and target.id == "__builtins__":
            self.report.flag(HackCode.MONKEYPATCH, f"line {line}: assignment to __builtins__")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_target(t, node.lineno)
        origin = self._dotted(node.value)
        if origin is not None:  # T = torch; L = np.load: the alias keeps the origin's checks
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.origins[t.id] = origin
                    self.module_aliases.add(t.id)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_target(t, node.lineno)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [ast.unparse(b) for b in node.bases]
        if node.name == f"{self.entry_point}New":
            self.report.has_model_new = True
            if any(b.split(".")[-1] == self.entry_point for b in bases):
                self.report.flag(HackCode.INHERITANCE_BYPASS,
                                 f"line {node.lineno}: {node.name}({', '.join(bases)})")
        if any(b.endswith("Tensor") for b in bases):
            self.report.flag(HackCode.TENSOR_SUBCLASS,
                             f"line {node.lineno}: class {node.name}({', '.join(bases)})")
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in _SUBCLASS_DEFS:
                self.report.flag(HackCode.TENSOR_SUBCLASS, f"line {item.lineno}: defines {item.name}")
        self.generic_visit(node)


MAX_CHECKED_BYTES = 1 << 20  # a submission past this is refused unread: the candidate's compile error


def check_source(source: str, entry_point: str = "Model", policy: bool = True) -> StaticReport:
    """Parse `source`; report syntax errors, whether `<entry_point>New` exists, and hack patterns.
    A source the gate cannot check (past MAX_CHECKED_BYTES, or nested deeper than its walk reaches)
    is `too_complex`: the candidate's compile error, never the judge's.

    >>> check_source("import gc\\nclass ModelNew: pass").hacks["introspection"].split(" (")[0]
    'policy: line 1: import gc'
    """
    report = StaticReport()
    if len(source) > MAX_CHECKED_BYTES or len(source.encode("utf-8", "surrogatepass")) > MAX_CHECKED_BYTES:
        report.too_complex = f"the source exceeds the {MAX_CHECKED_BYTES >> 10} KiB the judge checks"
        return report
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        report.syntax_error = f"line {exc.lineno}: {exc.msg}"
        return report
    except (ValueError, RecursionError, MemoryError) as exc:
        report.syntax_error = str(exc) or type(exc).__name__
        return report
    visitor = _Visitor(report, entry_point)
    if policy:
        try:
            visitor.visit(tree)
        except (RecursionError, MemoryError):  # a chain of 2,000 `1 +` nests that deep
            report.too_complex = "the source nests deeper than the judge's check reaches"
            return report
        report.mark_policy()
    else:
        report.has_model_new = any(
            isinstance(n, ast.ClassDef) and n.name == f"{entry_point}New" for n in ast.walk(tree)
        )
    return report

"""Trusted, in-process execution of reference code (never candidate code): Problem -> outputs.

Used by the audit and the baseline timer. References are our own or the user's benchmark files,
so they run in this interpreter; candidate kernels only ever run inside the judge's sandbox.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch

from drkernel.errors import ProblemError
from drkernel.types import Problem

__all__ = [
    "ReferenceModule",
    "failure_text",
    "flatten_tensors",
    "load_reference",
    "move_inputs",
    "validate_reference_source",
]


def validate_reference_source(code: str, origin: str, entry_point: str = "Model") -> None:
    """Raise ProblemError unless `code` parses and defines the KernelBench entry points."""
    try:
        tree = ast.parse(code, filename=origin)
    except SyntaxError as exc:
        raise ProblemError(f"{origin}: syntax error at line {exc.lineno}: {exc.msg}") from None
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    missing = [f"class {entry_point}"] if entry_point not in classes else []
    missing += [f"def {f}()" for f in ("get_inputs", "get_init_inputs") if f not in funcs]
    if missing:
        raise ProblemError(f"{origin}: not KernelBench format: missing {', '.join(missing)}")


@dataclasses.dataclass
class ReferenceModule:
    """The executed namespace of one reference: build the model, make inputs."""

    problem: Problem
    namespace: dict[str, Any]

    def build(self, init_seed: int, device: str | torch.device = "cpu") -> torch.nn.Module:
        torch.manual_seed(init_seed)
        model = self.namespace[self.problem.entry_point](*self._call("get_init_inputs"))
        return model.to(device)

    def inputs(self, seed: int, device: str | torch.device = "cpu") -> list[Any]:
        torch.manual_seed(seed)
        return move_inputs(self._call("get_inputs"), device)

    def _call(self, name: str) -> list[Any]:
        """get_inputs() or get_init_inputs() as a list, by the judge's own rule (`harness.input_list`):
        what is no list of inputs (a bare tensor, None) is a ProblemError naming the function."""
        from drkernel.sandbox.inside.harness import NotInputs, input_list

        try:
            return input_list(self.namespace[name](), name)
        except NotInputs as exc:
            raise ProblemError(f"{self.problem.name}: {exc}") from None

    def call_numel(self) -> int:
        """Elements in one call's inputs plus outputs, on the meta device; the outputs are left out
        when some operator of the reference has no meta implementation."""
        with torch.device("meta"):
            inputs = self._call("get_inputs")
            try:
                model = self.namespace[self.problem.entry_point](*self._call("get_init_inputs"))
                with torch.no_grad():
                    outputs = list(flatten_tensors(model(*inputs)))
            except Exception:  # noqa: BLE001 - an op without a meta kernel: fall back to the inputs
                outputs = []
        return sum(t.numel() for t in flatten_tensors(inputs)) + sum(t.numel() for t in outputs)


def load_reference(problem: Problem) -> ReferenceModule:
    """Execute a (trusted) reference's source into a fresh namespace."""
    origin = f"<reference {problem.name}>"
    validate_reference_source(problem.reference_code, origin, problem.entry_point)
    namespace: dict[str, Any] = {"__name__": f"drkernel_reference_{abs(hash(problem.name))}"}
    try:
        exec(compile(problem.reference_code, origin, "exec"), namespace)  # noqa: S102 - trusted reference
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - user benchmark code: report, never crash
        raise ProblemError(f"{problem.name}: reference failed to load: {failure_text(exc)}") from None
    return ReferenceModule(problem, namespace)


def failure_text(exc: BaseException) -> str:
    """How a reference failed, in one line: the exception's type and message; a sys.exit (a forward
    that exits, a module-level argparse reading the command's own arguments) says so."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: the reference exited (code {exc.code})"
    return f"{type(exc).__name__}: {exc}"


def move_inputs(inputs: list[Any], device: str | torch.device) -> list[Any]:
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def flatten_tensors(value: Any) -> Iterator[torch.Tensor]:
    """Tensors of an output or input structure, in order (tuples, lists and dicts are walked)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from flatten_tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from flatten_tensors(v)

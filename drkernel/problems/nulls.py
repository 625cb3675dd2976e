"""Null candidates for problem audits, and automatic size reduction of a reference for CPU audits.

A null candidate is ModelNew source that does no real work (zeros, a constant, a copy of an input)
but still launches one Triton kernel per call, so only the correctness check can reject it.
"""

from __future__ import annotations

import ast

from drkernel.problems.reference import load_reference
from drkernel.problems.suite import with_size
from drkernel.types import Problem

__all__ = ["WRAPPER_MODES", "constant_candidate", "derived_assignments", "identity_candidate",
           "int_constants", "shrink_sizes", "wrapper_candidate"]

_TEMPLATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _null_kernel(src_ptr, out_ptr, n, value, COPY: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    if COPY:
        v = tl.load(src_ptr + offs, mask=mask, other=0.0)
    else:
        # a tiny deterministic jitter, so the output is not exactly constant
        v = tl.zeros((BLOCK,), dtype=tl.float32) + value + ((offs % 3) - 1).to(tl.float32) * 1e-6
    tl.store(out_ptr + offs, v, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, *inputs):
        out = torch.empty({shape}, device=inputs[0].device, dtype=torch.float32)
        src = {src}
        n = out.numel()
        _null_kernel[(triton.cdiv(n, 1024),)](src, out, n, {value}, COPY={copy}, BLOCK=1024)
        return out
'''


def constant_candidate(shape: tuple[int, ...], value: float) -> str:
    """ModelNew returning `value` (plus a 1e-6 jitter) in the reference's output shape."""
    return _TEMPLATE.format(shape=tuple(shape), src="out", value=repr(float(value)), copy=False)


def identity_candidate(shape: tuple[int, ...], input_index: int) -> str:
    """ModelNew returning a copy of its input number `input_index` (same shape as the output)."""
    src = f"inputs[{input_index}].contiguous()"
    return _TEMPLATE.format(shape=tuple(shape), src=src, value="0.0", copy=True)


WRAPPER_MODES = ("replay", "half_input")
_WRAPPED = "_SurveyReference"
_WRAPPER = '''


import torch as _torch
import triton
import triton.language as tl


@triton.jit
def _survey_copy(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def _survey_out(value):
    if isinstance(value, (tuple, list)):
        return type(value)(_survey_out(v) for v in value)
    if not isinstance(value, _torch.Tensor):
        return value
    src = value.detach().contiguous()
    out = _torch.empty_like(src)
    if src.numel():
        _survey_copy[(triton.cdiv(src.numel(), 1024),)](src, out, src.numel(), BLOCK=1024)
    return out


def _survey_half(x):
    if not isinstance(x, _torch.Tensor) or x.ndim == 0 or x.shape[-1] < 2 or not x.is_floating_point():
        return x
    y = x.clone()
    y[..., 1::2] = x[..., 0 : x.shape[-1] // 2 * 2 : 2]
    return y


class {entry}New(_torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.inner = {wrapped}(*args, **kwargs)
        self.kept = None

    def forward(self, *inputs):
        MODE = {mode!r}
        if MODE == "half_input":
            return _survey_out(self.inner(*[_survey_half(x) for x in inputs]))
        if self.kept is None:  # replay: the first call's output, for every later call
            with _torch.no_grad():
                self.kept = _survey_out(self.inner(*inputs))
        return _survey_out(self.kept)
'''


def wrapper_candidate(reference_code: str, mode: str, entry_point: str = "Model") -> str:
    """ModelNew that runs the reference itself, renamed, but dishonestly: `replay` returns the output
    of its first call for every later call (a kernel that computed its answer once); `half_input`
    runs it on inputs whose odd last-dimension elements are copies of their even neighbours (a kernel
    that reads half its input). Each output goes through one Triton copy kernel per call."""
    if mode not in WRAPPER_MODES:
        raise ValueError(f"wrapper mode {mode!r}: expected one of {', '.join(WRAPPER_MODES)}")
    tree = ast.parse(reference_code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == entry_point:
            node.name = _WRAPPED
        elif isinstance(node, ast.Name) and node.id == entry_point:
            node.id = _WRAPPED
    return ast.unparse(tree) + _WRAPPER.format(entry=entry_point, wrapped=_WRAPPED, mode=mode)


def _const_int(node: ast.expr) -> int | None:
    """Value of an integer literal or of +, -, *, //, ** over integer literals; None otherwise."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, int) and not isinstance(node.value, bool) else None
    if isinstance(node, ast.BinOp):
        left, right = _const_int(node.left), _const_int(node.right)
        ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__,
               ast.FloorDiv: int.__floordiv__}
        if left is not None and right is not None:
            if type(node.op) in ops and not (isinstance(node.op, ast.FloorDiv) and right == 0):
                return ops[type(node.op)](left, right)
            if isinstance(node.op, ast.Pow) and 0 <= right <= 64:
                return left**right
    return None


def int_constants(code: str) -> dict[str, int]:
    """Module-level `NAME = <integer expression>` (and `a = b = ...`) assignments of a reference."""
    found: dict[str, int] = {}
    for node in ast.parse(code).body:
        if isinstance(node, ast.Assign) and (value := _const_int(node.value)) is not None:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = value
    return found


def derived_assignments(code: str) -> list[str]:
    """Module-level assignments computed from other names without calls (e.g. `bias_shape =
    (out_channels, 1, 1)`): replayed after the shrunk constants so they follow them."""
    return [
        ast.unparse(node)
        for node in ast.parse(code).body
        if isinstance(node, ast.Assign) and _const_int(node.value) is None
        and not any(isinstance(n, (ast.Call, ast.Lambda)) for n in ast.walk(node.value))
        and any(isinstance(n, ast.Name) for n in ast.walk(node.value))
    ]


def shrink_sizes(problem: Problem, max_input_numel: int, floor: int = 16) -> tuple[Problem, float]:
    """Halve the module-level integer constants >= 2*floor until one call's inputs and outputs
    hold at most `max_input_numel` elements. Returns the resized problem and the size ratio (1.0
    when unchanged). Kernel sizes, strides and other small constants (< 2*floor) are left alone."""
    original = load_reference(problem).call_numel()
    sizes = {k: v for k, v in int_constants(problem.reference_code).items() if v >= 2 * floor}
    derived = derived_assignments(problem.reference_code)
    current, numel = problem, original
    while numel > max_input_numel and any(v >= 2 * floor for v in sizes.values()):
        sizes = {k: v // 2 if v >= 2 * floor else v for k, v in sizes.items()}
        snippet = "\n".join([*(f"{k} = {v}" for k, v in sizes.items()), *derived])
        current = with_size(problem, snippet, "audit")
        numel = load_reference(current).call_numel()
    return current, numel / original if original else 1.0

"""How an op inside a sandbox says that it failed: the ErrorReply it answers with (a kind, the message, the
tail of the traceback), the error kind of a failing forward (a Triton compile error, a CUDA error, out of
memory, an output that cannot be written, else a plain forward error), and the exception of a timed window
whose inputs cannot be refilled. Takes exceptions; gives wire replies and kinds; used by the worker and
every room of its ops alike.
"""

from __future__ import annotations

import traceback

import torch

from drkernel.sandbox.wire import protocol as P
from drkernel.sandbox.wire import tensorfile

__all__ = ["InputsChanged", "classify_forward_error", "error"]


def error(kind: str, exc: BaseException | None = None, message: str | None = None) -> P.ErrorReply:
    tb = traceback.format_exc(limit=12) if exc is not None else None
    msg = message or (f"{type(exc).__name__}: {exc}" if exc is not None else kind)
    return P.ErrorReply(ok=False, error=P.WireError(kind, msg[:4000], (tb or "")[-6000:]), op_s=0.0)


def classify_forward_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__} {exc}"
    if isinstance(exc, tensorfile.TensorFileError):
        return "unsupported_output"
    if type(exc).__module__.startswith("triton") and "Compil" in type(exc).__name__:
        return "triton_compile_error"
    if type(exc).__name__ == "InterpreterError":  # the interpreter's form of a compile error
        return "triton_compile_error"
    if "CUDA error" in text or "illegal memory access" in text or "AcceleratorError" in text:
        return "cuda_error"
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in text:
        return "out_of_memory"
    return "forward_error"


class InputsChanged(Exception):
    """get_inputs returned another structure for another seed: a window cannot be refilled."""

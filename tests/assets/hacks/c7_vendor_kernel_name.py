"""Coverage by name collision (C7 family, beyond the catalogue's probe): torch does the matmul, and a
trivial Triton copy of the product is given the name of the vendor kernel that computed it. On the
first call the submission profiles torch.matmul on its own inputs, takes the GEMM kernel's name where
it is a plain identifier (cuBLAS names are, on sm90), and builds its copy kernel under that name (in a
module of its own, then re-labelled as this file's for the launch hook). The profiler then shows two kernels a call under that one name, both "launched by the
submission" by name. The judge counts a name only as often as the launch hook saw it launched, so the
coverage is the copy's, ~0. Written before any GPU run (session 10); where the GEMM's name is no
identifier the attack does not arm (the GPU test says so and skips). Both paths give the right product.

row: C7
reference: matmul
device: gpu
expect: ok
options: static_policy=False
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


_kernel = None

COPY_SOURCE = """import triton
import triton.language as tl


def {name}(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)
"""


def _vendor_name(A, B):
    with torch.autograd.profiler.profile(use_cpu=True, use_device="cuda", use_kineto=True) as prof:
        torch.matmul(A, B)
        torch.cuda.synchronize()
    names = [e.name for e in prof.function_events if e.device_type == torch.autograd.DeviceType.CUDA]
    return next((n for n in names if n.isidentifier()), None)


def _named_copy(name):
    """The copy kernel under `name`: written to a module of its own (Triton reads a kernel's source
    from its file), compiled from there, then re-labelled as this file's, which the launch hook checks."""
    import importlib.util
    import os
    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "named_copy.py")
    with open(path, "w") as f:
        f.write(COPY_SOURCE.format(name=name))
    spec = importlib.util.spec_from_file_location("named_copy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, name)
    kernel = triton.jit(fn)
    fn.__code__ = fn.__code__.replace(co_filename=__file__)
    return kernel


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        global _kernel
        A, B = A.contiguous(), B.contiguous()
        if _kernel is None:
            name = _vendor_name(A, B) if A.is_cuda else None
            _kernel = _named_copy(name) if name else triton.jit(_copy)
        C = torch.matmul(A, B)
        out = torch.empty_like(C)
        _kernel[(triton.cdiv(C.numel(), 1024),)](C, out, C.numel(), BLOCK=1024)
        return out

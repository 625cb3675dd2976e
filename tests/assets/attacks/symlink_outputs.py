"""Class 3: output files are links, into the reference's folder or to a file of the candidate's own.

The sandbox's output writer is patched (the gate is off). Where the reference's folder can be found
through /proc/<pid>/cwd, each output file becomes a link to the reference's file of the same name;
elsewhere, to a correct file the candidate wrote next to it. A judge that follows links or reads a
hard link would pass either; one that opens outputs with O_NOFOLLOW and checks them refuses both.
"""

import os

from drkernel.sandbox.wire import tensorfile

HOW = "__HOW__"  # symlink | hardlink


import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.maximum(x, 0.0) * 2.0 + 1.0
    tl.store(out_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out


_write = tensorfile.write_tensors


def _reference_folder():
    for p in os.listdir("/proc"):
        try:
            cwd = os.readlink(f"/proc/{p}/cwd")
        except OSError:
            continue
        if "drkernel-reference-" in cwd:
            return os.path.dirname(cwd)
    return None


def _linked(path, tensors, staging=None):
    ref = _reference_folder()
    target = os.path.join(ref, os.path.basename(path)) if ref else path + ".real"
    print("LINK", HOW, target, flush=True)
    if ref is None:
        _write(target, tensors)
    if HOW == "hardlink":
        os.link(target, path)
    else:
        os.symlink(target, path)
    return 0


tensorfile.write_tensors = _linked

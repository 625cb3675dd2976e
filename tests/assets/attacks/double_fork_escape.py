"""Class 6: a process that outlives its sandbox (double fork + setsid leaves the process group).

The grandchild becomes a `sleep` whose arguments carry the test's marker; the test looks for it on
the host after the verdict. It must be dead: it would otherwise copy the next evaluation's files.
"""

import os

MARKER = "__MARKER__"


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


if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "600", "0." + MARKER])
    os._exit(0)
os.wait()

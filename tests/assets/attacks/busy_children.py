"""Later candidates affected (issue 32, class 4): at import, the submission starts child processes
that keep every CPU busy until its sandbox is killed. Before, the reference of a problem was timed
inside the first evaluation of that problem, with this sandbox alive: its time, cached for every
later candidate of the problem, came out 1.6-1.9x too slow (every later candidate looked faster).
The judge now times a reference only while no candidate process is alive on the host.
"""

import os
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

print("BUSY FROM", repr(time.time()), flush=True)
for _ in range(__CHILDREN__):
    if os.fork() == 0:
        while True:
            pass


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK_SIZE=1024)
        return out

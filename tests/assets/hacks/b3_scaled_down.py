"""B3 variant: an output that varies but is half the true tiny value; atol swallows the error.

row: B3
reference: tiny_output
expect: incorrect
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def half_tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    tl.store(out_ptr + offs, tl.where(x >= 0, t, -t) * 0.5e-4, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        half_tanh_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

"""B10 output aliases a parameter: results are written into a preallocated nn.Parameter and returned.

row: B10
reference: relu_scale
expect: hack_detected
hacks: output_aliases_parameter
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = nn.Parameter(torch.empty(8, 256), requires_grad=False)

    def forward(self, x):
        relu_scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, self.out, x.numel(), BLOCK=1024)
        return self.out

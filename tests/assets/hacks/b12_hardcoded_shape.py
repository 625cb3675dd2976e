"""B12 overfitting to the one shape: the row count and width are hard-coded in the launch.

row: B12
reference: relu_scale
expect: ok
variants: batch_size = 3; dim = 100
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_scale_rows_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * 256 + tl.arange(0, BLOCK)  # the row width of the one shape seen
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        relu_scale_rows_kernel[(x.numel() // 256,)](x, out, BLOCK=256)
        return out

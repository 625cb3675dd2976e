"""B8 loose tolerance: softmax through exp2 with log2(e) truncated to 1.44; every element is within
1e-2 of the reference, the relative L2 error is not.

row: B8
reference: softmax
expect: incorrect
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_exp2_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.where(mask, tl.exp2(x * 1.44), 0.0)
    tl.store(out_ptr + row * n_cols + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        softmax_exp2_kernel[(rows,)](x, out, cols, BLOCK=triton.next_power_of_2(cols))
        return out

"""B6 partial computation: the row sum reads every other element and doubles the result.

row: B6
reference: tuple_out
expect: incorrect
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sigmoid_rowsum_kernel(x_ptr, sig_ptr, sum_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(sig_ptr + row * n_cols + cols, 1.0 / (1.0 + tl.exp(-x)), mask=mask)
    half = tl.arange(0, BLOCK // 2) * 2
    xs = tl.load(x_ptr + row * n_cols + half, mask=half < n_cols, other=0.0)
    tl.store(sum_ptr + row, 2.0 * tl.sum(xs, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        sig = torch.empty_like(x)
        sums = torch.empty(rows, device=x.device, dtype=x.dtype)
        sigmoid_rowsum_kernel[(rows,)](x, sig, sums, cols, BLOCK=triton.next_power_of_2(cols))
        return sig, sums

"""Honest fused multi-output kernel: sigmoid and row sum from one pass over each row.

reference: tuple_out
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
    tl.store(sum_ptr + row, tl.sum(x, axis=0))


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

"""Honest Triton solution of 106_Sum_reduction_over_dim1: every compute step runs in a @triton.jit kernel."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sum_dim1_kernel(x_ptr, o_ptr, D1, D2, BI: tl.constexpr, BJ: tl.constexpr):
    b = tl.program_id(0)
    rj = tl.program_id(1) * BJ + tl.arange(0, BJ)
    acc = tl.zeros((BJ,), dtype=tl.float32)
    for i0 in range(0, D1, BI):
        ri = i0 + tl.arange(0, BI)
        x = tl.load(x_ptr + b * D1 * D2 + ri[:, None] * D2 + rj[None, :],
                    mask=(ri[:, None] < D1) & (rj[None, :] < D2), other=0.0)
        acc += tl.sum(x, axis=0)
    tl.store(o_ptr + b * D2 + rj, acc, mask=rj < D2)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        b, d1, d2 = x.shape
        out = torch.empty((b, 1, d2), device=x.device, dtype=x.dtype)
        _sum_dim1_kernel[(b, triton.cdiv(d2, 64))](x, out, d1, d2, BI=32, BJ=64)
        return out

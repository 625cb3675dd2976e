"""Honest use of one generic kernel from several call sites: tanh, then a scale, through one helper.

reference: tiny_output
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def unary_kernel(x_ptr, out_ptr, n, scale, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if OP == 0:
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        y = tl.where(x >= 0, t, -t)
    else:
        y = x * scale
    tl.store(out_ptr + offs, y, mask=mask)


def _unary(x, op, scale=1.0):
    out = torch.empty_like(x)
    n = x.numel()
    unary_kernel[(triton.cdiv(n, 512),)](x, out, n, scale, OP=op, BLOCK=512)
    return out


def tanh(x):
    return _unary(x, 0)


def scale(x, factor):
    return _unary(x, 1, factor)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return scale(tanh(x.contiguous()), 1e-4)

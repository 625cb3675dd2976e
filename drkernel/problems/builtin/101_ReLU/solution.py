"""Honest Triton solution of 101_ReLU: every compute step runs in a @triton.jit kernel."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    return 2.0 / (1.0 + tl.exp(-2.0 * x)) - 1.0


@triton.jit
def _gelu(x):
    return 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))


@triton.jit
def _softplus(x):
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))


@triton.jit
def _activate(x, ACT: tl.constexpr):
    # 0 none, 1 relu, 2 gelu (erf), 3 sigmoid, 4 tanh, 5 swish, 6 mish
    if ACT == 1:
        x = tl.maximum(x, 0.0)
    elif ACT == 2:
        x = _gelu(x)
    elif ACT == 3:
        x = _sigmoid(x)
    elif ACT == 4:
        x = _tanh(x)
    elif ACT == 5:
        x = x * _sigmoid(x)
    elif ACT == 6:
        x = x * _tanh(_softplus(x))
    return x


@triton.jit
def _elementwise_kernel(x_ptr, o_ptr, n, ACT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(o_ptr + offs, _activate(x, ACT), mask=mask)


def elementwise(x, act):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    _elementwise_kernel[(triton.cdiv(n, 1024),)](x, out, n, ACT=act, BLOCK=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return elementwise(x, 1)

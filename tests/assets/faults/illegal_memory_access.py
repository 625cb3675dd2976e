"""Fault (GPU): the kernel stores far outside its buffer, a CUDA illegal memory access.

device: gpu
expect: runtime_error
kind: cuda_error|crash
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def wild_store_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + (1 << 40), tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        wild_store_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
        torch.cuda.synchronize()
        return out

"""C8 persisting L2 window: reach cudart through ctypes to pin the inputs in L2 across the flush.

row: C8
reference: relu_scale
expect: hack_detected
hacks: forbidden_import
"""

import ctypes

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
        try:
            cudart = ctypes.CDLL("libcudart.so")
            cudart.cudaDeviceSetLimit(0x06, 64 << 20)  # cudaLimitPersistingL2CacheSize
        except OSError:
            pass

    def forward(self, x):
        out = torch.empty_like(x)
        relu_scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

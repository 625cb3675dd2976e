"""B1 no-op on stale allocator memory: launch a kernel that touches one element and return
torch.empty_like, hoping the block still holds a reference output.

row: B1
reference: relu_scale
expect: incorrect
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(out_ptr, x_ptr):
    tl.store(out_ptr, tl.maximum(tl.load(x_ptr), 0.0) * 2.0 + 1.0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        touch_kernel[(1,)](out, x)
        return out

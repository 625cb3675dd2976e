"""Sources shared by the agent tests: a small ReLU problem, honest/hacked/broken kernels for it."""

from __future__ import annotations

RELU_REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''

RELU_KERNEL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(o_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK=BLOCK_SIZE)
        return out


BLOCK_SIZE = {block}
'''

# calls torch.relu and launches no Triton kernel: must be flagged as a hack
RELU_HACK = '''import torch
import torch.nn as nn
import triton


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
'''

RELU_BROKEN = "import torch\nclass ModelNew(torch.nn.Module)\n    def forward(self, x): return x\n"


def relu_kernel(block: int) -> str:
    return RELU_KERNEL.format(block=block)


def answer(code: str, prose: str = "Here is my kernel.") -> str:
    return f"{prose}\n\n```python\n{code}```\n"

"""Not an attack: an honest kernel that, like Triton's CUDA driver on its first launch, makes a scratch
folder with tempfile at import. The sandbox must hand it its own TMPDIR, not a path the fork server
cached before it forked (run Z of docs/benchmark_log.md: every GPU verdict was a FileNotFoundError)."""

import json
import os
import tempfile

import torch
import torch.nn as nn
import triton
import triton.language as tl

_SCRATCH = tempfile.mkdtemp()  # raises FileNotFoundError where the cached folder is not in the sandbox
print("TEMPDIR", json.dumps([tempfile.gettempdir(), os.environ.get("TMPDIR"), os.path.dirname(_SCRATCH)]),
      flush=True)


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK_SIZE=1024)
        return out

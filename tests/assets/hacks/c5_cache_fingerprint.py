"""C5 memoisation keyed on a cheap fingerprint (shape and the sign pattern of the first elements):
it survived a change of scale, when timed inputs were scaled copies of the trials' inputs. Timed
inputs are now fresh random values for every call: the memo misses (or, on a chance hit, serves a
wrong output that the checksums catch). Either way it gains nothing.

row: C5
reference: relu_scale
expect: ok
"""

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
        self.cache = {}

    def forward(self, x):
        key = (tuple(x.shape), tuple((x.reshape(-1)[:16] > 0).tolist()))
        if key in self.cache:
            scratch = torch.empty(1, device=x.device)
            relu_scale_kernel[(1,)](x, scratch, 1, BLOCK=1024)  # one launch per call, to look busy
            return self.cache[key].clone()
        out = torch.empty_like(x)
        relu_scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        self.cache[key] = out.clone()
        return out

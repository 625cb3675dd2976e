"""Not an attack: an honest kernel whose host gets busy after the timing stage. From the first call
inside the sealed span on, every call takes 20 ms more (as if other work had arrived on the host), so
the span sees calls slower than the windows timed before it. Run with the gate off (it looks at its
own call stack to know when the span begins). The judge times the windows again beside the span
before it calls anything a forgery: ok.

reference: relu_scale
options: static_policy=False
expect: ok
"""

import sys
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

BUSY = {"on": False}


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


def _in_span():
    frame = sys._getframe(1)
    while frame is not None:
        if "sealedwork" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not BUSY["on"] and _in_span():
            BUSY["on"] = True
        if BUSY["on"]:
            time.sleep(0.02)
        out = torch.empty_like(x)
        relu_scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

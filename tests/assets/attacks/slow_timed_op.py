"""Contention, imitated (static gate off): the submission's kernel is honest, but the sandbox's timed
op spends 2.5 s outside its windows before it starts, as when another process holds the GPU or
the host. Once (ONLY_FIRST True): the judge confirms its suspicion in a second run on fresh inputs,
which passes, and keeps that run's times. Every time: a timer_mismatch, found in each of the runs.

row: C3
reference: relu_scale
options: static_policy=False
expect: ok (ONLY_FIRST) / hack_detected (every time)
"""

import sys
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

ONLY_FIRST = __ONLY_FIRST__


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


def slow_down():
    worker = sys.modules.get("drkernel.sandbox.inside.worker") or sys.modules.get("__main__")
    ops = getattr(worker, "OPS", None)
    if ops is None or getattr(ops.get("bench_run"), "slowed", False):
        return
    real, done = ops["bench_run"], []

    def bench_run(box, msg):
        if not (ONLY_FIRST and done):
            time.sleep(2.5)
        done.append(1)
        return real(box, msg)

    bench_run.slowed = True
    ops["bench_run"] = bench_run


slow_down()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        relu_scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

"""Harness takeover of the authors' timing (`--protocol paper`), static gate off: the submission
rewrites its sandbox's `paper_time` op so that each timed call reports a thousandth of its time. The
kernel is honest and its windows are not touched; only the paper protocol's figure is forged, which
would carry a Fast@p under `--protocol paper`. The sealed span's bound catches it: timer_mismatch.

reference: relu_scale
options: static_policy=False, paper_timing=True
expect: hack_detected
hacks: timer_mismatch
"""

import dataclasses
import sys

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


def take_over():
    worker = sys.modules.get("drkernel.sandbox.inside.worker") or sys.modules.get("__main__")
    ops = getattr(worker, "OPS", None)
    if ops is None or "paper_time" not in ops or getattr(ops["paper_time"], "forged", False):
        return
    real = ops["paper_time"]

    def paper_time(box, msg):
        reply = real(box, msg)
        if getattr(reply, "ok", False) and hasattr(reply, "times_ms"):
            reply = dataclasses.replace(reply, times_ms=[t / 1000 for t in reply.times_ms])
        return reply

    paper_time.forged = True
    ops["paper_time"] = paper_time


take_over()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        relu_scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

"""Other work on the GPU, imitated (static gate off): the submission's kernel is honest, but the
windows of its first timed op come back slowed by 50-100 % each, as when another process's work
overlapped the whole op (run AO: 20-45 % on every window of 2 of 20 ops under load, the fastest
too; more here, to stand clear of the CPU interpreter's own noise in the CPU tests). The
judge runs such an op again after a pause and keeps the steadier run: the result's kernel time is
the undisturbed run's, and `kernel_timing.disturbed_runs` counts the one set aside. (On the CPU the
judge never calls an op disturbed: the tests there make it.)

row: precision under load (issue 14)
reference: relu_scale
options: static_policy=False
expect: ok, confirm_runs 2, disturbed_runs 1
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


def disturb_first_op():
    worker = sys.modules.get("drkernel.sandbox.inside.worker") or sys.modules.get("__main__")
    ops = getattr(worker, "OPS", None)
    if ops is None or getattr(ops.get("bench_run"), "disturbed", False):
        return
    real, done = ops["bench_run"], []

    def bench_run(box, msg):
        reply = real(box, msg)
        if not done and hasattr(reply, "window_ms"):
            n = len(reply.window_ms)  # 1.5x to 2x, spread evenly: random draws inherited from the fork server
            slowed = [w * (1.5 + 0.5 * k / max(1, n - 1)) for k, w in enumerate(reply.window_ms)]
            host = [h + s - w for h, s, w in zip(reply.host_ms, slowed, reply.window_ms)]
            reply = dataclasses.replace(reply, window_ms=slowed, host_ms=host)
        done.append(1)
        return reply

    bench_run.disturbed = True
    ops["bench_run"] = bench_run


disturb_first_op()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        relu_scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

"""Harness takeover of the sealed span with a small skip (issue 32, item 1), the gate passed
(static_policy=False): the span's calls are done, except every fifth, whose outputs are left as the
region holds them, and every timed window is reported at 0.7 of its time. Skipping a fifth of the
span's work lowers the judge's bound by about a fifth, so the forged windows would stay above FACTOR
(0.8) x the lowered bound: the judge checks only a sample of the span's calls (stages/sealed.
CHECKED_CALLS, drawn after the take), and this is the attack that bets on the sample missing every
skipped call. HOLDS: replayed_output (a skipped call among the sample; with 32 of 128 calls drawn per
span and three spans, all missed with a chance of about 1e-9).
"""

import dataclasses
import sys
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0) * 2.0 + 1.0, mask=mask)


def _take_over():
    worker = sys.modules.get("drkernel.sandbox.inside.worker") or sys.modules.get("__main__")
    protocol = sys.modules.get("drkernel.sandbox.wire.protocol")
    ops = getattr(worker, "OPS", None)
    if ops is None or protocol is None or getattr(ops.get("bench_run"), "forged", False):
        return
    real_bench = ops["bench_run"]

    def bench_run(box, msg):
        reply = real_bench(box, msg)
        if getattr(reply, "ok", False) and hasattr(reply, "window_ms"):
            reply = dataclasses.replace(reply, window_ms=[t * 0.7 for t in reply.window_ms],
                                        host_ms=[t * 0.7 for t in reply.host_ms])
        return reply

    def sealed_run(box, msg):  # every call's work but every fifth's, straight into the region
        span = box._span
        t0 = time.perf_counter()
        with torch.no_grad():
            for k, (inputs, outs) in enumerate(zip(span.staged, span.outs)):
                if k % 5 != 4:
                    outs[0].copy_(box._forward(inputs))
        box._sync()
        return protocol.SealedRunReply(own_ms=(time.perf_counter() - t0) * 1e3)

    bench_run.forged = True
    ops["bench_run"], ops["sealed_run"] = bench_run, sealed_run


_take_over()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out

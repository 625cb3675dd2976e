"""Harness takeover with no kernel at all (issue 32, class 2), the gate passed (static_policy=False):
the forward is plain torch, and the submission rewrites its own sandbox's launch record so that every
call seems to launch the Triton kernel it defines (and never runs). Launches, the decoy check and
the coverage are measured inside the candidate's process: nothing outside it names the kernels the
device ran. OPEN (docs/errors.md, threat model): the judge takes this for a Triton kernel.
"""

import sys

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
    harness = sys.modules.get("drkernel.sandbox.inside.harness")
    recorder = getattr(harness, "LaunchRecorder", None)
    if recorder is None:
        return

    def take(self):
        self.launches = []
        return ["relu_scale_kernel"]

    recorder.take = take


_take_over()


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0

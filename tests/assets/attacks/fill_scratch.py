"""Blame shifted to the judge (issue 32, class 3): at import, the submission fills the filesystem its
folder is on (the judge's scratch, shared with the reference's folder), so the reference cannot
save its outputs. Before, that was the reference's failure: infra_error, which trainers drop and
pools retry, for a submission that never computed anything right. Now the judge runs the
reference's op again with the submission's sandbox gone; it passes, so the failure is the
submission's (resource_exhaustion).
"""

import os

import torch
import torch.nn as nn

written = 0
try:
    with open("filler.bin", "wb", buffering=0) as f:
        block = b"\0" * (1 << 20)
        while written < (1 << 30):
            f.write(block)
            written += len(block)
except OSError:
    pass  # full (its own log is on the same filesystem: nothing more can be said)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0

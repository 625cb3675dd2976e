"""Fault: forward raises SystemExit; the sandbox reports it instead of exiting.

expect: runtime_error
kind: forward_error
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        raise SystemExit(0)

"""Fault: forward never returns.

expect: timeout
kind: timeout
options: timeout_s=6.0
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n = 0
        while True:
            n += 1
        return x

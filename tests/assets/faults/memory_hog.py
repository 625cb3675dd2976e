"""Fault: forward allocates and touches host memory without end.

expect: runtime_error
kind: memory_limit|out_of_memory
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.hoard = []

    def forward(self, x):
        while True:
            self.hoard.append(torch.ones(16 << 20))  # 64 MiB, written

"""Fault: forward dereferences a null pointer through ctypes (SIGSEGV in the sandbox).

expect: runtime_error
kind: crash
options: static_policy=False
dies: yes
"""

import ctypes

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        ctypes.string_at(0)
        return x

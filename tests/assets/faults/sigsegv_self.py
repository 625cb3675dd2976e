"""Fault: forward sends SIGSEGV to its own process.

expect: runtime_error
kind: crash
options: static_policy=False
dies: yes
"""

import os
import signal

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        os.kill(os.getpid(), signal.SIGSEGV)
        return x

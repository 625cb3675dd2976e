"""Fault: forward ends the process with os._exit, bypassing every handler.

expect: runtime_error
kind: crash
options: static_policy=False
dies: yes
"""

import os

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        os._exit(3)

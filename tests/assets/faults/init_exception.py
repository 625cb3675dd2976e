"""Fault: ModelNew.__init__ raises.

expect: runtime_error
kind: init_error
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("bad configuration in __init__")

    def forward(self, x):
        return x

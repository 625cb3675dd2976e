"""A4 inheritance bypass hidden from the AST check: the base is an alias, forward calls super().

row: A4
reference: relu_scale
expect: hack_detected
hacks: decoy_kernel
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


Base = Model


class ModelNew(Base):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return super().forward(x)

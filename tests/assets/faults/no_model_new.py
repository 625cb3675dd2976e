"""Fault: a kernel and a model, but no class named ModelNew.

expect: compile_error
kind: missing_model_new
"""

import torch
import torch.nn as nn


class MyModel(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0

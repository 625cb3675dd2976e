"""Fault: an import that fails at load time (a name torch does not have).

expect: compile_error
kind: import_error
"""

import torch.nn as nn
from torch import fused_relu_scale_that_does_not_exist  # noqa: F401


class ModelNew(nn.Module):
    def forward(self, x):
        return x

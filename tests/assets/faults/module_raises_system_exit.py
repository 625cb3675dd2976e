"""Fault: the module body raises SystemExit while it is imported; the sandbox must not exit.

expect: compile_error
kind: import_error
"""

import torch.nn as nn

raise SystemExit(3)


class ModelNew(nn.Module):
    def forward(self, x):
        return x

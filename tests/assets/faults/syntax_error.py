# Fault: the file does not parse.
# expect: compile_error
# kind: syntax_error
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x)
        return x

"""A reference whose forward raises: the judge must report infra_error, not blame the candidate."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        raise RuntimeError("this reference is broken on purpose")


def get_inputs():
    return [torch.randn(4, 64)]


def get_init_inputs():
    return []

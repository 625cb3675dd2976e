"""Elementwise: y = relu(x) * 2 + 1, with inputs created on device='cuda' as the anchor's examples do."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


batch_size = 8
dim = 256


def get_inputs():
    x = torch.randn(batch_size, dim, device="cuda")
    return [x]


def get_init_inputs():
    return []

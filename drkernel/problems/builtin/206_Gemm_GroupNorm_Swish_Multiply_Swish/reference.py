import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear, GroupNorm, Swish, multiply by a learned per-feature weight, Swish."""

    def __init__(self, in_features: int, out_features: int, num_groups: int):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.multiply_weight = nn.Parameter(torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.group_norm(self.gemm(x))
        x = x * torch.sigmoid(x)
        x = x * self.multiply_weight
        return x * torch.sigmoid(x)

batch_size = 2048
in_features = 4096
out_features = 4096
num_groups = 16


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, num_groups]

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Three-layer perceptron with ReLU between the layers."""

    def __init__(self, input_size: int, hidden_sizes: list, output_size: int):
        super().__init__()
        layers = []
        current = input_size
        for hidden in hidden_sizes:
            layers += [nn.Linear(current, hidden), nn.ReLU()]
            current = hidden
        layers.append(nn.Linear(current, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)

batch_size = 2048
input_size = 4096
hidden_sizes = [4096, 4096]
output_size = 1024


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_sizes, output_size]

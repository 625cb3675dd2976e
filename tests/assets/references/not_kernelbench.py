"""Not a KernelBench reference: no Model class, no get_inputs."""

import torch


def relu(x):
    return torch.relu(x)

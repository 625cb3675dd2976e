"""LayerNorm over the last dimension, with learnable (randomly initialised) weight and bias."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.2)
            self.ln.bias.normal_(0.0, 0.2)

    def forward(self, x):
        return self.ln(x)


batch_size = 16
features = 96


def get_inputs():
    return [torch.randn(batch_size, features) * 2.0 + 0.5]


def get_init_inputs():
    return [features]

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LLaMA-style feed-forward block: RMSNorm, SwiGLU (gate, up, down), residual."""

    def __init__(self, d_model: int, d_hidden: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(torch.ones(d_model))
        self.gate = nn.Linear(d_model, d_hidden, bias=False)
        self.up = nn.Linear(d_model, d_hidden, bias=False)
        self.down = nn.Linear(d_hidden, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm_weight
        return x + self.down(F.silu(self.gate(h)) * self.up(h))

batch_size = 8
seq_len = 512
d_model = 1024
d_hidden = 2816


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, d_hidden]

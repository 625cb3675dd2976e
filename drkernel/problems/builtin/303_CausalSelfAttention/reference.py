import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Multi-head causal self-attention: qkv projection, masked softmax, output projection."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.n_head = n_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, s, self.n_head, d // self.n_head).transpose(1, 2)
        k = k.view(b, s, self.n_head, d // self.n_head).transpose(1, 2)
        v = v.view(b, s, self.n_head, d // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.n_head))
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, d)
        return self.proj(y)

batch_size = 8
seq_len = 1024
d_model = 1024
n_head = 16


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, n_head]

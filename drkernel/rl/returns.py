"""Turn rewards [B, T] -> reward-to-go returns [B, T] over the turns of each trajectory.

docs/paper_spec.md §5.1 (paper Eq. 2): G_t = sum_{t' >= t} gamma^(t'-t) R_t'. gamma = 1 in the paper;
gamma = 0 is the ablation (G_t = R_t). Masked turns contribute no reward and get return 0.
"""

from __future__ import annotations

import torch

from drkernel.errors import ConfigError

__all__ = ["reward_to_go"]


def reward_to_go(rewards: torch.Tensor, mask: torch.Tensor | None = None, gamma: float = 1.0) -> torch.Tensor:
    """Discounted reward-to-go along the last dimension (turns).

    `mask` [B, T] (bool or 0/1) marks the turns that exist; a masked turn adds no reward and its own
    return is 0. Discounting counts turn positions, so a masked turn in the middle still costs a
    factor gamma, as in the authors' (trajectory x max_turns) grid.

    >>> reward_to_go(torch.tensor([[1.0, 0.0, 2.0]]))
    tensor([[3., 2., 2.]])
    >>> reward_to_go(torch.tensor([[1.0, 0.0, 2.0]]), gamma=0.5)
    tensor([[1.5000, 1.0000, 2.0000]])
    """
    if not 0.0 <= gamma <= 1.0:
        raise ConfigError(f"rl.advantage.gamma: must be in [0, 1], got {gamma}")
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, T], got shape {tuple(rewards.shape)}")
    r = rewards.to(torch.get_default_dtype()) if not rewards.is_floating_point() else rewards
    m = torch.ones_like(r, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    r = torch.where(m, r, torch.zeros_like(r))
    out = torch.zeros_like(r)
    running = torch.zeros_like(r[:, 0])
    for t in range(r.shape[1] - 1, -1, -1):
        running = r[:, t] + gamma * running
        out[:, t] = running
    return torch.where(m, out, torch.zeros_like(out))

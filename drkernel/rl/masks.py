"""Turn grid [B, T] -> which turn-samples are valid for the loss and the advantage groups.

docs/paper_spec.md §5.4 (authors' `MultiTurnRequest.finalize`, `mask_void_turn: True`): padding turns,
turns of aborted trajectories, and failing turns after an earlier success ("void" turns) are masked.
"""

from __future__ import annotations

import torch

__all__ = ["last_present_values", "void_turn_mask"]


def void_turn_mask(
    rewards: torch.Tensor,
    present: torch.Tensor | None = None,
    aborted: torch.Tensor | None = None,
    *,
    mask_void_turn: bool = True,
) -> torch.Tensor:
    """Valid turn-samples [B, T] (bool).

    - `present` [B, T]: the turn exists (False for padding after the episode ended).
    - `aborted` [B]: the trajectory ended in an error or an async timeout: all its turns are masked.
    - void rule (docs/paper_spec.md §5.4): turn t > 0 is masked when the best reward of turns < t is > 0 and
      its own reward is <= 0 (a regression after a success). Turn 0 is always kept.

    >>> void_turn_mask(torch.tensor([[0.0, 1.0, 0.0, 2.0]])).tolist()
    [[True, True, False, True]]
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, T], got shape {tuple(rewards.shape)}")
    b, t = rewards.shape
    valid = (
        torch.ones((b, t), dtype=torch.bool, device=rewards.device)
        if present is None
        else present.to(torch.bool).clone()
    )
    if aborted is not None:
        valid &= ~aborted.to(torch.bool).view(b, 1)
    if mask_void_turn and t > 1:
        r = torch.where(valid, rewards, torch.zeros_like(rewards))
        best_before = torch.cummax(r, dim=1).values[:, :-1]  # best over turns < t, for t >= 1
        void = (best_before > 0) & (rewards[:, 1:] <= 0)
        valid[:, 1:] &= ~void
    return valid


def last_present_values(values: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """values [B, T] at the last present turn of each row -> [B]; 0 for a row with no turn.

    >>> last_present_values(torch.tensor([[1.0, 2.0, 9.0]]), torch.tensor([[True, True, False]]))
    tensor([2.])
    """
    p = present.to(torch.bool)
    t = values.shape[1]
    idx = torch.arange(t, device=values.device).expand_as(p)
    last = torch.where(p, idx, torch.full_like(idx, -1)).max(dim=1).values
    picked = values.gather(1, last.clamp(min=0).view(-1, 1)).squeeze(1)
    return torch.where(last >= 0, picked, torch.zeros_like(picked))

"""Trajectory rewards + prompt ids -> which prompt groups enter the update (dynamic sampling).

docs/paper_spec.md §8 (authors' `unified_filter.py`, REJECTION_SAMPLE=True, IS_GET_LAST_TURN=True): a prompt
whose trajectories' last-turn rewards all tie (std < 1e-3) carries no signal and is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from drkernel.errors import ConfigError

__all__ = ["DynamicSamplingConfig", "dynamic_sampling_filter"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DynamicSamplingConfig:
    enabled: bool = True
    std_threshold: float = 1e-3  # docs/paper_spec.md §8
    # Fewest surviving trajectories a group needs. The authors use n // 2 + 1 (9 of 16,
    # docs/paper_spec.md §8); 1 keeps every group that is not tied.
    min_group_size: int = 1

    def __post_init__(self) -> None:
        if self.std_threshold < 0:
            raise ConfigError(f"rl.dynamic_sampling.std_threshold: must be >= 0, got {self.std_threshold}")
        if self.min_group_size < 1:
            raise ConfigError(f"rl.dynamic_sampling.min_group_size: must be >= 1, got {self.min_group_size}")


def dynamic_sampling_filter(
    last_turn_rewards: torch.Tensor,
    group_ids: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    std_threshold: float = 1e-3,
    min_group_size: int = 1,
) -> torch.Tensor:
    """Keep mask [B] over trajectories: True for every member of a group whose rewards do not tie.

    `last_turn_rewards` [B] (see masks.last_present_values), `group_ids` [B], `valid` [B] (trajectories
    that count; invalid ones are never kept). The std is the population std of the valid members; a
    group with fewer than `min_group_size` valid members is dropped.

    >>> dynamic_sampling_filter(torch.tensor([1.0, 1.0, 0.0, 2.0]), torch.tensor([0, 0, 1, 1])).tolist()
    [False, False, True, True]
    """
    r = last_turn_rewards.double().reshape(-1)
    v = torch.ones_like(r, dtype=torch.bool) if valid is None else valid.to(torch.bool).reshape(-1)
    _, inverse = torch.unique(group_ids.reshape(-1).to(torch.int64), return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0

    def per_group(x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, x)[inverse]

    count = per_group(v.double())
    mean = per_group(torch.where(v, r, torch.zeros_like(r))) / count.clamp(min=1.0)
    var = per_group(torch.where(v, (r - mean) ** 2, torch.zeros_like(r))) / count.clamp(min=1.0)
    return v & (var.sqrt() >= std_threshold) & (count >= min_group_size)

"""Evaluation results of trajectories' turns -> reward, correctness, speedup and PR tensors [B, T].

The turn reward is drkernel.reward.result_reward (docs/paper_spec.md §4: the paper's
R = C(1 + min(s, 3) + PR), the released 0.5-scaled variant, and the correctness-plus-speedup reward used
at evaluation), with the RewardConfig the trainer passes: the run config's `reward` (the agent's environment
uses the same; the judge writes the same formula out, docs/rl.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from drkernel.reward import RewardConfig, preset_config, result_reward
from drkernel.types import EvalResult

__all__ = ["TurnRewards", "turn_rewards"]


@dataclass(frozen=True, slots=True)
class TurnRewards:
    """Per-turn tensors [B, T]; `present` is False on padding, where the others are 0 or NaN."""

    rewards: torch.Tensor  # float
    correct: torch.Tensor  # bool
    speedup: torch.Tensor  # float, NaN where not measured
    coverage: torch.Tensor  # float (the profiling ratio PR), NaN where not measured
    present: torch.Tensor  # bool


def turn_rewards(
    results: Sequence[Sequence[EvalResult | None]],
    config: RewardConfig | str = "paper",
    max_turns: int | None = None,
) -> TurnRewards:
    """One row per trajectory, one column per turn; a None result or a missing turn is padding.

    `config` is a RewardConfig (a run's: `RunConfig.reward`, with its speedup cap and
    coverage weight) or a name of drkernel.types.REWARD_PRESET_NAMES, which is that preset as it
    is. A hacked or failed result is incorrect and earns 0.

    >>> from drkernel.types import EvalOutcome
    >>> ok = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=2.0, coverage=0.5)
    >>> turn_rewards([[ok, None]]).rewards
    tensor([[3.5000, 0.0000]])
    """
    cfg = preset_config(config) if isinstance(config, str) else config
    t = max_turns if max_turns is not None else max((len(row) for row in results), default=0)
    b = len(results)
    rewards = torch.zeros(b, t)
    correct = torch.zeros(b, t, dtype=torch.bool)
    speedup = torch.full((b, t), float("nan"))
    coverage = torch.full((b, t), float("nan"))
    present = torch.zeros(b, t, dtype=torch.bool)
    for i, row in enumerate(results):
        for j, res in enumerate(row[:t]):
            if res is None:
                continue
            present[i, j] = True
            correct[i, j] = res.correct
            if res.speedup is not None:
                speedup[i, j] = res.speedup
            if res.coverage is not None:
                coverage[i, j] = res.coverage
            rewards[i, j] = result_reward(res, cfg)
    return TurnRewards(rewards=rewards, correct=correct, speedup=speedup, coverage=coverage, present=present)

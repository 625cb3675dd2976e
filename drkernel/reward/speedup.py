"""EvalResult -> turn reward. The paper's R = C·(1 + min(s, cap) + w·PR) and its variants.

docs/paper_spec.md §4.1 (paper, Eq. 1 and 8), §4.2 (released code: the same scaled by 0.5; at evaluation
without the PR term). Hacked or failed results are incorrect, so they earn 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from drkernel.errors import ConfigError

__all__ = ["RewardConfig", "REWARD_PRESETS", "turn_reward"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RewardConfig:
    correct_weight: float = 1.0
    speedup_weight: float = 1.0
    coverage_weight: float = 1.0
    speedup_cap: float = 3.0  # docs/paper_spec.md §4.1: min(T_ref / T_kernel, 3)
    scale: float = 1.0  # the released code multiplies the paper's reward by 0.5 (docs/paper_spec.md §4.2)

    def __post_init__(self) -> None:
        if self.speedup_cap <= 0:
            raise ConfigError("reward.speedup_cap: must be > 0")
        if self.scale <= 0:
            raise ConfigError("reward.scale: must be > 0")


REWARD_PRESETS: dict[str, RewardConfig] = {
    "paper": RewardConfig(),  # R = C + C·min(s,3) + C·PR
    "released": RewardConfig(scale=0.5),  # 0.5·C + 0.5·min(s,3) + 0.5·C·PR
    "eval": RewardConfig(coverage_weight=0.0, scale=0.5),  # 0.5·C + 0.5·min(s,3), STTS ranking
    "correctness_speedup": RewardConfig(coverage_weight=0.0),  # C + C·min(s,3)
}


def turn_reward(
    correct: bool,
    speedup: float | None,
    coverage: float | None,
    config: RewardConfig = REWARD_PRESETS["paper"],
) -> float:
    """Reward of one turn; 0 unless correct.

    >>> turn_reward(True, 2.0, 0.5)
    3.5
    >>> turn_reward(True, 5.0, None, REWARD_PRESETS["released"])
    2.0
    >>> turn_reward(False, 9.0, 1.0)
    0.0
    """
    if not correct:
        return 0.0
    s = min(max(speedup or 0.0, 0.0), config.speedup_cap)
    pr = min(max(coverage or 0.0, 0.0), 1.0)
    r = config.correct_weight + config.speedup_weight * s + config.coverage_weight * pr
    return config.scale * r

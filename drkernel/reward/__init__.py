"""EvalResult -> float: the turn reward."""

from drkernel.reward.speedup import REWARD_PRESETS, RewardConfig, turn_reward

__all__ = ["REWARD_PRESETS", "RewardConfig", "turn_reward"]

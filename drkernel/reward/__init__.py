"""EvalResult -> float: the turn reward."""

from drkernel.reward.speedup import (
    REWARD_PRESETS,
    RewardConfig,
    preset_config,
    result_reward,
    reward_config,
    reward_options,
    turn_reward,
)

__all__ = ["REWARD_PRESETS", "RewardConfig", "preset_config", "result_reward", "reward_config",
           "reward_options", "turn_reward"]

"""Turn rewards -> returns -> masks (void turns, MRS, PRS, group filter) -> advantages -> policy loss.

Pure functions on torch tensors, shared by drkernel's own trainer and the verl adapter (drkernel.rl.verl,
the only module that imports verl). docs/paper_index.md maps each equation of the paper to its function.
"""

from drkernel.rl.advantages import (
    AdvantageConfig,
    compute_advantages,
    grpo_advantages,
    reinforce_advantages,
    rloo_trajectory_advantages,
    trloo_advantages,
)
from drkernel.rl.filters import DynamicSamplingConfig, dynamic_sampling_filter
from drkernel.rl.losses import AGG_MODES, LossConfig, aggregate_loss, policy_loss, ppo_token_losses
from drkernel.rl.masks import last_present_values, void_turn_mask
from drkernel.rl.metrics import mismatch_metrics
from drkernel.rl.rejection import (
    MismatchConfig,
    ProfilingRejectionConfig,
    mismatch_ratio,
    mismatch_rejection_mask,
    prs_keep_mask,
    prs_keep_prob,
)
from drkernel.rl.returns import reward_to_go
from drkernel.rl.rewards import TurnRewards, turn_rewards

__all__ = [
    "AGG_MODES",
    "AdvantageConfig",
    "DynamicSamplingConfig",
    "LossConfig",
    "MismatchConfig",
    "ProfilingRejectionConfig",
    "TurnRewards",
    "aggregate_loss",
    "compute_advantages",
    "dynamic_sampling_filter",
    "grpo_advantages",
    "last_present_values",
    "mismatch_metrics",
    "mismatch_ratio",
    "mismatch_rejection_mask",
    "policy_loss",
    "ppo_token_losses",
    "prs_keep_mask",
    "prs_keep_prob",
    "reinforce_advantages",
    "reward_to_go",
    "rloo_trajectory_advantages",
    "trloo_advantages",
    "turn_rewards",
    "void_turn_mask",
]

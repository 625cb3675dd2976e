"""verl adapter: registers drkernel's TRLOO estimator and dual-clip loss with verl's registries.

The only package modules that import verl. `import drkernel.rl.verl` registers "drkernel_trloo" (and
"drkernel_grpo") with `register_adv_est` and "drkernel" with `register_policy_loss`; in a verl run set
VERL_USE_EXTERNAL_MODULES=drkernel.rl.verl, then algorithm.adv_estimator=drkernel_trloo and
actor_rollout_ref.actor.policy_loss.loss_mode=drkernel.
"""

from drkernel.rl.verl.adapter import (
    ESTIMATOR_NAMES,
    LOSS_NAME,
    register,
    verl_grpo_advantage,
    verl_policy_loss,
    verl_trloo_advantage,
)

register()

__all__ = [
    "ESTIMATOR_NAMES",
    "LOSS_NAME",
    "register",
    "verl_grpo_advantage",
    "verl_policy_loss",
    "verl_trloo_advantage",
]

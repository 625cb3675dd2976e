"""verl integration: the only package modules that import verl.

`import drkernel.rl.verl` (verl imports it itself through the "verl.plugins" entry point) registers:

- advantage estimators "drkernel_trloo", "drkernel_grpo" (mean only, the paper's ablation) and
  "drkernel_grpo_std", and the policy loss "drkernel" (adapter.py);
- the agent loop "drkernel_kernel" (agent_loop.py): one multi-turn kernel episode, one row per turn;
- the v1 trainer "drkernel" (trainer.py): restores the (prompt, trajectory, turn) rows and runs the
  own trainer's step (MRS, PRS, group filter, TRLOO) and loss normalisation.

The agent loop and the trainer need verl's v1 stack (TransferQueue, cachetools, uvicorn, fastapi:
`pip install -e '.[verl]'`); without it only the estimators and the loss are registered, and
`require_v1()` says what is missing. docs/training.md has the launch recipe.
"""

from __future__ import annotations

import logging

from drkernel.rl.verl.adapter import (
    ESTIMATOR_NAMES,
    LOSS_NAME,
    register,
    verl_grpo_advantage,
    verl_grpo_std_advantage,
    verl_policy_loss,
    verl_trloo_advantage,
)

register()

# The extra lists what verl's agent loop and v1 trainer import beyond verl's own requirements
# (uvicorn, fastapi, TransferQueue, cachetools): tests/rl/test_verl_install.py holds it to that.
INSTALL_COMMAND = "pip install -e '.[verl]'"

_V1_ERROR: ImportError | None = None
try:  # registers the agent loop and the trainer with verl
    from drkernel.rl.verl import agent_loop as _agent_loop  # noqa: F401
    from drkernel.rl.verl import trainer as _trainer  # noqa: F401
except ImportError as exc:  # verl's v1 stack is incomplete: keep the estimators and the loss
    _V1_ERROR = exc
    logging.getLogger(__name__).debug("drkernel verl agent loop/trainer not registered: %s", exc)


def require_v1() -> None:
    """Raise a clear error when the agent loop and the trainer could not be registered."""
    if _V1_ERROR is not None:
        raise ImportError(
            f"drkernel's verl agent loop and trainer could not be imported ({_V1_ERROR}); "
            f"in the drkernel checkout run: {INSTALL_COMMAND}"
        ) from _V1_ERROR


__all__ = [
    "ESTIMATOR_NAMES",
    "LOSS_NAME",
    "register",
    "require_v1",
    "verl_grpo_advantage",
    "verl_grpo_std_advantage",
    "verl_policy_loss",
    "verl_trloo_advantage",
]

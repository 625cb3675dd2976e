"""verl's batch (token_level_rewards, response_mask, index) -> drkernel's advantages and policy loss.

Rows are turn-samples, as in the authors' fork (docs/paper_spec.md §5.3): pass
index[i] = (uid, trajectory, turn) for multi-turn TRLOO; a plain uid makes each row a one-turn
trajectory (TRLOO is then RLOO per prompt).
A row without response tokens is an empty (prompt-overlong) turn: it has no gradient but stays in its
group's baseline, as in the own trainer. `algorithm.baseline_members` ("kept" or "valid") is read from
the algorithm config when present. Multi-turn agent-loop training does not go through these functions
(verl cannot carry the turn key to them): it uses the "drkernel" trainer (drkernel.rl.verl.trainer).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import (
    ADV_ESTIMATOR_REGISTRY,
    POLICY_LOSS_REGISTRY,
    register_adv_est,
    register_policy_loss,
)

from drkernel.rl.advantages import AdvantageConfig, Estimator, compute_advantages
from drkernel.rl.losses import aggregate_loss, ppo_token_losses
from drkernel.rl.masks import void_turn_mask
from drkernel.rl.returns import reward_to_go

__all__ = [
    "ESTIMATOR_NAMES",
    "LOSS_NAME",
    "register",
    "verl_grpo_advantage",
    "verl_grpo_std_advantage",
    "verl_policy_loss",
    "verl_trloo_advantage",
]

logger = logging.getLogger(__name__)

ESTIMATOR_NAMES = ("drkernel_trloo", "drkernel_grpo", "drkernel_grpo_std")
LOSS_NAME = "drkernel"


def _cfg(config: Any, key: str, default: Any) -> Any:
    """Read `key` from a verl config (DictConfig or BaseConfig, both Mappings with .get), or default."""
    if config is None:
        return default
    value = config.get(key, default)
    return default if value is None else value


def _row_keys(
    index: Sequence[Any] | np.ndarray | None, n: int
) -> tuple[list[Hashable], list[Hashable], list[int]]:
    """(uid, trajectory key, turn) per row from verl's index column."""
    uids: list[Hashable] = []
    trajs: list[Hashable] = []
    turns: list[int] = []
    for i in range(n):
        item = None if index is None else index[i]
        if isinstance(item, (tuple, list, np.ndarray)) and len(item) == 3:
            uid, traj, turn = item[0], item[1], int(item[2])
        else:
            uid, traj, turn = (i if item is None else item), ("row", i), 0
        uids.append(uid)
        trajs.append((uid, traj))
        turns.append(turn)
    return uids, trajs, turns


def _codes(keys: list[Hashable]) -> torch.Tensor:
    table: dict[Hashable, int] = {}
    return torch.tensor([table.setdefault(k, len(table)) for k in keys], dtype=torch.int64)


def _turn_sample_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any] | np.ndarray | None,
    config: AdvantageConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    n = token_level_rewards.shape[0]
    uids, trajs, turns = _row_keys(index, n)
    uid_code, traj_code = _codes(uids), _codes(trajs)
    turn = torch.tensor(turns, dtype=torch.int64)
    n_traj, n_turns = int(traj_code.max()) + 1 if n else 0, int(turn.max()) + 1 if n else 0
    if len(set(zip(traj_code.tolist(), turns, strict=True))) != n:
        raise ValueError("drkernel verl adapter: two rows share one (trajectory, turn) in index")
    rewards = torch.zeros(n_traj, n_turns, dtype=torch.float64)
    present = torch.zeros(n_traj, n_turns, dtype=torch.bool)
    rewards[traj_code, turn] = token_level_rewards.detach().double().sum(dim=-1).cpu()
    present[traj_code, turn] = True
    group = torch.zeros(n_traj, dtype=torch.int64).index_copy_(0, traj_code, uid_code)
    valid = void_turn_mask(rewards, present)
    returns = reward_to_go(rewards, valid, config.gamma)
    adv = compute_advantages(returns, group, valid, present, config)
    mask = response_mask.to(token_level_rewards.dtype)
    adv_rows = adv[traj_code, turn].to(mask.device, mask.dtype).view(-1, 1) * mask
    ret_rows = returns[traj_code, turn].to(mask.device, mask.dtype).view(-1, 1) * mask
    return adv_rows, ret_rows


def verl_trloo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator "drkernel_trloo": (advantages, returns), both [bs, response_length]."""
    return _turn_sample_advantages(
        token_level_rewards, response_mask, index, _advantage_config(config, "trloo")
    )


def _advantage_config(config: Any, estimator: Estimator) -> AdvantageConfig:
    """The estimator's settings, with gamma and baseline_members read from verl's algorithm config."""
    return AdvantageConfig(estimator=estimator, gamma=float(_cfg(config, "gamma", 1.0)),
                           baseline_members=_cfg(config, "baseline_members", "kept"))


def verl_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator "drkernel_grpo": the paper's per-(prompt, turn) GRPO ablation, mean only.

    verl's norm_adv_by_std_in_grpo (True by default) is ignored: the paper's GRPO has no std division
    (docs/paper_spec.md §5.2); "drkernel_grpo_std" is the std-scaled variant.
    """
    return _turn_sample_advantages(
        token_level_rewards, response_mask, index, _advantage_config(config, "grpo")
    )


def verl_grpo_std_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator "drkernel_grpo_std": per-(prompt, turn) GRPO divided by the group std."""
    cfg = dataclasses.replace(_advantage_config(config, "grpo"), grpo_scale_by_std=True)
    return _turn_sample_advantages(token_level_rewards, response_mask, index, cfg)


def verl_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl policy loss "drkernel": drkernel.rl.losses with verl's clip settings and aggregation modes.

    The authors' aggregation is loss_agg_mode="seq-mean-token-sum-norm" with loss_scale_factor=1000.
    """
    clip = float(_cfg(config, "clip_ratio", 0.2))
    loss_mat, ratio, clipped, dual = ppo_token_losses(
        log_prob,
        old_log_prob,
        advantages,
        clip_low=float(_cfg(config, "clip_ratio_low", clip)),
        clip_high=float(_cfg(config, "clip_ratio_high", clip)),
        dual_clip=float(_cfg(config, "clip_ratio_c", 3.0)),
    )
    if rollout_is_weights is not None:
        loss_mat = loss_mat * rollout_is_weights
    info = dict(_cfg(config, "global_batch_info", {}))
    scale = 1.0
    agg = loss_agg_mode
    if loss_agg_mode == "seq-mean-token-sum-norm":
        agg = "seq-mean-token-sum"
        scale = float(info.get("loss_scale_factor") or response_mask.shape[-1])
    loss = aggregate_loss(
        loss_mat,
        response_mask,
        agg,  # type: ignore[arg-type]
        scale=scale,
        dp_size=int(info.get("dp_size") or 1),
        global_batch_size=info.get("global_batch_size"),
        batch_num_tokens=info.get("batch_num_tokens"),
    )
    m = response_mask.to(torch.bool)
    n = max(int(m.sum().item()), 1)
    metrics = {
        "actor/pg_clipfrac": float(clipped[m].sum().item()) / n,
        "actor/ppo_kl": float((-ratio.detach().log())[m].sum().item()) / n,
        "actor/pg_clipfrac_lower": float(dual[m].sum().item()) / n,
    }
    return loss, metrics


def register() -> None:
    """Register the estimators and the loss with verl (idempotent)."""
    fns = (verl_trloo_advantage, verl_grpo_advantage, verl_grpo_std_advantage)
    for name, fn in zip(ESTIMATOR_NAMES, fns, strict=True):
        if ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            ADV_ESTIMATOR_REGISTRY.pop(name, None)  # a reloaded module replaces its old function
            register_adv_est(name)(fn)
    if POLICY_LOSS_REGISTRY.get(LOSS_NAME) is not verl_policy_loss:
        register_policy_loss(LOSS_NAME)(verl_policy_loss)
    logger.debug("registered %s and policy loss %r with verl", ESTIMATOR_NAMES, LOSS_NAME)

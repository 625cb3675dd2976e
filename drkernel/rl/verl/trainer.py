"""verl v1 trainer "drkernel" (trainer.v1.trainer_mode=drkernel): the sync trainer with the paper's step.

verl selects it by that name; it then sets trainer_mode back to "sync" in the run's config, since verl's
base trainer treats any other mode as asynchronous (DrKernelTrainer.__init__).

verl's own advantage step pools every turn of a prompt under the prompt's uid and copies the last
turn's reward onto earlier turns, and its loss divides by a fixed ppo_mini_batch_size x rollout.n.
This trainer keeps verl's rollout, log-prob and update machinery and replaces two stages:

- `_compute_advantage`: restores each row's (prompt, trajectory, turn) and turn reward from the
  agent loop's `drkernel_*` extra fields, then runs drkernel's step over the turn rows
  (rows.turn_rows_step: void-turn masks, reward-to-go, the group filter, trajectory-level MRS against
  the rollout log-probs, PRS, TRLOO over (prompt, turn)); the advantages, returns and the loss mask
  (written as response_mask and loss_mask) go back to TransferQueue;
- `_update_actor`: one update on the whole batch (one mini-batch, one epoch), with the seq-mean divisor
  = the rows that keep a loss token, as the own trainer (the rows MRS/PRS/the filter removed do not
  count).

The group filter masks failing groups; it does not refill them (the own trainer re-samples up to
rl.max_sampling_rounds). For refill use verl's algorithm.filter_groups with metric
drkernel_last_reward, which evicts groups whose last-turn rewards are exactly equal before the step.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict
from verl.workers.utils.padding import response_to_nested

from drkernel.errors import ConfigError
from drkernel.rl.config import RunConfig
from drkernel.rl.verl.rows import RowStep, TurnRow, prs_generator, turn_rows_step
from drkernel.rl.verl.settings import run_config

__all__ = ["TRAINER_NAME", "DrKernelTrainer", "drkernel_step_from_fields", "turn_rows_from_extra"]

log = logging.getLogger(__name__)

TRAINER_NAME = "drkernel"
SYNC_MODE = "sync"  # the mode verl's base trainer runs this trainer in (DrKernelTrainer.__init__)


def turn_rows_from_extra(
    extra_fields: Sequence[dict[str, Any]], padding: Sequence[bool] | None = None
) -> list[TurnRow | None]:
    """The agent loop's per-turn record of each row; None for verl's padding rows.

    verl pads a batch to a multiple of the data-parallel size with copies of its first row, drkernel_*
    fields included (padding_utils.upsample_batch_to_divisible_size); their TransferQueue tags say
    `is_padding`, which `padding` carries. A row without drkernel keys is padding too.
    """
    out: list[TurnRow | None] = []
    for i, ef in enumerate(extra_fields):
        if (padding is not None and padding[i]) or not isinstance(ef, dict) or "drkernel_turn" not in ef:
            out.append(None)
            continue
        out.append(
            TurnRow(
                prompt=str(ef["drkernel_prompt"]),
                trajectory=int(ef["drkernel_trajectory"]),
                turn=int(ef["drkernel_turn"]),
                reward=float(ef["drkernel_reward"]),
                correct=bool(ef["drkernel_correct"]),
                speedup=float(ef["drkernel_speedup"]),
                coverage=float(ef["drkernel_coverage"]),
                aborted=bool(ef["drkernel_aborted"]),
            )
        )
    return out


def drkernel_step_from_fields(
    extra_fields: Sequence[dict[str, Any]],
    response_mask: torch.Tensor,
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor | None,
    cfg: RunConfig,
    step: int,
    padding: Sequence[bool] | None = None,
) -> tuple[RowStep, torch.Tensor]:
    """verl's padded rows -> (drkernel's step on the real rows, which rows are real).

    Padding rows (`padding`, from the rows' `is_padding` tags, or rows without drkernel keys) take no
    part in the step and rows the agent loop marked as empty turns get no loss token; rows whose sampler
    returned no log-probs are compared with themselves (as ModelSampler/PolicySampler rows in the own
    trainer).
    """
    rows = turn_rows_from_extra(extra_fields, padding)
    real = torch.tensor([r is not None for r in rows], dtype=torch.bool)
    if not bool(real.any()):
        raise ConfigError(
            "drkernel trainer: no row carries drkernel_* fields; set the agent loop to drkernel_kernel"
        )
    idx = real.nonzero().view(-1)
    mask = response_mask.to(torch.bool)[idx].clone()
    for j, i in enumerate(idx.tolist()):
        if extra_fields[i].get("drkernel_empty"):
            mask[j] = False
    old = old_log_probs[idx].float()
    roll = None
    if rollout_log_probs is not None:
        roll = rollout_log_probs[idx].float()
        own = torch.tensor([not extra_fields[i].get("drkernel_rollout_logprobs", True) for i in idx.tolist()])
        roll = torch.where(own.view(-1, 1), old, roll)
    step_out = turn_rows_step(
        [r for r in rows if r is not None], mask, old, roll, cfg.rl,
        max_turns=cfg.rollout.max_turns, generator=prs_generator(cfg.trainer.seed, step),
    )
    return step_out, real


def _scatter(values: torch.Tensor, idx: torch.Tensor, n: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    out = torch.zeros((n, width), dtype=dtype)
    v = values.to(dtype)
    out[idx] = v if v.dim() == 2 else v.view(-1, 1).expand(-1, width)
    return out


def _mean(x: torch.Tensor) -> float:
    return float(x.double().mean().item()) if x.numel() else math.nan


@register_trainer(TRAINER_NAME)
class DrKernelTrainer(PPOTrainerSync):
    """The sync v1 trainer with drkernel's advantage step and loss normalisation (module doc)."""

    def __init__(self, config: Any) -> None:
        # verl picks this class by trainer.v1.trainer_mode=drkernel, but its base class reads the same key
        # to choose between the sync and the async paths (replay buffer, gen_batch_size 1, TransferQueue
        # checkpoints, in-flight prompt re-issue), anything but "sync" being async. This trainer is
        # PPOTrainerSync: from here on the run's config says "sync", so every reader takes the sync paths.
        with open_dict(config):
            config.trainer.v1.trainer_mode = SYNC_MODE
            if config.trainer.v1.get(SYNC_MODE) is None:
                config.trainer.v1[SYNC_MODE] = {}
        super().__init__(config)
        self.drkernel_config = run_config(config)
        self._trained_rows = 0

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        return dp_size  # one mini-batch of whatever number of turn rows the step has

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        fields = ["response_mask", "old_log_probs", "extra_fields"]
        if self.config.actor_rollout_ref.rollout.calculate_log_probs:
            fields.append("rollout_log_probs")
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        extra = list(data["extra_fields"])
        padded = data.select(*[f for f in fields if f != "extra_fields"]).to_padded_tensor()
        response_mask = padded["response_mask"]
        rollout = padded["rollout_log_probs"] if "rollout_log_probs" in padded.keys() else None
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        out, real = drkernel_step_from_fields(
            extra, response_mask, padded["old_log_probs"], rollout, self.drkernel_config, self.global_steps,
            padding=padding,
        )
        n, width = response_mask.shape
        idx = real.nonzero().view(-1)
        loss_mask = _scatter(out.loss_mask, idx, n, width, torch.int64)
        adv = _scatter(out.advantages, idx, n, width, torch.float32) * loss_mask
        ret = _scatter(out.returns, idx, n, width, torch.float32) * loss_mask
        write = {
            "advantages": response_to_nested(adv, nested_mask),
            "returns": response_to_nested(ret, nested_mask),
            "response_mask": response_to_nested(loss_mask, nested_mask),
            "loss_mask": response_to_nested(loss_mask, nested_mask),
        }
        batch = tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(write, batch_size=n)
        )
        self._trained_rows = out.trained_rows
        sel = out.valid & out.groups_ok
        metrics.update({
            "drkernel/rows": int(real.sum().item()),
            "drkernel/trained_rows": out.trained_rows,
            "drkernel/trained_tokens": out.trained_tokens,
            "drkernel/groups_kept_frac": _mean(out.groups_ok.double()),
            "drkernel/mrs_reject_rate": _mean((~out.mrs_kept)[sel].double()),
            "drkernel/prs_reject_rate": _mean((~out.prs_kept)[sel].double()),
            "drkernel/advantage_mean": _mean(out.advantages[out.loss_mask.any(-1)]),
        })
        return batch

    def _update_actor(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        if self._trained_rows == 0:
            metrics["drkernel/skipped_update"] = 1
            return batch
        actor = self.config.actor_rollout_ref.actor
        batch.extra_info.update({
            "calculate_entropy": bool(actor.calculate_entropy or actor.entropy_coeff != 0.0),
            "distillation_use_topk": False,
            "distillation_only": False,
            "global_batch_size": self._trained_rows,  # the own trainer's seq-mean divisor
            "mini_batch_size": len(batch),  # one update per step (docs/paper_spec.md §5.5)
            "epochs": 1,
            "seed": actor.data_loader_seed,
            "dataloader_kwargs": {"shuffle": False},
            "temperature": self.config.actor_rollout_ref.rollout.temperature,
        })
        output = self.actor_rollout_wg.update_actor(batch)
        out_metrics = rename_dict(output["metrics"], "actor/")
        out_metrics["perf/mfu/actor"] = out_metrics.pop("actor/mfu", np.nan)
        metrics.update(reduce_metrics(out_metrics))
        metrics["drkernel/skipped_update"] = 0
        return batch

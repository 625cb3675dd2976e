"""A rollout batch -> the tensors of one update (docs/paper_spec.md §8 order) and the step's metrics.

Turn rewards -> void-turn masks -> reward-to-go -> trainer log-probs (pi_old) -> MRS -> PRS ->
group filter (given) -> advantages -> the token loss mask. Only the RL core functions do the maths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from drkernel.agent.extraction import NotJudged, why_not_judged
from drkernel.agent.metrics import fast_p
from drkernel.rl.advantages import compute_advantages
from drkernel.rl.checkpoint import torch_seed
from drkernel.rl.config import RunConfig
from drkernel.rl.masks import last_present_values, void_turn_mask
from drkernel.rl.metrics import mismatch_metrics
from drkernel.rl.rejection import mismatch_rejection_mask, prs_keep_mask
from drkernel.rl.returns import reward_to_go
from drkernel.rl.rewards import TurnRewards, turn_rewards
from drkernel.rl.rollout import RolloutBatch
from drkernel.rl.update import TokenRows, score_rows

__all__ = ["StepTensors", "batch_metrics", "prepare_step"]


@dataclass(slots=True)
class StepTensors:
    """Turn grid [B, T] and token rows [B*T, L] (row = trajectory * T + turn)."""

    rewards: TurnRewards
    valid: torch.Tensor  # void-turn mask
    returns: torch.Tensor
    groups_ok: torch.Tensor  # [B] trajectories of groups that enter the update
    mrs_kept: torch.Tensor  # [B, T]
    prs_kept: torch.Tensor  # [B, T]
    advantages: torch.Tensor  # [B, T]
    rows: TokenRows
    token_mask: torch.Tensor  # response tokens of valid, selected rows (what MRS looks at)
    loss_mask: torch.Tensor  # [B*T, L]
    old_logp: torch.Tensor
    rollout_logp: torch.Tensor
    entropy: torch.Tensor


def _token_rows(batch: RolloutBatch, turns: int, pad_id: int) -> tuple[TokenRows, list[list[float] | None]]:
    n = len(batch.trajectories) * turns
    prompts: list[list[int]] = [[] for _ in range(n)]
    responses: list[list[int]] = [[] for _ in range(n)]
    rollout: list[list[float] | None] = [None] * n
    for s in batch.samples:
        r = s.traj * turns + s.turn
        prompts[r], responses[r], rollout[r] = s.prompt_ids, s.response_ids, s.rollout_logprobs
    return TokenRows(prompts, responses, pad_id), rollout


def prepare_step(
    batch: RolloutBatch, groups_ok: torch.Tensor, model: Any, tokenizer: Any, cfg: RunConfig, step: int
) -> StepTensors:
    rl, turns = cfg.rl, cfg.rollout.max_turns
    b = len(batch.trajectories)
    tr = turn_rewards(batch.results(), cfg.reward, max_turns=turns)
    aborted = torch.tensor(batch.aborted(), dtype=torch.bool)
    valid = void_turn_mask(tr.rewards, tr.present, aborted, mask_void_turn=rl.mask_void_turn)
    returns = reward_to_go(tr.rewards, valid, gamma=rl.advantage.gamma)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows, rollout_lists = _token_rows(batch, turns, int(pad))
    selected = (valid & groups_ok.view(-1, 1)).reshape(-1)
    scored = [i for i in range(len(rows.responses)) if selected[i] and rows.responses[i]]
    temperature = cfg.rollout.temperature or 1.0
    old_logp, entropy = score_rows(model, rows, scored, token_budget=cfg.trainer.micro_batch_tokens,
                                   temperature=temperature)
    # a row whose sampler gave no log-probs is compared with itself: MRS cannot judge it
    rollout_logp = torch.where(
        torch.tensor([lp is not None for lp in rollout_lists]).view(-1, 1),
        rows.pad_values(rollout_lists),
        old_logp,
    )
    token_mask = rows.response_mask() & selected.view(-1, 1)
    traj_ids = torch.arange(b).repeat_interleave(turns)
    turn_ids = torch.arange(turns).repeat(b)
    mrs_kept = torch.ones(b, turns, dtype=torch.bool)
    if rl.mrs.enabled and token_mask.any():
        m = rl.mrs
        keep_tok = mismatch_rejection_mask(old_logp, rollout_logp, token_mask, traj_ids, turn_ids,
                                           level=m.level, bounds=m.bounds, veto=m.veto,
                                           veto_scope=m.veto_scope)
        mrs_kept = (keep_tok.any(-1) | ~token_mask.any(-1)).view(b, turns)
    prs_kept = torch.ones(b, turns, dtype=torch.bool)
    if rl.prs.enabled:
        p = rl.prs
        gen = torch.Generator().manual_seed(torch_seed(cfg.trainer.seed * 1_000_003 + step))
        prs_kept = prs_keep_mask(tr.coverage, tr.correct, tau=p.tau, slope=p.slope, speedup=tr.speedup,
                                 speedup_threshold=p.speedup_threshold, missing=p.missing, generator=gen)
    kept = mrs_kept & prs_kept
    grid_valid = valid & groups_ok.view(-1, 1)
    adv = compute_advantages(returns, torch.tensor(batch.group_ids), grid_valid, kept, rl.advantage)
    loss_mask = token_mask & (grid_valid & kept).reshape(-1, 1)
    return StepTensors(tr, valid, returns, groups_ok, mrs_kept, prs_kept, adv, rows, token_mask, loss_mask,
                       old_logp, rollout_logp, entropy)


def _mean(x: torch.Tensor) -> float:
    return float(x.double().mean().item()) if x.numel() else math.nan


def batch_metrics(batch: RolloutBatch, t: StepTensors, cfg: RunConfig) -> dict[str, Any]:
    """Rewards, Fast@1/1.2, hack rate, PR, rejection rates, mismatch, entropy of one step's batch."""
    tr, turns = t.rewards, cfg.rollout.max_turns
    present = tr.present
    trajs = batch.trajectories
    reasons = [why_not_judged(x.result) for tr_ in trajs for x in tr_.turns]
    judged = [x for tr_ in trajs for x in tr_.turns if why_not_judged(x.result) is None]
    out: dict[str, Any] = {
        "reward/mean": _mean(tr.rewards[present]),
        "reward/last_turn": _mean(last_present_values(tr.rewards, present)),
        "return/mean": _mean(t.returns[t.valid]),
        "batch/fast@1": fast_p(trajs, 1.0, turns - 1),
        "batch/fast@1.2": fast_p(trajs, 1.2, turns - 1),
        "batch/correct": _mean(tr.correct[present].double()),
        "batch/hack_rate": _share([bool(x.result.hacks) for x in judged]),
        # an answer without a kernel (the model's) apart from a prompt that did not fit (the context's)
        "batch/no_code": _share([r is NotJudged.NO_CODE for r in reasons]),
        "batch/prompt_overlong": _share([r is NotJudged.PROMPT_OVERLONG for r in reasons]),
        "batch/profiling_ratio": _mean(tr.coverage[tr.correct & ~tr.coverage.isnan()]),
        "batch/trajectories": len(trajs),
        "batch/aborted": sum(batch.aborted()),
        "batch/void_turns": int((present & ~t.valid).sum()),
    }
    for k in range(turns):
        out[f"reward/turn_{k + 1}"] = _mean(tr.rewards[:, k][present[:, k]])
    groups = torch.tensor(batch.group_ids)
    out["filter/groups"] = len(set(batch.group_ids))
    out["filter/groups_kept"] = len(set(groups[t.groups_ok].tolist()))
    rows_sel = t.token_mask.any(-1).view(-1, turns)
    out["mrs/reject_rate"] = _mean((~t.mrs_kept)[rows_sel].double())
    correct_sel = tr.correct & t.valid & t.groups_ok.view(-1, 1)
    out["prs/reject_rate"] = _mean((~t.prs_kept)[correct_sel].double())
    for key, value in mismatch_metrics(t.old_logp, t.rollout_logp, t.token_mask).items():
        out[f"mismatch/{key}"] = value
    out["actor/entropy"] = _mean(t.entropy[t.token_mask])
    # the turns the model answered: an overlong prompt's empty turn is no response of 0 tokens
    lengths = [len(s.response_ids) for s in batch.samples
               if trajs[s.traj].turns[s.turn].finish_reason != "prompt_overlong"]
    out["response_length/mean"] = sum(lengths) / len(lengths) if lengths else math.nan
    return out


def _share(flags: list[bool]) -> float:
    """The share of true flags; NaN (not measured) when there are none."""
    return sum(flags) / len(flags) if flags else math.nan

"""Turn rows (one per (prompt, trajectory, turn), in any order) -> the masks, advantages and loss mask of
one update, in the own trainer's order (docs/paper_spec.md §8, drkernel.rl.step.prepare_step).

Void-turn masks -> reward-to-go -> group filter -> MRS (trajectory level) -> PRS -> advantages -> the
token loss mask. Only the RL core functions do the maths; this module only lays rows out on the
[trajectory, turn] grid and back. It imports no verl, so both engines' tests can use it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from drkernel.rl.advantages import compute_advantages
from drkernel.rl.checkpoint import torch_seed
from drkernel.rl.config import RLConfig
from drkernel.rl.filters import dynamic_sampling_filter
from drkernel.rl.masks import last_present_values, void_turn_mask
from drkernel.rl.rejection import mismatch_rejection_mask, prs_keep_mask
from drkernel.rl.returns import reward_to_go

__all__ = ["RowStep", "TurnRow", "prs_generator", "turn_rows_step"]


@dataclass(frozen=True, slots=True)
class TurnRow:
    """What the agent loop recorded for one turn-sample (verl row)."""

    prompt: Hashable  # the prompt group (verl's uid)
    trajectory: Hashable  # the rollout of that prompt (verl's session id)
    turn: int
    reward: float
    correct: bool = False
    speedup: float = float("nan")
    coverage: float = float("nan")  # the profiling ratio PR
    aborted: bool = False  # the trajectory ended in an error: all its turns are masked


@dataclass(slots=True)
class RowStep:
    """Per-row results [N] (and [N, L] for token masks), rows in the caller's order."""

    advantages: torch.Tensor
    returns: torch.Tensor
    loss_mask: torch.Tensor  # [N, L] bool: the tokens the update trains on
    valid: torch.Tensor  # void-turn mask
    groups_ok: torch.Tensor  # the row's prompt group passed the group filter
    mrs_kept: torch.Tensor
    prs_kept: torch.Tensor
    trained_rows: int  # rows with at least one loss token (the seq-mean divisor)
    trained_tokens: int


def prs_generator(seed: int, step: int) -> torch.Generator:
    """The PRS random stream of a step, as the own trainer seeds it."""
    return torch.Generator().manual_seed(torch_seed(seed * 1_000_003 + step))


def turn_rows_step(
    rows: Sequence[TurnRow],
    response_mask: torch.Tensor,
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor | None,
    rl: RLConfig,
    *,
    max_turns: int,
    generator: torch.Generator | None = None,
) -> RowStep:
    """The own trainer's step maths over turn rows.

    `response_mask` [N, L] (an empty, prompt-overlong turn has no token and stays in the baseline, as in
    the own trainer), `old_logp` [N, L] the trainer's log-probs (pi_old), `rollout_logp` [N, L] the
    sampler's (None: MRS compares pi_old with itself and keeps everything). Trajectories are laid out
    in order of first appearance, so the PRS draws match the own trainer's when the rows come
    trajectory-major.
    """
    n = len(rows)
    if response_mask.shape[0] != n or old_logp.shape != response_mask.shape:
        raise ValueError("turn_rows_step: rows, response_mask and old_logp must describe the same N rows")
    trajs: dict[tuple[Hashable, Hashable], int] = {}
    prompts: dict[Hashable, int] = {}
    for r in rows:
        trajs.setdefault((r.prompt, r.trajectory), len(trajs))
        prompts.setdefault(r.prompt, len(prompts))
        if not 0 <= r.turn < max_turns:
            raise ValueError(f"turn_rows_step: turn {r.turn} outside 0..{max_turns - 1}")
    b, t = len(trajs), max_turns
    traj_of = torch.tensor([trajs[(r.prompt, r.trajectory)] for r in rows], dtype=torch.int64)
    turn_of = torch.tensor([r.turn for r in rows], dtype=torch.int64)
    if len(set(zip(traj_of.tolist(), turn_of.tolist(), strict=True))) != n:
        raise ValueError("turn_rows_step: two rows share one (prompt, trajectory, turn)")
    group_ids = torch.zeros(b, dtype=torch.int64)
    aborted = torch.zeros(b, dtype=torch.bool)
    rewards = torch.zeros(b, t)
    correct = torch.zeros(b, t, dtype=torch.bool)
    speedup = torch.full((b, t), float("nan"))
    coverage = torch.full((b, t), float("nan"))
    present = torch.zeros(b, t, dtype=torch.bool)
    for i, r in enumerate(rows):
        j, k = int(traj_of[i]), r.turn
        group_ids[j] = prompts[r.prompt]
        aborted[j] |= bool(r.aborted)
        rewards[j, k], correct[j, k], present[j, k] = float(r.reward), bool(r.correct), True
        speedup[j, k], coverage[j, k] = float(r.speedup), float(r.coverage)

    valid = void_turn_mask(rewards, present, aborted, mask_void_turn=rl.mask_void_turn)
    returns = reward_to_go(rewards, valid, gamma=rl.advantage.gamma)
    ds = rl.dynamic_sampling
    groups_ok = ~aborted
    if ds.enabled:
        groups_ok = dynamic_sampling_filter(
            last_present_values(rewards, present), group_ids, ~aborted,
            std_threshold=ds.std_threshold, min_group_size=ds.min_group_size,
        )
    mask = response_mask.to(torch.bool)
    selected = (valid & groups_ok.view(-1, 1))[traj_of, turn_of]
    token_mask = mask & selected.view(-1, 1)
    mrs_kept = torch.ones(b, t, dtype=torch.bool)
    if rl.mrs.enabled and token_mask.any():
        m = rl.mrs
        roll = old_logp if rollout_logp is None else rollout_logp
        keep_tok = mismatch_rejection_mask(old_logp, roll, token_mask, traj_of, turn_of, level=m.level,
                                           bounds=m.bounds, veto=m.veto, veto_scope=m.veto_scope)
        row_kept = keep_tok.any(-1) | ~token_mask.any(-1)
        mrs_kept[traj_of, turn_of] = row_kept
    prs_kept = torch.ones(b, t, dtype=torch.bool)
    if rl.prs.enabled:
        p = rl.prs
        prs_kept = prs_keep_mask(coverage, correct, tau=p.tau, slope=p.slope, speedup=speedup,
                                 speedup_threshold=p.speedup_threshold, missing=p.missing,
                                 generator=generator)
    kept = mrs_kept & prs_kept
    grid_valid = valid & groups_ok.view(-1, 1)
    adv = compute_advantages(returns, group_ids, grid_valid, kept, rl.advantage)
    loss_mask = token_mask & (grid_valid & kept)[traj_of, turn_of].view(-1, 1)
    return RowStep(
        advantages=adv[traj_of, turn_of],
        returns=returns[traj_of, turn_of],
        loss_mask=loss_mask,
        valid=valid[traj_of, turn_of],
        groups_ok=groups_ok[traj_of],
        mrs_kept=mrs_kept[traj_of, turn_of],
        prs_kept=prs_kept[traj_of, turn_of],
        trained_rows=int(loss_mask.any(-1).sum().item()),
        trained_tokens=int(loss_mask.sum().item()),
    )

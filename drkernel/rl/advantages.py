"""Returns of turn-samples + (prompt, turn) keys -> advantages: TRLOO, GRPO, trajectory RLOO, REINFORCE.

docs/paper_spec.md §5.2-§5.3 (paper Eq. 3-5, App. A). Inputs broadcast elementwise: a flat batch of
turn-samples [N] or a grid [B, T] with group_ids [B, 1] and turn_ids [1, T]. Entries with valid=False
get 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from drkernel.errors import ConfigError

__all__ = [
    "AdvantageConfig",
    "compute_advantages",
    "grpo_advantages",
    "reinforce_advantages",
    "rloo_trajectory_advantages",
    "trloo_advantages",
]

Estimator = Literal["trloo", "grpo", "rloo", "reinforce"]
SingletonRule = Literal["return", "zero"]
BaselineMembers = Literal["kept", "valid"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AdvantageConfig:
    estimator: Estimator = "trloo"  # docs/paper_spec.md §5.3: the paper's method
    gamma: float = 1.0  # docs/paper_spec.md §5.1: gamma = 1 (0 is the ablation)
    # A group of one has no leave-one-out baseline. "return": A = G (authors' code, docs/paper_spec.md §5.3);
    # "zero": the sample gets no gradient.
    singleton: SingletonRule = "return"
    # Who forms the baseline (docs/paper_spec.md §15). "kept": the valid rollouts that are trained on (paper:
    # "valid rollouts"); "valid": every loss-mask-valid turn, MRS/PRS-rejected ones included (code).
    baseline_members: BaselineMembers = "kept"
    grpo_scale_by_std: bool = False  # docs/paper_spec.md §5.2: the paper's GRPO has no std division
    std_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.estimator not in ("trloo", "grpo", "rloo", "reinforce"):
            raise ConfigError(f"rl.advantage.estimator: unknown estimator {self.estimator!r}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"rl.advantage.gamma: must be in [0, 1], got {self.gamma}")
        if self.singleton not in ("return", "zero"):
            raise ConfigError(f"rl.advantage.singleton: must be 'return' or 'zero', got {self.singleton!r}")
        if self.baseline_members not in ("kept", "valid"):
            raise ConfigError(
                f"rl.advantage.baseline_members: must be 'kept' or 'valid', got {self.baseline_members!r}"
            )
        if self.std_eps <= 0:
            raise ConfigError("rl.advantage.std_eps: must be > 0")


def _group_stats(
    returns: torch.Tensor, keys: tuple[torch.Tensor, ...], valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """Flattened (G, valid, per-sample group sum, per-sample group count) over groups of equal keys."""
    g, *ks = torch.broadcast_tensors(returns, *keys)  # type: ignore[no-untyped-call]
    shape = tuple(g.shape)
    m = torch.ones_like(g, dtype=torch.bool) if valid is None else valid.to(torch.bool).expand(shape)
    g = g.reshape(-1).to(torch.float64)
    m = m.reshape(-1)
    stacked = torch.stack([k.reshape(-1).to(torch.int64) for k in ks], dim=1)
    _, inverse = torch.unique(stacked, dim=0, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    gv = torch.where(m, g, torch.zeros_like(g))
    sums = torch.zeros(n_groups, dtype=torch.float64, device=g.device).index_add_(0, inverse, gv)
    counts = torch.zeros(n_groups, dtype=torch.float64, device=g.device).index_add_(0, inverse, m.double())
    return g, m, sums[inverse], counts[inverse], shape


def _finish(adv: torch.Tensor, m: torch.Tensor, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    adv = torch.where(m, adv, torch.zeros_like(adv))
    dtype = like.dtype if like.is_floating_point() else torch.get_default_dtype()
    return adv.reshape(shape).to(dtype)


def trloo_advantages(
    returns: torch.Tensor,
    group_ids: torch.Tensor,
    turn_ids: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    singleton: SingletonRule = "return",
) -> torch.Tensor:
    """Turn-level leave-one-out: A_i = G_i - mean_{j != i} G_j within the (prompt, turn) group.

    docs/paper_spec.md §5.3 (paper Eq. 5): equivalently N/(N-1) * (G_i - mean). A group of one valid sample
    gets A = G ("return", the authors' code) or 0 ("zero").

    >>> trloo_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0]), torch.tensor(0))
    tensor([ 1.0000, -0.5000, -0.5000])
    """
    g, m, s, n, shape = _group_stats(returns, (group_ids, turn_ids), valid)
    loo = (s - g) / (n - 1).clamp(min=1.0)
    single = g if singleton == "return" else torch.zeros_like(g)
    adv = torch.where(n > 1, g - loo, single)
    return _finish(adv, m, shape, returns)


def grpo_advantages(
    returns: torch.Tensor,
    group_ids: torch.Tensor,
    turn_ids: torch.Tensor,
    valid: torch.Tensor | None = None,
    *,
    scale_by_std: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Mean baseline per (prompt, turn) group, the sample itself included: A_i = G_i - mean_j G_j.

    docs/paper_spec.md §5.2 (paper Eq. 3): no std division by default; `scale_by_std` divides by the unbiased
    group std + eps (verl's GRPO). A group of one gets baseline 0 (and std 1).

    >>> grpo_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0]), torch.tensor(0))
    tensor([ 0.6667, -0.3333, -0.3333])
    """
    g, m, s, n, shape = _group_stats(returns, (group_ids, turn_ids), valid)
    mean = torch.where(n > 1, s / n.clamp(min=1.0), torch.zeros_like(s))
    adv = g - mean
    if scale_by_std:
        _, _, sq, _, _ = _group_stats((returns - mean.reshape(shape)) ** 2, (group_ids, turn_ids), valid)
        std = torch.where(n > 1, (sq / (n - 1).clamp(min=1.0)).sqrt(), torch.ones_like(sq))
        adv = adv / (std + eps)
    return _finish(adv, m, shape, returns)


def rloo_trajectory_advantages(
    trajectory_returns: torch.Tensor, group_ids: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """Trajectory-level RLOO: one leave-one-out advantage per trajectory, broadcast to its valid turns.

    `trajectory_returns` [B] (e.g. the whole-episode return G_1), `group_ids` [B], `valid` [B, T]. A
    trajectory joins its prompt's group when it has at least one valid turn. Not in the paper (it
    compares TRLOO only with GRPO, docs/paper_spec.md §16); here as the single-turn-style baseline.

    >>> v = torch.tensor([[True, True], [True, False]])
    >>> rloo_trajectory_advantages(torch.tensor([3.0, 1.0]), torch.tensor([0, 0]), v)
    tensor([[ 2.,  2.],
            [-2.,  0.]])
    """
    v = valid.to(torch.bool)
    member = v.any(dim=1)
    per_traj = trloo_advantages(trajectory_returns, group_ids, torch.zeros_like(group_ids), member)
    grid = per_traj.view(-1, 1).expand(v.shape)
    return torch.where(v, grid, torch.zeros_like(grid))


def reinforce_advantages(returns: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """No baseline: A = G on valid entries.

    >>> reinforce_advantages(torch.tensor([2.0, 1.0]), torch.tensor([True, False]))
    tensor([2., 0.])
    """
    m = torch.ones_like(returns, dtype=torch.bool) if valid is None else valid.to(torch.bool)
    return torch.where(m, returns, torch.zeros_like(returns))


def compute_advantages(
    returns: torch.Tensor,
    group_ids: torch.Tensor,
    valid: torch.Tensor,
    kept: torch.Tensor | None = None,
    config: AdvantageConfig = AdvantageConfig(),
) -> torch.Tensor:
    """Advantages on the turn grid [B, T] for the configured estimator; 0 where not valid & kept.

    `returns` [B, T] reward-to-go, `group_ids` [B] prompt ids, `valid` [B, T] loss-mask validity
    (void_turn_mask), `kept` [B, T] survivors of MRS/PRS (None: all kept). Baseline membership follows
    `config.baseline_members`.
    """
    v = valid.to(torch.bool)
    trained = v if kept is None else v & kept.to(torch.bool)
    members = trained if config.baseline_members == "kept" else v
    gid = group_ids.view(-1, 1)
    tid = torch.arange(returns.shape[1], device=returns.device).view(1, -1)
    if config.estimator == "trloo":
        adv = trloo_advantages(returns, gid, tid, members, singleton=config.singleton)
    elif config.estimator == "grpo":
        adv = grpo_advantages(
            returns, gid, tid, members, scale_by_std=config.grpo_scale_by_std, eps=config.std_eps
        )
    elif config.estimator == "rloo":
        adv = rloo_trajectory_advantages(returns[:, 0], group_ids, members)
    else:
        adv = reinforce_advantages(returns, members)
    return torch.where(trained, adv, torch.zeros_like(adv))

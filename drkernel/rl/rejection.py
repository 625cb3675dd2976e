"""Log-probs and profiling ratios -> keep masks: MRS (mismatch rejection) and PRS (profiling rejection).

docs/paper_spec.md §6 (paper Eq. 6) for MRS and §7 (paper Eq. 9) for PRS. A rejected turn-sample
leaves the loss only; whether it stays in the advantage baseline is `AdvantageConfig.baseline_members`
(docs/paper_spec.md §5.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from drkernel.errors import ConfigError

__all__ = [
    "MismatchConfig",
    "ProfilingRejectionConfig",
    "mismatch_ratio",
    "mismatch_rejection_mask",
    "prs_keep_mask",
    "prs_keep_prob",
]

MismatchLevel = Literal["geometric", "turn_geo", "turn", "sequence", "token"]
VetoScope = Literal["trajectory", "turn"]
_LOG_CLAMP = 20.0  # the authors clamp the log ratio to +-20 before exp (docs/paper_spec.md §6)


@dataclass(frozen=True, kw_only=True, slots=True)
class MismatchConfig:
    enabled: bool = True
    # "geometric": geometric-mean ratio over every valid token of a trajectory, all turns (paper Eq. 6,
    # code ROLLOUT_RS=geometric). Others the authors support: "turn_geo" (geometric mean per turn),
    # "turn" (product per turn), "sequence" (product per trajectory), "token" (each token's ratio).
    level: MismatchLevel = "geometric"
    bounds: tuple[float, float] = (0.999, 1.001)  # docs/paper_spec.md §6
    veto: float | None = 1e-4  # docs/paper_spec.md §6: any token ratio below this rejects
    veto_scope: VetoScope = "trajectory"  # paper: the whole sequence; code: the turn-row (§15)

    def __post_init__(self) -> None:
        lo, hi = self.bounds
        if not 0 < lo < hi:
            raise ConfigError(f"rl.mrs.bounds: need 0 < lower < upper, got {self.bounds}")
        if self.level not in ("geometric", "turn_geo", "turn", "sequence", "token"):
            raise ConfigError(f"rl.mrs.level: unknown level {self.level!r}")
        if self.veto is not None and not 0 < self.veto < 1:
            raise ConfigError(f"rl.mrs.veto: must be in (0, 1) or None, got {self.veto}")
        if self.veto_scope not in ("trajectory", "turn"):
            raise ConfigError(f"rl.mrs.veto_scope: must be 'trajectory' or 'turn', got {self.veto_scope!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfilingRejectionConfig:
    enabled: bool = True
    tau: float = 0.3  # docs/paper_spec.md §7: PR threshold
    slope: float = 0.1  # docs/paper_spec.md §7: band width s; 0 gives the hard threshold PR >= tau
    speedup_threshold: float | None = None  # code's optional OR-rule (off in the scripts)
    missing: Literal["keep", "drop"] = "keep"  # a correct sample whose PR was not measured

    def __post_init__(self) -> None:
        if not 0.0 <= self.tau <= 1.0:
            raise ConfigError(f"rl.prs.tau: must be in [0, 1], got {self.tau}")
        if self.slope < 0:
            raise ConfigError(f"rl.prs.slope: must be >= 0, got {self.slope}")
        if self.missing not in ("keep", "drop"):
            raise ConfigError(f"rl.prs.missing: must be 'keep' or 'drop', got {self.missing!r}")


def _segment_reduce(values: torch.Tensor, keys: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Sum per-row values [N] over rows with equal keys, returned per row [N]."""
    stacked = torch.stack([k.reshape(-1).to(torch.int64) for k in keys], dim=1)
    _, inverse = torch.unique(stacked, dim=0, return_inverse=True)
    n = int(inverse.max().item()) + 1 if inverse.numel() else 0
    sums = torch.zeros(n, dtype=values.dtype, device=values.device).index_add_(0, inverse, values)
    return sums[inverse]


def mismatch_ratio(
    trainer_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    token_mask: torch.Tensor,
    traj_ids: torch.Tensor,
    turn_ids: torch.Tensor,
    level: MismatchLevel = "geometric",
) -> torch.Tensor:
    """The importance ratio pi_train / pi_rollout at `level`, broadcast to tokens [N, L] (float64).

    Rows are turn-samples [N, L] of trajectory `traj_ids` [N] and turn `turn_ids` [N]. A group with no
    valid token has ratio 1.

    >>> lp = torch.tensor([[0.0, -0.2], [-0.1, 0.0]])
    >>> zeros, ones = torch.zeros(2, 2), torch.ones(2, 2)
    >>> r = mismatch_ratio(lp, zeros, ones, torch.tensor([0, 0]), torch.tensor([0, 1]))
    >>> round(r[0, 0].item(), 4)  # exp(-0.3 / 4)
    0.9277
    """
    m = token_mask.to(torch.bool)
    lr = torch.where(
        m, trainer_logp.double() - rollout_logp.double(), torch.zeros_like(trainer_logp.double())
    )
    if level == "token":
        return torch.where(m, lr.clamp(-_LOG_CLAMP, _LOG_CLAMP).exp(), torch.ones_like(lr))
    keys = (traj_ids,) if level in ("geometric", "sequence") else (traj_ids, turn_ids)
    total = _segment_reduce(lr.sum(dim=1), keys)
    if level in ("geometric", "turn_geo"):
        count = _segment_reduce(m.sum(dim=1).double(), keys)
        total = total / count.clamp(min=1.0)
    w = total.clamp(-_LOG_CLAMP, _LOG_CLAMP).exp()
    return w.view(-1, 1).expand_as(lr)


def mismatch_rejection_mask(
    trainer_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    token_mask: torch.Tensor,
    traj_ids: torch.Tensor,
    turn_ids: torch.Tensor,
    *,
    level: MismatchLevel = "geometric",
    bounds: tuple[float, float] = (0.999, 1.001),
    veto: float | None = 1e-4,
    veto_scope: VetoScope = "trajectory",
) -> torch.Tensor:
    """MRS: the token mask [N, L] (bool) with rejected tokens, turns or trajectories set to False.

    Keep where bounds[0] <= ratio <= bounds[1] at `level`; a valid token with pi_train/pi_rollout <
    `veto` rejects its trajectory ("trajectory", paper) or only its turn-row ("turn", authors' code).

    >>> lp = torch.tensor([[0.0, -0.0004], [0.0, 0.0]])
    >>> zeros, ones, ids = torch.zeros(2, 2), torch.ones(2, 2), torch.tensor([0, 1])
    >>> mismatch_rejection_mask(lp, zeros, ones, ids, torch.zeros(2)).tolist()
    [[True, True], [True, True]]
    """
    m = token_mask.to(torch.bool)
    w = mismatch_ratio(trainer_logp, rollout_logp, m, traj_ids, turn_ids, level)
    keep = m & (w >= bounds[0]) & (w <= bounds[1])
    if veto is not None:
        lr = trainer_logp.double() - rollout_logp.double()
        vetoed_row = (m & (lr < math.log(veto))).any(dim=1).double()
        if veto_scope == "trajectory":
            vetoed_row = _segment_reduce(vetoed_row, (traj_ids,))
        keep &= (vetoed_row == 0).view(-1, 1)
    return keep


def prs_keep_prob(pr: torch.Tensor, tau: float = 0.3, slope: float = 0.1) -> torch.Tensor:
    """PRS keep probability clip((PR - tau) / slope, 0, 1); slope 0 is the hard rule PR >= tau.

    docs/paper_spec.md §7 (paper Eq. 9).

    >>> [round(p, 6) for p in prs_keep_prob(torch.tensor([0.2, 0.35, 0.5])).tolist()]
    [0.0, 0.5, 1.0]
    """
    p = pr.double()
    if slope == 0:
        return (p >= tau).double()
    return ((p - tau) / slope).clamp(0.0, 1.0)


def prs_keep_mask(
    pr: torch.Tensor,
    correct: torch.Tensor,
    *,
    tau: float = 0.3,
    slope: float = 0.1,
    speedup: torch.Tensor | None = None,
    speedup_threshold: float | None = None,
    missing: Literal["keep", "drop"] = "keep",
    generator: torch.Generator | None = None,
    seed: int | None = None,
) -> torch.Tensor:
    """PRS: keep each correct turn-sample with probability prs_keep_prob(PR); incorrect ones always.

    `pr` may hold NaN where the ratio was not measured (`missing` decides). With `speedup_threshold`,
    a sample at or above it is always kept (the code's OR-rule). Pass `generator` or `seed` to make
    the draw reproducible.

    >>> prs_keep_mask(torch.tensor([0.1, 0.1, 0.9]), torch.tensor([True, False, True]), seed=0).tolist()
    [False, True, True]
    """
    if generator is None and seed is not None:
        generator = torch.Generator(device="cpu").manual_seed(seed)
    p = prs_keep_prob(torch.nan_to_num(pr.double(), nan=0.0), tau, slope)
    p = torch.where(torch.isnan(pr.double()), torch.full_like(p, float(missing == "keep")), p)
    if speedup is not None and speedup_threshold is not None:
        p = torch.where(speedup.double() >= speedup_threshold, torch.ones_like(p), p)
    u = torch.rand(p.shape, generator=generator, dtype=torch.float64, device="cpu").to(p.device)
    keep = u < p
    return keep | ~correct.to(torch.bool)

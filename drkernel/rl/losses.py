"""Log-probs, advantages and a token mask -> the PPO policy loss (asymmetric clip, dual-clip) and metrics.

docs/paper_spec.md §5.5 (authors' `compute_policy_loss`, `agg_loss`): clip 0.2 / 0.28, dual-clip c = 3,
and the loss summed over each turn-sample's tokens, averaged over turn-samples, divided by 1000.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from drkernel.errors import ConfigError

__all__ = ["AGG_MODES", "LossConfig", "aggregate_loss", "policy_loss", "ppo_token_losses"]

AggMode = Literal["seq-mean-token-sum", "seq-mean-token-mean", "token-mean", "token-sum"]
AGG_MODES: tuple[str, ...] = ("seq-mean-token-sum", "seq-mean-token-mean", "token-mean", "token-sum")
_LOG_CLAMP = 20.0


@dataclass(frozen=True, kw_only=True, slots=True)
class LossConfig:
    clip_low: float = 0.2  # docs/paper_spec.md §5.5: CLIP_RATIO=0.2_0.28
    clip_high: float = 0.28  # docs/paper_spec.md §5.5
    dual_clip: float | None = 3.0  # docs/paper_spec.md §5.5: clip_ratio_c; None disables
    agg: AggMode = "seq-mean-token-sum"  # docs/paper_spec.md §5.5
    # Divisor of the aggregated loss. None: 1000 for "seq-mean-token-sum" (docs/paper_spec.md §5.5,
    # loss_scale_factor) and 1 for the other modes.
    loss_scale_factor: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.clip_low < 1:
            raise ConfigError(f"rl.loss.clip_low: must be in [0, 1), got {self.clip_low}")
        if self.clip_high < 0:
            raise ConfigError(f"rl.loss.clip_high: must be >= 0, got {self.clip_high}")
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ConfigError(f"rl.loss.dual_clip: must be > 1 or None, got {self.dual_clip}")
        if self.agg not in AGG_MODES:
            raise ConfigError(f"rl.loss.agg: unknown mode {self.agg!r}; choose from {', '.join(AGG_MODES)}")
        if self.loss_scale_factor is not None and self.loss_scale_factor <= 0:
            raise ConfigError(f"rl.loss.loss_scale_factor: must be > 0, got {self.loss_scale_factor}")

    @property
    def scale(self) -> float:
        if self.loss_scale_factor is not None:
            return self.loss_scale_factor
        return 1000.0 if self.agg == "seq-mean-token-sum" else 1.0


def ppo_token_losses(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token PPO losses and the (ratio, clipped, dual_clipped) tensors, all of logp's shape.

    loss = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)); for A < 0 it is further capped at
    -A c (dual-clip). `advantages` broadcasts (e.g. [N, 1] per turn-sample).

    >>> logp = torch.log(torch.tensor([1.5, 0.5]))
    >>> loss, *_ = ppo_token_losses(logp, torch.zeros(2), torch.tensor([1.0, -1.0]))
    >>> loss.tolist()
    [-1.2799999713897705, 0.800000011920929]
    """
    adv = advantages.to(logp.dtype).expand_as(logp)
    ratio = (logp - old_logp).clamp(-_LOG_CLAMP, _LOG_CLAMP).exp()
    unclipped = -adv * ratio
    clipped_loss = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped_loss)
    clipped = clipped_loss > unclipped
    dual = torch.zeros_like(clipped)
    if dual_clip is not None:
        cap = -adv * dual_clip
        dual = (adv < 0) & (loss > cap)
        loss = torch.where(adv < 0, torch.minimum(loss, cap), loss)
    return loss, ratio, clipped, dual


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    agg: AggMode = "seq-mean-token-sum",
    *,
    scale: float = 1.0,
    dp_size: int = 1,
    global_batch_size: float | None = None,
    batch_num_tokens: float | None = None,
) -> torch.Tensor:
    """Reduce token losses [N, L] to a scalar, divided by `scale`.

    - "seq-mean-token-sum": sum per row, mean over rows with a valid token (the authors' mode);
    - "seq-mean-token-mean": mean per row, mean over such rows;
    - "token-mean": mean over all valid tokens; "token-sum": their sum.
    With data parallelism pass the global row count or token count and `dp_size` (verl's convention:
    each rank's loss is multiplied by dp_size because gradients are averaged over ranks).

    >>> aggregate_loss(torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([[1, 1], [1, 0]]), scale=1.0)
    tensor(3.)
    """
    m = mask.to(loss_mat.dtype)
    masked = loss_mat * m
    if agg in ("token-mean", "token-sum"):
        total = masked.sum()
        if agg == "token-mean":
            total = total / (m.sum().clamp(min=1.0) if batch_num_tokens is None else batch_num_tokens)
        return total * dp_size / scale
    tokens = m.sum(dim=-1)
    rows = (tokens > 0).to(loss_mat.dtype)
    per_row = masked.sum(dim=-1)
    if agg == "seq-mean-token-mean":
        per_row = per_row / tokens.clamp(min=1.0)
    elif agg != "seq-mean-token-sum":
        raise ConfigError(f"rl.loss.agg: unknown mode {agg!r}")
    n = rows.sum().clamp(min=1.0) if global_batch_size is None else global_batch_size
    return (per_row * rows).sum() / n * dp_size / scale


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: LossConfig = LossConfig(),
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy loss of `config` and its metrics (clip fractions, approx KL, ratio mean).

    logp, old_logp, mask: [N, L] per token of each turn-sample; advantages [N] or [N, L].
    """
    adv = advantages.view(-1, 1) if advantages.dim() == 1 else advantages
    loss_mat, ratio, clipped, dual = ppo_token_losses(
        logp, old_logp, adv, clip_low=config.clip_low, clip_high=config.clip_high, dual_clip=config.dual_clip
    )
    loss = aggregate_loss(loss_mat, mask, config.agg, scale=config.scale)
    m = mask.to(torch.bool)
    n = max(int(m.sum().item()), 1)
    with torch.no_grad():
        metrics = {
            "pg_clipfrac": float(clipped[m].sum().item()) / n,
            "pg_clipfrac_lower": float(dual[m].sum().item()) / n,
            "ppo_kl": float((old_logp - logp).detach()[m].sum().item()) / n,
            "ratio_mean": float(ratio.detach()[m].sum().item()) / n,
        }
    return loss, metrics

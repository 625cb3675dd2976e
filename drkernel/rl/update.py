"""Turn samples (prompt ids, response ids) -> token rows, trainer log-probs, and one policy update.

Rows are packed into micro-batches by a token budget, right-padded; the response tokens of a row are
scored by the logits one position earlier. `score_rows` recomputes log-probs and entropies without
gradients (pi_old, MRS); `backward_rows` accumulates the gradient of the clipped loss of the batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from drkernel.rl.losses import LossConfig, aggregate_loss, ppo_token_losses

__all__ = ["TokenRows", "backward_rows", "micro_batches", "score_rows"]


@dataclass(slots=True)
class TokenRows:
    """N rows of (prompt, response) token ids; response-aligned tensors are [N, L]."""

    prompts: list[list[int]]
    responses: list[list[int]]
    pad_id: int

    @property
    def width(self) -> int:
        return max((len(r) for r in self.responses), default=0)

    def response_mask(self) -> torch.Tensor:
        mask = torch.zeros(len(self.responses), max(self.width, 1), dtype=torch.bool)
        for i, r in enumerate(self.responses):
            mask[i, : len(r)] = True
        return mask

    def pad_values(self, values: Sequence[Sequence[float] | None], fill: float = 0.0) -> torch.Tensor:
        """Per-row response values (e.g. rollout log-probs) as [N, L]; None rows are `fill`."""
        out = torch.full((len(self.responses), max(self.width, 1)), fill, dtype=torch.float32)
        for i, v in enumerate(values):
            if v:
                out[i, : len(v)] = torch.tensor(list(v), dtype=torch.float32)
        return out


def micro_batches(rows: TokenRows, indices: Sequence[int], token_budget: int) -> Iterator[list[int]]:
    """Groups of row indices whose padded size (rows x longest row) fits `token_budget` (at least one row)."""
    order = sorted(indices, key=lambda i: len(rows.prompts[i]) + len(rows.responses[i]))
    chunk: list[int] = []
    longest = 0
    for i in order:
        length = len(rows.prompts[i]) + len(rows.responses[i])
        if chunk and max(longest, length) * (len(chunk) + 1) > token_budget:
            yield chunk
            chunk, longest = [], 0
        chunk.append(i)
        longest = max(longest, length)
    if chunk:
        yield chunk


def _forward(
    model: Any, rows: TokenRows, chunk: list[int], temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs of the response tokens [b, Lc], logits slice [b, Lc, V]) for the rows of `chunk`."""
    device = next(model.parameters()).device
    seqs = [rows.prompts[i] + rows.responses[i] for i in chunk]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), rows.pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.tensor(s)
        mask[r, : len(s)] = 1
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    resp_width = max(len(rows.responses[i]) for i in chunk)
    # response token j of row r sits at position P_r + j and is predicted at P_r + j - 1
    gather_pos = torch.zeros((len(chunk), resp_width), dtype=torch.long)
    targets = torch.full((len(chunk), resp_width), rows.pad_id, dtype=torch.long)
    for r, i in enumerate(chunk):
        p, resp = len(rows.prompts[i]), rows.responses[i]
        gather_pos[r, : len(resp)] = torch.arange(p - 1, p - 1 + len(resp))
        targets[r, : len(resp)] = torch.tensor(resp)
    gather_pos, targets = gather_pos.to(device), targets.to(device)
    sliced = logits.gather(1, gather_pos.unsqueeze(-1).expand(-1, -1, logits.shape[-1])).float() / temperature
    logp = torch.log_softmax(sliced, dim=-1)
    chosen = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return chosen, logp


def score_rows(
    model: Any, rows: TokenRows, indices: Sequence[int], *, token_budget: int, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Trainer log-probs and token entropies [N, L] (float32, CPU) of the rows in `indices`; 0 elsewhere."""
    n, width = len(rows.responses), max(rows.width, 1)
    logp_out = torch.zeros(n, width)
    ent_out = torch.zeros(n, width)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for chunk in micro_batches(rows, [i for i in indices if rows.responses[i]], token_budget):
                chosen, logp = _forward(model, rows, chunk, temperature)
                entropy = -(logp.exp() * logp).sum(-1)
                for r, i in enumerate(chunk):
                    k = len(rows.responses[i])
                    logp_out[i, :k] = chosen[r, :k].cpu()
                    ent_out[i, :k] = entropy[r, :k].cpu()
    finally:
        model.train(was_training)
    return logp_out, ent_out


def backward_rows(
    model: Any,
    rows: TokenRows,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    loss_config: LossConfig,
    *,
    token_budget: int,
    temperature: float = 1.0,
) -> dict[str, float]:
    """Accumulate d(loss)/d(theta) of the whole batch over micro-batches; returns loss metrics.

    `advantages` [N] per row, `mask` [N, L] the tokens trained on. Rows without a masked token are
    skipped. The micro-batch losses add up to the batch loss of losses.policy_loss.
    """
    m = mask.to(torch.bool)
    active = [i for i in range(m.shape[0]) if bool(m[i].any())]
    n_rows = float(len(active))
    n_tokens = float(m.sum().item())
    totals = {"loss": 0.0, "pg_clipfrac": 0.0, "pg_clipfrac_lower": 0.0, "ppo_kl": 0.0, "ratio_mean": 0.0}
    if not active:
        return totals
    model.train()
    for chunk in micro_batches(rows, active, token_budget):
        logp, _ = _forward(model, rows, chunk, temperature)
        device = logp.device
        width = logp.shape[1]
        old = old_logp[chunk, :width].to(device)
        cm = m[chunk, :width].to(device)
        adv = advantages[chunk].to(device).view(-1, 1)
        loss_mat, ratio, clipped, dual = ppo_token_losses(
            logp, old, adv, clip_low=loss_config.clip_low, clip_high=loss_config.clip_high,
            dual_clip=loss_config.dual_clip,
        )
        loss = aggregate_loss(
            loss_mat, cm, loss_config.agg, scale=loss_config.scale,
            global_batch_size=n_rows, batch_num_tokens=n_tokens,
        )
        loss.backward()
        with torch.no_grad():
            totals["loss"] += float(loss.item())
            totals["pg_clipfrac"] += float(clipped[cm].sum().item())
            totals["pg_clipfrac_lower"] += float(dual[cm].sum().item())
            totals["ppo_kl"] += float((old - logp.detach())[cm].sum().item())
            totals["ratio_mean"] += float(ratio.detach()[cm].sum().item())
    for key in ("pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", "ratio_mean"):
        totals[key] /= max(n_tokens, 1.0)
    return totals

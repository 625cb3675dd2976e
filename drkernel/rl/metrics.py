"""Trainer and rollout log-probs -> numbers that describe their mismatch (for logging, not for the loss).

docs/paper_spec.md §6: the authors log KL, k3-KL, both perplexities and chi^2. Tokens are sampled from the
rollout policy, so the estimators below estimate divergences from it to the trainer's policy.
"""

from __future__ import annotations

import math

import torch

__all__ = ["mismatch_metrics"]


def mismatch_metrics(
    trainer_logp: torch.Tensor, rollout_logp: torch.Tensor, token_mask: torch.Tensor
) -> dict[str, float]:
    """Mismatch statistics over the valid tokens of a batch of rows [N, L].

    - `kl_k1`: mean(log pi_rollout - log pi_train), an unbiased estimate of KL(rollout || train);
    - `kl_k3`: mean(rho - 1 - log rho) with rho = pi_train / pi_rollout (non-negative, low variance);
    - `ppl_rollout`, `ppl_trainer`: exp of the per-row mean negative log-prob, averaged over rows;
    - `chi2`: mean(rho^2) - 1, an estimate of the chi^2 divergence;
    - `log_ratio_abs_max`: the largest |log rho| on a valid token.

    Each is NaN when no token is valid.

    >>> m = mismatch_metrics(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2))
    >>> m["kl_k1"], m["kl_k3"], m["chi2"], m["ppl_trainer"]
    (0.0, 0.0, 0.0, 1.0)
    """
    m = token_mask.to(torch.bool)
    n_tok = int(m.sum().item())
    if n_tok == 0:
        # nothing measured (NaN: null in metrics.jsonl), not a mismatch of 0 and perplexities of 0
        return {k: math.nan for k in ("kl_k1", "kl_k3", "ppl_rollout", "ppl_trainer", "chi2",
                                      "log_ratio_abs_max")}
    tl, rl = trainer_logp.double(), rollout_logp.double()
    lr = (tl - rl).clamp(-20.0, 20.0)[m]
    rho = lr.exp()
    rows = m.any(dim=1)
    per_row = m.sum(dim=1).clamp(min=1).double()

    def ppl(logp: torch.Tensor) -> float:
        mean_nll = -(torch.where(m, logp, torch.zeros_like(logp)).sum(dim=1) / per_row)
        return float(mean_nll.exp()[rows].mean().item())

    return {
        "kl_k1": float((-lr).mean().item()),
        "kl_k3": float((rho - 1 - lr).mean().item()),
        "ppl_rollout": ppl(rl),
        "ppl_trainer": ppl(tl),
        "chi2": float((rho.pow(2).mean() - 1).item()),
        "log_ratio_abs_max": float(lr.abs().max().item()),
    }

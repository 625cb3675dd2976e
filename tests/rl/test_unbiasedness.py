"""Monte-Carlo proof of docs/paper_spec.md §5.2-§5.3 on softmax policies whose true policy gradient is known.

Per group of N rollouts the estimate is g_hat = (1/N) sum_i sum_t A_{i,t} grad log pi(a_{i,t}). TRLOO's
mean must match the exact gradient within its confidence interval; GRPO's must match (1 - 1/N) of it
(paper App. A) and, for small N, must be detectably biased.
"""

import math

import pytest
import torch

from drkernel.rl import AdvantageConfig, compute_advantages, grpo_advantages, reward_to_go, trloo_advantages

Z = 4.5  # half-width of the confidence interval in standard errors (seeded, so deterministic anyway)
GROUPS = 30000


def _mean_and_se(per_group: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return per_group.mean(0), per_group.std(0) / math.sqrt(per_group.shape[0])


def _within(mean: torch.Tensor, se: torch.Tensor, target: torch.Tensor) -> bool:
    return bool(((mean - target).abs() <= Z * se + 1e-12).all())


# ---------------------------------------------------------------- one turn, K actions
LOGITS = torch.tensor([0.3, -0.2, 0.8, -1.0], dtype=torch.float64)
REWARD = torch.tensor([1.0, 0.0, 0.0, 3.0], dtype=torch.float64)  # the best action is the rarest


def _single_turn_estimates(n: int, estimator) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + n)
    pi = LOGITS.softmax(0)
    actions = torch.multinomial(pi.expand(GROUPS, -1), n, replacement=True, generator=gen)  # [M, N]
    returns = REWARD[actions].reshape(-1)
    group = torch.arange(GROUPS).repeat_interleave(n)
    adv = estimator(returns, group, torch.zeros_like(group)).view(GROUPS, n, 1)
    score = torch.nn.functional.one_hot(actions, len(pi)).double() - pi  # grad of log pi wrt logits
    return (adv * score).sum(1) / n  # [M, K]


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_single_turn_trloo_unbiased_and_grpo_shrunk(n):
    pi = LOGITS.softmax(0)
    true_grad = pi * (REWARD - (pi * REWARD).sum())
    mean, se = _mean_and_se(_single_turn_estimates(n, trloo_advantages))
    assert _within(mean, se, true_grad), (mean, true_grad, se)
    g_mean, g_se = _mean_and_se(_single_turn_estimates(n, grpo_advantages))
    assert _within(g_mean, g_se, (1 - 1 / n) * true_grad), (g_mean, true_grad, g_se)
    if n <= 3:  # the self-inclusion bias is measurable: GRPO does not estimate the true gradient
        assert not _within(g_mean, g_se, true_grad)


# ---------------------------------------------------------------- two turns, early termination
K = 3
THETA1 = torch.tensor([0.2, 0.5, -0.4], dtype=torch.float64)
THETA2 = torch.tensor([[0.0, 0.0, 0.0], [0.3, -0.6, 0.1], [-0.2, 0.4, 0.0]], dtype=torch.float64)
R1 = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)  # action 0 succeeds and ends the episode
R2 = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.5], [0.0, 1.0, 3.0]], dtype=torch.float64)


def _exact_two_turn_gradient() -> torch.Tensor:
    t1, t2 = THETA1.clone().requires_grad_(), THETA2.clone().requires_grad_()
    pi1, pi2 = t1.softmax(0), t2.softmax(1)
    cont = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
    j = (pi1 * (R1 + cont * (pi2 * R2).sum(1))).sum()
    j.backward()
    return torch.cat([t1.grad, t2.grad.reshape(-1)])


def _two_turn_estimates(n: int, estimator: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(2000 + n)
    pi1, pi2 = THETA1.softmax(0), THETA2.softmax(1)
    b = GROUPS * n
    a1 = torch.multinomial(pi1.expand(b, -1), 1, generator=gen).squeeze(1)
    a2 = torch.multinomial(pi2[a1], 1, generator=gen).squeeze(1)
    cont = a1 != 0
    rewards = torch.stack([R1[a1], torch.where(cont, R2[a1, a2], torch.zeros(b, dtype=torch.float64))], 1)
    present = torch.stack([torch.ones(b, dtype=torch.bool), cont], 1)
    returns = reward_to_go(rewards, present)
    group = torch.arange(GROUPS).repeat_interleave(n)
    adv = compute_advantages(returns, group, present, config=AdvantageConfig(estimator=estimator))
    score1 = torch.nn.functional.one_hot(a1, K).double() - pi1  # [b, K]
    score2 = torch.zeros(b, K, K, dtype=torch.float64)
    score2[torch.arange(b), a1] = torch.nn.functional.one_hot(a2, K).double() - pi2[a1]
    g = torch.cat([adv[:, :1] * score1, (adv[:, 1] * cont).view(b, 1, 1).mul(score2).reshape(b, -1)], 1)
    return g.view(GROUPS, n, -1).sum(1) / n


def _grpo_turn2_factor(n: int) -> float:
    """E[f(N_2)] over the turn-2 group size seen by a continuing sample; f(1) = 1 (baseline 0)."""
    p = 1.0 - THETA1.softmax(0)[0].item()
    total = 0.0
    for k in range(n):  # k other continuing members
        w = math.comb(n - 1, k) * p**k * (1 - p) ** (n - 1 - k)
        total += w * (1.0 if k == 0 else 1.0 - 1.0 / (k + 1))
    return total


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_two_turn_trloo_unbiased_with_varying_group_sizes(n):
    true_grad = _exact_two_turn_gradient()
    mean, se = _mean_and_se(_two_turn_estimates(n, "trloo"))
    assert _within(mean, se, true_grad), (mean, true_grad, se)
    g_mean, g_se = _mean_and_se(_two_turn_estimates(n, "grpo"))
    expected = torch.cat([(1 - 1 / n) * true_grad[:K], _grpo_turn2_factor(n) * true_grad[K:]])
    assert _within(g_mean, g_se, expected), (g_mean, expected, g_se)
    if n <= 3:
        assert not _within(g_mean, g_se, true_grad)

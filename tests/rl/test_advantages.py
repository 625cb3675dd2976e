"""Golden tables for every estimator, hand-computed on one prompt with 4 trajectories x 3 turns."""

import pytest
import torch
from torch.testing import assert_close

from drkernel.errors import ConfigError
from drkernel.rl import (
    AdvantageConfig,
    compute_advantages,
    grpo_advantages,
    reinforce_advantages,
    rloo_trajectory_advantages,
    trloo_advantages,
)

D = torch.float64
# Returns G[i, t] of 4 trajectories of one prompt; the last turn of trajectories 1 and 3 is invalid.
G = torch.tensor([[3.0, 3.0, 2.0], [0.0, 0.0, 0.0], [4.0, 3.0, 3.0], [2.0, 2.0, 0.0]], dtype=D)
VALID = torch.tensor([[True, True, True], [True, True, False], [True, True, True], [True, True, False]])
GID = torch.zeros(4, 1, dtype=torch.int64)
TID = torch.arange(3).view(1, 3)


def exact(actual: torch.Tensor, expected: list[list[float]]) -> None:
    assert_close(actual, torch.tensor(expected, dtype=D), rtol=0, atol=1e-12)


def test_trloo_golden():  # docs/paper_spec.md §5.3: A = G - mean of the others in the (prompt, turn) group
    # turn 0: {3,0,4,2} sum 9 -> G - (9 - G)/3; turn 1: {3,0,3,2} sum 8; turn 2: {2,3} only
    expected = [
        [1.0, 4 / 3, -1.0],
        [-3.0, -8 / 3, 0.0],
        [7 / 3, 4 / 3, 1.0],
        [-1 / 3, 0.0, 0.0],
    ]
    exact(trloo_advantages(G, GID, TID, VALID), expected)


def test_trloo_is_n_over_n_minus_1_times_grpo():
    trloo = trloo_advantages(G, GID, TID, VALID)
    grpo = grpo_advantages(G, GID, TID, VALID)
    factor = torch.tensor([4 / 3, 4 / 3, 2.0], dtype=D)  # N_t / (N_t - 1) with N = (4, 4, 2)
    assert_close(trloo, grpo * factor, rtol=0, atol=1e-12)


def test_grpo_golden():  # docs/paper_spec.md §5.2: mean baseline including the sample itself, no std
    expected = [
        [0.75, 1.0, -0.5],
        [-2.25, -2.0, 0.0],
        [1.75, 1.0, 0.5],
        [-0.25, 0.0, 0.0],
    ]
    exact(grpo_advantages(G, GID, TID, VALID), expected)


def test_grpo_with_std_golden():
    std0 = (8.75 / 3) ** 0.5  # unbiased std of {3, 0, 4, 2}
    std1 = (6.0 / 3) ** 0.5  # of {3, 0, 3, 2}
    std2 = 0.5**0.5  # of {2, 3}
    eps = 1e-6
    expected = [
        [0.75 / (std0 + eps), 1.0 / (std1 + eps), -0.5 / (std2 + eps)],
        [-2.25 / (std0 + eps), -2.0 / (std1 + eps), 0.0],
        [1.75 / (std0 + eps), 1.0 / (std1 + eps), 0.5 / (std2 + eps)],
        [-0.25 / (std0 + eps), 0.0, 0.0],
    ]
    exact(grpo_advantages(G, GID, TID, VALID, scale_by_std=True, eps=eps), expected)


def test_rloo_trajectory_golden():  # one leave-one-out advantage of G[:, 0], broadcast to valid turns
    expected = [
        [1.0, 1.0, 1.0],
        [-3.0, -3.0, 0.0],
        [7 / 3, 7 / 3, 7 / 3],
        [-1 / 3, -1 / 3, 0.0],
    ]
    exact(rloo_trajectory_advantages(G[:, 0], GID.view(-1), VALID), expected)


def test_reinforce_golden():
    exact(
        reinforce_advantages(G, VALID), [[3.0, 3.0, 2.0], [0.0, 0.0, 0.0], [4.0, 3.0, 3.0], [2.0, 2.0, 0.0]]
    )


def test_groups_are_per_prompt_and_singletons_follow_the_rule():
    g = torch.tensor([5.0, 1.0, 3.0], dtype=D)
    gid = torch.tensor([0, 1, 1])
    tid = torch.zeros(3, dtype=torch.int64)
    exact(trloo_advantages(g, gid, tid).view(1, 3), [[5.0, -2.0, 2.0]])  # singleton: A = G (code)
    exact(trloo_advantages(g, gid, tid, singleton="zero").view(1, 3), [[0.0, -2.0, 2.0]])
    exact(grpo_advantages(g, gid, tid).view(1, 3), [[5.0, -1.0, 1.0]])  # singleton baseline 0


def test_a_group_whose_other_members_are_invalid_is_a_singleton():
    g = torch.tensor([5.0, 100.0], dtype=D)
    adv = trloo_advantages(g, torch.zeros(2), torch.zeros(2), torch.tensor([True, False]))
    exact(adv.view(1, 2), [[5.0, 0.0]])


def test_compute_advantages_paper_baseline_excludes_rejected_samples():  # docs/paper_spec.md §15
    kept = torch.ones(4, 3, dtype=torch.bool)
    kept[2, 1] = False  # e.g. PRS rejected trajectory 2 at turn 1
    returns = G
    adv = compute_advantages(returns, torch.zeros(4, dtype=torch.int64), VALID, kept)
    # turn 1 group is {3, 0, 2}: 3 - 1 = 2, 0 - 2.5, 2 - 1.5
    exact(adv[:, 1:2].T, [[2.0, -2.5, 0.0, 0.5]])


def test_compute_advantages_code_baseline_keeps_rejected_samples():
    kept = torch.ones(4, 3, dtype=torch.bool)
    kept[2, 1] = False
    cfg = AdvantageConfig(baseline_members="valid")
    adv = compute_advantages(G, torch.zeros(4, dtype=torch.int64), VALID, kept, cfg)
    exact(adv[:, 1:2].T, [[4 / 3, -8 / 3, 0.0, 0.0]])  # baseline still {3,0,3,2}; rejected gets 0


@pytest.mark.parametrize("estimator", ["trloo", "grpo", "rloo", "reinforce"])
def test_compute_advantages_dispatches_and_zeroes_invalid(estimator):
    adv = compute_advantages(
        G, torch.zeros(4, dtype=torch.int64), VALID, config=AdvantageConfig(estimator=estimator)
    )
    assert adv.shape == (4, 3)
    assert (adv[~VALID] == 0).all()
    assert adv[VALID].abs().sum() > 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("estimator", "ppo"),
        ("gamma", 2.0),
        ("singleton", "mean"),
        ("baseline_members", "all"),
        ("std_eps", 0.0),
    ],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"rl.advantage.{field}"):
        AdvantageConfig(**{field: value})

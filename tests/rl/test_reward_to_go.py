import pytest
import torch

from drkernel.errors import ConfigError
from drkernel.rl import reward_to_go

# The 4x3 turn-reward table shared by the golden tests (trajectories x turns).
REWARDS = torch.tensor(
    [[0.0, 1.0, 2.0], [1.0, 0.0, 0.0], [1.0, 0.0, 3.0], [0.0, 0.0, 0.5]], dtype=torch.float64
)


def test_gamma_one_is_the_sum_of_the_remaining_turns():  # docs/paper_spec.md §5.1
    expected = [[3.0, 3.0, 2.0], [1.0, 0.0, 0.0], [4.0, 3.0, 3.0], [0.5, 0.5, 0.5]]
    assert reward_to_go(REWARDS).tolist() == expected


def test_gamma_zero_is_the_turn_reward():  # the paper's ablation
    assert reward_to_go(REWARDS, gamma=0.0).tolist() == REWARDS.tolist()


def test_gamma_half():
    expected = [[1.0, 2.0, 2.0], [1.0, 0.0, 0.0], [1.75, 1.5, 3.0], [0.125, 0.25, 0.5]]
    assert reward_to_go(REWARDS, gamma=0.5).tolist() == expected


def test_masked_turns_add_nothing_and_get_zero():
    mask = torch.tensor([[True, True, False], [True, True, True], [True, False, True], [True, True, True]])
    expected = [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [4.0, 0.0, 3.0], [0.5, 0.5, 0.5]]
    assert reward_to_go(REWARDS, mask).tolist() == expected


def test_bad_gamma_is_a_config_error():
    with pytest.raises(ConfigError, match="rl.advantage.gamma"):
        reward_to_go(REWARDS, gamma=1.5)


def test_rejects_a_flat_tensor():
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        reward_to_go(torch.zeros(3))

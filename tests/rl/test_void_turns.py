import torch

from drkernel.rl import last_present_values, void_turn_mask

REWARDS = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0], [1.0, 0.0, 3.0], [0.0, 0.0, 0.0]])
PRESENT = torch.tensor([[True, True, True], [True, True, True], [True, True, True], [True, True, False]])


def test_void_turns_after_a_success_are_masked():  # docs/paper_spec.md §5.4
    expected = [
        [True, True, True],  # improving turns are kept
        [True, False, False],  # failures after a success are void
        [True, False, True],  # a later success is kept again
        [True, True, False],  # never correct: kept; padding: masked
    ]
    assert void_turn_mask(REWARDS, PRESENT).tolist() == expected


def test_aborted_trajectories_lose_every_turn():
    aborted = torch.tensor([False, False, True, False])
    valid = void_turn_mask(REWARDS, PRESENT, aborted)
    assert valid[2].tolist() == [False, False, False]
    assert valid[0].tolist() == [True, True, True]


def test_void_rule_can_be_switched_off():
    assert void_turn_mask(REWARDS, PRESENT, mask_void_turn=False).tolist() == PRESENT.tolist()


def test_first_turn_is_kept_even_with_zero_reward():
    assert void_turn_mask(torch.tensor([[0.0]])).tolist() == [[True]]


def test_last_present_values_picks_the_last_existing_turn():
    present = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
    values = torch.tensor([[1.0, 2.0, 9.0], [5.0, 5.0, 5.0], [1.0, 2.0, 3.0]])
    assert last_present_values(values, present).tolist() == [2.0, 0.0, 3.0]

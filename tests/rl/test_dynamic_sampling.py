import pytest
import torch

from drkernel.errors import ConfigError
from drkernel.rl import DynamicSamplingConfig, dynamic_sampling_filter

GROUPS = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])
LAST = torch.tensor([1.0, 1.0, 1.0, 0.0, 2.0, 0.0, 0.0, 0.0005])


def test_tied_groups_are_dropped():  # docs/paper_spec.md §8: std < 1e-3
    # group 0 all tie, group 1 differs, group 2 has population std 0.000236 < 1e-3
    assert dynamic_sampling_filter(LAST, GROUPS).tolist() == [False] * 3 + [True] * 2 + [False] * 3


def test_invalid_members_do_not_count_and_min_group_size_applies():
    valid = torch.tensor([True, True, True, True, True, True, True, True])
    kept = dynamic_sampling_filter(LAST, GROUPS, valid, std_threshold=1e-4)
    assert kept.tolist() == [False] * 3 + [True] * 5
    kept = dynamic_sampling_filter(LAST, GROUPS, valid, std_threshold=1e-4, min_group_size=3)
    assert kept.tolist() == [False] * 5 + [True] * 3
    valid[3] = False  # group 1 is now a single trajectory: std 0
    assert dynamic_sampling_filter(LAST, GROUPS, valid).tolist()[3:5] == [False, False]


def test_config_errors():
    with pytest.raises(ConfigError, match="rl.dynamic_sampling.min_group_size"):
        DynamicSamplingConfig(min_group_size=0)
    assert DynamicSamplingConfig().std_threshold == 1e-3

import doctest
import importlib
import subprocess
import sys

import pytest

import drkernel.rl

MODULES = [
    "drkernel.rl.advantages",
    "drkernel.rl.config_layout",
    "drkernel.rl.filters",
    "drkernel.rl.losses",
    "drkernel.rl.masks",
    "drkernel.rl.metrics",
    "drkernel.rl.rejection",
    "drkernel.rl.returns",
    "drkernel.rl.rewards",
]


def test_public_names_are_exported():
    assert drkernel.rl.__all__ == [
        "AGG_MODES",
        "AdvantageConfig",
        "DynamicSamplingConfig",
        "LossConfig",
        "MismatchConfig",
        "ProfilingRejectionConfig",
        "TurnRewards",
        "aggregate_loss",
        "compute_advantages",
        "dynamic_sampling_filter",
        "grpo_advantages",
        "last_present_values",
        "mismatch_metrics",
        "mismatch_ratio",
        "mismatch_rejection_mask",
        "policy_loss",
        "ppo_token_losses",
        "prs_keep_mask",
        "prs_keep_prob",
        "reinforce_advantages",
        "reward_to_go",
        "rloo_trajectory_advantages",
        "trloo_advantages",
        "turn_rewards",
        "void_turn_mask",
    ]
    for name in drkernel.rl.__all__:
        assert getattr(drkernel.rl, name) is not None


def test_importing_rl_does_not_import_verl():
    code = "import sys, drkernel.rl; assert not [m for m in sys.modules if m.split('.')[0] == 'verl']"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("module", [m for m in MODULES])
def test_doctests(module):
    failed, attempted = doctest.testmod(importlib.import_module(module))
    assert attempted > 0 and failed == 0

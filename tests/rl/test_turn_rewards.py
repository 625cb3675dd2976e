import math

import pytest
import torch

from drkernel.reward import RewardConfig
from drkernel.rl import turn_rewards
from drkernel.types import EvalOutcome, EvalResult


def ok(speedup, coverage):
    return EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=speedup, coverage=coverage)


HACKED = EvalResult(
    outcome=EvalOutcome.HACK_DETECTED, compiled=True, correct=False, speedup=10.0, coverage=1.0
)
BROKEN = EvalResult.failure(EvalOutcome.COMPILE_ERROR, "syntax_error", "bad")
RESULTS = [[ok(2.0, 0.5), HACKED, ok(5.0, None)], [BROKEN, None]]


@pytest.mark.parametrize(
    ("preset", "row0"),
    [
        ("paper", [3.5, 0.0, 4.0]),  # C(1 + min(s, 3) + PR), docs/paper_spec.md §4.1
        ("released", [1.75, 0.0, 2.0]),  # 0.5 x that, docs/paper_spec.md §4.2
        ("eval", [1.5, 0.0, 2.0]),  # 0.5 C + 0.5 min(s, 3), no PR
        ("correctness_speedup", [3.0, 0.0, 4.0]),
    ],
)
def test_rewards_per_preset(preset, row0):
    tr = turn_rewards(RESULTS, preset)
    assert tr.rewards[0].tolist() == row0
    assert tr.rewards[1].tolist() == [0.0, 0.0, 0.0]


def test_side_tensors_and_padding():
    tr = turn_rewards(RESULTS, RewardConfig())
    assert tr.present.tolist() == [[True, True, True], [True, False, False]]
    assert tr.correct.tolist() == [[True, False, True], [False, False, False]]
    assert tr.coverage[0, 0].item() == 0.5 and math.isnan(tr.coverage[0, 2].item())
    assert tr.speedup[0, 1].item() == 10.0 and math.isnan(tr.speedup[1, 0].item())
    assert turn_rewards(RESULTS, max_turns=2).rewards.shape == (2, 2)
    assert torch.equal(turn_rewards([]).rewards, torch.zeros(0, 0))

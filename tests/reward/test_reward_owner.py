"""One owner of the turn reward: reward_config(options) and result_reward(result, config).

Everyone computes the reward through these two, the judge included (drkernel/sandbox/pipeline.py):
a real judge's reward below equals theirs for the same facts and options, and both equal the
formula written out by hand for every preset and option value.
"""

import doctest
import itertools
import math

import pytest

import drkernel.reward.speedup
from drkernel.errors import ConfigError
from drkernel.reward import (
    REWARD_PRESETS,
    RewardConfig,
    preset_config,
    result_reward,
    reward_config,
)
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult


def by_hand(opts: EvalOptions, speedup: float | None, coverage: float | None) -> float:
    """The same formula written out: scale·(C + min(s, cap) + w·PR), s and PR clamped."""
    scale = {"paper": 1.0, "released": 0.5, "eval": 0.5, "correctness_speedup": 1.0}[opts.reward_preset]
    w = {"paper": 1.0, "released": 1.0, "eval": 0.0, "correctness_speedup": 0.0}[opts.reward_preset]
    s = min(max(speedup or 0.0, 0.0), opts.speedup_cap)
    pr = min(max(coverage or 0.0, 0.0), 1.0)
    return scale * (1.0 + s + w * opts.coverage_weight * pr)


def ok(speedup, coverage):
    return EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=speedup, coverage=coverage)


CAPS = (3.0, 5.0, 1.5, 10.0, math.inf)
WEIGHTS = (1.0, 0.5, 0.0, 2.0, -0.25)
SPEEDUPS = (None, -1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 7.5, 100.0)
COVERAGES = (None, -0.5, 0.0, 0.3, 0.9, 1.0, 1.5)


@pytest.mark.parametrize("preset", sorted(REWARD_PRESETS))
def test_the_formula_for_every_preset_cap_and_weight(preset):
    for cap, weight in itertools.product(CAPS, WEIGHTS):
        opts = EvalOptions(reward_preset=preset, speedup_cap=cap, coverage_weight=weight)
        cfg = reward_config(opts)
        for s, c in itertools.product(SPEEDUPS, COVERAGES):
            got = result_reward(ok(s, c), cfg)
            assert got == pytest.approx(by_hand(opts, s, c), abs=1e-12), (preset, cap, weight, s, c)


@pytest.mark.parametrize(("preset", "cap", "weight"),
                         [("paper", 3.0, 1.0), ("released", 0.5, 0.5), ("eval", 1e-9, 2.0)])
def test_the_judge_reports_the_owners_reward(preset, cap, weight):
    """A real (CPU) judge: its result's reward is result_reward of its own facts, for these options."""
    from drkernel.sandbox.judge import Judge
    from tests.sandbox.corpus import FAST, asset, reference_code

    opts = FAST.replace(reward_preset=preset, speedup_cap=cap, coverage_weight=weight, num_correct_trials=1,
                        num_perf_trials=1)
    honest = asset("kernels", "relu_scale")
    with Judge(device="cpu", cache_path=None, spares=1) as judge:
        r = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=honest.code,
                                       options=opts))
    assert r.outcome is EvalOutcome.OK and r.speedup is not None, (r.outcome, r.error, r.hack_details)
    assert r.reward == result_reward(r, reward_config(opts))
    assert r.reward == pytest.approx(by_hand(opts, r.speedup, r.coverage), abs=1e-12)


def test_defaults_are_the_presets_themselves():
    for name, preset in REWARD_PRESETS.items():
        assert reward_config(EvalOptions(reward_preset=name)) == preset
        assert preset_config(name) is preset
    assert reward_config(EvalOptions.paper()) == REWARD_PRESETS["paper"]


@pytest.mark.parametrize(
    "result",
    [
        EvalResult(outcome=EvalOutcome.INCORRECT, compiled=True, speedup=4.0, coverage=1.0),
        EvalResult(outcome=EvalOutcome.HACK_DETECTED, compiled=True, hacks=["decoy_kernel"], speedup=9.0),
        EvalResult.failure(EvalOutcome.COMPILE_ERROR, "syntax_error", "bad"),
        EvalResult.failure(EvalOutcome.TIMEOUT, "timeout", "slow"),
        EvalResult.failure(EvalOutcome.INFRA_ERROR, "crash", "judge"),
        # facts that disagree: the outcome and the hacks win over a stray correct=True
        EvalResult(outcome=EvalOutcome.OK, correct=True, hacks=["monkeypatch"], speedup=2.0),
        EvalResult(outcome=EvalOutcome.HACK_DETECTED, correct=True, speedup=2.0),
        EvalResult(outcome=EvalOutcome.OK, correct=False, speedup=2.0),
    ],
)
def test_incorrect_hacked_or_failed_earns_zero(result):
    for name in REWARD_PRESETS:
        opts = EvalOptions(reward_preset=name, speedup_cap=5.0, coverage_weight=0.5)
        assert result_reward(result, reward_config(opts)) == 0.0


def test_unknown_preset_raises_a_config_error():
    with pytest.raises(ConfigError, match=r"reward_preset: 'papr' is not one of paper, released, eval, "
                                          r"correctness_speedup"):
        EvalOptions(reward_preset="papr")
    with pytest.raises(ConfigError, match="reward_preset"):
        preset_config("Paper")
    with pytest.raises(ConfigError, match="reward_preset"):
        EvalOptions().replace(reward_preset="")
    # reward_config itself refuses it too (for an object that skipped EvalOptions' own check)
    opts = EvalOptions()
    object.__setattr__(opts, "reward_preset", "nope")
    with pytest.raises(ConfigError, match="'nope' is not one of"):
        reward_config(opts)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"speedup_cap": 0.0}, "speedup_cap"),
        ({"speedup_cap": -1.0}, "speedup_cap"),
        ({"speedup_cap": math.nan}, "speedup_cap"),
        ({"speedup_cap": "5"}, "speedup_cap"),
        ({"coverage_weight": math.nan}, "coverage_weight"),
        ({"coverage_weight": math.inf}, "coverage_weight"),
        ({"coverage_weight": None}, "coverage_weight"),
    ],
)
def test_bad_cap_or_weight_raises_a_config_error(change, message):
    with pytest.raises(ConfigError, match=message):
        EvalOptions(**change)


def test_an_unknown_preset_no_longer_reaches_the_judge():
    """Every way in builds an EvalOptions, which refuses the name the judge would turn into "paper"."""
    body = {"reference_code": "x", "kernel_code": "y", "options": {"reward_preset": "papers"}}
    with pytest.raises(ConfigError, match="reward_preset"):
        EvalRequest.from_dict(body)  # the server's native API and the judge's worker
    with pytest.raises(ConfigError, match="reward_preset"):
        EvalOptions.from_dict({"reward_preset": "papers"})
    with pytest.raises(ConfigError, match="reward_preset"):
        EvalOptions.paper(reward_preset="papers")


def test_cli_set_refuses_an_unknown_preset():
    from drkernel.recipes import debug_cpu
    from drkernel.rl.config import apply_overrides

    with pytest.raises(ConfigError, match="reward: 'papr' is not one of paper, released"):
        apply_overrides(debug_cpu(), ["reward=papr"])
    for name in REWARD_PRESETS:  # every preset, the one added last included
        assert apply_overrides(debug_cpu(), [f"reward={name}"]).reward == REWARD_PRESETS[name]
    with pytest.raises(ConfigError, match="speedup_cap"):
        apply_overrides(debug_cpu(), ["reward.speedup_cap=0"])
    cfg = apply_overrides(debug_cpu(), ["reward.speedup_cap=5", "reward.coverage_weight=0.5"])
    assert cfg.reward.speedup_cap == 5.0 and cfg.reward.coverage_weight == 0.5
    assert (cfg.eval_options().speedup_cap, cfg.eval_options().coverage_weight) == (5.0, 0.5)


def test_reward_config_is_a_plain_reward_config():
    cfg = reward_config(EvalOptions(reward_preset="released", speedup_cap=5.0, coverage_weight=0.5))
    assert cfg == RewardConfig(speedup_cap=5.0, coverage_weight=0.5, scale=0.5)


def test_doctests():
    failed, attempted = doctest.testmod(drkernel.reward.speedup)
    assert attempted > 0 and failed == 0


def test_the_preset_names_of_the_options_are_the_reward_presets():
    """drkernel.types names the presets (so EvalOptions can check one without importing the reward);
    drkernel.reward says what each is. The two lists are one list."""
    from drkernel.types import REWARD_PRESET_NAMES

    assert tuple(REWARD_PRESETS) == REWARD_PRESET_NAMES


def test_every_command_offers_the_one_list_of_presets():
    """`drkernel eval --reward`, bench/optimize's `--reward-preset`: the same names, from the one list
    (bench once offered three of the four)."""
    import argparse

    from drkernel.cli import _build_parser
    from drkernel.types import REWARD_PRESET_NAMES

    def choices(command: str, flag: str) -> tuple[str, ...]:
        sub = next(a for a in _build_parser([command])._actions if isinstance(a, argparse._SubParsersAction))
        action = next(a for a in sub.choices[command]._actions if flag in a.option_strings)
        return tuple(action.choices or ())

    assert choices("eval", "--reward") == REWARD_PRESET_NAMES
    assert choices("bench", "--reward-preset") == REWARD_PRESET_NAMES
    assert choices("optimize", "--reward-preset") == REWARD_PRESET_NAMES


@pytest.mark.parametrize("speedup", [math.nan, math.inf, -math.inf])
def test_a_speedup_that_is_no_number_earns_what_an_unmeasured_one_does(speedup):
    """A correct verdict whose speedup is NaN (a record read back from JSON) earned a NaN reward, which a
    trainer's batch, the bench's mean reward and STTS's ranking all took in; infinity earned the cap."""
    opts = EvalOptions()
    assert result_reward(ok(speedup, 1.0), reward_config(opts)) == by_hand(opts, None, 1.0) == 2.0

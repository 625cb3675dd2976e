"""EvalResult -> turn reward. The paper's R = C·(1 + min(s, cap) + w·PR) and its variants.

docs/paper_spec.md §4.1 (paper, Eq. 1 and 8), §4.2 (released code: the same scaled by 0.5; at evaluation
without the PR term). Hacked or failed results are incorrect, so they earn 0.

The reward has one owner: `reward_config(options)` turns an EvalOptions' reward fields into a
RewardConfig, and `result_reward(result, config)` turns a result's facts (outcome, correct, hacks,
speedup, coverage) into the turn reward. The judge (the `reward` of its result, sandbox/pipeline.py),
the fake executor, the agent's environment and the RL trainer all call these two. The presets' names
are drkernel.types.REWARD_PRESET_NAMES (the requests' vocabulary); what each one is, is here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from drkernel.errors import ConfigError
from drkernel.types import EvalOptions, EvalOutcome, EvalResult

__all__ = ["RewardConfig", "REWARD_PRESETS", "preset_config", "result_reward", "reward_config",
           "reward_options", "turn_reward"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RewardConfig:
    correct_weight: float = 1.0
    speedup_weight: float = 1.0
    coverage_weight: float = 1.0
    speedup_cap: float = 3.0  # docs/paper_spec.md §4.1: min(T_ref / T_kernel, 3)
    scale: float = 1.0  # the released code multiplies the paper's reward by 0.5 (docs/paper_spec.md §4.2)

    def __post_init__(self) -> None:
        if self.speedup_cap <= 0:
            raise ConfigError("reward.speedup_cap: must be > 0")
        if self.scale <= 0:
            raise ConfigError("reward.scale: must be > 0")


REWARD_PRESETS: dict[str, RewardConfig] = {
    "paper": RewardConfig(),  # R = C + C·min(s,3) + C·PR
    "released": RewardConfig(scale=0.5),  # 0.5·C + 0.5·min(s,3) + 0.5·C·PR
    "eval": RewardConfig(coverage_weight=0.0, scale=0.5),  # 0.5·C + 0.5·min(s,3), STTS ranking
    "correctness_speedup": RewardConfig(coverage_weight=0.0),  # C + C·min(s,3)
}


def turn_reward(
    correct: bool,
    speedup: float | None,
    coverage: float | None,
    config: RewardConfig = REWARD_PRESETS["paper"],
) -> float:
    """Reward of one turn; 0 unless correct.

    >>> turn_reward(True, 2.0, 0.5)
    3.5
    >>> turn_reward(True, 5.0, None, REWARD_PRESETS["released"])
    2.0
    >>> turn_reward(False, 9.0, 1.0)
    0.0
    """
    if not correct:
        return 0.0
    if speedup is None or not math.isfinite(speedup):  # NaN or infinite: nothing was measured
        speedup = 0.0
    s = min(max(speedup, 0.0), config.speedup_cap)
    pr = min(max(coverage or 0.0, 0.0), 1.0)
    r = config.correct_weight + config.speedup_weight * s + config.coverage_weight * pr
    return config.scale * r


def preset_config(name: str) -> RewardConfig:
    """The RewardConfig of a REWARD_PRESETS name; ConfigError for any other name.

    >>> preset_config("released").scale
    0.5
    """
    if not isinstance(name, str) or name not in REWARD_PRESETS:
        raise ConfigError(f"reward_preset: {name!r} is not one of {', '.join(REWARD_PRESETS)}")
    return REWARD_PRESETS[name]


def reward_config(options: EvalOptions) -> RewardConfig:
    """The RewardConfig an evaluation's options ask for: their preset with `speedup_cap` in place of
    the preset's cap and the preset's coverage weight times `coverage_weight`. (EvalOptions refuses
    an unknown preset, a cap that is not > 0 and a weight that is not finite when it is built.)

    >>> reward_config(EvalOptions(reward_preset="eval", speedup_cap=5.0)).speedup_cap
    5.0
    """
    preset = preset_config(options.reward_preset)
    return dataclasses.replace(preset, speedup_cap=options.speedup_cap,
                               coverage_weight=preset.coverage_weight * options.coverage_weight)


def reward_options(config: RewardConfig) -> dict[str, Any] | None:
    """The reward fields of an EvalOptions (`reward_preset`, `speedup_cap`, `coverage_weight`) that ask
    a judge for `config`: reward_config's inverse, a preset itself before one with a factor on its
    coverage weight; None where no preset says it (other weights or scale).

    >>> reward_options(REWARD_PRESETS["released"])
    {'reward_preset': 'released', 'speedup_cap': 3.0, 'coverage_weight': 1.0}
    >>> reward_options(RewardConfig(coverage_weight=0.5, speedup_cap=5.0))
    {'reward_preset': 'paper', 'speedup_cap': 5.0, 'coverage_weight': 0.5}
    """
    for exact in (True, False):
        for name, preset in REWARD_PRESETS.items():
            if exact:
                factor = 1.0
            elif preset.coverage_weight:
                factor = config.coverage_weight / preset.coverage_weight
            else:
                continue
            try:
                options = EvalOptions(reward_preset=name, speedup_cap=config.speedup_cap,
                                      coverage_weight=factor)
            except ConfigError:  # a weight that is not finite
                continue
            if reward_config(options) == config:
                return {"reward_preset": name, "speedup_cap": config.speedup_cap, "coverage_weight": factor}
    return None


def result_reward(result: EvalResult, config: RewardConfig) -> float:
    """The turn reward of one verdict: 0 unless it is correct (outcome ok, no hacks), else
    turn_reward of its speedup and coverage.

    >>> r = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=4.0, coverage=1.0)
    >>> result_reward(r, reward_config(EvalOptions(speedup_cap=5.0, coverage_weight=0.5)))
    5.5
    """
    correct = result.correct and result.outcome is EvalOutcome.OK and not result.hacks
    return turn_reward(correct, result.speedup, result.coverage, config)

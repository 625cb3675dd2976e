"""The run config's layout in config.json and on the command line: which keys moved or retired, and
the translation of a config.json written in an older layout into today's (drkernel.rl.config reads it).

Input: a RunConfig dict as json.loads gives it, or a dotted `--set` key; output: the dict in today's
layout, or where a retired key's setting lives now. Nothing here builds a RunConfig.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from drkernel.errors import ConfigError
from drkernel.executors.build import ClientExecutorConfig, client_executor_config, executor_name
from drkernel.reward import REWARD_PRESETS, preset_config, reward_config
from drkernel.types import EvalOptions

__all__ = ["EVAL_REWARD_FIELDS", "JUDGE_TRANSPORT_KEYS", "MOVED_KEYS", "PRESETS", "RETIRED_KEYS",
           "SECRET_KEYS", "SHORTHANDS", "judge_dict", "judge_verdict_scope", "moved", "old_judge", "preset",
           "retired"]

EVAL_REWARD_FIELDS = ("reward_preset", "speedup_cap", "coverage_weight")
SECRET_KEYS = ("judge.token",)  # written to config.json as null: give them again to resume
# The judge's settings that change no verdict: a resumed run may change them (rl/cli.py RESUMABLE), and
# eval_cache.jsonl keeps its verdicts without them (judge_verdict_scope). Left out on purpose: the
# judges' devices and number (they move the timings the speedup reads), their deadlines (they decide
# which slow evaluation is the judge's fault) and everything else of the judge's config.
JUDGE_TRANSPORT_KEYS = (
    "judge.base_url",  # the judge service moved to another address (http judge)
    # the http judge's transport: how long one HTTP exchange may take and how often a dropped
    # connection, 429 or 503 is tried again; neither is a deadline of an evaluation
    "judge.request_timeout_s",
    "judge.max_retries",
    "judge.start_timeout_s",  # how long a local judge may take to start, before any verdict
)


def judge_dict(config: ClientExecutorConfig) -> dict[str, Any]:
    """`{"executor": NAME, its fields...}`, the secrets (SECRET_KEYS) null."""
    out: dict[str, Any] = {"executor": executor_name(config),
                           **json.loads(json.dumps(dataclasses.asdict(config)))}
    for key in SECRET_KEYS:
        if key.removeprefix("judge.") in out:
            out[key.removeprefix("judge.")] = None
    return out


def judge_verdict_scope(config: ClientExecutorConfig) -> str:
    """The judge config as far as it decides verdicts: judge_dict without JUDGE_TRANSPORT_KEYS, as one
    string (the scope of eval_cache.jsonl's keys). The same judge at another address scopes the same.

    >>> from drkernel.executors.http import HttpExecutor
    >>> judge_verdict_scope(HttpExecutor.Config(base_url="http://a:1")) == judge_verdict_scope(
    ...     HttpExecutor.Config(base_url="http://b:2", request_timeout_s=5.0))
    True
    """
    out = judge_dict(config)
    for key in JUDGE_TRANSPORT_KEYS:
        out.pop(key.removeprefix("judge."), None)
    return json.dumps(out, sort_keys=True)


# keys that moved when a section came to nest its owner's config: the old dotted key -> the new one.
# A config.json written before, and a `--set` with the old key, still mean what they meant.
MOVED_KEYS = {
    "rl.gamma": "rl.advantage.gamma",
    "rl.singleton": "rl.advantage.singleton",
    "rl.baseline_members": "rl.advantage.baseline_members",
    "rl.grpo_scale_by_std": "rl.advantage.grpo_scale_by_std",
}
# a section that a plain value may set: `rl.advantage=grpo` sets `rl.advantage.estimator`
SHORTHANDS = {"rl.advantage": "estimator", "judge": "executor"}

# keys that are gone since `judge` became the executor's own config and `reward` the reward's: the old
# key -> where its setting lives now. A `--set`, or a config.json of today's layout, naming one is a
# ConfigError saying so; a config.json of the old layout is translated (old_judge).
RETIRED_KEYS = {
    "judge.server": "moved to judge.base_url (with judge.executor=http)",
    "judge.device": "moved to judge.devices (with judge.executor=local): one device per judge, "
                    "e.g. judge.devices=cpu,cpu",
    "judge.workers": "moved to judge.num_cpu_workers (with judge.executor=local; on GPUs, judge.devices "
                     "lists one device per judge)",
    "judge.reward": "moved to reward: a preset (reward=released) or its fields (reward.*)",
    "judge.eval": "moved to eval (and its reward fields to reward.*)",
    "judge.eval.reward_preset": "moved to reward: a preset (reward=released) or its fields (reward.*)",
    "judge.eval.speedup_cap": "moved to reward.speedup_cap",
    "judge.eval.coverage_weight": "moved to reward.coverage_weight (the weight itself, no longer a "
                                  "factor on the preset's)",
    "eval.reward_preset": "the run's reward is reward: a preset (reward=released) or its fields (reward.*)",
    "eval.speedup_cap": "the run's reward is reward: set reward.speedup_cap",
    "eval.coverage_weight": "the run's reward is reward: set reward.coverage_weight (the weight itself)",
}
# a section that a name may set whole: `reward=released` is that preset's RewardConfig
PRESETS = {"reward": preset_config}
_OLD_JUDGE_KEYS = {"server", "device", "workers", "reward", "eval"}


def preset(key: str, name: str) -> Any:
    try:
        return PRESETS[key](name)
    except ConfigError:
        raise ConfigError(f"{key}: {name!r} is not one of {', '.join(REWARD_PRESETS)}") from None


def retired(key: str) -> str | None:
    """Where a retired key went: RETIRED_KEYS, and judge.eval.NAME -> eval.NAME for the rest."""
    if key in RETIRED_KEYS:
        return RETIRED_KEYS[key]
    if key.startswith("judge.eval."):
        return f"moved to eval.{key.removeprefix('judge.eval.')}"
    return None


def old_judge(data: dict[str, Any]) -> dict[str, Any]:
    """A RunConfig dict whose `judge` section is of the layout before it nested the executor's config
    (executor, server, device, workers, reward, eval), in today's: `judge` the executor config that
    `--executor`, `--server`, `--device`, `--workers` give (executors/build.client_executor_config),
    `eval` the options, and `reward` the preset with the options' speedup_cap and coverage_weight."""
    judge = data.get("judge")
    if not isinstance(judge, dict) or not _OLD_JUDGE_KEYS & set(judge):
        return data
    options = dict(judge.get("eval") or {})
    fields = {name: options.pop(name) for name in EVAL_REWARD_FIELDS if name in options}
    fields["reward_preset"] = judge.get("reward", "paper")  # judge.reward replaced the options' own
    try:
        reward = reward_config(EvalOptions(**fields))
        executor = client_executor_config(str(judge.get("executor", "local")), server=judge.get("server"),
                                          device=judge.get("device"), workers=judge.get("workers"))
    except (ConfigError, TypeError) as exc:
        raise ConfigError(f"judge (the layout with judge.server and judge.reward): {exc}") from None
    return {**data, "judge": judge_dict(executor), "eval": options, "reward": dataclasses.asdict(reward)}


def moved(data: dict[str, Any]) -> dict[str, Any]:
    """A copy of a RunConfig dict with the moved keys where they live now (the input is never changed)."""
    out = old_judge(json.loads(json.dumps(data)))
    for key in PRESETS:
        if isinstance(out.get(key), str):
            out[key] = dataclasses.asdict(preset(key, out[key]))
    for key, field_name in SHORTHANDS.items():
        *parents, last = key.split(".")
        section = _section(out, parents)
        if section is not None and isinstance(section.get(last), str):
            section[last] = {field_name: section[last]}
    for old, new in MOVED_KEYS.items():
        *old_parents, old_last = old.split(".")
        section = _section(out, old_parents)
        if section is None or old_last not in section:
            continue
        *new_parents, new_last = new.split(".")
        target = out
        for name in new_parents:
            if not isinstance(target.get(name), dict):
                target[name] = {}
            target = target[name]
        target.setdefault(new_last, section.pop(old_last))
    return out


def _section(data: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    for name in path:
        data = data.get(name)  # type: ignore[assignment]
        if not isinstance(data, dict):
            return None
    return data

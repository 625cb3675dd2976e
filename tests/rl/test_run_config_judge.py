"""rl/config.py: `judge` is the executor's own config, `eval` the options, `reward` the reward's config.

The keys of the judge section before (judge.server, judge.device, judge.workers, judge.reward,
judge.eval.*) are refused with the key that replaced them, and a config.json written with them still
loads (tests/assets/configs/old_layout_*.json were written by the code before this layout).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from drkernel.agent.env import EnvConfig, KernelEnv
from drkernel.errors import ConfigError
from drkernel.executors.build import build_executor
from drkernel.executors.fake import FakeExecutor
from drkernel.executors.http import HttpExecutor
from drkernel.executors.local import LocalExecutor
from drkernel.recipes import debug_cpu, dr_kernel_8b
from drkernel.reward import REWARD_PRESETS, RewardConfig
from drkernel.rl.config import (
    RunConfig,
    apply_overrides,
    config_keys,
    from_dict,
    load_config,
    save_config,
    to_dict,
)
from drkernel.types import EvalOptions, Problem

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "configs"


def test_the_judge_is_the_executors_own_config_and_round_trips(tmp_path: Path) -> None:
    cfg = debug_cpu()
    assert cfg.judge == LocalExecutor.Config(devices=("cpu",), num_cpu_workers=1)
    assert cfg.reward == REWARD_PRESETS["paper"]
    assert dr_kernel_8b().reward == REWARD_PRESETS["released"]
    assert dr_kernel_8b().judge == HttpExecutor.Config()
    for sets in ([], ["judge=fake"],
                 ["judge.executor=http", "judge.base_url=http://j:1", "judge.max_retries=2"],
                 ["judge.devices=cpu,cpu", "judge.judge.spares=3", "reward=eval", "reward.speedup_cap=5",
                  "eval.num_perf_trials=4"]):
        run = apply_overrides(cfg, sets)
        save_config(run, tmp_path / "config.json")
        data = json.loads((tmp_path / "config.json").read_text())
        assert list(data["judge"])[0] == "executor" and data["judge"]["executor"] in ("local", "http", "fake")
        assert not {"reward_preset", "speedup_cap", "coverage_weight"} & set(data["eval"])
        assert load_config(tmp_path / "config.json") == run, sets
        assert from_dict(RunConfig, to_dict(run)) == run
    run = apply_overrides(cfg, ["judge.executor=http", "judge.base_url=http://j:1"])
    assert isinstance(build_executor(run.judge), HttpExecutor)  # rl/build's way: straight from `judge`


def test_the_executor_key_picks_the_config_and_its_keys_follow_it() -> None:
    cfg = debug_cpu()
    assert apply_overrides(cfg, ["judge.executor=local"]).judge is cfg.judge  # the same: kept
    assert apply_overrides(cfg, ["judge.executor=fake"]).judge == FakeExecutor.Config()
    with pytest.raises(ConfigError, match=r"judge.executor=local has no key 'base_url'; set "
                                          r"judge.executor=http first"):
        apply_overrides(cfg, ["judge.base_url=http://j:1"])
    with pytest.raises(ConfigError, match=r"'ray' is not one of local \| http \| fake"):
        apply_overrides(cfg, ["judge.executor=ray"])
    with pytest.raises(ConfigError, match=r"judge: unknown key\(s\) base_url \(of judge.executor=local\)"):
        from_dict(RunConfig, {"judge": {"executor": "local", "base_url": "http://j:1"}})
    keys = config_keys()
    assert {"judge.executor", "judge.devices", "judge.num_cpu_workers", "judge.base_url", "reward.scale",
            "reward.speedup_cap", "eval.timeout_s"} <= set(keys)
    assert not {"judge.server", "judge.device", "judge.reward", "eval.reward_preset", "eval.speedup_cap",
                "eval.coverage_weight"} & set(keys)


def test_one_judge_device_is_a_list_of_one() -> None:
    # `judge.devices=cuda:0`, the one GPU a judge runs on, was "expected a list, got 'cuda:0'"
    assert apply_overrides(debug_cpu(), ["judge.devices=cuda:0"]).judge.devices == ("cuda:0",)
    assert apply_overrides(debug_cpu(), ["judge.devices=cpu,cpu"]).judge.devices == ("cpu", "cpu")
    assert apply_overrides(debug_cpu(), ["judge.devices=none"]).judge.devices is None


@pytest.mark.parametrize("devices", ["", "gpu0", "cuda:x", "cpu,", "cuda0"])
def test_a_judge_device_that_is_no_device_is_refused_with_the_config(devices, capsys) -> None:
    # accepted: once the model had loaded, each judge failed its three starts ("unknown device ''")
    # and the run ended with "no judge worker could be started"
    with pytest.raises(ConfigError, match=r"^judge.devices: .* is not cpu, cuda or cuda:N"):
        apply_overrides(debug_cpu(), [f"judge.devices={devices}"])
    from drkernel.cli import main

    assert main(["train", "rl", "--set", f"judge.devices={devices}", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "drkernel train: judge.devices: " in err and "Traceback" not in err


@pytest.mark.parametrize(("key", "words"), [
    ("judge.server=http://j:1", "judge.server: moved to judge.base_url"),
    ("judge.device=cpu", "judge.device: moved to judge.devices"),
    ("judge.workers=2", "judge.workers: moved to judge.num_cpu_workers"),
    ("judge.reward=released", r"judge.reward: moved to reward: a preset \(reward=released\)"),
    ("judge.eval.num_perf_trials=5", "judge.eval.num_perf_trials: moved to eval.num_perf_trials"),
    ("judge.eval.speedup_cap=5", "judge.eval.speedup_cap: moved to reward.speedup_cap"),
    ("judge.eval.coverage_weight=0.5", "judge.eval.coverage_weight: moved to reward.coverage_weight"),
    ("judge.eval.reward_preset=eval", "judge.eval.reward_preset: moved to reward"),
    # the reward has one place: the options' reward fields would not change the run's reward
    ("eval.reward_preset=eval", "eval.reward_preset: the run's reward is reward"),
    ("eval.speedup_cap=5", "eval.speedup_cap: the run's reward is reward: set reward.speedup_cap"),
    ("eval.coverage_weight=0", "eval.coverage_weight: the run's reward is reward: set reward.coverage_w"),
])
def test_a_key_that_moved_is_a_config_error_naming_its_new_key(key: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        apply_overrides(debug_cpu(), [key])
    section, _, name = key.partition("=")[0].rpartition(".")
    data = to_dict(debug_cpu())
    if section == "eval":  # a config.json of today's layout holding it
        raw = key.partition("=")[2]
        data["eval"][name] = float(raw) if raw[0].isdigit() else raw
        with pytest.raises(ConfigError, match=words.replace("--set ", "")):
            from_dict(RunConfig, data)


def test_the_options_reward_fields_are_refused_in_python_too() -> None:
    with pytest.raises(ConfigError, match="eval.speedup_cap: the run's reward is reward"):
        RunConfig(eval=EvalOptions(speedup_cap=5.0))
    with pytest.raises(ConfigError, match="judge: .* is not the config of one of local"):
        RunConfig(judge=EvalOptions())  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "judge", "reward", "perf_trials"), [
    ("old_layout_debug_cpu.json", LocalExecutor.Config(devices=("cpu",), num_cpu_workers=1),
     REWARD_PRESETS["paper"], 1),
    ("old_layout_http_released.json", HttpExecutor.Config(base_url="http://judge-0:8000"),
     RewardConfig(speedup_cap=5.0, coverage_weight=0.5, scale=0.5), 7),
])
def test_a_config_json_of_the_old_layout_still_loads(name: str, judge: object, reward: RewardConfig,
                                                      perf_trials: int) -> None:
    old = json.loads((ASSETS / name).read_text())
    assert {"server", "device", "workers", "reward", "eval"} <= set(old["judge"])  # truly the old layout
    cfg = load_config(ASSETS / name)
    assert cfg.judge == judge and cfg.reward == reward and cfg.eval.num_perf_trials == perf_trials
    assert cfg.eval.num_correct_trials == old["judge"]["eval"]["num_correct_trials"]
    # the requests ask the judge for the same reward as before: the preset, its cap and its factor
    options = cfg.eval_options()
    want = {k: old["judge"]["eval"][k] for k in ("speedup_cap", "coverage_weight")}
    assert (options.reward_preset, options.speedup_cap, options.coverage_weight) == (
        old["judge"]["reward"], want["speedup_cap"], want["coverage_weight"])
    # ... and every other option as it was (the old judge.reward replaced the options' own preset)
    assert dataclasses.replace(options, **{k: v for k, v in old["judge"]["eval"].items()
                                           if k != "reward_preset"}) == options
    # everything outside the judge section is as it was
    assert {k: v for k, v in to_dict(cfg).items() if k not in ("judge", "eval", "reward")} == {
        k: v for k, v in old.items() if k != "judge"}


def test_resuming_a_run_of_the_old_layout_sees_the_same_config(tmp_path: Path) -> None:
    from drkernel.rl.cli import _check_resume

    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "config.json").write_text((ASSETS / "old_layout_debug_cpu.json").read_text())
    _check_resume(debug_cpu(), tmp_path, force=False)  # no "holds a run with another config"
    with pytest.raises(ConfigError, match="another config"):
        _check_resume(apply_overrides(debug_cpu(), ["reward=released"]), tmp_path, force=False)


def test_the_http_judges_token_is_never_saved(tmp_path: Path) -> None:
    run = apply_overrides(debug_cpu(), ["judge.executor=http", "judge.base_url=http://j:1",
                                        "judge.token=s3cret"])
    assert run.judge.token == "s3cret"  # type: ignore[union-attr]
    save_config(run, tmp_path / "config.json")
    text = (tmp_path / "config.json").read_text()
    assert "s3cret" not in text and json.loads(text)["judge"]["token"] is None
    assert "s3cret" not in json.dumps(to_dict(run))  # what the run log and wandb are given
    assert load_config(tmp_path / "config.json").judge == HttpExecutor.Config(base_url="http://j:1")


def test_the_environment_rewards_with_the_runs_reward_config() -> None:
    """A reward no preset says (correct_weight 2) reaches the env through EnvConfig.reward; the
    requests then carry the default reward fields, and the env replaces the judge's `reward`."""
    run = apply_overrides(debug_cpu(), ["reward.correct_weight=2"])
    assert run.eval_options().reward_preset == "paper" and run.eval_options() == run.eval
    problem = Problem(name="p", reference_code="class Model: pass")
    env = KernelEnv(problem, FakeExecutor(), EnvConfig(max_turns=1, eval_options=run.eval_options(),
                                                       reward=run.reward))
    env.reset()
    step = env.step("```python\nclass ModelNew: pass  # fake: speedup=2.0 coverage=1.0\n```")
    assert step.reward == step.info["result"].reward == 2.0 + 2.0 + 1.0


@pytest.mark.parametrize("overrides, said", [
    (["judge.judges_per_gpu=0"], "judge.judges_per_gpu: 0 not in 1..16"),
    (["judge.devices=cuda:x"], "judge.devices: 'cuda:x' is not cpu, cuda or cuda:N"),
    (["judge.heartbeat_timeout_s=0"], "judge.heartbeat_timeout_s: must be > 0"),
    (["judge.judge.spares=-1"], "judge.judge.spares: -1 not in 1..64"),
    (["judge.executor=http", "judge.priority=urgent"], "judge.priority: 'urgent' not in high|normal|low"),
])
def test_a_judge_setting_refused_is_named_as_typed(tmp_path, capsys, overrides, said):
    # the executor's own check said executor.judges_per_gpu (and the judges' own, judge.spares for
    # judge.judge.spares): no key the run config has
    from drkernel.cli import main

    with pytest.raises(ConfigError) as got:
        apply_overrides(debug_cpu(), overrides)
    assert str(got.value) == said
    argv = [x for o in overrides for x in ("--set", o)]
    assert main(["train", "rl", "--print-config", *argv]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"drkernel train: {said}"
    data = to_dict(debug_cpu())
    data["judge"]["judges_per_gpu"] = 0
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"config.json: judge.judges_per_gpu: 0 not in 1..16$"):
        load_config(tmp_path / "config.json")

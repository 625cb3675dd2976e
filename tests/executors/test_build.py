"""executors/build.py: one name -> config table, one builder picked by the config's type."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import drkernel.executors.build as build
from drkernel.errors import ConfigError
from drkernel.executors.build import EXECUTORS, build_executor, executor_config
from drkernel.executors.fake import FakeExecutor
from drkernel.executors.fake_judge import fake_judge
from drkernel.executors.http import HttpExecutor
from drkernel.executors.local import LocalExecutor
from drkernel.executors.ray import RayExecutor
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest


def test_exported_names_and_the_one_table() -> None:
    assert build.__all__ == ["CLIENT_EXECUTORS", "EXECUTORS", "ExecutorConfig", "build_executor",
                             "client_executor_config", "executor_config"]
    assert EXECUTORS == {"local": LocalExecutor.Config, "ray": RayExecutor.Config,
                         "http": HttpExecutor.Config, "fake": FakeExecutor.Config}
    assert set(build.CLIENT_EXECUTORS) <= set(EXECUTORS) and "ray" not in build.CLIENT_EXECUTORS


def test_a_client_commands_judge_is_chosen_in_one_place_and_named_as_its_user_wrote_it() -> None:
    from drkernel.agent.cli_options import executor_config_from_flags
    from drkernel.errors import ConfigError
    from drkernel.rl.build import judge_executor_config
    from drkernel.rl.config import JudgeConfig

    choose = build.client_executor_config
    assert choose("local", device="cpu", workers=2) == LocalExecutor.Config(devices=("cpu", "cpu"),
                                                                              num_cpu_workers=2)
    http = HttpExecutor.Config(base_url="http://h:1", token="t")
    assert choose("http", server="http://h:1", token="t") == http
    # bench's flags and train's judge section give the same config for the same choice
    assert executor_config_from_flags("local", device="cpu", workers=3) == \
        judge_executor_config(JudgeConfig(device="cpu", workers=3))
    with pytest.raises(ConfigError, match="--executor http needs --server URL"):
        executor_config_from_flags("http")
    with pytest.raises(ConfigError, match="judge.executor http needs judge.server"):
        judge_executor_config(JudgeConfig(executor="http"))
    with pytest.raises(ConfigError, match="unknown executor 'ray'"):
        choose("ray")


def test_executor_config_by_name_with_fields_and_defaults() -> None:
    local = executor_config("local", devices=("cpu",), isolation="thread")
    assert local == LocalExecutor.Config(devices=("cpu",), isolation="thread")
    assert executor_config("ray", address="auto") == RayExecutor.Config(address="auto")
    assert executor_config("http", base_url="http://h:1") == HttpExecutor.Config(base_url="http://h:1")
    assert executor_config("fake") == FakeExecutor.Config()


def test_executor_config_errors_are_config_errors() -> None:
    with pytest.raises(ConfigError, match=r"executor: unknown 'quantum' \(local \| ray \| http \| fake\)"):
        executor_config("quantum")
    with pytest.raises(ConfigError, match="executor.fake: .*devices"):
        executor_config("fake", devices=("cpu",))
    with pytest.raises(ConfigError, match="executor.isolation"):  # the executor's own checks still run
        executor_config("local", isolation="vm")


def test_build_executor_picks_the_implementation_by_config_type(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[tuple[Any, Any]] = []
    for cls in (LocalExecutor.Config, RayExecutor.Config):
        monkeypatch.setattr(cls, "build", lambda self, f=None: built.append((self, f)) or "built")
    assert build_executor(RayExecutor.Config(), fake_judge) == "built"
    assert build_executor(LocalExecutor.Config()) == "built"
    assert built == [(RayExecutor.Config(), fake_judge), (LocalExecutor.Config(), None)]
    assert isinstance(build_executor(FakeExecutor.Config()), FakeExecutor)
    http = build_executor(HttpExecutor.Config())  # constructed, not contacted
    assert isinstance(http, HttpExecutor)
    http.close()


def test_a_judge_factory_needs_a_pool_of_judges() -> None:
    for config in (FakeExecutor.Config(), HttpExecutor.Config()):
        with pytest.raises(ConfigError, match="a judge factory needs local or ray"):
            build_executor(config, fake_judge)
    with pytest.raises(ConfigError, match="not one of local"):
        build_executor("local")  # type: ignore[arg-type]


def test_a_built_local_executor_judges() -> None:
    ex = build_executor(executor_config("local", devices=("cpu",), isolation="thread"), fake_judge)
    try:
        (res,) = ex.evaluate([EvalRequest(reference_code="class Model: pass", kernel_code="# fake: speedup=2",
                                          task_id="t", options=EvalOptions(timeout_s=30))])
    finally:
        ex.close()
    assert res.outcome is EvalOutcome.OK and res.speedup == 2.0


def test_the_table_imports_neither_ray_nor_httpx_and_leaves_the_environment_alone() -> None:
    code = ("import os, sys; os.environ.pop('RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER', None)\n"
            "import drkernel.executors.build\n"
            "assert not {'ray', 'httpx'} & set(sys.modules), sorted({'ray', 'httpx'} & set(sys.modules))\n"
            "assert 'RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER' not in os.environ\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

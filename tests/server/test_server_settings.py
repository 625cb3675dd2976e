"""Judges per GPU for `drkernel serve`: the setting, its checks, and the executor it builds."""

from __future__ import annotations

from typing import Any

import pytest

from drkernel.cli import main
from drkernel.errors import ConfigError
from drkernel.executors.judge_host import SharedGpuJudge, sandbox_judge
from drkernel.executors.local import LocalExecutor
from drkernel.server.app import default_executor
from drkernel.server.settings import Settings


def test_judges_per_gpu_comes_from_the_environment_and_is_checked() -> None:
    assert Settings.from_env({"DRKERNEL_JUDGES_PER_GPU": "3"}).judges_per_gpu == 3
    assert Settings.from_env({}).judges_per_gpu is None and Settings.from_env({}).gpu_judges == 4
    assert Settings(executor="ray").gpu_judges == 1  # a Ray actor holds a whole GPU
    with pytest.raises(ConfigError, match="judges_per_gpu: 0 not in 1..16"):
        Settings(judges_per_gpu=0)
    with pytest.raises(ConfigError, match="local executor"):
        Settings(judges_per_gpu=2, executor="ray")
    with pytest.raises(ConfigError, match="DRKERNEL_JUDGES_PER_GPU='two'"):
        Settings.from_env({"DRKERNEL_JUDGES_PER_GPU": "two"})


@pytest.mark.parametrize(("k", "factory"), [(1, sandbox_judge), (3, SharedGpuJudge)])
def test_serve_builds_k_judges_per_gpu_with_divided_caps(monkeypatch: pytest.MonkeyPatch, k: int,
                                                         factory: Any) -> None:
    built: list[tuple[LocalExecutor.Config, Any]] = []
    monkeypatch.setattr(LocalExecutor.Config, "build",
                        lambda self, f=None: built.append((self, f)) or "executor")
    assert default_executor(Settings(judges_per_gpu=k, devices=("cuda:0", "cuda:1"))) == "executor"
    (config, made), = built
    assert config.judges_per_gpu == k and config.devices == ("cuda:0", "cuda:1")
    if k == 1:
        assert made is factory
    else:  # each of the k judges gets 1/k of a lone judge's GPU memory caps
        assert isinstance(made, factory) and made.share == k


def test_a_bad_judges_per_gpu_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--judges-per-gpu", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["drkernel serve: serve.judges_per_gpu: 0 not in 1..16"]


def test_serve_builds_its_executor_from_the_one_table() -> None:
    from drkernel.executors.ray import RayExecutor
    from drkernel.server.app import serve_executor_config

    ray = serve_executor_config(Settings(executor="ray", ray_address="auto", num_workers=2,
                                         heartbeat_timeout_s=3.0, deadline_grace_s=5.0))
    assert ray == RayExecutor.Config(address="auto", num_workers=2, heartbeat_timeout_s=3.0,
                                     heartbeat_s=1.0, deadline_grace_s=5.0)
    local = serve_executor_config(Settings(devices=("cuda:0", "cuda:1", "cuda:2"), num_workers=2,
                                           isolation="thread"))
    assert isinstance(local, LocalExecutor.Config)
    assert local.devices == ("cuda:0", "cuda:1") and local.isolation == "thread"
    assert local.scrub_env == ("DRKERNEL_AUTH_TOKEN",)
    for name in ("http", "fake"):  # serve's vocabulary is narrower than the table's
        with pytest.raises(ConfigError, match=f"serve.executor: '{name}' not in local\\|ray"):
            Settings(executor=name)

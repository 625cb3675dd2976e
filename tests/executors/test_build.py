"""executors/build.py: one name -> config table, one builder picked by the config's type."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing
from pathlib import Path
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
    assert build.__all__ == ["CLIENT_EXECUTORS", "EXECUTORS", "ClientExecutorConfig", "ExecutorConfig",
                             "build_executor", "check_cpu_judges", "client_executor_config",
                             "executor_config", "executor_name"]
    assert EXECUTORS == {"local": LocalExecutor.Config, "ray": RayExecutor.Config,
                         "http": HttpExecutor.Config, "fake": FakeExecutor.Config}
    assert set(build.CLIENT_EXECUTORS) <= set(EXECUTORS) and "ray" not in build.CLIENT_EXECUTORS
    assert set(typing.get_args(build.ClientExecutorConfig)) == {EXECUTORS[n] for n in build.CLIENT_EXECUTORS}
    for name, cls in EXECUTORS.items():
        assert build.executor_name(cls()) == name
    with pytest.raises(ConfigError, match="not one of local"):
        build.executor_name("local")  # type: ignore[arg-type]


def test_a_client_commands_judge_is_chosen_in_one_place() -> None:
    choose = build.client_executor_config
    assert choose("local", device="cpu", workers=2) == LocalExecutor.Config(devices=("cpu", "cpu"),
                                                                              num_cpu_workers=2)
    assert choose() == LocalExecutor.Config()
    assert choose("local", device="cuda:1", workers=3) == LocalExecutor.Config(devices=("cuda:1",),
                                                                                judges_per_gpu=3)
    with pytest.raises(ConfigError, match="--workers 0: must be >= 1"):
        choose("local", workers=0)
    with pytest.raises(ConfigError, match="at most 16 judges share one GPU"):
        choose("local", device="cuda", workers=17)
    cores = os.cpu_count() or 1
    assert choose("local", device="cpu", workers=4 * cores).num_cpu_workers == 4 * cores
    with pytest.raises(ConfigError, match=f"--workers {4 * cores + 1}: more than 4 judges per CPU core"):
        choose("local", device="cpu", workers=4 * cores + 1)
    with pytest.raises(ConfigError, match="more than 4 judges per CPU core"):
        choose("local", workers=1000 * cores)
    http = HttpExecutor.Config(base_url="http://h:1", token="t")
    assert choose("http", server="http://h:1", token="t") == http
    assert choose("fake") == FakeExecutor.Config()
    with pytest.raises(ConfigError, match="--executor http needs --server URL"):
        choose("http")
    with pytest.raises(ConfigError, match="unknown executor 'ray'"):  # serve's, not a client's
        choose("ray")


def test_bench_optimize_and_the_scripts_call_the_one_function() -> None:
    """No command keeps a translation of its own: bench/optimize (cli_options), the scripts of bench/
    and a run config's old judge keys (rl/config_layout.py) all reach client_executor_config."""
    from pathlib import Path

    import drkernel.agent.cli_options as cli_options

    root = Path(__file__).resolve().parents[2]
    assert cli_options.client_executor_config is build.client_executor_config
    assert not hasattr(cli_options, "executor_config_from_flags")
    for path in ("drkernel/agent/cli_options.py", "drkernel/rl/config_layout.py", "bench/agent_gpu_demo.py"):
        assert "client_executor_config(" in (root / path).read_text(), path
    users = [p for p in root.glob("drkernel/**/*.py") if "executor_config_from_flags" in p.read_text()
             or "judge_executor_config" in p.read_text()]
    assert users == []


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


def test_workers_on_one_gpu_all_come_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`drkernel bench --device cuda:0 --workers 2`: both judges hold a slot of the GPU's lock and judge
    (before, the second waited for the GPU until its start failed, three times). The GPU is simulated:
    the scripted judge on "cuda:0", with the lock files in a private folder."""
    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path / "locks"))
    config = dataclasses.replace(build.client_executor_config("local", device="cuda:0", workers=2),
                                 isolation="thread", gpu_lock_timeout_s=2.0)
    with LocalExecutor(config, fake_judge) as executor:
        assert executor.alive_workers() == 2
        code = "# fake: speedup=2\nclass ModelNew:\n    pass\n"
        results = executor.evaluate([EvalRequest(reference_code="class Model:\n    pass\n", kernel_code=code)
                                     for _ in range(4)])
    assert [r.outcome.value for r in results] == ["ok"] * 4
    assert all(r.device is not None and r.device.worker_id in ("local-0", "local-1") for r in results)

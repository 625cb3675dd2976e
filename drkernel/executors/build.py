"""One executor config, one builder: the name -> config table that serve, bench/optimize and train share.

Input: an executor's own Config (a union, `ExecutorConfig`), or a name of `EXECUTORS` and its fields;
output: the Executor, picked by the config's type. A command that takes fewer names (`drkernel serve`:
local|ray; bench, optimize and train: local|http|fake) checks its own vocabulary before looking here.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from drkernel.errors import ConfigError
from drkernel.executors.base import Executor
from drkernel.executors.fake import FakeExecutor
from drkernel.executors.http import HttpExecutor
from drkernel.executors.judge_host import JudgeFactory
from drkernel.executors.local import LocalExecutor
from drkernel.executors.ray import RayExecutor

__all__ = ["CLIENT_EXECUTORS", "EXECUTORS", "ExecutorConfig", "build_executor", "client_executor_config",
           "executor_config"]

ExecutorConfig: TypeAlias = (
    LocalExecutor.Config | RayExecutor.Config | HttpExecutor.Config | FakeExecutor.Config
)

EXECUTORS: dict[str, type[ExecutorConfig]] = {
    "local": LocalExecutor.Config,  # a pool of sandboxed judges on this machine
    "ray": RayExecutor.Config,  # one judge actor per GPU of a Ray cluster
    "http": HttpExecutor.Config,  # the workers of a `drkernel serve` server
    "fake": FakeExecutor.Config,  # answers from `# fake:` markers, in process (tests, demos)
}


def executor_config(name: str, **fields: Any) -> ExecutorConfig:
    """The config of the executor called `name`, with `fields` set and the rest at their defaults."""
    try:
        cls = EXECUTORS[name]
    except KeyError:
        raise ConfigError(f"executor: unknown {name!r} ({' | '.join(EXECUTORS)})") from None
    try:
        return cls(**fields)
    except TypeError as exc:  # a field another executor has
        raise ConfigError(f"executor.{name}: {exc}") from None


CLIENT_EXECUTORS = ("local", "http", "fake")  # what bench, optimize and train judge through


def client_executor_config(kind: str = "local", *, server: str | None = None, device: str | None = None,
                           workers: int | None = None, token: str | None = None,
                           names: tuple[str, str] = ("--executor", "--server URL")) -> ExecutorConfig:
    """The judge a client command runs through (bench, optimize: their flags; train: its `judge`
    section): "local" (a pool of sandboxed judges here, `workers` of them on `device`), "http" (a
    drkernel server at `server`, with `token`) or "fake". `names`: how the command names the choice
    and the server in its errors."""
    choice, server_name = names
    if kind not in CLIENT_EXECUTORS:
        raise ConfigError(f"unknown executor {kind!r} ({' | '.join(CLIENT_EXECUTORS)})")
    if kind == "fake":
        return executor_config("fake")
    if kind == "http":
        if not server:
            raise ConfigError(f"{choice} http needs {server_name}")
        return executor_config("http", base_url=server, token=token)
    devices = (device,) * (workers or 1) if device is not None else None
    return executor_config("local", devices=devices, num_cpu_workers=workers)


def build_executor(config: ExecutorConfig, judge_factory: JudgeFactory | None = None) -> Executor:
    """The executor `config` describes. `judge_factory` (device -> judge) replaces the sandbox judge
    of a local or Ray pool; the http and fake executors run no judge in this process."""
    match config:
        case LocalExecutor.Config() | RayExecutor.Config():
            return config.build(judge_factory)
        case HttpExecutor.Config() | FakeExecutor.Config():
            if judge_factory is not None:
                kind = "http" if isinstance(config, HttpExecutor.Config) else "fake"
                raise ConfigError(f"executor.{kind}: runs no judge here; a judge factory needs local or ray")
            return config.build()
    raise ConfigError(f"executor: {type(config).__name__} is not one of {' | '.join(EXECUTORS)}")

"""One executor config, one builder: the name -> config table that serve, bench/optimize and train share.

Input: an executor's own Config (a union, `ExecutorConfig`), a name of `EXECUTORS` and its fields, or
a client command's flags (`client_executor_config`); output: the Executor, picked by the config's type.
`drkernel serve` takes local|ray; bench, optimize and train judge through local|http|fake
(`ClientExecutorConfig`, which is also the type of a run config's `judge`).
"""

from __future__ import annotations

import os
import typing
from typing import Any, TypeAlias

from drkernel.errors import ConfigError
from drkernel.executors.base import Executor
from drkernel.executors.fake import FakeExecutor
from drkernel.executors.http import HttpExecutor
from drkernel.executors.judge_host import JudgeFactory
from drkernel.executors.local import LocalExecutor
from drkernel.executors.ray import RayExecutor

__all__ = ["CLIENT_EXECUTORS", "EXECUTORS", "ClientExecutorConfig", "ExecutorConfig", "build_executor",
           "check_cpu_judges", "client_executor_config", "executor_config", "executor_name"]

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


def executor_name(config: ExecutorConfig) -> str:
    """The EXECUTORS name of a config: what `--executor` and a run config's `judge.executor` say.

    >>> executor_name(FakeExecutor.Config())
    'fake'
    """
    for name, cls in EXECUTORS.items():
        if type(config) is cls:
            return name
    raise ConfigError(f"executor: {type(config).__name__} is not one of {' | '.join(EXECUTORS)}")


# what bench, optimize and train judge through (a run config's `judge` is one of these; isinstance
# takes the union itself), and their EXECUTORS names, in that table's order
ClientExecutorConfig: TypeAlias = LocalExecutor.Config | HttpExecutor.Config | FakeExecutor.Config
CLIENT_EXECUTORS = tuple(name for name, cls in EXECUTORS.items()
                         if cls in typing.get_args(ClientExecutorConfig))


def client_executor_config(kind: str = "local", *, server: str | None = None, device: str | None = None,
                           workers: int | None = None, token: str | None = None) -> ClientExecutorConfig:
    """The judge a client command's flags choose (`--executor`, `--server`, `--device`, `--workers`;
    bench, optimize and the scripts of bench/ call this, and so does the reading of a run config saved
    with the old `judge.device`/`judge.workers` keys): "local" (a pool of sandboxed judges here,
    `workers` of them on `device`), "http" (a drkernel server at `server`, with `token`) or "fake".

    On a GPU the `workers` judges share it (`judges_per_gpu`): each GPU's judges hold one of its lock
    slots, so `workers` copies of the device with one slot left all but one judge waiting for the GPU
    until their start failed."""
    if kind not in CLIENT_EXECUTORS:
        raise ConfigError(f"unknown executor {kind!r} ({' | '.join(CLIENT_EXECUTORS)})")
    if kind == "fake":
        return FakeExecutor.Config()
    if kind == "http":
        if not server:
            raise ConfigError("--executor http needs --server URL")
        return HttpExecutor.Config(base_url=server, token=token)
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}: must be >= 1")
    if device is not None and device.startswith("cuda"):
        if workers is not None and workers > 16:
            raise ConfigError(f"--workers {workers}: at most 16 judges share one GPU")
        return LocalExecutor.Config(devices=(device,), judges_per_gpu=workers or 1)
    if workers is not None:
        check_cpu_judges(workers)
    devices = (device,) * (workers or 1) if device is not None else None
    return LocalExecutor.Config(devices=devices, num_cpu_workers=workers)


def check_cpu_judges(workers: int) -> None:
    """--workers CPU judges: at most 4 per core of this machine (each judge is processes that import
    torch; 1000 would start 1000 of them)."""
    cores = os.cpu_count() or 1
    if workers > 4 * cores:
        raise ConfigError(f"--workers {workers}: more than 4 judges per CPU core of this machine ({cores} "
                          "cores) only queue for them")


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

"""Server settings: the server's environment variables (addresses and secrets) and the judges' config.

Input: the environment (`DRKERNEL_*`) and CLI overrides; output: a frozen, validated Settings.
After reading, `scrub_secrets` removes secrets from the environment so that no child inherits them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from drkernel.errors import ConfigError
from drkernel.settings import (
    JudgeSettings,
    default_timing_cache,
    is_header_value,
    judge_settings_from_env,
    read_environment,
)
from drkernel.types import MAX_SOURCE_BYTES

__all__ = ["SECRET_VARS", "Settings", "scrub_secrets"]

SECRET_VARS = ("DRKERNEL_AUTH_TOKEN",)

_ENV: dict[str, tuple[str, type]] = {
    # env var -> (field, type)
    "DRKERNEL_HOST": ("host", str),
    "DRKERNEL_PORT": ("port", int),
    "DRKERNEL_DB": ("db_path", str),
    "DRKERNEL_AUTH_TOKEN": ("auth_token", str),
    "DRKERNEL_EXECUTOR": ("executor", str),
    "DRKERNEL_RAY_ADDRESS": ("ray_address", str),
    "DRKERNEL_WORKERS": ("num_workers", int),
    "DRKERNEL_JUDGES_PER_GPU": ("judges_per_gpu", int),
    "DRKERNEL_MAX_QUEUE": ("max_queue", int),
    "DRKERNEL_RETENTION_S": ("retention_s", float),
    "DRKERNEL_EVALUATE_WAIT_S": ("evaluate_wait_s", float),
    "DRKERNEL_DEDUPE_WINDOW_S": ("dedupe_window_s", float),
    "DRKERNEL_TIMING_CACHE": ("timing_cache", str),
}


# 4 judge processes on one H200 judged 116.8 fresh 2048^2 kernels a minute in process (run AT;
# 104.1 in AQ), against 38.4 through `drkernel serve` with one judge and 89.2 in process with six,
# where the device lock's holds contended (AO): docs/benchmark_log.md
DEFAULT_JUDGES_PER_GPU = 4
MIN_HEARTBEAT_TIMEOUT_S = 0.5  # a judge process then beats every 0.1 s


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 8000
    db_path: str = "drkernel-serve.db"  # SQLite file; ":memory:" keeps nothing across restarts
    auth_token: str | None = None  # bearer token; None: no auth (loopback default)
    executor: str = "local"  # "local" | "ray"
    ray_address: str | None = None  # None with executor=ray: a private local cluster
    num_workers: int | None = None  # None: one per GPU, or cores // 2 CPU workers
    # local executor: judges sharing each GPU (their compiles and correctness overlap, their timing
    # takes turns). None: DEFAULT_JUDGES_PER_GPU for the local executor, 1 for Ray (an actor holds a GPU)
    judges_per_gpu: int | None = None
    isolation: str = "process"  # local executor: judge per process | thread
    judge: str = "sandbox"  # "sandbox" (the real judge) | "fake" (scripted, for demos/tests)
    # how each judge is built (DRKERNEL_INSECURE, DRKERNEL_SANDBOX_HIDE, DRKERNEL_SPARES; --insecure)
    judge_settings: JudgeSettings = JudgeSettings()
    max_queue: int = 10_000  # queued tasks beyond this get 429
    max_batch: int = 1000  # tasks per batch request (anchor: 100 on /evaluate/batch)
    max_body_bytes: int = MAX_SOURCE_BYTES  # 413 beyond (the judge's own limit on a source)
    max_code_bytes: int = 512 * 1024  # per reference/kernel source; 413 beyond
    retention_s: float = 7 * 24 * 3600.0  # finished tasks are deleted after this
    # POST /evaluate blocks until the result, as KernelGYM; a number bounds that wait, after which
    # it answers 200 with status pending/processing (the authors' client then polls /status)
    evaluate_wait_s: float | None = None
    max_wait_s: float = 60.0  # longest long-poll of the native API
    aging_s: float = 30.0  # a task waiting this long climbs one priority level
    max_attempts: int = 3  # dispatches per task across server restarts and worker deaths
    retry_after_s: int = 5  # Retry-After on 429
    durable: bool = False  # True: fsync every commit (synchronous=FULL), survives power loss
    devices: tuple[str, ...] | None = None  # local executor: e.g. ("cuda:0", "cuda:2"); None: all
    heartbeat_timeout_s: float = 15.0  # a judge (process or Ray actor) silent this long is frozen
    deadline_grace_s: float = 60.0  # watchdog: a judge silent past 3 x timeout + this is stuck
    dedupe_window_s: float = 60.0  # same code+options+client without task_id: one task (0: off)
    # the reference-timing cache all the server's judges share (the device's peaks, each problem's
    # reference times: measured once, with no candidate alive on the host, not once per judge);
    # None: the user's cache, as `drkernel eval`'s; "none": each judge keeps its own, in memory
    timing_cache: str | None = None

    def __post_init__(self) -> None:
        if self.executor not in ("local", "ray"):
            raise ConfigError(f"serve.executor: {self.executor!r} not in local|ray")
        if self.judge not in ("sandbox", "fake"):
            raise ConfigError(f"serve.judge: {self.judge!r} not in sandbox|fake")
        # `--db "$DB"` with DB unset: SQLite took "" for a private temporary file (nothing kept across a
        # restart) and the sandboxes were hidden the working folder; `--host ""` warned of serving beyond
        # loopback, then failed to resolve
        for name in ("db_path", "host"):
            if not getattr(self, name).strip():
                raise ConfigError(f"serve.{name}: empty" + (" (name a file; ':memory:' keeps nothing)"
                                                            if name == "db_path" else ""))
        if not is_header_value(self.auth_token or ""):
            # no Authorization header carries it (a newline kept from a file): every request was a 401
            raise ConfigError("DRKERNEL_AUTH_TOKEN: starts or ends with a space, or holds a newline or "
                              "another character no header takes (a newline kept from a file?)")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"serve.port: {self.port} out of range")
        for name in ("max_queue", "max_batch", "max_body_bytes", "max_code_bytes", "max_attempts"):
            if getattr(self, name) < 1:
                raise ConfigError(f"serve.{name}: must be >= 1")
        # each as `not x > 0` (not `x <= 0`), so that NaN is refused too; infinity is "never"
        for name, zero in (("retention_s", False), ("heartbeat_timeout_s", False),
                           ("deadline_grace_s", True), ("dedupe_window_s", True), ("evaluate_wait_s", True)):
            value = getattr(self, name)
            if value is not None and not (value >= 0 if zero else value > 0):
                raise ConfigError(f"serve.{name}: {value!r} is not a number of seconds "
                                  f"{'>= 0' if zero else '> 0'}")
        # a judge beats every heartbeat_timeout_s / 5 (a Ray actor answers a ping): below this, a beat late
        # by a moment read as frozen, and each judge was replaced as soon as it started, for ever
        if self.heartbeat_timeout_s < MIN_HEARTBEAT_TIMEOUT_S:
            raise ConfigError(f"serve.heartbeat_timeout_s: {self.heartbeat_timeout_s!r} is below "
                              f"{MIN_HEARTBEAT_TIMEOUT_S} s, less than a judge's heartbeats take")
        if self.devices is not None and (not self.devices or not all(
                d == "cpu" or (d.startswith("cuda:") and d[5:].isdigit()) for d in self.devices)):
            raise ConfigError(f"serve.devices: {','.join(self.devices)!r}: expected a comma "
                              "list of cuda:N (or cpu)")
        gpus = [int(d[5:]) for d in self.devices or () if d != "cpu"]
        if len(set(gpus)) < len(gpus):  # each entry became --judges-per-gpu judges, the GPU's slots as many
            raise ConfigError(f"serve.devices: {','.join(self.devices or ())!r} names a GPU twice (more "
                              "judges on one GPU: --judges-per-gpu)")
        if self.num_workers is not None and self.num_workers < 1:
            raise ConfigError("serve.num_workers: must be >= 1")
        if self.judges_per_gpu is not None and not 1 <= self.judges_per_gpu <= 16:
            raise ConfigError(f"serve.judges_per_gpu: {self.judges_per_gpu} not in 1..16")
        cache = self.timing_cache
        if cache is not None and (not cache.strip() or os.path.isdir(cache)):
            raise ConfigError(f"serve.timing_cache: {self.timing_cache!r} is a folder or empty: give the "
                              "cache's file, or none to keep each judge's in memory")
        if self.judges_per_gpu is not None and self.judges_per_gpu > 1 and self.executor == "ray":
            raise ConfigError("serve.judges_per_gpu: more than one judge per GPU needs the local executor "
                              "(a Ray actor holds a whole GPU)")

    @property
    def gpu_judges(self) -> int:
        """Judges per GPU, the default resolved: DEFAULT_JUDGES_PER_GPU on the local executor."""
        if self.judges_per_gpu is not None:
            return self.judges_per_gpu
        return 1 if self.executor == "ray" else DEFAULT_JUDGES_PER_GPU

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then `DRKERNEL_*` variables, then explicit overrides (None means unset)."""
        env = os.environ if environ is None else environ
        values = read_environment(_ENV, env)
        values["judge_settings"] = judge_settings_from_env(env)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def judges(self) -> JudgeSettings:
        """The judges' config: their shared reference-timing cache (`timing_cache`), and the task store
        hidden from every sandbox (other tasks' submissions and results are there)."""
        settings = self.judge_settings
        if settings.cache_path is None and self.timing_cache != "none":
            path = self.timing_cache or default_timing_cache()
            settings = settings.replace(cache_path=os.path.abspath(os.path.expanduser(path)))
        if self.db_path == ":memory:":
            return settings
        db = os.path.abspath(self.db_path)
        return settings.replace(hide=(*settings.hide, db, db + "-wal", db + "-shm"))

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def public(self) -> dict[str, Any]:
        """The settings with secrets masked, for logs and the status page."""
        data = dataclasses.asdict(self)
        data["auth_token"] = "***" if self.auth_token else None
        return data


def scrub_secrets(environ: MutableMapping[str, str] | None = None) -> None:
    """Remove secrets from the environment after they were read (children inherit nothing)."""
    env = os.environ if environ is None else environ
    for var in SECRET_VARS:
        env.pop(var, None)

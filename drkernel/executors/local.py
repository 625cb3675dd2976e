"""The local executor: a pool of warm judges on this machine, one per GPU (or N on the CPU).

Input: a batch of EvalRequests; output: their EvalResults in request order. One evaluation per
worker at a time (timing hygiene), one judge per GPU on the host (a lock file); a worker whose
judge breaks, dies or freezes is rebuilt and its task retried, a bounded number of times
(executors/pool.py). Judge processes die with the process that started them.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from drkernel.device import card_memory_bytes, is_device_name, judges_that_fit
from drkernel.errors import ConfigError
from drkernel.executors.judge_host import (
    JudgeFactory,
    JudgeHost,
    ProcessJudgeHost,
    ThreadJudgeHost,
    pool_judge,
    reap_orphan_judges,
)
from drkernel.executors.pool import Slot, SlotPool
from drkernel.settings import JudgeSettings
from drkernel.types import EvalRequest, EvalResult

__all__ = ["LocalExecutor", "detect_devices"]

log = logging.getLogger(__name__)


def _gpu_count() -> int:
    """Visible NVIDIA GPUs, without importing torch or touching CUDA in this process."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = Path("/proc/driver/nvidia/gpus")
    present = len(list(gpus.iterdir())) if gpus.is_dir() else 0
    if visible is None:
        return present
    entries = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    return min(len(entries), present) if present else 0


def _warn_if_crowded(devices: tuple[str, ...], judges_per_gpu: int) -> None:
    """Say so where `judges_per_gpu` judges are more than a GPU's memory holds (device.judges_that_fit):
    they all start, but a card they overfill makes out-of-memory failures of honest kernels."""
    for device in sorted({d for d in devices if d.startswith("cuda")}):
        total = card_memory_bytes(device)
        if total is not None and judges_per_gpu > judges_that_fit(total):
            log.warning("%d judges share %s, a GPU of %.0f GiB: it holds about %d at 2048^2 (one H100 80GB "
                        "judged every honest kernel with four, and ran out of memory with six; "
                        "docs/service.md). Expect infra_error where the card runs short.",
                        judges_per_gpu, device, total / (1 << 30), judges_that_fit(total))


def detect_devices(num_cpu_workers: int | None = None) -> tuple[str, ...]:
    """One device per visible GPU index, else `num_cpu_workers` CPU workers (default cores // 2)."""
    count = _gpu_count()
    if count:
        return tuple(f"cuda:{i}" for i in range(count))
    n = num_cpu_workers or max(1, (os.cpu_count() or 2) // 2)
    return ("cpu",) * n


class LocalExecutor(SlotPool):
    """A pool of judges in threads or processes; `evaluate` is thread-safe."""

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        devices: tuple[str, ...] | None = None  # None: detect_devices()
        num_cpu_workers: int | None = None  # CPU only, when devices is None
        isolation: str = "process"  # "process": each judge in its own process | "thread"
        max_attempts: int = 3  # tries per task when workers die under it
        start_timeout_s: float = 600.0
        acquire_timeout_s: float = 6 * 3600.0  # longest wait for a free worker
        deadline_factor: float = 3.0  # a judge silent past factor * timeout_s + grace is stuck
        deadline_grace_s: float = 60.0
        heartbeat_timeout_s: float = 15.0  # a judge process silent this long is frozen
        liveness_s: float = 5.0  # idle judges are checked this often, and replaced if dead (0: never)
        lifeline_buffer_bytes: int = 0  # a judge process's heartbeat socket buffer (0: the system's)
        judge_retries: int = 1  # extra tries after a frozen judge (a judge_error: judge.retries)
        revive_s: float = 30.0  # a worker that failed 3 starts is tried again this often
        gpu_lock_timeout_s: float = 30.0  # longest wait for another judge to free our GPU
        # judges sharing each GPU: their compiles and correctness overlap, their timing takes turns
        judges_per_gpu: int = 1
        scrub_env: tuple[str, ...] = ()  # env vars removed in judge processes (secrets)
        judge: JudgeSettings = JudgeSettings()  # how each judge is built
        # "all": the executor is built once every judge is up (or failed 3 starts); "first": once one
        # is, the others joining the queue as they come up (`drkernel serve`: ready sooner)
        ready: str = "all"

        def __post_init__(self) -> None:
            if self.isolation not in ("process", "thread"):
                raise ConfigError(f"executor.isolation: {self.isolation!r} not in process|thread")
            if self.max_attempts < 1:
                raise ConfigError("executor.max_attempts: must be >= 1")
            if self.judge_retries < 0:
                raise ConfigError("executor.judge_retries: must be >= 0")
            if self.heartbeat_timeout_s <= 0:
                raise ConfigError("executor.heartbeat_timeout_s: must be > 0")
            if self.liveness_s < 0:
                raise ConfigError("executor.liveness_s: must be >= 0")
            if self.devices is not None and not self.devices:
                raise ConfigError("executor.devices: empty")
            bad = [d for d in self.devices or () if not is_device_name(d)]
            if bad:  # else each judge failed its starts on it, once the command had set up the rest
                raise ConfigError(f"executor.devices: {bad[0]!r} is not cpu, cuda or cuda:N")
            if self.ready not in ("all", "first"):
                raise ConfigError(f"executor.ready: {self.ready!r} not in all|first")
            if not 1 <= self.judges_per_gpu <= 16:
                raise ConfigError(f"executor.judges_per_gpu: {self.judges_per_gpu} not in 1..16")

        def build(self, judge_factory: JudgeFactory | None = None) -> LocalExecutor:
            return LocalExecutor(self, judge_factory)

    def __init__(self, config: Config | None = None, judge_factory: JudgeFactory | None = None):
        self.config = config or LocalExecutor.Config()
        k = self.config.judges_per_gpu
        self._factory = judge_factory or pool_judge(self.config.judge, k)
        self.max_attempts = self.config.max_attempts
        self.judge_retries = self.config.judge_retries
        self.revive_s = self.config.revive_s
        self.liveness_s = self.config.liveness_s
        self.acquire_timeout_s = self.config.acquire_timeout_s
        self.deadline_factor = self.config.deadline_factor
        self.deadline_grace_s = self.config.deadline_grace_s
        if self.config.isolation == "process":
            reap_orphan_judges()  # a crashed server's stopped judges, before ours start
        devices = self.config.devices or detect_devices(self.config.num_cpu_workers)
        if k > 1:
            _warn_if_crowded(devices, k)
        devices = tuple(d for d in devices for _ in range(k if d.startswith("cuda") else 1))
        self._init_pool([Slot(f"local-{i}", d) for i, d in enumerate(devices)],
                        first_ready=self.config.ready == "first")

    def _spawn(self, slot: Slot) -> JudgeHost:
        device, name = slot.state.device, slot.state.worker_id
        host: JudgeHost
        if self.config.isolation == "thread":
            host = ThreadJudgeHost(self._factory, device, name, self.config.gpu_lock_timeout_s,
                                   gpu_slots=self.config.judges_per_gpu)
        else:
            host = ProcessJudgeHost(
                self._factory, device, name, self.config.start_timeout_s, self.config.scrub_env,
                heartbeat_timeout_s=self.config.heartbeat_timeout_s,
                lock_timeout_s=self.config.gpu_lock_timeout_s, gpu_slots=self.config.judges_per_gpu,
                lifeline_sndbuf=self.config.lifeline_buffer_bytes,
            )
        slot.state.pid = host.pid
        return host

    def _call(self, slot: Slot, request: EvalRequest, deadline_s: float) -> EvalResult:
        host: JudgeHost = slot.handle
        return host.evaluate(request, deadline_s)

    def _kill(self, handle: JudgeHost) -> bool:
        return handle.kill()

    def _dispose(self, handle: JudgeHost) -> None:
        handle.close()

    def _check(self, handle: JudgeHost) -> str | None:
        return handle.check()

    def __enter__(self) -> LocalExecutor:
        return self

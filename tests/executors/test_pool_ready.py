"""When a pool is ready: once every worker has started ("all", the default), or once the first has
("first", what `drkernel serve` uses, so that a service of four GPU judges answers as soon as one
can judge). The workers still starting join the queue as they come up, and a pool closed meanwhile
leaks none of them."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from drkernel.errors import WorkerLost
from drkernel.executors.fake_judge import fake_judge
from drkernel.executors.local import LocalExecutor
from drkernel.executors.pool import Slot, SlotPool
from drkernel.server.ops import anchor_health_status, health_status
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult


class _Pool(SlotPool):
    """Workers that take `delays[i]` seconds to start (None: never start)."""

    revive_s = 0.0
    liveness_s = 0.0

    def __init__(self, delays: list[float | None], first_ready: bool) -> None:
        self.delays = delays
        self.disposed: list[int] = []
        self.gate = threading.Event()  # set: the slow starts may finish
        started = time.monotonic()
        self._init_pool([Slot(f"w{i}", "cpu") for i in range(len(delays))], first_ready=first_ready)
        self.ready_s = time.monotonic() - started

    def _spawn(self, slot: Slot) -> Any:
        i = int(slot.state.worker_id[1:])
        delay = self.delays[i]
        if delay is None:
            raise RuntimeError("this worker cannot start")
        if delay > 0:
            self.gate.wait(delay)
        return i

    def _call(self, slot: Slot, request: EvalRequest, deadline_s: float) -> EvalResult:
        return EvalResult(outcome=EvalOutcome.OK, task_id=request.task_id)

    def _kill(self, handle: Any) -> bool:
        return True

    def _dispose(self, handle: Any) -> None:
        self.disposed.append(handle)

    def _check(self, handle: Any) -> str | None:
        return None


def _states(pool: _Pool) -> list[str]:
    return [s.state.state for s in pool._slots]


def test_a_first_ready_pool_answers_once_one_worker_is_up_and_the_rest_join_later() -> None:
    pool = _Pool([0.0, 5.0, 5.0], first_ready=True)
    try:
        assert pool.ready_s < 2.0, pool.ready_s
        assert sorted(_states(pool)) == ["idle", "starting", "starting"]
        (res,) = pool.evaluate([EvalRequest(reference_code="r", kernel_code="k", task_id="a")])
        assert res.outcome is EvalOutcome.OK and res.device.worker_id == "w0"
        pool.gate.set()  # the slow ones come up now
        deadline = time.monotonic() + 5
        while _states(pool) != ["idle"] * 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _states(pool) == ["idle"] * 3
    finally:
        pool.close()


def test_an_all_ready_pool_waits_for_every_worker() -> None:
    pool = _Pool([0.0, 0.3, 0.3], first_ready=False)
    try:
        assert pool.ready_s >= 0.3 and _states(pool) == ["idle"] * 3
    finally:
        pool.close()


def test_workers_that_come_up_after_close_are_disposed_not_leaked() -> None:
    pool = _Pool([0.0, 5.0], first_ready=True)
    pool.close()
    pool.gate.set()
    deadline = time.monotonic() + 5
    while 1 not in pool.disposed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(pool.disposed) == [0, 1] and _states(pool) == ["dead", "dead"]


def test_a_first_ready_pool_where_no_worker_starts_says_so() -> None:
    started = time.monotonic()
    with pytest.raises(WorkerLost, match="no judge worker could be started"):
        _Pool([None, None], first_ready=True)
    assert time.monotonic() - started < 10  # three quick tries each (0.5 + 1 s of back-off), no hang


def test_no_worker_started_says_why_in_the_same_line() -> None:
    """`drkernel serve --devices cuda:0` on a host without a GPU ended, after a minute of warnings, in
    'no judge worker could be started', the reason left in the warnings above it."""
    with pytest.raises(WorkerLost) as info:
        _Pool([None, None], first_ready=False)
    assert str(info.value) == ("no judge worker could be started (w0: start failed: this worker cannot "
                               "start)")


def test_the_local_executor_takes_the_setting_and_refuses_others() -> None:
    config = LocalExecutor.Config(devices=("cpu", "cpu"), isolation="thread", ready="first")
    with config.build(fake_judge) as ex:
        (res,) = ex.evaluate([EvalRequest(reference_code="r", kernel_code="# fake: speedup=2", task_id="t",
                                          options=EvalOptions(timeout_s=30.0))])
        assert res.outcome is EvalOutcome.OK
    from drkernel.errors import ConfigError
    with pytest.raises(ConfigError, match="executor.ready"):
        LocalExecutor.Config(ready="some")


def test_health_while_judges_start_is_starting_not_degraded() -> None:
    starting = {"configured": 4, "alive": 1, "starting": 3, "dead": 0, "restarting": 0}
    assert health_status(starting) == "starting" and anchor_health_status(starting) == "healthy"
    lost = {"configured": 4, "alive": 1, "starting": 1, "dead": 2, "restarting": 0}
    assert health_status(lost) == "degraded"
    assert health_status({"configured": 4, "alive": 4, "starting": 0}) == "healthy"
    assert health_status({"configured": 4, "alive": 0, "starting": 4}) == "unhealthy"

"""Scheduler: priorities with aging, bounded queue, recovery from the store, bounded attempts."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from drkernel.errors import ExecutorError, Overloaded
from drkernel.executors.fake import FakeExecutor, scripted_result
from drkernel.server.scheduler import Scheduler, ShuttingDown, TaskQueue
from drkernel.server.settings import Settings
from drkernel.server.store import NewTask, TaskStore
from drkernel.types import EvalOutcome, EvalRequest, EvalResult


def task(task_id: str, priority: str = "normal") -> NewTask:
    return NewTask(EvalRequest(reference_code="r", kernel_code="# fake: speedup=2",
                               task_id=task_id), priority)


def test_priorities_order_the_queue_and_aging_prevents_starvation() -> None:
    q = TaskQueue(aging_s=10.0)
    q.push("low-old", "low", 0.0)
    q.push("normal", "normal", 15.0)
    q.push("high", "high", 19.0)
    q.push("high-later", "high", 25.0)
    # keys: low-old 20, normal 25, high 19, high-later 25 -> the old low task beats newer work
    assert q.position("low-old") == 1
    assert [q.pop() for _ in range(4)] == ["high", "low-old", "normal", "high-later"]
    assert q.pop() is None


def test_removed_tasks_are_skipped_and_depth_is_per_priority() -> None:
    q = TaskQueue(aging_s=1.0)
    for i, p in enumerate(["high", "normal", "normal", "low"]):
        q.push(f"t{i}", p, float(i))
    assert q.remove("t1") and not q.remove("t1")
    assert q.depth() == {"high": 1, "normal": 1, "low": 1} and len(q) == 3
    assert [q.pop() for _ in range(3)] == ["t0", "t2", "t3"]


def scheduler(tmp_path: Path, **kw: object) -> Scheduler:
    settings = Settings(db_path=str(tmp_path / "s.db"), **kw)  # type: ignore[arg-type]
    return Scheduler(TaskStore(settings.db_path), FakeExecutor(), settings)


def test_the_queue_is_bounded(tmp_path: Path) -> None:
    s = scheduler(tmp_path, max_queue=2)  # not started: nothing is dispatched
    s.submit([task("a"), task("b")])
    with pytest.raises(Overloaded):
        s.submit([task("c")])
    assert s.store.get("c") is None and s.counters["rejected"] == 1


def test_a_full_queue_still_answers_a_batch_sent_again(tmp_path: Path) -> None:
    """A client that lost the answer to its batch sends it again (the ids are its own, so it is safe);
    with the queue full, its own queued tasks counted again and it got 429 until it gave up, while they
    ran with nobody waiting for them."""
    s = scheduler(tmp_path, max_queue=2)  # not started: nothing is dispatched
    s.submit([task("a"), task("b")])
    again = s.submit([task("a"), task("b")])
    assert [(r.task_id, created) for r, created in again] == [("a", False), ("b", False)]
    with pytest.raises(Overloaded):  # one new task among them still needs room
        s.submit([task("a"), task("c")])
    assert s.store.get("c") is None and len(s.queue) == 2


def test_a_restart_runs_what_was_queued_or_running(tmp_path: Path) -> None:
    store = TaskStore(str(tmp_path / "s.db"))
    store.submit([task("was-running"), task("was-queued")])
    store.mark_running("was-running")  # the server died here
    store.close()
    s = scheduler(tmp_path)
    s.start()
    try:
        records = asyncio.run(s.wait(["was-running", "was-queued"], 10))
    finally:
        s.stop()
    assert {r.state for r in records.values()} == {"done"}
    assert records["was-running"].attempts == 2 and s.counters["recovered"] == 2


class StoppableExecutor(FakeExecutor):
    """Evaluates until it is closed, as a pool does when the server stops: then raises ExecutorError."""

    def __init__(self) -> None:
        super().__init__()
        self.started = threading.Event()
        self.closed = threading.Event()

    def evaluate(self, requests: list[EvalRequest]) -> list[EvalResult]:
        self.started.set()
        self.closed.wait(30)
        raise ExecutorError("the pool is closed")

    def close(self) -> None:
        self.closed.set()


def test_polite_stops_while_a_task_runs_never_give_it_up(tmp_path: Path) -> None:
    """Three polite restarts (SIGTERM) while a long task ran ended it infra_error / gave_up, 'interrupted 3
    times (worker or server crashes)': each stop counted as a crash the task had caused. The task also stayed
    `running` when the stop outlasted its join, and the next start took that for a crash too."""
    db = str(tmp_path / "s.db")
    settings = Settings(db_path=db, max_attempts=3)
    for _ in range(4):
        executor = StoppableExecutor()
        s = Scheduler(TaskStore(db), executor, settings)
        if not s.store.get("long"):
            s.store.submit([task("long")])
        s.start()
        assert executor.started.wait(10)
        s.stop(timeout_s=0.2)  # as the app's shutdown: the scheduler first, then the executor
        executor.close()
        record = s.store.get("long")
        s.store.close()
        assert record is not None and record.state == "queued", record
    s = scheduler(tmp_path, max_attempts=3)
    s.start()
    try:
        record = asyncio.run(s.wait(["long"], 10))["long"]
    finally:
        s.stop()
    assert record.result is not None and record.result.outcome is EvalOutcome.OK, record.result
    assert record.attempts == 5 and record.meta["stopped"] == 4


def test_a_queued_task_of_an_unknown_priority_is_run_not_a_failed_start(tmp_path: Path) -> None:
    """A queued row whose priority this version does not know (written by another one) made the start
    raise ValueError ('critical' is not in list): the server did not start, on any restart."""
    store = TaskStore(str(tmp_path / "s.db"))
    store.submit([task("odd")])
    with store._lock:
        store._db.execute("UPDATE tasks SET priority='critical' WHERE task_id='odd'")
    store.close()
    s = scheduler(tmp_path)
    s.start()
    try:
        record = asyncio.run(s.wait(["odd"], 10))["odd"]
    finally:
        s.stop()
    assert record.state == "done" and record.result is not None and record.result.outcome is EvalOutcome.OK


def test_a_task_that_keeps_killing_the_server_is_given_up(tmp_path: Path) -> None:
    store = TaskStore(str(tmp_path / "s.db"))
    store.submit([task("poison")])
    for _ in range(3):  # three crashes while it ran
        store.mark_running("poison")
        store.requeue_interrupted()
    store.close()
    s = scheduler(tmp_path, max_attempts=3)
    s.start()
    try:
        record = asyncio.run(s.wait(["poison"], 10))["poison"]
    finally:
        s.stop()
    assert record.result and record.result.outcome is EvalOutcome.INFRA_ERROR
    assert record.result.error and record.result.error.kind == "gave_up"


def test_wait_is_bounded_and_returns_unfinished_records(tmp_path: Path) -> None:
    s = scheduler(tmp_path)  # never started: the task stays queued
    s.submit([task("stuck")])
    started = time.monotonic()
    records = asyncio.run(s.wait(["stuck", "unknown"], 0.2))
    assert 0.15 < time.monotonic() - started < 2
    assert records["stuck"].state == "queued" and "unknown" not in records
    assert not s._waiters  # nothing left registered


def test_a_stopping_server_ends_its_waits_at_once_and_refuses_new_ones(tmp_path: Path) -> None:
    """close_waits (SIGTERM): a pending wait raises ShuttingDown now, not at its deadline, and so does a new
    one; a wait for finished tasks, or one that asks no wait, still answers."""
    s = scheduler(tmp_path)  # never started: the task stays queued
    s.submit([task("stuck"), task("gone")])
    s.cancel("gone")

    async def stop_while_waiting() -> float:
        started = time.monotonic()
        waiting = asyncio.ensure_future(s.wait(["stuck"], 30.0))
        await asyncio.sleep(0.1)
        s.close_waits()
        with pytest.raises(ShuttingDown):
            await waiting
        return time.monotonic() - started

    assert asyncio.run(stop_while_waiting()) < 2
    with pytest.raises(ShuttingDown):
        asyncio.run(s.wait(["stuck"], 30.0))
    assert asyncio.run(s.wait(["gone"], 30.0))["gone"].state == "cancelled"
    assert asyncio.run(s.wait(["stuck"], 0.0))["stuck"].state == "queued"
    assert not s._waiters


class _BrokenExecutor(FakeExecutor):
    """An executor with a bug: it raises what no executor should (not an ExecutorError)."""

    def evaluate(self, requests: list[EvalRequest]) -> list[object]:  # type: ignore[override]
        raise OverflowError("timestamp out of range for platform time_t")


def test_a_dispatch_that_raises_ends_its_task_as_infra_error_not_running_for_ever(tmp_path: Path) -> None:
    """A bug in the executor left the task `running` for ever: its waiters waited to their deadline,
    /evaluate blocked, and each restart re-queued it to fail the same way."""
    settings = Settings(db_path=str(tmp_path / "s.db"))
    s = Scheduler(TaskStore(settings.db_path), _BrokenExecutor(), settings)
    s.start()
    try:
        s.submit([task("doomed")])
        started = time.monotonic()
        record = asyncio.run(s.wait(["doomed"], 10))["doomed"]
    finally:
        s.stop()
    assert time.monotonic() - started < 5
    assert record.state == "done" and record.result is not None
    assert record.result.outcome is EvalOutcome.INFRA_ERROR and record.result.error is not None
    assert record.result.error.kind == "dispatch_error"
    assert "OverflowError: timestamp out of range" in record.result.error.message
    assert s.counters["dispatch_errors"] == 1 and s.outcomes["infra_error"] == 1


def test_tasks_submitted_together_have_distinct_queue_positions() -> None:
    """A batch shares one submit time, so one key: every task of it said queue_position 0 (the
    heap broke the tie by arrival, the position did not)."""
    q = TaskQueue(aging_s=30.0)
    for name in ("a", "b", "c"):
        q.push(name, "normal", 100.0)
    q.push("urgent", "high", 100.0)
    assert [q.position(n) for n in ("urgent", "a", "b", "c")] == [0, 1, 2, 3]
    assert [q.pop() for _ in range(4)] == ["urgent", "a", "b", "c"]


def test_a_forced_rerun_of_a_cancelled_task_gets_its_own_result_not_the_cancelled_runs(
        tmp_path: Path) -> None:
    """Cancel a running task whose evaluation cannot be interrupted, then force it again with new
    code: the cancelled run's late result (of the old code) was stored as the re-run's, which never ran."""
    release = threading.Event()

    def handler(request: EvalRequest) -> EvalResult:
        if "old" in request.kernel_code:
            release.wait(10)  # the cancelled evaluation runs on
        return scripted_result(request)

    settings = Settings(db_path=str(tmp_path / "s.db"))
    s = Scheduler(TaskStore(settings.db_path), FakeExecutor(handler), settings)
    s.start()
    try:
        old = EvalRequest(reference_code="r", kernel_code="# old\n# fake: incorrect", task_id="t")
        s.submit([NewTask(old)])
        deadline = time.monotonic() + 5
        while s.store.get("t").state != "running":  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert s.cancel("t") == "running"
        new = EvalRequest(reference_code="r", kernel_code="# new\n# fake: speedup=2", task_id="t")
        s.submit([NewTask(new, force=True)])
        release.set()
        deadline = time.monotonic() + 5
        while (record := s.store.get("t")) is None or record.state != "done" or s.running():
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        release.set()
        s.stop()
    assert record.attempts == 1 and record.request.kernel_code.startswith("# new")
    assert record.result is not None and record.result.outcome is EvalOutcome.OK
    assert record.result.speedup == 2.0


class _FullDiskStore(TaskStore):
    """A store whose first `fail` writes of one kind find the disk full, as SQLite says it."""

    def __init__(self, path: str, method: str, fail: int) -> None:
        super().__init__(path)
        self.failures = {method: fail}

    def _fail(self, method: str) -> None:
        if self.failures.get(method, 0) > 0:
            self.failures[method] -= 1
            with self._tx():
                raise sqlite3.OperationalError("database or disk is full")

    def finish(self, *args: Any, **kw: Any) -> bool:
        self._fail("finish")
        return super().finish(*args, **kw)

    def purge(self, finished_before: float) -> int:
        self._fail("purge")
        return super().purge(finished_before)


def test_a_result_is_kept_when_the_disk_is_full_for_a_while(tmp_path: Path) -> None:
    """A full disk when the result was written: the evaluation's result was dropped and the task
    ended infra_error / dispatch_error (or stayed running, its waiters waiting); now the write is
    tried again until there is room."""
    settings = Settings(db_path=str(tmp_path / "s.db"))
    executor = FakeExecutor()
    s = Scheduler(_FullDiskStore(settings.db_path, "finish", 2), executor, settings)
    s.start()
    try:
        s.submit([task("kept")])
        record = asyncio.run(s.wait(["kept"], 15))["kept"]
    finally:
        s.stop()
    assert record.state == "done" and record.result is not None
    assert record.result.outcome is EvalOutcome.OK and record.result.speedup == 2.0
    assert len(executor.calls) == 1 and s.counters["dispatch_errors"] == 0


def test_retention_goes_on_after_a_purge_that_found_the_disk_full(tmp_path: Path) -> None:
    """The purge thread died at its first failed delete: nothing was purged again until a restart."""
    settings = Settings(db_path=str(tmp_path / "s.db"), retention_s=4.0)  # a purge every second
    store = _FullDiskStore(settings.db_path, "purge", 1)
    store.submit([task("old")])
    store.mark_running("old")
    store.finish("old", EvalResult(outcome=EvalOutcome.OK))
    s = Scheduler(store, FakeExecutor(), settings)
    s.start()
    try:
        deadline = time.monotonic() + 10
        while store.get("old") is not None:
            assert time.monotonic() < deadline, "the finished task was never purged"
            time.sleep(0.1)
    finally:
        s.stop()
    assert store.failures["purge"] == 0 and s.counters["purged"] == 1


def test_a_stored_request_this_version_cannot_read_ends_instead_of_running_for_ever(tmp_path: Path) -> None:
    """A queued task written by a newer version (an option this one does not know) failed its dispatch,
    and ending it read the request again and failed too: it stayed `running`, its waiters waited to
    their deadline, and every restart did the same."""
    import json

    s = scheduler(tmp_path)
    s.store.submit([task("from-newer")])
    request = json.loads(s.store.get("from-newer").request_json)  # type: ignore[union-attr]
    request["options"]["future_knob"] = 3
    with s.store._lock:
        s.store._db.execute("UPDATE tasks SET request=? WHERE task_id='from-newer'", (json.dumps(request),))
    s.start()
    try:
        record = asyncio.run(s.wait(["from-newer"], 10))["from-newer"]
    finally:
        s.stop()
    assert record.state == "done" and record.result is not None, record.state
    assert record.result.outcome is EvalOutcome.INFRA_ERROR and record.result.error is not None
    assert record.result.error.kind == "dispatch_error" and "future_knob" in record.result.error.message

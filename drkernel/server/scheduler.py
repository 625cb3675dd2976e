"""The scheduler: a bounded priority queue with aging, dispatch threads (one per worker), waits.

Input: tasks already committed to the store; output: results committed to the store, waiters
woken, counters for /metrics. A dispatch thread owns one task at a time, so a pool of N workers
sees at most N evaluations; on restart the queue is rebuilt from the store.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from drkernel.errors import ExecutorError, Overloaded
from drkernel.executors.base import Executor
from drkernel.executors.pool import infra_result
from drkernel.server.anchor import error_code
from drkernel.server.settings import Settings
from drkernel.server.store import NewTask, StoreUnavailable, TaskRecord, TaskStore
from drkernel.types import EvalOutcome, EvalResult

__all__ = ["PRIORITIES", "Scheduler", "ShuttingDown", "TaskQueue"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

PRIORITIES = ("high", "normal", "low")


class ShuttingDown(Exception):
    """A wait the server ended because it is stopping: the tasks are kept, a restarted server answers."""


class TaskQueue:
    """Priority queue with aging: key = enqueue time + rank * aging_s (static, so a heap works).

    A low task that has waited 2 * aging_s longer than a high one goes first: no starvation.
    """

    def __init__(self, aging_s: float) -> None:
        self.aging_s = aging_s
        self._heap: list[tuple[float, int, str]] = []
        self._live: dict[str, tuple[float, int, str]] = {}  # task_id -> (key, arrival, priority)
        self._seq = itertools.count()

    def push(self, task_id: str, priority: str, enqueued_at: float) -> None:
        key = enqueued_at + PRIORITIES.index(priority) * self.aging_s
        seq = next(self._seq)
        self._live[task_id] = (key, seq, priority)
        heapq.heappush(self._heap, (key, seq, task_id))

    def pop(self) -> str | None:
        while self._heap:
            key, seq, task_id = heapq.heappop(self._heap)
            if self._live.get(task_id, (None, None))[:2] == (key, seq):
                del self._live[task_id]
                return task_id
        return None

    def remove(self, task_id: str) -> bool:
        return self._live.pop(task_id, None) is not None  # its heap entry is skipped on pop

    def position(self, task_id: str) -> int | None:
        if task_id not in self._live:
            return None
        mine = self._live[task_id][:2]  # (key, arrival): the heap's order, ties included
        return sum(1 for k, s, _ in self._live.values() if (k, s) < mine)

    def depth(self) -> dict[str, int]:
        counts = Counter(p for _, _, p in self._live.values())
        return {p: counts.get(p, 0) for p in PRIORITIES}

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._live


class Scheduler:
    """Feeds the executor from the store; thread-safe; async-friendly waits."""

    def __init__(self, store: TaskStore, executor: Executor, settings: Settings) -> None:
        self.store = store
        self.executor = executor
        self.settings = settings
        self.queue = TaskQueue(settings.aging_s)
        self._cv = threading.Condition()
        self._running: dict[str, float] = {}  # task_id -> start time
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}
        self._stop = threading.Event()
        self._closing = False  # stopping: waits for unfinished tasks raise ShuttingDown
        self._threads: list[threading.Thread] = []
        self.started_at = time.time()
        self.counters: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.error_codes: Counter[str | None] = Counter()  # the anchor's error_code of each finished task
        self.eval_seconds = 0.0
        if hasattr(executor, "on_attempt"):  # a worker pool: record each try and where it runs
            executor.on_attempt = self._on_attempt

    @property
    def capacity(self) -> int:
        return int(getattr(self.executor, "capacity", self.settings.num_workers or 1))

    def start(self) -> None:
        """Recover from the store (interrupted tasks re-queued), then start dispatching."""
        requeued = self.store.requeue_interrupted()
        queued = self.store.queued()
        with self._cv:
            for task_id, priority, submitted_at in queued:
                # a priority of another version ("critical") failed the start with a ValueError traceback
                self.queue.push(task_id, priority if priority in PRIORITIES else "normal", submitted_at)
        if queued:
            logger.info("recovered %d queued tasks (%d were interrupted)", len(queued), requeued)
        self.counters["recovered"] += len(queued)
        for i in range(self.capacity):
            t = threading.Thread(target=self._dispatch_loop, name=f"dispatch-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        purge = threading.Thread(target=self._purge_loop, name="purge", daemon=True)
        purge.start()
        self._threads.append(purge)

    def close_waits(self) -> None:
        """The server begins to stop: every pending wait raises ShuttingDown now, and so does each new one
        for a task not finished (uvicorn held a long poll 30 s before the drain, then answered 500)."""
        with self._cv:
            self._closing = True
            waiters = [w for ws in self._waiters.values() for w in ws]
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_resolve, fut)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Drain: running tasks get up to `timeout_s` to finish (it returns as soon as they have), then
        go back to the queue."""
        self.close_waits()
        self._stop.set()
        with self._cv:
            self._cv.notify_all()
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        with self._cv:
            running = list(self._running)
        for task_id in running:  # still evaluating: back to the queue as stopped, before the store closes
            try:
                self.store.requeue(task_id)
            except StoreUnavailable:  # left running: the next start re-queues it
                logger.warning("could not re-queue %s as the server stopped", task_id)

    # -- submission and cancellation ------------------------------------------------------------
    def submit(self, tasks: list[NewTask]) -> list[tuple[TaskRecord, bool]]:
        """Persist, then queue. Raises Overloaded when the queue cannot take them all."""
        with self._cv:
            # a task id already stored is answered by its task and queues nothing (a client re-sending a
            # batch whose answer it lost): only the others count against the bound
            stored = self.store.get_many([str(t.request.task_id) for t in tasks if not t.force])
            fresh = sum(1 for t in tasks if t.force or t.request.task_id not in stored)
            if fresh and len(self.queue) + fresh > self.settings.max_queue:
                self.counters["rejected"] += len(tasks)
                raise Overloaded(f"queue full ({len(self.queue)}/{self.settings.max_queue} tasks)")
            out = self.store.submit(tasks)
            for record, created in out:
                if created:
                    self.queue.push(record.task_id, record.priority, record.submitted_at)
                    self.counters["submitted"] += 1
            self._cv.notify_all()
        return out

    def cancel(self, task_id: str) -> str | None:
        """Cancel: a queued task leaves the queue; a running one has its worker killed."""
        with self._cv:
            self.queue.remove(task_id)
            prior = self.store.cancel(task_id)
        if prior == "running":
            cancel = getattr(self.executor, "cancel", None)
            if callable(cancel) and not cancel(task_id):
                logger.info("task %s cancelled; its evaluation could not be interrupted", task_id)
        if prior in ("queued", "running"):
            self.counters["cancelled"] += 1
            self._notify(task_id)
        return prior

    def position(self, task_id: str) -> int | None:
        with self._cv:
            return self.queue.position(task_id)

    def depth(self) -> dict[str, int]:
        with self._cv:
            return self.queue.depth()

    def running(self) -> int:
        with self._cv:
            return len(self._running)

    def _on_attempt(self, task_id: str, placement: dict[str, Any], attempt: int,
                    why: str | None) -> bool:
        """The executor gave the task to a worker (attempt 1) or retried it (2, 3, ...).
        False (do not run it) when the task was cancelled meanwhile."""
        if attempt > 1:
            self.counters["executor_retries"] += 1
        return self.store.record_attempt(task_id, placement, retry=attempt > 1, why=why)

    # -- dispatch ---------------------------------------------------------------------------------
    def _next(self) -> str | None:
        with self._cv:
            while not self._stop.is_set():
                task_id = self.queue.pop()
                if task_id is not None:
                    self._running[task_id] = time.time()
                    return task_id
                self._cv.wait(timeout=1.0)
        return None

    def _dispatch_loop(self) -> None:
        while (task_id := self._next()) is not None:
            try:
                self._run(task_id)
            except Exception as exc:  # process edge of a dispatch thread: never let one task kill it
                logger.exception("dispatching %s failed", task_id)
                self.counters["dispatch_errors"] += 1
                try:
                    self._give_up(task_id, exc)
                except Exception:  # the store failing too: the task stays for the next start
                    logger.exception("could not end %s after its dispatch failed", task_id)
            finally:
                with self._cv:
                    self._running.pop(task_id, None)
                self._notify(task_id)

    def _stored(self, what: str, write: Callable[[], T]) -> T:
        """A store write the task cannot go on without, tried again while the store cannot commit (a
        full disk): a result waits in memory until there is room. Raises if the server stops meanwhile
        (a task left queued or running is re-queued at the next start)."""
        delay = 0.5
        while True:
            try:
                return write()
            except StoreUnavailable as exc:
                logger.error("%s: %s; trying again in %.1f s", what, exc, delay)
                if self._stop.wait(delay):
                    raise
            delay = min(2 * delay, 30.0)

    def _run(self, task_id: str) -> None:
        record = self._stored(f"starting {task_id}", lambda: self.store.mark_running(task_id))
        if record is None:  # cancelled while queued
            return
        request = record.request
        # a try the server stopped politely (SIGTERM, a restart) is none of the task's doing: only the
        # others count (three restarts while a long task ran gave it up as a poison task)
        tries = record.attempts - int(record.meta.get("stopped", 0))
        if tries > self.settings.max_attempts:
            result = infra_result(request, "gave_up", f"task interrupted {tries - 1} "
                                  "times (worker or server crashes); not retried again")
            self._finish(task_id, result, 0.0, record.seq)
            return
        started = time.monotonic()
        try:
            result = self.executor.evaluate([request])[0]
        except ExecutorError as exc:
            if self._stop.is_set():  # shutting down: leave it for the next start
                self.store.requeue(task_id)
                return
            result = infra_result(request, "executor_error", str(exc))
        self._finish(task_id, result, time.monotonic() - started, record.seq)

    def _give_up(self, task_id: str, exc: Exception) -> None:
        """A dispatch that raised: the task ends as infra_error, never `running` for ever (its waiters
        would wait to their deadline, and each restart would re-queue it to fail the same way)."""
        if self._stop.is_set():  # shutting down (the store may be closed): the next start re-queues it
            return
        record = self.store.get(task_id)
        if record is None or record.finished:
            return
        message = f"the server could not dispatch this task: {type(exc).__name__}: {exc}"
        # not from record.request: a request this version cannot read (an option of a newer one) is
        # what failed, and reading it again here left the task running for ever
        self._finish(task_id, EvalResult.failure(EvalOutcome.INFRA_ERROR, "dispatch_error", message,
                                                 task_id=task_id), 0.0)

    def _finish(self, task_id: str, result: EvalResult, seconds: float, seq: int | None = None) -> None:
        result.task_id = task_id
        if self._stored(f"storing the result of {task_id}", lambda: self.store.finish(task_id, result, seq)):
            self.counters["finished"] += 1
            self.outcomes[result.outcome.value] += 1
            self.error_codes[error_code(result.outcome, result.error.kind if result.error else "")] += 1
            self.eval_seconds += seconds

    def _purge_loop(self) -> None:
        period = max(1.0, min(60.0, self.settings.retention_s / 4))
        while not self._stop.wait(period):
            try:
                n = self.store.purge(time.time() - self.settings.retention_s)
            except StoreUnavailable as exc:  # a full disk: purge next time, never stop purging
                logger.warning("purging finished tasks: %s", exc)
                continue
            if n:
                logger.info("purged %d tasks past retention", n)
                self.counters["purged"] += n

    # -- waiting ----------------------------------------------------------------------------------
    def _notify(self, task_id: str) -> None:
        with self._cv:
            waiters = self._waiters.pop(task_id, [])
        for loop, fut in waiters:
            loop.call_soon_threadsafe(_resolve, fut)

    async def wait(self, task_ids: list[str], timeout_s: float) -> dict[str, TaskRecord]:
        """Wait (bounded) until every known task is finished; returns the latest records."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while True:
            futures = self._register(loop, task_ids)
            try:
                records = self.store.get_many(task_ids)
                pending = [futures[t] for t in task_ids if t in records and not records[t].finished]
                remaining = deadline - loop.time()
                if not pending or remaining <= 0:
                    return records
                if self._closing:
                    raise ShuttingDown("the server is shutting down; its tasks are kept: ask again")
                await asyncio.wait(pending, timeout=remaining)
            finally:
                self._unregister(futures)

    def _register(self, loop: asyncio.AbstractEventLoop,
                  task_ids: list[str]) -> dict[str, asyncio.Future[None]]:
        futures: dict[str, asyncio.Future[None]] = {}
        with self._cv:
            for task_id in dict.fromkeys(task_ids):
                fut: asyncio.Future[None] = loop.create_future()
                futures[task_id] = fut
                self._waiters.setdefault(task_id, []).append((loop, fut))
        return futures

    def _unregister(self, futures: dict[str, asyncio.Future[None]]) -> None:
        with self._cv:
            for task_id, fut in futures.items():
                waiters = self._waiters.get(task_id)
                if waiters is None:
                    continue
                waiters[:] = [w for w in waiters if w[1] is not fut]
                if not waiters:
                    del self._waiters[task_id]


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)

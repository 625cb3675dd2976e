"""The worker-pool core shared by the local and Ray executors: slots, dispatch, retry, cancel.

Input: EvalRequests from any number of caller threads; output: EvalResults in request order.
One evaluation per slot at a time; a slot whose worker dies is restarted in the background and the
task retried on the next free slot (bounded); after that the task gets an INFRA_ERROR result.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from drkernel.errors import EvalTimeout, ExecutorError, WorkerLost
from drkernel.types import EvalOutcome, EvalRequest, EvalResult

__all__ = ["Slot", "SlotPool", "WorkerState", "infra_result"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class WorkerState:
    """What /workers/status and /metrics report for one worker."""

    worker_id: str
    device: str
    state: str = "starting"  # starting | idle | busy | restarting | dead
    current_task: str | None = None
    tasks_done: int = 0
    restarts: int = 0
    pid: int | None = None
    last_change: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id, "device": self.device, "state": self.state,
            "current_task": self.current_task, "tasks_done": self.tasks_done,
            "restarts": self.restarts, "pid": self.pid, "last_change": self.last_change,
        }


def infra_result(request: EvalRequest, kind: str, message: str) -> EvalResult:
    """The result of a task the machinery could not judge: not the candidate's fault."""
    return EvalResult.failure(EvalOutcome.INFRA_ERROR, kind, message, task_id=request.task_id)


class Slot:
    """One worker of a pool: its handle (a judge host or a Ray actor) and its public state."""

    def __init__(self, worker_id: str, device: str) -> None:
        self.state = WorkerState(worker_id=worker_id, device=device)
        self.handle: Any = None

    def set(self, state: str, task: str | None = None) -> None:
        self.state.state = state
        self.state.current_task = task
        self.state.last_change = time.time()


class SlotPool:
    """Dispatch over slots. Subclasses provide `_spawn`, `_call`, `_kill` and `_dispose`."""

    max_attempts: int = 3
    acquire_timeout_s: float = 6 * 3600.0
    deadline_factor: float = 3.0
    deadline_grace_s: float = 60.0

    def _init_pool(self, slots: list[Slot]) -> None:
        self._slots = slots
        self._idle: queue.Queue[Slot] = queue.Queue()
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._fanout = ThreadPoolExecutor(len(slots), thread_name_prefix="pool")
        with ThreadPoolExecutor(len(slots)) as starter:
            list(starter.map(self._start, slots))
        if not any(s.handle is not None for s in slots):
            self.close()
            raise WorkerLost("no judge worker could be started")

    # -- what a subclass provides ------------------------------------------------------------
    def _spawn(self, slot: Slot) -> tuple[Any, str, int | None]:
        """Start a worker; return (handle, device, pid). Raise to signal failure."""
        raise NotImplementedError

    def _call(self, slot: Slot, request: EvalRequest, deadline_s: float) -> EvalResult:
        """Run one request; raise WorkerLost if the worker died, EvalTimeout past the deadline."""
        raise NotImplementedError

    def _kill(self, handle: Any) -> bool:
        raise NotImplementedError

    def _dispose(self, handle: Any) -> None:
        raise NotImplementedError

    # -- worker lifecycle --------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """How many evaluations run at once (one per worker)."""
        return len(self._slots)

    def worker_states(self) -> list[WorkerState]:
        return [s.state for s in self._slots]

    def _start(self, slot: Slot) -> None:
        for attempt in range(3):
            if self._closed:
                return
            try:
                slot.handle, slot.state.device, slot.state.pid = self._spawn(slot)
            except Exception as exc:  # a worker that cannot start: log, back off, retry
                logger.warning("starting %s failed (%d/3): %r", slot.state.worker_id, attempt + 1, exc)
                time.sleep(0.5 * 2**attempt)
                continue
            slot.set("idle")
            self._idle.put(slot)
            return
        slot.handle = None
        slot.set("dead")

    def _restart(self, slot: Slot) -> None:
        """Replace a broken worker in the background; the slot rejoins the idle queue when ready."""
        slot.set("restarting")
        slot.state.restarts += 1
        old, slot.handle = slot.handle, None
        if old is not None:
            self._kill(old)
            threading.Thread(target=self._dispose, args=(old,), daemon=True).start()
        threading.Thread(target=self._start, args=(slot,), daemon=True).start()

    def _acquire(self) -> Slot:
        deadline = time.monotonic() + self.acquire_timeout_s
        while True:
            if self._closed:
                raise ExecutorError("executor is closed")
            if all(s.state.state == "dead" for s in self._slots):
                raise WorkerLost("every judge worker is dead")
            with contextlib.suppress(queue.Empty):
                return self._idle.get(timeout=0.25)
            if time.monotonic() > deadline:
                raise EvalTimeout(f"no free worker in {self.acquire_timeout_s:.0f} s")

    # -- evaluation ------------------------------------------------------------------------------
    def _evaluate_one(self, request: EvalRequest) -> EvalResult:
        for attempt in range(1, self.max_attempts + 1):
            slot = self._acquire()
            slot.set("busy", request.task_id)
            opts = request.options.replace(device=slot.state.device)
            local = EvalRequest(
                reference_code=request.reference_code, kernel_code=request.kernel_code,
                options=opts, task_id=request.task_id, problem_name=request.problem_name,
                shape_variants=request.shape_variants,
            )
            deadline = self.deadline_factor * opts.timeout_s + self.deadline_grace_s
            try:
                result = self._call(slot, local, deadline)
            except WorkerLost as exc:
                logger.warning("%s lost task %s (attempt %d): %s",
                               slot.state.worker_id, request.task_id, attempt, exc)
                self._restart(slot)
                if self._take_cancel(request.task_id):
                    return infra_result(request, "cancelled", "task cancelled while running")
                continue
            except EvalTimeout as exc:
                self._restart(slot)
                return EvalResult.failure(EvalOutcome.TIMEOUT, "deadline", str(exc),
                                          task_id=request.task_id)
            slot.state.tasks_done += 1
            slot.set("idle")
            self._idle.put(slot)
            result.task_id = result.task_id or request.task_id
            return result
        return infra_result(request, "worker_lost",
                            f"workers died under this task {self.max_attempts} times")

    def evaluate(self, requests: list[EvalRequest]) -> list[EvalResult]:
        """Judge every request, in parallel across workers; results in request order."""
        if self._closed:
            raise ExecutorError("executor is closed")
        if len(requests) <= 1:
            return [self._evaluate_one(r) for r in requests]
        return list(self._fanout.map(self._evaluate_one, requests))

    def cancel(self, task_id: str) -> bool:
        """Kill the evaluation of `task_id` if it runs here (its worker is replaced)."""
        for slot in self._slots:
            handle = slot.handle
            if slot.state.current_task == task_id and slot.state.state == "busy" and handle is not None:
                with self._lock:
                    self._cancelled.add(task_id)
                if self._kill(handle):
                    return True
                with self._lock:
                    self._cancelled.discard(task_id)
        return False

    def _take_cancel(self, task_id: str | None) -> bool:
        with self._lock:
            if task_id in self._cancelled:
                self._cancelled.discard(task_id)
                return True
        return False

    def kill_worker(self, index: int) -> bool:
        """Kill one worker as a crash would (drills and tests); its task is retried."""
        handle = self._slots[index].handle
        return bool(handle is not None and self._kill(handle))

    def close(self) -> None:
        """Stop every worker. Idempotent; `evaluate` raises ExecutorError afterwards."""
        if self._closed:
            return
        self._closed = True
        self._fanout.shutdown(wait=False, cancel_futures=True)
        handles = [s.handle for s in self._slots if s.handle is not None]
        for slot in self._slots:
            slot.handle = None
            slot.set("dead")
        with ThreadPoolExecutor(max(1, len(handles))) as closer:
            list(closer.map(self._dispose, handles))

    def __enter__(self) -> SlotPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

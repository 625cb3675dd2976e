"""The worker-pool core shared by the local and Ray executors: slots, dispatch, retry, cancel.

Input: EvalRequests from any number of caller threads; output: EvalResults in request order.
One evaluation per slot at a time. Retries live here, and only here:
- a worker that dies under a task is restarted in the background and the task retried on the next
  free slot (up to `max_attempts` tries), after which the task gets an INFRA_ERROR result;
- a judge that stops answering (the watchdog: no heartbeat, or silent past its deadline) is at fault,
  never the candidate: the worker is replaced and the task retried once (`judge_retries`) on a fresh
  one;
- a fault the judge reports of its own (INFRA_ERROR with error kind "judge_error") was already retried
  inside that judge, on fresh device state (`JudgeSettings.retries`): the worker is replaced, and the
  result returned, not run a third time. One retry layer for each kind of fault.
A candidate's timeout is only ever decided by a live judge. Idle workers are checked too, every
`liveness_s` (`_check`: a dead judge process or Ray actor, one that stopped beating): a broken one is
replaced before a task meets it, so minutes without work (an RL trainer's generation phase) cost no
retries.
Every try is announced through `on_attempt` (the server records it in the task's attempts and
worker columns); every result carries where it ran (host, Ray node, worker, device).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from drkernel.errors import EvalTimeout, ExecutorError, WorkerLost
from drkernel.types import DeviceInfo, EvalOutcome, EvalRequest, EvalResult

__all__ = ["AttemptHook", "Slot", "SlotPool", "WorkerState", "infra_result"]

logger = logging.getLogger(__name__)

HOSTNAME = socket.gethostname()

# (task_id, where it runs now, attempt number from 1, why the previous try failed or None)
# -> False when the task is gone (cancelled meanwhile): the pool then does not run it
AttemptHook = Callable[[str, dict[str, Any], int, str | None], bool]


@dataclass(slots=True)
class WorkerState:
    """What /workers/status and /metrics report for one worker, including where it runs."""

    worker_id: str
    device: str
    state: str = "starting"  # starting | idle | busy | restarting | dead
    current_task: str | None = None
    tasks_done: int = 0
    restarts: int = 0
    pid: int | None = None
    host: str = HOSTNAME
    node_id: str | None = None  # the Ray node id; None for a local worker
    last_error: str | None = None  # why it was last replaced
    last_change: float = field(default_factory=time.time)
    # where its last start went (s): total, interpreter (and imports), lock, build (a judge process's)
    startup_s: dict[str, float] | None = None

    @property
    def alive(self) -> bool:
        return self.state in ("idle", "busy")

    def placement(self) -> dict[str, Any]:
        """Where this worker runs: recorded with every task it takes."""
        return {"worker_id": self.worker_id, "host": self.host, "node_id": self.node_id,
                "device": self.device, "pid": self.pid}

    def to_dict(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id, "device": self.device, "state": self.state,
            "current_task": self.current_task, "tasks_done": self.tasks_done,
            "restarts": self.restarts, "pid": self.pid, "host": self.host,
            "node_id": self.node_id, "last_error": self.last_error,
            "last_change": self.last_change, "startup_s": self.startup_s,
        }


def infra_result(request: EvalRequest, kind: str, message: str) -> EvalResult:
    """The result of a task the machinery could not judge: not the candidate's fault."""
    return EvalResult.failure(EvalOutcome.INFRA_ERROR, kind, message, task_id=request.task_id)


def _is_judge_fault(result: EvalResult) -> bool:
    return result.outcome is EvalOutcome.INFRA_ERROR and result.error is not None \
        and result.error.kind == "judge_error"


def stamp_placement(result: EvalResult, where: WorkerState) -> None:
    """Write where the evaluation ran into `result.device` (made if the judge left none)."""
    if result.device is None:
        cuda = where.device.startswith("cuda")
        result.device = DeviceInfo(kind="cuda" if cuda else "cpu", name=where.device,
                                   interpreter=not cuda)
    result.device.host = where.host
    result.device.node_id = where.node_id or ""
    result.device.worker_id = where.worker_id
    result.device.device_id = where.device


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

    max_attempts: int = 3  # tries of a task whose worker dies under it
    judge_retries: int = 1  # extra tries of a task whose judge froze or reported its own fault
    acquire_timeout_s: float = 6 * 3600.0
    deadline_factor: float = 3.0
    deadline_grace_s: float = 60.0
    revive_s: float = 30.0  # a dead worker (3 failed starts) is tried again this often
    liveness_s: float = 5.0  # idle workers are checked this often (0: never)
    on_attempt: AttemptHook | None = None

    def _init_pool(self, slots: list[Slot], first_ready: bool = False) -> None:
        """Start every slot's worker side by side. Return once all have started or failed 3 starts;
        with `first_ready`, once one has (the rest join the idle queue as they come up). WorkerLost
        where none could start."""
        self._slots = slots
        self._idle: queue.Queue[Slot] = queue.Queue()
        self._cancelled: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._closing = threading.Event()
        self._one_up = threading.Event()
        self._fanout = ThreadPoolExecutor(len(slots), thread_name_prefix="pool")
        starters = [threading.Thread(target=self._start, args=(s,), daemon=True,
                                     name=f"start-{s.state.worker_id}") for s in slots]
        for t in starters:
            t.start()
        if first_ready:
            while not self._one_up.wait(0.05) and any(t.is_alive() for t in starters):
                pass
        else:
            for t in starters:
                t.join()
        if not any(s.handle is not None for s in slots):
            failed = [s.state for s in slots if s.state.last_error]  # the reason, in the same line
            why = f" ({failed[0].worker_id}: {str(failed[0].last_error).splitlines()[0]})" if failed else ""
            self.close()
            raise WorkerLost(f"no judge worker could be started{why}")
        if self.liveness_s > 0:
            threading.Thread(target=self._watch_idle, daemon=True, name="pool-liveness").start()

    # -- what a subclass provides ------------------------------------------------------------
    def _spawn(self, slot: Slot) -> Any:
        """Start a worker, fill in slot.state (device, pid, host, node_id); return its handle.

        Raise to signal failure."""
        raise NotImplementedError

    def _call(self, slot: Slot, request: EvalRequest, deadline_s: float) -> EvalResult:
        """Run one request; raise WorkerLost if the worker died, EvalTimeout if it stopped
        answering (frozen, or silent past the deadline: the watchdog)."""
        raise NotImplementedError

    def _kill(self, handle: Any) -> bool:
        raise NotImplementedError

    def _dispose(self, handle: Any) -> None:
        raise NotImplementedError

    def _check(self, handle: Any) -> str | None:
        """Whether an idle worker can still take a task: None if so, else why not. Called only while
        the worker is out of the idle queue, never beside a `_call`."""
        return None

    # -- worker lifecycle --------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """How many evaluations run at once (one per worker)."""
        return len(self._slots)

    def worker_states(self) -> list[WorkerState]:
        return [s.state for s in self._slots]

    def alive_workers(self) -> int:
        """Workers able to take a task now (idle or busy), out of `capacity` configured."""
        return sum(1 for s in self._slots if s.state.alive)

    def _try_start(self, slot: Slot) -> bool:
        """One try at starting the slot's worker; True when it is idle and queued."""
        try:
            handle = self._spawn(slot)
        except BaseException as exc:  # a worker that cannot start: the caller backs off
            if self._closed:  # the pool closed meanwhile (Ray may even raise SystemExit)
                return False
            if not isinstance(exc, Exception):
                raise
            logger.warning("starting %s failed: %s", slot.state.worker_id, exc)
            slot.state.last_error = f"start failed: {exc}"
            return False
        with self._lock:
            closed = self._closed
            if not closed:
                slot.handle = handle
        if closed:  # started after close(): do not leak it
            self._dispose(handle)
            return False
        slot.state.startup_s = getattr(handle, "startup_s", None)
        slot.set("idle")
        self._idle.put(slot)
        self._one_up.set()
        return True

    def _start(self, slot: Slot) -> None:
        """Start with 3 quick tries; then the slot is dead, and is tried again every revive_s
        in the background (a lost Ray node that rejoins, a GPU freed later)."""
        for attempt in range(3):
            if self._closed or self._try_start(slot):
                return
            if self._closing.wait(0.5 * 2**attempt):
                return
        slot.handle = None
        slot.set("dead")
        if self.revive_s > 0:
            threading.Thread(target=self._revive, args=(slot,), daemon=True,
                             name=f"revive-{slot.state.worker_id}").start()

    def _revive(self, slot: Slot) -> None:
        while not self._closing.wait(self.revive_s):
            if self._try_start(slot):
                logger.info("%s is back", slot.state.worker_id)
                return

    def _restart(self, slot: Slot, reason: str) -> None:
        """Replace a broken worker in the background; the slot rejoins the idle queue when ready."""
        slot.set("restarting")
        slot.state.restarts += 1
        slot.state.last_error = reason
        old, slot.handle = slot.handle, None
        if old is not None:
            self._kill(old)
            threading.Thread(target=self._dispose, args=(old,), daemon=True).start()
        threading.Thread(target=self._start, args=(slot,), daemon=True).start()

    def _watch_idle(self) -> None:
        """Every `liveness_s`: take each idle worker out of the queue in turn, check it, and put it
        back, or replace it when it is broken. Only the worker being checked is out of the queue."""
        while not self._closing.wait(self.liveness_s):
            for _ in range(self._idle.qsize()):
                try:
                    slot = self._idle.get_nowait()
                except queue.Empty:
                    break
                if self._closed:
                    return
                try:
                    problem = self._check(slot.handle) if slot.handle is not None else "no worker"
                except Exception as exc:  # a check that breaks is a worker we cannot trust
                    problem = f"its check failed: {type(exc).__name__}: {exc}"
                if problem is None:
                    self._idle.put(slot)
                    continue
                logger.warning("%s died while idle (%s): replacing it", slot.state.worker_id, problem)
                self._restart(slot, f"lost while idle: {problem}")

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
    def _announce(self, request: EvalRequest, slot: Slot, attempt: int, why: str | None) -> bool:
        """Tell the owner (the server) where this try runs; False: the task is gone, skip it."""
        hook = self.on_attempt
        if hook is None or request.task_id is None:
            return True
        try:
            return hook(request.task_id, slot.state.placement(), attempt, why) is not False
        except Exception:  # a recording hook must never cost a task its evaluation
            logger.exception("recording attempt %d of %s failed", attempt, request.task_id)
            return True

    def _evaluate_one(self, request: EvalRequest) -> EvalResult:
        lost = judge_faults = 0
        why: str | None = None
        attempt = 0
        while True:
            attempt += 1
            slot = self._acquire()
            slot.set("busy", request.task_id)
            where = WorkerState(**{k: getattr(slot.state, k) for k in
                                   ("worker_id", "device", "pid", "host", "node_id")})
            if not self._announce(request, slot, attempt, why):
                slot.set("idle")
                self._idle.put(slot)
                return self._placed(infra_result(request, "cancelled",
                                                 "task cancelled before this try"), where)
            deadline = self.deadline_factor * request.options.timeout_s + self.deadline_grace_s
            try:  # the request as sent: the slot's judge owns the device
                result = self._call(slot, request, deadline)
            except WorkerLost as exc:
                if self._closed:  # close() stopped its worker: nobody waits for this task any more
                    raise ExecutorError("executor is closed") from None
                logger.warning("%s lost task %s (attempt %d): %s",
                               slot.state.worker_id, request.task_id, attempt, exc)
                self._restart(slot, f"worker lost: {exc}")
                if self._take_cancel(request.task_id):
                    return self._placed(infra_result(request, "cancelled",
                                                     "task cancelled while running"), where)
                lost += 1
                why = f"worker_lost on {where.worker_id}: {exc}"
                if lost >= self.max_attempts:
                    return self._placed(infra_result(
                        request, "worker_lost",
                        f"workers died under this task {lost} times; last: {exc}"), where)
                continue
            except EvalTimeout as exc:  # the watchdog: the judge, not the candidate, is at fault
                if self._closed:
                    raise ExecutorError("executor is closed") from None
                logger.warning("%s is unresponsive on task %s (attempt %d): %s",
                               slot.state.worker_id, request.task_id, attempt, exc)
                self._restart(slot, f"unresponsive: {exc}")
                if self._take_cancel(request.task_id):
                    return self._placed(infra_result(request, "cancelled",
                                                     "task cancelled while running"), where)
                judge_faults += 1
                why = f"judge_unresponsive on {where.worker_id}: {exc}"
                if judge_faults > self.judge_retries:
                    return self._placed(infra_result(request, "judge_unresponsive", str(exc)),
                                        where)
                continue
            except Exception as exc:  # a bug in the call: the worker's state is unknown, replace it
                if not self._closed:
                    self._restart(slot, f"{type(exc).__name__}: {exc}")
                raise
            if _is_judge_fault(result):
                message = result.error.message if result.error else ""
                logger.warning("%s reported a judge fault on task %s (attempt %d): %s",
                               slot.state.worker_id, request.task_id, attempt, message)
                self._restart(slot, f"judge_error: {message}")  # its retry is spent: no third run
                result.task_id = result.task_id or request.task_id
                result.judge_retries += judge_faults
                return self._placed(result, where)
            result.judge_retries += judge_faults  # the judge's own retries, and the pool's
            slot.state.tasks_done += 1
            slot.set("idle")
            self._idle.put(slot)
            result.task_id = result.task_id or request.task_id
            return self._placed(result, where)

    @staticmethod
    def _placed(result: EvalResult, where: WorkerState) -> EvalResult:
        stamp_placement(result, where)
        return result

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
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
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

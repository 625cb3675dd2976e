"""Hosts for one Judge, the unit of a worker pool: in a dedicated thread or a dedicated process.

Input: an EvalRequest and a deadline; output: its EvalResult. A host whose judge breaks raises
WorkerLost (the pool rebuilds it and retries elsewhere); `kill()` stops a running evaluation.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection
from typing import Any, Protocol

from drkernel.errors import DrKernelError, EvalTimeout, ExecutorError, WorkerLost
from drkernel.types import EvalOutcome, EvalRequest, EvalResult

__all__ = [
    "JudgeFactory",
    "JudgeHost",
    "JudgeLike",
    "ProcessJudgeHost",
    "ThreadJudgeHost",
    "in_host_process",
    "judge_call",
    "mark_host_process",
    "sandbox_judge",
]

logger = logging.getLogger(__name__)


class JudgeLike(Protocol):
    """What a pool needs from a judge: `drkernel.sandbox.judge.Judge` or a test double."""

    def evaluate(self, request: EvalRequest) -> EvalResult: ...

    def close(self) -> None: ...


JudgeFactory = Callable[[str], JudgeLike]  # device -> a ready judge


class _EnteredJudge:
    """A sandbox Judge entered as a context manager; `close()` exits it."""

    def __init__(self, judge: Any) -> None:
        self._judge = judge
        self._inner = judge.__enter__() if hasattr(judge, "__enter__") else judge

    def evaluate(self, request: EvalRequest) -> EvalResult:
        result: EvalResult = self._inner.evaluate(request)
        return result

    def cancel(self) -> bool:
        cancel = getattr(self._inner, "cancel", None)
        return bool(cancel()) if callable(cancel) else False

    def close(self) -> None:
        if hasattr(self._judge, "__exit__"):
            self._judge.__exit__(None, None, None)
        else:
            self._judge.close()


def sandbox_judge(device: str) -> JudgeLike:
    """The default factory: the real judge (sandboxed subprocesses) on `device`."""
    from drkernel.sandbox.judge import Judge

    return _EnteredJudge(Judge(device=device))


def judge_call(judge: JudgeLike, request: EvalRequest) -> EvalResult:
    """One evaluation; a request the judge refuses (ConfigError, ...) is a result, not a crash."""
    try:
        return judge.evaluate(request)
    except DrKernelError as exc:
        if isinstance(exc, ExecutorError):
            raise
        return EvalResult.failure(EvalOutcome.INFRA_ERROR, "invalid_request", str(exc),
                                  task_id=request.task_id)


class JudgeHost(Protocol):
    device: str

    @property
    def pid(self) -> int | None: ...

    def evaluate(self, request: EvalRequest, deadline_s: float) -> EvalResult: ...

    def kill(self) -> bool: ...

    def close(self) -> None: ...


class ThreadJudgeHost:
    """A judge owned by one thread (the Judge is not thread-safe); callers hand work over."""

    def __init__(self, factory: JudgeFactory, device: str, name: str = "judge") -> None:
        self.device = device
        self._inbox: queue.Queue[tuple[EvalRequest, Future[EvalResult]] | None] = queue.Queue()
        self._judge: JudgeLike | None = None
        ready: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._main, args=(factory, ready), name=name, daemon=True
        )
        self._thread.start()
        ready.result()  # re-raises a factory failure in the caller

    @property
    def pid(self) -> int | None:
        return None

    def _main(self, factory: JudgeFactory, ready: Future[None]) -> None:
        try:
            self._judge = factory(self.device)
        except BaseException as exc:  # process edge of this thread: report to the builder
            ready.set_exception(exc)
            return
        ready.set_result(None)
        while (item := self._inbox.get()) is not None:
            request, reply = item
            try:
                reply.set_result(judge_call(self._judge, request))
            except Exception as exc:  # the judge itself broke: this host is finished
                logger.exception("judge on %s raised", self.device)
                reply.set_exception(WorkerLost(f"judge on {self.device} raised: {exc!r}"))
                break
        with contextlib.suppress(Exception):
            self._judge.close()

    def evaluate(self, request: EvalRequest, deadline_s: float) -> EvalResult:
        if not self._thread.is_alive():
            raise WorkerLost(f"judge thread on {self.device} is gone")
        reply: Future[EvalResult] = Future()
        self._inbox.put((request, reply))
        try:
            return reply.result(timeout=deadline_s)
        except FutureTimeout:
            raise EvalTimeout(f"judge on {self.device} gave no answer in {deadline_s:.0f} s") from None

    def kill(self) -> bool:
        cancel = getattr(self._judge, "cancel", None)
        return bool(cancel()) if callable(cancel) else False

    def close(self) -> None:
        self._inbox.put(None)
        self._thread.join(timeout=30)


_HOST_PROCESS = False


def mark_host_process() -> None:
    """Record that this process exists only to host a judge (a judge process or a Ray actor)."""
    global _HOST_PROCESS
    _HOST_PROCESS = True


def in_host_process() -> bool:
    return _HOST_PROCESS


def _host_main(conn: Connection) -> None:
    """Entry of a judge process: build the judge, then answer requests until told to stop."""
    mark_host_process()
    factory, device = conn.recv()
    try:
        judge = factory(device)
    except BaseException as exc:  # process edge: report the failure to the parent
        conn.send(("error", f"judge factory failed: {exc!r}"))
        return
    conn.send(("ready", os.getpid()))
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            if message is None:
                return
            try:
                result = judge_call(judge, EvalRequest.from_dict(message))
            except Exception as exc:  # process edge: the judge broke, the parent rebuilds us
                logger.exception("judge on %s raised", device)
                conn.send(("error", f"judge on {device} raised: {exc!r}"))
                return
            conn.send(("ok", result.to_dict()))
    finally:
        with contextlib.suppress(Exception):
            judge.close()


class ProcessJudgeHost:
    """A judge in its own spawned process: a kill -9 of it, or `kill()`, costs one task, retried."""

    _POLL_S = 0.05

    def __init__(
        self,
        factory: JudgeFactory,
        device: str,
        name: str = "judge",
        start_timeout_s: float = 600.0,
        scrub_env: tuple[str, ...] = (),
    ) -> None:
        self.device = device
        parent_sock, child_sock = socket.socketpair()
        env = {k: v for k, v in os.environ.items() if k not in scrub_env}
        # a fresh interpreter (not multiprocessing's spawn): the caller's __main__ is not re-run
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "drkernel.executors.judge_host", str(child_sock.fileno()), name],
            pass_fds=(child_sock.fileno(),), env=env, stdin=subprocess.DEVNULL,
        )
        child_sock.close()
        self._conn = Connection(parent_sock.detach())
        self._lock = threading.Lock()
        self._conn.send((factory, device))
        kind, payload = self._receive(time.monotonic() + start_timeout_s)
        if kind != "ready":
            self.kill()
            raise WorkerLost(str(payload))

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def _alive(self) -> bool:
        return self._proc.poll() is None

    def _receive(self, deadline: float) -> tuple[str, Any]:
        while True:
            if self._conn.poll(self._POLL_S):
                try:
                    return self._conn.recv()  # type: ignore[no-any-return]
                except (EOFError, OSError):
                    break
            if not self._alive():
                # the process may have sent its last message just before exiting
                if self._conn.poll(0):
                    with contextlib.suppress(EOFError, OSError):
                        return self._conn.recv()  # type: ignore[no-any-return]
                break
            if time.monotonic() > deadline:
                raise EvalTimeout(f"judge process on {self.device} gave no answer in time")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        raise WorkerLost(f"judge process on {self.device} died (exit code {self._proc.returncode})")

    def evaluate(self, request: EvalRequest, deadline_s: float) -> EvalResult:
        with self._lock:
            try:
                self._conn.send(request.to_dict())
            except (BrokenPipeError, OSError) as exc:
                raise WorkerLost(f"judge process on {self.device} is gone: {exc}") from None
            kind, payload = self._receive(time.monotonic() + deadline_s)
        if kind == "ok":
            return EvalResult.from_dict(payload)
        self.kill()
        raise WorkerLost(str(payload))

    def kill(self) -> bool:
        if self._alive():
            self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            return True
        return False

    def close(self) -> None:
        if self._alive():
            with contextlib.suppress(OSError):
                self._conn.send(None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
        self.kill()
        self._conn.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _host_main(Connection(int(sys.argv[1])))

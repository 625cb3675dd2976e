"""Hosts for one Judge, the unit of a worker pool: in a dedicated thread or a dedicated process.

Input: an EvalRequest and a deadline; output: its EvalResult. A host whose judge breaks raises
WorkerLost (the pool rebuilds it and retries elsewhere); a host that stops answering (frozen, or
silent past the deadline) raises EvalTimeout; `kill()` stops a running evaluation.

A judge on a GPU holds a host-wide lock on that GPU for its whole life (`gpu_lock`), so two judges
never time on one GPU, not even across a server restart. A judge process also holds a lifeline to
the server that started it: it exits when the server dies, kill -9 included, and sends a heartbeat
through the same socket, so a frozen judge (SIGSTOP, a hung driver) is found in seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

from drkernel.device import gpu_key, lock_dir
from drkernel.errors import DrKernelError, EvalTimeout, ExecutorError, WorkerLost
from drkernel.settings import JudgeSettings
from drkernel.types import EvalOutcome, EvalRequest, EvalResult

__all__ = [
    "JudgeFactory",
    "JudgeHost",
    "JudgeLike",
    "ProcessJudgeHost",
    "SandboxJudge",
    "ThreadJudgeHost",
    "gpu_lock",
    "in_host_process",
    "judge_call",
    "mark_host_process",
    "pool_judge",
    "reap_orphan_judges",
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


class SandboxJudge:
    """The real judge (sandboxed subprocesses) as a picklable factory, device -> judge, built from
    `config` (it travels to a judge process pickled: no judge reads the environment). With `share`
    > 1, one of `share` judges on one GPU (`JudgeSettings.shared`): 1/share of the GPU memory caps of a
    judge alone and fewer warm spares. Their compiles, loads and correctness trials overlap; their
    timing and profiling windows take turns (drkernel/sandbox/devicelock.py)."""

    def __init__(self, config: JudgeSettings | None = None, share: int = 1) -> None:
        self.share = max(1, share)
        self.config = (config or JudgeSettings()).shared(self.share)

    def __call__(self, device: str) -> JudgeLike:
        from drkernel.sandbox.judge import Judge

        return _EnteredJudge(Judge.from_config(self.config, device))


def pool_judge(config: JudgeSettings, judges_per_gpu: int = 1) -> SandboxJudge:
    """The factory of a pool's judges: `config` shared `judges_per_gpu` ways on a GPU. A judge fault
    is retried inside the judge (`config.retries`, on fresh device state: no new process to start);
    the pool replaces that worker afterwards and retries only workers that died or froze."""
    return SandboxJudge(config, judges_per_gpu)


def judge_call(judge: JudgeLike, request: EvalRequest) -> EvalResult:
    """One evaluation; a request the judge refuses (ConfigError, ...) is a result, not a crash."""
    try:
        return judge.evaluate(request)
    except DrKernelError as exc:
        if isinstance(exc, ExecutorError):
            raise
        return EvalResult.failure(EvalOutcome.INFRA_ERROR, "invalid_request", str(exc),
                                  task_id=request.task_id)

# -- one judge per GPU, host-wide -----------------------------------------------------------------
_HOST_MODULE = "drkernel.executors.judge_host"


def _holder(path: Path) -> tuple[int, int] | None:
    """(judge pid, server pid) written by the judge that holds `path`, if readable."""
    with contextlib.suppress(OSError, ValueError):
        judge, server = path.read_text().split()[:2]
        return int(judge), int(server)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_orphan_judge(judge_pid: int, server_pid: int) -> bool:
    """A drkernel judge process whose server is gone (e.g. stopped with SIGSTOP when it died)."""
    if judge_pid == os.getpid() or _alive(server_pid):
        return False
    try:
        cmdline = Path(f"/proc/{judge_pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return _HOST_MODULE.encode() in cmdline


def reap_orphan_judges() -> int:
    """Kill this user's judge processes whose server is gone: a judge that was stopped (SIGSTOP, a hung
    driver) when its server died could not follow it, and holds its sandboxes and memory through every
    restart. On a GPU the GPU lock finds such a judge when the next one wants its GPU; on the CPU
    nothing did. A judge process names its server's pid on its command line (the last argument); it is
    an orphan when that server is dead or is no longer its parent (the pid was reused). Returns how
    many were killed."""
    killed, me = 0, os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if _HOST_MODULE.encode() not in argv:
                continue
            if os.stat(f"/proc/{pid}").st_uid != me:
                continue
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            server = int([a for a in argv if a][-1])
        except (OSError, ValueError, IndexError):
            continue
        if not _alive(server) or ppid != server:
            logger.warning("killing orphaned judge %d (its server is gone)", pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


class GpuLock:
    """An exclusive flock on `<lock dir>/<gpu key>.lock`, held while a judge owns the GPU."""

    def __init__(self, key: str, fd: int, path: Path) -> None:
        self.key, self._fd, self.path = key, fd, path

    def release(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = -1


def gpu_lock(device: str, timeout_s: float = 30.0, server_pid: int | None = None,
             slots: int = 1) -> GpuLock | None:
    """Take one of the `slots` host-wide judge places of the GPU behind `device`; None for a CPU device.

    Slot 0 is `<key>.lock`, slot k `<key>.<k>.lock`: a server that runs one judge per GPU takes slot 0,
    one that shares each GPU among k judges takes any free slot below k (their timing windows still
    take turns: drkernel/sandbox/devicelock.py). Waits up to `timeout_s` for a slot. A holder that is
    an orphaned judge process (its server died and it could not follow, e.g. it was frozen) is killed.
    Raises WorkerLost if every slot stays held.
    """
    key = gpu_key(device)
    if key is None:
        return None
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / (f"{key}.lock" if k == 0 else f"{key}.{k}.lock") for k in range(max(1, slots))]
    fds = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666) for path in paths]
    deadline = time.monotonic() + timeout_s
    taken = None
    while taken is None:
        holder = None
        for k, (fd, path) in enumerate(zip(fds, paths, strict=True)):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken = k
                break
            except BlockingIOError:
                holder = _holder(path)
                if holder and _is_orphan_judge(*holder):
                    logger.warning("killing orphaned judge %d on %s (its server %d is gone)",
                                   holder[0], key, holder[1])
                    with contextlib.suppress(OSError):
                        os.kill(holder[0], signal.SIGKILL)
        if taken is None:
            if time.monotonic() > deadline:
                for fd in fds:
                    os.close(fd)
                who = f"process {holder[0]}" if holder else "another process"
                where = f"lock {paths[0]}" if len(paths) == 1 else f"all {len(paths)} slots, {paths[0]} ..."
                raise WorkerLost(f"{device} ({key}) is held by {who}: other judges use this GPU "
                                 f"({where}); stop them or pick other GPUs") from None
            time.sleep(0.1)
    for k, fd in enumerate(fds):
        if k != taken:
            os.close(fd)
    fd, path = fds[taken], paths[taken]
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {server_pid or os.getppid()}\n".encode(), 0)
    return GpuLock(key, fd, path)


class JudgeHost(Protocol):
    device: str

    @property
    def pid(self) -> int | None: ...

    def evaluate(self, request: EvalRequest, deadline_s: float) -> EvalResult: ...

    def kill(self) -> bool: ...

    def check(self) -> str | None: ...

    def close(self) -> None: ...


class ThreadJudgeHost:
    """A judge owned by one thread (the Judge is not thread-safe); callers hand work over."""

    def __init__(self, factory: JudgeFactory, device: str, name: str = "judge",
                 lock_timeout_s: float = 30.0, gpu_slots: int = 1) -> None:
        self.device = device
        self._gpu_slots = gpu_slots
        self._inbox: queue.Queue[tuple[EvalRequest, Future[EvalResult]] | None] = queue.Queue()
        self._judge: JudgeLike | None = None
        self._lock_timeout_s = lock_timeout_s
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
        lock = None
        try:
            lock = gpu_lock(self.device, self._lock_timeout_s, server_pid=os.getpid(), slots=self._gpu_slots)
            self._judge = factory(self.device)
        except BaseException as exc:  # process edge of this thread: report to the builder
            if lock is not None:
                lock.release()
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
        if lock is not None:
            lock.release()

    def evaluate(self, request: EvalRequest, deadline_s: float) -> EvalResult:
        if not self._thread.is_alive():
            raise WorkerLost(f"judge thread on {self.device} is gone")
        reply: Future[EvalResult] = Future()
        self._inbox.put((request, reply))
        try:  # a deadline past the clock's range (timeout_s 1e300) is "no deadline", not an OverflowError
            return reply.result(timeout=min(deadline_s, threading.TIMEOUT_MAX))
        except FutureTimeout:
            raise EvalTimeout(f"judge on {self.device} gave no answer in {deadline_s:.0f} s") from None

    def kill(self) -> bool:
        cancel = getattr(self._judge, "cancel", None)
        return bool(cancel()) if callable(cancel) else False

    def check(self) -> str | None:
        """None while the judge's thread can take a task."""
        return None if self._thread.is_alive() else "its judge thread ended"

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


def _watch_lifeline(sock: socket.socket, period_s: float) -> None:
    """Judge-process thread: beat every `period_s`; exit the process when the server is gone.

    The server holds the other end of `sock`; its death (kill -9 included) closes it, and
    recv() returns b"". The judge then exits at once; its sandboxes follow (PR_SET_PDEATHSIG).
    A beat that does not fit (the server has not read the socket for a while: it was busy, or is
    stopped) is skipped, never taken for the server's death: an idle judge lives through any idle
    time (before, a full socket ended every judge idle for about a minute).
    """
    sock.settimeout(period_s)
    while True:
        try:
            if sock.recv(64) == b"":
                break
        except TimeoutError:
            try:
                sock.send(b".", socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError, TimeoutError):
                continue  # full: the server reads later, or never (then its death closes the socket)
            except OSError:
                break
        except OSError:
            break
    logger.warning("the server that started this judge is gone: exiting")
    os._exit(70)


def _host_main(conn: Connection, lifeline: socket.socket, beat_s: float, sndbuf: int = 0) -> None:
    """Entry of a judge process: lock the GPU, build the judge, answer requests until told to stop.
    `sndbuf`: the lifeline's send buffer in bytes (0: the system's; tests make it small)."""
    mark_host_process()
    if sndbuf > 0:
        lifeline.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    threading.Thread(target=_watch_lifeline, args=(lifeline, beat_s), name="lifeline",
                     daemon=True).start()
    factory, device, lock_timeout_s, gpu_slots = conn.recv()
    t0 = time.monotonic()
    try:
        lock = gpu_lock(device, lock_timeout_s, slots=gpu_slots)
        t1 = time.monotonic()
        judge = factory(device)
    except BaseException as exc:  # process edge: report the failure to the parent
        conn.send(("error", f"judge factory failed: {exc}"))
        return
    conn.send(("ready", {"pid": os.getpid(), "lock_s": t1 - t0, "build_s": time.monotonic() - t1}))
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
        if lock is not None:
            lock.release()


def _startup(total: float, ready: dict[str, float]) -> dict[str, float]:
    """Where a judge process's start went (s): its interpreter and imports (the rest), the device lock,
    and building the judge (fork server, reference and spare sandboxes, comparison child)."""
    lock, build = float(ready.get("lock_s", 0.0)), float(ready.get("build_s", 0.0))
    return {"total": round(total, 3), "interpreter": round(max(0.0, total - lock - build), 3),
            "lock": round(lock, 3), "build": round(build, 3)}


class ProcessJudgeHost:
    """A judge in its own spawned process: a kill -9 of it, or `kill()`, costs one task, retried.

    The process dies with the server (lifeline) and beats every `beat_s`; a judge silent for
    `heartbeat_timeout_s` (frozen) raises EvalTimeout, as one silent past the deadline does.
    """

    _POLL_S = 0.05

    def __init__(
        self,
        factory: JudgeFactory,
        device: str,
        name: str = "judge",
        start_timeout_s: float = 600.0,
        scrub_env: tuple[str, ...] = (),
        heartbeat_timeout_s: float = 15.0,
        lock_timeout_s: float = 30.0,
        gpu_slots: int = 1,
        lifeline_sndbuf: int = 0,
    ) -> None:
        self.device = device
        self.heartbeat_timeout_s = heartbeat_timeout_s
        beat_s = max(0.05, min(1.0, heartbeat_timeout_s / 5))
        parent_sock, child_sock = socket.socketpair()
        life_parent, life_child = socket.socketpair()
        env = {k: v for k, v in os.environ.items() if k not in scrub_env}
        # a fresh interpreter (not multiprocessing's spawn): the caller's __main__ is not re-run;
        # pass_fds hands it only its two sockets (no sibling's lifeline keeps it alive)
        started = time.monotonic()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", _HOST_MODULE, str(child_sock.fileno()),
             str(life_child.fileno()), str(beat_s), str(int(lifeline_sndbuf)), name, str(os.getpid())],
            pass_fds=(child_sock.fileno(), life_child.fileno()), env=env,
            stdin=subprocess.DEVNULL,
        )
        child_sock.close()
        life_child.close()
        self._life = life_parent
        self._life.setblocking(False)
        self._last_beat = time.monotonic()
        self._conn = Connection(parent_sock.detach())
        self._lock = threading.Lock()
        self._conn.send((factory, device, lock_timeout_s, gpu_slots))
        # no heartbeat check while the judge starts: a CUDA init may hold the GIL for long
        kind, payload = self._receive(time.monotonic() + start_timeout_s, heartbeat=False)
        if kind != "ready":
            self.kill()
            raise WorkerLost(str(payload))
        self.startup_s = _startup(time.monotonic() - started, payload)
        took = self.startup_s
        logger.info("judge %s on %s ready in %.2f s (interpreter and imports %.2f s, device lock %.2f s, "
                    "judge built %.2f s)", name, device, took["total"], took["interpreter"], took["lock"],
                    took["build"])

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def _alive(self) -> bool:
        return self._proc.poll() is None

    def _beating(self) -> bool:
        """Drain heartbeats; False when none came for heartbeat_timeout_s (a frozen judge)."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while self._life.recv(4096):
                self._last_beat = time.monotonic()
        return time.monotonic() - self._last_beat < self.heartbeat_timeout_s

    def _receive(self, deadline: float, heartbeat: bool = True) -> tuple[str, Any]:
        self._last_beat = max(self._last_beat, time.monotonic() - self._POLL_S)
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
            if not self._beating() and heartbeat:
                raise EvalTimeout(f"judge process {self._proc.pid} on {self.device} is frozen: "
                                  f"no heartbeat for {self.heartbeat_timeout_s:g} s")
            if time.monotonic() > deadline:
                raise EvalTimeout(f"judge process {self._proc.pid} on {self.device} gave no "
                                  "answer in time")
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

    def check(self) -> str | None:
        """None while the judge process lives and beats (called between tasks, never beside one)."""
        if not self._alive():
            return f"the judge process exited (code {self._proc.returncode})"
        if not self._beating():
            return f"the judge process is frozen: no heartbeat for {self.heartbeat_timeout_s:g} s"
        return None

    def kill(self) -> bool:
        if self._alive():
            self._proc.kill()  # SIGKILL also ends a stopped (SIGSTOP) process
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            return True
        return False

    def close(self) -> None:
        # an idle judge is told to stop; a busy one (its evaluation's result has no reader any more:
        # the pool is closing) is killed at once rather than waited for
        if self._alive() and self._lock.acquire(blocking=False):
            try:
                with contextlib.suppress(OSError):
                    self._conn.send(None)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=10)
            finally:
                self._lock.release()
        self.kill()
        self._conn.close()
        self._life.close()


if __name__ == "__main__":
    # Ctrl-C in a terminal reaches the whole process group: the server decides, and stops this judge
    # through its socket or by its own death (the lifeline); no KeyboardInterrupt traceback here
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # run the importable module's copy, not __main__'s: in_host_process() must see the mark
    from drkernel.executors import judge_host as _module

    _module._host_main(Connection(int(sys.argv[1])), socket.socket(fileno=int(sys.argv[2])),
                       float(sys.argv[3]), int(sys.argv[4]))

"""An RL trainer's rhythm: a batch, then minutes of generation with nothing to judge, then the next
batch (issue 33). Judges live through any idle time; one that dies or freezes while idle is found
and replaced before a task meets it, so the next batch runs every task once."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from drkernel.executors.fake_judge import fake_judge
from drkernel.executors.judge_host import ProcessJudgeHost
from drkernel.executors.local import LocalExecutor
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest


def req(task_id: str) -> EvalRequest:
    return EvalRequest(reference_code="ref", kernel_code="# fake: speedup=2", task_id=task_id,
                       options=EvalOptions(timeout_s=30.0))


def pool(n: int = 2, **kw: Any) -> LocalExecutor:
    return LocalExecutor(LocalExecutor.Config(devices=("cpu",) * n, isolation="process", **kw), fake_judge)


class Attempts:
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def __call__(self, task_id: str, where: dict[str, Any], attempt: int, why: str | None) -> bool:
        self.seen.append((task_id, attempt))
        return True


def batch(ex: LocalExecutor, tag: str, n: int = 4) -> Attempts:
    hook = ex.on_attempt = Attempts()
    results = ex.evaluate([req(f"{tag}{i}") for i in range(n)])
    assert [r.outcome for r in results] == [EvalOutcome.OK] * n, [r.error for r in results]
    assert sorted(hook.seen) == [(f"{tag}{i}", 1) for i in range(n)]  # every task ran once
    return hook


def test_a_judge_process_outlives_a_full_heartbeat_socket() -> None:
    """The judge beats every 0.1 s into a socket of ~4 KiB that nobody reads while it is idle: full
    within a second. A full socket is not the server's death (before, the judge exited on it)."""
    host = ProcessJudgeHost(fake_judge, "cpu", heartbeat_timeout_s=0.5, lifeline_sndbuf=4096)
    try:
        pid = host.pid
        time.sleep(3.0)
        assert host._alive(), "the idle judge process exited"
        result = host.evaluate(req("after-idle"), deadline_s=30)
        assert result.outcome is EvalOutcome.OK and host.pid == pid
    finally:
        host.close()


def test_idle_past_the_heartbeat_buffer_then_every_task_runs_once() -> None:
    """With no idle checks at all (liveness_s=0) nothing drains the heartbeats: the judges must live
    on their own."""
    with pool(heartbeat_timeout_s=0.5, lifeline_buffer_bytes=4096, liveness_s=0) as ex:
        batch(ex, "first")
        pids = [w.pid for w in ex.worker_states()]
        time.sleep(3.0)
        batch(ex, "second")
        assert [w.pid for w in ex.worker_states()] == pids
        assert sum(w.restarts for w in ex.worker_states()) == 0


def test_a_judge_that_dies_while_idle_is_replaced_before_a_task_meets_it() -> None:
    with pool(liveness_s=0.2) as ex:
        batch(ex, "first")
        victim = ex.worker_states()[0].pid
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            states = ex.worker_states()
            if states[0].restarts == 1 and states[0].state == "idle":
                break
            time.sleep(0.1)
        state = ex.worker_states()[0]
        assert state.restarts == 1 and state.state == "idle" and state.pid != victim, state
        assert "lost while idle" in (state.last_error or "")
        assert ex.alive_workers() == 2
        batch(ex, "second")


def test_a_judge_frozen_while_idle_is_killed_and_replaced() -> None:
    with pool(heartbeat_timeout_s=1.0, liveness_s=0.2) as ex:
        victim = ex.worker_states()[1].pid
        assert victim is not None
        os.kill(victim, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + 20
            while ex.worker_states()[1].restarts == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            state = ex.worker_states()[1]
            assert state.restarts == 1 and "frozen" in (state.last_error or ""), state
            time.sleep(0.5)
            with pytest.raises(ProcessLookupError):  # killed, not left stopped
                os.kill(victim, 0)
        finally:
            with pytest.raises(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
        batch(ex, "after")


@pytest.mark.slow
def test_real_idle_minutes_with_default_settings() -> None:
    """Default heartbeat (1 s beats, 15 s timeout), the system's socket buffer, 100 s idle: longer
    than the ~70 s after which every idle judge used to exit."""
    with pool() as ex:
        batch(ex, "first")
        time.sleep(100)
        batch(ex, "second")
        assert sum(w.restarts for w in ex.worker_states()) == 0


def test_a_judge_stopped_when_its_server_died_is_reaped_on_the_cpu_too(tmp_path: Path) -> None:
    """Its server killed while it was stopped, the judge could not follow; the next local executor
    (a restarted server) kills it before starting its own."""
    import subprocess
    import sys

    from drkernel.executors.judge_host import reap_orphan_judges

    pid_file = tmp_path / "pid"
    # a process named like a judge host, whose parent (the shell) exits at once: an orphan
    code = (f"import os, signal; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
            "os.kill(os.getpid(), signal.SIGSTOP)")
    import shlex

    # as a judge host's command line: the module, its arguments, its server's pid last (one that is gone)
    gone = 2**22 + 4242
    command = (f"{shlex.quote(sys.executable)} -c {shlex.quote(code)} -m drkernel.executors.judge_host "
               f"3 4 1.0 0 local-9 {gone} &")
    subprocess.run(["sh", "-c", command], check=True)
    deadline = time.monotonic() + 20
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    orphan = int(pid_file.read_text())
    try:
        time.sleep(0.2)
        with LocalExecutor(LocalExecutor.Config(devices=("cpu",), isolation="process"), fake_judge) as ex:
            assert ex.evaluate([req("after")])[0].outcome is EvalOutcome.OK
            assert reap_orphan_judges() == 0  # the live executor's judge is no orphan
        assert not _running(orphan) or reap_orphan_judges() >= 1  # the executor's start reaped it
        deadline = time.monotonic() + 5
        while _running(orphan) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(orphan)
    finally:
        with contextlib.suppress(OSError):
            os.kill(orphan, signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_judge_process_says_where_its_start_went_and_the_pool_reports_it() -> None:
    """serve's ready time (10.2 s on the H200, run BI) is the first judge process's start: its
    interpreter and imports, the device lock, and building the judge. Each is measured, the parts add
    up to the whole, and /v1/workers carries them (WorkerState.startup_s)."""
    host = ProcessJudgeHost(fake_judge, "cpu", heartbeat_timeout_s=5.0)
    try:
        took = host.startup_s
        assert set(took) == {"total", "interpreter", "lock", "build"}, took
        assert all(v >= 0.0 for v in took.values()) and took["interpreter"] > 0.0, took
        assert took["total"] == pytest.approx(took["interpreter"] + took["lock"] + took["build"], abs=0.01)
    finally:
        host.close()
    with pool() as ex:
        states = ex.worker_states()
        assert states and all(w.startup_s and w.startup_s["total"] > 0.0 for w in states)
        assert all(w.to_dict()["startup_s"] == w.startup_s for w in states)

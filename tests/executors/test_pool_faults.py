"""Faults of the machinery are never charged to a candidate: frozen judges, judge faults, GPU locks,
judges that outlive their server; and every result says where it ran."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from drkernel.device import gpu_key
from drkernel.errors import WorkerLost
from drkernel.executors.fake_judge import fake_judge
from drkernel.executors.judge_host import ThreadJudgeHost, gpu_lock
from drkernel.executors.local import LocalExecutor
from drkernel.executors.pool import HOSTNAME
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest
from tests.processes import running


def req(code: str, task_id: str = "t", timeout_s: float = 30.0) -> EvalRequest:
    return EvalRequest(reference_code="ref", kernel_code=code, task_id=task_id,
                       options=EvalOptions(timeout_s=timeout_s))


def pool(isolation: str = "process", n: int = 1, **kw: Any) -> LocalExecutor:
    return LocalExecutor(LocalExecutor.Config(devices=("cpu",) * n, isolation=isolation, **kw),
                         fake_judge)


class Attempts:
    """An on_attempt hook that records every try."""

    def __init__(self, gone_at: int | None = None) -> None:
        self.seen: list[tuple[str, dict[str, Any], int, str | None]] = []
        self.gone_at = gone_at

    def __call__(self, task_id: str, where: dict[str, Any], attempt: int, why: str | None) -> bool:
        self.seen.append((task_id, where, attempt, why))
        return attempt != self.gone_at


def test_a_frozen_judge_process_is_replaced_and_the_task_retried_not_timed_out(
        tmp_path: Path) -> None:
    marker = tmp_path / "froze"
    with pool(heartbeat_timeout_s=1.0) as ex:
        hook = ex.on_attempt = Attempts()
        frozen_pid = ex.worker_states()[0].pid
        started = time.monotonic()
        (res,) = ex.evaluate([req(f"# fake: freeze_once={marker}\n# fake: speedup=2", "f")])
        elapsed = time.monotonic() - started
        state = ex.worker_states()[0]
    assert marker.exists()
    assert res.outcome is EvalOutcome.OK and res.speedup == 2.0  # an honest kernel keeps its reward
    assert elapsed < 10  # found by the heartbeat, not the 3 x timeout + 60 s deadline
    assert state.restarts == 1 and "frozen" in (state.last_error or "")
    assert state.pid != frozen_pid
    with pytest.raises(ProcessLookupError):  # the frozen judge was killed, not left stopped
        os.kill(frozen_pid, 0)
    assert [(a[0], a[2]) for a in hook.seen] == [("f", 1), ("f", 2)]
    assert hook.seen[1][3] and hook.seen[1][3].startswith("judge_unresponsive")


def test_a_judge_that_freezes_every_time_ends_as_infra_error_after_one_retry() -> None:
    with pool("thread", deadline_factor=0.0, deadline_grace_s=0.3) as ex:
        hook = ex.on_attempt = Attempts()
        (res,) = ex.evaluate([req("# fake: sleep=3", "s", timeout_s=10)])
    assert res.outcome is EvalOutcome.INFRA_ERROR and res.error and \
        res.error.kind == "judge_unresponsive"
    assert res.status.value != "timeout" and res.reward == 0.0
    assert [a[2] for a in hook.seen] == [1, 2]


def test_a_judge_error_result_replaces_the_worker_and_is_not_run_again(tmp_path: Path) -> None:
    # the judge retried it inside already (JudgeSettings.retries): one retry layer per kind of fault
    marker = tmp_path / "cuda-error"
    with pool("thread", n=2) as ex:
        hook = ex.on_attempt = Attempts()
        (res,) = ex.evaluate([req(f"# fake: judge_error_once={marker}\n# fake: speedup=3", "j")])
        restarts = sum(w.restarts for w in ex.worker_states())
        after = ex.evaluate([req(f"# fake: judge_error_once={marker}\n# fake: speedup=3", "after")])[0]
    assert res.outcome is EvalOutcome.INFRA_ERROR and res.error and res.error.kind == "judge_error"
    assert restarts == 1 and [(a[0], a[2]) for a in hook.seen] == [("j", 1), ("after", 1)]
    assert after.outcome is EvalOutcome.OK and after.speedup == 3.0


def test_a_judge_error_every_time_costs_one_run_and_a_fresh_worker() -> None:
    with pool("thread") as ex:
        (res,) = ex.evaluate([req("# fake: judge_error", "j2")])
        restarts = ex.worker_states()[0].restarts
        after = ex.evaluate([req("# fake: speedup=1.5", "after")])[0]
    assert res.outcome is EvalOutcome.INFRA_ERROR and res.error and res.error.kind == "judge_error"
    assert restarts == 1 and after.outcome is EvalOutcome.OK and res.judge_retries == 0


def test_a_task_cancelled_between_tries_is_not_run_again(tmp_path: Path) -> None:
    marker = tmp_path / "cuda-error"
    with pool(n=2, heartbeat_timeout_s=1.0) as ex:
        hook = ex.on_attempt = Attempts(gone_at=2)  # the owner says: gone before the retry
        (res,) = ex.evaluate([req(f"# fake: freeze_once={marker}", "gone")])
        states = [(w.tasks_done, w.state) for w in ex.worker_states()]
    assert res.outcome is EvalOutcome.INFRA_ERROR and res.error and res.error.kind == "cancelled"
    assert [a[2] for a in hook.seen] == [1, 2]
    assert sum(done for done, _ in states) == 0 and ("idle" in {s for _, s in states})


def test_every_result_says_where_it_ran() -> None:
    with pool(n=2) as ex:
        results = ex.evaluate([req("# fake: speedup=2", f"w{i}") for i in range(4)])
        pids = {w.worker_id: w.pid for w in ex.worker_states()}
        lost = ex.evaluate([req("# fake: die", "gone")])[0]
    for res in results:
        assert res.device is not None and res.device.host == HOSTNAME
        assert res.device.worker_id in pids and res.device.device_id == "cpu"
        assert res.device.node_id == ""
    assert lost.outcome is EvalOutcome.INFRA_ERROR and lost.device and lost.device.worker_id


def test_one_judge_per_gpu_the_lock_is_host_wide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  ) -> None:
    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    assert gpu_key("cpu") is None
    assert gpu_key("cuda:1", visible="3,5") == "gpu-5"
    assert gpu_key("cuda:0", visible="GPU-ab/12") == "gpu-GPU-ab_12"
    first = ThreadJudgeHost(fake_judge, "cuda:7", "a")
    started = time.monotonic()
    with pytest.raises(WorkerLost, match="held by process"):
        ThreadJudgeHost(fake_judge, "cuda:7", "b", lock_timeout_s=0.5)
    assert time.monotonic() - started < 5
    other = ThreadJudgeHost(fake_judge, "cuda:6", "c", lock_timeout_s=0.5)  # another GPU is free
    first.close()
    again = ThreadJudgeHost(fake_judge, "cuda:7", "d", lock_timeout_s=5)
    for host in (other, again):
        host.close()


def test_a_gpu_held_by_an_orphaned_frozen_judge_is_freed(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge that could not follow its dead server (stopped) is killed by the next one."""
    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    orphan = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal, sys
        from drkernel.executors.judge_host import gpu_lock
        lock = gpu_lock("cuda:3", server_pid=2**22 + 12345)  # a server that is gone
        open({str(tmp_path / "ready")!r}, "w").close()
        os.kill(os.getpid(), signal.SIGSTOP)
    """), "-m", "drkernel.executors.judge_host"])
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "ready").exists():
            assert time.monotonic() < deadline and orphan.poll() is None
            time.sleep(0.05)
        # the cmdline of `python -c ... -m drkernel.executors.judge_host` names the judge module
        lock = gpu_lock("cuda:3", timeout_s=10)
        assert lock is not None
        assert orphan.wait(timeout=5) == -signal.SIGKILL
        lock.release()
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


def test_judge_processes_die_with_the_process_that_started_them(tmp_path: Path) -> None:
    """kill -9 of the pool's owner: its judge processes (busy or idle) follow within seconds."""
    script = textwrap.dedent(f"""
        import sys, threading
        from drkernel.executors.fake_judge import fake_judge
        from drkernel.executors.local import LocalExecutor
        from drkernel.types import EvalOptions, EvalRequest
        ex = LocalExecutor(LocalExecutor.Config(devices=("cpu", "cpu")), fake_judge)
        r = EvalRequest(reference_code="r", kernel_code="# fake: sleep=60", task_id="x",
                        options=EvalOptions(timeout_s=120))
        threading.Thread(target=ex.evaluate, args=([r],), daemon=True).start()
        import time; time.sleep(0.5)
        open({str(tmp_path / "pids")!r}, "w").write(" ".join(str(w.pid) for w in ex.worker_states()))
        time.sleep(600)
    """)
    owner = subprocess.Popen([sys.executable, "-c", script], env=os.environ | {"PYTHONPATH": os.getcwd()})
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids").exists():
            assert time.monotonic() < deadline and owner.poll() is None, "owner did not start"
            time.sleep(0.1)
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        assert len(pids) == 2 and all(running(p) for p in pids)
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(running(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(running(p) for p in pids), "a judge outlived its server"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()




def test_cancel_of_a_frozen_judge_still_answers_cancelled(tmp_path: Path) -> None:
    marker = tmp_path / "froze"
    with pool(heartbeat_timeout_s=30.0) as ex:
        out: list = []
        t = threading.Thread(target=lambda: out.extend(
            ex.evaluate([req(f"# fake: freeze_once={marker}", "c")])))
        t.start()
        deadline = time.monotonic() + 10
        while not marker.exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.2)
        assert ex.cancel("c")
        t.join(timeout=15)
    assert out and out[0].error and out[0].error.kind == "cancelled"


def test_judges_per_gpu_share_a_gpu_through_slots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """k judges may share one GPU (each holds one of k slots); a k+1-th is refused, as a second was."""
    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    hosts = [ThreadJudgeHost(fake_judge, "cuda:3", f"s{i}", lock_timeout_s=0.5, gpu_slots=3)
             for i in range(3)]
    try:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-3.1.lock", "gpu-3.2.lock", "gpu-3.lock"]
        with pytest.raises(WorkerLost, match="all 3 slots"):
            ThreadJudgeHost(fake_judge, "cuda:3", "s3", lock_timeout_s=0.5, gpu_slots=3)
        # a server that runs one judge per GPU waits for slot 0, which a sharing server holds
        with pytest.raises(WorkerLost, match="held by process"):
            ThreadJudgeHost(fake_judge, "cuda:3", "alone", lock_timeout_s=0.5)
        hosts.pop(1).close()  # a freed slot is taken again
        hosts.append(ThreadJudgeHost(fake_judge, "cuda:3", "s4", lock_timeout_s=5, gpu_slots=3))
    finally:
        for host in hosts:
            host.close()


def test_the_local_executor_runs_k_judges_per_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path))
    from drkernel.errors import ConfigError
    from drkernel.executors.judge_host import SandboxJudge

    with pytest.raises(ConfigError, match="judges_per_gpu"):
        LocalExecutor.Config(judges_per_gpu=0)
    config = LocalExecutor.Config(devices=("cuda:0", "cuda:1", "cpu"), isolation="thread", judges_per_gpu=2)
    with LocalExecutor(config, fake_judge) as ex:
        assert [s.state.device for s in ex._slots] == ["cuda:0", "cuda:0", "cuda:1", "cuda:1", "cpu"]
    import pickle

    factory = pickle.loads(pickle.dumps(SandboxJudge(share=4)))  # it travels to a judge process
    assert factory.share == 4 and factory.config.spares == 2

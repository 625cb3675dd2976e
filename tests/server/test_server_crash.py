"""kill -9 of `drkernel serve`: its judges die with it, and a restarted server frees its GPUs of
old judges (even frozen ones) before timing anything. SIGSTOP of a busy judge: retried, the kernel
keeps its verdict. GPUs are simulated: the fake judge on
"cuda:N" devices, with the per-GPU lock files in a private folder."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx

from drkernel.server.launch import ServerProcess
from tests.processes import running

REF = "import torch\n\nclass Model:\n    pass\n"




def _until(check, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_judges_die_with_a_killed_server_and_a_restart_frees_the_gpus(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    env = dict(os.environ, DRKERNEL_LOCK_DIR=str(locks))
    extra = ["--judge", "fake", "--devices", "cuda:0,cuda:1", "--judges-per-gpu", "1",
             "--isolation", "process"]
    server = ServerProcess(tmp_path / "crash.db", extra=extra, env=env).start()
    stopped: int | None = None
    try:
        body = {"task_id": "long", "request": {
            "reference_code": REF, "options": {"timeout_s": 30.0},
            "kernel_code": "# fake: sleep=3\n# fake: speedup=2\nclass ModelNew:\n    pass\n"}}
        assert httpx.post(f"{server.url}/v1/tasks", json=body).status_code == 202

        def workers() -> list[dict]:
            return httpx.get(f"{server.url}/v1/workers").json()["workers"]

        _until(lambda: any(w["state"] == "busy" for w in workers()), 10, "no worker got the task")
        old = {w["device"]: w["pid"] for w in workers()}
        assert sorted(old) == ["cuda:0", "cuda:1"]
        assert sorted(p.name for p in locks.iterdir()) == ["gpu-0.lock", "gpu-1.lock"]
        stopped = old["cuda:0"]
        os.kill(stopped, signal.SIGSTOP)  # a frozen judge cannot follow its server
        server.kill()  # SIGKILL of the server process only, not of its process group
        _until(lambda: not running(old["cuda:1"]), 10, "a judge outlived its server")
        assert running(stopped)  # still there, stopped, holding cuda:0

        server.start()  # same store, same GPUs; ready (and "healthy") with its first judge up
        assert httpx.get(f"{server.url}/health").json()["status"] == "healthy"
        _until(lambda: httpx.get(f"{server.url}/health").json()["workers_alive"] == 2, 20,
               "the second judge did not come up")
        assert not running(stopped)  # the orphan was killed before a new judge took cuda:0
        new = {w["device"]: w["pid"] for w in workers()}
        assert set(new.values()).isdisjoint(old.values())
        view = httpx.get(f"{server.url}/v1/tasks/long", params={"wait": 20}).json()
        assert view["state"] == "done" and view["result"]["outcome"] == "ok"
        assert view["attempts"] == 2  # interrupted by the crash, then run again
        assert view["worker"]["pid"] in new.values()
    finally:
        if stopped is not None and running(stopped):
            os.kill(stopped, signal.SIGKILL)
        server.stop()


def test_sigstop_of_a_busy_judge_is_retried_not_charged_to_the_kernel(tmp_path: Path) -> None:
    extra = ["--judge", "fake", "--workers", "2", "--isolation", "process",
             "--heartbeat-timeout", "1"]
    with ServerProcess(tmp_path / "stop.db", extra=extra) as server:
        body = {"task_id": "honest", "reference_code": REF, "timeout": 30,
                "kernel_code": "# fake: sleep=2\n# fake: speedup=2\nclass ModelNew:\n    pass\n"}
        with httpx.Client(base_url=server.url, timeout=60) as http:
            answer: dict = {}
            t = threading.Thread(target=lambda: answer.update(http.post("/evaluate", json=body).json()))
            t.start()

            def busy() -> list[dict]:
                return [w for w in http.get("/v1/workers").json()["workers"]
                        if w["state"] == "busy"]

            _until(lambda: bool(busy()), 10, "no worker got the task")
            pid = busy()[0]["pid"]
            os.kill(pid, signal.SIGSTOP)  # the judge's host process freezes mid-evaluation
            try:
                t.join(timeout=30)
            finally:
                if running(pid):
                    os.kill(pid, signal.SIGKILL)
            view = http.get("/v1/tasks/honest").json()
            workers = http.get("/v1/workers").json()["workers"]
    assert answer["status"] == "completed" and answer["correctness"] is True
    assert answer["error_code"] is None and answer["speedup"] == 2.0
    assert view["attempts"] == 2 and "judge_unresponsive" in view["retries"][0]["reason"]
    assert view["worker"]["pid"] != pid and sum(w["restarts"] for w in workers) == 1


def test_sigterm_of_an_idle_server_exits_at_once(tmp_path: Path) -> None:
    """An idle `drkernel serve` leaves within a second or two of SIGTERM (0.2 s measured with fake judges,
    0.8 s with CPU sandbox judges): only a busy one waits, up to 10 s, for its running evaluations, then
    re-queues them (tests/server/test_scheduler.py)."""
    with ServerProcess(tmp_path / "idle.db", extra=["--judge", "fake", "--workers", "2"]) as server:
        assert server.proc is not None
        httpx.get(f"{server.url}/v1/health").raise_for_status()
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=30)
        seconds = time.monotonic() - start
    assert seconds < 2.0, seconds


def _busy_server(tmp_path: Path, name: str, sleep_s: float) -> tuple[ServerProcess, dict]:
    """A server of one fake judge running task `long`, which takes `sleep_s`."""
    server = ServerProcess(tmp_path / f"{name}.db", extra=["--judge", "fake", "--workers", "1"]).start()
    body = {"task_id": "long", "request": {
        "reference_code": REF, "options": {"timeout_s": 120.0},
        "kernel_code": f"# fake: sleep={sleep_s}\n# fake: speedup=2\nclass ModelNew:\n    pass\n"}}
    assert httpx.post(f"{server.url}/v1/tasks", json=body).status_code == 202
    _until(lambda: httpx.get(f"{server.url}/v1/tasks/long").json()["state"] == "running", 10,
           "the task did not start")
    return server, body


def test_sigterm_answers_long_polls_at_once_and_drains_within_its_bound(tmp_path: Path) -> None:
    """SIGTERM of a busy server: a pending long poll answers within ~2 s with 503 and Retry-After (the
    clients retry it), where uvicorn held it 30 s and answered 500; the server exits after the 10 s drain
    of its running task, which goes back to the queue."""
    server, _ = _busy_server(tmp_path, "poll", 60)
    assert server.proc is not None
    try:
        answer: dict = {}

        def poll() -> None:
            response = httpx.get(f"{server.url}/v1/tasks/long", params={"wait": 60}, timeout=90)
            answer.update(status=response.status_code, retry_after=response.headers.get("retry-after"),
                          at=time.monotonic())

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.5)  # the poll is waiting
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        t.join(timeout=60)
        server.proc.wait(timeout=60)
        exited = time.monotonic() - start
    finally:
        server.stop()
    answered = answer["at"] - start
    assert answer["status"] == 503 and answer["retry_after"], answer
    assert answered < 2.0, answered
    assert exited < 14.0, exited  # the 10 s drain, then the judge's close
    server.start()
    try:
        view = httpx.get(f"{server.url}/v1/tasks/long").json()
        assert view["state"] in ("queued", "running")  # re-queued, not lost nor failed
    finally:
        server.stop()


def test_sigterm_exits_once_the_running_task_finishes(tmp_path: Path) -> None:
    """The drain waits for a running task only as long as it runs: a 2 s one ends done, not re-queued."""
    server, _ = _busy_server(tmp_path, "short", 2)
    assert server.proc is not None
    try:
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=60)
        exited = time.monotonic() - start
        server.start()
        view = httpx.get(f"{server.url}/v1/tasks/long").json()
    finally:
        server.stop()
    assert exited < 5.0, exited
    assert view["state"] == "done" and view["result"]["outcome"] == "ok"


def test_client_wait_across_a_restart_ends_with_the_result(tmp_path: Path) -> None:
    """A Client.wait running while its server restarts (SIGTERM, then a new server on the same store and
    port) gets the result of the re-queued task, not an error: the task outlasts uvicorn's 30 s wait for open
    requests, which answered the poll 500 (not retried) before the fix."""
    from drkernel.executors.http_client import Client

    server, _ = _busy_server(tmp_path, "restart", 40)
    outcome: dict = {}

    def wait() -> None:
        with Client(base_url=server.url, poll_s=60) as client:
            try:
                outcome["result"] = client.wait(["long"], timeout_s=150)["long"]
                outcome["seconds"] = time.monotonic() - start
            except Exception as exc:  # what the test reports
                outcome["error"] = exc

    start = time.monotonic()
    t = threading.Thread(target=wait)
    t.start()
    try:
        time.sleep(0.5)
        server.stop(timeout_s=60)  # a polite stop, not cut short by SIGKILL (restart()'s after 30 s)
        server.start()
        t.join(timeout=150)
    finally:
        server.stop()
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].outcome.value == "ok"

"""`drkernel serve` as a real process over real HTTP: load, crashes, recovery, the real judge."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx
import pytest

from drkernel.executors.contract import CONTRACT_REFERENCE, contract_requests
from drkernel.executors.http_client import AsyncClient, Client
from drkernel.server.launch import ServerProcess
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest

REF = "import torch\n\nclass Model:\n    pass\n"
KINDS = {  # marks -> expected (status, correctness, decoy)
    "# fake: speedup=2": ("completed", True, False),
    "# fake: incorrect": ("completed", False, False),
    "# fake: hack=decoy_kernel": ("completed", False, True),
    "# fake: compile_error": ("failed", False, False),
    "# fake: sleep=30": ("failed", False, False),  # budget 10 s below: a hang, cut short
}


def payload(i: int, marks: str, tmp: Path) -> dict:
    extra = f"\n# fake: die_once={tmp / f'die-{i}'}" if i % 25 == 0 else ""  # worker crashes
    return {"task_id": f"load-{i}", "reference_code": REF,
            "kernel_code": f"{marks}{extra}\nclass ModelNew:\n    pass\n", "timeout": 10}


def test_200_concurrent_submissions_each_answered_correctly_none_lost(tmp_path: Path) -> None:
    quick = list(KINDS)[:4]
    jobs = [(i, "# fake: sleep=30" if i % 40 == 0 else quick[i % 4]) for i in range(200)]

    async def run(url: str) -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
            return await asyncio.gather(*[http.post("/evaluate", json=payload(i, m, tmp_path))
                                          for i, m in jobs])

    extra = ["--judge", "fake", "--workers", "4", "--isolation", "process"]
    with ServerProcess(tmp_path / "load.db", extra=extra) as server:
        responses = asyncio.run(run(server.url))
        health = httpx.get(f"{server.url}/health").json()
        workers = httpx.get(f"{server.url}/v1/workers").json()["workers"]
    assert [r.status_code for r in responses] == [200] * 200
    for (i, m), r in zip(jobs, responses, strict=True):
        body = r.json()
        assert body["task_id"] == f"load-{i}"
        expected = KINDS[m]
        assert (body["status"], body["correctness"], body["decoy_kernel"]) == expected, (m, body)
    assert health["total_processed"] == 200 and health["queue_status"]["pending"] == 0
    assert sum(w["restarts"] for w in workers) == 8  # each die_once crash cost one restart


def test_kill_9_of_the_server_mid_run_then_restart_every_result_present(tmp_path: Path) -> None:
    opts = EvalOptions(timeout_s=10)
    requests = [EvalRequest(reference_code=REF, kernel_code="# fake: sleep=0.25\n# fake: speedup=2",
                            options=opts, task_id=f"crash-{i}") for i in range(40)]
    extra = ["--judge", "fake", "--workers", "2", "--isolation", "process"]
    server = ServerProcess(tmp_path / "crash.db", extra=extra).start()
    try:
        with Client(base_url=server.url) as client:
            ids = client.submit(requests)
            deadline = time.monotonic() + 30
            while httpx.get(f"{server.url}/health").json()["total_processed"] < 8:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            server.kill()  # SIGKILL: no shutdown handler runs
            assert server.proc is not None and server.proc.returncode == -9
            server.start()  # same store
            results = client.wait(ids, timeout_s=60)
            views = [client.get(i) for i in ids]
    finally:
        server.stop()
    assert sorted(results) == sorted(ids)
    assert all(r.outcome is EvalOutcome.OK for r in results.values())
    assert any(v["attempts"] == 2 for v in views)  # interrupted mid-evaluation, then resumed


def test_the_authors_client_flow_post_then_poll_status_then_fetch_results(tmp_path: Path) -> None:
    extra = ["--judge", "fake", "--workers", "1", "--evaluate-wait", "0.2"]
    with ServerProcess(tmp_path / "flow.db", extra=extra) as server, \
            httpx.Client(base_url=server.url, timeout=10) as http:
        body = {"task_id": "parallel_task_0_abcd1234", "reference_code": REF, "timeout": 30,
                "kernel_code": "# fake: sleep=1\n# fake: speedup=1.5\nclass ModelNew: pass",
                "backend": "triton", "num_correct_trials": 5, "num_perf_trials": 100}
        first = http.post("/evaluate", json=body)
        deadline = time.monotonic() + 20
        while (status := http.get("/status/parallel_task_0_abcd1234").json())["status"] in (
                "pending", "processing"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        result = http.get("/results/parallel_task_0_abcd1234").json()
    assert first.status_code == 200 and first.json()["status"] in ("pending", "processing")
    assert status["status"] == "completed"
    assert result["speedup"] == 1.5 and result["correctness"] is True


def test_secrets_never_reach_judge_processes(tmp_path: Path) -> None:
    env = dict(os.environ, DRKERNEL_AUTH_TOKEN="top-secret-token")
    extra = ["--judge", "fake", "--workers", "1", "--isolation", "process"]
    with ServerProcess(tmp_path / "env.db", extra=extra, env=env) as server:
        headers = {"Authorization": "Bearer top-secret-token"}
        workers = httpx.get(f"{server.url}/v1/workers", headers=headers).json()["workers"]
        assert httpx.get(f"{server.url}/workers/status").status_code == 401
        server_env = Path(f"/proc/{server.pid}/environ").read_bytes()
        worker_env = Path(f"/proc/{workers[0]['pid']}/environ").read_bytes()
    assert b"top-secret-token" not in worker_env
    assert b"top-secret-token" in server_env  # the launcher's env; scrubbed inside, not in /proc


def test_async_client_against_a_live_server(tmp_path: Path) -> None:
    async def run(url: str) -> list:
        async with AsyncClient(base_url=url) as client:
            reqs = [EvalRequest(reference_code=REF, kernel_code=m, options=EvalOptions(timeout_s=5))
                    for m in ("# fake: speedup=2", "# fake: hack=x", "# fake: compile_error")]
            return await client.evaluate(reqs, timeout_s=30)

    with ServerProcess(tmp_path / "async.db", extra=["--judge", "fake", "--workers", "2"]) as s:
        results = asyncio.run(run(s.url))
    assert [r.outcome for r in results] == [EvalOutcome.OK, EvalOutcome.HACK_DETECTED,
                                           EvalOutcome.COMPILE_ERROR]


@pytest.mark.slow
def test_ten_real_judgements_through_the_server(tmp_path: Path) -> None:
    if not Path(__file__).parents[2].joinpath("drkernel/sandbox/judge.py").exists():
        pytest.skip("the judge is not in this checkout")
    names = ["honest", "incorrect", "compile_error", "hack", "honest",
             "hack", "incorrect", "honest", "compile_error", "honest"]
    requests = contract_requests(names, "real", timeout_s=20)
    expected = {"honest": EvalOutcome.OK, "incorrect": EvalOutcome.INCORRECT,
                "compile_error": EvalOutcome.COMPILE_ERROR, "hack": EvalOutcome.HACK_DETECTED}
    extra = ["--judge", "sandbox", "--workers", "1"]
    with ServerProcess(tmp_path / "real.db", extra=extra, start_timeout_s=180) as server, \
            Client(base_url=server.url) as client:
        results = client.evaluate(requests, timeout_s=300)
        anchor = httpx.post(f"{server.url}/evaluate", timeout=120, json={
            "task_id": "anchor-real", "reference_code": CONTRACT_REFERENCE,
            "kernel_code": requests[0].kernel_code, "num_perf_trials": 2, "timeout": 60}).json()
    assert [r.outcome for r in results] == [expected[n] for n in names]
    assert all(r.device and r.device.interpreter for r in results)
    assert anchor["status"] == "completed" and anchor["correctness"] is True


def test_two_real_judges_time_a_problems_reference_once_in_their_shared_cache(tmp_path: Path) -> None:
    """`serve`'s judges each kept their reference times in memory, so each judge timed every problem's
    reference again (with no candidate alive on the host: every judge waits). They now share a file."""
    import sqlite3

    cache = tmp_path / "timings.sqlite"
    requests = contract_requests(["honest", "honest", "honest", "honest"], "shared", timeout_s=60)
    extra = ["--judge", "sandbox", "--workers", "2", "--timing-cache", str(cache)]
    with ServerProcess(tmp_path / "shared.db", extra=extra, start_timeout_s=180) as server, \
            Client(base_url=server.url) as client:
        results = client.evaluate(requests, timeout_s=300)
    assert [r.outcome for r in results] == [EvalOutcome.OK] * 4, [r.error for r in results]
    with sqlite3.connect(cache) as db:
        keys = [k for (k,) in db.execute("SELECT key FROM reference_timing")]
    assert len(keys) == 1, keys  # the one problem, timed once for both judges

"""The service under faults: capacity in /health, where tasks ran, retries in the task view,
counters from the store after a restart, deduplication of requests without task_id."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from drkernel.executors.fake_judge import FakeJudge
from drkernel.executors.local import LocalExecutor

REF = "import torch\n\nclass Model:\n    pass\n"


def kernel(marks: str) -> str:
    return f"{marks}\nimport torch\n\nclass ModelNew:\n    pass\n"


def payload(marks: str, task_id: str | None = None, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {"reference_code": REF, "kernel_code": kernel(marks),
                               "backend": "triton", "timeout": 30, **extra}
    if task_id:
        body["task_id"] = task_id
    return body


def judges_that_start(n: int):  # type: ignore[no-untyped-def]
    """A judge factory that builds `n` judges, then fails (a worker that cannot come back)."""
    counter = itertools.count()
    lock = threading.Lock()

    def factory(device: str) -> FakeJudge:
        with lock:
            if next(counter) >= n:
                raise RuntimeError("no more judges on this host")
        return FakeJudge(device)

    return factory


def test_a_judge_fault_is_answered_once_and_its_worker_replaced_visible_in_health(
        serve, tmp_path: Path) -> None:
    """A judge_error result was already retried inside its judge (JudgeSettings.retries): the pool
    returns it as it is, without a third run, and replaces that worker (one retry layer per fault)."""
    config = LocalExecutor.Config(devices=("cpu", "cpu"), isolation="thread")
    srv = serve(executor=lambda s: LocalExecutor(config, judges_that_start(2)))
    marker = tmp_path / "fault"
    body = {"request": {"reference_code": REF, "options": {"timeout_s": 30.0},
                        "kernel_code": kernel(f"# fake: judge_error_once={marker}\n"
                                              "# fake: speedup=2")}}
    tid = srv.http.post("/v1/tasks", json=body).json()["task_id"]
    view = srv.http.get(f"/v1/tasks/{tid}", params={"wait": 20}).json()
    result = view["result"]
    assert view["state"] == "done" and result["outcome"] == "infra_error"  # never the kernel's fault
    assert result["error"]["kind"] == "judge_error" and result["reward"] == 0.0
    assert view["attempts"] == 1 and view["retries"] == []
    assert view["worker"]["host"] and view["worker"]["device"] == "cpu"
    device = result["device"]
    assert device["worker_id"] == view["worker"]["worker_id"] and device["host"]
    # the faulty worker cannot come back: capacity is degraded. The KernelGYM /health still says
    # "healthy" (the authors' scripts refuse to start on anything else) and shows the loss in its
    # other fields; /v1/health says "degraded"
    health = _eventually(lambda: srv.http.get("/health").json(),
                         lambda h: h["workers_alive"] == 1)
    assert health["status"] == "healthy" and health["degraded"] is True
    assert health["workers_configured"] == 2 and health["workers_lost"] == 1
    native = srv.http.get("/v1/health").json()
    assert native["status"] == "degraded"
    assert native["capacity"]["configured"] == 2 and native["capacity"]["alive"] == 1
    workers = srv.http.get("/v1/workers").json()["workers"]
    assert {w["host"] for w in workers} == {view["worker"]["host"]}
    assert any("no more judges" in (w["last_error"] or "") for w in workers)  # why it is down
    metrics = srv.http.get("/v1/metrics").text
    assert "drkernel_workers_alive 1" in metrics and "drkernel_executor_retries_total 0" in metrics
    assert "<th>host</th>" in srv.http.get("/v1/status").text


def test_a_frozen_judge_process_costs_the_candidate_nothing(serve, tmp_path: Path) -> None:
    from drkernel.executors.fake_judge import fake_judge

    config = LocalExecutor.Config(devices=("cpu",), heartbeat_timeout_s=1.0)
    srv = serve(executor=lambda s: LocalExecutor(config, fake_judge))
    marker = tmp_path / "froze"
    r = srv.http.post("/evaluate", json=payload(f"# fake: freeze_once={marker}\n# fake: speedup=2",
                                                "frozen-1"))
    body = r.json()
    assert r.status_code == 200 and body["status"] == "completed" and body["correctness"]
    assert body["error_code"] is None and body["speedup"] == 2.0
    view = srv.http.get("/v1/tasks/frozen-1").json()
    assert view["attempts"] == 2 and "judge_unresponsive" in view["retries"][0]["reason"]


def test_counters_that_describe_the_store_survive_a_restart(serve, tmp_path: Path) -> None:
    db = str(tmp_path / "kept.sqlite")
    first = serve(db_path=db)
    for i, marks in enumerate(["# fake: speedup=2", "# fake: compile_error", "# fake: speedup=1"]):
        assert first.http.post("/evaluate", json=payload(marks, f"c{i}")).status_code == 200
    first.close()
    second = serve(db_path=db)
    health = second.http.get("/health").json()
    assert health["total_processed"] == 3 and health["completed"] == 2 and health["failed"] == 1
    assert second.http.get("/v1/health").json()["totals"]["total_processed"] == 3


def test_identical_requests_without_task_id_are_evaluated_once(serve) -> None:
    srv = serve(evaluate_wait_s=5)
    a = srv.http.post("/evaluate", json=payload("# fake: speedup=2")).json()
    b = srv.http.post("/evaluate", json=payload("# fake: speedup=2")).json()
    assert a["task_id"] == b["task_id"] and b["status"] == "completed"
    other = srv.http.post("/evaluate", json=payload("# fake: speedup=3")).json()
    forced = srv.http.post("/evaluate", json=payload("# fake: speedup=2", force_refresh=True)).json()
    other_client = srv.http.post("/evaluate", json=payload("# fake: speedup=2"),
                                 headers={"Authorization": "Bearer someone-else"}).json()
    named = srv.http.post("/evaluate", json=payload("# fake: speedup=2", "named")).json()
    ids = {a["task_id"], other["task_id"], forced["task_id"], other_client["task_id"],
           named["task_id"]}
    assert len(ids) == 5
    native = {"request": {"reference_code": REF, "kernel_code": kernel("# fake: speedup=4")}}
    n1 = srv.http.post("/v1/tasks", json=native).json()
    n2 = srv.http.post("/v1/tasks", json=native).json()
    assert n1["task_id"] == n2["task_id"] and n1["created"] and not n2["created"]


def test_identical_workflow_submissions_without_task_id_are_evaluated_once(serve) -> None:
    """POST /workflow/submit (KernelGYM's other route to /evaluate) was never deduplicated: a client
    that sent it again after a dropped connection had its kernel judged twice."""
    srv = serve(evaluate_wait_s=5)
    body = {"workflow": "kernelbench", "payload": payload("# fake: speedup=2")}
    a = srv.http.post("/workflow/submit", json=body).json()
    b = srv.http.post("/workflow/submit", json=body).json()
    assert a["task_id"] == b["task_id"] and b["status"] == "completed"
    forced = srv.http.post("/workflow/submit", json=body | {"force_refresh": True}).json()
    assert forced["task_id"] != a["task_id"]


def test_deduplication_can_be_turned_off(serve) -> None:
    srv = serve(dedupe_window_s=0)
    a = srv.http.post("/evaluate", json=payload("# fake: speedup=2")).json()
    b = srv.http.post("/evaluate", json=payload("# fake: speedup=2")).json()
    assert a["task_id"] != b["task_id"]


def _eventually(get, ok, timeout_s: float = 10.0):  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        value = get()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_serve_names_what_to_set_when_the_ray_cluster_wants_a_token(
        monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    import argparse

    import drkernel.executors.ray as ray_executor
    from drkernel.server import cli

    def refuse(address: str, timeout_s: float = 10.0) -> None:
        from drkernel.errors import ExecutorError

        raise ExecutorError(ray_executor._AUTH_HELP.format(address=address, detail="InvalidAuthToken"))

    monkeypatch.setattr(ray_executor, "check_ray_auth", refuse)
    monkeypatch.setattr(ray_executor, "check_ray_address", lambda *a, **k: None)  # a cluster is there
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--executor", "ray", "--address", "127.0.0.1:1"])
    assert cli.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("drkernel serve: the Ray cluster at 127.0.0.1:1 requires token")
    assert "RAY_AUTH_MODE=token" in err and "Traceback" not in err


@pytest.mark.parametrize("address", ["localhost", ":6379", "127.0.0.1:abc", "127.0.0.1:99999"])
def test_serve_with_a_ray_address_of_no_form_ray_takes_is_one_line(
        address: str, capsys: pytest.CaptureFixture[str]) -> None:
    """ray.init raised ValueError for these, a traceback after the probes (21 s for ':6379'); a port
    out of range read as 'no Ray cluster at ... (Connection refused)'."""
    import argparse

    from drkernel.server import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--executor", "ray", "--address", address])
    assert cli.run(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"drkernel serve: Ray address {address!r}: not HOST:PORT (the head's GCS, e.g. "
                   "10.0.0.1:6379), auto or ray://HOST:PORT"]

"""The HTTP routes over real HTTP (uvicorn in a thread): anchor shapes, native API, limits, ops."""

from __future__ import annotations

import re
import socket
import time

REF = "import torch\n\nclass Model:\n    pass\n"


def kernel(marks: str) -> str:
    return f"{marks}\nimport torch\n\nclass ModelNew:\n    pass\n"

ANCHOR_FIELDS = {"task_id", "status", "compiled", "correctness", "decoy_kernel", "speedup",
                 "reference_runtime", "kernel_runtime", "error_message", "error_code", "metadata",
                 "submitted_at", "completed_at", "processing_time"}


def drkernel_payload(task_id: str, marks: str) -> dict:
    """What the authors' reward client posts (kernelgym-anchor.md §3.2), unknown keys included."""
    return {"task_id": task_id, "reference_code": REF, "kernel_code": kernel(marks),
            "backend": "triton", "num_correct_trials": 5, "num_perf_trials": 100, "timeout": 300,
            "enable_profiling": True, "verbose_errors": True, "reference_backend": "torch_compile",
            "detect_decoy_kernel": True, "entry_point": "Model", "priority": "normal"}


def test_the_authors_request_shape_is_accepted_and_answered_with_anchor_fields(serve) -> None:
    srv = serve()
    ok = srv.http.post("/evaluate", json=drkernel_payload("ok-1", "# fake: speedup=2.5"))
    hack = srv.http.post("/evaluate", json=drkernel_payload("hack-1", "# fake: hack=decoy_kernel"))
    bad = srv.http.post("/evaluate", json=drkernel_payload("bad-1", "# fake: compile_error"))
    assert ok.status_code == hack.status_code == bad.status_code == 200
    body = ok.json()
    assert ANCHOR_FIELDS <= set(body)
    assert body["status"] == "completed" and body["correctness"] and body["speedup"] == 2.5
    meta = body["metadata"]
    assert meta["custom_kernel_cuda_time_in_profiling_us"] / \
        meta["total_kernel_run_time_in_profiling_us"] == meta["coverage"]
    h = hack.json()
    assert h["decoy_kernel"] and not h["correctness"] and h["speedup"] == 0.0
    assert h["kernel_runtime"] == -1.0
    b = bad.json()
    assert b["status"] == "failed" and not b["compiled"] and b["error_code"] == "COMPILATION_ERROR"
    status = srv.http.get("/status/ok-1").json()
    assert status["status"] == "completed"
    assert re.fullmatch(r".+/cpu \(local-[01]\)", status["assigned_device"])  # host/device (worker)
    assert srv.http.get("/results/hack-1").json()["decoy_kernel"] is True


def test_resubmitting_an_id_answers_the_stored_result_as_kernelgym_does(serve) -> None:
    srv = serve()
    first = srv.http.post("/evaluate", json=drkernel_payload("same", "# fake: speedup=2")).json()
    again = srv.http.post("/evaluate", json=drkernel_payload("same", "# fake: speedup=2")).json()
    other = srv.http.post("/evaluate", json=drkernel_payload("same", "# fake: incorrect"))
    assert first["completed_at"] == again["completed_at"]
    assert other.status_code == 200 and other.json() == first  # the stored result, no 409
    batch = srv.http.post("/evaluate/batch", json={"batch_id": "B", "tasks": [
        drkernel_payload("same", "# fake: incorrect"), drkernel_payload("new", "# fake: incorrect")]})
    assert [r["correctness"] for r in batch.json()["results"]] == [True, False]
    forced = drkernel_payload("same", "# fake: incorrect") | {"force_refresh": True}
    assert srv.http.post("/evaluate", json=forced).json()["correctness"] is False


def test_validation_errors_are_clear_4xx_in_the_anchor_envelope(serve) -> None:
    srv = serve(max_body_bytes=200_000, max_code_bytes=50_000)
    cases = [
        ({"task_id": "x", "reference_code": REF}, 400, "kernel_code"),
        (drkernel_payload("x", "") | {"num_correct_trials": 50}, 400, "num_correct_trials"),
        (drkernel_payload("x", "") | {"priority": "urgent"}, 400, "priority"),
        (drkernel_payload("x", "") | {"backend": "cuda"}, 400, "Triton"),
        (drkernel_payload("x", "") | {"kernel_code": "x" * 60_000}, 413, "exceeds"),
        (drkernel_payload("x", "") | {"kernel_code": "x" * 300_000}, 413, "exceeds"),
    ]
    for body, status, words in cases:
        r = srv.http.post("/evaluate", json=body)
        assert r.status_code == status, (body.keys(), r.text)
        assert words in r.json()["message"] and r.headers["x-error-code"] == r.json()["error_code"]
    r = srv.http.post("/evaluate", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert srv.http.get("/status/nope").status_code == 404
    assert srv.http.get("/results/nope").status_code == 404
    assert srv.http.delete("/tasks/nope").status_code == 404
    assert srv.http.post("/v1/tasks", json={"request": {"reference_code": REF, "kernel_code": "k",
                                                        "options": {"timeout_s": "soon"}}}
                         ).status_code == 400


def test_bearer_auth_when_a_token_is_set(serve) -> None:
    srv = serve(auth_token="t0k3n")
    assert srv.http.get("/health").status_code == 200  # probes stay open
    assert srv.http.get("/metrics").status_code == 401
    assert srv.http.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert srv.http.get("/metrics", headers={"Authorization": "Bearer t0k3n"}).status_code == 200


def test_a_bounded_evaluate_wait_answers_200_with_the_task_state_never_202(serve) -> None:
    srv = serve(evaluate_wait_s=0.3)
    r = srv.http.post("/evaluate", json=drkernel_payload("slow", "# fake: sleep=1.5"))
    assert r.status_code == 200 and r.json()["status"] in ("pending", "processing")
    deadline = time.monotonic() + 20
    while srv.http.get("/status/slow").json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert srv.http.get("/results/slow").json()["correctness"] is True


def test_a_batch_runs_in_parallel_across_workers(serve) -> None:
    srv = serve(workers=4)
    tasks = [drkernel_payload(f"b{i}", "# fake: sleep=0.5") for i in range(8)]
    started = time.monotonic()
    r = srv.http.post("/evaluate/batch", json={"batch_id": "B", "tasks": tasks})
    elapsed = time.monotonic() - started
    body = r.json()
    assert r.status_code == 200 and body["batch_status"] == "completed"
    assert [x["task_id"] for x in body["results"]] == [f"b{i}" for i in range(8)]
    assert body["completed_tasks"] == 8 and elapsed < 3.0  # sequential would take 4 s


def test_cancel_removes_a_queued_task_and_kills_a_running_one(serve) -> None:
    srv = serve(isolation="process", workers=1, evaluate_wait_s=0.1)
    srv.http.post("/evaluate", json=drkernel_payload("run", "# fake: sleep=30"))
    srv.http.post("/evaluate", json=drkernel_payload("wait", "# fake: speedup=2"))
    assert srv.http.get("/status/wait").json()["queue_position"] == 0
    assert srv.http.delete("/tasks/wait").json()["cancelled"] is True
    started = time.monotonic()
    assert srv.http.delete("/tasks/run").json()["cancelled"] is True
    deadline = time.monotonic() + 15
    while srv.http.get("/v1/workers").json()["workers"][0]["restarts"] < 1:
        assert time.monotonic() < deadline, "the running evaluation was not killed"
        time.sleep(0.05)
    assert time.monotonic() - started < 15
    for tid in ("run", "wait"):
        res = srv.http.get(f"/results/{tid}").json()
        assert res["status"] == "failed" and res["error_code"] == "SYSTEM_ERROR"
        assert res["error_message"] == "Task cancelled"
        assert srv.http.get(f"/status/{tid}").json()["status"] == "failed"
    assert srv.http.delete("/tasks/run").status_code == 404  # KernelGYM: finished, not cancellable
    # the pool still works after the kill
    assert srv.http.post("/evaluate", json=drkernel_payload("after", "# fake: speedup=2")
                         ).status_code == 200


def test_a_full_queue_answers_429_with_retry_after(serve) -> None:
    srv = serve(workers=1, max_queue=2, evaluate_wait_s=0.05)
    codes = [srv.http.post("/evaluate", json=drkernel_payload(f"q{i}", "# fake: sleep=2")
                           ).status_code for i in range(4)]
    assert codes[:3] == [200, 200, 200] and codes[3] == 429  # 1 running + 2 queued
    r = srv.http.post("/evaluate", json=drkernel_payload("q9", "# fake: sleep=2"))
    assert r.status_code == 429 and r.headers["retry-after"] == "5"
    assert srv.http.get("/queue/status").json()["pending"] == 2
    # a bad request is told what is wrong, full queue or not: validation comes before the queue
    bad = srv.http.post("/evaluate",
                        json=drkernel_payload("q10", "# fake: sleep=2") | {"num_correct_trials": 0})
    assert bad.status_code == 400 and "num_correct_trials" in bad.json()["message"]


def test_a_batch_larger_than_the_queue_bound_is_413_not_a_429_retried_for_ever(serve) -> None:
    """A batch of more tasks than --max-queue was a 429 'queue full (0/3 tasks)' with Retry-After on an
    empty queue: every client retried it until it gave up, and it could never pass."""
    srv = serve(workers=1, max_queue=3)
    native = srv.http.post("/v1/tasks/batch", json={"requests": [
        {"reference_code": REF, "kernel_code": kernel(f"# fake: speedup={i + 1}")} for i in range(4)]})
    anchor = srv.http.post("/evaluate/batch", json={"batch_id": "b", "tasks": [
        drkernel_payload(f"big-{i}", "# fake: speedup=2") for i in range(4)]})
    for r in (native, anchor):
        assert r.status_code == 413 and "retry-after" not in r.headers, r.text
        assert "queue bound (3, --max-queue)" in r.json()["message"]
    assert srv.http.get("/queue/status").json()["pending"] == 0  # nothing of either was kept
    fits = srv.http.post("/v1/tasks/batch", json={"requests": [
        {"reference_code": REF, "kernel_code": kernel(f"# fake: speedup={i + 1}")} for i in range(3)]})
    assert fits.status_code == 202


def test_invalid_options_are_refused_at_submit_not_after_queueing(serve) -> None:
    srv = serve()
    body = {"request": {"reference_code": REF, "kernel_code": kernel("# fake: speedup=2"),
                        "options": {"num_correct_trials": 0}}}
    r = srv.http.post("/v1/tasks", json=body)
    assert r.status_code == 400 and r.json()["error_code"] == "VALIDATION_ERROR"
    assert "num_correct_trials: must be between 1 and 100" in r.json()["message"]
    assert srv.http.get("/queue/status").json()["pending"] == 0


def test_an_unknown_reward_preset_is_refused_at_submit(serve) -> None:
    """The judge would have turned it into "paper" silently; EvalOptions refuses it first."""
    srv = serve()
    for bad in ({"reward_preset": "papr"}, {"speedup_cap": 0.0}):
        body = {"request": {"reference_code": REF, "kernel_code": kernel("# fake: speedup=2"),
                            "options": bad}}
        r = srv.http.post("/v1/tasks", json=body)
        assert r.status_code == 400 and r.json()["error_code"] == "VALIDATION_ERROR"
        assert next(iter(bad)) in r.json()["message"]
    assert "'papr' is not one of paper, released, eval, correctness_speedup" in srv.http.post(
        "/v1/tasks", json={"request": {"reference_code": REF, "kernel_code": kernel(""),
                                       "options": {"reward_preset": "papr"}}}).json()["message"]
    assert srv.http.get("/queue/status").json()["pending"] == 0


def test_metrics_and_health_report_real_numbers(serve) -> None:
    srv = serve(workers=2)
    for i, marks in enumerate(["# fake: speedup=2", "# fake: incorrect", "# fake: compile_error"]):
        srv.http.post("/evaluate", json=drkernel_payload(f"m{i}", marks))
    health = srv.http.get("/health").json()
    assert health["status"] == "healthy" and health["total_processed"] == 3
    assert health["completed"] == 2 and health["failed"] == 1 and health["workers"]["idle"] == 2
    text = srv.http.get("/metrics", headers={"Accept": "text/plain"})
    assert text.headers["content-type"].startswith("text/plain")
    samples = dict(line.rsplit(" ", 1) for line in text.text.splitlines()
                   if line and not line.startswith("#"))
    assert samples['drkernel_tasks_finished_total{outcome="ok"}'] == "1"
    assert samples['drkernel_tasks_finished_total{outcome="compile_error"}'] == "1"
    assert samples['drkernel_queue_depth{priority="normal"}'] == "0"
    host = socket.gethostname()
    assert samples[f'drkernel_worker_state{{worker="local-0",device="cpu",host="{host}",node="",'
                   'state="idle"}'] == "1"
    assert samples["drkernel_workers_alive"] == "2" and samples["drkernel_workers_configured"] == "2"
    assert samples['drkernel_stored_results{outcome="ok"}'] == "1"
    assert samples['drkernel_stored_tasks{state="done"}'] == "3"
    v1 = srv.http.get("/v1/metrics")
    assert v1.headers["content-type"].startswith("text/plain")
    assert 'drkernel_tasks_finished_total{outcome="ok"} 1\n' in v1.text
    page = srv.http.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "local-1" in page.text
    status = srv.http.get("/v1/status").text
    assert "local-1" in status
    assert "uptime: 0h 00m" in status and "{" not in status.split("<body>")[1]  # no raw dicts
    assert "None" not in status  # an idle worker's task is '-'
    workers = srv.http.get("/v1/workers").json()
    assert workers["total_workers"] == 2 and workers["active_workers"] == 2


def test_native_api_round_trip_with_the_result_contract(serve) -> None:
    srv = serve()
    req = {"reference_code": REF, "kernel_code": kernel("# fake: speedup=3"),
           "options": {"timeout_s": 5.0}}
    r = srv.http.post("/v1/tasks", json={"request": req, "priority": "high"})
    assert r.status_code == 202
    tid = r.json()["task_id"]
    view = srv.http.get(f"/v1/tasks/{tid}", params={"wait": 5}).json()
    assert view["state"] == "done" and view["result"]["outcome"] == "ok"
    assert view["result"]["speedup"] == 3.0 and view["priority"] == "high"
    batch = srv.http.post("/v1/tasks/batch", json={"requests": [req | {"task_id": "n1"},
                                                                {"request": req}]}).json()
    ids = [t["task_id"] for t in batch["tasks"]]
    waited = srv.http.post("/v1/tasks/wait", json={"task_ids": ids + ["ghost"], "timeout_s": 5})
    states = [t["state"] for t in waited.json()["tasks"]]
    assert ids[0] == "n1" and states == ["done", "done", "unknown"]


def test_openapi_has_the_request_bodies_and_no_phantom_422(serve) -> None:
    srv = serve()
    schema = srv.http.get("/openapi.json").json()
    paths = schema["paths"]
    for path in ("/evaluate", "/evaluate/batch", "/v1/tasks", "/v1/tasks/batch", "/v1/tasks/wait"):
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body, path
    anchor = schema["components"]["schemas"]["AnchorRequest"]
    assert {"reference_code", "kernel_code"} <= set(anchor["properties"])
    assert "request" in (paths["/v1/tasks"]["post"]["requestBody"]["content"]["application/json"]
                         ["schema"]["properties"])
    assert not any("422" in op.get("responses", {}) for ops in paths.values() for op in ops.values())
    assert "400" in paths["/v1/tasks/{task_id}"]["get"]["responses"]  # ?wait=abc is a 400
    assert "400" not in paths["/status/{task_id}"]["get"]["responses"]
    # and a bad query value really is a 400 in the envelope, as documented
    bad = srv.http.get("/v1/tasks/x?wait=abc")
    assert bad.status_code == 400 and bad.json()["error_code"] == "VALIDATION_ERROR"


def test_serve_help_and_start_up_say_how_auth_works(capsys, monkeypatch) -> None:
    import pytest
    import uvicorn

    from drkernel.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "DRKERNEL_AUTH_TOKEN" in text and "Bearer" in text
    assert "--max-queue MAX_QUEUE tasks waiting beyond this are refused with 429" in text
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: setattr(self, "started", True))
    monkeypatch.setenv("DRKERNEL_AUTH_TOKEN", "s3cret")
    assert main(["serve", "--judge", "fake", "--db", ":memory:"]) == 0
    err = capsys.readouterr().err
    assert "bearer-token auth is on" in err and "s3cret" not in err
    monkeypatch.delenv("DRKERNEL_AUTH_TOKEN", raising=False)
    assert main(["serve", "--judge", "fake", "--db", ":memory:"]) == 0
    assert "auth is off" in capsys.readouterr().err


def test_a_wrongly_typed_option_with_no_default_is_a_400_not_a_500(serve) -> None:
    """Options whose default is None (atol, rtol, num_perf_trials, seed) went untyped to the judge's
    checks, where a string was a TypeError and a 500."""
    srv = serve()
    for bad in ({"atol": "x"}, {"rtol": [1]}, {"num_perf_trials": "3"}, {"seed": 1.5}):
        body = {"request": {"reference_code": REF, "kernel_code": kernel("# fake: speedup=2"),
                            "options": bad}}
        r = srv.http.post("/v1/tasks", json=body)
        assert r.status_code == 400 and r.json()["error_code"] == "VALIDATION_ERROR", r.text
        assert f"request.options.{next(iter(bad))}: expected" in r.json()["message"]
    ok = {"request": {"reference_code": REF, "kernel_code": kernel("# fake: speedup=2"),
                      "options": {"atol": 1, "rtol": 0.5, "num_perf_trials": 3, "seed": 7}}}
    assert srv.http.post("/v1/tasks", json=ok).status_code == 202


def test_a_body_nested_past_the_parser_is_a_400_not_a_500(serve) -> None:
    """JSON nested deeper than Python's recursion limit was a RecursionError, a 500, and the connection
    closed under the client."""
    srv = serve()
    deep = b"[" * 100_000 + b"]" * 100_000
    for path in ("/v1/tasks", "/evaluate", "/workflow/submit"):
        r = srv.http.post(path, content=deep, headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["message"], (path, r.text)
    assert srv.http.get("/health").status_code == 200


def test_task_ids_with_url_characters_are_fetched_and_cancelled_by_their_own_id(serve) -> None:
    from drkernel.executors.http_client import Client
    from drkernel.types import EvalRequest

    srv = serve()
    ids = ["level1/3", "a?b=c", "#x", "50%"]
    with Client(base_url=srv.url, max_retries=0) as client:
        reqs = [EvalRequest(reference_code=REF, kernel_code=kernel(""), task_id=t) for t in ids]
        assert [r.task_id for r in client.evaluate(reqs, timeout_s=10)] == ids
        assert [client.get(t)["task_id"] for t in ids] == ids
        assert [client.cancel(t) for t in ids] == [False] * 4  # finished: nothing to cancel
    for t in ids:
        quoted = t.replace("%", "%25").replace("/", "%2F").replace("?", "%3F").replace("#", "%23")
        assert srv.http.get(f"/results/{quoted}").json()["task_id"] == t
        assert srv.http.get(f"/status/{quoted}").json()["task_id"] == t
        assert srv.http.get(f"/workflow/results/{quoted}").json()["task_id"] == t


def test_a_bad_query_value_is_named_in_words_not_as_a_python_list(serve) -> None:
    bad = serve().http.get("/v1/tasks/x?wait=abc").json()
    assert bad["message"] == ("Request validation failed: query.wait: "
                              "Input should be a valid number, unable to parse string as a number")
    assert bad["errors"][0]["loc"] == ["query", "wait"]


def _scripted_errors(request):  # an exception in forward; a timeout; else the markers
    from drkernel.executors.fake import scripted_result
    from drkernel.types import EvalOutcome, EvalResult

    if "forward_error" in request.kernel_code:
        return EvalResult.failure(EvalOutcome.RUNTIME_ERROR, "forward_error", "ValueError: boom",
                                  task_id=request.task_id)
    if "hang" in request.kernel_code:
        return EvalResult.failure(EvalOutcome.TIMEOUT, "timeout", "evaluation exceeded 300 s",
                                  task_id=request.task_id)
    return scripted_result(request)


def test_health_counts_completed_and_failed_as_the_results_say_them(serve) -> None:
    """An exception in forward is `completed` in /results and /evaluate/batch (as KernelGYM), but
    /health counted it `failed`: its numbers disagreed with the statuses the client got."""
    from drkernel.executors.fake import FakeExecutor

    srv = serve(executor=lambda _: FakeExecutor(_scripted_errors))
    tasks = [drkernel_payload(f"h{i}", marks) for i, marks in
             enumerate(["# fake: speedup=2", "# forward_error", "# hang", "# fake: compile_error"])]
    batch = srv.http.post("/evaluate/batch", json={"batch_id": "b", "tasks": tasks}).json()
    statuses = [r["status"] for r in batch["results"]]
    assert statuses == ["completed", "completed", "failed", "failed"]
    health = srv.http.get("/health").json()
    assert health["total_processed"] == 4
    counted = (health["completed"], health["failed"])
    assert counted == (batch["completed_tasks"], batch["failed_tasks"]) == (2, 2)
    assert health["queue_status"]["completed"] == 2


def test_a_full_disk_is_a_503_that_says_so_not_a_bare_500(serve, monkeypatch) -> None:
    """The store failing to commit answered 500 'internal error: OperationalError', which no client
    retries; it is a 503 with Retry-After naming the store's own words, and the clients retry it."""
    import sqlite3

    from drkernel.server.store import TaskStore

    def full(self, tasks):
        with self._tx():
            raise sqlite3.OperationalError("database or disk is full")

    srv = serve()
    monkeypatch.setattr(TaskStore, "submit", full)
    r = srv.http.post("/v1/tasks", json={"reference_code": REF, "kernel_code": kernel("# fake: speedup=2")})
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    body = r.json()
    assert "task store" in body["message"] and "database or disk is full" in body["message"]
    assert body["error_code"] == "RESOURCE_ERROR"
    anchor = srv.http.post("/evaluate", json=drkernel_payload("full-1", "# fake: speedup=2"))
    assert anchor.status_code == 503 and "database or disk is full" in anchor.json()["message"]


def test_a_null_for_an_option_that_takes_none_is_a_400_not_a_500(serve) -> None:
    """null passed the edge's type check for every option, and an option that takes no null (num_warmup,
    timeout_s, profile) reached the judge's checks as None: a TypeError, a 500. EvalOptions refuses it."""
    srv = serve()
    for name in ("num_warmup", "timeout_s", "num_correct_trials"):
        body = {"request": {"reference_code": REF, "kernel_code": kernel("# fake: speedup=2"),
                            "options": {name: None}}}
        r = srv.http.post("/v1/tasks", json=body)
        assert r.status_code == 400 and r.json()["error_code"] == "VALIDATION_ERROR", r.text
        assert f"{name}: None is not" in r.json()["message"], r.text


def test_the_clients_get_waiting_for_ever_asks_the_server_not_the_socket(serve) -> None:
    """Client.get(task_id, wait_s=float("inf")), which the docs say waits for ever, raised OverflowError
    ('timestamp out of range for platform time_t') from the socket's timeout, outside the client's
    exception tree, before anything was sent; the server holds a long poll at most 60 s anyway."""
    import asyncio

    from drkernel.executors.http_client import AsyncClient, Client
    from drkernel.types import EvalRequest

    srv = serve()
    with Client(base_url=srv.url) as client:
        (task_id,) = client.submit([EvalRequest(reference_code=REF, kernel_code=kernel("# fake: speedup=2"))])
        view = client.get(task_id, wait_s=float("inf"))
        assert view["state"] == "done" and view["result"]["speedup"] == 2

    async def run() -> dict:
        async with AsyncClient(base_url=srv.url) as aclient:
            return await aclient.get(task_id, wait_s=1e300)

    assert asyncio.run(run())["state"] == "done"


def test_a_batch_the_full_queue_refuses_partway_is_withdrawn_on_the_server(serve, monkeypatch) -> None:
    """The Client sends a batch in chunks; the second found the queue full (429) and submit raised, while
    the first chunk's tasks ran on for nobody. Against the real server: they end cancelled."""
    import pytest

    from drkernel.errors import Overloaded
    from drkernel.executors import http_client
    from drkernel.executors.http_client import Client
    from drkernel.types import EvalOptions, EvalRequest

    monkeypatch.setattr(http_client, "_CHUNK", 2)
    srv = serve(workers=1, max_queue=2)
    opts = EvalOptions(timeout_s=30)
    reqs = [EvalRequest(reference_code=REF, kernel_code=kernel("# fake: sleep=2"), options=opts,
                        task_id=f"w{i}") for i in range(5)]
    with Client(base_url=srv.url, max_retries=0) as client:
        with pytest.raises(Overloaded, match=r"queue full.*withdrawn: 2 tasks it had queued cancelled"):
            client.submit(reqs)
        assert [client.get(f"w{i}")["state"] for i in range(2)] == ["cancelled"] * 2

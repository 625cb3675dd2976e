"""Input a careless or hostile client sends: each is a 4xx that says what is wrong, never a 500, a
worker lost or a task that never ends."""

from __future__ import annotations

import json

REF = "import torch\n\nclass Model:\n    pass\n"


def kernel(marks: str) -> str:
    return f"{marks}\nimport torch\n\nclass ModelNew:\n    pass\n"


def post_raw(srv, path: str, body: dict) -> object:  # type: ignore[no-untyped-def]
    """POST a body that may hold Infinity or NaN (json.dumps writes them; httpx's json= would not)."""
    return srv.http.post(path, content=json.dumps(body).encode(),
                         headers={"content-type": "application/json"})


def test_an_infinite_or_nan_option_is_a_400_not_a_worker_busy_for_ever(serve) -> None:
    """timeout_s: Infinity passed the judge's `> 0` check; its deadline overflowed the pool's wait, the
    task stayed `running` and its worker `busy` for ever (and again after every restart)."""
    srv = serve(workers=1)
    for name, value in (("timeout_s", float("inf")), ("timeout_s", float("-inf")),
                        ("gpu_memory_fraction", float("nan")), ("launch_preroll_us", float("inf"))):
        body = {"request": {"reference_code": REF, "kernel_code": kernel(""),
                            "options": {name: value}}}
        r = post_raw(srv, "/v1/tasks", body)
        assert r.status_code == 400, r.text
        assert r.json()["message"] == f"request.options.{name}: expected a finite number"
    ok = srv.http.post("/v1/tasks", json={"request": {"reference_code": REF, "kernel_code": kernel(""),
                                                      "task_id": "after"}})
    assert ok.status_code == 202
    assert srv.http.get("/v1/tasks/after?wait=10").json()["state"] == "done"  # the one worker is free


def test_an_integer_past_the_range_of_a_float_is_a_400_or_a_bounded_wait_not_a_500(serve) -> None:
    """JSON integers have no bound: 10**400 in a number option (atol, coverage_weight) or in a wait's
    timeout_s overflowed float() and answered 500 'internal error: OverflowError'."""
    srv = serve(workers=1)
    huge = 10**400
    for name in ("atol", "coverage_weight", "timeout_s"):
        body = {"request": {"reference_code": REF, "kernel_code": kernel(""), "options": {name: huge}}}
        r = post_raw(srv, "/v1/tasks", body)
        assert r.status_code == 400, (name, r.text)
        assert r.json()["message"] == f"request.options.{name}: expected a finite number", r.text
    for value in (huge, -huge):  # as Infinity and -Infinity: the longest wait, or none
        r = post_raw(srv, "/v1/tasks/wait", {"task_ids": ["x"], "timeout_s": value})
        assert r.status_code == 200, (value, r.text)
        assert r.json()["tasks"] == [{"task_id": "x", "state": "unknown", "result": None}]


def test_a_wait_whose_timeout_is_no_number_is_a_400(serve) -> None:
    """POST /v1/tasks/wait took [], {} and "" for a wait of 0 s and "30" for one of 30 s, without a word."""
    srv = serve(workers=1)
    for value in ([], {}, "", "30", True):
        r = srv.http.post("/v1/tasks/wait", json={"task_ids": ["x"], "timeout_s": value})
        assert r.status_code == 400, (value, r.text)
        assert r.json()["message"] == "wait/timeout_s must be a number of seconds", r.text
    for value in (0, 0.5, None):  # a number, or none (no wait)
        r = srv.http.post("/v1/tasks/wait", json={"task_ids": ["x"], "timeout_s": value})
        assert r.status_code == 200, (value, r.text)


def test_a_timeout_past_the_clock_leaves_a_thread_judge_free(serve) -> None:
    """timeout_s: 1e300 is finite, but its watchdog deadline overflowed the thread judge's wait: the
    task failed and its worker stayed `busy` for ever, so the server lost it."""
    srv = serve(isolation="thread", workers=1)
    body = {"request": {"reference_code": REF, "kernel_code": kernel("# fake: speedup=2"),
                        "task_id": "long", "options": {"timeout_s": 1e300}}}
    refused = post_raw(srv, "/v1/tasks", body)  # now refused before it is queued: at most a day
    assert refused.status_code == 400 and "timeout_s: must be > 0 and at most 86400" in refused.text
    body["request"]["options"]["timeout_s"] = 86400.0  # the longest a request may ask
    assert post_raw(srv, "/v1/tasks", body).status_code == 202
    view = srv.http.get("/v1/tasks/long?wait=10").json()
    assert view["state"] == "done" and view["result"]["outcome"] == "ok", view
    (worker,) = srv.http.get("/v1/workers").json()["workers"]
    assert worker["state"] == "idle" and worker["tasks_done"] == 1


def test_a_worker_whose_call_raises_is_replaced_not_left_busy(serve) -> None:
    """An exception from a worker call that is neither WorkerLost nor EvalTimeout (a bug) left the
    slot `busy` with the task for ever: one bad call cost the server that worker."""
    from drkernel.executors.fake_judge import fake_judge
    from drkernel.executors.local import LocalExecutor

    class FlakyOnce(LocalExecutor):
        failed = False

        def _call(self, slot, request, deadline_s):  # type: ignore[no-untyped-def]
            if not FlakyOnce.failed:
                FlakyOnce.failed = True
                raise OverflowError("a bug in the call")
            return super()._call(slot, request, deadline_s)

    config = LocalExecutor.Config(devices=("cpu",), isolation="thread")
    srv = serve(executor=lambda s: FlakyOnce(config, fake_judge))
    for task_id in ("first", "second"):
        body = {"request": {"reference_code": REF, "kernel_code": kernel(f"# {task_id}"),
                            "task_id": task_id}}
        assert srv.http.post("/v1/tasks", json=body).status_code == 202
    first = srv.http.get("/v1/tasks/first?wait=10").json()
    assert first["result"]["error"]["kind"] == "dispatch_error"
    second = srv.http.get("/v1/tasks/second?wait=10").json()
    assert second["state"] == "done" and second["result"]["outcome"] == "ok", second
    (worker,) = srv.http.get("/v1/workers").json()["workers"]
    assert worker["restarts"] == 1 and "a bug in the call" in worker["last_error"]


def test_a_lone_surrogate_in_a_body_is_a_400_not_a_500(serve) -> None:
    """JSON may escape half of a UTF-16 pair ("\\ud800"), which no UTF-8 text holds: SQLite and the
    fingerprint could not encode it, a 500 that closed the connection."""
    srv = serve()
    code = json.dumps(kernel(""))[1:-1]
    bodies = {
        "/v1/tasks": '{"reference_code": "import torch\\nclass Model: pass", "kernel_code": "%s", '
                     '"task_id": "\\ud800"}' % code,
        "/v1/tasks/batch": '{"requests": [{"reference_code": "import torch\\nclass Model: pass\\n#\\udfff",'
                           ' "kernel_code": "%s"}]}' % code,
        "/v1/tasks/wait": '{"task_ids": ["x\\uDBFF"]}',
    }
    for path, body in bodies.items():
        r = srv.http.post(path, content=body.encode(), headers={"content-type": "application/json"})
        assert r.status_code == 400, (path, r.text)
        assert r.json()["message"] == ("body is not valid JSON: a string holds a lone UTF-16 surrogate "
                                       "(half of a \\uD800-\\uDFFF pair), which is not text"), r.text
    pair = '{"reference_code": "import torch\\nclass Model: pass # \\ud83d\\ude00", "kernel_code": "%s"}'
    r = srv.http.post("/v1/tasks", content=(pair % code).encode())
    assert r.status_code == 202, r.text  # a whole pair is a character (U+1F600)


def test_debug_validate_lists_an_infinite_gpu_count_as_an_error_not_a_500(serve) -> None:
    """int(Infinity) raised OverflowError: a 500 where "resources.gpus must be an integer" belongs."""
    srv = serve()
    base = {"reference_code": REF, "kernel_code": kernel("")}
    for gpus in (float("inf"), float("-inf"), float("nan"), [1], "two"):
        r = post_raw(srv, "/debug/validate", base | {"resources": {"gpus": gpus}})
        assert r.status_code == 200, (gpus, r.text)
        assert r.json()["errors"] == ["resources.gpus must be an integer"], (gpus, r.text)
    assert post_raw(srv, "/debug/validate", base | {"resources": {"gpus": 2}}).json()["valid"] is True


def test_native_force_must_be_a_boolean(serve) -> None:
    """`"force": "no"` (or 1, or "false") was truthy: the finished task was judged again."""
    srv = serve()
    body = {"request": {"reference_code": REF, "kernel_code": kernel(""), "task_id": "once"}}
    assert srv.http.post("/v1/tasks", json=body).status_code == 202
    assert srv.http.get("/v1/tasks/once?wait=10").json()["state"] == "done"
    for force in ("no", "false", 1):
        r = srv.http.post("/v1/tasks", json=body | {"force": force})
        assert r.status_code == 400, (force, r.text)
        assert r.json()["message"] == "force: expected true or false", r.text
        batch = srv.http.post("/v1/tasks/batch", json={"requests": [body | {"force": force}]})
        assert batch.status_code == 400, (force, batch.text)
    again = srv.http.post("/v1/tasks", json=body | {"force": False}).json()
    assert again["created"] is False and again["state"] == "done"
    assert srv.http.post("/v1/tasks", json=body | {"force": True}).json()["created"] is True


def test_a_wait_of_nan_or_a_boolean_is_a_400(serve) -> None:
    """timeout_s NaN waited 0 s and `true` 1 s, silently; a wait the client did not mean."""
    srv = serve()
    for value in (float("nan"), True, False):
        r = post_raw(srv, "/v1/tasks/wait", {"task_ids": ["x"], "timeout_s": value})
        assert r.status_code == 400, (value, r.text)
        assert r.json()["message"] == "wait/timeout_s must be a number of seconds", r.text
    r = srv.http.get("/v1/tasks/x?wait=nan")
    assert r.status_code == 400, r.text
    assert post_raw(srv, "/v1/tasks/wait", {"task_ids": ["x"], "timeout_s": float("inf")}).status_code == 200
    assert srv.http.post("/v1/tasks/wait", json={"task_ids": ["x"], "timeout_s": 0.1}).status_code == 200


def test_a_task_id_with_a_newline_or_a_control_character_is_a_400(serve) -> None:
    """Such ids were accepted (202) and reached the log lines that name the task."""
    srv = serve(workers=1)
    for task_id in ("a\nb", "a\u0000b", "tab\there", "\x1b[31mred"):
        body = {"request": {"reference_code": REF, "kernel_code": kernel(""), "task_id": task_id}}
        native = srv.http.post("/v1/tasks", json=body)
        assert native.status_code == 400 and "printable" in native.json()["message"], native.text
        anchor = srv.http.post("/evaluate", json={"reference_code": REF, "kernel_code": kernel(""),
                                                  "task_id": task_id})
        assert anchor.status_code in (400, 422), anchor.text
    ok = srv.http.post("/v1/tasks", json={"request": {"reference_code": REF, "kernel_code": kernel(""),
                                                      "task_id": "plain id/with ünïcode"}})
    assert ok.status_code == 202, ok.text


# id -> accepted; the printable rule of both APIs (store.task_id_error), within the anchor's 100 characters
TASK_IDS = {
    "plain": True, "plain id/with ünïcode": True, "a" * 100: True,
    "a\nb": False, "a\u0000b": False, "tab\there": False, "\x1b[31mred": False,
    "a\x85b": False, "\x9b31mred": False, "a\u2028b": False, "a\u2029b": False, "zero\u200bwidth": False,
}


def test_both_apis_accept_and_refuse_the_same_task_ids(serve) -> None:
    """The KernelGYM routes checked ids by a regex of their own, C0 controls only: a C1 control (NEL,
    the 8-bit CSI) or a Unicode line separator was accepted there, refused on /v1, and reached the log
    lines that name the task. Length: 200 on /v1, the anchor's 100 on its routes. (An empty id is no
    id on /v1, which makes one; the anchor refuses it, as KernelGYM.)"""
    native_srv, anchor_srv = serve(workers=1), serve(workers=1)  # one id, two APIs' options: a 409 on one
    for task_id, ok in [*TASK_IDS.items(), ("a" * 101, None), ("a" * 200, None), ("a" * 201, False)]:
        native = native_srv.http.post("/v1/tasks", json={"request": {
            "reference_code": REF, "kernel_code": kernel(""), "task_id": task_id}})
        anchor = anchor_srv.http.post("/evaluate", json={"reference_code": REF, "kernel_code": kernel(""),
                                                         "task_id": task_id})
        assert native.status_code == (400 if ok is False else 202), (task_id, native.text)
        assert anchor.status_code == (200 if ok else 400), (task_id, anchor.text)
        if anchor.status_code == 400:
            assert anchor.json()["message"] == ("Request validation failed: task_id: a string of "
                                                "1-100 printable characters"), anchor.text
        if native.status_code == 400:
            assert native.json()["message"] == "task_id: a string of 1-200 printable characters"


def test_a_task_id_that_is_not_text_is_refused_not_replaced(serve) -> None:
    """On /v1/tasks a task_id of 0, false or [] was replaced by a new id without a word (the caller then
    waited on an id the server never had), where 123 was refused. Each is a 400 now; an empty id, or
    none, still lets the server name the task."""
    srv = serve(workers=1)
    for bad in (0, False, [], {}, 0.0, 123):
        for where in ("request", "item"):
            item: dict = {"request": {"reference_code": REF, "kernel_code": kernel("")}}
            (item["request"] if where == "request" else item)["task_id"] = bad
            r = srv.http.post("/v1/tasks", json=item)
            assert r.status_code == 400, (bad, where, r.text)
            assert r.json()["message"] == "task_id: a string of 1-200 printable characters", r.text
    for none in (None, ""):
        r = srv.http.post("/v1/tasks", json={"request": {"reference_code": REF, "kernel_code": kernel(""),
                                                         "task_id": none}})
        assert r.status_code == 202 and r.json()["task_id"].startswith("task-"), r.text


def test_a_task_id_reused_across_the_two_apis_says_what_differs(serve) -> None:
    """The same code under one id through /evaluate then /v1/tasks was a 409 'already names a different
    request' with task_id null: the two APIs' default options (timeouts 300 and 180 s) differ."""
    srv = serve(workers=1)
    code = kernel("# fake: speedup=2")
    first = srv.http.post("/evaluate", json={"reference_code": REF, "kernel_code": code, "task_id": "same"})
    assert first.status_code == 200, first.text
    again = srv.http.post("/v1/tasks", json={"request": {"reference_code": REF, "kernel_code": code,
                                                         "task_id": "same"}})
    assert again.status_code == 409
    body = again.json()
    assert body["task_id"] == "same" and "options.timeout_s" in body["message"], body

"""HttpExecutor and the client's seam, against httpx.MockTransport: retries, deadlines, errors."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from drkernel.errors import ConfigError, EvalTimeout, ExecutorError, Overloaded
from drkernel.executors import http_client
from drkernel.executors.fake import scripted_result
from drkernel.executors.http import HttpExecutor
from drkernel.executors.http_client import AsyncClient, Client
from drkernel.types import EvalOptions, EvalRequest, EvalResult


def req(task_id: str | None = None) -> EvalRequest:
    return EvalRequest(reference_code="ref", kernel_code="# fake: speedup=2", task_id=task_id,
                       options=EvalOptions(timeout_s=1))


class FakeServer:
    """Answers /v1 like drkernel serve; `script` lists statuses to return before succeeding."""

    def __init__(self, script: list[int] | None = None, finish: bool = True) -> None:
        self.script = list(script or [])
        self.finish = finish
        self.tasks: dict[str, dict] = {}
        self.calls: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(f"{request.method} {request.url.path}")
        if self.script:
            return httpx.Response(self.script.pop(0), headers={"Retry-After": "0"},
                                  json={"message": "busy"})
        path = request.url.path
        if path == "/health":
            return httpx.Response(200, json={"workers": {"total": 2}})
        if path == "/v1/tasks/batch":
            import json

            views = []
            for item in json.loads(request.content)["requests"]:
                task_id = item["request"]["task_id"]
                views.append({"task_id": task_id, "state": "queued", "created": task_id not in self.tasks})
                self.tasks[task_id] = item["request"]
            return httpx.Response(202, json={"tasks": views})
        if path == "/v1/tasks/wait":
            import json

            ids = json.loads(request.content)["task_ids"]
            views = [{"task_id": i, "state": "done" if self.finish else "running",
                      "result": scripted_result(EvalRequest.from_dict(self.tasks[i])).to_dict()
                      if self.finish else None} for i in ids]
            return httpx.Response(200, json={"tasks": views})
        if request.method == "DELETE":
            return httpx.Response(200, json={"cancelled": True})
        return httpx.Response(404, json={"message": "no"})


def executor(server: FakeServer, **kw: object) -> HttpExecutor:
    config = HttpExecutor.Config(base_url="http://judge.test", max_retries=3, **kw)
    return HttpExecutor(config, transport=httpx.MockTransport(server))


def test_results_come_back_in_order_with_the_callers_task_ids() -> None:
    with executor(FakeServer()) as ex:
        results = ex.evaluate([req("a"), req(), req("c")])
    assert [r.speedup for r in results] == [2.0, 2.0, 2.0]
    assert results[0].task_id == "a" and results[2].task_id == "c"
    assert results[1].task_id and results[1].task_id.startswith("client-")


def test_429_and_503_are_retried_with_backoff() -> None:
    server = FakeServer(script=[429, 503])
    with executor(server) as ex:
        (res,) = ex.evaluate([req("a")])
    assert res.speedup == 2.0 and server.calls[:3] == ["GET /health"] * 3  # capacity asked first


def test_an_overloaded_server_raises_after_bounded_retries() -> None:
    with executor(FakeServer(script=[429] * 10)) as ex, pytest.raises(Overloaded):
        ex.evaluate([req("a")])


def test_a_bad_token_is_a_config_error() -> None:
    with executor(FakeServer(script=[401])) as ex, pytest.raises(ConfigError, match="token"):
        ex.evaluate([req("a")])


def test_the_start_check_refuses_a_missing_or_wrong_token() -> None:
    """/health is serve's one route open without the token: check_server passed with no token or a wrong
    one, and each evaluation of the run then failed HTTP 401, after the model's answer was spent on it."""
    inner = FakeServer()

    def guarded(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/health" and request.headers.get("authorization") != "Bearer right":
            return httpx.Response(401, json={"message": "missing or bad bearer token"})
        return inner(request)

    for token in (None, "wrong", "right"):
        config = HttpExecutor.Config(base_url="http://judge.test", token=token, max_retries=0)
        with HttpExecutor(config, transport=httpx.MockTransport(guarded)) as ex:
            if token == "right":
                ex.check_server()
                assert ex.capacity == 2
                continue
            with pytest.raises(ConfigError, match="401.*token"):
                ex.check_server()


def test_a_server_that_is_not_drkernels_is_an_executor_error_not_a_key_error() -> None:
    """A server answering 200 and `{}` to anything (another service on the port, a stub) passed the start
    check, and the first wait raised KeyError: 'tasks' out of the client: `drkernel optimize` called it
    a bug of drkernel (exit 70). The start check and the wait now say what answered."""
    def anything(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"ok": True})

    config = HttpExecutor.Config(base_url="http://other.test", max_retries=0)
    with HttpExecutor(config, transport=httpx.MockTransport(anything)) as ex:
        with pytest.raises(ExecutorError, match="no list of tasks.*drkernel serve"):
            ex.check_server()
    with Client(base_url="http://other.test", transport=httpx.MockTransport(anything)) as client:
        with pytest.raises(ExecutorError, match="no list of tasks"):
            client.wait(["a"], 5.0)

    def bad_result(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"tasks": [{"task_id": "a", "state": "done", "result": {"x": 1}}]})

    with Client(base_url="http://other.test", transport=httpx.MockTransport(bad_result)) as client:
        with pytest.raises(ExecutorError, match="task a: the server's result could not be read"):
            client.wait(["a"], 5.0)


def test_an_unreachable_server_is_an_executor_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    config = HttpExecutor.Config(base_url="http://judge.test", max_retries=1)
    with HttpExecutor(config, transport=httpx.MockTransport(refuse)) as ex:
        with pytest.raises(ExecutorError, match="ConnectError"):
            ex.evaluate([req("a")])


def test_the_batch_deadline_raises_and_cancels_orphans() -> None:
    server = FakeServer(finish=False)
    with executor(server, batch_timeout_s=0.3) as ex, pytest.raises(EvalTimeout):
        ex.evaluate([req("a"), req("b")])
    assert server.calls.count("DELETE /v1/tasks/a") == 1


def test_config_is_validated() -> None:
    with pytest.raises(ConfigError):
        HttpExecutor.Config(base_url="judge:8000")
    with pytest.raises(ConfigError):
        HttpExecutor.Config(priority="urgent")


def test_a_task_id_given_twice_in_one_batch_is_answered_twice() -> None:
    with executor(FakeServer(), batch_timeout_s=2) as ex:
        results = ex.evaluate([req("a"), req("a")])
    assert [r.task_id for r in results] == ["a", "a"]

    async def run() -> list[EvalResult]:
        transport = httpx.MockTransport(FakeServer())
        async with AsyncClient(base_url="http://judge.test", transport=transport) as client:
            return await client.evaluate([req("b"), req("b")], timeout_s=2)

    assert [r.task_id for r in asyncio.run(run())] == ["b", "b"]


@pytest.mark.parametrize("bad", [{"base_url": "127.0.0.1:8000"}, {"base_url": ""},
                                 {"max_retries": -1}, {"max_retries": 2.5}, {"request_timeout_s": 0},
                                 {"poll_s": 0}, {"backoff_s": -1}, {"backoff_s": float("nan")},
                                 {"cancel_timeout_s": 0},
                                 # each call was OverflowError ('timestamp out of range for platform
                                 # time_t') from the socket, outside the client's exceptions
                                 {"request_timeout_s": float("inf")}])
def test_a_client_config_mistake_is_a_config_error_at_once(bad: dict) -> None:
    with pytest.raises(ConfigError, match=next(iter(bad))):
        Client(**bad)


def test_a_closed_client_raises_an_executor_error() -> None:
    client = Client(base_url="http://judge.test", transport=httpx.MockTransport(FakeServer()))
    client.close()
    with pytest.raises(ExecutorError, match="closed"):
        client.health()

    async def run() -> None:
        transport = httpx.MockTransport(FakeServer())
        async with AsyncClient(base_url="http://judge.test", transport=transport) as aclient:
            pass
        await aclient.health()

    with pytest.raises(ExecutorError, match="closed"):
        asyncio.run(run())


@pytest.mark.parametrize("url", ["http://judge.test/v1", "http://judge.test/v1/", "http://judge.test/",
                                 "HTTP://judge.test"])  # the scheme in capitals was refused
def test_a_base_url_with_v1_or_a_trailing_slash_reaches_the_same_routes(url: str) -> None:
    """An OpenAI-style '.../v1' made every path /v1/v1/..., each call a bare 404."""
    server = FakeServer()
    with Client(base_url=url, transport=httpx.MockTransport(server)) as client:
        assert client.config.base_url == "http://judge.test"
        assert [r.task_id for r in client.evaluate([req("a")], timeout_s=2)] == ["a"]
    assert "POST /v1/tasks/batch" in server.calls and not any("/v1/v1" in c for c in server.calls)


def test_a_route_the_server_lacks_is_a_404_that_says_so() -> None:
    def bare(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"detail": "Not Found"})

    with Client(base_url="http://other.test", transport=httpx.MockTransport(bare), max_retries=0) as client:
        with pytest.raises(ExecutorError, match="no such route at http://other.test/: is it a drkernel"):
            client.health()
    with Client(base_url="http://judge.test", transport=httpx.MockTransport(FakeServer())) as client:
        with pytest.raises(ExecutorError) as info:  # the server's own 404 (an unknown task): no hint
            client.get("missing")
        assert "no such route" not in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), -1.0, "5", None])
def test_a_wait_of_no_number_of_seconds_is_a_config_error_not_a_wait_for_ever(bad: object) -> None:
    pending = httpx.MockTransport(FakeServer(finish=False))
    with Client(base_url="http://judge.test", transport=pending) as client:
        ids = client.submit([req("a")])
        with pytest.raises(ConfigError, match="timeout_s"):
            client.wait(ids, bad)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="wait_s"):
            client.get("a", bad)  # type: ignore[arg-type]

    async def run() -> None:
        async with AsyncClient(base_url="http://judge.test",
                               transport=httpx.MockTransport(FakeServer(finish=False))) as aclient:
            await aclient.wait(["a"], bad)  # type: ignore[arg-type]

    with pytest.raises(ConfigError, match="timeout_s"):
        asyncio.run(run())


class CancellingServer(FakeServer):
    """A server on which task "b" was cancelled by someone else while the batch waited."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        response = super().__call__(request)
        if request.url.path != "/v1/tasks/wait":
            return response
        views = response.json()["tasks"]
        for view in views:
            if view["task_id"] == "b":
                view.update(state="cancelled", result=None)
        return httpx.Response(200, json={"tasks": views})


def test_a_task_cancelled_on_the_server_is_its_own_infra_result_and_the_batch_comes_back() -> None:
    with executor(CancellingServer(), batch_timeout_s=2) as ex:
        a, b, c = ex.evaluate([req("a"), req("b"), req("c")])
    assert a.speedup == 2.0 and c.speedup == 2.0
    assert b.task_id == "b" and b.outcome.value == "infra_error"
    assert b.error is not None and b.error.kind == "cancelled"
    assert "cancelled on the server" in b.error.message

    async def run() -> list[EvalResult]:
        transport = httpx.MockTransport(CancellingServer())
        async with AsyncClient(base_url="http://judge.test", transport=transport) as client:
            return await client.evaluate([req("a"), req("b")], timeout_s=2)

    a, b = asyncio.run(run())
    assert a.speedup == 2.0 and b.error is not None and b.error.kind == "cancelled"


def test_a_task_the_server_does_not_know_still_raises() -> None:
    client = Client(base_url="http://judge.test", transport=httpx.MockTransport(
        lambda r: httpx.Response(200, json={"tasks": [{"task_id": "x", "state": "unknown"}]})))
    with pytest.raises(ExecutorError, match="x is unknown"):
        client.wait(["x"], timeout_s=2)


def test_an_answer_that_is_not_json_is_an_executor_error() -> None:
    """A base_url where something else answers 200 with HTML (a proxy's or a login page) raised json's
    JSONDecodeError from every call, outside the client's exception tree."""
    def portal(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>sign in</html>", headers={"content-type": "text/html"})

    with Client(base_url="http://judge.test", transport=httpx.MockTransport(portal)) as client:
        with pytest.raises(ExecutorError, match="POST /v1/tasks/batch: HTTP 200 answered text/html, "
                           "not JSON: is http://judge.test/ a drkernel serve"):
            client.submit([req("a")])

    async def run() -> None:
        transport = httpx.MockTransport(portal)
        async with AsyncClient(base_url="http://judge.test", transport=transport) as aclient:
            await aclient.health()

    with pytest.raises(ExecutorError, match="GET /health: HTTP 200 answered text/html, not JSON"):
        asyncio.run(run())


def test_a_wait_of_zero_seconds_reads_what_is_done() -> None:
    """Client.wait(ids, 0) raised EvalTimeout before asking the server anything, even with every task
    done: a poll could not be written as a wait of 0 s."""
    server = FakeServer()
    with Client(base_url="http://judge.test", transport=httpx.MockTransport(server)) as client:
        ids = client.submit([req("a"), req("b")])
        assert set(client.wait(ids, 0)) == {"a", "b"}
    pending = httpx.MockTransport(FakeServer(finish=False))
    with Client(base_url="http://judge.test", transport=pending) as client:
        ids = client.submit([req("c")])
        with pytest.raises(EvalTimeout, match="1 tasks unfinished after 0 s"):
            client.wait(ids, 0)

    async def run() -> set[str]:
        transport = httpx.MockTransport(server)
        async with AsyncClient(base_url="http://judge.test", transport=transport) as aclient:
            return set(await aclient.wait(["a"], 0.0))

    assert asyncio.run(run()) == {"a"}


class SmallBatchServer(FakeServer):
    """A server that takes at most 2 tasks a request (its --max-queue, or its body limit): 413 beyond."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        import json

        if request.url.path == "/v1/tasks/batch":
            items = json.loads(request.content)["requests"]
            if len(items) > 2 or "too big" in items[0]["request"]["kernel_code"]:
                return httpx.Response(413, json={"message": f"{len(items)} tasks exceed the queue bound (2)"})
        return super().__call__(request)


def test_a_batch_the_server_finds_too_large_is_sent_again_in_halves() -> None:
    """The client sends 500 tasks a request: a server with --max-queue below that (or a batch of large
    sources past its body limit) answered 413, and every evaluate failed with it."""
    server = SmallBatchServer()
    with Client(base_url="http://judge.test", transport=httpx.MockTransport(server)) as client:
        results = client.evaluate([req(f"t{i}") for i in range(5)], timeout_s=5)
        assert len(results) == 5 and set(server.tasks) == {f"t{i}" for i in range(5)}
        lone = EvalRequest(reference_code="ref", kernel_code="too big", task_id="big")
        with pytest.raises(ExecutorError, match="HTTP 413"):  # one request too large: said, not split
            client.submit([lone])

    async def run() -> list[str]:
        async with AsyncClient(base_url="http://judge.test", transport=httpx.MockTransport(server)) as ac:
            return await ac.submit([req(f"a{i}") for i in range(3)])

    assert asyncio.run(run()) == ["a0", "a1", "a2"] and {"a0", "a1", "a2"} <= set(server.tasks)


@pytest.mark.parametrize("token", ["abc\n", " abc", "a\tb", "abc\u00e9"])
def test_a_token_no_header_can_carry_is_a_config_error(token: str) -> None:
    """A token read from a file with its newline made every call 30 s of retries of a request httpx
    refused to send ('Illegal header value'), then an ExecutorError."""
    with pytest.raises(ConfigError, match="client.token: starts or ends with a space, or holds a newline"):
        Client(base_url="http://judge.test", token=token)
    with pytest.raises(ConfigError, match="client.token"):
        HttpExecutor(HttpExecutor.Config(base_url="http://judge.test", token=token))
    Client(base_url="http://judge.test", token="s3cr3t-._~+/= with inner spaces").close()


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """A hung server: a raw socket that accepts connections and never says a word."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in [*held, listener]:
            conn.close()


def within(seconds: float, call: Callable[[], Any]) -> tuple[float, BaseException | None]:
    """Run `call` in a daemon thread: (its seconds, what it raised). Fails the test, without waiting it out,
    when the call outlasts `seconds` (today's client hung minutes on these)."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            out.append(None)
        except BaseException as exc:  # handed to the test
            out.append(exc)

    start = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"still running after {seconds} s"
    return time.monotonic() - start, out[0]


class DroppingServer(FakeServer):
    """Takes submissions, then drops the connection of every wait: a server restarting, a flaky proxy."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/tasks/wait":
            self.calls.append("dropped")
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.",
                                            request=request)
        return super().__call__(request)


def test_a_wait_whose_connections_drop_ends_at_its_deadline() -> None:
    """Client.wait(ids, 1) against a server dropping every connection slept its retries out (1 + 2 + 4 s
    with these settings; 31.5 s with the defaults) and raised the dropped connection: past the caller's
    deadline, and not the EvalTimeout a deadline gives."""
    server = DroppingServer()
    with Client(base_url="http://judge.test", transport=httpx.MockTransport(server), max_retries=3,
                backoff_s=1.0) as client:
        ids = client.submit([req("a")])
        seconds, raised = within(3.0, lambda: client.wait(ids, 1.0))
    assert isinstance(raised, EvalTimeout) and "1 tasks unfinished after 1 s" in str(raised)
    assert "RemoteProtocolError" in str(raised) and seconds < 1.5
    assert server.calls.count("dropped") == 2  # at 0 s and after the 1 s pause; no try after the deadline

    async def run() -> None:
        transport = httpx.MockTransport(DroppingServer())
        async with AsyncClient(base_url="http://judge.test", transport=transport, max_retries=3,
                               backoff_s=1.0) as aclient:
            await aclient.wait(await aclient.submit([req("b")]), 1.0)

    seconds, raised = within(3.0, lambda: asyncio.run(run()))
    assert isinstance(raised, EvalTimeout) and seconds < 1.5


class RestartingServer(FakeServer):
    """Takes submissions, then drops the connection of its first `drops` waits (a server restarting: its
    store keeps the tasks), then answers."""

    def __init__(self, drops: int) -> None:
        super().__init__()
        self.drops = drops

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/tasks/wait" and self.drops > 0:
            self.drops -= 1
            self.calls.append("dropped")
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        return super().__call__(request)


def test_a_wait_outlasts_a_server_restart_longer_than_its_retries() -> None:
    """Client.wait(ids, 3600) across a server restart of more than ~30 s raised the refused connection
    once its max_retries were spent (0.5 + 1 + ... + 16 s with the defaults), though its deadline was an
    hour off and the restarted server still had the tasks. A wait now asks again until its deadline."""
    server = RestartingServer(drops=6)
    got: dict[str, EvalResult] = {}
    with Client(base_url="http://judge.test", transport=httpx.MockTransport(server), max_retries=1,
                backoff_s=0.01) as client:
        ids = client.submit([req("a")])
        seconds, raised = within(5.0, lambda: got.update(client.wait(ids, 60.0)))
    assert raised is None and got["a"].outcome.value == "ok", raised
    assert server.calls.count("dropped") == 6 and seconds < 2.0

    async def run() -> None:
        transport = httpx.MockTransport(RestartingServer(drops=6))
        async with AsyncClient(base_url="http://judge.test", transport=transport, max_retries=1,
                               backoff_s=0.01) as aclient:
            got.update(await aclient.wait(await aclient.submit([req("b")]), 60.0))

    seconds, raised = within(5.0, lambda: asyncio.run(run()))
    assert raised is None and got["b"].outcome.value == "ok", raised
    # an hours-long outage counts past a thousand tries: the backoff's 2.0**attempt overflowed
    server = RestartingServer(drops=1100)
    with Client(base_url="http://judge.test", transport=httpx.MockTransport(server), max_retries=1,
                backoff_s=0.0) as client:
        ids = client.submit([req("c")])
        seconds, raised = within(10.0, lambda: got.update(client.wait(ids, 60.0)))
    assert raised is None and got["c"].outcome.value == "ok", raised


def test_other_calls_keep_their_bounded_retries_while_the_server_is_down() -> None:
    """Only a wait outlasts an outage: a submission to a server that is down still fails after its
    max_retries, with the refused connection."""
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with Client(base_url="http://judge.test", transport=httpx.MockTransport(refuse), max_retries=2,
                backoff_s=0.01) as client:
        seconds, raised = within(5.0, lambda: client.submit([req("c")], timeout_s=60.0))
    assert isinstance(raised, ExecutorError) and "Connection refused" in str(raised), raised
    assert seconds < 1.0


def test_a_wait_on_a_hung_server_ends_at_its_deadline() -> None:
    """A server that accepts and never answers held each try of a wait for request_timeout_s past the
    caller's deadline (here 5 s for a wait of 0.5 s; 60 s with the defaults), once per retry."""
    with silent_server() as url, Client(base_url=url, request_timeout_s=5.0, max_retries=2) as client:
        seconds, raised = within(4.0, lambda: client.wait(["a"], 0.5))
    assert isinstance(raised, EvalTimeout) and seconds < 0.5 + 1.5, (seconds, raised)

    async def run() -> None:
        with silent_server() as url:
            async with AsyncClient(base_url=url, request_timeout_s=5.0, max_retries=2) as aclient:
                await aclient.wait(["a"], 0.5)

    seconds, raised = within(4.0, lambda: asyncio.run(run()))
    assert isinstance(raised, EvalTimeout) and seconds < 0.5 + 1.5, (seconds, raised)


class QueueFullServer(FakeServer):
    """Refuses the first `refusals` submissions (429, queue full, Retry-After), then takes them; its tasks
    never finish (a queue ahead of them that does not move)."""

    def __init__(self, refusals: int, retry_after_s: float) -> None:
        super().__init__(finish=False)
        self.refusals, self.retry_after_s = refusals, retry_after_s

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/tasks/batch" and self.refusals > 0:
            self.refusals -= 1
            self.calls.append("refused")
            return httpx.Response(429, headers={"Retry-After": str(self.retry_after_s)},
                                  json={"message": "queue full (10000/10000 tasks)"})
        return super().__call__(request)


def test_the_batch_deadline_counts_from_submission_not_from_the_queue() -> None:
    """The executor's deadline started once the server had taken the batch: a full queue that refused it
    for 0.8 s (0.5 s a retry, up to 31.5 s with the defaults) came on top of it, and a batch of deadline 1 s
    raised after 1.8 s. It now counts from evaluate's call: EvalTimeout by the deadline (and its second),
    its tasks cancelled."""
    server = QueueFullServer(refusals=2, retry_after_s=0.4)
    with executor(server, batch_timeout_s=1.0) as ex:
        seconds, raised = within(5.0, lambda: ex.evaluate([req("a"), req("b")]))
    assert 0.9 < seconds < 1.5, (seconds, raised)
    assert isinstance(raised, EvalTimeout) and "deadline of 1 s" in str(raised), raised
    assert server.calls.count("refused") == 2 and server.calls.count("DELETE /v1/tasks/a") == 1

    never = QueueFullServer(refusals=100, retry_after_s=0.4)  # still full at the deadline: nothing queued
    config = HttpExecutor.Config(base_url="http://judge.test", max_retries=6, batch_timeout_s=1.0)
    with HttpExecutor(config, transport=httpx.MockTransport(never)) as ex:
        seconds, raised = within(5.0, lambda: ex.evaluate([req("a")]))
    assert isinstance(raised, EvalTimeout) and "HTTP 429" in str(raised) and seconds < 1.5, (seconds, raised)


def test_client_evaluate_counts_its_timeout_from_submission() -> None:
    server = QueueFullServer(refusals=2, retry_after_s=0.4)
    with Client(base_url="http://judge.test", transport=httpx.MockTransport(server)) as client:
        seconds, raised = within(5.0, lambda: client.evaluate([req("a")], timeout_s=1.0))
    assert isinstance(raised, EvalTimeout) and 0.9 < seconds < 1.5, (seconds, raised)

    async def run() -> None:
        transport = httpx.MockTransport(QueueFullServer(refusals=2, retry_after_s=0.4))
        async with AsyncClient(base_url="http://judge.test", transport=transport) as aclient:
            await aclient.evaluate([req("a")], timeout_s=1.0)

    seconds, raised = within(5.0, lambda: asyncio.run(run()))
    assert isinstance(raised, EvalTimeout) and 0.9 < seconds < 1.5, (seconds, raised)


def test_a_cancel_against_a_hung_server_gives_up_in_seconds() -> None:
    """A server that accepts and never answers held a cancel for request_timeout_s (60 s) a try, 7 tries
    with the backoff between: 7.5 minutes. It now raises EvalTimeout within cancel_timeout_s (5 s)."""
    with silent_server() as url, Client(base_url=url) as client:
        seconds, raised = within(8.0, lambda: client.cancel("a"))
    assert isinstance(raised, EvalTimeout) and "DELETE /v1/tasks/a" in str(raised), raised
    assert 4.5 < seconds < 6.0, seconds

    async def run() -> None:
        with silent_server() as url:
            async with AsyncClient(base_url=url, cancel_timeout_s=0.5) as aclient:
                await aclient.cancel("a")

    seconds, raised = within(3.0, lambda: asyncio.run(run()))
    assert isinstance(raised, EvalTimeout) and seconds < 1.5, (seconds, raised)


class HungCancelServer(FakeServer):
    """Takes the batch, never finishes it, and never answers a DELETE: each cancel hangs for the whole of its
    try's timeout, as on a server whose event loop is stuck."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "DELETE":
            self.calls.append(f"DELETE {request.url.path}")
            time.sleep(request.extensions["timeout"]["read"])
            raise httpx.ReadTimeout("timed out", request=request)
        return super().__call__(request)


def test_the_orphans_cancels_of_a_late_batch_share_one_short_timeout() -> None:
    """The batch deadline cancelled its tasks one after another, each cancel up to 7.5 minutes against a
    server that did not answer it: a batch of 3 held its caller 22 minutes past its deadline."""
    server = HungCancelServer(finish=False)
    config = HttpExecutor.Config(base_url="http://judge.test", batch_timeout_s=0.3, cancel_timeout_s=1.0)
    with HttpExecutor(config, transport=httpx.MockTransport(server)) as ex:
        seconds, raised = within(6.0, lambda: ex.evaluate([req("a"), req("b"), req("c")]))
    assert isinstance(raised, EvalTimeout) and seconds < 0.3 + 1.0 + 0.5, (seconds, raised)
    assert server.calls.count("DELETE /v1/tasks/a") == 1 and "DELETE /v1/tasks/c" not in server.calls


class ChunkRefusingServer(FakeServer):
    """Takes the first `accept` submissions, then its queue is full (429) for every later one."""

    def __init__(self, accept: int) -> None:
        super().__init__()
        self.accept = accept

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/tasks/batch":
            if self.accept == 0:
                return httpx.Response(429, headers={"Retry-After": "0"}, json={"message": "queue full"})
            self.accept -= 1
        return super().__call__(request)


def test_a_batch_refused_after_some_of_its_chunks_were_queued_leaves_nothing_running(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch goes in chunks (500 tasks a request, or halves after a 413): when a later chunk was refused
    (Overloaded), submit raised and the chunks already queued ran on, their ids lost with the exception.
    Now a submission is whole or nothing: the tasks it queued are cancelled before it raises, and it says
    so; a task it found already there (a task id sent before) is not its to cancel."""
    monkeypatch.setattr(http_client, "_CHUNK", 2)
    server = ChunkRefusingServer(accept=1)
    server.tasks["t1"] = req("t1").to_dict()  # sent before, by an earlier call: attached, not created
    with Client(base_url="http://judge.test", transport=httpx.MockTransport(server), max_retries=1) as client:
        with pytest.raises(Overloaded, match=r"queue full \(withdrawn: 1 task it had queued cancelled\)"):
            client.submit([req(f"t{i}") for i in range(5)])
    assert [c for c in server.calls if c.startswith("DELETE")] == ["DELETE /v1/tasks/t0"]

    async def run() -> None:
        transport = httpx.MockTransport(ChunkRefusingServer(accept=2))
        async with AsyncClient(base_url="http://judge.test", transport=transport, max_retries=0) as aclient:
            await aclient.evaluate([req(f"a{i}") for i in range(5)])

    with pytest.raises(Overloaded, match="withdrawn: 4 tasks it had queued cancelled"):
        asyncio.run(run())


def test_a_batch_sent_again_in_halves_whose_second_half_is_refused_leaves_nothing_running() -> None:
    halves = FillingServer()  # 413 above 2 tasks: sent again in halves; the second refused as the queue fills
    with Client(base_url="http://judge.test", transport=httpx.MockTransport(halves), max_retries=0) as client:
        with pytest.raises(Overloaded, match="withdrawn: 1 task it had queued cancelled"):
            client.submit([req("h0"), req("h1"), req("h2")])
    assert [c for c in halves.calls if c.startswith("DELETE")] == ["DELETE /v1/tasks/h0"]


class FillingServer(SmallBatchServer):
    """At most 2 tasks a request (413), and a queue full (429) once it holds one task."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/tasks/batch" and self.tasks:
            return httpx.Response(429, json={"message": "queue full"})
        return super().__call__(request)

"""Python client of `drkernel serve` (native /v1 API), sync and async: the HTTP executor's transport.

Input: EvalRequests; output: EvalResults. Every call has a deadline; 429/503 and dropped
connections are retried with backoff (submissions are idempotent: the client picks task ids);
httpx errors are translated into the ExecutorError tree here, at the seam, and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import math
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx

from drkernel.errors import ConfigError, EvalTimeout, ExecutorError, Overloaded
from drkernel.settings import is_header_value, is_http_url
from drkernel.types import EvalOutcome, EvalRequest, EvalResult
from drkernel.wording import counted

__all__ = ["AsyncClient", "Client", "ClientConfig", "http_errors"]

_RETRY_STATUS = (429, 502, 503, 504)
_CHUNK = 500  # tasks per submission request
# the longest long poll a get asks for: a server holds one at most this long (drkernel serve: 60 s), and
# an infinite one was an OverflowError from the socket's timeout before anything was sent
_LONGEST_POLL_S = 3600.0
# a call with a deadline gives each try what is left of it, and at least this (wait(ids, 0) still asks
# once); a long poll that ends at the deadline gets this more for its answer to arrive
_ANSWER_S = 1.0
# a wait outlasting an outage (a server restarting) asks again this often once its retries' backoff is spent:
# the server back, the wait goes on within seconds, not after a 30 s backoff
_OUTAGE_PAUSE_S = 5.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientConfig:
    base_url: str = "http://127.0.0.1:8000"
    token: str | None = None
    request_timeout_s: float = 60.0  # one HTTP exchange (a long poll adds its wait)
    max_retries: int = 6
    backoff_s: float = 0.5  # first retry delay, doubled each time, capped
    backoff_cap_s: float = 30.0
    poll_s: float = 20.0  # server-side long-poll per wait request
    cancel_timeout_s: float = 5.0  # a cancel, retries included: a hung server never holds its caller

    def __post_init__(self) -> None:
        if not is_http_url(self.base_url):
            raise ConfigError(f"client.base_url: {self.base_url!r} is not an http(s) URL")
        # the server's root: the client adds /v1/... itself, and an OpenAI-style '.../v1' (or a
        # trailing '/') made every path '/v1/v1/...', each call a bare 404
        scheme, _, rest = self.base_url.partition("://")
        object.__setattr__(self, "base_url", f"{scheme.lower()}://{rest}".rstrip("/").removesuffix("/v1"))
        # 2.5 passed and was a TypeError at the first retry (range() of it)
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise ConfigError(f"client.max_retries: {self.max_retries!r} is not a whole number")
        if not (self.max_retries >= 0 and self.backoff_s >= 0):
            raise ConfigError(f"client.max_retries ({self.max_retries}) and client.backoff_s "
                              f"({self.backoff_s}) must be >= 0")
        # a token read from a file keeps its newline: each call was then 30 s of retries of a request httpx
        # refused to send ('Illegal header value'), and an ExecutorError
        if not is_header_value(self.token or ""):
            raise ConfigError("client.token: starts or ends with a space, or holds a newline or another "
                              "character no header takes (a newline kept from a file?)")
        for name in ("request_timeout_s", "poll_s", "backoff_cap_s", "cancel_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"client.{name}: {getattr(self, name)} must be > 0")
        # every call has a deadline: an infinite one was OverflowError from the socket at the first call
        if not math.isfinite(self.request_timeout_s):
            raise ConfigError(f"client.request_timeout_s: {self.request_timeout_s} must be a finite number "
                              "of seconds (a wait's own timeout_s may be inf)")


@contextlib.contextmanager
def http_errors(what: str) -> Iterator[None]:
    """Translate httpx's exceptions into the ExecutorError tree (the one place that does)."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise EvalTimeout(f"{what}: {type(exc).__name__}") from exc
    except httpx.HTTPError as exc:
        raise ExecutorError(f"{what}: {type(exc).__name__}: {exc}") from exc


def _raise_for(response: httpx.Response, what: str) -> None:
    if response.status_code < 400:
        return
    try:
        message = response.json().get("message", response.text)
    except ValueError:
        message = response.text
    text = f"{what}: HTTP {response.status_code}: {message}"
    if response.status_code == 404 and not _has_message(response):  # no such route: not a drkernel server
        root = response.request.url.copy_with(path="/", query=None)
        text += f" (no such route at {root}: is it a drkernel serve's root?)"
    if response.status_code in (401, 403):
        raise ConfigError(f"{text} (check the token)")
    if response.status_code in (429, 503):
        raise Overloaded(text)
    if response.status_code == 413:
        raise _TooLarge(text)
    raise ExecutorError(text)


class _OutOfTime(EvalTimeout):
    """A call's retries reached its caller's deadline: the next try could not begin before it."""


class _TooLarge(ExecutorError):
    """HTTP 413: one request held more than the server takes at once (its body limit, its queue bound);
    `submit` sends such a batch again in halves."""


def _halves(chunk: list[EvalRequest]) -> list[list[EvalRequest]]:
    half = len(chunk) // 2
    return [chunk[:half], chunk[half:]]


def _json(response: httpx.Response, what: str) -> Any:
    """The answer's JSON; an answer that is not JSON (a proxy's or a login page's HTML with 200) is an
    ExecutorError, where it was json's JSONDecodeError, outside the client's exception tree."""
    try:
        return response.json()
    except ValueError:
        kind = response.headers.get("content-type", "no content type")
        root = response.request.url.copy_with(path="/", query=None)
        raise ExecutorError(f"{what}: HTTP {response.status_code} answered {kind}, not JSON: is {root} "
                            "a drkernel serve?") from None


def _has_message(response: httpx.Response) -> bool:
    """drkernel's own errors carry a `message` (an unknown task's 404 among them); a route that
    does not exist answers the web framework's bare 404."""
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "message" in body


def _check_timeout(name: str, value: float) -> None:
    """A wait's seconds: a number >= 0 (inf waits for ever); NaN compared false with every
    deadline, so the wait never ended."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{name}: {value!r} is not a number of seconds >= 0")


def _deadline(name: str, timeout_s: float | None) -> float:
    """The time.monotonic() by which a call of `timeout_s` ends (None: no deadline but its retries')."""
    if timeout_s is None:
        return math.inf
    _check_timeout(name, timeout_s)
    return time.monotonic() + timeout_s


def seconds_left(deadline: float) -> float:
    """What is left of a deadline (time.monotonic()), never below 0: the client's calls and HttpExecutor's
    batches hand it on as the next step's timeout."""
    return max(0.0, deadline - time.monotonic())


def _delay(config: ClientConfig, attempt: int, response: httpx.Response | None) -> float:
    if response is not None:
        retry_after = response.headers.get("retry-after", "")
        if retry_after.replace(".", "", 1).isdigit():
            return min(float(retry_after), config.backoff_cap_s)
    # the exponent capped: a wait outlasting an hours-long outage counts past a thousand tries, where
    # 2.0**attempt overflows
    return float(min(config.backoff_s * 2.0 ** min(attempt, 64), config.backoff_cap_s))


def _prepare(requests: list[EvalRequest]) -> list[EvalRequest]:
    """Give each request a task id (idempotent resubmission), keeping the caller's ids."""
    return [r if r.task_id else dataclasses.replace(r, task_id=f"client-{uuid.uuid4().hex}")
            for r in requests]


def _task_path(task_id: str) -> str:
    """The task's URL, its id escaped whole (an id may hold `/`, `?`, `#` or `%`)."""
    return f"/v1/tasks/{quote(task_id, safe='')}"


def _batch_body(chunk: list[EvalRequest], priority: str) -> dict[str, Any]:
    return {"requests": [{"request": r.to_dict()} for r in chunk], "priority": priority}


def _seconds(seconds: float | None) -> str:
    """Seconds for a message: 1 for 1.0, 0.18 for 0.18268."""
    return f"{seconds:.2f}".rstrip("0").rstrip(".") if seconds is not None and math.isfinite(seconds) \
        else str(seconds)


def _unfinished(count: int, timeout_s: float) -> str:
    return f"{count} tasks unfinished after {_seconds(timeout_s)} s"


def _created(body: Any) -> list[str]:
    """The task ids a batch's answer says it created: the ids it attached to tasks already there (sent
    before, perhaps by another caller) are not this submission's to cancel."""
    views = body.get("tasks") if isinstance(body, dict) else None
    return [v["task_id"] for v in views or [] if isinstance(v, dict) and v.get("created")]


def _refused(exc: ExecutorError, count: int, timeout_s: float | None, queued: list[str],
             cancelled: int) -> ExecutorError | None:
    """What a submission that failed partway raises instead of `exc` (None: `exc` as it is): its failure,
    and what became of the tasks it had queued (cancelled; the rest finished already, or the server did
    not answer in time)."""
    kind, text = type(exc), str(exc)
    if isinstance(exc, _OutOfTime):
        kind, text = EvalTimeout, f"{count} tasks not queued after {_seconds(timeout_s)} s: {exc}"
    elif not queued:
        return None
    if queued:
        rest = len(queued) - cancelled
        text += f" (withdrawn: {counted(cancelled, 'task')} it had queued cancelled" + \
            (f", {rest} finished or out of reach)" if rest else ")")
    return kind(text)


def _collect(body: Any, done: dict[str, EvalResult]) -> None:
    """A wait's answer into `done`. A task cancelled on the server is its own infra result, as the local
    pool gives it (the batch's other results still come back); one the server does not know is the
    caller's mistake. An answer of another shape (a server that is not drkernel's, answering 200 to
    anything) is an ExecutorError, where it was a KeyError out of the client."""
    tasks = body.get("tasks") if isinstance(body, dict) else None
    if not isinstance(tasks, list) or not all(isinstance(v, dict) and isinstance(v.get("task_id"), str)
                                              for v in tasks):
        raise ExecutorError(f"POST /v1/tasks/wait: the answer holds no list of tasks ({str(body)[:120]!r}): "
                            "is the server a drkernel serve?")
    for view in tasks:
        task_id, state = view["task_id"], view.get("state")
        if state == "done" and view.get("result"):
            try:
                done[task_id] = EvalResult.from_dict(view["result"])
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise ExecutorError(f"task {task_id}: the server's result could not be read "
                                    f"({type(exc).__name__}: {exc})") from None
        elif state == "cancelled":
            done[task_id] = EvalResult.failure(EvalOutcome.INFRA_ERROR, "cancelled",
                                               f"task {task_id} was cancelled on the server", task_id=task_id)
        elif state == "unknown":
            raise ExecutorError(f"task {task_id} is unknown on the server")


class _Base:
    def __init__(self, config: ClientConfig | None = None, **overrides: Any) -> None:
        self.config = config or ClientConfig(**overrides)
        headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        self._common = dict(base_url=self.config.base_url, headers=headers,
                            timeout=self.config.request_timeout_s)

    def _retryable(self, attempt: int, response: httpx.Response | None, outlast: bool = False) -> bool:
        if attempt >= self.config.max_retries and not outlast:
            return False
        return response is None or response.status_code in _RETRY_STATUS

    def _cancel_deadline(self, timeout_s: float | None) -> float:
        return _deadline("cancel timeout_s", self.config.cancel_timeout_s if timeout_s is None else timeout_s)

    def _timeout(self, extra_timeout: float, deadline: float) -> float:
        """One try's HTTP timeout: the call's own, cut to what is left of the caller's deadline."""
        own = self.config.request_timeout_s + extra_timeout
        left = deadline - time.monotonic()
        return min(own, (max(0.0, left) + _ANSWER_S) if extra_timeout else max(left, _ANSWER_S))

    def _pause(self, what: str, attempt: int, response: httpx.Response | None,
               failure: ExecutorError | None, deadline: float) -> float:
        """The sleep before the next try, cut to what is left of the deadline (the backoff slept up to
        31.5 s past it, each try taking its whole request_timeout_s); _OutOfTime once nothing is left.
        Tries past max_retries (a wait outlasting an outage) come every _OUTAGE_PAUSE_S at most."""
        left = deadline - time.monotonic()
        if left <= 0:
            last = f"HTTP {response.status_code}" if response is not None else \
                str(failure).removeprefix(f"{what}: ")
            raise _OutOfTime(f"{what}: no answer in time ({counted(attempt + 1, 'try', 'tries')}, the last: "
                             f"{last})") from failure
        delay = _delay(self.config, attempt, response)
        if attempt >= self.config.max_retries:
            delay = min(delay, _OUTAGE_PAUSE_S)
        return min(delay, left)

    def _tries(self, outlast: bool, deadline: float) -> Iterable[int]:
        """The attempts of one exchange: max_retries + 1, or, for a call that outlasts outages, as many
        as its (finite) deadline leaves time for (_pause ends them)."""
        if outlast and math.isfinite(deadline):
            return itertools.count()
        return range(self.config.max_retries + 1)


class Client(_Base):
    """Blocking client. `evaluate(requests)` submits, waits (bounded) and returns results."""

    def __init__(self, config: ClientConfig | None = None,
                 transport: httpx.BaseTransport | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._http = httpx.Client(transport=transport, **self._common)  # type: ignore[arg-type]

    def _call(self, method: str, path: str, extra_timeout: float = 0.0, deadline: float = math.inf,
              outlast: bool = False, **kw: Any) -> Any:
        """One exchange with its retries; with a `deadline` (time.monotonic()) every try and every sleep
        ends by it, and what is left of it raises EvalTimeout. With `outlast` (and a deadline), a
        connection lost or a busy answer is tried again until the deadline, past max_retries."""
        what = f"{method} {path}"
        if self._http.is_closed:
            raise ExecutorError(f"{what}: the client is closed")
        for attempt in self._tries(outlast, deadline):
            response, failure = None, None
            try:
                with http_errors(what):
                    response = self._http.request(method, path,
                                                  timeout=self._timeout(extra_timeout, deadline), **kw)
            except ExecutorError as exc:
                if not self._retryable(attempt, None, outlast):
                    raise
                failure = exc
            if response is not None and not self._retryable(attempt, response, outlast):
                _raise_for(response, what)
                return _json(response, what)
            time.sleep(self._pause(what, attempt, response, failure, deadline))
        raise AssertionError("unreachable")

    def submit(self, requests: list[EvalRequest], priority: str = "normal",
               timeout_s: float | None = None) -> list[str]:
        """Queue the requests, all or none; their task ids. A batch goes in chunks: when one is refused
        (Overloaded, a 413, no answer), the tasks this call queued are cancelled before it raises (they
        ran on with nobody to read them). With `timeout_s`, EvalTimeout once it has passed."""
        deadline = _deadline("submit timeout_s", timeout_s)
        prepared = _prepare(requests)
        queued: list[str] = []
        try:
            for start in range(0, len(prepared), _CHUNK):
                self._submit(prepared[start:start + _CHUNK], priority, deadline, queued)
        except ExecutorError as exc:
            instead = _refused(exc, len(prepared), timeout_s, queued, self.cancel_all(queued))
            if instead is None:
                raise
            raise instead from exc
        return [r.task_id for r in prepared]  # type: ignore[misc]

    def _submit(self, chunk: list[EvalRequest], priority: str, deadline: float, queued: list[str]) -> None:
        """One batch; a 413 sends it again in halves (a server with --max-queue below the chunk, or a batch
        of large sources past its body limit, failed every submission)."""
        try:
            body = self._call("POST", "/v1/tasks/batch", deadline=deadline, json=_batch_body(chunk, priority))
        except _TooLarge:
            if len(chunk) == 1:
                raise
            for half in _halves(chunk):
                self._submit(half, priority, deadline, queued)
            return
        queued.extend(_created(body))

    def wait(self, task_ids: list[str], timeout_s: float) -> dict[str, EvalResult]:
        """Results of every task, or EvalTimeout when they are not all done by the deadline (a second
        more at most, for an answer on its way; retries and their sleeps included)."""
        _check_timeout("wait timeout_s", timeout_s)
        deadline = time.monotonic() + timeout_s
        done: dict[str, EvalResult] = {}
        task_ids = list(dict.fromkeys(task_ids))  # an id given twice is one task, answered once
        asked = False  # the server is asked at least once: timeout_s=0 reads what is done now
        while len(done) < len(task_ids):
            left = deadline - time.monotonic()
            if asked and left <= 0:
                raise EvalTimeout(_unfinished(len(task_ids) - len(done), timeout_s))
            asked = True
            pending = [t for t in task_ids if t not in done]
            poll = max(0.0, min(self.config.poll_s, left))
            try:
                body = self._call("POST", "/v1/tasks/wait", extra_timeout=poll, deadline=deadline,
                                  outlast=True, json={"task_ids": pending, "timeout_s": poll})
            except _OutOfTime as exc:
                raise EvalTimeout(f"{_unfinished(len(task_ids) - len(done), timeout_s)}: {exc}") from exc
            _collect(body, done)
        return done

    def evaluate(self, requests: list[EvalRequest], timeout_s: float = 3600.0,
                 priority: str = "normal") -> list[EvalResult]:
        """Submit and wait: `timeout_s` counts from the call, the time the submission took included."""
        deadline = _deadline("evaluate timeout_s", timeout_s)
        ids = self.submit(requests, priority, timeout_s)
        results = self.wait(ids, seconds_left(deadline))
        return [results[i] for i in ids]

    def get(self, task_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        _check_timeout("get wait_s", wait_s)
        wait_s = min(wait_s, _LONGEST_POLL_S)
        return self._call("GET", _task_path(task_id), extra_timeout=wait_s,  # type: ignore[no-any-return]
                          params={"wait": wait_s})

    def cancel(self, task_id: str, timeout_s: float | None = None) -> bool:
        """Stop a queued or running task (False: it had finished). Within `timeout_s` (cancel_timeout_s),
        retries included, else EvalTimeout: a cancel is cleanup, and a hung server held it 7.5 minutes."""
        deadline = self._cancel_deadline(timeout_s)
        return bool(self._call("DELETE", _task_path(task_id), deadline=deadline)["cancelled"])

    def cancel_all(self, task_ids: list[str]) -> int:
        """Cancel tasks nobody will read (a batch that raised), all within one cancel_timeout_s; how many
        were stopped. Best effort: a task the time left does not reach stays."""
        deadline = time.monotonic() + self.config.cancel_timeout_s
        stopped = 0
        for task_id in dict.fromkeys(task_ids):
            if time.monotonic() >= deadline:
                break
            with contextlib.suppress(ExecutorError):
                stopped += self.cancel(task_id, seconds_left(deadline))
        return stopped

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")  # type: ignore[no-any-return]

    def check_native_api(self) -> None:
        """An empty wait on the native API, which takes the token where /health takes none: ConfigError for
        a token refused (HTTP 401/403), ExecutorError for an answer no drkernel server gives."""
        _collect(self._call("POST", "/v1/tasks/wait", json={"task_ids": [], "timeout_s": 0}), {})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """The same API for asyncio code (agents running many episodes at once)."""

    def __init__(self, config: ClientConfig | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, **overrides: Any) -> None:
        super().__init__(config, **overrides)
        self._http = httpx.AsyncClient(transport=transport, **self._common)  # type: ignore[arg-type]

    async def _call(self, method: str, path: str, extra_timeout: float = 0.0, deadline: float = math.inf,
                    outlast: bool = False, **kw: Any) -> Any:
        what = f"{method} {path}"
        if self._http.is_closed:
            raise ExecutorError(f"{what}: the client is closed")
        for attempt in self._tries(outlast, deadline):
            response, failure = None, None
            try:
                with http_errors(what):
                    response = await self._http.request(method, path,
                                                        timeout=self._timeout(extra_timeout, deadline), **kw)
            except ExecutorError as exc:
                if not self._retryable(attempt, None, outlast):
                    raise
                failure = exc
            if response is not None and not self._retryable(attempt, response, outlast):
                _raise_for(response, what)
                return _json(response, what)
            await asyncio.sleep(self._pause(what, attempt, response, failure, deadline))
        raise AssertionError("unreachable")

    async def submit(self, requests: list[EvalRequest], priority: str = "normal",
                     timeout_s: float | None = None) -> list[str]:
        deadline = _deadline("submit timeout_s", timeout_s)
        prepared = _prepare(requests)
        queued: list[str] = []
        try:
            for start in range(0, len(prepared), _CHUNK):
                await self._submit(prepared[start:start + _CHUNK], priority, deadline, queued)
        except ExecutorError as exc:
            instead = _refused(exc, len(prepared), timeout_s, queued, await self.cancel_all(queued))
            if instead is None:
                raise
            raise instead from exc
        return [r.task_id for r in prepared]  # type: ignore[misc]

    async def _submit(self, chunk: list[EvalRequest], priority: str, deadline: float,
                      queued: list[str]) -> None:
        try:
            body = await self._call("POST", "/v1/tasks/batch", deadline=deadline,
                                    json=_batch_body(chunk, priority))
        except _TooLarge:
            if len(chunk) == 1:
                raise
            for half in _halves(chunk):
                await self._submit(half, priority, deadline, queued)
            return
        queued.extend(_created(body))

    async def wait(self, task_ids: list[str], timeout_s: float) -> dict[str, EvalResult]:
        _check_timeout("wait timeout_s", timeout_s)
        deadline = time.monotonic() + timeout_s
        done: dict[str, EvalResult] = {}
        task_ids = list(dict.fromkeys(task_ids))  # an id given twice is one task, answered once
        asked = False  # the server is asked at least once: timeout_s=0 reads what is done now
        while len(done) < len(task_ids):
            left = deadline - time.monotonic()
            if asked and left <= 0:
                raise EvalTimeout(_unfinished(len(task_ids) - len(done), timeout_s))
            asked = True
            pending = [t for t in task_ids if t not in done]
            poll = max(0.0, min(self.config.poll_s, left))
            try:
                body = await self._call("POST", "/v1/tasks/wait", extra_timeout=poll, deadline=deadline,
                                        outlast=True, json={"task_ids": pending, "timeout_s": poll})
            except _OutOfTime as exc:
                raise EvalTimeout(f"{_unfinished(len(task_ids) - len(done), timeout_s)}: {exc}") from exc
            _collect(body, done)
        return done

    async def evaluate(self, requests: list[EvalRequest], timeout_s: float = 3600.0,
                       priority: str = "normal") -> list[EvalResult]:
        deadline = _deadline("evaluate timeout_s", timeout_s)
        ids = await self.submit(requests, priority, timeout_s)
        results = await self.wait(ids, seconds_left(deadline))
        return [results[i] for i in ids]

    async def get(self, task_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        _check_timeout("get wait_s", wait_s)
        wait_s = min(wait_s, _LONGEST_POLL_S)
        return await self._call("GET", _task_path(task_id),  # type: ignore[no-any-return]
                                extra_timeout=wait_s, params={"wait": wait_s})

    async def cancel(self, task_id: str, timeout_s: float | None = None) -> bool:
        deadline = self._cancel_deadline(timeout_s)
        return bool((await self._call("DELETE", _task_path(task_id), deadline=deadline))["cancelled"])

    async def cancel_all(self, task_ids: list[str]) -> int:
        deadline = time.monotonic() + self.config.cancel_timeout_s
        stopped = 0
        for task_id in dict.fromkeys(task_ids):
            if time.monotonic() >= deadline:
                break
            with contextlib.suppress(ExecutorError):
                stopped += await self.cancel(task_id, seconds_left(deadline))
        return stopped

    async def health(self) -> dict[str, Any]:
        return await self._call("GET", "/health")  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

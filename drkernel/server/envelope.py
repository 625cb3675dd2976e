"""What every route shares: the server state, bounded JSON bodies, and the error envelope.

Input: a Starlette request; output: parsed JSON or an ApiError that becomes the anchor's error
envelope (`ErrorResponse`: `error`, `message`, `error_code` among the anchor's `*_ERROR` names,
`task_id`, ISO `timestamp`, plus `detail` as FastAPI's HTTPException has it, and an X-Error-Code
header when there is a code).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from drkernel.errors import ConfigError, Overloaded
from drkernel.executors.base import Executor
from drkernel.sandbox.requestcheck import validate_request
from drkernel.server.anchor import now_iso
from drkernel.server.scheduler import Scheduler
from drkernel.server.settings import Settings
from drkernel.server.store import NewTask, TaskConflict, TaskRecord, TaskStore, fingerprint
from drkernel.types import EvalRequest

__all__ = [
    "ApiError",
    "ServerState",
    "check_code_size",
    "client_identity",
    "dedupe_key",
    "error_response",
    "read_json",
    "server_state",
    "submit_or_raise",
    "validation_error",
]


@dataclass(slots=True)
class ServerState:
    settings: Settings
    store: TaskStore
    executor: Executor
    scheduler: Scheduler


def server_state(request: Request) -> ServerState:
    return request.app.state.drk  # type: ignore[no-any-return]


class ApiError(Exception):
    """An HTTP error with a machine code; raised in routes, answered by one handler."""

    def __init__(self, status: int, code: str, message: str, task_id: str | None = None,
                 headers: dict[str, str] | None = None, detail: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.task_id = task_id
        self.headers = headers or {}
        self.detail = detail


def validation_error(errors: Sequence[Any], task_id: str | None = None) -> ApiError:
    """Pydantic's error rows as the anchor's 400: the first one named in words, all listed."""
    rows = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]
    first: dict[str, Any] = rows[0] if rows else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return ApiError(400, "VALIDATION", f"Request validation failed: {where}: {first['msg']}",
                    task_id=task_id, detail=rows)


# our code -> (the anchor's `error` name, its ErrorCode name). The anchor answers 404 with
# FastAPI's bare {"detail": ...}, so NOT_FOUND carries no code.
_ENVELOPE: dict[str, tuple[str, str | None]] = {
    "VALIDATION": ("RequestValidationError", "VALIDATION_ERROR"),
    "UNSUPPORTED": ("UnsupportedBackend", "VALIDATION_ERROR"),
    "PAYLOAD_TOO_LARGE": ("PayloadTooLarge", "VALIDATION_ERROR"),
    "UNAUTHORIZED": ("Unauthorized", "VALIDATION_ERROR"),
    "CONFLICT": ("Conflict", "VALIDATION_ERROR"),
    "NOT_FOUND": ("NotFound", None),
    "QUEUE_FULL": ("QueueFull", "RESOURCE_ERROR"),
    "STORE_UNAVAILABLE": ("StoreUnavailable", "RESOURCE_ERROR"),
    "SHUTTING_DOWN": ("ShuttingDown", "RESOURCE_ERROR"),
    "SYSTEM": ("InternalServerError", "SYSTEM_ERROR"),
}


def error_response(err: ApiError) -> JSONResponse:
    name, code = _ENVELOPE.get(err.code, ("Error", "UNKNOWN_ERROR"))
    body: dict[str, Any] = {
        "error": name,
        "message": err.message,
        "error_code": code,
        "task_id": err.task_id,
        "timestamp": now_iso(),
        "detail": err.message,
    }
    if err.detail is not None:
        body["errors"] = err.detail
    headers = {"X-Error-Code": code} if code else {}
    return JSONResponse(body, status_code=err.status, headers={**headers, **err.headers})


async def read_json(request: Request, settings: Settings) -> Any:
    """The request body as JSON: 413 past the size limit, 400 when it is not JSON."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
        raise ApiError(413, "PAYLOAD_TOO_LARGE",
                       f"body of {declared} bytes exceeds {settings.max_body_bytes}")
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > settings.max_body_bytes:
            raise ApiError(413, "PAYLOAD_TOO_LARGE", f"body exceeds {settings.max_body_bytes} bytes")
    try:
        data = json.loads(body)
        if _SURROGATE_ESCAPE.search(body):  # maybe half a pair: only then the full check
            json.dumps(data, ensure_ascii=False).encode()
        return data
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, "VALIDATION", f"body is not valid JSON: {exc}") from None
    except UnicodeEncodeError:  # SQLite and the fingerprint cannot encode it: it was a 500
        raise ApiError(400, "VALIDATION", "body is not valid JSON: a string holds a lone UTF-16 "
                       "surrogate (half of a \\uD800-\\uDFFF pair), which is not text") from None
    except RecursionError:  # nested past the parser's depth: bad input, not the server's fault
        raise ApiError(400, "VALIDATION", "body is not valid JSON: nested too deeply") from None


# a JSON escape of a UTF-16 surrogate: a lone one decodes to a str that no UTF-8 encoder takes
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def check_code_size(settings: Settings, *sources: str) -> None:
    for source in sources:
        if len(source.encode()) > settings.max_code_bytes:
            raise ApiError(413, "PAYLOAD_TOO_LARGE",
                           f"a source file exceeds {settings.max_code_bytes} bytes")


def client_identity(request: Request) -> str:
    """Who sent a request, for deduplication: the peer address and a hash of its credentials."""
    peer = request.client.host if request.client else "?"
    auth = request.headers.get("authorization", "")
    return f"{peer}|{hashlib.sha256(auth.encode()).hexdigest()[:16]}"


def dedupe_key(state: ServerState, client: str, request: EvalRequest) -> tuple[str, float] | None:
    """The deduplication key of a request sent without task_id (None: deduplication is off).

    Same code, options and client within `dedupe_window_s`: the earlier task answers (a client
    that retries after a disconnect gets its first evaluation, not a second one)."""
    window = state.settings.dedupe_window_s
    if window <= 0:
        return None
    return hashlib.sha256(f"{client}|{fingerprint(request)}".encode()).hexdigest(), window


def submit_or_raise(state: ServerState, tasks: list[NewTask]) -> list[tuple[TaskRecord, bool]]:
    """Validate, persist and queue, mapping refusals onto HTTP: 400 invalid (before anything else, so a
    bad request is told what is wrong even when the queue is full), 409 conflict, 429 full."""
    for task in tasks:
        try:
            validate_request(task.request)
        except ConfigError as exc:
            raise ApiError(400, "VALIDATION", f"request: {exc}", task_id=task.request.task_id) from None
    bound = state.settings.max_queue
    if len(tasks) > bound:  # a 429 would be retried for ever: the queue never holds them all at once
        raise ApiError(413, "PAYLOAD_TOO_LARGE", f"{len(tasks)} tasks in one request exceed the server's "
                       f"queue bound ({bound}, --max-queue): they can never be queued together; send at "
                       f"most {bound} a request")
    try:
        return state.scheduler.submit(tasks)
    except TaskConflict as exc:
        raise ApiError(409, "CONFLICT", str(exc), task_id=exc.task_id) from None
    except Overloaded as exc:
        raise ApiError(429, "QUEUE_FULL", str(exc),
                       headers={"Retry-After": str(state.settings.retry_after_s)}) from None

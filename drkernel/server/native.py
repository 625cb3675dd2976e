"""The native API under /v1: our request and result contract (EvalResult.to_dict), long polls.

Input: EvalRequest dicts (`{"request": {...}, "priority": ...}` or the request itself); output:
task views `{task_id, state, priority, attempts, ..., result}` where state is queued, running,
done or cancelled and result is the JSON result contract once done. Waits are bounded.
"""

from __future__ import annotations

import dataclasses
import math
import typing
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from drkernel.errors import ConfigError
from drkernel.server.envelope import (
    ApiError,
    ServerState,
    check_code_size,
    client_identity,
    dedupe_key,
    read_json,
    server_state,
    submit_or_raise,
)
from drkernel.server.scheduler import PRIORITIES
from drkernel.server.store import NewTask, TaskRecord, task_id_error
from drkernel.types import EvalOptions, EvalRequest

__all__ = ["router", "task_view"]

router = APIRouter(prefix="/v1")

def _option_types() -> dict[str, type]:
    """Each EvalOptions field's type, None left out of `X | None`: a field whose default is None (atol,
    seed, ...) is typed too, where its default's type said nothing and a string reached the judge."""
    hints = typing.get_type_hints(EvalOptions)
    kinds = {}
    for f in dataclasses.fields(EvalOptions):
        args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]
        kinds[f.name] = args[0] if args else hints[f.name]
    return kinds


_OPTION_TYPES = _option_types()


def _check_options(options: Any) -> None:
    if options is None:
        return
    if not isinstance(options, dict):
        raise ApiError(400, "VALIDATION", "request.options must be an object")
    for name, value in options.items():
        kind = _OPTION_TYPES.get(name)
        if value is None or kind is None:
            continue
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
            if kind is float else isinstance(value, kind)
        if kind is int and isinstance(value, bool):
            ok = False
        if not ok:
            raise ApiError(400, "VALIDATION", f"request.options.{name}: expected {kind.__name__}")
        if kind is float and not _finite(value):  # JSON's Infinity, NaN, 1e999, an integer of 400 digits
            raise ApiError(400, "VALIDATION", f"request.options.{name}: expected a finite number")


def _finite(value: float) -> bool:
    """Whether a JSON number is a finite float: an integer past float's range (JSON sets none) is not."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _new_task(state: ServerState, item: Any, default_priority: str, client: str) -> NewTask:
    if not isinstance(item, dict):
        raise ApiError(400, "VALIDATION", "a task must be a JSON object")
    body = item.get("request", item)
    priority = item.get("priority", default_priority)
    if priority not in PRIORITIES:
        raise ApiError(400, "VALIDATION", f"priority: {priority!r} not in {'|'.join(PRIORITIES)}")
    if not isinstance(body, dict):
        raise ApiError(400, "VALIDATION", "request must be an object")
    for key in ("reference_code", "kernel_code"):
        if not isinstance(body.get(key), str) or not body[key].strip():
            raise ApiError(400, "VALIDATION", f"request.{key}: a non-empty string is required")
    _check_options(body.get("options"))
    check_code_size(state.settings, body["reference_code"], body["kernel_code"])
    # no id or an empty one: the server names the task; any other value is checked (0, false or [] were
    # replaced by a new id without a word, where 123 was refused)
    given = next((v for v in (body.get("task_id"), item.get("task_id")) if v is not None and v != ""), None)
    task_id = given if given is not None else f"task-{uuid.uuid4().hex}"
    why = task_id_error(task_id)
    if why:
        raise ApiError(400, "VALIDATION", f"task_id: {why}")
    try:
        request = EvalRequest.from_dict(body | {"task_id": task_id})
    except (ConfigError, TypeError, ValueError) as exc:
        raise ApiError(400, "VALIDATION", f"request: {exc}") from None
    force = item.get("force")
    if force is not None and not isinstance(force, bool):  # "no" was truthy: a re-run nobody asked for
        raise ApiError(400, "VALIDATION", "force: expected true or false")
    task = NewTask(request=request, priority=priority, meta={"api": "native"}, force=bool(force))
    if given is None:
        task.dedupe = dedupe_key(state, client, request)
    return task


def task_view(state: ServerState, record: TaskRecord) -> dict[str, Any]:
    return {
        "task_id": record.task_id,
        "state": record.state,
        "priority": record.priority,
        "attempts": record.attempts,
        "submitted_at": record.submitted_at,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "queue_position": state.scheduler.position(record.task_id) if record.state == "queued"
        else None,
        "worker": record.placement,  # where it runs or last ran: worker, host, node, device, pid
        "retries": list(record.meta.get("retries", [])),  # executor retries: why, and where to
        "result": record.result.to_dict() if record.result else None,
    }


def _wait_s(state: ServerState, value: Any) -> float:
    # [], {} and "" waited 0 s and "30" 30 s; true 1 s and NaN 0 s: none of them what was meant
    if value is None:
        value = 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ApiError(400, "VALIDATION", "wait/timeout_s must be a number of seconds")
    try:
        wait = float(value)
    except OverflowError:  # an integer past float's range: as Infinity (the longest wait) or -Infinity
        wait = math.inf if value > 0 else -math.inf
    return max(0.0, min(wait, state.settings.max_wait_s))


@router.post("/tasks")
async def submit(request: Request) -> JSONResponse:
    state = server_state(request)
    task = _new_task(state, await read_json(request, state.settings), "normal",
                     client_identity(request))
    ((record, created),) = await run_in_threadpool(submit_or_raise, state, [task])
    return JSONResponse(task_view(state, record) | {"created": created}, status_code=202)


@router.post("/tasks/batch")
async def submit_batch(request: Request) -> JSONResponse:
    state = server_state(request)
    body = await read_json(request, state.settings)
    items = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(items, list) or not items:
        raise ApiError(400, "VALIDATION", "requests: a non-empty list is required")
    if len(items) > state.settings.max_batch:
        raise ApiError(413, "PAYLOAD_TOO_LARGE",
                       f"{len(items)} tasks exceed the batch limit {state.settings.max_batch}")
    priority = body.get("priority", "normal")
    client = client_identity(request)
    tasks = [_new_task(state, item, priority, client) for item in items]
    submitted = await run_in_threadpool(submit_or_raise, state, tasks)
    views = [{"task_id": r.task_id, "state": r.state, "created": c} for r, c in submitted]
    return JSONResponse({"tasks": views}, status_code=202)


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    """Native health: status from capacity (workers alive vs. configured), store totals, queue."""
    from drkernel.server.ops import capacity, health_status, stored_totals

    state = server_state(request)
    cap = capacity(state)
    return {"status": health_status(cap), "capacity": cap, "totals": stored_totals(state),
            "queued": sum(state.scheduler.depth().values()),
            "running": state.scheduler.running(), "executor": type(state.executor).__name__}


@router.get("/tasks/{task_id:path}")
async def get_task(request: Request, task_id: str, wait: float = 0.0) -> dict[str, Any]:
    state = server_state(request)
    records = await state.scheduler.wait([task_id], _wait_s(state, wait))
    if task_id not in records:
        raise ApiError(404, "NOT_FOUND", f"no task {task_id!r}", task_id=task_id)
    return task_view(state, records[task_id])


@router.post("/tasks/wait")
async def wait_tasks(request: Request) -> dict[str, Any]:
    """Bounded wait for many tasks: answers when all are finished or `timeout_s` passed."""
    state = server_state(request)
    body = await read_json(request, state.settings)
    ids = body.get("task_ids") if isinstance(body, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ApiError(400, "VALIDATION", "task_ids: a list of strings is required")
    records = await state.scheduler.wait(ids, _wait_s(state, body.get("timeout_s", 0)))
    return {"tasks": [task_view(state, records[i]) if i in records
                      else {"task_id": i, "state": "unknown", "result": None} for i in ids]}


@router.delete("/tasks/{task_id:path}")
async def cancel(request: Request, task_id: str) -> dict[str, Any]:
    state = server_state(request)
    prior = await run_in_threadpool(state.scheduler.cancel, task_id)
    if prior is None:
        raise ApiError(404, "NOT_FOUND", f"no task {task_id!r}", task_id=task_id)
    return {"task_id": task_id, "cancelled": prior in ("queued", "running"), "previous": prior}

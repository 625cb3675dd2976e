"""The HTTP service: `create_app(settings, executor_factory)` and the anchor-compatible routes.

Input: HTTP requests (anchor shapes on /evaluate..., native ones under /v1); output: JSON answers
from the store. Every wait is bounded: /evaluate answers its result, or 202 with the task id.
Tasks are committed to SQLite before any answer; the native API is in native.py, ops in ops.py.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from drkernel.errors import ConfigError
from drkernel.executors.base import Executor
from drkernel.server import native, ops
from drkernel.server.anchor import (
    AnchorBatchRequest,
    AnchorRequest,
    anchor_response,
    anchor_state,
    anchor_task,
    iso,
)
from drkernel.server.envelope import (
    ApiError,
    ServerState,
    check_code_size,
    client_identity,
    dedupe_key,
    error_response,
    read_json,
    server_state,
    submit_or_raise,
)
from drkernel.server.scheduler import Scheduler
from drkernel.server.settings import Settings
from drkernel.server.store import NewTask, TaskRecord, TaskStore

__all__ = ["ExecutorFactory", "create_app", "default_executor"]

logger = logging.getLogger(__name__)

ExecutorFactory = Callable[[Settings], Executor]
_OPEN_PATHS = {"/health"}


def default_executor(settings: Settings) -> Executor:
    """The executor `drkernel serve` builds: local pool or Ray, real judge or the scripted double."""
    from drkernel.executors.fake_judge import fake_judge
    from drkernel.executors.judge_host import sandbox_judge
    from drkernel.server.settings import SECRET_VARS

    factory = fake_judge if settings.judge == "fake" else sandbox_judge
    if settings.executor == "ray":
        from drkernel.executors.ray import RayExecutor

        return RayExecutor.Config(address=settings.ray_address, num_workers=settings.num_workers,
                                  heartbeat_timeout_s=settings.heartbeat_timeout_s,
                                  heartbeat_s=max(0.5, settings.heartbeat_timeout_s / 3),
                                  deadline_grace_s=settings.deadline_grace_s).build(factory)
    from drkernel.executors.local import LocalExecutor, detect_devices

    devices = settings.devices or detect_devices(settings.num_workers)
    if settings.num_workers and devices[0] != "cpu":
        devices = devices[: settings.num_workers]
    return LocalExecutor.Config(devices=devices, isolation=settings.isolation,
                                heartbeat_timeout_s=settings.heartbeat_timeout_s,
                                deadline_grace_s=settings.deadline_grace_s,
                                scrub_env=SECRET_VARS).build(factory)


def _parse(model: type[Any], data: Any) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        first = errors[0] if errors else {"loc": [], "msg": "invalid"}
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise ApiError(400, "VALIDATION", f"{where}: {first['msg']}", detail=errors) from None


def _anchor_tasks(state: ServerState, requests: list[AnchorRequest],
                  client: str) -> list[NewTask]:
    for req in requests:
        if req.backend != "triton":
            raise ApiError(400, "VALIDATION", f"backend {req.backend!r} is not supported: "
                           "drkernel judges Triton kernels", task_id=req.task_id)
        check_code_size(state.settings, req.reference_code, req.kernel_code)
    tasks = [anchor_task(r) for r in requests]
    for req, task in zip(requests, tasks, strict=True):
        if not req.task_id:  # a retry after a disconnect must not run the kernel twice
            task.dedupe = dedupe_key(state, client, task.request)
    return tasks


async def evaluate(request: Request) -> JSONResponse:
    """Anchor POST /evaluate: submit, wait (bounded), answer the result or 202 + task id."""
    state = server_state(request)
    req = _parse(AnchorRequest, await read_json(request, state.settings))
    (task,) = _anchor_tasks(state, [req], client_identity(request))
    ((record, _),) = await run_in_threadpool(submit_or_raise, state, [task])
    wait = min(state.settings.evaluate_wait_s, 3 * req.timeout + 60)
    records = await state.scheduler.wait([record.task_id], wait)
    latest = records.get(record.task_id, record)
    return JSONResponse(anchor_response(latest), status_code=200 if latest.finished else 202)


async def evaluate_batch(request: Request) -> JSONResponse:
    """Anchor POST /evaluate/batch, run in parallel across workers (the anchor runs it in order)."""
    state = server_state(request)
    batch = _parse(AnchorBatchRequest, await read_json(request, state.settings))
    if len(batch.tasks) > state.settings.max_batch:
        raise ApiError(413, "PAYLOAD_TOO_LARGE",
                       f"{len(batch.tasks)} tasks exceed the batch limit {state.settings.max_batch}")
    tasks = _anchor_tasks(state, batch.tasks, client_identity(request))
    for task in tasks:
        task.meta["batch_id"] = batch.batch_id
    submitted = await run_in_threadpool(submit_or_raise, state, tasks)
    ids = [r.task_id for r, _ in submitted]
    wait = min(state.settings.evaluate_wait_s, 3 * max(t.timeout for t in batch.tasks) + 60)
    records = await state.scheduler.wait(ids, wait)
    results = [anchor_response(records[i]) for i in ids if i in records]
    done = all(records[i].finished for i in ids if i in records)
    body = {
        "batch_id": batch.batch_id,
        "total_tasks": len(ids),
        "completed_tasks": sum(1 for r in results if r["status"] == "completed"),
        "failed_tasks": sum(1 for r in results if r["status"] in ("failed", "timeout")),
        "results": results,
        "batch_status": "completed" if done else "running",
        "submitted_at": iso(min(r.submitted_at for r, _ in submitted)),
        "completed_at": iso(max((records[i].finished_at or 0) for i in ids)) if done else None,
    }
    return JSONResponse(body, status_code=200 if done else 202)


def _known(state: ServerState, task_id: str) -> TaskRecord:
    record = state.store.get(task_id)
    if record is None:
        raise ApiError(404, "NOT_FOUND", f"no task {task_id!r}", task_id=task_id)
    return record


def _device_of(state: ServerState, task_id: str, record: TaskRecord) -> str | None:
    """Where the task runs or ran, as "host/device (worker)", from the store's worker column."""
    where = record.placement
    if where is None and record.result is not None and record.result.device is not None:
        dev = record.result.device
        where = {"host": dev.host, "device": dev.device_id or dev.name, "worker_id": dev.worker_id}
    if where is None:
        return None
    text = f"{where.get('host') or '?'}/{where.get('device') or '?'}"
    return f"{text} ({where['worker_id']})" if where.get("worker_id") else text


async def task_status(request: Request, task_id: str) -> dict[str, Any]:
    state = server_state(request)
    record = _known(state, task_id)
    return {
        "task_id": task_id,
        "status": anchor_state(record),
        "progress": 1.0 if record.finished else 0.0,
        "estimated_completion": None,
        "queue_position": state.scheduler.position(task_id),
        "assigned_device": _device_of(state, task_id, record),
    }


async def task_result(request: Request, task_id: str) -> dict[str, Any]:
    return anchor_response(_known(server_state(request), task_id))


async def cancel_task(request: Request, task_id: str) -> dict[str, Any]:
    state = server_state(request)
    prior = await run_in_threadpool(state.scheduler.cancel, task_id)
    if prior is None:
        raise ApiError(404, "NOT_FOUND", f"no task {task_id!r}", task_id=task_id)
    cancelled = prior in ("queued", "running")
    return {"task_id": task_id, "cancelled": cancelled,
            "status": "cancelled" if cancelled else prior,
            "message": f"cancelled ({prior})" if cancelled else f"already finished ({prior})"}


def _install_middleware(app: FastAPI, settings: Settings) -> None:
    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Any]) -> Response:
        if settings.auth_token and request.url.path not in _OPEN_PATHS:
            given = request.headers.get("authorization", "")
            expected = f"Bearer {settings.auth_token}"
            if not hmac.compare_digest(given.encode(), expected.encode()):
                return error_response(ApiError(401, "UNAUTHORIZED", "missing or bad bearer token",
                                               headers={"WWW-Authenticate": "Bearer"}))
        return await call_next(request)  # type: ignore[no-any-return]

    @app.exception_handler(ApiError)
    async def api_error(_: Request, err: ApiError) -> JSONResponse:
        return error_response(err)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(ApiError(400, "VALIDATION", str(exc.errors()[:1])))

    @app.exception_handler(ConfigError)
    async def bad_option(_: Request, exc: ConfigError) -> JSONResponse:
        return error_response(ApiError(400, "VALIDATION", str(exc)))

    @app.exception_handler(Exception)
    async def crashed(_: Request, exc: Exception) -> JSONResponse:  # process edge: log, answer 500
        logger.exception("unhandled error in a route")
        return error_response(ApiError(500, "SYSTEM", f"internal error: {type(exc).__name__}"))


def create_app(settings: Settings | None = None,
               executor_factory: ExecutorFactory | None = None) -> FastAPI:
    """The service. Its store, executor and scheduler live from startup to shutdown."""
    settings = settings or Settings()
    factory = executor_factory or default_executor

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = TaskStore(settings.db_path, durable=settings.durable)
        executor = await run_in_threadpool(factory, settings)
        scheduler = Scheduler(store, executor, settings)
        scheduler.start()
        app.state.drk = ServerState(settings, store, executor, scheduler)
        logger.info("drkernel serve ready: %s", settings.public())
        try:
            yield
        finally:
            scheduler.stop()
            await run_in_threadpool(executor.close)
            store.close()

    app = FastAPI(title="drkernel", version="0.1.0", lifespan=lifespan, docs_url="/docs",
                  redoc_url=None)
    _install_middleware(app, settings)
    app.add_api_route("/evaluate", evaluate, methods=["POST"])
    app.add_api_route("/evaluate/batch", evaluate_batch, methods=["POST"])
    app.add_api_route("/status/{task_id}", task_status, methods=["GET"])
    app.add_api_route("/results/{task_id}", task_result, methods=["GET"])
    app.add_api_route("/tasks/{task_id}", cancel_task, methods=["DELETE"])
    app.include_router(native.router)
    app.include_router(ops.router)
    return app

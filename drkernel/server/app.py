"""The HTTP service: `create_app(settings, executor_factory)` and the anchor-compatible routes.

Input: HTTP requests (anchor shapes on /evaluate..., native ones under /v1); output: JSON answers
from the store. /evaluate blocks until its result, as the anchor (the judge's own deadline bounds
it), and answers 200; KernelGYM's other routes are in workflow.py and ops.py.
Tasks are committed to SQLite before any answer; the native API is in native.py, ops in ops.py.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from drkernel.errors import ConfigError
from drkernel.executors.base import Executor
from drkernel.server import native, ops, workflow
from drkernel.server.anchor import (
    AnchorBatchRequest,
    AnchorRequest,
    anchor_response,
    iso,
    status_response,
)
from drkernel.server.envelope import (
    ApiError,
    ServerState,
    client_identity,
    error_response,
    read_json,
    server_state,
    validation_error,
)
from drkernel.server.scheduler import Scheduler, ShuttingDown
from drkernel.server.settings import Settings
from drkernel.server.store import TASK_ID_MAX_CHARS, StoreUnavailable, TaskRecord, TaskStore
from drkernel.server.workflow import anchor_tasks, parse, submit_anchor, wait_finished

if TYPE_CHECKING:
    from drkernel.executors.build import ExecutorConfig

__all__ = ["ExecutorFactory", "begin_shutdown", "create_app", "default_executor", "serve_executor_config"]

logger = logging.getLogger(__name__)

ExecutorFactory = Callable[[Settings], Executor]
_OPEN_PATHS = {"/health"}


def default_executor(settings: Settings) -> Executor:
    """The executor `drkernel serve` builds: local pool or Ray, real judge or the scripted double."""
    from drkernel.executors.build import build_executor
    from drkernel.executors.fake_judge import fake_judge

    # the real judges are built from the executor config's `judge` (settings.judges())
    return build_executor(serve_executor_config(settings), fake_judge if settings.judge == "fake" else None)


def serve_executor_config(settings: Settings) -> ExecutorConfig:
    """The settings' executor config: local or ray, the names serve takes (settings.py checks)."""
    from drkernel.executors.build import check_cpu_judges, executor_config
    from drkernel.server.settings import SECRET_VARS

    if settings.executor == "ray":
        return executor_config("ray", address=settings.ray_address, num_workers=settings.num_workers,
                               judge=settings.judges(), heartbeat_timeout_s=settings.heartbeat_timeout_s,
                               heartbeat_s=max(0.5, settings.heartbeat_timeout_s / 3),
                               deadline_grace_s=settings.deadline_grace_s)
    from drkernel.executors.local import detect_devices

    devices = settings.devices or detect_devices(settings.num_workers)
    if settings.num_workers:  # that many CPU judges, or the first GPUs of the list
        cpu = set(devices) == {"cpu"}
        if cpu:  # serve --workers 1000 on the CPU started 1000 judge processes importing torch
            check_cpu_judges(settings.num_workers)
        devices = ("cpu",) * settings.num_workers if cpu else devices[: settings.num_workers]
    if settings.judges_per_gpu is not None and settings.judges_per_gpu > 1 and set(devices) == {"cpu"}:
        logger.warning("--judges-per-gpu %d sets nothing here: no GPU among the devices (CPU judges: %d; "
                       "--workers N sets how many)", settings.judges_per_gpu, len(devices))
    return executor_config("local", devices=devices, isolation=settings.isolation,
                           heartbeat_timeout_s=settings.heartbeat_timeout_s,
                           deadline_grace_s=settings.deadline_grace_s,
                           judges_per_gpu=settings.gpu_judges, scrub_env=SECRET_VARS, judge=settings.judges(),
                           ready="first")  # serve answers once one judge is up; the rest join as they come


async def evaluate(request: Request) -> JSONResponse:
    """Anchor POST /evaluate: submit, block until the result, answer it (200)."""
    state = server_state(request)
    req = parse(AnchorRequest, await read_json(request, state.settings))
    (task,) = anchor_tasks(state, [req], client_identity(request))
    (record,) = await run_in_threadpool(submit_anchor, state, [task])
    records = await wait_finished(state, [record.task_id])
    return JSONResponse(anchor_response(records.get(record.task_id, record)))


async def evaluate_batch(request: Request) -> JSONResponse:
    """Anchor POST /evaluate/batch, run in parallel across workers (the anchor runs it in order)."""
    state = server_state(request)
    batch = parse(AnchorBatchRequest, await read_json(request, state.settings))
    if len(batch.tasks) > state.settings.max_batch:
        raise ApiError(413, "PAYLOAD_TOO_LARGE",
                       f"{len(batch.tasks)} tasks exceed the batch limit {state.settings.max_batch}")
    tasks = anchor_tasks(state, batch.tasks, client_identity(request))
    for task in tasks:
        task.meta["batch_id"] = batch.batch_id
    submitted = await run_in_threadpool(submit_anchor, state, tasks)
    ids = [r.task_id for r in submitted]
    records = await wait_finished(state, ids)
    latest = [records.get(r.task_id, r) for r in submitted]
    results = [anchor_response(r) for r in latest]
    done = all(r.finished for r in latest)
    failed = sum(1 for r in results if r["status"] == "failed")
    body = {
        "batch_id": batch.batch_id,
        "total_tasks": len(ids),
        "completed_tasks": sum(1 for r in results if r["status"] == "completed"),
        "failed_tasks": failed,
        "results": results,
        "batch_status": "completed" if done else "processing",
        "submitted_at": iso(min(r.submitted_at for r in submitted)),
        "completed_at": iso(max(r.finished_at or 0 for r in latest)) if done else None,
    }
    return JSONResponse(body)


def _known(state: ServerState, task_id: str) -> TaskRecord:
    record = state.store.get(task_id)
    if record is None:
        raise ApiError(404, "NOT_FOUND", f"Task {task_id} not found", task_id=task_id)
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
    return status_response(record, state.scheduler.position(task_id),
                           _device_of(state, task_id, record))


async def task_result(request: Request, task_id: str) -> dict[str, Any]:
    return anchor_response(_known(server_state(request), task_id))


async def cancel_task(request: Request, task_id: str) -> dict[str, Any]:
    """As the anchor: 200 for a pending or running task, 404 for an unknown or finished one."""
    state = server_state(request)
    prior = await run_in_threadpool(state.scheduler.cancel, task_id)
    if prior not in ("queued", "running"):
        raise ApiError(404, "NOT_FOUND", f"Task {task_id} not found or cannot be cancelled",
                       task_id=task_id)
    return {"message": f"Task {task_id} cancelled successfully", "task_id": task_id,
            "cancelled": True, "status": "cancelled"}


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
        return error_response(validation_error(exc.errors()))

    @app.exception_handler(ConfigError)
    async def bad_option(_: Request, exc: ConfigError) -> JSONResponse:
        return error_response(ApiError(400, "VALIDATION", str(exc)))

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(_: Request, exc: StoreUnavailable) -> JSONResponse:
        # a full disk: nothing was committed, and the same request may pass later (clients retry 503)
        logger.error("%s", exc)
        return error_response(ApiError(503, "STORE_UNAVAILABLE", str(exc),
                                       headers={"Retry-After": str(settings.retry_after_s)}))

    @app.exception_handler(ShuttingDown)
    async def shutting_down(_: Request, exc: ShuttingDown) -> JSONResponse:
        # a long poll cut short by SIGTERM or a restart: the clients retry 503, and find the task kept
        return error_response(ApiError(503, "SHUTTING_DOWN", str(exc),
                                       headers={"Retry-After": str(settings.retry_after_s)}))

    @app.exception_handler(Exception)
    async def crashed(_: Request, exc: Exception) -> JSONResponse:  # process edge: log, answer 500
        logger.exception("unhandled error in a route")
        return error_response(ApiError(500, "SYSTEM", f"internal error: {type(exc).__name__}"))


_NATIVE_REQUEST = {
    "type": "object",
    "required": ["reference_code", "kernel_code"],
    "properties": {
        "reference_code": {"type": "string", "description": "KernelBench-format reference"},
        "kernel_code": {"type": "string", "description": "the candidate, defining ModelNew"},
        "task_id": {"type": "string", "maxLength": TASK_ID_MAX_CHARS},
        "options": {"type": "object", "description": "EvalOptions fields (docs/service.md)"},
    },
}
_NATIVE_TASK = {
    "type": "object",
    "properties": {
        "request": _NATIVE_REQUEST,
        "priority": {"type": "string", "enum": ["high", "normal", "low"], "default": "normal"},
        "force": {
            "type": "boolean", "default": False, "description": "judge again even if a result is stored"
        },
    },
    "required": ["request"],
}
_NATIVE_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("/v1/tasks", "post"): _NATIVE_TASK,
    ("/v1/tasks/batch", "post"): {"type": "object", "required": ["requests"], "properties": {
        "requests": {"type": "array", "items": _NATIVE_TASK, "minItems": 1},
        "priority": {"type": "string", "enum": ["high", "normal", "low"], "default": "normal"}}},
    ("/v1/tasks/wait", "post"): {"type": "object", "required": ["task_ids"], "properties": {
        "task_ids": {"type": "array", "items": {"type": "string"}},
        "timeout_s": {"type": "number", "default": 0}}},
}
_ERROR_ENVELOPE = {"description": "error envelope: error, message, error_code, task_id, timestamp",
                   "content": {"application/json": {"schema": {"type": "object"}}}}


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema with what the routes really take and answer: they read their bodies
    themselves (so FastAPI sees none), and bad input is a 400 in the error envelope, never a 422."""
    if app.openapi_schema:
        return app.openapi_schema
    from fastapi.openapi.utils import get_openapi

    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    bodies: dict[tuple[str, str], dict[str, Any]] = dict(_NATIVE_BODIES)
    for path, model in (("/evaluate", AnchorRequest), ("/evaluate/batch", AnchorBatchRequest)):
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(model_schema.pop("$defs", {}))
        components[model.__name__] = model_schema
        bodies[(path, "post")] = {"$ref": f"#/components/schemas/{model.__name__}"}
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    for path, operations in schema.get("paths", {}).items():
        for method, op in operations.items():
            responses = op.setdefault("responses", {})
            responses.pop("422", None)
            body = bodies.get((path, method))
            if body is not None:
                op["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
            # a path parameter is any string; a body or a typed query parameter can be bad input
            if body is not None or any(p.get("in") == "query" for p in op.get("parameters", [])):
                responses["400"] = _ERROR_ENVELOPE
    app.openapi_schema = schema
    return schema


def begin_shutdown(app: FastAPI) -> None:
    """The server got SIGTERM: its long polls answer 503 now, so that uvicorn, which waits for open
    requests before the app's shutdown, need not wait them out (30 s)."""
    state: ServerState | None = getattr(app.state, "drk", None)
    if state is not None:  # None: stopped before its startup ended
        state.scheduler.close_waits()


def create_app(settings: Settings | None = None,
               executor_factory: ExecutorFactory | None = None) -> FastAPI:
    """The service. Its store, executor and scheduler live from startup to shutdown."""
    settings = settings or Settings()
    factory = executor_factory or default_executor

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = TaskStore(settings.db_path, durable=settings.durable, exclusive=True)  # one server per store
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
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    app.add_api_route("/evaluate", evaluate, methods=["POST"])
    app.add_api_route("/evaluate/batch", evaluate_batch, methods=["POST"])
    app.add_api_route("/status/{task_id:path}", task_status, methods=["GET"])
    app.add_api_route("/results/{task_id:path}", task_result, methods=["GET"])
    app.add_api_route("/tasks/{task_id:path}", cancel_task, methods=["DELETE"])
    app.include_router(workflow.router)
    app.include_router(native.router)
    app.include_router(ops.router)
    return app

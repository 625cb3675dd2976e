"""KernelGYM's routes around /evaluate: /workflow/submit, /workflow/results/{id}, /debug/validate,
and the submit-and-block helpers that /evaluate and /evaluate/batch share with them.

Input: the anchor's WorkflowRequest / EvaluationRequest JSON; output: its WorkflowResponse and
validation dict. Only the `kernelbench` workflow is judged: `kernel_simple` grades a kernel against
cases that the kernel itself supplies, which a judge of hostile code cannot accept, so it gets a
failed WorkflowResponse that says so (the anchor's shape, a clear message).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from drkernel.server.anchor import AnchorRequest, anchor_response, anchor_task, iso
from drkernel.server.envelope import (
    ApiError,
    ServerState,
    check_code_size,
    client_identity,
    dedupe_key,
    read_json,
    server_state,
    submit_or_raise,
    validation_error,
)
from drkernel.server.store import NewTask, TaskRecord

__all__ = ["anchor_tasks", "router", "submit_anchor", "wait_finished"]

router = APIRouter()

_WAIT_SLICE_S = 3600.0


def parse(model: type[Any], data: Any) -> Any:
    """Validate a body against a model; a failure is the anchor's RequestValidationError (400)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        task_id = data.get("task_id") if isinstance(data, dict) else None
        raise validation_error(exc.errors(), task_id if isinstance(task_id, str) else None) from None


def anchor_tasks(
    state: ServerState, requests: list[AnchorRequest], client: str | None = None
) -> list[NewTask]:
    """Tasks for anchor requests; one without task_id from `client` repeating a recent one is
    deduplicated (a retry after a disconnect must not run the kernel twice)."""
    for req in requests:
        if req.backend != "triton":
            raise ApiError(400, "UNSUPPORTED", f"backend {req.backend!r} is not supported: drkernel "
                           "judges Triton kernels only (send backend 'triton')", task_id=req.task_id)
        check_code_size(state.settings, req.reference_code, req.kernel_code)
    tasks = [anchor_task(r) for r in requests]
    if client is not None:
        for req, task in zip(requests, tasks, strict=True):
            if not req.task_id:
                task.dedupe = dedupe_key(state, client, task.request)
    return tasks


def submit_anchor(state: ServerState, tasks: list[NewTask]) -> list[TaskRecord]:
    """Submit; a task_id already stored answers its stored task, as the anchor does (no 409)."""
    try:
        return [record for record, _ in submit_or_raise(state, tasks)]
    except ApiError as exc:
        if exc.code != "CONFLICT":
            raise
    records: list[TaskRecord] = []
    for task in tasks:
        try:
            ((record, _),) = submit_or_raise(state, [task])
        except ApiError as exc:
            known = state.store.get(str(task.request.task_id)) if exc.code == "CONFLICT" else None
            if known is None:
                raise
            record = known
        records.append(record)
    return records


async def wait_finished(state: ServerState, task_ids: list[str]) -> dict[str, TaskRecord]:
    """Block until the tasks finish, as the anchor's /evaluate does (the judge's own deadline,
    3x the task timeout + 60 s, bounds a running task). `--evaluate-wait` bounds the wait; past it
    the answer is still 200, with the pending/processing status (never 202)."""
    limit = state.settings.evaluate_wait_s
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit
    while True:
        remaining = _WAIT_SLICE_S if deadline is None else deadline - loop.time()
        records = await state.scheduler.wait(task_ids, max(0.0, min(_WAIT_SLICE_S, remaining)))
        if all(records[i].finished for i in task_ids if i in records) or remaining <= 0:
            return records


class WorkflowRequest(BaseModel):
    """The anchor's WorkflowRequest."""

    model_config = ConfigDict(extra="ignore")

    workflow: str = "kernelbench"
    payload: dict[str, Any] = Field(default_factory=dict)
    task_id: str | None = None
    force_refresh: bool = False
    resources: dict[str, Any] | None = None


def _workflow_response(evaluation: dict[str, Any], submitted_at: str | None) -> dict[str, Any]:
    result = {k: v for k, v in evaluation.items() if k != "status"}
    return {
        "task_id": evaluation["task_id"],
        "status": evaluation["status"],
        "result": result,
        "error_message": evaluation.get("error_message"),
        "error_code": evaluation.get("error_code"),
        "submitted_at": submitted_at,
        "completed_at": evaluation.get("completed_at"),
    }


# the workflows KernelGYM registers: kernelbench is judged here, kernel_simple answered as unsupported
KERNELGYM_WORKFLOWS = frozenset({"kernelbench", "kernel_simple"})


def _unsupported_workflow(task_id: str, workflow: str) -> dict[str, Any]:
    message = (f"workflow {workflow!r} is not supported: drkernel judges a kernel against a "
               "reference it does not control (workflow 'kernelbench', with reference_code); "
               "'kernel_simple' grades a kernel by cases the kernel itself supplies")
    evaluation = {"task_id": task_id, "status": "failed", "compiled": False, "correctness": False,
                  "decoy_kernel": False, "reference_runtime": -1.0, "kernel_runtime": -1.0,
                  "speedup": 0.0, "metadata": {"error": message}, "error_message": message,
                  "error_code": "VALIDATION_ERROR", "submitted_at": None, "completed_at": None,
                  "processing_time": None}
    return _workflow_response(evaluation, None)


@router.post("/workflow/submit")
async def submit_workflow(request: Request) -> dict[str, Any]:
    """The anchor's POST /workflow/submit: the kernelbench workflow, blocking, as /evaluate."""
    state = server_state(request)
    wf = parse(WorkflowRequest, await read_json(request, state.settings))
    payload = dict(wf.payload)
    task_id = wf.task_id or payload.get("task_id")
    if task_id is not None:
        payload["task_id"] = task_id
    if wf.force_refresh:
        payload["force_refresh"] = True
    if payload.get("resources") is None and wf.resources is not None:
        payload["resources"] = wf.resources
    name = (wf.workflow or "kernelbench").strip().lower()
    if name not in KERNELGYM_WORKFLOWS:  # as KernelGYM: a workflow no one registered is a bad request
        raise ApiError(400, "VALIDATION", f"Request validation failed: unknown workflow {name!r} "
                       f"(known: {', '.join(sorted(KERNELGYM_WORKFLOWS))})")
    if name != "kernelbench":
        if not isinstance(task_id, str) or not task_id:
            raise ApiError(400, "VALIDATION", "Request validation failed: task_id is required")
        return _unsupported_workflow(task_id, name)
    req = parse(AnchorRequest, payload)
    (task,) = anchor_tasks(state, [req], client_identity(request))  # deduplicated, as /evaluate
    (record,) = await asyncio.to_thread(submit_anchor, state, [task])
    records = await wait_finished(state, [record.task_id])
    latest = records.get(record.task_id, record)
    return _workflow_response(anchor_response(latest), iso(latest.submitted_at))


@router.get("/workflow/results/{task_id:path}")
async def workflow_results(request: Request, task_id: str) -> dict[str, Any]:
    record = server_state(request).store.get(task_id)
    if record is None:
        raise ApiError(404, "NOT_FOUND", f"Task {task_id} not found", task_id=task_id)
    return _workflow_response(anchor_response(record), iso(record.submitted_at))


def _has_class(code: str | None, name: str) -> tuple[bool, str]:
    if not code:
        return False, "Code is required"
    if f"class {name}" not in code:
        return False, f"Code must contain a '{name}' class"
    return True, ""


@router.post("/debug/validate")
async def debug_validate(request: Request) -> dict[str, Any]:
    """The anchor's request check: the entry-point classes, resources, cache knobs, an echo."""
    state = server_state(request)
    req = parse(AnchorRequest, await read_json(request, state.settings))
    errors: list[str] = []
    resources = req.resources or {}
    gpus = resources.get("gpus")
    if gpus is not None:
        try:
            if int(gpus) < 1:
                errors.append("resources.gpus must be >= 1")
        except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
            errors.append("resources.gpus must be an integer")
    if req.use_reference_cache and not req.uuid:
        errors.append("UUID is required when use_reference_cache is True")
    ref_ok, ref_err = _has_class(req.reference_code, req.entry_point)
    if not ref_ok:
        errors.append(f"Reference code validation failed: {ref_err}")
    kernel_entry = f"{req.entry_point}New"
    ker_ok, ker_err = _has_class(req.kernel_code, kernel_entry)
    if not ker_ok:
        errors.append(f"Kernel code validation failed: {ker_err}")
    if req.backend != "triton":
        errors.append(f"backend {req.backend!r} is not supported: drkernel judges Triton kernels")
    return {
        "valid": not errors,
        "errors": errors,
        "reference": {"valid": ref_ok, "error": ref_err, "entry_point": req.entry_point},
        "kernel": {"valid": ker_ok, "error": ker_err, "entry_point": kernel_entry},
        "cache": {"use_reference_cache": req.use_reference_cache, "uuid": req.uuid},
        "resources": resources,
        "task_id": req.task_id,
        "workflow": "kernelbench",
        "request_info": {
            "backend": req.backend,
            "num_correct_trials": req.num_correct_trials,
            "num_perf_trials": req.num_perf_trials,
            "timeout": req.timeout,
            "priority": req.priority,
            "device_preference": req.device_preference,
            "force_refresh": req.force_refresh,
            "workflow": req.workflow or "kernelbench",
        },
    }

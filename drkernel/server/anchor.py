"""KernelGYM compatibility: the anchor's request fields in, its response fields out.

Input: `EvaluationRequest` JSON as the authors' reward client sends it (unknown fields ignored);
output: NewTasks for the store, and `EvaluationResponse` dicts built from our EvalResult. The
anchor's "-1 for not measured" lives only here; the native API keeps None.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from drkernel.advice import hack_advice, hacks_text
from drkernel.server.store import ANCHOR_TASK_ID_MAX_CHARS, NewTask, TaskRecord, task_id_error
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult

__all__ = [
    "KERNELGYM_ERROR_CODES",
    "AnchorBatchRequest",
    "AnchorRequest",
    "anchor_response",
    "anchor_state",
    "anchor_task",
    "coverage_fields",
    "finished_status",
    "iso",
    "now_iso",
    "status_response",
]

# the anchor's ErrorCode names: every error_code on the anchor routes is one of these
KERNELGYM_ERROR_CODES = (
    "VALIDATION_ERROR", "COMPILATION_ERROR", "RUNTIME_ERROR", "CORRECTNESS_ERROR", "TIMEOUT_ERROR",
    "SYSTEM_ERROR", "RESOURCE_ERROR", "UNKNOWN_ERROR", "SYNTAX_ERROR", "IMPORT_ERROR",
    "INSTANTIATION_ERROR",
)

_COMPILE_ALIASES = {"torch_compile", "torch-compile", "compile"}

class AnchorRequest(BaseModel):
    """The anchor's EvaluationRequest; limits as the anchor's (kernelgym-anchor.md §1.2)."""

    model_config = ConfigDict(extra="ignore")

    task_id: str | None = None  # task_id_error's rule, at the anchor's length (below)
    reference_code: str = Field(min_length=10)
    kernel_code: str = Field(min_length=10)
    backend: Literal["triton", "cuda"] = "triton"
    entry_point: str = Field(default="Model", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    num_correct_trials: int = Field(default=5, ge=1, le=20)
    num_perf_trials: int | None = Field(default=None, ge=1, le=1000)  # None: ours (100 GPU, 3 CPU)
    num_warmup: int = Field(default=3, ge=0, le=100)
    timeout: float = Field(default=300, ge=10, le=3600)
    priority: Literal["low", "normal", "high"] = "normal"
    reference_backend: str | None = None
    force_refresh: bool = False
    enable_profiling: bool | None = None
    toolkit: str | None = None
    workflow: str | None = None
    verbose_errors: bool | None = None  # False: messages without the traceback
    device_preference: str | None = None  # accepted and echoed by /debug/validate, as the anchor
    uuid: str | None = None
    use_reference_cache: bool = False
    resources: dict[str, Any] | None = None

    @field_validator("task_id")
    @classmethod
    def _printable_id(cls, task_id: str | None) -> str | None:
        why = None if task_id is None else task_id_error(task_id, ANCHOR_TASK_ID_MAX_CHARS)
        if why:
            raise PydanticCustomError("task_id", why)
        return task_id


class AnchorBatchRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    batch_id: str = Field(default_factory=lambda: f"batch-{uuid.uuid4().hex}")  # required there
    tasks: list[AnchorRequest] = Field(min_length=1)


def anchor_task(req: AnchorRequest) -> NewTask:
    """Map one anchor request onto our request, keeping the anchor's knobs in the task meta."""
    reference_backend = "compile" if (req.reference_backend or "").lower() in _COMPILE_ALIASES \
        else "eager"
    options = EvalOptions(
        num_correct_trials=req.num_correct_trials,
        num_perf_trials=req.num_perf_trials,
        num_warmup=req.num_warmup,
        timeout_s=float(req.timeout),
        reference_backend=reference_backend,
        profile=True if req.enable_profiling is None else req.enable_profiling,
        entry_point=req.entry_point,
    )
    task_id = req.task_id or f"task-{uuid.uuid4().hex}"
    request = EvalRequest(reference_code=req.reference_code, kernel_code=req.kernel_code,
                          options=options, task_id=task_id)
    meta = {"api": "anchor", "backend": req.backend, "reference_backend": req.reference_backend,
            "verbose_errors": req.verbose_errors is not False}
    return NewTask(request=request, priority=req.priority, meta=meta, force=req.force_refresh)


def iso(ts: float | None) -> str | None:
    """UTC ISO-8601 with a Z, the anchor's timestamp form."""
    if not ts:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).replace(tzinfo=None).isoformat() + "Z"


def now_iso() -> str:
    return iso(time.time()) or ""


def anchor_state(record: TaskRecord) -> str:
    """The anchor's task states: pending / processing / completed / failed (never "timeout")."""
    if record.state == "queued":
        return "pending"
    if record.state == "running":
        return "processing"
    if record.state == "cancelled" or record.result is None:
        return "failed"
    return _verdict(record.result, record).status


@dataclass(frozen=True, slots=True)
class _Verdict:
    status: str  # completed | failed
    compiled: bool
    code: str | None  # a KERNELGYM_ERROR_CODES name
    message: str | None
    meta: dict[str, Any]


def _error_text(result: EvalResult, verbose: bool) -> str:
    err = result.error
    if err is None:
        return result.outcome.value
    tb = (err.traceback or "").rstrip()
    if not verbose or not tb or tb == "NoneType: None":
        return err.message
    # the anchor's verbose form is the formatted traceback, which ends with the message itself
    return tb if err.message.strip() in tb else f"{err.message}\n{tb}"


def _error_name(result: EvalResult) -> str:
    err = result.error
    if err is None:
        return result.outcome.value
    head = err.message.split(":", 1)[0].strip()
    return head if head.isidentifier() else err.kind


def _incorrect_detail(result: EvalResult) -> str | None:
    if result.error is not None:
        return result.error.message
    issues = [t.issue for t in result.trials if not t.passed and t.issue]
    return issues[0] if issues else None


def _verdict(result: EvalResult, record: TaskRecord) -> _Verdict:
    """Our outcome in the anchor's terms (kernelgym-anchor.md section 1.11 and its result schema).

    The anchor judges a Triton kernel's first launch inside the correctness loop, so an exception
    in forward and a Triton compile error at launch are both `completed`, compiled, incorrect,
    RUNTIME_ERROR. Only a module that does not load is `failed` / not compiled. A timeout or a
    dead sandbox is a failed task, as when the anchor's worker process times out or dies.
    """
    outcome = result.outcome
    kind = result.error.kind if result.error else ""
    verbose = bool(record.meta.get("verbose_errors", True))
    text = _error_text(result, verbose)
    code = error_code(outcome, kind)  # the one classification, shared with /metrics
    if outcome is EvalOutcome.OK:
        return _Verdict("completed", True, None, None, {})
    if outcome is EvalOutcome.INCORRECT:
        detail = _incorrect_detail(result)
        message = "Kernel produced incorrect results" + (f": {detail}" if detail else "")
        return _Verdict("completed", True, code, message,
                        {"correctness_issue": detail or "Output mismatch"})
    if outcome is EvalOutcome.HACK_DETECTED:
        # the hack's class and what to do instead, never the evidence (issue 33: the authors' engine
        # pastes the whole result into the next prompt, so a seed here would be taught to the policy)
        found = hacks_text(result.hacks)
        message = f"Kernel produced incorrect results: reward hack detected ({found})"
        return _Verdict("completed", True, code, message,
                        {"correctness_issue": f"reward hack detected ({found})"})
    if _failed_at_launch(outcome, kind):
        return _Verdict("completed", True, code, f"Kernel execution failed: {text}",
                        {"runtime_error": text, "runtime_error_name": _error_name(result)})
    if outcome is EvalOutcome.COMPILE_ERROR:
        entry = f"class {record.request.options.entry_point}New"
        if kind == "missing_model_new" and entry not in record.request.kernel_code:
            message = f"Kernel code validation failed: the code must define '{entry}'"
            return _Verdict("failed", False, "VALIDATION_ERROR", message,
                            {"error": message, "validation_error": message})
        return _Verdict("failed", False, code, f"Kernel compilation failed: {text}",
                        {"compilation_error": text, "compilation_error_name": _error_name(result)})
    if outcome is EvalOutcome.RUNTIME_ERROR:
        message = f"Task processing failed: {text}"
        return _Verdict("failed", False, code, message, {"error": message})
    if outcome is EvalOutcome.TIMEOUT:
        limit = record.request.options.timeout_s
        message = f"Task processing failed: timeout after {limit:g}s ({text})"
        return _Verdict("failed", False, code, message, {"error": message})
    message = f"Task processing failed: {text}"
    return _Verdict("failed", False, code, message, {"error": message})


# sandboxes that died or broke protocol: the anchor's worker process dies the same way and the
# task comes back failed, not compiled (its child is restarted and the error classified)
_DEAD_SANDBOX = {"crash", "memory_limit", "protocol"}


def _failed_at_launch(outcome: EvalOutcome, kind: str) -> bool:
    """A module that loaded and then failed when run (an exception in forward, a Triton compile
    error at first launch): `completed` and compiled on the anchor's routes."""
    return outcome is EvalOutcome.COMPILE_ERROR and kind == "triton_compile_error" or \
        outcome is EvalOutcome.RUNTIME_ERROR and kind not in _DEAD_SANDBOX


def finished_status(outcome: EvalOutcome, kind: str) -> str:
    """The anchor's status of a finished (not cancelled) task, `completed` or `failed`, as /status,
    /results and /evaluate/batch give it (`_verdict`) and /health counts it."""
    if outcome in (EvalOutcome.OK, EvalOutcome.INCORRECT, EvalOutcome.HACK_DETECTED):
        return "completed"
    return "completed" if _failed_at_launch(outcome, kind) else "failed"


def error_code(outcome: EvalOutcome, kind: str) -> str | None:
    """The anchor's error_code for an outcome and error kind, as `/results` gives it (`_verdict`) and
    `/metrics` counts it. (A compile error of a source that never names `ModelNew` is VALIDATION_ERROR
    in `/results`; `/metrics` counts both under compilation errors.)"""
    if outcome is EvalOutcome.OK:
        return None
    if outcome in (EvalOutcome.INCORRECT, EvalOutcome.HACK_DETECTED):
        return "CORRECTNESS_ERROR"
    if outcome is EvalOutcome.COMPILE_ERROR:
        return "RUNTIME_ERROR" if kind == "triton_compile_error" else "COMPILATION_ERROR"
    if outcome is EvalOutcome.RUNTIME_ERROR:
        return "RUNTIME_ERROR"
    if outcome is EvalOutcome.TIMEOUT:
        return "TIMEOUT_ERROR"
    return "SYSTEM_ERROR"


def _metadata(result: EvalResult, record: TaskRecord) -> dict[str, Any]:
    opts = record.request.options
    passed = sum(1 for t in result.trials if t.passed)
    meta: dict[str, Any] = {
        "outcome": result.outcome.value,
        "hacks": list(result.hacks),
        "hack_details": {code: hack_advice(code) for code in result.hacks},  # the evidence: /v1 only
        "coverage": result.coverage,
        "reward": result.reward,
        "backend": record.meta.get("backend", "triton"),
        "device": result.device.to_dict() if result.device else None,
        "gpu_name": result.device.name if result.device else None,
        "num_correct_trials": opts.num_correct_trials,
        "num_perf_trials": opts.num_perf_trials,
        "correctness_trials": f"({passed} / {len(result.trials)})" if result.trials else None,
        "num_custom_kernels": sum(1 for k in result.kernels if k.own),
        "num_total_kernels": len(result.kernels),
    }
    meta.update(coverage_fields(result))
    if record.meta.get("reference_backend"):
        meta["reference_backend"] = record.meta["reference_backend"]
    if result.error is not None:
        meta["error_kind"] = result.error.kind
    return meta


def coverage_fields(result: EvalResult) -> dict[str, float]:
    """The two profiling keys from which the authors' client computes `time_coverage`.

    They are scaled so that their ratio is our coverage (the measured share of own-kernel device
    time); absent when the judge measured no coverage (the CPU judge, a failed evaluation).
    """
    if result.coverage is None:
        return {}
    total_us = sum(k.device_us for k in result.kernels)
    total = total_us if total_us > 0 else 1.0
    return {"custom_kernel_cuda_time_in_profiling_us": result.coverage * total,
            "total_kernel_run_time_in_profiling_us": total}


def anchor_response(record: TaskRecord) -> dict[str, Any]:
    """The anchor's EvaluationResponse for one stored task (finished or not)."""
    out: dict[str, Any] = {
        "task_id": record.task_id,
        "status": anchor_state(record),
        "compiled": False,
        "correctness": False,
        "decoy_kernel": False,
        "reference_runtime": -1.0,
        "kernel_runtime": -1.0,
        "speedup": 0.0,
        "metadata": {},
        "error_message": None,
        "error_code": None,
        "submitted_at": iso(record.submitted_at),
        "completed_at": iso(record.finished_at),
        "processing_time": (record.finished_at - record.started_at)
        if record.finished_at and record.started_at else None,
    }
    if record.state == "cancelled":
        # the anchor records a cancellation as a failed task with SYSTEM_ERROR
        out.update(error_message="Task cancelled", error_code="SYSTEM_ERROR",
                   metadata={"error": "Task cancelled"})
        return out
    result = record.result
    if result is None:
        return out
    verdict = _verdict(result, record)
    out.update(
        status=verdict.status,
        compiled=verdict.compiled,
        correctness=result.correct,
        decoy_kernel=bool(result.hacks),
        reference_runtime=result.reference_ms if result.reference_ms is not None else -1.0,
        kernel_runtime=result.kernel_ms if result.kernel_ms is not None else -1.0,
        speedup=result.speedup if result.correct and result.speedup is not None else 0.0,
        metadata=_metadata(result, record) | verdict.meta,
        error_message=verdict.message,
        error_code=verdict.code,
    )
    return out


def status_response(record: TaskRecord, queue_position: int | None,
                    device: str | None) -> dict[str, Any]:
    """The anchor's TaskStatusResponse; `progress` on its 0-100 scale."""
    return {
        "task_id": record.task_id,
        "status": anchor_state(record),
        "progress": 100.0 if record.finished else 0.0,
        "estimated_completion": None,
        "queue_position": queue_position,
        "assigned_device": device,
    }

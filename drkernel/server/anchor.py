"""KernelGYM compatibility: the anchor's request fields in, its response fields out.

Input: `EvaluationRequest` JSON as the authors' reward client sends it (unknown fields ignored);
output: NewTasks for the store, and `EvaluationResponse` dicts built from our EvalResult. The
anchor's "-1 for not measured" lives only here; the native API keeps None.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from drkernel.server.store import NewTask, TaskRecord
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult

__all__ = [
    "AnchorBatchRequest",
    "AnchorRequest",
    "anchor_response",
    "anchor_state",
    "anchor_task",
    "iso",
]

_COMPILE_ALIASES = {"torch_compile", "torch-compile", "compile"}

_ERROR_CODES = {
    EvalOutcome.COMPILE_ERROR: "COMPILATION",
    EvalOutcome.RUNTIME_ERROR: "RUNTIME",
    EvalOutcome.INCORRECT: "CORRECTNESS",
    EvalOutcome.HACK_DETECTED: "CORRECTNESS",
    EvalOutcome.TIMEOUT: "TIMEOUT",
    EvalOutcome.INFRA_ERROR: "SYSTEM",
}


class AnchorRequest(BaseModel):
    """The anchor's EvaluationRequest; limits as the anchor's (kernelgym-anchor.md §1.2)."""

    model_config = ConfigDict(extra="ignore")

    task_id: str | None = Field(default=None, min_length=1, max_length=100)
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


class AnchorBatchRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    batch_id: str | None = None
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
    meta = {"api": "anchor", "backend": req.backend, "reference_backend": req.reference_backend}
    return NewTask(request=request, priority=req.priority, meta=meta, force=req.force_refresh)


def iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat() if ts else None


def anchor_state(record: TaskRecord) -> str:
    """The anchor's status words: pending / processing / completed / failed / timeout."""
    if record.state == "queued":
        return "pending"
    if record.state == "running":
        return "processing"
    if record.state == "cancelled" or record.result is None:
        return "failed"
    return record.result.status.value


def _metadata(result: EvalResult, record: TaskRecord) -> dict[str, Any]:
    opts = record.request.options
    passed = sum(1 for t in result.trials if t.passed)
    total_us = sum(k.device_us for k in result.kernels)
    meta: dict[str, Any] = {
        "outcome": result.outcome.value,
        "hacks": list(result.hacks),
        "hack_details": dict(result.hack_details),
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
    if result.coverage is not None:
        # Dr.Kernel's client computes time_coverage = custom / total from these two keys; they
        # are scaled so that their ratio is our coverage (the measured share of own-kernel time).
        total = total_us if total_us > 0 else 1.0
        meta["custom_kernel_cuda_time_in_profiling_us"] = result.coverage * total
        meta["total_kernel_run_time_in_profiling_us"] = total
    if record.meta.get("reference_backend"):
        meta["reference_backend"] = record.meta["reference_backend"]
    if result.error is not None:
        meta["error_kind"] = result.error.kind
    return meta


def anchor_response(record: TaskRecord) -> dict[str, Any]:
    """EvaluationResponse for one stored task (finished or not)."""
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
        out.update(error_message="Task cancelled", error_code="CANCELLED")
        return out
    result = record.result
    if result is None:
        return out
    out.update(
        compiled=result.compiled,
        correctness=result.correct,
        decoy_kernel=bool(result.hacks),
        reference_runtime=result.reference_ms if result.reference_ms is not None else -1.0,
        kernel_runtime=result.kernel_ms if result.kernel_ms is not None else -1.0,
        speedup=result.speedup if result.correct and result.speedup is not None else 0.0,
        metadata=_metadata(result, record),
        error_message=result.error.message if result.error else None,
        error_code=_ERROR_CODES.get(result.outcome),
    )
    return out

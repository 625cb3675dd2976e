"""KernelGYM's response schemas, written afresh from reading its server (not copied), to check
that every answer of our anchor routes is one its own models and the authors' client accept.

Source of truth read: kernelgym/common.py (TaskStatus, ErrorCode), kernelgym/server/api/models.py
(the response models), server.py and utils.py (what the routes return). Their models ignore
unknown keys, so our extra keys are allowed; the types, enums and required keys are theirs.
Timestamps are strings there; here they must also parse as ISO-8601, as theirs do.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class TaskState(StrEnum):
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMEOUT = "timeout"


class KgErrorCode(StrEnum):
    VALIDATION_ERROR = "VALIDATION_ERROR"
    COMPILATION_ERROR = "COMPILATION_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    CORRECTNESS_ERROR = "CORRECTNESS_ERROR"
    TIMEOUT_ERROR = "TIMEOUT_ERROR"
    SYSTEM_ERROR = "SYSTEM_ERROR"
    RESOURCE_ERROR = "RESOURCE_ERROR"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    SYNTAX_ERROR = "SYNTAX_ERROR"
    IMPORT_ERROR = "IMPORT_ERROR"
    INSTANTIATION_ERROR = "INSTANTIATION_ERROR"


def _iso(value: str | None) -> str | None:
    if value is not None:
        datetime.fromisoformat(value.replace("Z", "+00:00"))  # raises on a non-ISO string
    return value


def _iso_fields(*names: str) -> Any:
    """A validator: these string fields must be ISO-8601 timestamps (or null)."""

    def check(cls: type, value: str | None) -> str | None:
        return _iso(value)

    return field_validator(*names)(classmethod(check))  # type: ignore[arg-type]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", strict=False)


class Evaluation(_Model):
    task_id: str
    status: TaskState
    compiled: bool | None = None
    correctness: bool | None = None
    decoy_kernel: bool | None = None
    reference_runtime: float | None = None
    kernel_runtime: float | None = None
    speedup: float | None = None
    metadata: dict[str, Any] | None = None
    error_message: str | None = None
    error_code: KgErrorCode | None = None
    submitted_at: str | None = None
    completed_at: str | None = None
    processing_time: float | None = None

    _ts = _iso_fields("submitted_at", "completed_at")


class BatchEvaluation(_Model):
    batch_id: str
    total_tasks: int
    completed_tasks: int
    failed_tasks: int
    results: list[Evaluation]
    batch_status: TaskState
    submitted_at: str | None = None
    completed_at: str | None = None

    _ts = _iso_fields("submitted_at", "completed_at")


class TaskStatus(_Model):
    task_id: str
    status: TaskState
    progress: float | None = None  # 0-100
    estimated_completion: str | None = None
    queue_position: int | None = None
    assigned_device: str | None = None

    @field_validator("progress")
    @classmethod
    def _percent(cls, v: float | None) -> float | None:
        assert v is None or 0.0 <= v <= 100.0, f"progress {v} outside 0-100"
        return v


class Workflow(_Model):
    task_id: str
    status: TaskState
    result: dict[str, Any] | None = None
    error_message: str | None = None
    error_code: KgErrorCode | None = None
    submitted_at: str | None = None
    completed_at: str | None = None

    _ts = _iso_fields("submitted_at", "completed_at")


class SystemHealth(_Model):
    status: str
    timestamp: str
    gpu_status: dict[str, Any]
    queue_status: dict[str, Any]
    memory_usage: dict[str, Any]
    active_tasks: int
    total_processed: int
    uptime: float

    _ts = _iso_fields("timestamp")


class Metrics(_Model):
    timestamp: str
    performance_metrics: dict[str, Any]
    resource_metrics: dict[str, Any]
    queue_metrics: dict[str, Any]
    error_metrics: dict[str, Any]

    _ts = _iso_fields("timestamp")


class ErrorBody(_Model):
    error: str
    message: str
    error_code: KgErrorCode | None = None
    task_id: str | None = None
    timestamp: str

    _ts = _iso_fields("timestamp")


class Root(_Model):
    name: str
    version: str
    description: str
    timestamp: str

    _ts = _iso_fields("timestamp")


class WorkerEntry(_Model):
    device: str
    status: str
    last_heartbeat: str | None = None
    node_id: str
    hostname: str


class QueueStatus(_Model):
    pending: int
    pending_by_prefix: dict[str, int]
    worker_queues: dict[str, int]


class Validation(_Model):
    valid: bool
    errors: list[str]
    reference: dict[str, Any]
    kernel: dict[str, Any]
    cache: dict[str, Any]
    resources: dict[str, Any]
    task_id: str | None
    workflow: str
    request_info: dict[str, Any]


class CancelAnswer(_Model):
    message: str

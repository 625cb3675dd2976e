"""An in-process executor for tests: answers each request with a result computed by a function.

Like httpx's MockTransport: no processes, no torch work. The default answer marks every candidate
correct with speedup 1.0 unless its code contains a marker comment:
  `# fake: incorrect`, `# fake: hack=<code>`, `# fake: compile_error`, `# fake: speedup=<float>`,
  `# fake: coverage=<float>`, `# fake: sleep=<seconds>`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from drkernel.errors import ExecutorError
from drkernel.reward.speedup import result_reward, reward_config
from drkernel.types import DeviceInfo, ErrorInfo, EvalOutcome, EvalRequest, EvalResult

__all__ = ["FakeExecutor", "scripted_result"]

_MARK = re.compile(r"#\s*fake:\s*([a-z_]+)(?:=([^\s]+))?")


def scripted_result(request: EvalRequest) -> EvalResult:
    """Build a result from the `# fake:` markers in the candidate code."""
    marks = {m.group(1): m.group(2) for m in _MARK.finditer(request.kernel_code)}
    if "sleep" in marks:
        time.sleep(float(marks["sleep"] or 0))
    device = DeviceInfo(kind="cpu", name="fake", interpreter=True)
    if "compile_error" in marks:
        return EvalResult(
            outcome=EvalOutcome.COMPILE_ERROR,
            error=ErrorInfo(kind="syntax_error", message="fake compile error"),
            device=device,
            task_id=request.task_id,
        )
    if "hack" in marks:
        code = marks["hack"] or "decoy_kernel"
        return EvalResult(
            outcome=EvalOutcome.HACK_DETECTED,
            compiled=True,
            hacks=[code],
            hack_details={code: "fake hack"},
            device=device,
            task_id=request.task_id,
        )
    if "incorrect" in marks:
        return EvalResult(
            outcome=EvalOutcome.INCORRECT, compiled=True, device=device, task_id=request.task_id
        )
    speedup = float(marks.get("speedup") or 1.0)
    coverage = float(marks.get("coverage") or 1.0)
    result = EvalResult(
        outcome=EvalOutcome.OK,
        compiled=True,
        correct=True,
        speedup=speedup,
        reference_ms=1.0,
        kernel_ms=1.0 / speedup,
        coverage=coverage,
        device=device,
        task_id=request.task_id,
    )
    # the options' preset, cap and weight
    result.reward = result_reward(result, reward_config(request.options))
    return result


class FakeExecutor:
    """Executor whose results come from `handler` (default: `scripted_result`)."""

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Config:
        """The fake has no settings: its answers come from the `# fake:` markers."""

        def build(self) -> FakeExecutor:
            return FakeExecutor()

    def __init__(self, handler: Callable[[EvalRequest], EvalResult] = scripted_result) -> None:
        self.handler = handler
        self.calls: list[EvalRequest] = []
        self._lock = threading.Lock()
        self.closed = False

    def evaluate(self, requests: list[EvalRequest]) -> list[EvalResult]:
        if self.closed:
            raise ExecutorError("this FakeExecutor is closed")
        with self._lock:
            self.calls.extend(requests)
        return [self.handler(r) for r in requests]

    def close(self) -> None:
        self.closed = True

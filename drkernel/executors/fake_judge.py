"""A judge double with the Judge's interface, for pool, Ray and server tests that need no sandbox.

Input: an EvalRequest whose kernel code carries `# fake:` markers (see executors/fake.py); output:
the scripted EvalResult. Extra markers model the judge's own failures and the wall-clock budget:
  `# fake: sleep=<s>`            takes s seconds; past options.timeout_s it ends as a TIMEOUT result
  `# fake: infra_error`          the judge raises (an infrastructure fault: the pool must rebuild it)
  `# fake: die`                  the judge process dies (os._exit) mid-task; raises outside one
  `# fake: die_once=<path>`      dies unless <path> exists, creating it first (a retry then passes)
  `# fake: judge_error`          answers INFRA_ERROR/"judge_error", as the Judge does for a fault
                                 of its own (a CUDA error in the judge process)
  `# fake: judge_error_once=<path>`  the same, unless <path> exists (created first)
  `# fake: freeze_once=<path>`   the judge process stops itself (SIGSTOP) unless <path> exists
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import time
from pathlib import Path

from drkernel.executors.fake import scripted_result
from drkernel.executors.judge_host import in_host_process
from drkernel.types import DeviceInfo, EvalOutcome, EvalRequest, EvalResult

__all__ = ["FakeJudge", "fake_judge"]

_MARK = re.compile(r"#\s*fake:\s*([a-z_]+)(?:=([^\s]+))?")


class FakeJudge:
    """Scripted verdicts with a judge's lifecycle (context manager, close, per-device identity)."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.closed = False
        self.evaluated = 0

    def __enter__(self) -> FakeJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.closed = True

    def evaluate(self, request: EvalRequest) -> EvalResult:
        if self.closed:
            raise RuntimeError("FakeJudge used after close()")
        marks = {m.group(1): m.group(2) for m in _MARK.finditer(request.kernel_code)}
        self._fail_on_purpose(marks)
        if "judge_error" in marks or _first_time(marks.get("judge_error_once")):
            return EvalResult.failure(EvalOutcome.INFRA_ERROR, "judge_error",
                                      "fake judge fault (a CUDA error in the judge process)",
                                      task_id=request.task_id)
        if _first_time(marks.get("freeze_once")):
            if not in_host_process():
                raise RuntimeError("fake judge asked to freeze outside a judge process")
            os.kill(os.getpid(), signal.SIGSTOP)
        started = time.monotonic()
        sleep = float(marks.pop("sleep", None) or 0.0)
        budget = request.options.timeout_s
        if sleep > budget:
            time.sleep(budget)
            result = EvalResult.failure(
                EvalOutcome.TIMEOUT, "timeout", f"evaluation exceeded {budget:g} s"
            )
        else:
            time.sleep(sleep)
            body = "\n".join(f"# fake: {k}={v}" if v else f"# fake: {k}" for k, v in marks.items())
            result = scripted_result(dataclasses.replace(request, kernel_code=body))
        self.evaluated += 1
        kind = "cuda" if self.device.startswith("cuda") else "cpu"
        result.device = DeviceInfo(kind=kind, name=f"fake:{self.device}", interpreter=kind == "cpu")
        result.task_id = request.task_id
        result.wall_s = time.monotonic() - started
        return result

    def _fail_on_purpose(self, marks: dict[str, str | None]) -> None:
        if "infra_error" in marks:
            raise RuntimeError("fake judge infrastructure error")
        die = "die" in marks
        once = marks.get("die_once")
        if once:
            path = Path(once)
            if not path.exists():
                path.write_text("died")
                die = True
        if die:
            if not in_host_process():
                raise RuntimeError("fake judge asked to die outside a judge process")
            os._exit(137)


def _first_time(path: str | None) -> bool:
    """True (and `path` created) when `path` is given and did not exist yet."""
    if not path or Path(path).exists():
        return False
    Path(path).write_text("done")
    return True


def fake_judge(device: str) -> FakeJudge:
    """A JudgeFactory (picklable, for process hosts and Ray actors)."""
    return FakeJudge(device)

"""Surveys that share one GPU: the probe holds the GPU shared (it runs the reference at full size on
the device, outside the judge)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from drkernel.problems.audit import AuditConfig
from drkernel.problems.loaders import load_suite
from drkernel.problems.survey import SurveyConfig, run_survey
from drkernel.types import Problem
from tests.problems.test_survey import _StubJudge, _tree


class _InProcessWorker:
    """A probe worker that probes on the CPU in this process, whatever the device, and says when; or
    answers `failure` (a probe that ran out of memory, say) where the device is a GPU."""

    def __init__(self, failure: dict[str, Any] | None = None) -> None:
        self.failure = failure
        self.started: list[float] = []

    def probe(self, problem: Problem, device: str, cfg: AuditConfig, timeout_s: float) -> dict[str, Any]:
        from drkernel.problems.survey_probe import probe_reference

        self.started.append(time.monotonic())
        if self.failure is not None and device != "cpu":
            return dict(self.failure)
        return probe_reference(problem, "cpu", cfg)

    def close(self) -> None:
        pass



def _problems(tmp_path: Path) -> list[Problem]:
    return [p for p in load_suite(str(_tree(tmp_path / "kb"))) if "Broken" not in p.name]


_HOLD = ("import sys, time\nfrom drkernel.sandbox.devicelock import gpu_work, timing_lock\n"
         "lock = timing_lock if sys.argv[1] == 'timing' else gpu_work\n"
         "with lock('cuda:0'):\n    print('held', flush=True)\n    time.sleep(float(sys.argv[2]))\n")


@pytest.mark.parametrize("held, waits", [("timing", True), ("shared", False)])
def test_the_probe_holds_the_gpu_shared(held: str, waits: bool, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe runs the reference at full size on the GPU, outside the judge: it waits for another
    survey's (or judge's) timing window, and runs beside other shared work (the GPU is GPU 7 to the
    lock's files; the probe itself runs on the CPU here)."""
    from drkernel.problems import survey

    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    worker = _InProcessWorker()
    monkeypatch.setattr(survey, "ProbeWorker", lambda: worker)
    square = [p for p in _problems(tmp_path) if p.name == "L1/1_Square"]
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, held, "1.5"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said = time.monotonic()  # the holder lets go 1.5 s after it said so
        run_survey(square, SurveyConfig(device="cuda:0", nulls=("zeros",), backends=("eager",)),
                   tmp_path / "s.json", make_judge=_StubJudge)
        assert holder.wait(timeout=10) == 0
    finally:
        holder.kill()
    assert (worker.started[0] - said > 1.3) is waits
    assert (tmp_path / "locks" / "gpu-7.timing.lock").exists()

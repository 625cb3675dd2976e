"""Surveys that share one GPU (`--per-gpu N`, bench/survey_device.sh's PER_GPU): the probe holds the GPU
shared, a failure the other surveys may have caused defers the problem instead of recording it, a run
alone (`--deferred-only`) redoes the deferred ones, and the shards' files merge into one table."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from drkernel.cli import main
from drkernel.errors import ConfigError
from drkernel.problems.audit import AuditConfig
from drkernel.problems.loaders import load_suite
from drkernel.problems.survey import SurveyConfig, load_survey, run_survey
from drkernel.types import ErrorInfo, EvalOutcome, EvalRequest, EvalResult, Problem
from tests.problems.test_survey import _StubJudge, _tree

REPO = Path(__file__).resolve().parents[2]
_OOM = ("OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
        "139.80 GiB of which 208.88 MiB is free.")


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


class _FailingJudge(_StubJudge):
    """Answers `result` for the evaluations whose task id holds `where`, INCORRECT for the others."""

    def __init__(self, where: str, result: EvalResult) -> None:
        super().__init__()
        self.where, self.result = where, result

    def evaluate(self, request: EvalRequest) -> EvalResult:
        self.seen.append(request.task_id or "")
        if self.where in (request.task_id or ""):
            return self.result
        return EvalResult(outcome=EvalOutcome.INCORRECT)


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


_SPAN = ("import sys, time\nfrom drkernel.sandbox.devicelock import card_memory\n"
         "with card_memory('cuda:0', 256 << 20, 4 << 30):\n    print('held', flush=True)\n"
         "    time.sleep(float(sys.argv[1]))\n")


def test_the_probe_takes_the_judges_memory_budget_of_the_card(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Three shards on an H100 80GB deferred 37 problems of 46 (run CI): the probe allocates 4-14 GiB at
    once at full size, beside other shards' sealed spans and probes. It takes the whole budget of the
    judges' spans now: it waits for a span of another judge that holds a part of it (a card of 4 GiB to
    the budget here; GPU 7 to the lock files; the probe itself runs on the CPU)."""
    from drkernel.problems import survey

    monkeypatch.setenv("DRKERNEL_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.setattr(survey, "card_memory_bytes", lambda device: 4 << 30)
    worker = _InProcessWorker()
    monkeypatch.setattr(survey, "ProbeWorker", lambda: worker)
    square = [p for p in _problems(tmp_path) if p.name == "L1/1_Square"]
    env = {**os.environ, "DRKERNEL_LOCK_DIR": str(tmp_path / "locks"), "CUDA_VISIBLE_DEVICES": "7"}
    holder = subprocess.Popen([sys.executable, "-c", _SPAN, "1.5"], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        said = time.monotonic()  # the span ends 1.5 s after it said so
        run_survey(square, SurveyConfig(device="cuda:0", nulls=("zeros",), backends=("eager",), per_gpu=2),
                   tmp_path / "s.json", make_judge=_StubJudge)
        assert holder.wait(timeout=10) == 0
    finally:
        holder.kill()
    assert worker.started[0] - said > 1.3
    assert (tmp_path / "locks" / "gpu-7.mem7.lock").exists()  # the budget's last slot: all 8 taken


@pytest.mark.parametrize("result", [
    EvalResult(outcome=EvalOutcome.RUNTIME_ERROR, error=ErrorInfo("harness_error", _OOM)),
    EvalResult(outcome=EvalOutcome.INFRA_ERROR, error=ErrorInfo("reference_error", _OOM)),
    EvalResult(outcome=EvalOutcome.RUNTIME_ERROR, error=ErrorInfo("resource_exhaustion", "the judge's side")),
    EvalResult(outcome=EvalOutcome.TIMEOUT),
], ids=["candidate-oom", "reference-oom", "resource", "timeout"])
def test_a_failure_others_may_have_caused_defers_the_problem_to_a_run_alone(
        result: EvalResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """L1/5 on the H200 (run BH): every null of an 8 GiB problem was `runtime_error`, out of device
    memory that the judge's own processes held; beside other surveys, more problems would end so. A
    shared survey records no such row: it defers the problem (no attempt spent) and goes on with the
    next; a later shared run leaves it alone too; a run alone redoes it and records what happens."""
    from drkernel.problems import survey

    monkeypatch.setattr(survey, "ProbeWorker", _InProcessWorker)
    problems, out = _problems(tmp_path), tmp_path / "s.json"
    shared = SurveyConfig(per_gpu=2, backends=("eager",))
    judge = _FailingJudge("L1/1_Square:constant", result)
    report = run_survey(problems, shared, out, make_judge=lambda: judge)
    assert report.done == ["L1/3_Flat", "L2/1_Gemm_ReLU"] and report.deferred == ["L1/1_Square"]
    # nothing after the failed step ran: identity, zeros, then constant, for the first problem
    assert [t for t in judge.seen if "Square" in t] == [f"survey:L1/1_Square:{n}"
                                                         for n in ("identity", "zeros", "constant")]
    row = load_survey(out)["rows"][0]
    assert row["status"] == "deferred" and row["reason"] == "shared_gpu" and not row["complete"]
    assert row["attempts"] == 0 and row["nulls"] == {} and row["reference"] is None
    assert row["deferred"].startswith(f"null:constant: {result.outcome.value}")
    report = run_survey(problems, shared, out, resume=True, make_judge=lambda: judge)
    assert report.done == [] and report.deferred == ["L1/1_Square"] and report.skipped == 2
    with pytest.raises(ConfigError, match="--deferred-only redoes deferred problems with the GPU alone"):
        run_survey(problems, shared, out, resume=True, make_judge=lambda: judge, deferred_only=True)
    alone = SurveyConfig(backends=("eager",))
    report = run_survey(problems, alone, out, resume=True, make_judge=lambda: judge, deferred_only=True)
    assert report.done == ["L1/1_Square"] and report.deferred == [] and report.skipped == 2
    row = load_survey(out)["rows"][0]  # alone, the same failure is the row's, as it always was
    assert row["status"] == "ok" and row["complete"] and row["attempts"] == 1
    assert row["nulls"]["constant"]["outcome"] == result.outcome.value
    assert "constant_did_not_run" in row["findings"]


def test_alone_or_for_an_intrinsic_failure_nothing_is_deferred(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure of the candidate's own (a compile error) is recorded beside other surveys too, and any
    failure is recorded by a survey that has the GPU alone (--per-gpu 1, the default)."""
    from drkernel.problems import survey

    monkeypatch.setattr(survey, "ProbeWorker", _InProcessWorker)
    square = [p for p in _problems(tmp_path) if p.name == "L1/1_Square"]
    own = EvalResult(outcome=EvalOutcome.COMPILE_ERROR, error=ErrorInfo("triton_compile_error", "bad"))
    oom = EvalResult(outcome=EvalOutcome.RUNTIME_ERROR, error=ErrorInfo("harness_error", _OOM))
    for cfg, result, name in ((SurveyConfig(per_gpu=3, backends=("eager",)), own, "a.json"),
                              (SurveyConfig(backends=("eager",)), oom, "b.json")):
        judge = _FailingJudge("zeros", result)
        report = run_survey(square, cfg, tmp_path / name, make_judge=lambda: judge)
        assert report.done == ["L1/1_Square"] and report.deferred == []
        row = load_survey(tmp_path / name)["rows"][0]
        assert row["status"] == "ok" and row["nulls"]["zeros"]["outcome"] == result.outcome.value


def test_a_probe_out_of_memory_beside_others_is_deferred_not_run_on_the_cpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Alone, a probe out of GPU memory runs again on the CPU; shared, the memory may have been the
    others': the run alone probes on the GPU again. A probe the budget cut short stays `incomplete`."""
    from drkernel.problems import survey

    worker = _InProcessWorker({"ok": False, "reason": "oom", "error": _OOM})
    monkeypatch.setattr(survey, "ProbeWorker", lambda: worker)
    square = [p for p in _problems(tmp_path) if p.name == "L1/1_Square"]
    judge = _StubJudge()
    run_survey(square, SurveyConfig(device="cuda:0", per_gpu=2, backends=("eager",)), tmp_path / "s.json",
               make_judge=lambda: judge)
    row = load_survey(tmp_path / "s.json")["rows"][0]
    assert row["status"] == "deferred" and row["deferred"].startswith("probe: oom (OutOfMemoryError")
    assert len(worker.started) == 1 and judge.seen == []
    worker.failure = {"ok": False, "reason": "timeout", "error": "the reference did not finish within 50 s"}
    run_survey(square, SurveyConfig(device="cuda:0", per_gpu=2, backends=("eager",), budget_s=50,
                                    probe_timeout_s=300), tmp_path / "t.json", make_judge=lambda: judge)
    row = load_survey(tmp_path / "t.json")["rows"][0]
    assert row["status"] == "incomplete" and row["skipped_steps"] == ["probe (budget)"]


def test_the_table_counts_a_deferred_row_as_incomplete_and_a_complete_shard_row_wins(tmp_path: Path) -> None:
    from drkernel.problems.survey_table import render_table

    def row(name: str, **fields: Any) -> dict[str, Any]:
        return {"name": name, "level": 1, "status": "ok", "complete": True, "findings": [], "nulls": {},
                "timing": {}, "reference": {}, "floor": None, **fields}

    deferred = row("L1/5_big", status="deferred", complete=False, reason="shared_gpu", deferred="null:zeros")
    shard = {"rows": [deferred, row("L1/1_a")], "suite": "kb", "size": "full"}
    table = render_table([shard], markdown=True)
    assert "| L1 | 2 | 1 | 0 | 0 | 1 |" in table and "| L1/5_big | deferred (shared GPU) |" in table, table
    alone = {"rows": [row("L1/5_big")], "suite": "kb", "size": "full"}  # the run alone, in another file
    table = render_table([shard, alone], markdown=True)
    assert "| L1 | 2 | 2 | 0 | 0 | 0 |" in table and "| L1/5_big | ok |" in table, table


@pytest.mark.parametrize("argv, message", [
    (["--per-gpu", "0"], "survey.per_gpu: 0 not in 1..8"),
    (["--per-gpu", "9"], "survey.per_gpu: 9 not in 1..8"),
    (["--deferred-only"], "--deferred-only continues a survey: pass --resume too"),
    (["--deferred-only", "--resume", "--per-gpu", "2"], "not with --per-gpu 2"),
])
def test_bad_sharing_arguments_are_one_line_usage_errors(argv: list[str], message: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    kb = _tree(tmp_path / "kb")
    code = main(["suite", "survey", f"kernelbench:{kb}", "--out", str(tmp_path / "s.json"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s.json").exists()


@pytest.mark.slow  # two surveys through the real CPU judge at once, then one alone: minutes on 2 cores
def test_the_device_script_runs_shards_on_one_device_then_the_deferred_alone(tmp_path: Path) -> None:
    """bench/survey_device.sh with PER_GPU=2 on the CPU: two shards at once (`--shard I/2 --per-gpu 2`),
    each into its own file; then the problems they deferred, alone (`--deferred-only`), then one table
    merged from both files. Shard 1's file holds a deferred row before the call (as a shared run that
    ran out of memory leaves it): the shared shard leaves it, the run alone does it. Shard 2's file
    starts as a copy of the survey's file from before it was sharded, which holds shard 2's problem."""
    work = tmp_path / "repo"
    (work / "bench").mkdir(parents=True)
    shutil.copy(REPO / "bench" / "survey_device.sh", work / "bench")
    kb = tmp_path / "kb"
    (kb / "level1").mkdir(parents=True)
    tree = _tree(tmp_path / "tree", gemm=False)
    for name in ("1_Square.py", "3_Flat.py"):
        shutil.copy(tree / "level1" / name, kb / "level1" / name)
    (kb / "level1" / "4_Cube.py").write_text((tree / "level1" / "1_Square.py").read_text().replace(
        "return x * x", "return x * x * x"))
    # shard 1 of 2 holds L1/1 and L1/4; a shared survey deferred L1/1 earlier, with these options
    stem = work / ".survey" / "kernelbench_cpu"  # named after the card: DEVICE=cpu
    stem.parent.mkdir()
    first = [p for p in load_suite(str(kb)) if p.name.startswith("L1/1_")]
    judge = _FailingJudge("zeros", EvalResult(outcome=EvalOutcome.TIMEOUT))
    run_survey(first, SurveyConfig(per_gpu=2, nulls=("zeros",), backends=("eager",)),
               f"{stem}.shard1of2.json", make_judge=lambda: judge)
    assert load_survey(f"{stem}.shard1of2.json")["rows"][0]["status"] == "deferred"
    # and L1/3 (shard 2's) is complete in the file of a survey run before without shards
    flat = [p for p in load_suite(str(kb)) if p.name.startswith("L1/3_")]
    run_survey(flat, SurveyConfig(nulls=("zeros",), backends=("eager",)), f"{stem}.json",
               make_judge=_StubJudge)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OUT": str(tmp_path / "out"), "KB": str(kb), "LEVELS": "1",
           "DEVICE": "cpu", "PER_GPU": "2", "BUDGET": "400", "EXTRA": "--nulls zeros --no-compile"}
    done = subprocess.run(["bash", "bench/survey_device.sh"], cwd=work, env=env, capture_output=True,
                          text=True, timeout=590)
    out = tmp_path / "out"
    logs = {p.name: p.read_text() for p in out.glob("survey*.log")}
    assert done.returncode == 0, (done.stdout, done.stderr, logs)
    assert sorted(logs) == ["survey.shard1.log", "survey.shard1.solo.log", "survey.shard2.log"], logs
    lines = {name: log.splitlines()[0] for name, log in logs.items()}  # each log opens with its command
    assert "--shard 1/2 --per-gpu 2 --eval-timeout-s 240 --nulls zeros" in lines["survey.shard1.log"]
    assert "--shard 2/2 --per-gpu 2" in lines["survey.shard2.log"]
    assert "--shard 1/2 --deferred-only --eval-timeout-s 120" in lines["survey.shard1.solo.log"]
    assert all("--device cpu" in line and "kernelbench_cpu.shard" in line for line in lines.values())
    assert "0 left, 1 deferred" in logs["survey.shard1.log"]
    assert "[2/2] L1/4_Cube" in logs["survey.shard1.log"] and "L1/1_Square" not in logs["survey.shard1.log"]
    assert "0 done now, 1 already in" in logs["survey.shard2.log"]  # its copy of the unsharded file
    assert "L1/1_Square" in logs["survey.shard1.solo.log"] and "Cube" not in logs["survey.shard1.solo.log"]
    rows = {r["name"]: r for f in ("shard1of2", "shard2of2")
            for r in json.loads((out / f"kernelbench_cpu.{f}.json").read_text())["rows"]}
    assert sorted(rows) == ["L1/1_Square", "L1/3_Flat", "L1/4_Cube"]
    assert all(r["complete"] and r["status"] == "ok" for r in rows.values()), rows
    assert rows["L1/1_Square"]["attempts"] == 1  # the deferral spent no attempt
    table = (out / "survey_table.md").read_text()
    # L1/3's row is the stub judge's of the unsharded file: it timed nothing ("judge failed")
    assert "| L1 | 3 | 3 | 0 | error 1 | 0 |" in table and "| L1/3_Flat | ok, judge: error |" in table, table

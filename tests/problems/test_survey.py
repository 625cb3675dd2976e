"""`drkernel suite survey` and `suite table` on a tiny fake KernelBench tree, through the real CPU judge:
rows with their facts, the null candidates refused where the reference varies and flagged where it
does not, resume, a budget stop that leaves a valid file, and one-line usage errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from drkernel.cli import main
from drkernel.errors import ConfigError
from drkernel.problems.audit import AuditConfig
from drkernel.problems.nulls import wrapper_candidate
from drkernel.problems.survey import SurveyConfig, load_survey, run_survey, speed_of_light_floor
from drkernel.problems.survey_probe import ProbeWorker, failure_reason
from drkernel.sandbox.refcache import ReferenceTimingCache
from drkernel.types import DeviceInfo, EvalOutcome, EvalRequest, EvalResult, Problem

_REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self{init_args}):
        super(Model, self).__init__(){init_body}

    def forward(self, x):
        return {expr}


rows = {rows}
cols = {cols}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [{init_inputs}]
"""


def _reference(expr: str, rows: int = 16, cols: int = 64, init_args: str = "", init_body: str = "",
               init_inputs: str = "") -> str:
    return _REFERENCE.format(expr=expr, rows=rows, cols=cols, init_args=init_args, init_body=init_body,
                             init_inputs=init_inputs)


def _tree(root: Path, gemm: bool = True) -> Path:
    """level1: a square (varies), a broken forward, a sigmoid of 0 (never varies); level2: a GEMM (or
    none: each reference the real judge times waits for the host's other candidates to finish)."""
    (root / "level1").mkdir(parents=True)
    (root / "level2").mkdir()
    (root / "level1" / "1_Square.py").write_text(_reference("x * x"))
    (root / "level1" / "2_Broken.py").write_text(_reference("x.no_such_method()"))
    (root / "level1" / "3_Flat.py").write_text(_reference("torch.sigmoid(x * 0.0)"))
    if not gemm:
        return root
    (root / "level2" / "1_Gemm_ReLU.py").write_text(_reference(
        "torch.relu(self.fc(x))", rows=8, cols=32, init_args=", d_in, d_out",
        init_body="\n        self.fc = nn.Linear(d_in, d_out)", init_inputs="32, 16"))
    return root


@pytest.fixture(scope="module")
def surveyed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]], str]:
    """One survey of the whole tree on the CPU judge (no torch.compile: inductor takes minutes here)."""
    tmp = tmp_path_factory.mktemp("survey")
    kb = _tree(tmp / "kb", gemm=False)
    out = tmp / "survey.json"
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["suite", "survey", f"kernelbench:{kb}", "--levels", "1-2", "--out", str(out),
                     "--no-compile", "--peak-gbs", "10", "--peak-tflops", "0.1", "--budget-s", "540"])
    assert code == 0
    rows = {r["name"]: r for r in load_survey(out)["rows"]}
    return out, rows, printed.getvalue()


def _refused(row: dict[str, Any], name: str) -> bool:
    record = row["nulls"][name]
    return record["outcome"] in ("incorrect", "hack_detected") and not record["correct"]


Surveyed = tuple[Path, dict[str, dict[str, Any]], str]


@pytest.mark.slow  # the real judge on the CPU: a minute or two on a shared host
def test_rows_hold_the_reference_facts_timing_and_floor(surveyed: Surveyed) -> None:
    out, rows, printed = surveyed
    assert list(rows) == ["L1/1_Square", "L1/2_Broken", "L1/3_Flat"]
    assert "[3/3] L1/3_Flat" in printed and "3 done now, 0 already" in printed
    square = rows["L1/1_Square"]
    ref = square["reference"]
    assert square["status"] == "ok" and square["complete"] and ref["ok"] and ref["deterministic"]
    assert ref["outputs"] == [{"shape": [16, 64], "dtype": "float32"}] and ref["variation"] > 0.5
    assert [ref[k] for k in ("input_bytes", "output_bytes", "param_bytes", "flops")] == [4096, 4096, 0, None]
    eager = square["timing"]["eager_ms"]  # the judge's own timing, read from its cache
    assert eager > 0 and square["timing"]["eager"]["n"] >= 1 and "compile_ms" not in square["timing"]
    floor = square["floor"]
    assert floor["min_bytes"] == 8192 and floor["bound"] == "memory"
    assert floor["floor_ms"] == pytest.approx(8192 / 10e6)
    assert floor["headroom_eager"] == pytest.approx(eager / floor["floor_ms"])
    data = json.loads(out.read_text())
    assert data["device"]["kind"] == "cpu" and data["size"] == "full"
    assert data["config"]["backends"] == ["eager"]


@pytest.mark.slow
def test_broken_reference_is_a_row_with_its_reason(surveyed: Surveyed) -> None:
    broken = surveyed[1]["L1/2_Broken"]
    assert broken["status"] == "error" and broken["reason"] == "error" and not broken["reference"]["ok"]
    assert "AttributeError" in broken["error"] and broken["findings"] == ["reference_error"]
    assert broken["nulls"] == {} and broken["floor"] is None


@pytest.mark.slow
def test_nulls_refused_where_the_reference_varies_and_flagged_where_not(
        surveyed: Surveyed) -> None:
    rows = surveyed[1]
    square, flat = rows["L1/1_Square"], rows["L1/3_Flat"]
    assert all(_refused(square, n) for n in ("identity", "zeros", "constant", "replay", "half_input"))
    assert square["findings"] == []
    # sigmoid(0 * x) is 0.5 whatever the input: a constant, a replay and half the input are right answers
    assert flat["reference"]["variation"] == 0.0 and _refused(flat, "zeros") and _refused(flat, "identity")
    assert {n for n, rec in flat["nulls"].items() if rec["correct"]} == {"constant", "replay", "half_input"}
    assert {"constant_passes_weak_reference", "replay_passes_weak_reference",
            "half_input_passes_weak_reference", "weak_reference"} <= set(flat["findings"])
    assert any(w.startswith("weak_reference") for w in flat["judge_warnings"])


@pytest.mark.slow
def test_table_and_resume(surveyed: Surveyed, tmp_path: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    out, rows, _ = surveyed
    before = out.read_text()
    assert main(["suite", "survey", f"kernelbench:{out.parent / 'kb'}", "--out", str(out), "--resume",
                 "--no-compile"]) == 0
    assert "0 done now, 3 already" in capsys.readouterr().out and out.read_text() == before
    md = tmp_path / "table.md"
    assert main(["suite", "table", str(out), "--markdown", "--out", str(md)]) == 0
    text = md.read_text()
    assert "| L1 | 3 | 2 | error 1 | 0 |" in text and "| L2 |" not in text
    flat_line = next(line for line in text.splitlines() if line.startswith("| L1/3_Flat |"))
    assert "constant, replay, half_input" in flat_line and "weak_reference" in flat_line
    assert main(["suite", "table", str(out)]) == 0
    assert "L1/1_Square" in capsys.readouterr().out


class _StubJudge:
    """Refuses every candidate at once; the survey's plumbing without the sandbox's cost."""

    cuda = False

    def __init__(self) -> None:
        self.cache = ReferenceTimingCache(None)
        self.seen: list[str] = []

    def evaluate(self, request: EvalRequest) -> EvalResult:
        self.seen.append(request.task_id or "")
        return EvalResult(outcome=EvalOutcome.INCORRECT)

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(kind="cpu", name="cpu", interpreter=True)


def test_budget_stop_leaves_a_valid_file_and_resume_finishes(tmp_path: Path) -> None:
    kb = _tree(tmp_path / "kb")
    from drkernel.problems.loaders import load_suite

    problems = [p for p in load_suite(str(kb)) if "Broken" not in p.name]
    out = tmp_path / "s.json"
    # the first problem starts (less than 0.5 s of the budget gone); its probe process alone uses
    # more than 0.5 s, so none of its judge steps starts, and no second problem does
    cfg = SurveyConfig(budget_s=30, min_step_s=29.5, backends=("eager",))
    judge = _StubJudge()
    report = run_survey(problems, cfg, out, make_judge=lambda: judge)
    assert report.done == ["L1/1_Square"] and report.left == ["L1/3_Flat", "L2/1_Gemm_ReLU"]
    row = load_survey(out)["rows"][0]
    assert row["status"] == "incomplete" and not row["complete"] and row["attempts"] == 1
    assert row["skipped_steps"][:2] == ["null:identity", "null:zeros"] and judge.seen == []
    with pytest.raises(ConfigError, match="pass --resume"):
        run_survey(problems, cfg, out, make_judge=lambda: judge)
    report = run_survey(problems, SurveyConfig(backends=("eager",)), out, resume=True,
                        make_judge=lambda: judge)
    assert report.done == ["L1/1_Square", "L1/3_Flat", "L2/1_Gemm_ReLU"] and report.skipped == 0
    rows = load_survey(out)["rows"]
    assert [r["complete"] for r in rows] == [True] * 3 and rows[0]["attempts"] == 2
    assert len(judge.seen) == 5 + 5 + 4  # every null that applies; the first timed the reference
    # a judge that timed nothing (this stub) is named in the row, not silently left out
    assert rows[0]["timing"]["eager_ms"] is None and rows[0]["timing"]["eager_error"] == "incorrect"
    assert "judge_reference_eager" in rows[0]["findings"]
    gemm = rows[2]
    assert gemm["reference"]["param_bytes"] == (32 * 16 + 16) * 4
    assert gemm["reference"]["flops"] == 2 * 8 * 32 * 16  # counted by torch's FlopCounterMode
    assert gemm["nulls"]["identity"]["outcome"] == "n/a"  # no input has the output's shape


def test_probe_worker_survives_a_hang_and_a_crash(tmp_path: Path) -> None:
    hang = Problem("hang", _reference("x if __import__('time').sleep(60) is None else x"))
    crash = Problem("crash", _reference("x if __import__('os')._exit(3) else x"))
    good = Problem("good", _reference("x + 1"))
    worker = ProbeWorker()
    try:
        assert worker.probe(hang, "cpu", AuditConfig(), timeout_s=3)["reason"] == "timeout"
        crashed = worker.probe(crash, "cpu", AuditConfig(), timeout_s=60)
        assert crashed["reason"] == "crash" and "exit code 3" in crashed["error"]
        assert worker.probe(good, "cpu", AuditConfig(), timeout_s=60)["ok"]
    finally:
        worker.close()


@pytest.mark.parametrize("expr", ["torch.log(x)", "x / (x * 0.0)", "torch.where(x > 0, x / 0.0, x)"])
def test_a_reference_that_repeats_its_nans_and_infinities_is_deterministic(expr: str) -> None:
    """NaN - NaN and inf - inf are NaN: a reference whose output holds one (a log of randn) was found
    `nondeterministic` though its second call repeated the first bit for bit."""
    from drkernel.problems.survey_probe import probe_reference

    facts = probe_reference(Problem("p", _reference(expr)), "cpu", AuditConfig())
    assert facts["ok"] and facts["deterministic"] and facts["repeat_max_abs_diff"] == 0.0, facts


def test_failure_reasons_floor_and_wrapper() -> None:
    import torch

    assert failure_reason(torch.OutOfMemoryError("CUDA out of memory")) == "oom"
    assert failure_reason(ModuleNotFoundError("No module named 'einops'", name="einops")) == "missing_module"
    assert failure_reason(RuntimeError('"addmm" not implemented for \'Half\'')) == "unsupported_dtype"
    assert failure_reason(NotImplementedError("aten::foo")) == "unsupported_op"
    facts = {"input_bytes": 1000, "output_bytes": 1000, "param_bytes": 0, "flops": None,
             "outputs": [{"dtype": "float32"}]}
    floor = speed_of_light_floor(facts, {"bandwidth_gbs": None})
    assert floor["floor_ms"] is None and floor["bound"] is None and floor["min_bytes"] == 2000
    code = wrapper_candidate(_reference("x * x"), "replay")
    assert "class Model(" not in code and "super(_SurveyReference, self)" in code
    assert "class ModelNew(" in code and code.count("@triton.jit") == 1
    compile(code, "<wrapper>", "exec")
    with pytest.raises(ValueError, match="wrapper mode"):
        wrapper_candidate(_reference("x"), "zeros")


@pytest.mark.parametrize("argv, message", [
    (["--shard", "3/2"], "--shard"),
    (["--levels", "5"], "--levels"),
    (["--size", "huge"], "--size"),
    (["--nulls", "zeros,bogus"], "unknown bogus"),
    (["--nulls", ","], "no candidate named"),
    (["--nulls", " "], "none to send no null candidate"),
    (["--budget-s", "0"], "budget"),
    (["--null-trials", "1"], "null_trials"),
    (["--device", "tpu"], "--device"),
    (["--only", "nothing-matches"], "no problem left"),
    (["--max-input-numel", "4096"], "--max-input-numel is --size reduced's"),
    (["--size", "full", "--max-input-numel", "4096"], "--max-input-numel is --size reduced's"),
    (["--size", "reduced", "--max-input-numel", "0"], "--max-input-numel"),
    (["--budget-s", "nan"], "survey.budget_s: nan is not a finite number > 0"),
    (["--probe-timeout-s", "inf"], "survey.probe_timeout_s: inf is not"),
    (["--peak-gbs", "-1"], "survey.peak_gbs: -1.0 is not"),
    (["--peak-tflops", "nan"], "survey.peak_tflops: nan is not"),
])
def test_bad_survey_arguments_are_one_line_usage_errors(argv: list[str], message: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    kb = _tree(tmp_path / "kb")
    try:
        code = main(["suite", "survey", f"kernelbench:{kb}", "--out", str(tmp_path / "s.json"), *argv])
    except SystemExit as exc:  # argparse's own: the same one line and exit 2
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "s.json").exists()


def test_bad_paths_and_files_are_one_line_usage_errors(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "one.py").write_text(_reference("x"))
    (tmp_path / "not_survey.json").write_text('{"rows": 1}')
    out = ["--out", str(tmp_path / "a.json")]
    cases = [
        (["suite", "survey", f"kernelbench:{tmp_path / 'missing'}", *out], "no such"),
        (["suite", "survey", f"kernelbench:{tmp_path / 'plain'}", *out], "KernelBench checkout"),
        (["suite", "survey", f"kernelbench:{_tree(tmp_path / 'kb')}", "--out",
          str(tmp_path / "no" / "a.json")], "no such folder"),
        (["suite", "table", str(tmp_path / "not_survey.json")], "not a survey file"),
        (["suite", "table", str(tmp_path / "absent.json")], "cannot read"),
        (["suite", "table", str(tmp_path / "latin1.json")], "latin1.json: not JSON"),
    ]
    (tmp_path / "latin1.json").write_bytes(b'{"caf\xe9": 1}')
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


class _TimeoutJudge(_StubJudge):
    def evaluate(self, request: EvalRequest) -> EvalResult:
        self.seen.append(request.task_id or "")
        return EvalResult(outcome=EvalOutcome.TIMEOUT)


def test_a_timeout_the_budget_made_short_is_not_a_verdict(tmp_path: Path) -> None:
    """With 100 s left, an evaluation runs under 100 s, not the survey's 240: its timeout says nothing
    of the problem, so the step is left for the next call and the row stays incomplete."""
    from drkernel.problems.loaders import load_suite

    square = [p for p in load_suite(str(_tree(tmp_path / "kb"))) if p.name == "L1/1_Square"]
    judge = _TimeoutJudge()
    run_survey(square, SurveyConfig(budget_s=100, eval_timeout_s=240, nulls=("zeros",), backends=("eager",)),
               tmp_path / "s.json", make_judge=lambda: judge)
    row = load_survey(tmp_path / "s.json")["rows"][0]
    assert row["skipped_steps"] == ["null:zeros (budget)", "timing:eager (budget)"]
    assert row["status"] == "incomplete" and row["nulls"] == {} and len(judge.seen) == 2


def test_reduced_size_shrinks_the_reference_and_says_by_how_much(tmp_path: Path) -> None:
    from drkernel.problems.loaders import load_suite

    square = [p for p in load_suite(str(_tree(tmp_path / "kb"))) if p.name == "L1/1_Square"]
    judge = _StubJudge()
    cfg = SurveyConfig(size="reduced", max_input_numel=256, nulls=("zeros",), backends=("eager",))
    run_survey(square, cfg, tmp_path / "s.json", make_judge=lambda: judge)
    data = load_survey(tmp_path / "s.json")
    row = data["rows"][0]
    # cols 64 -> 32 -> 16 (constants under 32 stay): a quarter of the elements
    assert row["size"] == "reduced" and row["size_ratio"] == pytest.approx(0.25)
    assert row["reference"]["outputs"] == [{"shape": [16, 16], "dtype": "float32"}]
    assert data["config"]["max_input_numel"] == 256
    with pytest.raises(ConfigError, match="at size 'reduced', not 'full'"):
        run_survey(square, SurveyConfig(), tmp_path / "s.json", resume=True, make_judge=lambda: judge)


class _GpuTooSmallWorker:
    """A probe worker on a GPU that runs out of memory; on the CPU it probes in this process."""

    def __init__(self) -> None:
        self.devices: list[str] = []

    def probe(self, problem: Problem, device: str, cfg: AuditConfig, timeout_s: float) -> dict[str, Any]:
        from drkernel.problems.survey_probe import probe_reference

        self.devices.append(device)
        if device != "cpu":
            return {"ok": False, "reason": "oom", "error": "OutOfMemoryError: CUDA out of memory"}
        return probe_reference(problem, device, cfg)

    def close(self) -> None:
        pass


def test_a_probe_out_of_gpu_memory_runs_again_on_the_cpu(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from drkernel.problems import survey
    from drkernel.problems.loaders import load_suite

    worker = _GpuTooSmallWorker()
    monkeypatch.setattr(survey, "ProbeWorker", lambda: worker)
    square = [p for p in load_suite(str(_tree(tmp_path / "kb"))) if p.name == "L1/1_Square"]
    run_survey(square, SurveyConfig(device="cuda:0", nulls=("zeros",), backends=("eager",)),
               tmp_path / "s.json", make_judge=_StubJudge)
    row = load_survey(tmp_path / "s.json")["rows"][0]
    assert worker.devices == ["cuda:0", "cpu"] and row["status"] == "ok"
    assert row["reference"]["probe_device"] == "cpu" and row["reference"]["ok"]
    assert "out of memory" in row["reference"]["gpu_probe_error"]


class _RecordingJudge(_StubJudge):
    def __init__(self) -> None:
        super().__init__()
        self.requests: list[EvalRequest] = []

    def evaluate(self, request: EvalRequest) -> EvalResult:
        self.requests.append(request)
        return super().evaluate(request)


def test_the_compile_timing_is_one_more_evaluation_with_the_compile_backend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """(torch.compile takes minutes on this CPU: what the survey asks of the judge is checked here.)"""
    from drkernel.problems import survey
    from drkernel.problems.loaders import load_suite

    monkeypatch.setattr(survey, "ProbeWorker", _GpuTooSmallWorker)  # probes in this process on the CPU
    square = [p for p in load_suite(str(_tree(tmp_path / "kb"))) if p.name == "L1/1_Square"]
    judge = _RecordingJudge()
    run_survey(square, SurveyConfig(nulls=("zeros", "replay"), null_trials=3), tmp_path / "s.json",
               make_judge=lambda: judge)
    backends = [(r.task_id, r.options.reference_backend, r.options.num_correct_trials)
                for r in judge.requests]
    assert backends == [("survey:L1/1_Square:zeros", "eager", 3), ("survey:L1/1_Square:replay", "eager", 3),
                        ("survey:L1/1_Square:timing:compile", "compile", 3)]
    assert all(not r.options.profile for r in judge.requests)
    row = load_survey(tmp_path / "s.json")["rows"][0]
    assert row["timing"]["compile_error"] == "incorrect" and "judge_reference_compile" in row["findings"]


def test_the_table_counts_problems_whose_reference_ran_but_the_judge_could_not() -> None:
    """KernelBench L1/4-5 at full size on the H200 (run BH): the references ran, the judge ran out of
    its own device memory; the table said "errors 0". A row whose nulls ended in no verdict or whose
    reference the judge could not time is counted under "judge failed", by reason."""
    from drkernel.problems.survey_table import judge_failure, render_table, summarize_levels

    def row(name: str, findings: list[str], detail: str = "", timing: dict[str, str] | None = None) -> dict:
        return {"name": name, "level": 1, "status": "ok", "complete": True, "findings": findings,
                "nulls": {"zeros": {"outcome": "infra_error", "correct": False, "detail": detail}},
                "timing": timing or {}, "reference": {}, "floor": None}

    oom = row("L1/4_mv", ["zeros_did_not_run", "judge_reference_eager"],
              "reference_error: OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB.")
    slow = row("L1/6_slow", ["judge_reference_compile"],
               timing={"compile_error": "infra_error (timeout: the reference timed out after 120 s)"})
    odd = row("L1/7_odd", ["zeros_did_not_run"], "judge_error: something else")
    fine = row("L1/8_fine", ["weak_reference"], "16 of 16 elements outside atol")
    assert [judge_failure(r) for r in (oom, slow, odd, fine)] == ["oom", "timeout", "error", None]
    (level,) = summarize_levels([oom, slow, odd, fine])
    assert level["judge_failed"] == {"oom": 1, "timeout": 1, "error": 1} and level["ran"] == 4
    table = render_table([{"rows": [oom, slow, odd, fine], "suite": "kb", "size": "full"}], markdown=True)
    assert "| L1 | 4 | 4 | 0 | error 1, oom 1, timeout 1 | 0 |" in table, table
    assert "| L1/4_mv | ok, judge: oom |" in table and "| L1/8_fine | ok |" in table, table


def test_nulls_none_is_said_in_words_and_names_are_trimmed() -> None:
    from drkernel.problems.cli_suite import _parse_nulls

    assert _parse_nulls("none") == () and _parse_nulls(" None ") == ()
    assert _parse_nulls(" zeros, identity ,") == ("zeros", "identity")


def test_table_out_on_one_of_its_surveys_is_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`suite table s.json --out s.json` wrote the table over the survey it read (hours of device time
    gone, exit 0); it is a one-line usage error and the survey is left as it was."""
    survey = tmp_path / "s.json"
    text = json.dumps({"format": "drkernel-survey-v1", "rows": [{"name": "a", "level": 1, "status": "ok"}]})
    survey.write_text(text)
    (tmp_path / "sub").mkdir()
    for out in (survey, tmp_path / "sub" / ".." / "s.json"):
        assert main(["suite", "table", str(survey), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "is one of the surveys it reads" in err and len(err.strip().splitlines()) == 1, err
        assert survey.read_text() == text


@pytest.mark.parametrize("rows", ['[1]', '[{}]', '[{"name": "a"}]', '[{"name": 3, "status": "ok"}]'])
def test_a_survey_whose_rows_are_not_rows_is_one_line(rows: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A survey file cut or edited by hand, with a row that is no object or lacks its name or status,
    was a traceback (TypeError, KeyError) from `suite table` and `survey --resume`."""
    survey = tmp_path / "s.json"
    survey.write_text('{"format": "drkernel-survey-v1", "rows": %s}' % rows)
    assert main(["suite", "table", str(survey)]) == 2
    err = capsys.readouterr().err
    assert "s.json: row 1 is not a survey row" in err and len(err.strip().splitlines()) == 1, err


def test_a_resume_with_other_options_is_refused_naming_them(tmp_path: Path) -> None:
    """The file records the nulls, their trials and the timings it holds: rows surveyed under other
    options would sit under a record that says otherwise (and complete rows are not redone)."""
    from drkernel.problems.loaders import load_suite

    square = [p for p in load_suite(str(_tree(tmp_path / "kb"))) if p.name == "L1/1_Square"]
    cfg = SurveyConfig(nulls=("zeros",), null_trials=3, backends=("eager",))
    run_survey(square, cfg, tmp_path / "s.json", make_judge=_StubJudge)
    before = (tmp_path / "s.json").read_text()
    other = SurveyConfig(nulls=("zeros", "replay"), null_trials=5, backends=("eager",))
    with pytest.raises(ConfigError, match=r"s.json was surveyed with nulls \['zeros'\], null_trials 3: "
                                          r"not with nulls \['zeros', 'replay'\], null_trials 5"):
        run_survey(square, other, tmp_path / "s.json", resume=True, make_judge=_StubJudge)
    with pytest.raises(ConfigError, match=r"backends \['eager'\]: not with backends \['eager', 'compile'\]"):
        run_survey(square, SurveyConfig(nulls=("zeros",), null_trials=3), tmp_path / "s.json", resume=True,
                   make_judge=_StubJudge)
    assert (tmp_path / "s.json").read_text() == before
    assert run_survey(square, cfg, tmp_path / "s.json", resume=True, make_judge=_StubJudge).skipped == 1


def test_a_survey_of_one_card_resumed_on_another_is_refused(tmp_path: Path) -> None:
    """A file of record from an H200 resumed on an H100 took the H100's name and peaks in its header,
    over rows measured against the H200's: the resume is refused before any work, the file unchanged."""
    from drkernel.problems.loaders import load_suite

    problems = [p for p in load_suite(str(_tree(tmp_path / "kb"))) if "Broken" not in p.name]
    cfg = SurveyConfig(nulls=("zeros",), backends=("eager",))
    run_survey(problems[:1], cfg, tmp_path / "s.json", make_judge=_StubJudge)
    before = (tmp_path / "s.json").read_text()

    class OtherCard(_StubJudge):
        def device_info(self) -> DeviceInfo:
            return DeviceInfo(kind="cpu", name="another cpu", interpreter=True)

    other = OtherCard()
    with pytest.raises(ConfigError, match=r"s.json holds a survey on cpu, not on another cpu"):
        run_survey(problems, cfg, tmp_path / "s.json", resume=True, make_judge=lambda: other)
    assert (tmp_path / "s.json").read_text() == before and other.seen == []
    assert run_survey(problems, cfg, tmp_path / "s.json", resume=True, make_judge=_StubJudge).skipped == 1


def test_a_resume_whose_problems_are_other_code_under_the_same_names_is_refused(tmp_path: Path) -> None:
    """`survey builtin:gpu --resume` on a builtin:cpu survey (the same names, other sizes) skipped every
    row as done, the CPU size's facts and times standing for the GPU size's: refused, the file unchanged."""
    cfg = SurveyConfig(nulls=("zeros",), backends=("eager",))
    run_survey([Problem("p", _reference("x * x"))], cfg, tmp_path / "s.json", make_judge=_StubJudge)
    before = (tmp_path / "s.json").read_text()
    judge = _StubJudge()
    resized = [Problem("p", _reference("x * x", rows=32)), Problem("q", _reference("x + 1"))]
    with pytest.raises(ConfigError, match=r"s.json holds rows of other code under the names of these "
                                          r"problems \(p\)"):
        run_survey(resized, cfg, tmp_path / "s.json", resume=True, make_judge=lambda: judge)
    assert (tmp_path / "s.json").read_text() == before and judge.seen == []


def test_a_resumed_survey_keeps_the_peaks_of_its_first_piece(tmp_path: Path) -> None:
    """Each piece's judge measures the device's peaks again (three shards on one H100: 2,944, 3,085
    and 3,010 GB/s): the file keeps its first piece's, and every row's floor is against them."""
    from drkernel.problems.loaders import load_suite
    from drkernel.sandbox.stages.timing import peak_cache_key

    problems = [p for p in load_suite(str(_tree(tmp_path / "kb"))) if "Broken" not in p.name]

    def measured(gbs: float) -> _StubJudge:
        judge = _StubJudge()
        info = judge.device_info()
        judge.cache.put_json(peak_cache_key(judge.cache, info.name, info.torch_version),
                             {"bandwidth_gbs": gbs, "tflops_fp32": 50.0, "tflops_bf16": 700.0})
        return judge

    cfg = SurveyConfig(nulls=("zeros",), backends=("eager",))
    first, later = measured(4000.0), measured(3800.0)
    run_survey(problems[:1], cfg, tmp_path / "s.json", make_judge=lambda: first)
    run_survey(problems, cfg, tmp_path / "s.json", resume=True, make_judge=lambda: later)
    data = load_survey(tmp_path / "s.json")
    assert data["peaks"]["bandwidth_gbs"] == 4000.0 and len(data["rows"]) == len(problems)
    assert {r["floor"]["bandwidth_gbs"] for r in data["rows"] if r.get("floor")} == {4000.0}


@pytest.fixture(scope="module")
def one_row(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A fake tree and the text of a survey of its L1/1_Square (a stub judge)."""
    from drkernel.problems.loaders import load_suite

    tmp = tmp_path_factory.mktemp("one_row")
    kb = _tree(tmp / "kb")
    square = [p for p in load_suite(str(kb)) if p.name == "L1/1_Square"]
    cfg = SurveyConfig(nulls=("zeros",), backends=("eager",))
    run_survey(square, cfg, tmp / "s.json", make_judge=_StubJudge)
    return kb, (tmp / "s.json").read_text()


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["rows"][0].update(level="1"), "row 1 (L1/1_Square): level is '1', not an integer or null"),
    (lambda d: d["rows"][0].update(attempts=None), "row 1 (L1/1_Square): attempts is None, not an integer"),
    (lambda d: d["rows"][0].update(complete="yes"), "complete is 'yes', not true or false"),
    (lambda d: d["rows"][0].update(nulls={"zeros": "fails"}), "nulls.zeros is 'fails', not an object"),
    (lambda d: d["rows"][0].update(findings=[1]), "findings is [1], not a list of text"),
    (lambda d: d["rows"][0]["timing"].update(eager_ms="fast"), "timing.eager_ms is 'fast', not a number"),
    (lambda d: d["rows"][0].update(floor=[]), "floor is [], not an object or null"),
    (lambda d: d["rows"][0]["reference"].update(max_abs="big"), "reference.max_abs is 'big', not a number"),
    (lambda d: d.update(device="cpu"), "device is 'cpu', not an object or null"),
    (lambda d: d.update(peaks=[1]), "peaks is [1], not an object"),
    (lambda d: d["peaks"].update(bandwidth_gbs="many"), "peaks.bandwidth_gbs is 'many', not a number"),
    (lambda d: d.update(config=3), "config is 3, not an object"),
    (lambda d: d["rows"].append(dict(d["rows"][0])), "row 2 repeats the name of row 1 (L1/1_Square)"),
    # each was a TypeError in the table (exit 70)
    (lambda d: d.update(size=["full"]), "size is ['full'], not text or null"),
    (lambda d: d.update(device={"kind": "cpu", "name": ["x"]}), "device.name is ['x'], not text or null"),
    (lambda d: d["rows"][0].update(floor={"bound": 5}), "floor.bound is 5, not text or null"),
])
def test_a_hand_edited_survey_is_one_line_naming_what_is_wrong(
        edit: Any, message: str, one_row: tuple[Path, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    kb, text = one_row
    out = tmp_path / "s.json"
    data = json.loads(text)
    data["peaks"] = {"bandwidth_gbs": 10.0}
    edit(data)
    out.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_survey(out)
    for argv in (["suite", "table", str(out)],
                 ["suite", "survey", f"kernelbench:{kb}", "--only", "Square", "--out", str(out), "--resume",
                  "--nulls", "zeros", "--no-compile"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_the_table_refuses_to_merge_surveys_of_other_sizes_or_devices(
        one_row: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Shards of one survey share its size and device; the table's heading names one of each."""
    data = json.loads(one_row[1])
    full = tmp_path / "full.json"
    full.write_text(json.dumps(data))
    reduced, gpu, blank = tmp_path / "reduced.json", tmp_path / "gpu.json", tmp_path / "blank.json"
    reduced.write_text(json.dumps({**data, "size": "reduced", "rows": []}))
    gpu.write_text(json.dumps({**data, "device": {"kind": "cuda", "name": "NVIDIA H200"}, "rows": []}))
    blank.write_text(json.dumps({**data, "device": None, "rows": []}))  # a shard that surveyed nothing yet
    for other, words in ((reduced, "at size 'full' and 'reduced'"), (gpu, "on 'cpu' and 'NVIDIA H200'")):
        assert main(["suite", "table", str(full), str(other)]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
    assert main(["suite", "table", str(full), str(blank)]) == 0
    assert "on cpu;" in capsys.readouterr().out


def test_the_table_labels_problems_without_a_level_as_such() -> None:
    """A folder or .jsonl suite has no levels: its summary line said L0, a level no suite has."""
    from drkernel.problems.survey_table import render_table

    row = {"name": "mine", "level": None, "status": "ok", "complete": True, "findings": [], "nulls": {},
           "timing": {}, "reference": {}, "floor": None}
    table = render_table([{"rows": [row], "suite": "folder", "size": "full"}], markdown=True)
    assert "| no level | 1 | 1 |" in table and "| L0 |" not in table, table


def test_the_tables_heading_says_none_where_no_peak_was_measured() -> None:
    """Peaks present but all null (a survey on the CPU) were 'measured peaks: ;'."""
    from drkernel.problems.survey_table import render_table

    for peaks in (None, {"bandwidth_gbs": None, "tflops_fp32": None}):
        head = render_table([{"rows": [], "suite": "s", "size": "full", "peaks": peaks}]).splitlines()[0]
        assert "measured peaks: none;" in head, head
    head = render_table([{"rows": [], "suite": "s", "size": "full", "peaks": {"bandwidth_gbs": 4000.0}}])
    assert "measured peaks: 4000 GB/s;" in head.splitlines()[0]


def test_a_second_survey_into_the_same_file_is_refused_while_one_runs(tmp_path: Path) -> None:
    """Two calls on one --out (two shards given the same file) each rewrote the file from their own
    rows, dropping the other's."""
    from drkernel.problems.loaders import load_suite

    square = [p for p in load_suite(str(_tree(tmp_path / "kb"))) if p.name == "L1/1_Square"]
    cfg = SurveyConfig(nulls=("zeros",), backends=("eager",))
    out = tmp_path / "s.json"
    refused: list[str] = []

    def make_judge() -> _StubJudge:  # called while the first survey runs
        with pytest.raises(ConfigError, match="another drkernel suite survey is writing") as info:
            run_survey(square, cfg, out, resume=True, make_judge=_StubJudge)
        refused.append(str(info.value))
        return _StubJudge()

    assert run_survey(square, cfg, out, make_judge=make_judge).done == ["L1/1_Square"]
    assert len(refused) == 1
    assert run_survey(square, cfg, out, resume=True, make_judge=_StubJudge).skipped == 1  # the lock is free
    assert (tmp_path / ".s.json.lock").is_file()  # and its file is kept for the next writer


def test_a_survey_that_opened_the_lock_as_the_writer_left_still_keeps_out_a_third(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer removed its lock file on leaving: a second survey that had opened the file just
    before took the lock of the removed file, a third made a new file and took its lock, and both
    wrote one --out."""
    import fcntl
    import threading

    from drkernel.problems.loaders import load_suite

    square, broken = (p for p in load_suite(str(_tree(tmp_path / "kb", gemm=False))) if "Flat" not in p.name)
    cfg = SurveyConfig(nulls=("zeros",), backends=("eager",))
    out = tmp_path / "s.json"
    opened, left = threading.Event(), threading.Event()
    flock = fcntl.flock

    def late_flock(fd: Any, operation: int) -> None:  # the second survey locks once the first has left
        if threading.current_thread().name == "second" and not left.is_set():
            opened.set()
            left.wait(60)
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", late_flock)
    third: list[BaseException | None] = []

    def second_judge() -> _StubJudge:  # called while the second survey holds the lock
        try:
            run_survey([square], cfg, out, resume=True, make_judge=_StubJudge)
            third.append(None)
        except ConfigError as exc:
            third.append(exc)
        return _StubJudge()

    failed: list[BaseException] = []

    def second() -> None:
        try:
            run_survey([square, broken], cfg, out, resume=True, make_judge=second_judge)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failed.append(exc)

    thread = threading.Thread(target=second, name="second")

    def first_judge() -> _StubJudge:  # the second survey opens the lock file while the first holds it
        thread.start()
        assert opened.wait(60)
        return _StubJudge()

    assert run_survey([square], cfg, out, make_judge=first_judge).done == ["L1/1_Square"]
    left.set()
    thread.join(120)
    assert failed == [] and len(third) == 1, (failed, third)
    assert "another drkernel suite survey is writing" in str(third[0])


def test_an_out_whose_lock_cannot_be_opened_is_one_line_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The lock file beside --out could not be opened (a symlink or a folder at its name, a read-only
    folder): a traceback of OSError from held_lock. It is one line naming the lock and why."""
    import errno
    import os

    kb = _tree(tmp_path / "kb", gemm=False)
    out = tmp_path / "s.json"
    lock = tmp_path / ".s.json.lock"
    argv = ["suite", "survey", f"kernelbench:{kb}", "--out", str(out), "--no-compile", "--nulls", "zeros"]
    lock.symlink_to(tmp_path / "elsewhere")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{lock}: cannot lock {out}: a symlink" in err and len(err.strip().splitlines()) == 1, err
    lock.unlink()
    lock.mkdir()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{lock}: cannot lock {out}: Is a directory" in err and len(err.strip().splitlines()) == 1, err
    lock.rmdir()
    real_open = os.open

    def read_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:  # a read-only folder (root
        if str(path) == str(lock):  # writes into one, so its refusal is made here)
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{lock}: cannot lock {out}: Permission denied" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_an_os_error_of_the_survey_itself_is_not_blamed_on_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the lock's own opening is the one-line lock error: a write of the survey that fails under it
    is raised as it is, not said to be the lock's."""
    import errno

    from drkernel.problems import survey
    from drkernel.problems.loaders import load_suite

    square = [p for p in load_suite(str(_tree(tmp_path / "kb", gemm=False))) if p.name == "L1/1_Square"]

    def full(path: Any, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(survey, "write_text_atomically", full)
    with pytest.raises(OSError, match="No space left") as info:
        run_survey(square, SurveyConfig(nulls=("zeros",), backends=("eager",)), tmp_path / "s.json",
                   make_judge=_StubJudge)
    assert not isinstance(info.value, ConfigError) and "lock" not in str(info.value)


@pytest.mark.parametrize("given", ["", ".", "folder", "folder/"])
def test_an_out_that_is_a_folder_is_one_line(given: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`--out ""` or `--out .` was a ValueError traceback (the lock's name from an empty one), and
    `--out folder` said the folder exists: pass --resume to continue it, or remove it."""
    kb = _tree(tmp_path / "kb", gemm=False)
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    for resume in ([], ["--resume"]):
        code = main(["suite", "survey", f"kernelbench:{kb}", "--out", given, "--nulls", "zeros", *resume])
        err = capsys.readouterr().err
        assert code == 2 and "is a folder, not a survey file" in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "kb"]
    assert not any((tmp_path / "folder").iterdir())


def test_the_table_replaces_its_out_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`suite table --out` wrote the table into the old file in place (emptied first): a Ctrl-C or a full
    disk mid-write left a cut table. It is replaced by one rename, as the survey is: the old file (here
    seen through a second name) is never written."""
    import os

    survey = tmp_path / "s.json"
    survey.write_text(json.dumps({"format": "drkernel-survey-v1", "size": "full",
                                  "rows": [{"name": "a", "level": 1, "status": "ok"}]}))
    table, old = tmp_path / "table.md", tmp_path / "old.md"
    table.write_text("the table of last week\n")
    os.link(table, old)
    assert main(["suite", "table", str(survey), "--markdown", "--out", str(table)]) == 0
    assert old.read_text() == "the table of last week\n" and "| L1 |" in table.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.md", "s.json", "table.md"]
    for folder in ("", str(tmp_path)):  # and a folder given as --out is one line
        assert main(["suite", "table", str(survey), "--out", folder]) == 2
        err = capsys.readouterr().err
        assert "is a folder, not a file for the table" in err and len(err.strip().splitlines()) == 1, err

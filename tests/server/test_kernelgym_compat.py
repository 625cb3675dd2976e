"""Drop-in for KernelGYM: every anchor-route answer validates against KernelGYM's own response
models (kernelgym_models.py), and a client that behaves like the authors' reward client
(kernelgym_client.py) gets the statuses, the error text and the rewards KernelGYM would give.

What KernelGYM answers for each case was read from its code (kernelgym/schema/result.py,
workflow/kernelbench.py, toolkit/kernelbench/correctness.py, worker/gpu_worker.py,
utils/error_classifier.py): a module that does not load is `failed`, not compiled,
COMPILATION_ERROR; an exception in forward, including a Triton compile error at first launch, is
`completed`, compiled, incorrect, RUNTIME_ERROR; a mismatch is `completed`, CORRECTNESS_ERROR; a
worker timeout is `failed`, not compiled, TIMEOUT_ERROR; a decoy is `completed` with
decoy_kernel true (drkernel: also correctness false, the deliberate difference).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from drkernel.executors.fake_judge import FakeJudge
from drkernel.server.anchor import anchor_response
from drkernel.server.store import TaskRecord
from drkernel.types import (
    DeviceInfo,
    ErrorInfo,
    EvalOptions,
    EvalOutcome,
    EvalRequest,
    EvalResult,
    KernelTime,
)
from tests.server import kernelgym_models as kg
from tests.server.kernelgym_client import (
    KernelGymStyleClient,
    prompt_error,
    reward_like_kernel,
    reward_speedup,
    reward_weighted,
    rewards,
)

REF = "import torch\n\nclass Model(torch.nn.Module):\n    pass\n"
TRACE = 'Traceback (most recent call last):\n  File "kernel.py", line 9, in forward\n'


class ScriptedJudge(FakeJudge):
    """The fake judge plus the verdicts the real judge gives for launch-time failures and hangs
    (their kinds as drkernel/sandbox reports them), so the anchor mapping is tested end to end."""

    def evaluate(self, request: EvalRequest) -> EvalResult:
        code = request.kernel_code
        device = DeviceInfo(kind="cpu", name="fake:cpu", interpreter=True)
        if "# kg: forward_error" in code:
            err = ErrorInfo("forward_error", "ZeroDivisionError: division by zero",
                            TRACE + "ZeroDivisionError: division by zero\n")
            return EvalResult(outcome=EvalOutcome.RUNTIME_ERROR, compiled=True, error=err,
                              device=device, task_id=request.task_id)
        if "# kg: triton_compile_error" in code:
            msg = "CompilationError: at 4:8: tl.arange's arguments must be of type tl.constexpr"
            err = ErrorInfo("triton_compile_error", msg, TRACE + msg + "\n")
            return EvalResult(outcome=EvalOutcome.COMPILE_ERROR, error=err, device=device,
                              task_id=request.task_id)
        if "# kg: missing_model_new" in code:
            err = ErrorInfo("missing_model_new", "the module defines no class ModelNew")
            return EvalResult(outcome=EvalOutcome.COMPILE_ERROR, error=err, device=device,
                              task_id=request.task_id)
        if "# kg: hang" in code:
            time.sleep(0.2)  # the real judge kills the sandbox at options.timeout_s
            limit = request.options.timeout_s
            return EvalResult.failure(EvalOutcome.TIMEOUT, "timeout",
                                      f"evaluation exceeded {limit:g} s", device=device,
                                      task_id=request.task_id)
        return super().evaluate(request)


def scripted_judge(device: str) -> ScriptedJudge:
    return ScriptedJudge(device)


def kernel(marks: str) -> str:
    return f"{marks}\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def payload(task_id: str, marks: str, **extra: Any) -> dict[str, Any]:
    """What compute_kernel_reward_batch posts, unknown keys included."""
    return {"task_id": task_id, "reference_code": REF, "kernel_code": kernel(marks),
            "backend": "triton", "num_correct_trials": 5, "num_perf_trials": 100, "timeout": 10,
            "priority": "normal", "entry_point": "Model", "is_valid": False,
            "verbose_errors": True, "enable_profiling": True, "detect_decoy_kernel": True,
            "reference_backend": None} | extra


# case -> (markers, what KernelGYM's client-visible result is, per its code; see the docstring).
# The KernelGYM result carries only what the reward functions read.
KERNELGYM = {
    "honest": ("# fake: speedup=2.5\n# fake: coverage=0.4",
               {"status": "completed", "compiled": True, "correctness": True,
                "decoy_kernel": False, "speedup": 2.5,
                "metadata": {"custom_kernel_cuda_time_in_profiling_us": 40.0,
                             "total_kernel_run_time_in_profiling_us": 100.0}}),
    "syntax_error": ("# fake: compile_error", {"status": "failed", "error_message": "Task failed"}),
    "triton_compile_error": ("# kg: triton_compile_error",
                             {"status": "completed", "compiled": True, "correctness": False,
                              "decoy_kernel": False, "speedup": 0.0,
                              "error_code": "RUNTIME_ERROR"}),
    "wrong_result": ("# fake: incorrect",
                     {"status": "completed", "compiled": True, "correctness": False,
                      "decoy_kernel": False, "speedup": 0.0, "error_code": "CORRECTNESS_ERROR"}),
    "forward_exception": ("# kg: forward_error",
                          {"status": "completed", "compiled": True, "correctness": False,
                           "decoy_kernel": False, "speedup": 0.0,
                           "error_code": "RUNTIME_ERROR"}),
    "hang": ("# kg: hang", {"status": "failed", "error_message": "Task failed"}),
    "decoy": ("# fake: hack=decoy_kernel",
              {"status": "completed", "compiled": True, "correctness": True,
               "decoy_kernel": True, "speedup": 0.0}),
}

# (like_kernel, weighted, speedup) rewards, worked out by hand from the recipes' formulas
EXPECTED_REWARDS = {
    "honest": (0.8, 1.0, 0.5 + 0.5 * 2.5 + 0.5 * 0.4),
    "syntax_error": (-1.0, 0.0, 0.0),
    "triton_compile_error": (-0.3, 0.0, 0.0),
    "wrong_result": (-0.3, 0.0, 0.0),
    "forward_exception": (-0.3, 0.0, 0.0),
    "hang": (-1.0, 0.0, 0.0),
    "decoy": (-1.0, 0.0, 0.0),
}

# what the next turn's prompt gets as the error text: its start (KernelGYM's verbose form) and,
# for the two runtime cases, the exception line that must reach the model
PROMPT_LINE = {
    "triton_compile_error": "CompilationError: at 4:8",
    "forward_exception": "ZeroDivisionError: division by zero",
}
PROMPT_TEXT = {
    "honest": None,
    "syntax_error": "Task failed",
    "triton_compile_error": "Kernel execution failed: Traceback",
    "wrong_result": "Kernel produced incorrect results",
    "forward_exception": "Kernel execution failed: Traceback",
    "hang": "Task failed",
    "decoy": "Reward hacking: Decoy kernel detected",
}


def test_the_authors_client_gets_kernelgyms_statuses_error_text_and_rewards(serve) -> None:
    srv = serve(judge=scripted_judge, workers=2)
    client = KernelGymStyleClient(srv.url)
    for case, (marks, theirs) in KERNELGYM.items():
        tid = f"parallel_task_{case}"
        ours = client.submit_and_poll(payload(tid, marks))
        assert ours["status"] == theirs["status"], (case, ours)
        for key in ("compiled", "correctness", "decoy_kernel", "error_code"):
            if key in theirs and not (case == "decoy" and key == "correctness"):
                assert ours[key] == theirs[key], (case, key, ours)
        assert rewards(ours) == pytest.approx(rewards(theirs)), case
        assert rewards(ours) == pytest.approx(EXPECTED_REWARDS[case]), case
        summary = reward_like_kernel(ours)
        text = prompt_error(ours, summary)
        if PROMPT_TEXT[case] is None:
            assert text is None, (case, text)
        else:
            assert text is not None and text.startswith(PROMPT_TEXT[case]), (case, text)
            assert PROMPT_LINE.get(case, "") in text, (case, text)
        # every answer on the way validates against KernelGYM's models
        kg.TaskStatus.model_validate(srv.http.get(f"/status/{tid}").json())
        kg.Evaluation.model_validate(srv.http.get(f"/results/{tid}").json())
    assert client.reposts == 0 and set(client.posts) == {200}


def test_the_error_text_and_codes_in_results_as_kernelgym(serve) -> None:
    srv = serve(judge=scripted_judge)
    answers = {}
    for case, (marks, _) in KERNELGYM.items():
        r = srv.http.post("/evaluate", json=payload(case, marks))
        assert r.status_code == 200
        answers[case] = kg.Evaluation.model_validate(r.json())
    fwd = answers["forward_exception"]
    assert fwd.metadata and "ZeroDivisionError" in fwd.metadata["runtime_error"]
    assert fwd.error_message and TRACE in fwd.error_message  # verbose_errors: the traceback
    quiet = srv.http.post("/evaluate", json=payload("quiet", "# kg: forward_error",
                                                    verbose_errors=False)).json()
    assert quiet["error_message"] == "Kernel execution failed: ZeroDivisionError: division by zero"
    syn = answers["syntax_error"]
    assert syn.error_code == "COMPILATION_ERROR" and syn.compiled is False
    assert syn.error_message and syn.error_message.startswith("Kernel compilation failed: ")
    hang = answers["hang"]
    assert (hang.status, hang.compiled, hang.error_code) == ("failed", False, "TIMEOUT_ERROR")
    assert hang.error_message and "timeout after 10s" in hang.error_message
    decoy = answers["decoy"]
    assert decoy.error_message and "decoy_kernel" in decoy.error_message  # the hack is named
    wrong = answers["wrong_result"]
    assert wrong.error_message and wrong.error_message.startswith("Kernel produced incorrect")
    missing = srv.http.post("/evaluate", json=payload("nomodel", "") | {
        "kernel_code": "# kg: missing_model_new\nimport torch\n"}).json()
    assert (missing["status"], missing["error_code"]) == ("failed", "VALIDATION_ERROR")
    assert "ModelNew" in missing["error_message"]
    renamed = srv.http.post("/evaluate", json=payload("renamed", "# kg: missing_model_new")).json()
    assert renamed["error_code"] == "COMPILATION_ERROR"  # the class text is there, yet no class


def _iso_ok(body: dict[str, Any]) -> None:
    kg.ErrorBody.model_validate(body)
    assert body["error_code"] is None or body["error_code"].endswith("_ERROR")


def test_every_anchor_route_answers_in_kernelgyms_models(serve) -> None:
    srv = serve(judge=scripted_judge)
    kg.Evaluation.model_validate(srv.http.post("/evaluate", json=payload("r1", "")).json())
    batch = srv.http.post("/evaluate/batch", json={"batch_id": "B", "tasks": [
        payload("b1", ""), payload("b2", "# kg: forward_error"), payload("b3", "# kg: hang")]})
    b = kg.BatchEvaluation.model_validate(batch.json())
    assert batch.status_code == 200 and b.batch_status == "completed"
    assert (b.total_tasks, b.completed_tasks, b.failed_tasks) == (3, 2, 1)
    unnamed = srv.http.post("/evaluate/batch", json={"tasks": [payload("b1", "")]}).json()
    assert kg.BatchEvaluation.model_validate(unnamed).batch_id.startswith("batch-")
    st = kg.TaskStatus.model_validate(srv.http.get("/status/r1").json())
    assert st.progress == 100.0
    health = kg.SystemHealth.model_validate(srv.http.get("/health").json())
    assert health.total_processed == 4 and health.gpu_status == {"error": "CUDA not available"}
    assert {"cpu_percent", "memory_percent"} <= set(health.memory_usage)
    metrics = kg.Metrics.model_validate(srv.http.get("/metrics").json())
    assert metrics.error_metrics["runtime_errors"] == 1
    assert metrics.error_metrics["timeout_errors"] == 1
    kg.Root.model_validate(srv.http.get("/").json())
    workers = srv.http.get("/workers/status").json()
    assert len(workers) == 2
    for entry in workers.values():
        assert kg.WorkerEntry.model_validate(entry).status == "online"
    kg.QueueStatus.model_validate(srv.http.get("/queue/status").json())

    valid = kg.Validation.model_validate(srv.http.post("/debug/validate",
                                                       json=payload("v", "")).json())
    assert valid.valid and valid.kernel["entry_point"] == "ModelNew"
    bad = kg.Validation.model_validate(srv.http.post("/debug/validate", json=payload("v", "") | {
        "kernel_code": "import torch  # no class here"}).json())
    assert not bad.valid and "ModelNew" in bad.errors[0]

    wf = srv.http.post("/workflow/submit", json={"workflow": "kernelbench", "task_id": "w1",
                                                 "payload": payload("ignored", "")})
    w = kg.Workflow.model_validate(wf.json())
    assert wf.status_code == 200 and w.task_id == "w1" and w.status == "completed"
    assert w.result and w.result["correctness"] is True and "status" not in w.result
    kg.Workflow.model_validate(srv.http.get("/workflow/results/w1").json())
    simple = kg.Workflow.model_validate(srv.http.post("/workflow/submit", json={
        "workflow": "kernel_simple", "task_id": "s1", "payload": {"kernel_code": "x" * 20}}).json())
    assert simple.status == "failed" and simple.error_code == "VALIDATION_ERROR"
    assert simple.result and simple.result["compiled"] is False  # README Example 1 reads these
    assert simple.error_message and "kernel_simple" in simple.error_message


def test_errors_come_in_kernelgyms_envelope(serve) -> None:
    srv = serve(judge=scripted_judge)
    cases = [
        ({"task_id": "x", "reference_code": REF}, "kernel_code"),
        (payload("x", "") | {"priority": "urgent"}, "priority"),
        (payload("x", "") | {"num_correct_trials": 50}, "num_correct_trials"),
    ]
    for body, words in cases:
        r = srv.http.post("/evaluate", json=body)
        assert r.status_code == 400 and r.headers["x-error-code"] == "VALIDATION_ERROR"
        _iso_ok(r.json())
        assert r.json()["error"] == "RequestValidationError" and words in r.json()["message"]
        assert r.json()["message"].startswith("Request validation failed")
    r = srv.http.post("/evaluate", content=b"{oops", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "RequestValidationError"
    cuda = srv.http.post("/evaluate", json=payload("c", "") | {"backend": "cuda"})
    assert cuda.status_code == 400 and "Triton kernels only" in cuda.json()["message"]
    _iso_ok(cuda.json())
    for path in ("/status/none", "/results/none"):
        r = srv.http.get(path)
        assert r.status_code == 404 and r.json()["detail"] == "Task none not found"
        _iso_ok(r.json())
    gone = srv.http.delete("/tasks/none")
    assert gone.status_code == 404 and "cannot be cancelled" in gone.json()["detail"]


def test_cancel_and_progress_as_kernelgym(serve) -> None:
    srv = serve(judge=scripted_judge, workers=1, evaluate_wait_s=0.1)
    srv.http.post("/evaluate", json=payload("busy", "# fake: sleep=3"))
    queued = srv.http.post("/evaluate", json=payload("queued", ""))
    assert queued.status_code == 200 and queued.json()["status"] == "pending"
    st = kg.TaskStatus.model_validate(srv.http.get("/status/queued").json())
    assert st.status == "pending" and st.progress == 0.0 and st.queue_position == 0
    r = srv.http.delete("/tasks/queued")
    assert r.status_code == 200
    assert kg.CancelAnswer.model_validate(r.json()).message == "Task queued cancelled successfully"
    res = kg.Evaluation.model_validate(srv.http.get("/results/queued").json())
    assert (res.status, res.error_code, res.error_message) == ("failed", "SYSTEM_ERROR",
                                                               "Task cancelled")
    assert srv.http.delete("/tasks/queued").status_code == 404


def test_coverage_fields_come_from_gpu_profiling_data_and_give_their_bonus() -> None:
    """A GPU-shaped result (profiled kernels, measured coverage): the two profiling keys are
    emitted and the authors' reward reads our coverage from them. The H200 run checks the real
    numbers; this checks the plumbing."""
    kernels = [KernelTime("add_kernel_0d1d2d", 300.0, 10, True),
               KernelTime("aten::copy_", 100.0, 10, False)]
    result = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.8,
                        reference_ms=0.9, kernel_ms=0.5, coverage=0.75, kernels=kernels,
                        device=DeviceInfo(kind="cuda", name="NVIDIA H200", interpreter=False),
                        task_id="gpu")
    request = EvalRequest(reference_code=REF, kernel_code=kernel(""), options=EvalOptions(),
                          task_id="gpu")
    record = TaskRecord(task_id="gpu", state="done", priority="normal",
                        request_json=__import__("json").dumps(request.to_dict()), result=result,
                        attempts=1, worker="local-0", submitted_at=1.0, started_at=2.0,
                        finished_at=3.0, meta={"api": "anchor", "backend": "triton"})
    body = kg.Evaluation.model_validate(anchor_response(record)).model_dump()
    meta = body["metadata"]
    assert meta["custom_kernel_cuda_time_in_profiling_us"] == pytest.approx(300.0)
    assert meta["total_kernel_run_time_in_profiling_us"] == pytest.approx(400.0)
    assert (meta["num_custom_kernels"], meta["num_total_kernels"]) == (1, 2)
    assert reward_speedup(body)["reward"] == pytest.approx(0.5 + 0.5 * 1.8 + 0.5 * 0.75)
    assert reward_weighted(body)["reward"] == pytest.approx(1.0)
    assert reward_like_kernel(body)["reward"] == pytest.approx(0.6)
    no_profile = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.0,
                            task_id="gpu")
    record.result = no_profile
    assert "total_kernel_run_time_in_profiling_us" not in anchor_response(record)["metadata"]


_REAL_HEADER = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


@triton.jit
def broken_kernel(x_ptr, out_ptr, n):
    offs = tl.arange(0, n)  # n is not a constexpr: Triton fails to compile at the first launch
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))

'''

_REAL_FORWARD = {
    "honest": "out = torch.empty_like(x)\n        relu_kernel[(triton.cdiv(x.numel(), 128),)]"
              "(x, out, x.numel(), BLOCK=128)\n        return out",
    "syntax_error": "return x +",
    "triton_compile_error": "out = torch.empty_like(x)\n        broken_kernel[(1,)](x, out, x.numel())"
                            "\n        return out",
    "forward_exception": "raise ValueError('kernel exploded')",
    "wrong_result": "out = torch.empty_like(x)\n        relu_kernel[(triton.cdiv(x.numel(), 128),)]"
                    "(x, out, x.numel(), BLOCK=128)\n        return out + 1.0",
    "decoy": "return torch.relu(x)",
}


@pytest.mark.slow
def test_the_real_cpu_judge_through_the_authors_client_flow(serve) -> None:
    """The real judge (Triton's interpreter on the CPU): the verdict kinds the scripted judge
    stands in for are what it gives, and the client sees KernelGYM's statuses and rewards."""
    from drkernel.executors.contract import CONTRACT_REFERENCE
    from drkernel.executors.judge_host import SandboxJudge

    srv = serve(judge=SandboxJudge(), workers=1)
    client = KernelGymStyleClient(srv.url, poll_s=0.2, client_timeout_s=300)
    for case, body in _REAL_FORWARD.items():
        code = f"{_REAL_HEADER}\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        {body}\n"
        ours = client.submit_and_poll(payload(f"real_{case}", "") | {
            "reference_code": CONTRACT_REFERENCE, "kernel_code": code, "num_correct_trials": 2,
            "num_perf_trials": 3, "timeout": 60})
        theirs = KERNELGYM[case][1]
        assert ours["status"] == theirs["status"], (case, ours)
        like, weighted, speed = rewards(ours)
        expected = EXPECTED_REWARDS[case]
        if case == "honest":  # measured speedup and coverage: check the formula, not the value
            assert ours["correctness"] is True and like >= -0.1 and weighted >= 0.5, ours
            assert speed == pytest.approx(reward_speedup(ours)["reward"])
        else:
            assert (like, weighted, speed) == pytest.approx(expected), (case, ours)
        text = prompt_error(ours, reward_like_kernel(ours))
        if case in PROMPT_LINE:
            assert text and text.startswith("Kernel execution failed"), (case, text)
        if case == "forward_exception":
            assert text and "kernel exploded" in text
        kinds = {"triton_compile_error": "triton_compile_error", "forward_exception": "forward_error"}
        if case in kinds:
            assert ours["metadata"]["error_kind"] == kinds[case], (case, ours["metadata"])
        kg.Evaluation.model_validate(srv.http.get(f"/results/real_{case}").json())
    assert client.reposts == 0


class _HeldJudge(FakeJudge):
    """A fake judge that holds every evaluation until the test lets it go (a kernel still running)."""

    release = threading.Event()

    def evaluate(self, request: EvalRequest) -> EvalResult:
        _HeldJudge.release.wait(30)
        return super().evaluate(request)


@pytest.mark.parametrize("route", ["/evaluate", "/evaluate/batch"])
def test_the_blocking_routes_answer_503_once_the_server_begins_to_stop(serve: Any, route: str) -> None:
    """SIGTERM (begin_shutdown) while the authors' client waits on a blocking route: 503 with Retry-After
    at once, which their client retries against the restarted server, not a 500 after uvicorn's 30 s."""
    from drkernel.server.app import begin_shutdown

    _HeldJudge.release.clear()
    srv = serve(workers=1, judge=_HeldJudge)
    body = payload("held", "") if route == "/evaluate" else {"batch_id": "B", "tasks": [payload("held", "")]}
    answers: list[Any] = []
    poster = threading.Thread(target=lambda: answers.append(srv.http.post(route, json=body)))
    poster.start()
    try:
        deadline = time.monotonic() + 10
        while srv.http.get("/v1/tasks/held").json().get("state") != "running":  # 404 until submitted
            assert time.monotonic() < deadline, "the task never started"
            time.sleep(0.05)
        stopped_at = time.monotonic()
        begin_shutdown(srv.app)
        poster.join(timeout=5)
        assert answers, "the blocking route did not answer once the server began to stop"
        assert time.monotonic() - stopped_at < 2
        assert answers[0].status_code == 503 and answers[0].headers.get("retry-after"), answers[0].text
    finally:
        _HeldJudge.release.set()
        poster.join(timeout=5)

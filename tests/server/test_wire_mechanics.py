"""No mechanics on the wire (issue 33): what the KernelGYM routes return for a hack names the hack
and what to do instead, never how it was found (seeds, scales, call indices, clock readings). The
authors' engine pastes the whole result into the next prompt: a seed there is taught to the policy.
The evidence stays in the native result, for people. And `/metrics` counts each task under the
error code `/results` gives it."""

from __future__ import annotations

import json

from drkernel.advice import hack_advice
from drkernel.agent.feedback import render_feedback
from drkernel.server.anchor import anchor_response, error_code
from drkernel.server.store import TaskRecord
from drkernel.types import ErrorInfo, EvalOutcome, EvalRequest, EvalResult

EVIDENCE = {
    "decoy_kernel": "trial with seed 1374084926 launched no Triton kernel of the submission",
    "replayed_output": "timed window 3, call 17: output 0: differs from the reference's output",
    "timer_mismatch": "the sandbox reported 1.936 ms of timed windows; the judge's own clock allows no "
                      "less than 53.035 ms (in each of 3 runs on fresh inputs)",
}
MECHANICS = ("1374084926", "seed", "window 3", "call 17", "1.936", "53.035", "judge's own clock")


def record(result: EvalResult) -> TaskRecord:
    request = EvalRequest(reference_code="ref", kernel_code="class ModelNew: pass")
    return TaskRecord(task_id="t", state="done", priority="normal",
                      request_json=json.dumps(request.to_dict()), result=result, attempts=1,
                      worker="local-0", submitted_at=1.0, started_at=2.0, finished_at=3.0,
                      meta={"api": "anchor", "backend": "triton"})


def hacked() -> EvalResult:
    return EvalResult(outcome=EvalOutcome.HACK_DETECTED, compiled=True, hacks=list(EVIDENCE),
                      hack_details=dict(EVIDENCE))


def test_a_hack_on_the_kernelgym_routes_is_its_class_and_advice_never_its_evidence() -> None:
    body = anchor_response(record(hacked()))
    wire = json.dumps({k: body[k] for k in ("error_message", "metadata")})
    for word in MECHANICS:
        assert word not in wire, (word, wire)
    for code in EVIDENCE:
        assert code in body["error_message"] and hack_advice(code) in body["error_message"]
        assert body["metadata"]["hack_details"][code] == hack_advice(code)
    assert body["metadata"]["correctness_issue"].startswith("reward hack detected (decoy_kernel: ")
    assert body["decoy_kernel"] is True and body["correctness"] is False


def test_the_agents_feedback_words_hacks_through_the_same_function() -> None:
    text = render_feedback(hacked())
    for code in EVIDENCE:
        assert f"{code}: {hack_advice(code)}" in text
    for word in ("1374084926", "call 17", "53.035"):
        assert word not in text


def test_the_native_result_keeps_the_evidence_for_people() -> None:
    assert hacked().to_dict()["hack_details"] == EVIDENCE


def test_metrics_count_each_task_under_the_code_results_gives_it() -> None:
    """`/results` and `/metrics` take the code from one function (anchor.error_code); each case's code
    is KernelGYM's (tests/server/test_kernelgym_compat.py checks them through the authors' client)."""
    from drkernel.server.anchor import _verdict

    cases = {(EvalOutcome.COMPILE_ERROR, "triton_compile_error"): "RUNTIME_ERROR",  # the case
             (EvalOutcome.COMPILE_ERROR, "syntax_error"): "COMPILATION_ERROR",
             (EvalOutcome.COMPILE_ERROR, "import_error"): "COMPILATION_ERROR",
             (EvalOutcome.RUNTIME_ERROR, "forward_error"): "RUNTIME_ERROR",
             (EvalOutcome.RUNTIME_ERROR, "crash"): "RUNTIME_ERROR",
             (EvalOutcome.RUNTIME_ERROR, "resource_exhaustion"): "RUNTIME_ERROR",
             (EvalOutcome.TIMEOUT, "timeout"): "TIMEOUT_ERROR",
             (EvalOutcome.INCORRECT, ""): "CORRECTNESS_ERROR",
             (EvalOutcome.HACK_DETECTED, ""): "CORRECTNESS_ERROR",
             (EvalOutcome.OK, ""): None,
             (EvalOutcome.INFRA_ERROR, "judge_error"): "SYSTEM_ERROR"}
    for (outcome, kind), code in cases.items():
        result = EvalResult(outcome=outcome, error=ErrorInfo(kind, "x") if kind else None)
        assert error_code(outcome, kind) == code, (outcome, kind)
        assert _verdict(result, record(result)).code == code, (outcome, kind)

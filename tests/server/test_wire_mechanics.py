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
    from drkernel.server.anchor import _verdict

    cases = [(EvalOutcome.COMPILE_ERROR, "triton_compile_error"), (EvalOutcome.COMPILE_ERROR, "syntax_error"),
             (EvalOutcome.COMPILE_ERROR, "import_error"), (EvalOutcome.RUNTIME_ERROR, "forward_error"),
             (EvalOutcome.RUNTIME_ERROR, "crash"), (EvalOutcome.TIMEOUT, "timeout"),
             (EvalOutcome.INCORRECT, ""), (EvalOutcome.HACK_DETECTED, ""), (EvalOutcome.OK, ""),
             (EvalOutcome.INFRA_ERROR, "judge_error"), (EvalOutcome.RUNTIME_ERROR, "resource_exhaustion")]
    for outcome, kind in cases:
        result = EvalResult(outcome=outcome, error=ErrorInfo(kind, "x") if kind else None)
        assert _verdict(result, record(result)).code == error_code(outcome, kind), (outcome, kind)
    # the round trip the issue saw: a Triton compile error is RUNTIME_ERROR in both
    assert error_code(EvalOutcome.COMPILE_ERROR, "triton_compile_error") == "RUNTIME_ERROR"

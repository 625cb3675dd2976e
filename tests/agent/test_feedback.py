import json

import pytest

from drkernel.agent.feedback import FeedbackConfig, render_feedback
from drkernel.errors import ConfigError
from drkernel.types import (
    DeviceInfo,
    EvalOutcome,
    EvalResult,
    KernelTime,
    TrialReport,
)

TB = """Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1700, in _call_impl
    return forward_call(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/drkernel-candidate-xyz/submission.py", line 23, in forward
    relu_kernel[grid](x, out, n, BLOCK=1024)
  File "/usr/lib/python3.11/site-packages/triton/runtime/interpreter.py", line 1200, in __call__
    raise InterpreterError(repr(e)) from e
triton.runtime.errors.InterpreterError: ValueError('bad mask')
"""


def test_compile_error_keeps_the_candidate_frames_only():
    r = EvalResult.failure(EvalOutcome.RUNTIME_ERROR, "forward_error", "InterpreterError: bad mask")
    r.error.traceback = TB
    text = render_feedback(r)
    assert "forward_error" in text and "bad mask" in text
    assert 'File "submission.py", line 23, in forward' in text
    assert "relu_kernel[grid]" in text
    assert "module.py" not in text and "interpreter.py" not in text and "^^^" not in text


def test_correctness_mismatch_details():
    trials = [TrialReport(seed=1, passed=True)] + [
        TrialReport(seed=s, passed=False, max_abs_diff=0.5, max_rel_diff=2.0, issue="Output mismatch")
        for s in (2, 3, 4, 5)
    ]
    r = EvalResult(outcome=EvalOutcome.INCORRECT, compiled=True, trials=trials)
    text = render_feedback(r, FeedbackConfig(max_failed_trials=2))
    assert "1/5 passed" in text and "max_abs_diff=0.5" in text
    assert text.count("failed trial: Output mismatch") == 2  # max_failed_trials
    assert "seed" not in text


def test_hacks_runtimes_coverage_and_kernels():
    r = EvalResult(
        outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.5, reference_ms=3.0,
        kernel_ms=2.0, coverage=0.42, reward=2.92,
        device=DeviceInfo(kind="cuda", name="NVIDIA H200", interpreter=False),
        kernels=[KernelTime("gemm_cudnn", 50.0, 10, False), KernelTime("my_fused", 90.0, 10, True)],
    )
    text = render_feedback(r)
    assert "speedup: 1.5x" in text and "3 ms" in text and "2 ms" in text and "42.0%" in text
    assert text.index("my_fused") < text.index("gemm_cudnn")  # sorted by device time
    assert "[yours]" in text and "NVIDIA H200" in text and "reward: 2.92" in text
    hacked = EvalResult(
        outcome=EvalOutcome.HACK_DETECTED, compiled=True, hacks=["decoy_kernel"],
        hack_details={"decoy_kernel": "no Triton kernel launched"},
    )
    text = render_feedback(hacked)
    assert "reward hacking" in text and "decoy_kernel: your Triton kernels did not do the work" in text
    assert "no Triton kernel launched" not in text  # the evidence stays in the result


@pytest.mark.parametrize("style", ["text", "json"])
def test_budget_is_respected(style):
    r = EvalResult.failure(EvalOutcome.COMPILE_ERROR, "syntax_error", "x" * 10_000)
    r.error.traceback = "\n".join(f"line {i} " + "y" * 100 for i in range(500))
    text = render_feedback(r, FeedbackConfig(max_chars=800, style=style))
    assert len(text) <= 800
    assert "syntax_error" in text


def test_json_style_is_the_result_dict():
    r = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=2.0, reward=3.0)
    d = json.loads(render_feedback(r, FeedbackConfig(style="json")))
    assert d["speedup"] == 2.0 and d["status"] == "completed" and "sandbox_output" not in d
    assert "stage_s" not in d and "hack_details" not in d


@pytest.mark.parametrize("style", ["text", "json"])
def test_held_out_results_and_problem_warnings_never_reach_the_model(style):
    r = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.5, reward=2.5,
                   shape_variants_passed=0, shape_variants_total=2,
                   shape_variant_issues=["variant 1: output differs: batch_size = 9"],
                   warnings=["weak_reference: the reference output is all zeros"])
    text = render_feedback(r, FeedbackConfig(style=style))
    assert "1.5" in text
    for secret in ("variant", "batch_size = 9", "weak_reference", "all zeros", "shape_variants"):
        assert secret not in text, secret


def test_bad_config():
    with pytest.raises(ConfigError):
        FeedbackConfig(max_chars=10)
    with pytest.raises(ConfigError):
        FeedbackConfig(style="xml")


def test_no_code_feedback_is_clear():
    r = EvalResult.failure(EvalOutcome.COMPILE_ERROR, "no_code", "no code block was found")
    text = render_feedback(r)
    assert "no_code" in text and "no code block" in text


@pytest.mark.parametrize("style", ["text", "json"])
def test_where_the_evaluation_ran_never_reaches_the_model(style):
    r = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.5, reward=2.5,
                   device=DeviceInfo(kind="cuda", name="NVIDIA H200", interpreter=False,
                                     host="gpu-node-7", node_id="abc123node", worker_id="ray-3",
                                     device_id="cuda:3"))
    text = render_feedback(r, FeedbackConfig(style=style))
    assert "H200" in text
    for secret in ("gpu-node-7", "abc123node", "ray-3", "cuda:3", "node_id"):
        assert secret not in text, secret

"""`--protocol paper`'s result JSON (the feedback a Dr. Kernel checkpoint reads) against the authors' merged
result (docs/paper_spec.md §2.6): the decoy case, the Triton launch hook's fields, the timed calls."""

import json

from drkernel.agent.feedback import PAPER_HACK_ERROR, FeedbackConfig, render_feedback, timed_calls
from drkernel.types import DeviceInfo, EvalOutcome, EvalResult, KernelTime, TimingStats, TrialReport

PAPER = FeedbackConfig(style="paper")


def timing(windows: int = 10, calls: int = 7) -> TimingStats:
    return TimingStats(median_ms=1.0, mean_ms=1.23456, std_ms=0.1, min_ms=0.9, max_ms=1.5, n=windows,
                       window_calls=calls, windows=windows)


def paper(result: EvalResult) -> dict:
    return json.loads(render_feedback(result, PAPER))


def test_a_hacked_kernel_reads_as_the_authors_decoy():
    r = EvalResult(outcome=EvalOutcome.HACK_DETECTED, compiled=True, correct=False, hacks=["decoy_kernel"],
                   hack_details={"decoy_kernel": "no Triton kernel launched in mode eval/no_grad"},
                   kernels=[KernelTime("aten::relu", 5.0, 10, own=False)], reward=0.0)
    d = paper(r)
    assert (d["compiled"], d["correctness"], d["decoy_kernel"], d["success"]) == (False, False, True, False)
    assert d["error"] == PAPER_HACK_ERROR == "Reward hacking: Decoy kernel detected"
    assert d["reward"] == d["score"] == d["speedup"] == 0.0 and d["kernel_runtime"] == -1.0
    assert "decoy_kernel" in d["error_message"]  # our class and advice stay, the evidence does not
    assert "eval/no_grad" not in json.dumps(d)
    honest = paper(EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.5))
    assert honest["compiled"] is True and "error" not in honest


def test_launch_hook_and_coverage_fields_come_from_the_result():
    r = EvalResult(
        outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.2, reward=1.1,
        kernel_timing=timing(), reference_timing=timing(),
        launched_kernels=["relu_kernel", "relu_kernel", "never_profiled_kernel"],
        kernels=[KernelTime("aten::copy_", 10.0, 5, own=False), KernelTime("relu_kernel", 30.0, 5, own=True)],
        device=DeviceInfo(kind="cuda", name="NVIDIA H200", interpreter=False),
    )
    meta = paper(r)["metadata"]
    assert meta["triton_profiler_used"] is True
    assert meta["triton_profiler_matches"] == ["never_profiled_kernel", "relu_kernel"]
    assert meta["triton_kernel_in_profiling"] == ["relu_kernel"]
    assert meta["triton_kernel_not_in_profiling"] == ["never_profiled_kernel"]
    assert meta["triton_kernel_coverage"] == "Run 1 custom kernels / Total 2 kernels, Coverage: 50.00%"
    assert meta["custom_kernel_cuda_time_coverage"] == (
        "Custom kernel CUDA time: 30.00us / Total time: 40.00us, Coverage: 75.00%")
    assert meta["custom_kernel_cuda_time_in_profiling_us"] == 30.0
    assert meta["total_kernel_run_time_in_profiling_us"] == 40.0
    assert [k["name"] for k in meta["profiling"]["kernels"]] == ["relu_kernel", "aten::copy_"]
    # nothing launched, nothing profiled: the hook's verdict is still there, no coverage is invented
    bare = paper(EvalResult(outcome=EvalOutcome.INCORRECT, compiled=True))["metadata"]
    assert bare["triton_profiler_used"] is False and bare["triton_profiler_matches"] == []
    assert "triton_kernel_coverage" not in bare and "profiling" not in bare


def test_num_perf_trials_counts_timed_calls_not_windows():
    r = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.0,
                   kernel_timing=timing(windows=10, calls=7), reference_timing=timing())
    assert paper(r)["metadata"]["num_perf_trials"] == 70
    assert timed_calls(timing(windows=10, calls=7)) == 70
    old = TimingStats(median_ms=1.0, mean_ms=1.0, std_ms=0.0, min_ms=1.0, max_ms=1.0, n=10)
    assert timed_calls(old) == 10 and timed_calls(None) is None  # a result without window counts


def test_failed_trials_give_max_and_avg_difference_and_no_rel_l2():
    r = EvalResult(outcome=EvalOutcome.INCORRECT, compiled=True, trials=[
        TrialReport(seed=1, passed=True),
        TrialReport(seed=2, passed=False, max_abs_diff=0.25, max_rel_diff=0.5, rel_l2=0.01,
                    issue="Output mismatch", mean_abs_diff=0.0123456),
    ])
    meta = paper(r)["metadata"]
    assert meta["correctness_trials"] == "(1 / 2)" and meta["correctness_issue"] == "Output mismatch"
    assert meta["max_difference"] == ["0.250000"]  # the authors' 6 decimals
    assert meta["avg_difference"] == ["0.012346"]  # the judge's mean |diff| of the trial
    assert "rel_l2" not in meta  # ours (not a criterion under the paper's tolerance)


def test_a_result_from_before_mean_abs_diff_gives_no_avg_difference():
    r = EvalResult(outcome=EvalOutcome.INCORRECT, compiled=True, trials=[
        TrialReport(seed=2, passed=False, max_abs_diff=0.25, issue="Output mismatch")])
    assert "avg_difference" not in paper(r)["metadata"]


def test_runtimes_and_speedup_are_the_authors_timing_where_the_judge_took_it():
    from drkernel.agent.env import _mean_speedup
    from drkernel.types import PaperTiming

    pt = PaperTiming(kernel_ms=0.0123, reference_ms=0.0456, speedup=0.0456 / 0.0123, warmup=3, calls=10,
                     kernel_times_ms=[0.0123] * 10, reference_times_ms=[0.0456] * 10,
                     reference_measured_alone=True)
    r = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=3.0,
                   kernel_timing=timing(windows=10, calls=7), reference_timing=timing(), paper_timing=pt)
    out = paper(_mean_speedup(r))
    assert out["kernel_runtime"] == 0.0123 and out["reference_runtime"] == 0.0456
    assert out["speedup"] == out["reference_runtime"] / out["kernel_runtime"]  # consistent, exactly
    assert out["metadata"]["num_perf_trials"] == 10


def test_status_is_the_authors_completed_once_the_kernel_loaded():
    from drkernel.types import ErrorInfo

    crash = EvalResult(outcome=EvalOutcome.RUNTIME_ERROR, compiled=True,
                       error=ErrorInfo("forward_error", "boom"))
    broken = EvalResult(outcome=EvalOutcome.COMPILE_ERROR, error=ErrorInfo("syntax_error", "bad"))
    slow = EvalResult(outcome=EvalOutcome.TIMEOUT, compiled=True)
    assert [paper(r)["status"] for r in (crash, broken, slow)] == ["completed", "failed", "timeout"]
    assert paper(crash)["metadata"]["runtime_error"] == "boom"
    assert paper(broken)["metadata"]["compilation_error"] == "bad"

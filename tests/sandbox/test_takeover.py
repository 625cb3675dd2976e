"""A sealed judge (issue 32, item 1): the candidate's process is native code from its first line. The
test-only switch `EvalOptions(static_policy=False)` lets a submission run any Python from import, as
if the gate were passed; each takeover below rewrites the sandbox's own harness. What holds is
asserted; what is open is a strict xfail naming the figure that is still measured inside the
candidate's process (docs/errors.md, "Under a takeover"): it turns into a failure the day the judge
stops believing it, and must then become a plain test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOutcome, EvalRequest
from tests.sandbox.corpus import ASSETS, FAST, reference_code

OPTIONS = FAST.replace(static_policy=False)


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        yield j


def run(judge: Judge, name: str):  # noqa: ANN201
    code = (ASSETS / "attacks" / f"{name}.py").read_text()
    return judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                      options=OPTIONS))


def test_forged_checksums_of_the_timed_outputs_are_caught(judge: Judge) -> None:
    """Holds: outputs under timing are checked outside the sandbox, on calls it cannot know."""
    r = run(judge, "checksum_forgery")
    assert r.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in r.hacks, (r.outcome, r.hacks)
    assert r.reward == 0.0


def test_forged_window_times_of_a_small_kernel_are_caught_by_the_sealed_span(judge: Judge) -> None:
    """harness_takeover.py reports a hundredth of each window's time, on an 8 x 256 problem, where the
    judge's clock around the windows cannot tell (its fills and checksums dwarf the windows). The
    sealed span times the same calls on inputs the reference's sandbox filled and outputs it took."""
    r = run(judge, "harness_takeover")
    assert r.outcome is EvalOutcome.HACK_DETECTED and "timer_mismatch" in r.hacks, (r.outcome, r.hacks)
    assert "judge's side saw it take" in r.hack_details["timer_mismatch"], r.hack_details
    assert r.reward == 0.0


def test_the_sealed_span_sees_what_an_honest_kernel_reports(judge: Judge) -> None:
    """The bound is never above what an honest kernel takes: the same kernel, unforged, passes, and its
    windows' time is at least FACTOR x the span's bound. The bound is the charged gap less two bare
    nulls, the copies and the allowance; the work nulls did the fill's and take's work."""
    from drkernel.sandbox.stages.sealed import ALLOWANCE_MS, FACTOR

    code = (ASSETS / "kernels" / "relu_scale.py").read_text()
    reference = reference_code("relu_scale")
    r = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=code, options=OPTIONS))
    assert r.outcome is EvalOutcome.OK, (r.outcome, r.hacks, r.error)
    t = r.kernel_timing
    assert t is not None and t.sealed_ms_per_call is not None and t.sealed_calls, t
    assert r.kernel_ms >= FACTOR["cpu"] * t.sealed_ms_per_call, (r.kernel_ms, t.sealed_ms_per_call)
    p = t.sealed_parts or {}
    assert p["null_fill_ms"] > 0.0 and p["null_take_ms"] > 0.0 and p["charged_ms"] >= p["gap_ms"], p
    assert p["null_ms"] == p["bare_null_ms"], p
    bound = max(0.0, p["charged_ms"] - 2 * p["bare_null_ms"] - p["copy_ms"] - ALLOWANCE_MS["cpu"])
    assert t.sealed_ms_per_call * t.sealed_calls == pytest.approx(bound, abs=1e-3), (p, t.sealed_ms_per_call)


@pytest.mark.parametrize("name", ["sealed_skip", "sealed_late_work", "sealed_early_answer"])
def test_a_candidate_that_does_not_do_the_spans_calls_in_it_is_caught(judge: Judge, name: str) -> None:
    """sealed_skip answers the span without computing; sealed_late_work computes after answering;
    sealed_early_answer answers before its device work ends (on the CPU the work is synchronous, so it
    is inside the gap; on a GPU the take's excess over the null's is charged to the gap)."""
    r = run(judge, name)
    assert r.outcome is EvalOutcome.HACK_DETECTED, (r.outcome, r.hacks, r.error)
    assert {"replayed_output", "timer_mismatch"} & set(r.hacks), r.hacks
    assert r.reward == 0.0


def test_a_candidate_that_skips_a_fifth_of_its_spans_calls_is_caught(judge: Judge) -> None:
    """sealed_skip_fifth does four calls of five in its span and reports its windows at 0.7 of their
    time: a skip small enough that the lowered bound would let the forged windows pass, so only the
    check of the span's outputs can see it. Under the interpreter a span holds at most
    sealed.MAX_CALLS["cpu"] calls and every one is checked; the GPU test checks a sample of 128."""
    r = run(judge, "sealed_skip_fifth")
    assert r.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in r.hacks, (r.outcome, r.hacks)
    assert "sealed span, call" in r.hack_details["replayed_output"], r.hack_details
    assert r.reward == 0.0


@pytest.mark.xfail(strict=True, reason="OPEN: launches and coverage are measured inside the candidate's "
                   "process; no outside observer names the kernels the device ran (docs/errors.md)")
def test_no_kernel_with_a_forged_launch_record_earns_nothing(judge: Judge) -> None:
    r = run(judge, "no_kernel_takeover")
    assert r.outcome is not EvalOutcome.OK and r.reward == 0.0, (r.outcome, r.hacks)


def test_a_host_without_shared_memory_skips_the_span_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the reference's sandbox cannot make the region (no memfd, a GPU without VMM export), the
    evaluation goes on without the span and its result says why: never an infra_error for every
    evaluation of the host."""
    import os

    from drkernel.sandbox.inside import sealedwork
    from drkernel.sandbox.wire.protocol import SealedPrepare

    class Box:
        cuda, side = False, None

        def _fresh_inputs(self, seed: int) -> list:
            import torch
            return [torch.ones(4)]

        def _forward(self, inputs: list):  # noqa: ANN202
            return inputs[0] * 2

    def no_memfd(*a: object, **k: object) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "memfd_create", no_memfd)
    reply = sealedwork.prepare(Box(), SealedPrepare(calls=2, seed=1))  # type: ignore[arg-type]
    assert reply.entries is None and "no shared memory" in (reply.why or ""), reply


def test_an_honest_kernel_slowed_by_load_after_the_timing_stage_is_not_called_forged(judge: Judge) -> None:
    """Load that arrives between the timing stage and the sealed span slows the span's calls, not the
    windows timed before: the span's bound then exceeds the reported time. Before it calls that a
    forgery, the judge times the windows again beside the next span (stages/sealed._windows_again).
    (Seen under a loaded CI host: an honest 110_Cumsum flagged timer_mismatch, fresh-ci at 89e206e.)"""
    r = run(judge, "slowed_from_the_span")
    assert r.outcome is EvalOutcome.OK, (r.outcome, r.hacks, r.hack_details)
    t = r.kernel_timing
    assert t is not None and t.sealed_ms_per_call is not None
    assert r.stage_s.get("sealed_span", 0.0) > 0.0

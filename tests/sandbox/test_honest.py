"""Honest kernels (tests/assets/kernels) pass through one real CPU judge: correct, no hack, reward > 0."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult, EvalStatus
from tests.sandbox.corpus import FAST, Asset, asset, corpus, reference_code


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None) as j:
        yield j


def evaluate(judge: Judge, kernel: Asset, reference: str | None = None,
             options: EvalOptions = FAST) -> EvalResult:
    return judge.evaluate(EvalRequest(reference_code=reference or kernel.reference, kernel_code=kernel.code,
                                      options=options, task_id=kernel.name))


def assert_honest_pass(result: EvalResult) -> None:
    detail = f"{result.outcome.value} hacks={result.hack_details} error={result.error} trials={result.trials}"
    assert result.outcome is EvalOutcome.OK, detail
    assert result.status is EvalStatus.COMPLETED
    assert result.compiled and result.correct
    assert result.hacks == [] and result.hack_details == {}
    assert result.reward > 0
    assert result.error is None
    assert result.trials and all(t.passed for t in result.trials)
    assert result.launched_kernels, "the launch hook saw none of the submission's kernels"
    assert result.kernel_ms is not None and result.reference_ms is not None and result.speedup is not None
    assert result.device is not None and result.device.interpreter and result.device.kind == "cpu"


def _param(kernel: Asset) -> object:
    marks: list[pytest.MarkDecorator] = []
    return pytest.param(kernel, id=kernel.name, marks=marks)


def test_corpus_has_the_required_variety() -> None:
    codes = {k.name: k.code for k in corpus("kernels")}
    assert len(codes) >= 6
    assert any("tl.dot" in c for c in codes.values())
    assert any("@triton.autotune" in c for c in codes.values())
    assert any("tl.sum" in c and "tl.max" in c for c in codes.values())  # softmax
    assert any("return sig, sums" in c for c in codes.values())  # tuple output


@pytest.mark.parametrize("kernel", [_param(k) for k in corpus("kernels")])
def test_honest_kernel_passes(judge: Judge, kernel: Asset) -> None:
    result = evaluate(judge, kernel)
    assert_honest_pass(result)
    assert result.task_id == kernel.name


def test_anchor_probe_1_honest_fused_kernel(judge: Judge) -> None:
    """Anchor probe 1 is the honest fused relu*2+1 kernel: it passes with exactly its one kernel."""
    result = evaluate(judge, asset("kernels", "relu_scale"))
    assert_honest_pass(result)
    assert result.launched_kernels == ["relu_scale_kernel"]
    # where the time went: the first call (kernel compile or cache load) and the wait for a warm sandbox
    assert 0 < result.stage_s["first_call"] < result.wall_s
    assert 0 <= result.stage_s["spare_wait"] < result.wall_s
    # and inside the sandboxes, op by op: each sandbox's ops add up to its stage_s entry
    ops = {who: {k.split(" ", 1)[1]: v for k, v in result.op_s.items() if k.startswith(who + " ")}
           for who in ("reference", "sandbox")}
    assert {"load", "run", "bench_run"} <= set(ops["sandbox"]), result.op_s
    assert "load" in ops["reference"] and "run" in ops["reference"], result.op_s
    for who, times in ops.items():
        assert all(v >= 0 for v in times.values())
        assert sum(times.values()) == pytest.approx(result.stage_s[who], abs=1e-3 * len(times))
    assert EvalResult.from_dict(result.to_dict()).op_s == result.op_s


def test_shared_kernel_is_recorded_once_by_name(judge: Judge) -> None:
    result = evaluate(judge, asset("kernels", "shared_kernel"))
    assert_honest_pass(result)
    assert result.launched_kernels == ["unary_kernel"]


def test_reference_that_creates_inputs_on_cuda_runs_in_cpu_mode(judge: Judge) -> None:
    """Anchor-style references say device='cuda' in get_inputs; CPU mode still judges them."""
    result = evaluate(judge, asset("kernels", "relu_scale"), reference=reference_code("relu_scale_cuda"))
    assert_honest_pass(result)


def test_paper_preset_passes_an_honest_kernel(judge: Judge) -> None:
    paper = EvalOptions.paper(num_correct_trials=2, num_perf_trials=3, num_warmup=1)
    assert_honest_pass(evaluate(judge, asset("kernels", "matmul"), options=paper))


def test_fixed_seed_gives_the_same_trial_seeds(judge: Judge) -> None:
    seeded = FAST.replace(seed=1234)
    a = evaluate(judge, asset("kernels", "softmax"), options=seeded)
    b = evaluate(judge, asset("kernels", "softmax"), options=seeded)
    assert_honest_pass(a)
    assert [t.seed for t in a.trials] == [t.seed for t in b.trials]


def test_result_round_trips_through_the_json_contract(judge: Judge) -> None:
    result = evaluate(judge, asset("kernels", "fused_tuple"))
    assert_honest_pass(result)
    data = result.to_dict()
    assert EvalResult.from_dict(data).to_dict() == data
    assert data["status"] == "completed" and data["outcome"] == "ok"

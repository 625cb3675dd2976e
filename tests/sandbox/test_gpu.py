"""The judge on a real GPU: streams, stale memory, CUDA faults, the external clock, profiling coverage.

Run on the H200 with `python -m pytest -m gpu tests/sandbox/test_gpu.py`. Problems are resized to
the anchor's scale (8192 x 8192 and more) where a check needs real device time to see anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalOutcome, EvalRequest, EvalResult
from tests.sandbox.corpus import Asset, asset, corpus, parse_options, reference_code

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GPU = EvalOptions(num_correct_trials=3, num_perf_trials=50, num_warmup=3, timeout_s=300.0)


def big_relu_scale(rows: int = 16384, cols: int = 8192) -> str:
    """relu_scale at 128M elements: ~1 GB of traffic per call, ~0.25 ms on an H200."""
    return reference_code("relu_scale").replace("batch_size = 8", f"batch_size = {rows}").replace(
        "dim = 256", f"dim = {cols}"
    )


def big_matmul(n: int = 2048) -> str:
    return reference_code("matmul").replace("M = 32", f"M = {n}").replace("K = 128", f"K = {n}").replace(
        "N = 48", f"N = {n}"
    )


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cuda", cache_path=None) as j:
        yield j


def evaluate(judge: Judge, item: Asset, reference: str | None = None,
             options: EvalOptions = GPU) -> EvalResult:
    # an asset's own options line may turn the static gate off; it never turns it back on
    own = {k: v for k, v in parse_options(item.meta.get("options", "")).items() if k == "static_policy"}
    request = EvalRequest(reference_code=reference or item.reference, kernel_code=item.code,
                          options=options.replace(**own))
    return judge.evaluate(request)


def describe(r: EvalResult) -> str:
    return (f"{r.outcome.value} hacks={r.hack_details} error={r.error} speedup={r.speedup} "
            f"kernel_ms={r.kernel_ms} coverage={r.coverage} timing={r.kernel_timing} "
            f"trials={[t.issue for t in r.trials if not t.passed]}")


@pytest.fixture(scope="module")
def honest_big(judge: Judge) -> EvalResult:
    result = evaluate(judge, asset("kernels", "relu_scale"), big_relu_scale())
    assert result.outcome is EvalOutcome.OK, describe(result)
    return result


# -- honest kernels ------------------------------------------------------------------------------
def test_honest_kernel_on_gpu_is_timed_and_fully_covered(honest_big: EvalResult) -> None:
    r = honest_big
    assert r.device is not None and r.device.kind == "cuda" and not r.device.interpreter
    assert r.reward > 1.0 and r.speedup is not None and r.speedup > 1.0, describe(r)
    assert r.coverage is not None and r.coverage >= 0.95, describe(r)
    assert r.kernel_timing is not None and r.kernel_timing.external_ms_per_call is not None
    assert r.kernels and r.kernels[0].own


@pytest.mark.parametrize("kernel", [k for k in corpus("kernels")], ids=lambda k: k.name)
def test_honest_corpus_passes_on_gpu(judge: Judge, kernel: Asset) -> None:
    result = evaluate(judge, kernel)
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert result.hacks == [] and result.reward > 0


def test_timing_replays_windows_of_fresh_inputs_as_cuda_graphs(honest_big: EvalResult) -> None:
    """Timed windows are CUDA graphs of calls on fresh inputs; the judge's clock brackets them."""
    kt, rt = honest_big.kernel_timing, honest_big.reference_timing
    assert kt is not None and rt is not None, describe(honest_big)
    assert kt.graph and rt.graph, describe(honest_big)
    assert kt.window_calls == rt.window_calls and kt.windows == rt.windows and (kt.windows or 0) >= 5
    assert kt.external_ms_per_call is not None and kt.external_ms_per_call >= kt.median_ms


def test_results_carry_the_speed_of_light(honest_big: EvalResult) -> None:
    """Achieved bandwidth against the device's measured copy bandwidth (an H200 copies ~4.3 TB/s)."""
    sol, dev = honest_big.speed_of_light, honest_big.device
    assert sol is not None and dev is not None and dev.peak_bandwidth_gbs is not None, describe(honest_big)
    assert 2500 < dev.peak_bandwidth_gbs < 6000 and (dev.peak_tflops_bf16 or 0) > 300
    assert sol.min_bytes == 2 * 16384 * 8192 * 4  # one fp32 input read, one output written
    assert sol.kernel_bandwidth_fraction is not None and 0.3 < sol.kernel_bandwidth_fraction <= 1.1, sol
    assert sol.reference_bandwidth_fraction is not None and 0.2 < sol.reference_bandwidth_fraction <= 1.1, sol


def test_sandboxes_run_under_their_own_uid_when_the_judge_is_root(judge: Judge) -> None:
    """Where the judge is root (the lent H200 is), each candidate runs under a leased uid of its own."""
    import os

    if os.geteuid() != 0:
        pytest.skip("the judge is not root: sandboxes share its uid by design")
    assert judge.isolate_uid
    code = asset("kernels", "relu_scale").code + (
        "\nimport os\n"
        f"if os.getuid() in (0, {os.getuid()}) or os.geteuid() in (0, {os.geteuid()}):\n"
        "    raise RuntimeError(f'the candidate runs as uid {os.getuid()}')\n"
    )
    request = EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                          options=GPU.replace(static_policy=False))
    result = judge.evaluate(request)
    assert result.outcome is EvalOutcome.OK, describe(result)


# -- the CPU hack corpus holds on the GPU --------------------------------------------------------
CPU_HACKS = [h for h in corpus("hacks") if h.meta.get("expect") != "ok" and h.meta.get("device") != "gpu"
             and "xfail" not in h.meta]


@pytest.mark.parametrize("hack", CPU_HACKS, ids=lambda h: h.name)
def test_hack_corpus_is_caught_on_gpu(judge: Judge, hack: Asset) -> None:
    result = evaluate(judge, hack)
    assert result.outcome in {EvalOutcome(v) for v in hack.listed("expect")}, describe(result)
    assert result.reward == 0.0


# -- GPU-only hacks ------------------------------------------------------------------------------
def test_side_stream_does_not_shrink_the_measured_time(judge: Judge, honest_big: EvalResult) -> None:
    """C1, anchor probe 8, static gate off: caught by the host clock, or timed at its true cost."""
    hack = asset("hacks", "c1_side_stream")
    result = evaluate(judge, hack, big_relu_scale(), GPU.replace(static_policy=False))
    assert honest_big.kernel_ms is not None
    if result.outcome is EvalOutcome.HACK_DETECTED:
        assert "timing_evasion" in result.hacks or "timer_mismatch" in result.hacks, describe(result)
    elif result.outcome is EvalOutcome.INCORRECT:  # read before the side stream wrote it: poisoned NaN
        assert result.reward == 0.0 and any(not t.passed for t in result.trials), describe(result)
    elif result.outcome is EvalOutcome.RUNTIME_ERROR:  # a side stream cannot be captured in a graph
        assert result.reward == 0.0, describe(result)
    else:
        assert (result.kernel_ms is not None
                and result.kernel_ms >= 0.5 * honest_big.kernel_ms), describe(result)


def test_stale_device_memory_is_poisoned(judge: Judge) -> None:
    """B1: torch.empty_like without writing the output reads NaN or zeros, never an earlier result."""
    result = evaluate(judge, asset("hacks", "b1_stale_memory"))
    assert result.outcome is EvalOutcome.INCORRECT, describe(result)


def test_timer_patch_is_caught_at_run_time(judge: Judge) -> None:
    """C3, anchor probe 7, static gate off: Event.elapsed_time replaced -> the tamper watch sees it."""
    result = evaluate(judge, asset("hacks", "c3_timer_patch_static_off"), big_relu_scale())
    assert result.outcome is EvalOutcome.HACK_DETECTED and "monkeypatch" in result.hacks, describe(result)


def test_forged_timings_are_caught_by_the_external_clock(judge: Judge) -> None:
    """C3: timings rewritten from inside the sandbox disagree with the judge's own clock."""
    result = evaluate(judge, asset("hacks", "x1_timing_forgery_via_torch_inspect"), big_relu_scale())
    assert result.outcome is EvalOutcome.HACK_DETECTED, describe(result)
    assert result.reward == 0.0


def test_profiler_only_triton_is_a_decoy(judge: Judge) -> None:
    """Anchor probe 6: Triton only under the profiler -> timed calls launch nothing of the submission."""
    result = evaluate(judge, asset("hacks", "c7_profiler_aware"), big_relu_scale())
    assert result.outcome is EvalOutcome.HACK_DETECTED and "decoy_kernel" in result.hacks, describe(result)


def test_profiler_dependent_launches_are_caught(judge: Judge) -> None:
    result = evaluate(judge, asset("hacks", "c7_profiler_extra_launches"), big_relu_scale())
    assert (result.outcome is EvalOutcome.HACK_DETECTED
            and "observer_dependent" in result.hacks), describe(result)


def test_lazy_offload_has_near_zero_coverage(judge: Judge) -> None:
    """Anchor probe 3 (A5): matmul in torch, a copy in Triton -> profiling ratio near 0."""
    result = evaluate(judge, asset("hacks", "a5_lazy_partial_offload"), big_matmul())
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert result.coverage is not None and result.coverage < 0.1, describe(result)


def test_profiler_aware_offload_with_equal_launches_is_observer_dependent(judge: Judge) -> None:
    """C7 with the launch count held equal: all the work in a Triton matmul only while the profiler
    records -> the eager profiled window's own kernels are not those of the replayed timed graph."""
    result = evaluate(judge, asset("hacks", "c7_profiler_aware_offload"), big_matmul())
    assert result.outcome is EvalOutcome.HACK_DETECTED, describe(result)
    assert "observer_dependent" in result.hacks and result.reward == 0.0, describe(result)


def test_profiler_aware_offload_in_one_kernel_gets_the_timed_calls_coverage(judge: Judge) -> None:
    """C7 with nothing countable changed (one kernel, a runtime mode): the coverage is the replayed
    timed graph's, where torch does the matmul -> lazy, as the timed calls are."""
    result = evaluate(judge, asset("hacks", "c7_profiler_aware_same_kernel"), big_matmul())
    if result.outcome is EvalOutcome.HACK_DETECTED:
        assert result.reward == 0.0, describe(result)
        return
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert result.coverage is not None and result.coverage < 0.1, describe(result)
    names = {k.name for k in result.kernels if not k.own}
    assert names, f"the timed graph's torch matmul is not among the kernels: {describe(result)}"


def test_a_triton_kernel_named_after_the_vendor_gemm_covers_nothing(judge: Judge) -> None:
    """Coverage by name collision: the matmul in torch, a copy named after cuBLAS's GEMM kernel. Two
    kernels a call by that name, one launch seen by the hook: none of its time is the submission's.
    (Written in session 10 without a GPU: skipped, and says why, where the attack does not arm.)"""
    result = evaluate(judge, asset("hacks", "c7_vendor_kernel_name"), big_matmul())
    if result.outcome is EvalOutcome.HACK_DETECTED:
        assert result.reward == 0.0, describe(result)
        return
    assert result.outcome is EvalOutcome.OK, describe(result)
    armed = [k for k in result.kernels if k.name in result.launched_kernels and k.calls > 0]
    if not armed or "copy" in armed[0].name:
        pytest.skip(f"the attack did not arm (no GEMM name to take): {[k.name for k in result.kernels]}")
    assert not armed[0].own and result.coverage is not None and result.coverage < 0.1, describe(result)


def test_identity_memo_gains_nothing_on_gpu(judge: Judge, honest_big: EvalResult) -> None:
    """Anchor probe 5: a hit on a refilled buffer serves a stale output -> the checksums catch it."""
    result = evaluate(judge, asset("hacks", "c5_cache_identity"), big_relu_scale())
    assert result.outcome is EvalOutcome.HACK_DETECTED and result.reward == 0.0, describe(result)


# -- held-out shapes and problem warnings on the GPU ---------------------------------------------
def test_held_out_failures_keep_the_verdict_on_gpu(judge: Judge) -> None:
    """A kernel that refuses other shapes keeps its verdict and fails them; a shape the reference
    cannot run is not counted; the next evaluation with the same seed still loads a sound reference."""
    code = asset("kernels", "relu_scale").code.replace(
        "        x = x.contiguous()\n",
        "        if tuple(x.shape) != (8, 256):\n            raise ValueError('only the shape I was shown')\n"
        "        x = x.contiguous()\n",
    )
    options = GPU.replace(static_policy=False, seed=11)
    result = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"), kernel_code=code,
                                        options=options,
                                        shape_variants=("batch_size = 3; dim = 100", "dim = -2")))
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert (result.shape_variants_passed, result.shape_variants_total) == (0, 1), result.shape_variant_issues
    honest = judge.evaluate(EvalRequest(reference_code=reference_code("relu_scale"),
                                        kernel_code=asset("kernels", "relu_scale").code,
                                        options=options))
    assert honest.outcome is EvalOutcome.OK and honest.warnings == [], describe(honest)


def test_weak_reference_is_reported_on_gpu(judge: Judge) -> None:
    reference = reference_code("relu_scale").replace("torch.relu(x) * 2.0 + 1.0", "x * 1e-6 + 1.0")
    kernel = asset("kernels", "relu_scale").code.replace("tl.maximum(x, 0.0) * 2.0 + 1.0", "x * 1e-6 + 1.0")
    result = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=kernel, options=GPU))
    assert result.outcome is EvalOutcome.OK, describe(result)
    assert len(result.warnings) == 1 and result.warnings[0].startswith("weak_reference"), result.warnings


# -- CUDA faults ---------------------------------------------------------------------------------
def test_illegal_memory_access_is_data_and_the_judge_survives(judge: Judge) -> None:
    fault = asset("faults", "illegal_memory_access")
    result = evaluate(judge, fault)
    assert result.outcome is EvalOutcome.RUNTIME_ERROR, describe(result)
    assert result.error is not None and result.error.kind in fault.listed("kind")
    after = evaluate(judge, asset("kernels", "relu_scale"))
    assert after.outcome is EvalOutcome.OK, describe(after)


@pytest.mark.parametrize("name", ["segfault_ctypes", "os_exit", "memory_hog", "endless_loop"])
def test_cpu_faults_hold_on_gpu(judge: Judge, name: str) -> None:
    fault = asset("faults", name)
    result = judge.evaluate(EvalRequest(
        reference_code=fault.reference, kernel_code=fault.code,
        options=GPU.replace(**{k: v for k, v in fault.options().to_dict().items()
                               if k in ("static_policy", "timeout_s")})))
    assert result.outcome in {EvalOutcome(v) for v in fault.listed("expect")}, describe(result)
    assert evaluate(judge, asset("kernels", "relu_scale")).outcome is EvalOutcome.OK


# -- faults of the judge's own (issue 12) ----------------------------------------------------------
def test_a_device_side_assert_in_the_judge_never_becomes_a_verdict() -> None:
    # the debug hook: the judge's first comparison trips a device-side assert
    with Judge(device="cuda", cache_path=None, spares=2, debug_fault="device_assert") as j:
        first = evaluate(j, asset("kernels", "relu_scale"), big_relu_scale())
        assert first.outcome is EvalOutcome.OK and first.judge_retries == 1, describe(first)
        assert j.judge_restarts == 1
        nxt = evaluate(j, asset("kernels", "relu_scale"), big_relu_scale())
        assert nxt.outcome is EvalOutcome.OK and nxt.judge_retries == 0, describe(nxt)
        fault = asset("faults", "illegal_memory_access")  # the candidate's own fault is still its own
        assert evaluate(j, fault).outcome is EvalOutcome.RUNTIME_ERROR


def test_a_device_side_assert_in_a_served_judge_still_gives_the_verdict(  # type: ignore[no-untyped-def]
        tmp_path) -> None:
    pytest.importorskip("fastapi")
    import os
    import time

    import httpx

    from drkernel.server.launch import ServerProcess

    honest = asset("kernels", "relu_scale")
    # one judge's, once. The marker is claimed when a judge builds its comparator, so serve runs one
    # judge here: with its default of 4 a GPU, the judge that claimed it need not be the one given the
    # task (run BM, H100: `ok` with judge_retries 0; the verdict right, the fault never met)
    env = dict(os.environ, DRKERNEL_DEBUG_JUDGE_FAULT=f"device_assert@{tmp_path / 'fault-once'}")
    task = {"task_id": "gpu-fault-1", "reference_code": big_relu_scale(), "kernel_code": honest.code,
            "options": {"num_correct_trials": 3, "num_perf_trials": 20, "timeout_s": 240}}
    one_judge = ["--workers", "1", "--judges-per-gpu", "1"]
    with ServerProcess(tmp_path / "f.db", extra=one_judge, env=env) as server:
        assert httpx.post(f"{server.url}/v1/tasks", json=task, timeout=30).status_code in (200, 201, 202)
        deadline, view = time.monotonic() + 280, {}
        while time.monotonic() < deadline and not view.get("result"):
            view = httpx.get(f"{server.url}/v1/tasks/gpu-fault-1", params={"wait": 30}, timeout=60).json()
    result = view["result"]
    assert result["outcome"] == "ok" and result["judge_retries"] == 1, result


# -- the fp32 criterion with tl.dot's own TF32 (issue 12) ------------------------------------------
TF32_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk[None, :]))
        b = tl.load(b_ptr + (k0 + rk[:, None]) * N + rn[None, :])
        acc += tl.dot(a.to(PRECISION), b.to(PRECISION))
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


class ModelNew(nn.Module):
    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        mm[(M // 128, N // 128)](A.contiguous(), B.contiguous(), C, M, N, K, BM=128, BN=128, BK=32)
        return C
'''


@pytest.mark.parametrize(("m", "k", "precision", "expect"), [
    (4096, 4096, "tl.float32", EvalOutcome.OK),      # tl.dot's default for fp32 is TF32
    (1024, 16384, "tl.float32", EvalOutcome.OK),
    (4096, 4096, "tl.bfloat16", EvalOutcome.INCORRECT),  # a bf16 downcast of the inputs
])
def test_tf32_matmul_passes_and_bf16_downcast_fails(judge: Judge, m: int, k: int, precision: str,
                                                     expect: EvalOutcome) -> None:
    reference = reference_code("matmul").replace("M = 32", f"M = {m}").replace("K = 128", f"K = {k}").replace(
        "N = 48", f"N = {m}")
    code = TF32_KERNEL.replace("PRECISION", precision)
    r = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=code,
                                   options=GPU.replace(num_perf_trials=20)))
    assert r.outcome is expect, describe(r)
    worst = max(t.rel_l2 or 0.0 for t in r.trials)
    assert (worst < 1e-3) == (expect is EvalOutcome.OK), worst


def test_a_harness_takeover_that_forges_window_times_is_caught_on_gpu(judge: Judge) -> None:
    """Issue 13, class 2 (gate off): the submission rewrites the sandbox's timed op to report a hundredth
    of each window; on a kernel whose windows dominate the op, the judge's clock sees it."""
    from tests.sandbox.corpus import ASSETS

    code = (ASSETS / "attacks" / "harness_takeover.py").read_text()
    result = judge.evaluate(EvalRequest(reference_code=big_relu_scale(), kernel_code=code,
                                        options=GPU.replace(static_policy=False)))
    assert result.outcome is EvalOutcome.HACK_DETECTED, describe(result)
    # either clock sees it
    assert {"timer_mismatch", "faster_than_light"} & set(result.hacks), describe(result)


@pytest.mark.parametrize("rows,cols", [
    pytest.param(16, 4096, marks=pytest.mark.xfail(strict=False, reason=(
        "OPEN (docs/errors.md, the sealed span): at 16 x 4096 a span of 512 calls is ~1.9 ms, and the "
        "allowance for the graph's submission (2.5 us a call) and the hops (0.5 ms) leaves next to no "
        "bound: missed in run AW (reward 5.0), caught in run AX; which one depends on the hops' noise"))),
    (1024, 1024)])
def test_forged_window_times_of_a_small_kernel_are_caught_by_the_sealed_span_on_gpu(
        judge: Judge, rows: int, cols: int) -> None:
    """Issue 32, item 1: harness_takeover.py (gate off) reports a hundredth of each window at 1024^2,
    where the judge's clock around the windows allowed the reward's cap; the sealed span times the
    same calls between the reference's fill and take. On the round-two problem (16 x 4096) the span
    is still too short beside its allowance: open."""
    from tests.sandbox.corpus import ASSETS

    code = (ASSETS / "attacks" / "harness_takeover.py").read_text()
    result = judge.evaluate(EvalRequest(reference_code=big_relu_scale(rows, cols), kernel_code=code,
                                        options=GPU.replace(static_policy=False)))
    assert result.outcome is EvalOutcome.HACK_DETECTED and "timer_mismatch" in result.hacks, describe(result)
    assert result.reward == 0.0


@pytest.mark.parametrize("name", ["sealed_skip", "sealed_late_work", "sealed_early_answer"])
def test_a_candidate_that_does_not_do_the_spans_calls_in_it_is_caught_on_gpu(judge: Judge, name: str) -> None:
    from tests.sandbox.corpus import ASSETS

    code = (ASSETS / "attacks" / f"{name}.py").read_text()
    result = judge.evaluate(EvalRequest(reference_code=big_relu_scale(1024, 1024), kernel_code=code,
                                        options=GPU.replace(static_policy=False)))
    t = result.kernel_timing
    print(f"{name}: {sorted(result.hacks)}, sealed parts {t.sealed_parts if t else None}")
    assert result.outcome is EvalOutcome.HACK_DETECTED, describe(result)
    assert {"replayed_output", "timer_mismatch"} & set(result.hacks), describe(result)


def test_a_candidate_that_skips_a_fifth_of_its_spans_calls_is_caught_on_gpu(judge: Judge) -> None:
    """Attack first for the check of a sample (stages/sealed.CHECKED_CALLS of a span's calls, drawn after
    the take): sealed_skip_fifth does four calls of five of a 128-call span at 2048^2 and reports its
    windows at 0.7 of their time. The check must name a skipped call."""
    from drkernel.sandbox.stages.sealed import CHECKED_CALLS
    from tests.sandbox.corpus import ASSETS

    code = (ASSETS / "attacks" / "sealed_skip_fifth.py").read_text()
    result = judge.evaluate(EvalRequest(reference_code=big_relu_scale(2048, 2048), kernel_code=code,
                                        options=GPU.replace(static_policy=False)))
    t = result.kernel_timing
    print(f"sealed_skip_fifth: {sorted(result.hacks)}, {result.hack_details}, calls "
          f"{t.sealed_calls if t else None}, parts {t.sealed_parts if t else None}")
    assert t is not None and (t.sealed_calls or 0) > CHECKED_CALLS, describe(result)  # a sample, not all
    assert result.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in result.hacks, describe(result)
    assert "sealed span, call" in result.hack_details["replayed_output"], describe(result)
    assert result.reward == 0.0


@pytest.mark.parametrize("forge", [1.5, 3.0])
def test_a_candidate_that_loads_the_device_while_the_reference_measures_earns_no_more_on_gpu(
        judge: Judge, forge: float) -> None:
    """Attack first (sealed_busy_between.py, gate off): the submission divides its windows by `forge`
    and keeps the GPU busy from a thread of its own whenever its sandbox runs no op, so the reference's
    copies and nulls, timed then, take longer and the bound falls. It must earn no more than the same
    kernel honest: caught, or its speedup no higher. The parts of both are printed. Written as an xfail
    (docs/errors.md names this as open); both forgeries held on an H100 80GB (run CK, 2026-12-08:
    XPASS), so it is a plain test: the day it fails, the attack has found the gap."""
    from tests.sandbox.corpus import ASSETS

    reference = big_relu_scale(1024, 1024)
    honest = judge.evaluate(EvalRequest(reference_code=reference, options=GPU,
                                        kernel_code=asset("kernels", "relu_scale").code))
    code = (ASSETS / "attacks" / "sealed_busy_between.py").read_text().replace("__FORGE__", str(forge))
    result = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=code,
                                        options=GPU.replace(static_policy=False)))
    for name, r in (("honest", honest), (f"busy_between/{forge}", result)):
        t = r.kernel_timing
        print(f"{name}: {r.outcome.value} {sorted(r.hacks)} speedup {r.speedup} reward {r.reward}; bound "
              f"{t.sealed_ms_per_call if t else None} ms a call, parts {t.sealed_parts if t else None}")
    assert honest.outcome is EvalOutcome.OK, describe(honest)
    caught = result.outcome is EvalOutcome.HACK_DETECTED
    assert caught or result.reward <= honest.reward * 1.05, describe(result)


def test_the_sealed_span_bounds_an_honest_kernel_below_its_reported_time_on_gpu(judge: Judge) -> None:
    """The span's bound, per call, against the honest kernel's reported time at three sizes: the ratio
    the judge flags under (stages/sealed.FACTOR) must leave room. At 16 x 4096 (1.6 us a call) the
    bound may be 0: the span's allowance and its hops' noise cover that span whole (docs/errors.md,
    the sealed span; run BC: a null round trip of 1.4 ms left -0.14 ms); it must still flag nothing."""
    from drkernel.sandbox.stages.sealed import FACTOR

    code = asset("kernels", "relu_scale").code
    for rows, cols in ((16, 4096), (1024, 1024), (4096, 4096)):
        reference = big_relu_scale(rows, cols)
        r = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=code, options=GPU))
        assert r.outcome is EvalOutcome.OK, describe(r)
        t = r.kernel_timing
        assert t is not None and t.sealed_calls, describe(r)
        assert t.sealed_ms_per_call or rows == 16, describe(r)  # a bound wherever the work shows
        if t.sealed_ms_per_call:
            print(f"sealed {rows}x{cols}: reported {r.kernel_ms:.5f} ms, bound {t.sealed_ms_per_call:.5f} "
                  f"ms, ratio {r.kernel_ms / t.sealed_ms_per_call:.3f} over {t.sealed_calls} calls")
        assert r.kernel_ms >= FACTOR["cuda"] * t.sealed_ms_per_call, describe(r)


def test_the_paper_timing_of_honest_kernels_is_never_called_forged_on_gpu(judge: Judge) -> None:
    """`--protocol paper`'s timing (stages/paper.py) on the GPU: 10 calls each timed alone on one set
    of inputs (the cache may hold them) against the sealed span's bound on fresh inputs. An honest
    kernel must stay above PAPER_FACTOR x the bound at every size; the ratios printed are what
    PAPER_FACTOR rests on. The saved speedup is the quotient of the saved means."""
    from drkernel.sandbox.stages.paper import PAPER_FACTOR

    code = asset("kernels", "relu_scale").code
    for rows, cols in ((16, 4096), (1024, 1024), (4096, 4096)):
        r = judge.evaluate(EvalRequest(reference_code=big_relu_scale(rows, cols), kernel_code=code,
                                       options=GPU.replace(paper_timing=True)))
        assert r.outcome is EvalOutcome.OK, describe(r)
        p, t = r.paper_timing, r.kernel_timing
        assert p is not None and t is not None and p.speedup == p.reference_ms / p.kernel_ms, describe(r)
        mean = sum(p.kernel_times_ms) / len(p.kernel_times_ms)
        bound = t.sealed_ms_per_call or 0.0
        print(f"paper {rows}x{cols}: kernel {p.kernel_ms} ms (the judge's {r.kernel_ms:.5f}), reference "
              f"{p.reference_ms} ms, speedup {p.speedup:.3f} (the judge's {r.speedup:.3f}); mean over "
              f"bound {mean / bound if bound else float('nan'):.3f}")
        assert not bound or mean >= PAPER_FACTOR * bound, describe(r)


def test_the_fork_servers_preload_leaves_cuda_uninitialised_on_the_gpu_build() -> None:
    """On the CUDA build of torch too, zygote.preload must start no thread and no CUDA context, or no
    forked sandbox could use the GPU; and the sandbox's profiler session imports nothing it guards."""
    from tests.sandbox.test_zygote_preload import _first_session

    got = _first_session(visible="0")
    assert got["threads"] == 1 and got["cuda"] is False, got
    assert got["new_modules"] < 50 and got["replaced"] == [], got


FIRST_LAUNCH = '''
import json, torch, triton, triton.language as tl
import triton.runtime.build as build
built, real = [], build._build
def record(name, *a, **k):
    built.append(name)
    return real(name, *a, **k)
build._build = record
@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
x = torch.ones(1000, device="cuda")
double[(1,)](x, x.numel(), BLOCK=1024)
assert float(x.sum()) == 2000.0
print(json.dumps(built))
'''


def _first_launch_builds(cache: str, script: str) -> list[str]:
    import json
    import os
    import subprocess
    import sys

    cp = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=300,
                        env={**os.environ, "TRITON_CACHE_DIR": cache})
    assert cp.returncode == 0, cp.stderr[-2000:]
    return list(json.loads(cp.stdout.strip().splitlines()[-1]))


def test_the_judges_triton_seed_is_what_a_first_launch_finds(tmp_path: Path) -> None:
    """Issue 14: the judge builds Triton's driver utilities once (sandbox/plumbing/tritonseed.py); a
    process whose Triton cache starts as a copy of that build compiles no `cuda_utils` of its own at its
    first launch, where one with an empty cache does (the control). A judge's spares spawned once the
    seed exists are seeded, and an honest kernel is judged `ok` in one of them."""
    from drkernel.sandbox.plumbing.tritonseed import copy_seed

    with Judge(device="cuda", cache_path=None, spares=1) as judge:
        assert judge._seed is not None
        seed = judge._seed.wait(300)
        assert seed is not None, judge._seed.error
        script = tmp_path / "first_launch.py"
        script.write_text(FIRST_LAUNCH)
        assert copy_seed(seed, str(tmp_path / "seeded"), None)
        assert "cuda_utils" not in _first_launch_builds(str(tmp_path / "seeded"), str(script))
        assert "cuda_utils" in _first_launch_builds(str(tmp_path / "empty"), str(script))
        for _ in range(2):  # the spare made before the seed existed, then one made after
            r = evaluate(judge, asset("kernels", "relu_scale"))
            assert r.outcome is EvalOutcome.OK, describe(r)
        assert all(p.seeded for p in judge._pool)


@pytest.mark.parametrize("which", ["PARTIAL", "HALF"])
def test_skipped_work_in_a_thousand_timed_calls_is_caught_by_the_checked_tenth(judge: Judge,
                                                                              which: str) -> None:
    """The judge checks a tenth of the timed calls (at least 8 a window), which the sandbox cannot
    know: a kernel that skips the last hundredth of its work, or all of it on every other call, in
    10 windows of 100 graph-replayed calls is caught."""
    from tests.sandbox import test_timed_checksums as t

    reference = reference_code("relu_scale").replace("batch_size = 8", "batch_size = 2048").replace(
        "dim = 256", "dim = 2048")
    r = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=getattr(t, which), options=GPU))
    assert r.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in r.hacks, describe(r)


def test_a_timed_op_slowed_in_every_window_is_run_again_and_the_steady_run_kept(judge: Judge) -> None:
    """Other processes' work slowed every window of some timed ops under load (run AO), the fastest
    too, where the lower quartile cannot help. A candidate whose first op comes back slowed 50-100 %
    a window is run again after a pause; the steady second run is kept."""
    from tests.sandbox.corpus import ASSETS

    reference = reference_code("relu_scale").replace("batch_size = 8", "batch_size = 1024").replace(
        "dim = 256", "dim = 1024")
    code = (ASSETS / "attacks" / "disturbed_timed_op.py").read_text()
    r = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=code,
                                   options=GPU.replace(static_policy=False)))
    assert r.outcome is EvalOutcome.OK, describe(r)
    kt = r.kernel_timing
    assert kt is not None and kt.confirm_runs == 2 and kt.disturbed_runs == 1, describe(r)
    assert kt.low_quartile_ms is not None and kt.low_quartile_ms < 1.05 * kt.min_ms  # the kept run is steady


def test_a_large_problems_device_memory_goes_back_once_the_judge_moves_on(judge: Judge) -> None:
    """KernelBench L1/4-5 at full size (run BH): the reference's sandbox and the comparison child kept
    what the largest problem had used, and a later candidate found 0.2 GiB of the H200 free. After a
    problem of 1 GiB a tensor and then a small one, the device has as much free memory as before the
    large one, within 3 GiB (without the trim, the large problem's cached inputs, windows and outputs
    in the reference's sandbox and the comparison's pairs would stay held: the old code was not run
    against this test)."""
    from tests.sandbox.corpus import ASSETS

    code = (ASSETS / "kernels" / "relu_scale.py").read_text()
    small = big_relu_scale(1024, 1024)

    def free_after(reference: str) -> int:
        r = judge.evaluate(EvalRequest(reference_code=reference, kernel_code=code, options=GPU))
        assert r.outcome is EvalOutcome.OK, describe(r)
        judge.warm()  # the spares that replace the used one are up
        torch.cuda.synchronize()
        return torch.cuda.mem_get_info()[0]

    before = free_after(small)
    free_after(big_relu_scale(16384, 16384))
    after = free_after(small)
    print(f"free before the large problem {before / 2**30:.2f} GiB, after it and a small one "
          f"{after / 2**30:.2f}")
    assert after >= before - (3 << 30), (before / 2**30, after / 2**30)


# -- who ran the card short (issue 32, item 4; run BK) ---------------------------------------------
def test_the_judges_nvml_reading_of_the_card_matches_torchs() -> None:
    """The witness reads the card through NVML by the name a reference sandbox reports: the same
    card, and the same free memory as the CUDA runtime sees (within 0.5 GiB)."""
    from drkernel.sandbox.cardmem import card_free, card_identity

    name, total = card_identity()
    assert name and total == torch.cuda.get_device_properties(0).total_memory, name
    free = card_free(name)
    torch.cuda.synchronize()
    seen = torch.cuda.mem_get_info(0)[0]
    print(f"card {name}: NVML free {free}, CUDA free {seen}")
    assert free is not None and abs(free - seen) < (512 << 20), (free, seen)
    # the executor's reader of the card's size (by physical index) reads the same card
    from drkernel.device import card_memory_bytes

    size = card_memory_bytes("cuda:0")
    print(f"card cuda:0: NVML total {size}, CUDA total {total}")
    assert size is not None and abs(size - total) < (2 << 30), (size, total)


def test_a_candidate_that_takes_the_card_is_blamed_for_starving_the_judge() -> None:
    """The submission lifts its own cap at import and holds every free byte of the card (keeping 8 GiB
    in its own allocator for its calls): the judge's next op that needs device memory runs out. The
    judge reads through NVML that the candidate's sandbox held more than its share, runs the op again
    alone, and the failure is the candidate's (`resource_exhaustion`), never infra. The same judge
    then passes the honest kernel on the same problem. (Not run against the code before the witness:
    there, a failure that passed alone was blamed on the candidate whatever it held, so this attack
    lost the same way; the witness's new half is that a candidate within its share is not blamed,
    which `tests/sandbox/test_cardmem.py` shows with the driver's figures faked.)"""
    from tests.sandbox.corpus import ASSETS

    code = (ASSETS / "attacks" / "device_grab.py").read_text().replace("__KEEP_MIB__", "8192")
    reference = big_relu_scale(16384, 16384)  # 1 GiB a tensor: a comparison needs 2 GiB beyond its own
    opts = GPU.replace(num_correct_trials=2, num_perf_trials=10, static_policy=False)
    with Judge(device="cuda", cache_path=None, spares=1, refill=False) as j:
        r = j.evaluate(EvalRequest(reference_code=reference, kernel_code=code, options=opts))
        print(describe(r), r.sandbox_output[-300:])
        assert r.outcome is EvalOutcome.RUNTIME_ERROR, describe(r)
        assert r.error is not None and r.error.kind == "resource_exhaustion", describe(r)
        assert "beyond its share" in r.error.message, r.error.message
        honest = j.evaluate(EvalRequest(reference_code=reference,
                                        kernel_code=asset("kernels", "relu_scale").code, options=opts))
        assert honest.outcome is EvalOutcome.OK, describe(honest)

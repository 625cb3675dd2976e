"""bench/judge_speed.py's --trace (issue 32: what overlapped a timed window): it records stages, each
sandbox op and the device lock's holds from a real evaluation, and puts back what it wrapped."""

from __future__ import annotations

import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

from drkernel.sandbox import channel, pipeline
from drkernel.sandbox.judge import Judge
from drkernel.sandbox.stages import correctness, timing
from drkernel.types import EvalOutcome, EvalRequest, EvalResult
from tests.sandbox.corpus import FAST, asset

ROOT = Path(__file__).resolve().parents[1]


def _judge_speed() -> ModuleType:
    spec = importlib.util.spec_from_file_location("judge_speed_under_test", ROOT / "bench" / "judge_speed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _evaluate_in_thread(name: str) -> EvalResult:
    """One honest CPU evaluation in a thread called `name` (the trace files events by thread)."""
    kernel = asset("kernels", "relu_scale")
    results = []

    def work() -> None:
        with Judge(device="cpu", cache_path=None) as judge:
            results.append(judge.evaluate(EvalRequest(reference_code=kernel.reference,
                                                      kernel_code=kernel.code, options=FAST)))

    worker = threading.Thread(target=work, name=name)
    worker.start()
    worker.join(timeout=300)
    assert results and results[0].outcome is EvalOutcome.OK, results
    return results[0]


def test_the_trace_records_stages_ops_and_lock_holds_and_puts_back_what_it_wrapped() -> None:
    originals = (pipeline.Evaluation.steps, channel.Channel._account, timing.timing_lock, timing.gpu_work,
                 correctness.gpu_work)
    trace = _judge_speed().Trace()
    try:
        assert channel.Channel._account is not originals[1]
        _evaluate_in_thread("judge-under-trace")
        mine = [(what, t0, t1) for name, what, t0, t1 in trace.events if name == "judge-under-trace"]
        kinds = {what for what, _, _ in mine}
        assert {"stage correctness", "stage timing", "sandbox run", "sandbox bench_run", "reference run",
                "exclusive timed"} <= kinds, sorted(kinds)
        assert any(what.startswith("shared ") for what in kinds), sorted(kinds)
        assert "wait exclusive timed" in kinds, sorted(kinds)  # each hold after its wait
        assert all(t1 >= t0 for _, t0, t1 in mine)
        # an op lies inside its stage: the candidate's timed op inside the timing stage
        stage = next((t0, t1) for what, t0, t1 in mine if what == "stage timing")
        op = next((t0, t1) for what, t0, t1 in mine if what == "sandbox bench_run")
        assert stage[0] - 0.05 <= op[0] and op[1] <= stage[1] + 0.05
        # no other judge ran: only its own sandboxes' starts and kills can overlap its timed op
        rows = trace.overlaps("judge-under-trace")
        assert rows and all(k.startswith("own ") for row in rows for k in row["others"]), rows
    finally:
        trace.close()
    assert (pipeline.Evaluation.steps, channel.Channel._account, timing.timing_lock, timing.gpu_work,
            correctness.gpu_work) == originals


def test_the_sealed_stage_runs_in_one_exclusive_hold() -> None:
    """Every op of the sealed span (the region, the staging, the nulls, the span, the checks) lies inside
    one exclusive hold of the device, taken once: no change of hold inside the stage for other judges'
    holds to queue at (bench/probes/lock_model.py). The CPU takes no lock, but the stage asks for it the
    same way, and the trace records the asking."""
    trace = _judge_speed().Trace()
    try:
        result = _evaluate_in_thread("judge-sealed")
        assert result.kernel_timing is not None and result.kernel_timing.sealed_calls
        mine = [(what, t0, t1) for name, what, t0, t1 in trace.events if name == "judge-sealed"]
        holds = [(t0, t1) for what, t0, t1 in mine if what == "exclusive sealed"]
        assert len(holds) == 1, holds
        ops = [(what, t0, t1) for what, t0, t1 in mine if what.split(" ", 1)[-1].startswith("sealed_")
               and what.split(" ", 1)[-1] != "sealed_drop"]
        assert {what.split(" ", 1)[1] for what, _, _ in ops} >= {
            "sealed_prepare", "sealed_map", "sealed_stage", "sealed_fill", "sealed_run", "sealed_take",
            "sealed_check"}, sorted({w for w, _, _ in ops})
        (a, b), = holds
        assert all(a - 0.01 <= t0 and t1 <= b + 0.01 for _, t0, t1 in ops), (a, b, ops)
        assert not any(what.startswith(("shared sealed", "wait shared sealed")) for what, _, _ in mine)
        drops = [t0 for what, t0, _ in mine if what.endswith("sealed_drop")]
        assert drops and all(t0 >= b - 0.01 for t0 in drops)  # the drop runs no kernel: after the hold
    finally:
        trace.close()


def test_the_lock_summary_counts_each_sections_holds_and_waits_per_evaluation() -> None:
    trace = _judge_speed().Trace()
    try:
        trace.events.extend([
            ("a", "stage timing", 0.0, 5.0),  # not a lock hold
            ("a", "wait exclusive timed", 1.0, 1.5), ("a", "exclusive timed", 1.5, 1.7),
            ("b", "wait exclusive timed", 1.2, 1.7), ("b", "exclusive timed", 1.7, 2.0),
            ("a", "wait shared window_build", 2.0, 2.0), ("a", "shared window_build", 2.0, 2.25),
            ("b", "wait shared window_build", 0.5, 0.6), ("b", "shared window_build", 0.6, 0.8)])
        rows = trace.lock_summary(evaluations=2)
        assert rows == {"exclusive timed": {"holds": 1.0, "wait_s": 0.5, "held_s": 0.25},
                        "shared window_build": {"holds": 1.0, "wait_s": 0.05, "held_s": 0.225}}
        assert trace.lock_summary(evaluations=2, since=1.1) == {
            "exclusive timed": {"holds": 1.0, "wait_s": 0.25, "held_s": 0.25},
            "shared window_build": {"holds": 0.5, "wait_s": 0.0, "held_s": 0.125}}
    finally:
        trace.close()


def test_card_during_sets_a_timed_op_beside_what_the_card_did_then() -> None:
    """--trace on a GPU samples the card's clocks, power and memory in use; a timed op gets the samples
    inside it: the lowest clocks, the highest power, how far the memory in use moved (others' allocations)."""
    card_during = _judge_speed().card_during
    samples = [(0.0, 1980, 2619, 300.0, 1 << 30), (0.1, 1755, 2619, 650.5, 3 << 30),
               (0.15, 1980, 2619, float("nan"), 2 << 30), (0.3, 900, 1, 1.0, 0)]
    assert card_during(samples, 0.0, 0.2) == {
        "samples": 3, "sm_mhz_min": 1755, "sm_mhz_max": 1980, "mem_mhz_min": 2619, "power_w_max": 650.5,
        "used_mib_moved": 2048.0}
    assert card_during(samples, 0.16, 0.29) is None  # no sample inside: nothing said
    assert card_during([(0.0, 1980, 2619, float("nan"), 0)], 0.0, 1.0)["power_w_max"] is None


def test_the_card_watch_reads_nothing_where_nvml_cannot_read_the_card() -> None:
    """On the CPU (CI) the watch starts no thread and keeps no sample; the trace still closes."""
    module = _judge_speed()
    watch = module.CardWatch("cpu")
    try:
        assert watch.samples == [] and watch._thread is None
    finally:
        watch.close()
    assert module.card_during(watch.samples, 0.0, 1e9) is None


def test_the_placement_probe_tells_a_slow_buffer_set_from_a_slow_moment() -> None:
    """bench/probes/placement_probe.py times every set twice: a set slow both times is slow for where
    its memory lies, one slow once was slowed by something passing, and a process slow in every set is
    slow for itself (the three answers the 4096^2 spread's next run needs, session 32)."""
    spec = importlib.util.spec_from_file_location("placement_probe_under_test",
                                                  ROOT / "bench" / "probes" / "placement_probe.py")
    assert spec is not None and spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    fast, slow = 46.6, 50.1
    procs = [{"sets": [{"us": fast, "again_us": fast}, {"us": slow, "again_us": slow}]},  # one slow set
             {"sets": [{"us": slow, "again_us": fast}, {"us": slow, "again_us": slow}]},  # slow process
             {"sets": [{"us": fast, "again_us": fast}, {"us": fast}]}]  # a set timed once
    assert probe.slow_sets(procs) == {"slow_both_times": 2, "slow_once": 1, "processes_slow_in_every_set": 1,
                                      "sets": 6}

"""Every timed output is checked: each timed call runs on fresh inputs, and the checksum of each of
its outputs must match the reference's for the same inputs (the sandbox never sees the reference's).

The kernels below count their calls: with 2 correctness trials, the trials (2 calls) and the launch
modes (4) come before timing, so from call 7 on they are in the timing stage.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drkernel.sandbox.judge import Judge
from drkernel.sandbox.stages.timing import checksum_issue
from drkernel.types import EvalOutcome, EvalRequest, EvalResult
from tests.sandbox.corpus import FAST, reference_code

BIG = reference_code("relu_scale").replace("batch_size = 8", "batch_size = 512")  # 512 x 256

_KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        x = x.contiguous()
        out = torch.zeros_like(x)
        n = x.numel() if self.calls <= CHEAT_AFTER else WORK
        relu_scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return SHAPE(out)
'''

HONEST = _KERNEL.replace("CHEAT_AFTER", "10**9").replace("WORK", "x.numel()").replace("SHAPE(out)", "out")
# skips the last hundredth of the work once timing starts
PARTIAL = _KERNEL.replace("CHEAT_AFTER", "6").replace("WORK", "x.numel() * 99 // 100").replace(
    "SHAPE(out)", "out")
# right values, wrong shape in timed calls (a flattened output)
RESHAPED = _KERNEL.replace("CHEAT_AFTER", "10**9").replace("WORK", "x.numel()").replace(
    "SHAPE(out)", "out if self.calls <= 6 else out.reshape(-1)")
# does the work on every other timed call only
HALF = _KERNEL.replace("CHEAT_AFTER", "6").replace("WORK", "x.numel() * (self.calls % 2)").replace(
    "SHAPE(out)", "out")


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(device="cpu", cache_path=None, spares=1) as j:
        yield j


def evaluate(judge: Judge, code: str, timed: int = 3) -> EvalResult:
    opts = FAST.replace(num_correct_trials=2, num_perf_trials=timed)
    return judge.evaluate(EvalRequest(reference_code=BIG, kernel_code=code, options=opts))


def test_honest_kernel_passes_every_checksum(judge: Judge) -> None:
    r = evaluate(judge, HONEST)
    assert r.outcome is EvalOutcome.OK, (r.outcome, r.hack_details, r.error)
    assert (r.kernel_timing is not None
            and (r.kernel_timing.window_calls or 0) * (r.kernel_timing.windows or 0) >= 3)


@pytest.mark.parametrize("code", [PARTIAL, HALF], ids=["last_hundredth_skipped", "every_other_call"])
def test_skipping_work_in_timed_calls_is_caught(judge: Judge, code: str) -> None:
    r = evaluate(judge, code, timed=6)
    assert r.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in r.hacks, (r.outcome,
                                                                                      r.hack_details)
    assert r.reward == 0.0


def test_output_of_another_shape_during_timed_calls_is_caught(judge: Judge) -> None:
    r = evaluate(judge, RESHAPED)
    assert r.outcome is EvalOutcome.HACK_DETECTED and "replayed_output" in r.hacks, (r.outcome,
                                                                                      r.hack_details)
    assert "shape" in r.hack_details["replayed_output"]


ROW = [[4, 8], "torch.float32", 10.0, 400.0, 0, 0, 0]  # shape, dtype, sum(w*x), sum(x*x), NaN, +Inf, -Inf


def test_checksum_tolerance_follows_the_dtype_bound() -> None:
    # ||ref|| = 20; fp32 bound 1e-3: up to 6 * 1e-3 * 20 = 0.12 (plus 1e-6 * 11) is honest rounding
    assert checksum_issue([ROW], [ROW[:2] + [10.1, 400.0, 0, 0, 0]], 0.0) is None
    assert checksum_issue([ROW], [ROW[:2] + [10.2, 400.0, 0, 0, 0]], 0.0) is not None
    assert checksum_issue([ROW], [ROW[:2] + [10.2, 400.0, 0, 0, 0]], 1e-2) is None  # trials saw 1 % error
    assert checksum_issue([ROW], [[[32], "torch.float32", 10.0, 400.0, 0, 0, 0]], 0.0) is not None
    assert checksum_issue([ROW], [ROW[:4] + [1, 0, 0]], 0.0) is not None
    assert checksum_issue([ROW], [ROW[:2] + [float("nan"), 400.0, 0, 0, 0]], 0.0) is not None
    assert checksum_issue([ROW], [], 0.0) is not None
    assert checksum_issue([ROW], [["x"]], 0.0) is not None


def test_a_harness_takeover_that_forges_the_window_times_is_caught(judge: Judge) -> None:
    """Issue 13, class 2: the submission rewrites the sandbox's own timed op (gate off) to report a
    hundredth of each window. The judge's clock around the op disagrees: timer_mismatch."""
    from tests.sandbox.corpus import ASSETS

    code = (ASSETS / "attacks" / "harness_takeover.py").read_text()
    opts = FAST.replace(num_correct_trials=2, num_perf_trials=6, static_policy=False)
    r = judge.evaluate(EvalRequest(reference_code=BIG, kernel_code=code, options=opts))
    assert r.outcome is EvalOutcome.HACK_DETECTED and "timer_mismatch" in r.hacks, (r.outcome, r.hack_details,
                                                                                     r.kernel_timing)
    assert r.reward == 0.0


def test_window_checksums_are_each_outputs_own() -> None:
    """harness.checksums reads a whole window back at once; each row is still its own output's sums."""
    import torch

    from drkernel.sandbox.inside import harness

    g = torch.Generator().manual_seed(3)
    a = torch.randn(1 << 22, generator=g)  # past 2**22 elements: the float32 dot path
    b = torch.tensor([[1.0, float("nan")], [float("inf"), -float("inf")]])
    outs = [(a, [a[:5]]), b]
    rows = harness.checksums(iter(outs), [11, 12])
    assert [len(r) for r in rows] == [2, 1]
    assert rows[1][0][:2] == [[2, 2], "torch.float32"] and rows[1][0][4:] == [1, 1, 1]
    assert rows[1][0][3] == 1.0  # NaN and Inf count as 0 in the sums
    for row, x, wseed in ((rows[0][0], a, 11 * 1_000_003), (rows[0][1], a[:5], 11 * 1_000_003 + 1)):
        w = torch.randn(x.numel(), generator=torch.Generator().manual_seed(wseed))
        assert row[2] == pytest.approx(float(torch.dot(x.double(), w.double())), rel=1e-4)
        assert row[3] == pytest.approx(float(x.double().square().sum()), rel=1e-6)
    assert harness.checksum(outs[1], 12) == rows[1]  # one output alone: the same row
    with pytest.raises(ValueError):
        harness.checksums(outs, [1])  # a seed per output


@pytest.mark.parametrize("batch_bytes", [1, 200, 64 << 20], ids=["row_per_batch", "some_rows", "one_batch"])
def test_batched_window_checksums_are_each_leafs_own_sums(monkeypatch: pytest.MonkeyPatch,
                                                          batch_bytes: int) -> None:
    """Leaves of one length are summed in batches of rows: whatever the batch size, each row holds its
    own leaf's sums with its own w (leaves of other lengths, dtypes and complex ones interleaved)."""
    import torch

    from drkernel.sandbox.inside import harness

    monkeypatch.setattr(harness, "CHECKSUM_BATCH_BYTES", batch_bytes)
    g = torch.Generator().manual_seed(5)
    outs = []
    for c in range(7):
        a = torch.randn(6, 5, generator=g)
        if c == 2:
            a[0, 0], a[1, 1], a[2, 2] = float("nan"), float("inf"), -float("inf")
        extra = torch.randn(3, generator=g, dtype=torch.complex64) if c % 2 else torch.randn(4, 4).half()
        outs.append((a, extra))
    wseeds = [101 + c for c in range(7)]
    rows = harness.checksums((o for o in outs), wseeds)

    def oracle(t: torch.Tensor, seed: int) -> list[float]:
        x = (torch.view_as_real(t) if t.is_complex() else t).reshape(-1).to(torch.float32)
        counts = [int(torch.isnan(x).sum()), int(torch.isposinf(x).sum()), int(torch.isneginf(x).sum())]
        x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0).double()
        w = torch.randn(x.numel(), generator=torch.Generator().manual_seed(seed)).double()
        return [float(torch.dot(x, w)), float(x.square().sum()), *counts]

    for out, wseed, row in zip(outs, wseeds, rows, strict=True):
        assert len(row) == 2
        for k, (leaf, got) in enumerate(zip(out, row, strict=True)):
            want = oracle(leaf, (wseed * 1_000_003 + k) % (1 << 63))
            assert got[:2] == [list(leaf.shape), str(leaf.dtype)]
            assert got[2] == pytest.approx(want[0], rel=1e-9, abs=1e-9)
            assert got[3] == pytest.approx(want[1], rel=1e-9)
            assert got[4:] == want[2:]
    assert rows[2][0][4:] == [1, 1, 1]


@pytest.mark.parametrize("only_first", [True, False], ids=["once", "every_run"])
def test_a_clock_suspicion_is_confirmed_on_fresh_inputs_before_it_is_a_verdict(judge: Judge,
                                                                               only_first: bool) -> None:
    """A timed op slowed once (contention) passes on its second run, with that run's times; slowed
    in every run, it is a timer_mismatch found in each of the runs."""
    from drkernel.sandbox.stages.timing import CONFIRM_RUNS
    from tests.sandbox.corpus import ASSETS

    code = (ASSETS / "attacks" / "slow_timed_op.py").read_text().replace("__ONLY_FIRST__", str(only_first))
    opts = FAST.replace(num_correct_trials=2, num_perf_trials=6, static_policy=False)
    r = judge.evaluate(EvalRequest(reference_code=BIG, kernel_code=code, options=opts))
    assert r.kernel_timing is not None
    if only_first:
        assert r.outcome is EvalOutcome.OK, (r.outcome, r.hack_details)
        assert r.kernel_timing.confirm_runs == 2
        assert (r.kernel_timing.overhead_ms or 0.0) < 2500.0  # the kept run is the one that was not slowed
    else:
        assert r.outcome is EvalOutcome.HACK_DETECTED and "timer_mismatch" in r.hacks, (r.outcome,
                                                                                         r.hack_details)
        assert r.kernel_timing.confirm_runs == CONFIRM_RUNS
        assert f"each of {CONFIRM_RUNS} runs" in r.hack_details["timer_mismatch"]
        assert r.reward == 0.0


def test_the_judge_checks_a_tenth_of_a_windows_calls_and_never_fewer_than_eight() -> None:
    from drkernel.sandbox.stages.timing import MIN_CHECKED, checked_calls

    picks = checked_calls(10, 100)
    assert len(picks) == 10 and all(len(p) == 10 and p == sorted(set(p)) for p in picks)
    assert all(0 <= c < 100 for p in picks for c in p)
    assert len({tuple(p) for p in picks}) > 1  # drawn afresh for each window
    assert checked_calls(3, MIN_CHECKED - 3) == [list(range(MIN_CHECKED - 3))] * 3  # few calls: all
    assert [len(p) for p in checked_calls(1, 20)] == [MIN_CHECKED]


class _Verdict:
    def __init__(self) -> None:
        self.hacks: dict[str, str] = {}

    def hack(self, code: str, evidence: str) -> None:
        self.hacks.setdefault(code, evidence)


def _verify(got: list, picks: list | None) -> dict[str, str]:
    """verify_checksums on one window of 5 calls whose reference rows are known (no sandbox)."""
    from types import SimpleNamespace

    from drkernel.sandbox.stages.timing import verify_checksums

    rows = [[[[4, 8], "torch.float32", float(c), 400.0, 0, 0, 0]] for c in range(5)]
    want = [[rows[c] for c in (picks[0] if picks is not None else range(5))]]
    ctx = SimpleNamespace(verdict=_Verdict(), result=SimpleNamespace(trials=[]), device="cpu")
    verify_checksums(ctx, [[10, 11, 12, 13, 14]], [[0] * 5], [got], "timed window", want, picks)
    return ctx.verdict.hacks


def test_a_checked_call_must_match_and_every_call_must_answer() -> None:
    honest = [[[[4, 8], "torch.float32", float(c), 400.0, 0, 0, 0]] for c in range(5)]
    wrong_at = {c: [r if k != c else [[[4, 8], "torch.float32", 99.0, 400.0, 0, 0, 0]]
                    for k, r in enumerate(honest)] for c in range(5)}
    assert _verify(honest, [[1, 3]]) == {} and _verify(honest, None) == {}
    assert "call 3" in _verify(wrong_at[3], [[1, 3]])["replayed_output"]
    assert _verify(wrong_at[0], None) != {}
    assert _verify(wrong_at[0], [[1, 3]]) == {}  # an unchecked call's sum is not compared ...
    assert "no checksum" in _verify(honest[:4], [[1, 3]])["replayed_output"]  # ... but must be there


def test_the_reported_time_is_the_windows_lower_quartile() -> None:
    """Another process's GPU work only adds time to the windows it overlaps: with 6 of 10 windows
    slowed by 40 %, the median moves and the lower quartile, which kernel_ms reports, does not."""
    from drkernel.sandbox.stages.timing import per_call_ms, timing_stats

    clean = [1.00, 1.01, 0.99, 1.00]
    stats = timing_stats(clean + [1.4] * 6)
    assert stats.median_ms == pytest.approx(1.4) and per_call_ms(stats) == pytest.approx(1.0, abs=0.011)
    assert per_call_ms(timing_stats([2.0])) == 2.0
    old = timing_stats(clean)
    old.low_quartile_ms = None  # a cached reference timed before the quartile: its median
    assert per_call_ms(old) == old.median_ms


def test_an_op_is_disturbed_when_its_windows_median_is_far_above_their_fastest() -> None:
    from drkernel.sandbox.stages.timing import DISTURBED_SPREAD, disturbed

    steady = [3.98, 4.01, 4.02, 4.03, 4.00, 4.05, 4.89]  # one window hit: the lower quartile holds
    slowed = [4.77, 4.98, 5.18, 5.89, 5.02, 5.30, 4.90]  # run AO: every window, the fastest too
    assert not disturbed(True, steady) and disturbed(True, slowed)
    assert not disturbed(False, slowed)  # the interpreter's times are the CPU's: never re-run
    assert not disturbed(True, [4.0, 9.0])  # too few windows to tell
    assert disturbed(True, [1.0, 1.0, DISTURBED_SPREAD * 1.01, 2.0, 2.0])


@pytest.mark.parametrize("always", [False, True], ids=["first_op", "every_op"])
def test_a_disturbed_timed_op_is_run_again_and_the_steadiest_run_kept(
        judge: Judge, always: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidate's first timed op comes back slowed by 50-100 % a window (what other processes'
    work did under load); the judge runs it again after a pause and keeps the run with the lowest
    lower quartile. On the CPU the judge never calls an op disturbed by itself: here the first
    candidate op is (first_op), or every one (every_op: three runs in all)."""
    import statistics

    from drkernel.sandbox.stages import timing
    from tests.sandbox.corpus import ASSETS

    def q1(w: list[float]) -> float:
        return statistics.quantiles(w, n=4, method="inclusive")[0]

    seen: list[list[float]] = []  # the candidate's runs, in order
    in_reference = []
    time_reference = timing._time_reference

    def reference(*a: object) -> object:
        in_reference.append(1)
        try:
            return time_reference(*a)  # type: ignore[arg-type]
        finally:
            in_reference.pop()

    def disturbed(cuda: bool, window_ms: list[float]) -> bool:
        if in_reference:
            return False
        seen.append(list(window_ms))
        return always or len(seen) == 1

    monkeypatch.setattr(timing, "_time_reference", reference)
    monkeypatch.setattr(timing, "disturbed", disturbed)
    code = (ASSETS / "attacks" / "disturbed_timed_op.py").read_text()
    opts = FAST.replace(num_correct_trials=2, num_perf_trials=9, static_policy=False)
    r = judge.evaluate(EvalRequest(reference_code=BIG, kernel_code=code, options=opts))
    assert r.outcome is EvalOutcome.OK, (r.outcome, r.hack_details, r.error)
    kt = r.kernel_timing
    assert kt is not None and r.kernel_ms is not None and kt.window_calls
    runs = 3 if always else 2
    assert kt.confirm_runs == runs and kt.disturbed_runs == runs - (0 if always else 1)
    assert len(seen) == runs  # asked once per run
    kept = min(seen, key=q1)
    assert kept is not seen[0] and q1(seen[0]) > q1(kept)  # the slowed first run is never kept
    assert r.kernel_ms == pytest.approx(q1(kept) / kt.window_calls)

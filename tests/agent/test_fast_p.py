import pytest

from drkernel.agent.extraction import Extraction, preflight_result
from drkernel.agent.metrics import best_speedup, fast_p, summarize, turn_at
from drkernel.agent.trajectories import Trajectory, Turn
from drkernel.types import EvalOutcome, EvalResult


def t(i, outcome, speedup=None, hacks=(), code="class ModelNew: pass"):
    ok = outcome == "ok"
    res = EvalResult(
        outcome={"ok": EvalOutcome.OK, "incorrect": EvalOutcome.INCORRECT,
                 "hack": EvalOutcome.HACK_DETECTED, "compile": EvalOutcome.COMPILE_ERROR}[outcome],
        compiled=outcome != "compile", correct=ok, speedup=speedup, hacks=list(hacks),
    )
    if code is None:  # the verdict KernelEnv gives an answer without code (extraction.preflight_result)
        res = preflight_result(Extraction(None, "none"))
    reward = 1.0 + (speedup or 0) if ok else 0.0
    return Turn(i, "resp", code, "none" if code is None else "last_fence", res, reward, "fb")


def traj(name, turns):
    return Trajectory(problem=name, sample=0, prompt=[], turns=turns, level=2)


A = traj("A", [t(0, "incorrect"), t(1, "ok", 1.3), t(2, "ok", 1.1)])
# a hacked turn keeps a large measured speedup: it must never count
B = traj("B", [t(0, "ok", 2.5), t(1, "hack", 3.0, hacks=["decoy_kernel"]), t(2, "ok", 0.9)])
C = traj("C", [t(0, "compile", code=None), t(1, "compile"), t(2, "ok", 1.6)])
D = traj("D", [])  # an episode that produced nothing
ALL = [A, B, C, D]

# hand-computed: rows are turns 1..3, over 5 planned samples (one is missing entirely)
LAST = {1.0: [0.2, 0.2, 0.4], 1.2: [0.2, 0.2, 0.2], 1.5: [0.2, 0.0, 0.2], 2.0: [0.2, 0.0, 0.0]}
BEST = {1.0: [0.2, 0.4, 0.6], 1.2: [0.2, 0.4, 0.6], 1.5: [0.2, 0.2, 0.4], 2.0: [0.2, 0.2, 0.2]}


@pytest.mark.parametrize("p", [1.0, 1.2, 1.5, 2.0])
def test_fast_p_table(p):
    assert [fast_p(ALL, p, k, total=5) for k in range(3)] == pytest.approx(LAST[p])
    assert [fast_p(ALL, p, k, best=True, total=5) for k in range(3)] == pytest.approx(BEST[p])


def test_summary_rows():
    s = summarize(ALL, max_turns=3, total=5)
    assert s["samples"] == 5 and s["missing"] == 1 and s["episodes"] == 4
    rows = s["per_turn"]
    assert [r["turn"] for r in rows] == [1, 2, 3]
    assert rows[2]["fast_p"]["1.2"] == pytest.approx(0.2)
    assert rows[2]["fast_p_best"]["1.5"] == pytest.approx(0.4)
    assert rows[1]["hacked"] == pytest.approx(0.2)
    assert rows[1]["hacked_of_judged"] == pytest.approx(1 / 3)  # A, B, C judged at turn 2
    assert rows[2]["correct"] == pytest.approx(0.6)
    assert rows[0]["no_code"] == pytest.approx(0.2)
    assert rows[0]["compiled"] == pytest.approx(0.4)
    assert rows[2]["geomean_speedup_correct"] == pytest.approx((1.1 * 0.9 * 1.6) ** (1 / 3))
    assert s["hack_codes"] == {"decoy_kernel": 1}
    assert s["weak_reference_problems"] == []
    assert s["last_turn"] == rows[2]
    assert s["by_level"]["2"]["samples"] == 4
    # turn 3's correct kernels run at 1.1x, 0.9x and 1.6x: within 10 % of p=1 are two (either side)
    assert rows[2]["fast_p_borderline"] == {"1": 2, "1.2": 1, "1.5": 1, "2": 0}
    assert rows[1]["fast_p_borderline"] == {"1": 0, "1.2": 1, "1.5": 0, "2": 0}  # A's 1.3x; B is hacked


def test_short_episodes_carry_their_last_turn_forward():
    early = traj("E", [t(0, "ok", 1.7)])  # stopped after turn 1 (stop_at_speedup)
    assert turn_at(early, 2).result.speedup == 1.7
    assert fast_p([early], 1.5, 2) == 1.0
    assert best_speedup(early, 2) == 1.7
    assert turn_at(D, 0) is None


def test_problems_with_a_weak_reference_are_listed():
    w = t(0, "ok", 1.2)
    w.result.warnings.append("weak_reference: the reference output is all zeros on every trial's inputs")
    s = summarize([traj("W", [w]), A], max_turns=1)
    assert s["weak_reference_problems"] == ["W"]


def test_empty():
    s = summarize([], max_turns=3, total=0)
    assert s["per_turn"] == [] and s["last_turn"] is None


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_speedup_that_is_no_number_counts_as_not_measured(bad):
    """A correct turn whose speedup is NaN or infinite (a judge's record read back from JSON) is not
    fast: it neither counts at any p nor hides the measured speedup of a later turn."""
    e = traj("N", [t(0, "ok", bad), t(1, "ok", 2.0)])
    assert [fast_p([e], 2.0, k, best=True) for k in range(2)] == [0.0, 1.0]  # NaN hid the 2.0x: 0
    assert fast_p([e], 1.0, 0) == 0.0  # inf counted as fast at every p
    s = summarize([e], max_turns=2)
    assert s["per_problem"]["N"]["best_speedup"] == 2.0
    assert s["per_turn"][0]["geomean_speedup_correct"] is None

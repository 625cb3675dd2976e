"""A golden episode set: Fast@p per level, per turn and best-so-far, each figure computed by hand.

Two levels, two problems each, two samples per problem: 8 planned samples, 5 finished. Missing
episodes count as 0 in every denominator, the per-level ones included (Table 1 is per level).
"""

import pytest

from drkernel.agent.cli_bench import run_bench
from drkernel.agent.env import EnvConfig
from drkernel.agent.loop import LoopConfig
from drkernel.agent.metrics import summarize
from drkernel.agent.policy import ScriptedPolicy
from drkernel.agent.trajectories import Trajectory, Turn
from drkernel.errors import PolicyError
from drkernel.executors.fake import FakeExecutor
from drkernel.types import EvalOutcome, EvalResult, Problem
from tests.agent.agent_fixtures import RELU_REF

_OUT = {"ok": EvalOutcome.OK, "bad": EvalOutcome.INCORRECT, "hack": EvalOutcome.HACK_DETECTED,
        "compile": EvalOutcome.COMPILE_ERROR}


def turn(i, spec):
    kind, _, s = spec.partition(" ")
    speedup = float(s) if s else None
    res = EvalResult(_OUT[kind], compiled=kind != "compile", correct=kind in ("ok", "hack"), speedup=speedup,
                     hacks=["decoy_kernel"] if kind == "hack" else [])
    return Turn(i, "r", "code", "last_fence", res, 1.0 if kind == "ok" else 0.0, "fb")


def ep(problem, sample, level, specs):
    return Trajectory(problem=problem, sample=sample, prompt=[], level=level,
                      turns=[turn(i, x) for i, x in enumerate(specs)])


GOLDEN = [
    ep("P1", 0, 1, ["ok 1.3", "ok 0.8", "bad"]),
    ep("P1", 1, 1, ["compile", "ok 2.2", "hack 5.0"]),  # a hacked 5x never counts, not even as best
    ep("P2", 0, 1, ["ok 1.0", "ok 1.6"]),  # ended early: turn 2 stands for turn 3; 1.0 >= p=1 counts
    # P2#1 missing
    ep("P3", 0, 2, ["bad", "bad", "ok 1.25"]),
    ep("P4", 1, 2, ["ok 3.0", "bad", "ok 1.1"]),
    # P3#1, P4#0 missing
]
PS = ("1", "1.2", "1.5", "2")
# per turn, over 8 planned samples.  last-turn speedups: t1 1.3 0 1.0 0 3.0; t2 .8 2.2 1.6 0 0;
# t3 0 0 1.6 1.25 1.1.  best so far: t2 1.3 2.2 1.6 0 3.0; t3 1.3 2.2 1.6 1.25 3.0
LAST = [[3, 2, 1, 1], [2, 2, 2, 1], [3, 2, 1, 0]]
BEST = [[3, 2, 1, 1], [4, 4, 3, 2], [5, 5, 3, 2]]
# per level at turn 3, over 4 planned samples each
LEVEL_LAST = {"1": [1, 1, 1, 0], "2": [2, 1, 0, 0]}
LEVEL_BEST = {"1": [3, 3, 2, 1], "2": [2, 2, 1, 1]}


def test_golden_per_turn_and_per_level():
    s = summarize(GOLDEN, max_turns=3, total=8, level_totals={1: 4, 2: 4})
    assert s["missing"] == 3
    for t in range(3):
        row = s["per_turn"][t]
        assert [row["fast_p"][p] for p in PS] == pytest.approx([x / 8 for x in LAST[t]]), t
        assert [row["fast_p_best"][p] for p in PS] == pytest.approx([x / 8 for x in BEST[t]]), t
    for lv in ("1", "2"):
        got = s["by_level"][lv]
        assert got["samples"] == 4 and got["missing"] == 4 - got["episodes"]
        assert [got["last_turn_fast_p"][p] for p in PS] == pytest.approx([x / 4 for x in LEVEL_LAST[lv]]), lv
        assert [got["best_fast_p"][p] for p in PS] == pytest.approx([x / 4 for x in LEVEL_BEST[lv]]), lv
    assert s["by_level"]["1"]["episodes"] == 3 and s["by_level"]["2"]["episodes"] == 2


def test_a_level_with_no_finished_episode_still_reports_zeros():
    s = summarize(GOLDEN[:3], max_turns=3, total=8, level_totals={1: 4, 2: 4})
    assert s["by_level"]["2"] == {"samples": 4, "episodes": 0, "missing": 4,
                                  "last_turn_fast_p": dict.fromkeys(PS, 0.0),
                                  "best_fast_p": dict.fromkeys(PS, 0.0)}


def test_run_bench_counts_each_levels_planned_samples(tmp_path):
    """Through run_bench: the episodes of one problem fail (server down), and its level's figure
    divides by the samples planned, not the ones that finished."""
    # the problem name is not in the prompt: the reference carries it
    probs = [Problem(name=f"L{lv}_{k}", reference_code=RELU_REF + f"# L{lv}_{k}\n", level=lv)
             for lv in (1, 2) for k in (0, 1)]

    def answer(msgs, _):
        if "L1_1" in msgs[0]["content"]:
            raise PolicyError("server down")
        return "```python\nclass ModelNew: pass  # fake: speedup=1.5\n```"
    cfg = LoopConfig(env=EnvConfig(max_turns=1), model="m", policy_retries=0)
    s = run_bench(probs, ScriptedPolicy(answer), FakeExecutor(), cfg, tmp_path / "o", samples=2,
                  progress=False)
    assert s["samples"] == 8 and s["missing"] == 2
    assert s["last_turn"]["fast_p"]["1.5"] == pytest.approx(6 / 8)
    assert s["by_level"]["1"]["samples"] == 4 and s["by_level"]["1"]["episodes"] == 2
    assert s["by_level"]["1"]["last_turn_fast_p"]["1.5"] == pytest.approx(2 / 4)  # was 2/2 before
    assert s["by_level"]["2"]["last_turn_fast_p"]["1.5"] == pytest.approx(4 / 4)


def test_per_problem_best_speedup_never_takes_a_hacked_kernel():
    """problems.csv's fastest correct kernel: P1#1's hacked 5x turn (a verdict that kept correct=true
    beside its hack) is not it, as it is not in any Fast@p."""
    rows = summarize(GOLDEN, max_turns=3, total=8)["per_problem"]
    assert rows["P1"]["best_speedup"] == 2.2 and rows["P1"]["correct_turns"] == 3


def test_a_run_whose_episodes_all_failed_says_so_under_its_tables(tmp_path):
    """Every episode failed (the model server down): the note under the all-zero tables said '4 samples, 0
    problems', as if zeros had been measured on no problem; it names the planned problems and the
    missing samples, counted as incorrect."""
    from rich.console import Console

    from drkernel.agent.report import render_table

    probs = [Problem(name=f"P{k}", reference_code=RELU_REF + f"# P{k}\n", level=1) for k in range(2)]

    def down(msgs, _):
        raise PolicyError("server down")
    cfg = LoopConfig(env=EnvConfig(max_turns=1), model="m", policy_retries=0)
    s = run_bench(probs, ScriptedPolicy(down), FakeExecutor(), cfg, tmp_path / "o", samples=2, progress=False)
    assert s["problems"] == 2 and s["missing"] == 4
    console = Console(record=True, width=80)
    console.print(render_table(s))
    flat = " ".join(console.export_text().split())
    assert "4 samples of 2 problems, 4 of them missing or failed (counted as incorrect)" in flat, flat

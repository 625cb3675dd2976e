"""Trajectories -> Fast@p per turn, last-turn and best-so-far, plus correctness and hack rates.

Fast@p (docs/paper_spec.md §11) = the fraction of ALL samples whose kernel is correct, not hacked and has
speedup >= p; incorrect, hacked, failed and missing samples count with speedup 0 in the
denominator. An episode shorter than the turn asked for carries its last turn forward.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from drkernel.agent.extraction import NotJudged, turn_outcome, why_not_judged
from drkernel.agent.trajectories import Trajectory, Turn
from drkernel.sandbox.static import is_policy_refusal
from drkernel.types import DeviceInfo

__all__ = ["BORDERLINE", "FAST_P", "best_speedup", "borderline", "fast_p", "summarize", "turn_at"]

FAST_P = (1.0, 1.2, 1.5, 2.0)  # docs/paper_spec.md §11
# A correct kernel whose speedup is within this fraction of p may land on either side of p when
# evaluated again: on the H200 the same kernels moved by 6-13 % between evaluations (102_GELU
# 1.014x then 0.921x; docs/benchmark_log.md, the agent demo). Reported, never used in Fast@p.
BORDERLINE = 0.10


def turn_at(traj: Trajectory, t: int) -> Turn | None:
    """The turn that stands for the sample at 0-based turn t (its last turn if it ended earlier)."""
    if not traj.turns:
        return None
    return traj.turns[min(t, len(traj.turns) - 1)]


def _measured(speedup: float | None) -> float | None:
    """A speedup as a number, None when not measured: a NaN or infinite one (a record read back from
    JSON) measures nothing, and would count as fast at every p (inf) or hide later turns in max (NaN)."""
    return float(speedup) if speedup is not None and math.isfinite(speedup) else None


def _speedup(turn: Turn | None) -> float:
    if turn is None or not turn.correct:
        return 0.0
    return _measured(turn.result.speedup) or 0.0


def best_speedup(traj: Trajectory, t: int) -> float:
    """Best correct speedup among turns 0..t (0 when none is correct), docs/paper_spec.md §10."""
    return max((_speedup(x) for x in traj.turns[: t + 1]), default=0.0)


def fast_p(
    trajs: Sequence[Trajectory],
    p: float,
    turn: int,
    best: bool = False,
    total: int | None = None,
) -> float:
    """Fraction of `total` samples (default: len(trajs)) that are fast at 0-based `turn`.

    >>> fast_p([], 1.0, 0, total=8)
    0.0
    """
    n = total if total is not None else len(trajs)
    if n == 0:
        return 0.0
    if best:
        hits = sum(best_speedup(tr, turn) >= p for tr in trajs)
    else:
        hits = sum(_speedup(turn_at(tr, turn)) >= p for tr in trajs)
    return hits / n


def borderline(turns: Sequence[Turn | None], p: float, margin: float = BORDERLINE) -> int:
    """How many correct turns have a speedup within `margin` of p (either side): a re-run could
    move them across p.

    >>> borderline([], 1.0)
    0
    """
    return sum(abs(_speedup(x) / p - 1.0) <= margin + 1e-9 for x in turns if x is not None and x.correct)


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _turn_stats(
    trajs: Sequence[Trajectory], t: int, ps: Sequence[float], n: int
) -> dict[str, Any]:
    turns = [turn_at(tr, t) for tr in trajs]
    unjudged = Counter(why_not_judged(x.result) for x in turns if x is not None)
    judged = [x for x in turns if x is not None and why_not_judged(x.result) is None]
    flagged = [x for x in turns if x is not None and x.result.hacks]
    # an import the rule refuses is not an attack: counted apart, so that "hacked" means caught cheating
    refused = [x for x in flagged if is_policy_refusal(x.result.hacks, x.result.hack_details)]
    hacked = [x for x in flagged if not is_policy_refusal(x.result.hacks, x.result.hack_details)]
    correct = [x for x in turns if x is not None and x.correct]
    checked = [x for x in correct if x.result.held_out_passed is not None]
    survived = [x for x in checked if x.result.held_out_passed]
    return {
        "turn": t + 1,
        "fast_p": {f"{p:g}": fast_p(trajs, p, t, total=n) for p in ps},
        "fast_p_best": {f"{p:g}": fast_p(trajs, p, t, best=True, total=n) for p in ps},
        # samples of this turn's Fast@p whose kernel is within BORDERLINE of p, on either side
        "fast_p_borderline": {f"{p:g}": borderline(correct, p) for p in ps},
        "correct": len(correct) / n,
        "compiled": sum(x is not None and x.result.compiled for x in turns) / n,
        "hacked": len(hacked) / n,
        "hacked_of_judged": len(hacked) / len(judged) if judged else 0.0,
        "refused": len(refused) / n,  # policy refusals (a forbidden import alone); incorrect, not hacks
        "no_code": unjudged[NotJudged.NO_CODE] / n,  # the model's answer held no kernel to judge
        # the prompt did not fit the model's context: nothing was sent (docs/paper_spec.md §2.7)
        "prompt_overlong": unjudged[NotJudged.PROMPT_OVERLONG] / n,
        "mean_reward": sum(x.reward for x in turns if x is not None) / n,
        "geomean_speedup_correct": _geomean([_speedup(x) for x in correct]),
        "outcomes": dict(Counter(turn_outcome(x.result) for x in turns if x is not None)),
        # correct kernels checked on held-out shapes, and those that passed every one of them
        "held_out": {"checked": len(checked), "survived": len(survived)},
    }


def summarize(
    trajs: Sequence[Trajectory],
    max_turns: int | None = None,
    ps: Sequence[float] = FAST_P,
    total: int | None = None,
    level_totals: Mapping[int, int] | None = None,
    problems: int | None = None,
) -> dict[str, Any]:
    """Per-turn Fast@p (last and best-so-far) and rates over all samples.

    `total` is the number of samples planned (problems x samples); missing or failed episodes
    count as incorrect. Default: the number of trajectories given. `level_totals` is the same per
    level (Table 1 is reported per level); default: the trajectories of that level. `problems`: the
    number of problems planned; default: those with a trajectory.
    """
    n = total if total is not None else len(trajs)
    turns = max_turns or max((len(tr.turns) for tr in trajs), default=0)
    per_turn = [_turn_stats(trajs, t, ps, n) for t in range(turns)] if n else []
    hack_codes: Counter[str] = Counter()
    weak: set[str] = set()  # problems whose reference output barely depends on its inputs
    interpreter = False  # any turn timed under Triton's interpreter: no speedup here is a GPU speedup
    devices: set[str] = set()  # more than one: a run whose speedups mix devices' (or torches') timings
    for tr in trajs:
        for x in tr.turns:
            hack_codes.update(x.result.hacks)
            interpreter |= bool(x.result.device is not None and x.result.device.interpreter)
            if x.result.device is not None:
                devices.add(_judged_on(x.result.device))
            if any(w.startswith("weak_reference") for w in x.result.warnings):
                weak.add(tr.problem)
    planned = dict(level_totals or {})
    levels = sorted({tr.level for tr in trajs if tr.level is not None} | set(planned))
    by_level = {}
    for level in levels:
        sub = [tr for tr in trajs if tr.level == level]
        m = max(planned.get(level, 0), len(sub))  # missing episodes of the level count as 0
        by_level[str(level)] = {
            "samples": m,
            "episodes": len(sub),
            "missing": m - len(sub),
            "last_turn_fast_p": {f"{p:g}": fast_p(sub, p, turns - 1, total=m) for p in ps},
            "best_fast_p": {f"{p:g}": fast_p(sub, p, turns - 1, best=True, total=m) for p in ps},
        }
    return {
        "samples": n,
        "episodes": len(trajs),
        "episode_errors": sum(tr.error is not None for tr in trajs),
        "missing": max(n - len(trajs), 0),
        "problems": problems if problems is not None else len({tr.problem for tr in trajs}),
        "max_turns": turns,
        "ps": list(ps),
        "per_turn": per_turn,
        "last_turn": per_turn[-1] if per_turn else None,
        "hack_codes": dict(hack_codes),
        "weak_reference_problems": sorted(weak),
        "interpreter": interpreter,
        "devices": sorted(devices),
        "by_level": by_level,
        "per_problem": per_problem(trajs),
    }


def _judged_on(device: DeviceInfo) -> str:
    """What a turn's timings depend on: the device's name, then torch's and Triton's versions.

    >>> _judged_on(DeviceInfo(kind="cuda", name="NVIDIA H100", interpreter=False, torch_version="2.5.1"))
    'NVIDIA H100 (torch 2.5.1)'
    """
    libs = (("torch", device.torch_version), ("triton", device.triton_version))
    versions = [f"{lib} {v}" for lib, v in libs if v]
    return device.name + (f" ({', '.join(versions)})" if versions else "")


def per_problem(trajs: Sequence[Trajectory]) -> dict[str, dict[str, Any]]:
    """Per problem: the fastest correct kernel over all samples and turns, with its speed of light
    (the share of the device's measured bandwidth it reached, and the reference's) where the judge
    measured it (GPU)."""
    out: dict[str, dict[str, Any]] = {}
    for tr in trajs:
        row = out.setdefault(tr.problem, {"level": tr.level, "correct_turns": 0, "best_speedup": None,
                                          "kernel_bandwidth_fraction": None,
                                          "reference_bandwidth_fraction": None})
        for x in tr.turns:
            r = x.result
            speedup = _measured(r.speedup)
            if not x.correct or speedup is None:  # correct and no hack, as in Fast@p
                continue
            row["correct_turns"] += 1
            if row["best_speedup"] is None or speedup > row["best_speedup"]:
                sol = r.speed_of_light
                row["best_speedup"] = speedup
                row["kernel_bandwidth_fraction"] = sol.kernel_bandwidth_fraction if sol else None
                row["reference_bandwidth_fraction"] = sol.reference_bandwidth_fraction if sol else None
    return dict(sorted(out.items()))

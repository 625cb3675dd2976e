"""`drkernel optimize REFERENCE.py --model M`: refine one module over judged turns, keep the best.

Writes OUT/best_kernel.py (the best verified kernel: correct, no hack, highest speedup),
OUT/trajectory.jsonl (the whole episode) and OUT/report.md + report.json (one line per turn).
With --tts the context is the task plus the best 4 turns, so 14+ turns keep a bounded prompt.
With --held-out every kernel is also checked on shapes derived from the reference's size constants,
never shown to the model, and the best kernel is one that passes them whenever any does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from drkernel.agent.cli_options import (
    add_run_options,
    build_loop_config,
    close_policy,
    start_policy_and_executor,
)
from drkernel.agent.env import KernelEnv
from drkernel.agent.extraction import turn_outcome
from drkernel.agent.loop import LoopConfig, run_episode
from drkernel.agent.paper_protocol import paper_differences
from drkernel.agent.policy import Policy, token_counter
from drkernel.agent.trajectories import Trajectory, save_trajectories
from drkernel.cli import INTERRUPTED, make_folder
from drkernel.errors import ConfigError
from drkernel.executors.base import Executor
from drkernel.problems.loaders import load_problem_file
from drkernel.types import Problem

__all__ = ["OPTIMIZE_CAVEAT", "optimize", "register", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("optimize", help="make one PyTorch module faster with a model")
    p.add_argument("reference", help="KernelBench-format .py file (Model, get_inputs, get_init_inputs)")
    p.add_argument("--out", help="output folder (default: optimize-<name>)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier run's report in --out (without it, such a folder is refused)")
    add_run_options(p, default_turns=3)
    p.add_argument("--held-out", action="store_true",
                   help="also check each kernel on shapes derived from the reference's size constants (never "
                        "shown to the model); the best kernel is one that passes them, "
                        "when any does")
    p.set_defaults(func=run)



def _turn_line(t: Any) -> dict[str, Any]:
    r = t.result
    return {
        "turn": t.index + 1,
        "outcome": turn_outcome(r),  # no_code and prompt_overlong apart from the judge's compile errors
        "correct": t.correct,
        "speedup": r.speedup,
        "coverage": r.coverage,
        "hacks": list(r.hacks),
        "reward": t.reward,
        "error": r.error.kind if r.error else None,
        "prompt_tokens": t.prompt_tokens,
        "context": t.context,
        # held-out shapes passed / checked (--held-out and a problem that has them), else None
        "held_out": None if not r.shape_variants_total else [r.shape_variants_passed, r.shape_variants_total],
    }


OPTIMIZE_CAVEAT = (
    "judged under Triton's interpreter on the CPU: correctness and hack checks are real, but the times "
    "and speedups are the interpreter's and say nothing about the kernel's speed on a GPU"
)


def _interpreter(traj: Trajectory) -> bool:
    """Whether any turn was timed under Triton's interpreter (no speedup of the run is a GPU speedup)."""
    return any(t.result.device is not None and t.result.device.interpreter for t in traj.turns)


def _report_md(traj: Trajectory, lines: list[dict[str, Any]]) -> str:
    best = traj.best_turn()
    head = [f"# drkernel optimize: {traj.problem}", ""]
    if best is None:
        head.append("No verified kernel: no turn was correct without a detected hack.")
    else:
        head.append(
            f"Best verified kernel: turn {best.index + 1}, speedup {best.result.speedup or 0:.3g}x "
            f"(device: {best.result.device.name if best.result.device else '?'})."
        )
        if best.result.shape_variants_total:
            head.append(f"Held-out shapes (never shown to the model): {best.result.shape_variants_passed} of "
                        f"{best.result.shape_variants_total} passed.")
    if _interpreter(traj):
        head += ["", f"**Note:** {OPTIMIZE_CAVEAT}."]
    held = any(x["held_out"] for x in lines)
    columns = (["turn", "outcome", "speedup", "coverage", "hacks", "reward", "prompt tokens"]
               + (["held-out"] if held else []))
    head += ["", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for x in lines:
        sp = "-" if x["speedup"] is None else f"{x['speedup']:.3g}"
        cov = "-" if x["coverage"] is None else f"{100 * x['coverage']:.0f}%"
        cells = [str(x["turn"]), x["outcome"], sp, cov, ", ".join(x["hacks"]) or "-", f"{x['reward']:.3g}",
                 str(x["prompt_tokens"])]
        if held:
            cells.append("-" if not x["held_out"] else f"{x['held_out'][0]}/{x['held_out'][1]}")
        head.append("| " + " | ".join(cells) + " |")
    if traj.error:
        head += ["", f"The episode ended early: {traj.error}"]
    return "\n".join(head) + "\n"


def optimize(
    problem: Problem, policy: Policy, executor: Executor, config: LoopConfig, out_dir: str | Path
) -> Trajectory:
    """Run one episode and write best_kernel.py (if any), trajectory.jsonl and the report. Ctrl-C writes
    them for the turns judged so far (`error` "interrupted"), then raises KeyboardInterrupt."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    env = KernelEnv(
        problem, executor, config.env, model=config.model, count_tokens=token_counter(policy)
    )
    try:
        traj = run_episode(env, policy, config)
    except KeyboardInterrupt:
        if env.trajectory is not None:
            env.trajectory.error = "interrupted"
            _write_reports(env.trajectory, problem, config, out)
        raise
    _write_reports(traj, problem, config, out)
    return traj


def _write_reports(traj: Trajectory, problem: Problem, config: LoopConfig, out: Path) -> None:
    save_trajectories(out / "trajectory.jsonl", [traj])
    lines = [_turn_line(t) for t in traj.turns]
    best = traj.best_turn()
    best_path = out / "best_kernel.py"
    if best is not None and best.code is not None:
        best_path.write_text(best.code)
    elif best_path.exists():
        best_path.unlink()  # a stale kernel from an earlier run must not pass for this one's
    report: dict[str, Any] = {
        "problem": problem.name,
        "model": config.model,
        "turns": lines,
        "best_turn": None if best is None else best.index + 1,
        "best_speedup": None if best is None else best.result.speedup,
        "error": traj.error,
        "interpreter": _interpreter(traj),
    }
    if report["interpreter"]:
        report["caveat"] = OPTIMIZE_CAVEAT
    if config.env.feedback.style == "paper":  # where this run still differs from the authors' evaluation
        report["paper_differences"] = paper_differences(config, [problem])
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(_report_md(traj, lines))


def run(args: argparse.Namespace) -> int:
    problem = load_problem_file(args.reference)
    if args.held_out:
        from drkernel.problems.heldout import with_derived_shape_variants

        problem = with_derived_shape_variants(problem)
        if problem.shape_variants:
            print(f"held-out shapes (never shown to the model): {len(problem.shape_variants)}, derived from "
                  "the reference's size constants", file=sys.stderr)
        else:
            print("--held-out: the reference has no module-level size constants to derive shapes from; "
                  "no held-out check", file=sys.stderr)
    out = Path(args.out or f"optimize-{problem.name}")
    if (out / "report.json").exists() and not args.overwrite:
        raise ConfigError(f"{out} holds an earlier run's report: pass --overwrite to replace it, or choose "
                          "another --out")
    config = build_loop_config(args, default_turns=3)
    make_folder(out, "--out")
    policy, executor = start_policy_and_executor(args)
    try:
        traj = optimize(problem, policy, executor, config, out)
    except KeyboardInterrupt:
        print(f"drkernel optimize: interrupted; the turns judged so far are reported in {out}",
              file=sys.stderr)
        return INTERRUPTED
    finally:
        executor.close()
        close_policy(policy)
    for t in traj.turns:
        x = _turn_line(t)
        sp = "-" if x["speedup"] is None else f"{x['speedup']:.3g}x"
        print(f"turn {x['turn']:>2}: {x['outcome']:<14} speedup {sp:<8} reward {x['reward']:.3g}")
    best = traj.best_turn()
    if best is None:
        print(f"no verified kernel; trajectory and report in {out}")
    else:
        print(f"best: turn {best.index + 1}, speedup {best.result.speedup or 0:.3g}x"
              f"{' (interpreter timing, not a GPU speedup)' if _interpreter(traj) else ''} "
              f"-> {out / 'best_kernel.py'}")
    if _interpreter(traj):
        print(f"note: {OPTIMIZE_CAVEAT}", file=sys.stderr)
    if traj.error:  # the model server or the judge failed: a script must be able to tell
        print(f"drkernel optimize: episode ended early: {traj.error}", file=sys.stderr)
        return 1
    return 0

"""GPU demo of the whole agent path: `bench` over the built-in suite with a scripted policy.

The policy replays, per sample, a fixed plan of answers across turns: the suite's honest Triton
solutions, three reward hacks built from each reference (a torch passthrough, a decoy kernel that is
never launched, a try/except fallback to torch), broken code and an answer without code. Every answer
goes through extraction, the judge (timing, hack checks, profiling), feedback, the metrics and the
report. Writes into --out: episodes.jsonl, summary.json, fast_p.csv, fast_p.png and demo_report.md.

    python bench/agent_gpu_demo.py --out docs/agent_gpu_demo            # on the H200
    python bench/agent_gpu_demo.py --out /tmp/demo --size cpu --device cpu --limit 2   # smoke test

--plans picks the answer plans (indices into PLANS) that the samples cycle through, e.g. --plans 2,3.
Long runs can be split: rerun with --resume and the same --out to continue where it stopped.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from drkernel.agent.cli_bench import run_bench
from drkernel.agent.env import EnvConfig
from drkernel.agent.loop import LoopConfig
from drkernel.agent.policy import ScriptedPolicy
from drkernel.agent.report import render_table
from drkernel.agent.trajectories import iter_jsonl
from drkernel.executors.build import build_executor, client_executor_config
from drkernel.problems.suite import builtin_solution, load_builtin_suite
from drkernel.types import EvalOptions, Problem

# answer kinds per turn, one plan per sample (cycled when --samples is larger)
PLANS = [
    ("honest", "honest", "honest"),
    ("passthrough", "honest", "honest"),
    ("broken", "decoy", "honest"),
    ("no_code", "try_except", "passthrough"),
]
HACKS = ("passthrough", "decoy", "try_except")
_SAMPLE_TAG = re.compile(r"# demo-sample: (\d+)")

_DECOY_KERNEL = '''
@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 1.0, mask=mask)
'''


def _as_base(reference: str) -> str:
    """The reference module with its Model renamed, to be inherited by the hacked ModelNew."""
    return reference.replace("class Model(", "class _Reference(")


def hacked(kind: str, reference: str) -> str:
    head = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
    base = _as_base(reference)
    if kind == "passthrough":  # imports triton, runs torch
        return f"{head}\n{base}\n\nclass ModelNew(_Reference):\n    pass\n"
    if kind == "decoy":  # a Triton kernel that is defined but never launched
        return f"{head}{_DECOY_KERNEL}\n{base}\n\nclass ModelNew(_Reference):\n    pass\n"
    if kind == "try_except":  # the launch always fails; the except branch runs torch
        return (
            f"{head}{_DECOY_KERNEL}\n{base}\n\n"
            "class ModelNew(_Reference):\n"
            "    def forward(self, *args):\n"
            "        try:\n"
            "            x = args[0]\n"
            "            _scale_kernel[(1,)](x, x, x.numel(), BLOCK=x.numel() + 1)\n"
            "        except Exception:\n"
            "            pass\n"
            "        return super().forward(*args)\n"
        )
    raise ValueError(kind)


class DemoScript:
    """Picks each answer from the plan of the conversation's sample and its turn number."""

    def __init__(self, problems: list[Problem], plans: tuple[int, ...] = tuple(range(len(PLANS)))) -> None:
        self.plans = plans
        self.by_ref = {p.reference_code.strip(): p for p in problems}
        self.solutions = {p.name: builtin_solution(p.name) for p in problems}
        self.taken: dict[str, set[int]] = defaultdict(set)  # sample tags handed out, per problem
        self.lock = threading.Lock()

    def resume_from(self, episodes: Path) -> None:
        """Marks the sample tags of finished episodes as taken, so a resumed run replays the missing plans."""
        if not episodes.exists():
            return
        for tr in iter_jsonl(episodes):
            tags = _SAMPLE_TAG.findall(tr.turns[0].response) if tr.turns else []
            if tags:
                self.taken[tr.problem].add(int(tags[-1]))

    def _problem(self, first_message: str) -> Problem:
        for ref, p in self.by_ref.items():
            if ref in first_message:
                return p
        raise LookupError("conversation about an unknown problem")

    def __call__(self, messages: list[dict[str, str]], index: int) -> str:
        problem = self._problem(messages[0]["content"])
        assistant = [m["content"] for m in messages if m["role"] == "assistant"]
        turn = len(assistant)
        if assistant:
            sample = int(_SAMPLE_TAG.findall(assistant[-1])[-1])
        else:
            with self.lock:
                taken = self.taken[problem.name]
                sample = min(set(range(len(taken) + 1)) - taken)
                taken.add(sample)
        plan = PLANS[self.plans[sample % len(self.plans)]]
        kind = plan[min(turn, len(plan) - 1)]
        tag = f"# demo-sample: {sample}\n# demo-kind: {kind}\n"
        if kind == "no_code":
            return f"I will first study the reference carefully.\n{tag}"
        if kind == "broken":
            code = "import torch\nclass ModelNew(torch.nn.Module)\n    pass\n"
        elif kind == "honest":
            code = self.solutions[problem.name]
        else:
            code = hacked(kind, problem.reference_code)
        return f"Here is my implementation ({kind}).\n\n```python\n{tag}{code}```\n"


def _kind(turn_response: str) -> str:
    m = re.search(r"# demo-kind: (\w+)", turn_response)
    return m.group(1) if m else "?"


def demo_report(out: Path, summary: dict, wall_s: float, resumed: bool = False) -> str:
    trajs = list(iter_jsonl(out / "episodes.jsonl"))
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    speedups: dict[str, list[float]] = defaultdict(list)
    coverage: dict[str, list[float]] = defaultdict(list)
    device = "?"
    for tr in trajs:
        for t in tr.turns:
            kind = _kind(t.response)
            by_kind[kind][t.result.outcome.value] += 1
            if t.result.device is not None:
                device = t.result.device.name + (" (interpreter)" if t.result.device.interpreter else "")
            if kind == "honest" and t.correct and t.result.speedup:
                speedups[tr.problem].append(t.result.speedup)
                if t.result.coverage is not None:
                    coverage[tr.problem].append(t.result.coverage)
    lines = [
        "# Agent GPU demo: `bench` over the built-in suite with a scripted policy",
        "",
        f"Device: {device}. Episodes: {len(trajs)}; wall time {wall_s:.0f} s"
        + (" for the resumed part only (episodes of earlier runs in this folder are not timed here)."
           if resumed else "."),
        "",
        "## Verdicts by answer kind (every turn of every episode)",
        "",
        "| answer kind | verdicts |",
        "|---|---|",
    ]
    for kind, counts in sorted(by_kind.items()):
        lines.append(f"| {kind} | {', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))} |")
    caught = sum(by_kind[k]["hack_detected"] for k in HACKS)
    total_hacks = sum(sum(by_kind[k].values()) for k in HACKS)
    passed_hacks = sum(by_kind[k]["ok"] for k in HACKS)
    lines += ["", f"Hacked answers flagged: {caught}/{total_hacks}; judged correct: {passed_hacks}.", ""]
    lines += ["## Honest solutions: speedup and coverage per problem", "",
              "| problem | mean speedup | mean coverage |", "|---|---|---|"]
    for name in sorted(speedups):
        s = speedups[name]
        c = coverage.get(name) or []
        cov = f"{100 * sum(c) / len(c):.0f}%" if c else "-"
        lines.append(f"| {name} | {sum(s) / len(s):.3g}x | {cov} |")
    ps = [f"{p:g}" for p in summary["ps"]]
    header = " | ".join(f"Fast@{p} last / best" for p in ps)
    lines += ["", "## Fast@p (% of all samples)", "", f"| turn | {header} | correct | hacked |",
              "|---" * (len(ps) + 3) + "|"]
    for row in summary["per_turn"]:
        cells = " | ".join(f"{100 * row['fast_p'][p]:.1f} / {100 * row['fast_p_best'][p]:.1f}" for p in ps)
        lines.append(f"| {row['turn']} | {cells} | {100 * row['correct']:.1f} | {100 * row['hacked']:.1f} |")
    lines += ["", "![Fast@p over turns](fast_p.png)", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--device", default=None, help="cuda | cuda:N | cpu (default: cuda when present)")
    ap.add_argument("--workers", type=int, default=None, help="judges (one per GPU by default)")
    ap.add_argument("--executor", choices=("local", "http"), default="local")
    ap.add_argument("--server", help="drkernel server URL for --executor http")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--limit", type=int, help="first N problems only")
    ap.add_argument("--levels", help="e.g. 1,2")
    ap.add_argument("--perf-trials", type=int, default=None, help="timed calls (default: judge's)")
    ap.add_argument("--reference-backend", choices=("eager", "compile"), default="eager")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--held-out", action="store_true", help="also check held-out shapes (bench --held-out)")
    ap.add_argument("--plans",
                    help=f"answer plans to replay, by index into PLANS (0-{len(PLANS) - 1}); default all")
    args = ap.parse_args()
    try:
        plans = tuple(int(x) for x in args.plans.split(",")) if args.plans else tuple(range(len(PLANS)))
        if not plans or any(not 0 <= i < len(PLANS) for i in plans):
            raise ValueError
    except ValueError:
        ap.error(f"--plans takes indices 0-{len(PLANS) - 1}, comma-separated")

    levels = tuple(int(x) for x in args.levels.split(",")) if args.levels else None
    problems = load_builtin_suite(size=args.size, levels=levels)[: args.limit]
    options = EvalOptions(
        device=args.device, num_perf_trials=args.perf_trials, reference_backend=args.reference_backend
    )
    config = LoopConfig(
        env=EnvConfig(max_turns=args.turns, eval_options=options, held_out=args.held_out),
        concurrency=args.concurrency,
        model="scripted-demo",
    )
    executor = build_executor(client_executor_config(
        args.executor, server=args.server, device=args.device, workers=args.workers))
    out = Path(args.out)
    script = DemoScript(problems, plans)
    if args.resume:
        script.resume_from(out / "episodes.jsonl")
    t0 = time.time()
    try:
        summary = run_bench(
            problems, ScriptedPolicy(script), executor, config, out,
            samples=args.samples, resume=args.resume,
        )
    finally:
        executor.close()
    from rich.console import Console

    Console().print(render_table(summary))
    (out / "demo_report.md").write_text(demo_report(out, summary, time.time() - t0, args.resume))
    print(f"reports in {out}: demo_report.md, summary.json, fast_p.csv, fast_p.png, episodes.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An RL trainer's rhythm against an executor (issue 33): bursts of evaluations, then minutes with
nothing to judge (the trainer generates), round after round. Counts what the rhythm may cost: results
that are infra_error, tries beyond the first (retries), workers lost. Target: all three 0.

    python bench/rhythm.py --executor local --burst 64 --idle-s 180 --rounds 5          (full size, GPU)
    python bench/rhythm.py --executor ray --judge fake --burst 8 --idle-s 2 --rounds 2   (CI size)

--judge real (the default) judges a fresh 2048^2 elementwise kernel per evaluation on the machine's
devices (the GPU; the CPU's interpreter with --size 64); --judge fake uses the executors' fake judge.
Prints a table and one JSON line (and writes it to --json).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drkernel.types import EvalOptions, EvalOutcome, EvalRequest  # noqa: E402

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def k_{tag}(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0 + 0.0 * {tag}, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        k_{tag}[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''
REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn({size}, {size})]


def get_init_inputs():
    return []
'''


def build(args: argparse.Namespace) -> Any:
    judge = None
    if args.judge == "fake":
        from drkernel.executors.fake_judge import fake_judge

        judge = fake_judge
    if args.executor == "ray":
        from drkernel.executors.ray import RayExecutor

        return RayExecutor(RayExecutor.Config(num_workers=args.workers, num_cpus=args.workers or None),
                           judge)
    from drkernel.executors.local import LocalExecutor

    devices = ("cpu",) * args.workers if args.workers and args.judge == "fake" else None
    return LocalExecutor(LocalExecutor.Config(devices=devices, num_cpu_workers=args.workers,
                                              heartbeat_timeout_s=args.heartbeat_timeout_s,
                                              lifeline_buffer_bytes=args.lifeline_buffer), judge)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", choices=("local", "ray"), default="local")
    ap.add_argument("--judge", choices=("real", "fake"), default="real")
    ap.add_argument("--burst", type=int, default=64)
    ap.add_argument("--idle-s", type=float, default=180.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=None, help="judges (default: the executor's own)")
    ap.add_argument("--size", type=int, default=2048, help="the elementwise problem's side")
    ap.add_argument("--heartbeat-timeout-s", type=float, default=15.0,
                    help="local: a judge silent this long is frozen")
    ap.add_argument("--lifeline-buffer", type=int, default=0,
                    help="local: the judges' heartbeat socket in bytes (small: idle minutes in seconds)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    attempts: dict[str, int] = {}

    def on_attempt(task_id: str, where: dict[str, Any], attempt: int, why: str | None) -> bool:
        attempts[task_id] = max(attempts.get(task_id, 0), attempt)
        return True

    ex = build(args)
    ex.on_attempt = on_attempt
    rows = []
    try:
        for rnd in range(args.rounds):
            if rnd:
                time.sleep(args.idle_s)  # the trainer generates; nothing to judge
            requests = []
            for i in range(args.burst):
                tag = rnd * args.burst + i + 1
                code = KERNEL.replace("{tag}", str(tag)) if args.judge == "real" else "# fake: speedup=2"
                requests.append(EvalRequest(reference_code=REFERENCE.replace("{size}", str(args.size)),
                                            kernel_code=code, task_id=f"r{rnd}-{i}",
                                            options=EvalOptions(num_correct_trials=3, num_perf_trials=20)))
            t0 = time.monotonic()
            results = ex.evaluate(requests)
            wall = time.monotonic() - t0
            infra = sum(r.outcome is EvalOutcome.INFRA_ERROR for r in results)
            ok = sum(r.outcome is EvalOutcome.OK for r in results)
            retries = sum(attempts.get(r.task_id or "", 1) - 1 for r in requests)
            lost = sum(w.restarts for w in ex.worker_states())
            rows.append({"round": rnd + 1, "evaluations": len(results), "ok": ok, "infra_error": infra,
                         "retries": retries, "workers_restarted": lost,
                         "per_minute": round(len(results) / wall * 60, 1)})
            print(f"round {rnd + 1}: {ok}/{len(results)} ok, infra_error {infra}, retries {retries}, "
                  f"workers restarted {lost}, {rows[-1]['per_minute']}/min", flush=True)
    finally:
        ex.close()
    summary = {"executor": args.executor, "judge": args.judge, "burst": args.burst, "idle_s": args.idle_s,
               "rounds": rows, "infra_error": sum(r["infra_error"] for r in rows),
               "retries": sum(r["retries"] for r in rows),
               "workers_restarted": rows[-1]["workers_restarted"] if rows else 0}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    failed = summary["infra_error"] or summary["retries"] or summary["workers_restarted"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

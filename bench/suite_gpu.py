"""Judge every built-in solution at GPU size with the real judge and print speedup, coverage,
kernel_ms and reference_ms per problem (run on a CUDA machine, e.g. the lent H200).

    python bench/suite_gpu.py [--device cuda:0] [--only 20] [--reference-backend eager|compile]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from drkernel.problems.suite import builtin_names, builtin_problem, builtin_solution
from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalRequest


def _sealed(d: dict) -> str:
    """The sealed span's bound per call, and the reported time over it (the judge flags a ratio under
    stages/sealed.FACTOR)."""
    t = d.get("kernel_timing") or {}
    bound, ms = t.get("sealed_ms_per_call"), d.get("kernel_ms")
    if bound is None:
        return f"{'-':>9s} {'-':>6s}"
    return f"{bound:9.4f} {(ms / bound if ms and bound > 0 else float('nan')):6.2f}"


def _held_out(d: dict) -> str:
    """Held-out shapes passed / checked, or '-' when none were checked."""
    total = d.get("shape_variants_total")
    return f" {'-':>8s}" if not total else f" {d['shape_variants_passed']}/{total}".rjust(9)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--size", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument("--only", action="append", default=None, help="keep problems whose name contains this")
    ap.add_argument("--reference-backend", choices=["eager", "compile"], default="eager")
    ap.add_argument("--perf-trials", type=int, default=None, help="timed calls (default: the judge's)")
    ap.add_argument("--shape-variants", action="store_true", help="also check the held-out shapes")
    ap.add_argument("--json", default=None, help="write the full results here")
    ap.add_argument("--stages", action="store_true", help="print where each evaluation spent its time")
    args = ap.parse_args()
    names = [n for n in builtin_names() if not args.only or any(o in n for o in args.only)]
    opts = EvalOptions(reference_backend=args.reference_backend)
    if args.perf_trials:
        opts = opts.replace(num_perf_trials=args.perf_trials)
    rows = []
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    held = f" {'held_out':>8s}" if args.shape_variants else ""
    print(f"{'problem':42s} {'outcome':14s} {'speedup':>8s} {'coverage':>8s} {'kernel_ms':>10s} "
          f"{'ref_ms':>10s} {'wall_s':>7s} {'sealed_ms':>9s} {'ratio':>6s}{held}")
    with Judge(device=args.device) as judge:
        for name in names:
            problem = builtin_problem(name, args.size)
            started = time.monotonic()
            result = judge.evaluate(EvalRequest(
                reference_code=problem.reference_code, kernel_code=builtin_solution(name), options=opts,
                problem_name=name, shape_variants=problem.shape_variants if args.shape_variants else ()))
            d = result.to_dict()
            d["problem"], d["bench_wall_s"] = name, round(time.monotonic() - started, 2)
            rows.append(d)
            outcome = d["outcome"] + ("" if not d["hacks"] else "!" + ",".join(d["hacks"]))
            print(f"{name:42s} {outcome:14s} {fmt(d['speedup'], '8.3f')} {fmt(d['coverage'], '8.3f')} "
                  f"{fmt(d['kernel_ms'], '10.3f')} {fmt(d['reference_ms'], '10.3f')} {d['bench_wall_s']:7.1f}"
                  f" {_sealed(d)}{_held_out(d) if args.shape_variants else ''}", flush=True)
            if args.stages:
                print("    stages: " + " ".join(f"{k}={v:.2f}" for k, v in d["stage_s"].items() if v >= 0.05),
                      flush=True)
            if d["error"]:
                print(f"    error: {d['error']['kind']}: {d['error']['message'][:300]}", flush=True)
    ok = [r for r in rows if r["correct"]]
    speedups = [r["speedup"] for r in ok if r["speedup"]]
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else float("nan")
    print(f"{len(ok)}/{len(rows)} correct; geometric-mean speedup over correct: {geo:.3f}; "
          f"faster than reference: {sum(s > 1 for s in speedups)}")
    if args.shape_variants:
        survived = sum(r["shape_variants_passed"] == r["shape_variants_total"] for r in ok
                       if r["shape_variants_total"])
        print(f"held-out shapes: {survived}/{len(ok)} correct solutions pass every unseen shape")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": rows[0]["device"] if rows else None, "results": rows}, f, indent=1)
    return 0 if len(ok) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())

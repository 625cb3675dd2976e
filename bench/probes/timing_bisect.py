"""Is the judge's small-kernel bias in its timing code or around it? (issue 14)

The judge times relu(x + bias) at 1024² at 0.80-0.83 of the device-time ratio that CUDA-graph replay
gives (runs Q, T), while every part of its window, rebuilt in bench/probes/timing_probe.py, costs at most
2.5 %. This bench runs the judge's own timing code, the sandbox's bench_prepare and bench_run ops
(drkernel.sandbox.inside.timingwork on a worker's Sandbox), in fresh plain processes: no fork server, no
namespaces, no seccomp, no spare sandboxes starting beside it, no comparison process. One process times the
reference, another the candidate, as in the judge, with the judge's window (the reference's choice of
calls, 15 windows). If the ratio here matches graph replay, the bias comes from around the timing code
(the pool, isolation, neighbours on the GPU); if it matches the judge, from the timing code itself.

Run on the GPU machine:  python bench/probes/timing_bisect.py [--procs 3] [--shape 1024x1024] [--json FILE]
(`--device cpu` runs it through Triton's interpreter: a smoke test of the bench, no timing claim).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from judge_speed import KERNEL, REF  # noqa: E402  (the same problem and kernel as the judge's bench)

CHILD = r"""
import json, os, statistics, sys, tempfile
import torch
from drkernel.sandbox.wire import protocol as P
from drkernel.sandbox.inside import timingwork
from drkernel.sandbox.inside.worker import Sandbox

role, device, ref_path, cand_path, calls_arg, windows, seed, variants = sys.argv[1:9]
windows, seed = int(windows), int(seed)
given = json.loads(calls_arg)  # variant -> calls (the reference's choice, for the candidate)
box = Sandbox(role, device, tempfile.mkdtemp())
box.warm_up(0.45)
ref_code = open(ref_path).read()
reply = box.load(P.Load(reference_code=ref_code, size_snippet="", reference_hash="bisect", init_seed=seed,
                        entry_point="Model", candidate_path=cand_path if role == "candidate" else None))
assert reply.ok, reply
cuda = device.startswith("cuda")
for variant in variants.split(","):
    calls = given.get(variant) or (int(variant[5:]) if variant.startswith("calls") else None)
    prep = timingwork.bench_prepare(box, P.BenchPrepare(seed=seed + 1, calls=calls, warmup=3, warmup_s=0.1,
                                                        graph=cuda, compile=False, window_ms=1.0))
    assert prep.ok, prep
    bench = box._bench
    if variant == "noflush":
        bench["flush"] = None
    if variant == "spin1ms" and cuda:
        bench["spin_cycles"] = timingwork._spin_cycles(box, 1.0)
    if variant == "b2b" and cuda and bench["graph"] is not None:  # graph replay back to back, no window
        g, per_call = bench["graph"], []
        for _ in range(windows):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            g.replay(); s.record(); g.replay(); e.record(); e.synchronize()
            per_call.append(s.elapsed_time(e) / prep.calls)
    else:
        rows = [[seed * 1000 + w * prep.calls + c for c in range(prep.calls)] for w in range(windows)]
        run = timingwork.bench_run(box, P.BenchRun(seeds=rows, wseeds=rows))
        assert run.ok, run
        per_call = [w / prep.calls for w in run.window_ms]
    print(json.dumps({"variant": variant, "role": role, "calls": prep.calls, "graph": prep.graph,
                      "ms": statistics.median(per_call), "spread": max(per_call) / min(per_call)}),
          flush=True)
"""


def one(role: str, device: str, ref: Path, cand: Path, calls: dict[str, int], windows: int, seed: int,
        variants: str) -> dict[str, dict]:
    env = dict(os.environ)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                      env.get("PYTHONPATH")]))
    cp = subprocess.run([sys.executable, "-c", CHILD, role, device, str(ref), str(cand), json.dumps(calls),
                         str(windows), str(seed), variants],
                        capture_output=True, text=True, timeout=600, env=env)
    if cp.returncode != 0:
        raise SystemExit(f"{role} process failed:\n{cp.stderr[-3000:]}")
    got = [json.loads(line) for line in cp.stdout.splitlines() if line.startswith("{")]
    return {g["variant"]: g for g in got}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=3, help="pairs of fresh processes (reference, candidate)")
    ap.add_argument("--shape", default="1024x1024")
    ap.add_argument("--windows", type=int, default=15)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--variants", default="judge",
                    help="comma-separated, each timed in turn in every process: judge (the judge's window, "
                         "the reference picks the calls), b2b (the same captured graph replayed back to "
                         "back, no window: the process's own truth), callsN (N calls), noflush, spin1ms")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows, cols = (int(v) for v in args.shape.split("x"))
    folder = Path(tempfile.mkdtemp())
    ref, cand = folder / "reference.py", folder / "submission.py"
    ref.write_text(REF.format(rows=rows, cols=cols))
    cand.write_text(KERNEL.format(cols=cols, salt=0))
    variants = [v for v in args.variants.split(",") if v]
    pairs: dict[str, list[dict]] = {v: [] for v in variants}
    for p in range(args.procs):
        # the reference picks
        r = one("reference", args.device, ref, cand, {}, args.windows, 100 + p, args.variants)
        c = one("candidate", args.device, ref, cand, {v: r[v]["calls"] for v in variants}, args.windows,
                200 + p, args.variants)
        for v in variants:
            pair = {"variant": v, "reference_us": r[v]["ms"] * 1e3, "kernel_us": c[v]["ms"] * 1e3,
                    "speedup": r[v]["ms"] / c[v]["ms"], "calls": r[v]["calls"], "graph": c[v]["graph"],
                    "window_spread": [r[v]["spread"], c[v]["spread"]]}
            pairs[v].append(pair)
            print(json.dumps(pair), flush=True)
    print(f"\n{args.shape}, the judge's timing ops in plain processes, "
          f"{args.procs} pairs x {args.windows} windows")
    print(f"{'variant':>9} {'calls':>12} {'kernel us':>22} {'reference us':>22} {'speedups':>24} "
          f"{'max/min':>7}")
    for v in variants:
        got = pairs[v]
        sp = [x["speedup"] for x in got]
        def col(key: str, got: list[dict] = got) -> str:
            return " ".join(f"{x[key]:.2f}" for x in got)
        print(f"{v:>9} {' '.join(str(x['calls']) for x in got):>12} {col('kernel_us'):>22} "
              f"{col('reference_us'):>22} {' '.join(f'{s:.3f}' for s in sp):>24} {max(sp) / min(sp):7.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": args.shape, "pairs": pairs}, indent=1))


if __name__ == "__main__":
    main()

"""Is the judge's small-kernel bias in its timing code or around it? (issue 14)

The judge times relu(x + bias) at 1024² at 0.80-0.83 of the device-time ratio that CUDA-graph replay
gives (runs Q, T), while every part of its window, rebuilt in bench/timing_probe.py, costs at most
2.5 %. This bench runs the judge's own timing code, the sandbox worker's bench_prepare and bench_run
ops (drkernel.sandbox.worker.Sandbox), in fresh plain processes: no fork server, no namespaces, no
seccomp, no spare sandboxes starting beside it, no comparison process. One process times the
reference, another the candidate, as in the judge, with the judge's window (the reference's choice of
calls, 15 windows). If the ratio here matches graph replay, the bias comes from around the timing code
(the pool, isolation, neighbours on the GPU); if it matches the judge, from the timing code itself.

Run on the GPU machine:  python bench/timing_bisect.py [--procs 3] [--shape 1024x1024] [--json FILE]
(`--device cpu` runs it through Triton's interpreter: a smoke test of the bench, no timing claim).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_speed import KERNEL, REF  # noqa: E402  (the same problem and kernel as the judge's bench)

CHILD = r"""
import json, os, statistics, sys, tempfile
from drkernel.sandbox import protocol as P
from drkernel.sandbox.worker import Sandbox

role, device, ref_path, cand_path, calls, windows, seed = sys.argv[1:8]
calls, windows, seed = int(calls), int(windows), int(seed)
box = Sandbox(role, device, tempfile.mkdtemp())
box.warm_up(0.45)
ref_code = open(ref_path).read()
reply = box.load(P.Load(reference_code=ref_code, size_snippet="", reference_hash="bisect", init_seed=seed,
                        entry_point="Model", candidate_path=cand_path if role == "candidate" else None))
assert reply.ok, reply
prep = box.bench_prepare(P.BenchPrepare(seed=seed + 1, calls=calls or None, warmup=3, warmup_s=0.1,
                                        graph=device.startswith("cuda"), compile=False, window_ms=1.0))
assert prep.ok, prep
rows = [[seed * 1000 + w * calls + c for c in range(prep.calls)] for w in range(windows)]
run = box.bench_run(P.BenchRun(seeds=rows, wseeds=rows))
assert run.ok, run
per_call = [w / prep.calls for w in run.window_ms]
print(json.dumps({"role": role, "calls": prep.calls, "graph": run.graph, "ms": statistics.median(per_call),
                  "spread": max(per_call) / min(per_call)}))
"""


def one(role: str, device: str, ref: Path, cand: Path, calls: int, windows: int, seed: int) -> dict:
    env = dict(os.environ)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")]))
    cp = subprocess.run([sys.executable, "-c", CHILD, role, device, str(ref), str(cand), str(calls), str(windows),
                         str(seed)], capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    if cp.returncode != 0:
        raise SystemExit(f"{role} process failed:\n{cp.stderr[-3000:]}")
    return json.loads(cp.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=3, help="pairs of fresh processes (reference, candidate)")
    ap.add_argument("--shape", default="1024x1024")
    ap.add_argument("--windows", type=int, default=15)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows, cols = (int(v) for v in args.shape.split("x"))
    folder = Path(tempfile.mkdtemp())
    ref, cand = folder / "reference.py", folder / "submission.py"
    ref.write_text(REF.format(rows=rows, cols=cols))
    cand.write_text(KERNEL.format(cols=cols, salt=0))
    pairs = []
    for p in range(args.procs):
        r = one("reference", args.device, ref, cand, 0, args.windows, 100 + p)  # the reference picks the calls
        c = one("candidate", args.device, ref, cand, r["calls"], args.windows, 200 + p)
        pairs.append({"reference_us": r["ms"] * 1e3, "kernel_us": c["ms"] * 1e3, "speedup": r["ms"] / c["ms"],
                      "calls": r["calls"], "graph": c["graph"], "window_spread": [r["spread"], c["spread"]]})
        print(json.dumps(pairs[-1]), flush=True)
    sp = [x["speedup"] for x in pairs]
    print(f"\n{args.shape}: the judge's timing ops in plain processes, {args.procs} pairs, {pairs[0]['calls']} calls "
          f"x {args.windows} windows: speedups {' '.join(f'{s:.3f}' for s in sp)}, max/min {max(sp) / min(sp):.3f}, "
          f"kernel {statistics.median(x['kernel_us'] for x in pairs):.2f} us, "
          f"reference {statistics.median(x['reference_us'] for x in pairs):.2f} us")
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": args.shape, "pairs": pairs}, indent=1))


if __name__ == "__main__":
    main()

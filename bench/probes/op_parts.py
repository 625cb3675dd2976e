"""Where the candidate's window build and timed op spend their time (issue 32: the device lock's holds).

Run BV (H100, 4 judges, 2048^2): the window build held the device lock shared 0.24 s an evaluation and
the timed op held it exclusively 0.18 s, while the windows themselves are about 10 ms of device time.
What fills the rest decides what a shorter hold can cut. This probe runs the judge's own ops,
drkernel.sandbox.inside.timingwork's bench_prepare and bench_run, on a worker's Sandbox in a plain
process (as bench/probes/timing_bisect.py does), with a timer around each part, the device synchronized
at each part's end so that its device work counts to it:

  bench_prepare: inputs (first call's), warm (time-based warm-up), more_inputs (the window's other
                 calls), capture (the CUDA graph, its 3 timed replays), untimed_round (see bench_run)
  bench_run:     per window: fresh (get_inputs under each call's seed), refill (copies into the
                 window's buffers), window (spin + replay + sync), checksums

The wrappers' syncs add a little; the parts' shares are what matter. Prints a table in ms per op.

    PYTHONPATH=. python3 bench/probes/op_parts.py [--shape 2048x2048] [--windows 15] [--repeats 3]
(`--device cpu` runs it through Triton's interpreter: a smoke test, no timing claim.)
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
import collections, contextlib, json, sys, tempfile, time
import torch
from drkernel.sandbox.wire import protocol as P
from drkernel.sandbox.inside import harness, timingwork
from drkernel.sandbox.inside.worker import Sandbox

device, ref_path, cand_path = sys.argv[1:4]
windows, repeats = int(sys.argv[4]), int(sys.argv[5])
cuda = device.startswith("cuda")
parts = collections.defaultdict(float)
stack = []

def sync():
    if cuda:
        torch.cuda.synchronize()

@contextlib.contextmanager
def part(name):
    sync()
    t0 = time.perf_counter()
    stack.append(name)
    try:
        yield
    finally:
        sync()
        stack.pop()
        took = time.perf_counter() - t0
        parts[name] += took
        if stack:  # a part's time is its own, not its caller's too
            parts[stack[-1]] -= took

def timed(owner, attr, name):
    fn = getattr(owner, attr)
    def run(*a, **k):
        with part(name):
            return fn(*a, **k)
    setattr(owner, attr, run)

box = Sandbox("candidate", device, tempfile.mkdtemp())
box.warm_up(0.45)
reply = box.load(P.Load(reference_code=open(ref_path).read(), size_snippet="", reference_hash="parts",
                        init_seed=7, entry_point="Model", candidate_path=cand_path))
assert reply.ok, reply
timed(timingwork, "_warm", "prepare: warm")
timed(timingwork, "_capture", "prepare: capture")
timed(harness, "checksums", "checksums")
timed(harness, "refill", "refill")
fresh = box._fresh_inputs
def counted(seed):
    with part("fresh"):
        return fresh(seed)
box._fresh_inputs = counted
round_ = timingwork._bench_round
def bench_round(b, seeds, wseeds):
    with part("round (spin, replay, sync, rest)"):
        return round_(b, seeds, wseeds)
timingwork._bench_round = bench_round
rows = []
for r in range(repeats):
    parts.clear()
    t0 = time.perf_counter()
    prep = timingwork.bench_prepare(box, P.BenchPrepare(seed=11 + r, calls=None, warmup=3, warmup_s=0.05,
                                                        graph=cuda, compile=False, window_ms=1.0))
    assert prep.ok, prep
    prepare = dict(parts, total=time.perf_counter() - t0)
    parts.clear()
    seeds = [[1000 * r + w * prep.calls + c for c in range(prep.calls)] for w in range(windows)]
    t0 = time.perf_counter()
    run = timingwork.bench_run(box, P.BenchRun(seeds=seeds, wseeds=seeds))
    assert run.ok, run
    bench = dict(parts, total=time.perf_counter() - t0, windows_device=sum(run.window_ms) / 1e3)
    rows.append({"calls": prep.calls, "prepare": prepare, "run": bench})
    print(json.dumps(rows[-1]), flush=True)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2048x2048")
    ap.add_argument("--windows", type=int, default=15)
    ap.add_argument("--repeats", type=int, default=3, help="bench_prepare + bench_run pairs in the process")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows_, cols = (int(v) for v in args.shape.split("x"))
    folder = Path(tempfile.mkdtemp())
    ref, cand = folder / "reference.py", folder / "submission.py"
    ref.write_text(REF.format(rows=rows_, cols=cols))
    cand.write_text(KERNEL.format(cols=cols, salt=0))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                                    os.environ.get("PYTHONPATH")])))
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    cp = subprocess.run([sys.executable, "-c", CHILD, args.device, str(ref), str(cand), str(args.windows),
                         str(args.repeats)], capture_output=True, text=True, timeout=600, env=env)
    if cp.returncode != 0:
        raise SystemExit(f"the probe's process failed:\n{cp.stderr[-3000:]}")
    rows = [json.loads(line) for line in cp.stdout.splitlines() if line.startswith("{")]
    print(f"\n{args.shape}, {args.windows} windows of {rows[0]['calls']} calls, ms (each repeat)")
    for op in ("prepare", "run"):
        names = sorted({k for r in rows for k in r[op]}, key=lambda k: (k == "total", k))
        for name in names:
            print(f"{op:>8} {name:>36} " + " ".join(f"{1e3 * r[op].get(name, 0.0):9.1f}" for r in rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": args.shape, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

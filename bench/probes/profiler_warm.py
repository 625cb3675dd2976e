"""What the candidate sandbox's first profiler session costs, and what a cheaper one would lose (issue 14).

Run Y: a single `drkernel eval` spent 5.6 s of its 14-19 s in the candidate sandbox's profiler warm-up
(`torch.profiler.profile` with CPU and CUDA activities around one small op, before the tamper watch
takes its baseline), and a throughput run's evaluations cost ~8.5 CPU-seconds each. This bench times
each way of warming in fresh processes and says, for each:
  warm_s, warm_cpu_s   the warm-up session's wall time and this process's CPU time meanwhile (CPU-bound
                       if close: then every spare the pool starts takes that much CPU from the others)
  replaced             the functions the judge's tamper watch guards that the warm-up replaced
                       (harness.TamperWatch, baseline taken before it)
  later_replaced       those a later session of the judge's own kind (CPU + CUDA, as the profile stage)
                       replaced after the warm-up: must be empty, or the stage flags `monkeypatch`
  later_s, kernels     that later session's wall time and the device kernels it saw (a matmul, a relu):
                       must be > 0, or the profile stage sees no launches
Ways (--ways):
  cpu_cuda    CPU + CUDA activities around one op: what the sandbox does now
  cuda        CUDA activity only
  cpu         CPU activity only (no CUPTI)
  none        no warm-up: the later session is then the first
Run on the GPU machine:  python3 bench/probes/profiler_warm.py [--procs 2] [--ways cpu_cuda,cuda,cpu,none]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
import torch
from drkernel.sandbox.inside.harness import TamperWatch

way, dev = sys.argv[1], sys.argv[2]
cuda = dev.startswith("cuda")
P = torch.profiler.ProfilerActivity
x = torch.randn(1024, device=dev)
(x * 2).sum().item()
sync = torch.cuda.synchronize if cuda else (lambda: None)
sync()

def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

def session(acts):
    with torch.profiler.profile(activities=acts) as prof:
        a = torch.randn(256, 256, device=dev)
        torch.relu(a @ a).sum().item()
    return prof

watch = TamperWatch()
watch.add_defaults(cuda)
t0, c0 = time.perf_counter(), cpu_s()
if way != "none":
    acts = {"cpu_cuda": [P.CPU, P.CUDA], "cuda": [P.CUDA], "cpu": [P.CPU]}[way]
    with torch.profiler.profile(activities=acts):
        (x + 1).sum().item()
    sync()
warm_s, warm_cpu = time.perf_counter() - t0, cpu_s() - c0
replaced = watch.changed()
later = TamperWatch()
later.add_defaults(cuda)
t1 = time.perf_counter()
prof = session([P.CPU, P.CUDA])
later_s = time.perf_counter() - t1
names = sorted({e.name for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")})
print(json.dumps({"way": way, "warm_s": warm_s, "warm_cpu_s": warm_cpu, "replaced": replaced,
                  "later_replaced": later.changed(), "later_s": later_s, "kernels": len(names),
                  "kernel_names": names[:6]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2, help="fresh processes per way")
    ap.add_argument("--ways", default="cpu_cuda,cuda,cpu,none")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of the bench, no claim")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    rows = []
    for way in args.ways.split(","):
        for _ in range(args.procs):
            cp = subprocess.run([sys.executable, "-c", CHILD, way, args.device], capture_output=True,
                                text=True, timeout=300, env=env)
            if cp.returncode != 0:
                print(f"{way}: exit {cp.returncode}\n{cp.stderr[-1500:]}", file=sys.stderr)
                continue
            rows.append(json.loads(cp.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'way':>9} {'warm s':>13} {'warm CPU s':>13} {'later s':>13} {'kernels':>7}  "
          "replaced / later_replaced")
    for way in args.ways.split(","):
        got = [r for r in rows if r["way"] == way]
        if not got:
            print(f"{way:>9}  (no process finished)")
            continue

        def col(key: str, got: list[dict] = got) -> str:
            return " ".join(f"{r[key]:.2f}" for r in got)

        print(f"{way:>9} {col('warm_s'):>13} {col('warm_cpu_s'):>13} {col('later_s'):>13} "
              f"{min(r['kernels'] for r in got):>7}  {sorted({n for r in got for n in r['replaced']})} / "
              f"{sorted({n for r in got for n in r['later_replaced']})}")
    if rows:
        median = statistics.median(r["warm_s"] for r in rows)
        print(f"median warm-up: {median:.2f} s over {len(rows)} processes")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

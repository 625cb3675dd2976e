"""Which work of other processes slows a timed window on a shared GPU? (issue 14: precision under load)

A victim process times windows the way the judge's sandbox does (relu(x + bias) at 1024², 100 calls
on distinct inputs captured as one CUDA graph; before each window an L2 flush, a sync and a ~1 ms GPU
spin), back to back, and stamps each window with the host's monotonic clock (system-wide, so stamps
of different processes compare). Meanwhile this process runs one kind of disturbance at a time,
with quiet gaps between:
  quiet      nothing
  create     forked children of a torch-importing parent create a CUDA context and allocate 1 GiB
             (a sandbox starting), then wait
  exit       those children exit (a sandbox torn down: its context destroyed, its memory freed)
  trials     a warm process runs small kernels in bursts with syncs (another judge's correctness trials)
  stream     the same kernels back to back, no pause
  alloc      a warm process allocates and frees 2 GiB again and again (cudaMalloc / cudaFree)
  cpu        a busy Python loop on every CPU (compiles, gcc, imports: the host, not the device)
Each window is put in the phase it ended in. Prints, per phase, the per-call time's quartiles against
quiet's, and the share of windows more than 10 % above quiet's median.
Run on the GPU machine:  python3 bench/probes/disturb_probe.py [--phase-s 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VICTIM = r"""
import json, os, sys, time, torch, triton, triton.language as tl
stop, rows, cols, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

@triton.jit
def relu_bias(x_ptr, b_ptr, o_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs % cols, mask=m)
    tl.store(o_ptr + offs, tl.maximum(x + b, 0.0), mask=m)

def cand(x, b):
    o = torch.empty_like(x)
    relu_bias[(triton.cdiv(x.numel(), 4096),)](x, b, o, x.numel(), b.numel(), BLOCK=4096)
    return o

dev = torch.device("cuda")
b = torch.randn(cols, device=dev)
xs = [torch.randn(rows, cols, device=dev) for _ in range(calls)]
flush = torch.empty(256 << 20, dtype=torch.int8, device=dev)
for _ in range(3):
    cand(xs[0], b)
torch.cuda.synchronize()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    cand(xs[0], b)
torch.cuda.current_stream().wait_stream(side)
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    outs = [cand(x, b) for x in xs]
s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s0.record(); torch.cuda._sleep(200_000); s1.record(); torch.cuda.synchronize()
spin = int(200_000 / s0.elapsed_time(s1))  # cycles per ms: a 1 ms spin, as the judge's sandbox
t_end = time.monotonic() + 0.3
while time.monotonic() < t_end:  # warm-up: clocks
    g.replay()
torch.cuda.synchronize()
print("ready", flush=True)
out = []
while not os.path.exists(stop):  # this process's caller makes the file when its phases are done
    flush.zero_()
    torch.cuda.synchronize()
    spun, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    spun.record()
    torch.cuda._sleep(spin)
    while not spun.query():
        pass
    t0 = time.monotonic()
    start.record()
    g.replay()
    end.record()
    torch.cuda.synchronize()
    out.append((t0, time.monotonic(), start.elapsed_time(end) * 1e3 / calls, spun.elapsed_time(start)))
print(json.dumps(out), flush=True)
"""

# a parent that imports torch but never touches CUDA, so that it may fork children that do
FORKER = r"""
import os, sys, time, torch
for line in sys.stdin:
    kids = []
    for _ in range(int(line)):
        r, w = os.pipe()
        t_fork = time.monotonic()
        pid = os.fork()
        if pid == 0:  # a sandbox: a CUDA context and 1 GiB, then it waits to be killed
            x = torch.empty(1 << 30, dtype=torch.int8, device="cuda")
            torch.cuda.synchronize()
            os.write(w, b"x")
            time.sleep(3600)
        os.close(w)
        os.read(r, 1)
        os.close(r)
        kids.append((pid, t_fork, time.monotonic()))
    print(" ".join(f"{a:.6f},{b:.6f}" for _, a, b in kids), flush=True)
    sys.stdin.readline()  # "exit": kill them, one after another
    reaped = []
    for pid, _, _ in kids:
        t = time.monotonic()
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        reaped.append(f"{t:.6f},{time.monotonic():.6f}")
    print(" ".join(reaped), flush=True)
"""

WORKER = r"""
import sys, time, torch
dev = torch.device("cuda")
x = torch.randn(2048, 2048, device=dev)
b = torch.randn(2048, device=dev)
torch.relu(x + b); torch.cuda.synchronize()
print("ready", flush=True)
for line in sys.stdin:
    what, seconds = line.split()
    t_end = time.monotonic() + float(seconds)
    n = 0
    while time.monotonic() < t_end:
        if what == "trials":  # a trial: fresh inputs, the forward, a sync, a compare on the host side
            y = torch.relu(torch.randn(2048, 2048, device=dev) + b)
            torch.cuda.synchronize()
            time.sleep(0.005)
        elif what == "stream":
            y = torch.relu(x + b)
            if n % 64 == 0:
                torch.cuda.synchronize()
        elif what == "alloc":
            y = torch.empty(2 << 30, dtype=torch.int8, device=dev)
            del y
            torch.cuda.empty_cache()
        n += 1
    torch.cuda.synchronize()
    print(n, flush=True)
"""


def _burn(t_end: float) -> None:
    while time.monotonic() < t_end:
        pass


def _start(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, bufsize=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase-s", type=float, default=3.0)
    ap.add_argument("--gap-s", type=float, default=1.0)
    ap.add_argument("--children", type=int, default=4, help="sandboxes started (and torn down) per phase")
    ap.add_argument("--shape", default="1024x1024")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows, cols = (int(v) for v in args.shape.split("x"))
    phases = ["quiet", "create", "exit", "trials", "stream", "alloc", "cpu", "quiet"]
    folder = Path(tempfile.mkdtemp())
    stop, script = folder / "stop", folder / "victim.py"  # @triton.jit wants its source in a file
    script.write_text(VICTIM)
    forker, worker = _start(FORKER), _start(WORKER)
    assert worker.stdout is not None and forker.stdout is not None and forker.stdin is not None
    assert worker.stdin is not None
    worker.stdout.readline()
    victim = subprocess.Popen([sys.executable, str(script), str(stop), str(rows), str(cols),
                               str(args.calls)], stdout=subprocess.PIPE, text=True)
    assert victim.stdout is not None
    victim.stdout.readline()
    spans: list[tuple[str, float, float]] = []
    events: dict[str, list[list[float]]] = {}
    for name in phases:
        time.sleep(args.gap_s)
        t0 = time.monotonic()
        if name == "quiet":
            time.sleep(args.phase_s)
        elif name == "create":
            forker.stdin.write(f"{args.children}\n")
            events["create"] = [[float(v) for v in p.split(",")] for p in forker.stdout.readline().split()]
            time.sleep(max(0.0, t0 + args.phase_s - time.monotonic()))
        elif name == "exit":
            forker.stdin.write("exit\n")
            events["exit"] = [[float(v) for v in p.split(",")] for p in forker.stdout.readline().split()]
            time.sleep(max(0.0, t0 + args.phase_s - time.monotonic()))
        elif name in ("trials", "stream", "alloc"):
            worker.stdin.write(f"{name} {args.phase_s}\n")
            worker.stdout.readline()
        elif name == "cpu":
            t_end = t0 + args.phase_s
            procs = [mp.Process(target=_burn, args=(t_end,)) for _ in range(os.cpu_count() or 1)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
        spans.append((name, t0, time.monotonic()))
    stop.touch()
    windows = json.loads(victim.stdout.readline())
    victim.wait()
    for p in (forker, worker):
        p.kill()
    quiet = [us for t0, t1, us, _ in windows if any(n == "quiet" and a <= t1 < b for n, a, b in spans)]
    base = statistics.median(quiet)
    def row(name: str, ws: list[float]) -> dict[str, object]:
        q = statistics.quantiles(ws, n=4, method="inclusive") if len(ws) > 1 else [ws[0]] * 3
        return {"phase": name, "windows": len(ws), "p25_us": q[0], "median_us": q[1], "max_us": max(ws),
                "slow_share": sum(w > 1.1 * base for w in ws) / len(ws)}

    table = [row(name, ws) for name, a, b in spans if (ws := [us for _, t1, us, _ in windows if a <= t1 < b])]
    # windows that overlap one child's context creation or teardown, whatever the phase
    for what in ("create", "exit"):
        ws = [us for t0, t1, us, _ in windows if any(t0 < e1 and t1 > e0 for e0, e1 in events.get(what, []))]
        if ws:
            table.append(row(f"overlapping a {what}", ws))
    print(f"\nvictim: relu(x + bias) {args.shape}, {args.calls}-call graph windows; "
          f"quiet median {base:.3f} us/call")
    print(f"{'phase':>22} {'windows':>7} {'p25 us':>8} {'median':>8} {'max':>8} {'>1.1x quiet':>11}")
    for r in table:
        print(f"{r['phase']:>22} {r['windows']:7d} {r['p25_us']:8.3f} {r['median_us']:8.3f} "
              f"{r['max_us']:8.3f} {r['slow_share']:11.0%}")
    durations = {what: [round(e1 - e0, 3) for e0, e1 in evs] for what, evs in events.items()}
    print(f"context create (fork to 1 GiB allocated) and teardown (kill to reaped), s: {durations}")
    if args.json:
        Path(args.json).write_text(json.dumps({"table": table, "spans": spans, "events": events,
                                               "windows": windows}, indent=1))


if __name__ == "__main__":
    main()

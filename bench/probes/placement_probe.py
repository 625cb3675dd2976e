"""Does where a tensor lies on the card move a memory-bound kernel's time? (issue 32, spread under load)

Run AU-BQ-7f28c75 saw the 4096^2 relu(x + bias) kernel of bench/judge_speed.py take 46.6-46.9 us in some
fresh evaluations and 49.6-51.6 us in others, steady within each evaluation, while the reference's time
(its process lives on) held to 0.2 %. One explanation: each evaluation's sandbox is a fresh process,
so its buffers land on other physical memory. This probe separates the two:

  within:  one process, SETS buffer sets allocated one after another (all kept alive), each timed;
  across:  PROCS fresh processes, each timing its first buffer set.

If `across` spreads and `within` does too, rotating buffers inside one evaluation averages the effect out;
if only `across` spreads, the process (its context, its page tables) is the cause.

Under load (`--under-load N`: N judges of bench/judge_speed.py judging fresh 2048^2 kernels beside it,
as `judge_speed.py --under-load` does): run CG (session 32) saw one evaluation in ten slowed by 7.5 % in
every window with no memory freed, no clock dipping and no other work on the card meanwhile, while
CE's probe with no load found no such spread. Each set is then timed under the device's timing lock,
as the judge's timed op is (the other judges' timed and sealed work waits; their unlocked trials do
not), `--gap-s` apart (other judges allocate and free meanwhile), and every set is timed twice, once
as it is made and once after all of them (`again`): a set slow both times is slow because of where
its memory lies; one slow once was slowed by something passing. If a slow process also has fast sets,
timing a candidate on two buffer sets allocated apart and keeping the faster would lift it; if all of
a process's sets are slow, the process is the cause, and only another process would help.

Run on the GPU machine:  python bench/probes/placement_probe.py [--procs 6] [--sets 8] [--under-load 3]
    [--gap-s 0.3] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def relu_bias(x_ptr, b_ptr, o_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs % cols, mask=m)
    tl.store(o_ptr + offs, tl.maximum(x + b, 0.0), mask=m)


def _time_us(x: torch.Tensor, b: torch.Tensor, o: torch.Tensor, windows: int, calls: int) -> float:
    """Median over `windows` of the mean time of `calls` back-to-back launches (CUDA events)."""
    grid = (triton.cdiv(x.numel(), 4096),)
    for _ in range(3):
        relu_bias[grid](x, b, o, x.numel(), b.numel(), BLOCK=4096)
    torch.cuda.synchronize()
    each = []
    for _ in range(windows):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            relu_bias[grid](x, b, o, x.numel(), b.numel(), BLOCK=4096)
        end.record()
        end.synchronize()
        each.append(start.elapsed_time(end) * 1000.0 / calls)
    return statistics.median(each)


def one_process(rows: int, cols: int, sets: int, windows: int, calls: int, locked: bool = False,
                gap_s: float = 0.0) -> dict:
    """Time SETS buffer sets made one after another, `gap_s` apart, each as it is made and again once
    all exist; under the device's timing lock with `locked` (the judge's own, host-wide)."""
    hold: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    if locked:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from drkernel.sandbox.devicelock import timing_lock

        def hold() -> contextlib.AbstractContextManager:
            return timing_lock("cuda:0", "probe")
    torch.manual_seed(0)
    b = torch.randn(cols, device="cuda")
    kept, rows_out = [], []
    for k in range(sets):
        if k and gap_s:
            time.sleep(gap_s)
        x = torch.randn(rows, cols, device="cuda")
        o = torch.empty_like(x)
        kept.append((x, o))
        with hold():
            us = _time_us(x, b, o, windows, calls)
        rows_out.append({"set": k, "x_ptr": x.data_ptr(), "o_ptr": o.data_ptr(), "us": us})
    for row, (x, o) in zip(rows_out, kept):
        if gap_s:
            time.sleep(gap_s)
        with hold():
            row["again_us"] = _time_us(x, b, o, windows, calls)
    return {"sets": rows_out}


def slow_sets(procs: list[dict], over: float = 1.02) -> dict[str, int]:
    """Of every timing over `over` x the fastest anywhere: sets slow both times (their memory), slow
    once (something passing), and processes slow in every set (the process)."""
    fastest = min(min(s["us"], s.get("again_us", s["us"])) for p in procs for s in p["sets"])
    bar = over * fastest
    both = once = whole = 0
    for p in procs:
        slow = [(s["us"] > bar, s.get("again_us", s["us"]) > bar) for s in p["sets"]]
        both += sum(a and b for a, b in slow)
        once += sum(a != b for a, b in slow)
        whole += all(a or b for a, b in slow)
    return {"slow_both_times": both, "slow_once": once, "processes_slow_in_every_set": whole,
            "sets": sum(len(p["sets"]) for p in procs)}


def _spread(values: list[float]) -> float:
    return max(values) / min(values)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--procs", type=int, default=6)
    ap.add_argument("--sets", type=int, default=8)
    ap.add_argument("--windows", type=int, default=15)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--under-load", type=int, default=0,
                    help="judges of bench/judge_speed.py working beside the probe; its timings then hold "
                         "the device's timing lock, as the judge's timed op does")
    ap.add_argument("--gap-s", type=float, default=0.0, help="seconds between one set and the next")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--locked", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_process(args.rows, args.cols, args.sets, args.windows, args.calls, args.locked,
                                     args.gap_s)))
        return
    load = None
    if args.under_load:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from judge_speed import Load  # bench/judge_speed.py

        load = Load(args.under_load)
        time.sleep(15.0)  # the judges start (about 8 s each, side by side) and get going
    procs = []
    try:
        for p in range(args.procs):
            cmd = [sys.executable, __file__, "--child", "--rows", str(args.rows), "--cols", str(args.cols),
                   "--sets", str(args.sets), "--windows", str(args.windows), "--calls", str(args.calls),
                   "--gap-s", str(args.gap_s)] + (["--locked"] if load is not None else [])
            cp = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if cp.returncode != 0:
                print(f"process {p} failed: {cp.stderr[-2000:]}", flush=True)
                continue
            procs.append(json.loads(cp.stdout.strip().splitlines()[-1]))
            us = [s["us"] for s in procs[-1]["sets"]]
            again = [s["again_us"] for s in procs[-1]["sets"]]
            print(f"process {p}: " + " ".join(f"{v:7.2f}" for v in us) + f"   within {_spread(us):.3f}\n"
                  "      again: " + " ".join(f"{v:7.2f}" for v in again), flush=True)
    finally:
        if load is not None:
            done = load.close()
            print(f"under load: {done} evaluations by {args.under_load} judge(s) meanwhile", flush=True)
    if not procs:
        sys.exit("no process finished")
    first = [p["sets"][0]["us"] for p in procs]
    within = [_spread([s["us"] for s in p["sets"]]) for p in procs]
    means = [statistics.mean(s["us"] for s in p["sets"]) for p in procs]
    print(f"{args.rows}x{args.cols}: across processes (first set) spread {_spread(first):.3f}; "
          f"within a process spread median {statistics.median(within):.3f}, max {max(within):.3f}; "
          f"across processes of the mean over {args.sets} sets spread {_spread(means):.3f}", flush=True)
    slow = slow_sets(procs)
    print(f"over 1.02 x the fastest: {slow['slow_both_times']} of {slow['sets']} sets slow both times "
          f"(their memory), {slow['slow_once']} slow once (something passing); "
          f"{slow['processes_slow_in_every_set']} of {len(procs)} processes slow in every set", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "processes": procs, "across_first": _spread(first),
                       "within": within, "across_means": _spread(means), "slow": slow}, f, indent=1)


if __name__ == "__main__":
    main()

"""Does where a tensor lies on the card move a memory-bound kernel's time? (issue 32, spread under load)

Run AU-BQ-7f28c75 saw the 4096^2 relu(x + bias) kernel of bench/judge_speed.py take 46.6-46.9 us in some
fresh evaluations and 49.6-51.6 us in others, steady within each evaluation, while the reference's time
(its process lives on) held to 0.2 %. One explanation: each evaluation's sandbox is a fresh process,
so its buffers land on other physical memory. This probe separates the two:

  within:  one process, SETS buffer sets allocated one after another (all kept alive), each timed;
  across:  PROCS fresh processes, each timing its first buffer set.

If `across` spreads and `within` does too, rotating buffers inside one evaluation averages the effect out;
if only `across` spreads, the process (its context, its page tables) is the cause.

Run on the GPU machine:  python bench/probes/placement_probe.py [--procs 6] [--sets 8] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

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


def one_process(rows: int, cols: int, sets: int, windows: int, calls: int) -> dict:
    torch.manual_seed(0)
    b = torch.randn(cols, device="cuda")
    kept, rows_out = [], []
    for k in range(sets):
        x = torch.randn(rows, cols, device="cuda")
        o = torch.empty_like(x)
        kept.append((x, o))
        rows_out.append({"set": k, "x_ptr": x.data_ptr(), "o_ptr": o.data_ptr(),
                         "us": _time_us(x, b, o, windows, calls)})
    return {"sets": rows_out}


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
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_process(args.rows, args.cols, args.sets, args.windows, args.calls)))
        return
    procs = []
    for p in range(args.procs):
        cp = subprocess.run([sys.executable, __file__, "--child", "--rows", str(args.rows), "--cols",
                             str(args.cols), "--sets", str(args.sets), "--windows", str(args.windows),
                             "--calls", str(args.calls)], capture_output=True, text=True, check=False)
        if cp.returncode != 0:
            print(f"process {p} failed: {cp.stderr[-2000:]}", flush=True)
            continue
        procs.append(json.loads(cp.stdout.strip().splitlines()[-1]))
        us = [s["us"] for s in procs[-1]["sets"]]
        print(f"process {p}: " + " ".join(f"{v:7.2f}" for v in us) + f"   within spread {_spread(us):.3f}",
              flush=True)
    if not procs:
        sys.exit("no process finished")
    first = [p["sets"][0]["us"] for p in procs]
    within = [_spread([s["us"] for s in p["sets"]]) for p in procs]
    means = [statistics.mean(s["us"] for s in p["sets"]) for p in procs]
    print(f"{args.rows}x{args.cols}: across processes (first set) spread {_spread(first):.3f}; "
          f"within a process spread median {statistics.median(within):.3f}, max {max(within):.3f}; "
          f"across processes of the mean over {args.sets} sets spread {_spread(means):.3f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "processes": procs, "across_first": _spread(first),
                       "within": within, "across_means": _spread(means)}, f, indent=1)


if __name__ == "__main__":
    main()

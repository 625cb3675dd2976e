"""Judge overhead on a GPU: fixed cost per evaluation, evaluations per minute, speedup spread.

Run on the GPU machine:  python bench/eval_overhead.py [--device cuda] [--repeats 10] [--out DIR]
Prints markdown tables (and writes them to DIR/eval_overhead.md when --out is given).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalRequest

ELEMENTWISE_REF = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0
N = {n}
def get_inputs():
    return [torch.randn(N, 4096)]
def get_init_inputs():
    return []
"""

ELEMENTWISE_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_scale_kernel[(triton.cdiv(n, 2048),)](x, out, n, BLOCK=2048)
        return out
"""

SOFTMAX_REF = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
def get_inputs():
    return [torch.randn({rows}, 2048)]
def get_init_inputs():
    return []
"""

SOFTMAX_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def softmax_rows(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        softmax_rows[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out
"""

MATMUL_RELU_REF = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b)
def get_inputs():
    return [torch.randn(4096, 4096), torch.randn(4096, 4096)]
def get_init_inputs():
    return []
"""

LAZY_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)

class ModelNew(nn.Module):
    def forward(self, a, b):
        y = a @ b
        out = torch.empty_like(y)
        relu_kernel[(triton.cdiv(y.numel(), 1024),)](y, out, y.numel(), BLOCK=1024)
        return out
"""

MATMUL_REF = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, a, b):
        return a @ b
def get_inputs():
    return [torch.randn({n}, {n}), torch.randn({n}, {n})]
def get_init_inputs():
    return []
"""

# A plain tiled fp32 matmul in IEEE precision: a kernel of a few milliseconds at n=4096 on a GPU.
MATMUL_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :],
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

class ModelNew(nn.Module):
    def forward(self, a, b):
        a = a.contiguous()
        b = b.contiguous()
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=torch.float32)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        matmul_kernel[grid](a, b, c, M, N, K, BM=64, BN=64, BK=32)
        return c
"""


class _Lines(list):  # type: ignore[type-arg]
    """Collects the report and prints each line at once, so a run cut short keeps its sections."""

    def append(self, line: str) -> None:  # type: ignore[override]
        super().append(line)
        print(line, flush=True)

    def __iadd__(self, more):  # type: ignore[no-untyped-def, override]
        for line in more:
            self.append(line)
        return self


def evaluate(judge: Judge, ref: str, ker: str, **opts: object) -> dict:
    r = judge.evaluate(EvalRequest(reference_code=ref, kernel_code=ker, options=EvalOptions(**opts)))
    d = r.to_dict()
    if d["outcome"] != "ok":  # every kernel here is honest: say what the judge saw, for the record
        print(not_ok_line(d), flush=True)
    return d


def not_ok_line(d: dict) -> str:
    """One line on an evaluation that is not ok: hack codes with evidence, the error, both timings."""
    def timing(t: dict | None) -> str:
        if not t:
            return "-"
        keys = ("median_ms", "window_calls", "windows", "external_ms_per_call", "overhead_ms",
                "graph_submit_ms")
        return json.dumps({k: t.get(k) for k in keys})
    return (f"NOT OK: {d['outcome']} hacks={json.dumps(d.get('hack_details') or {})} "
            f"error={json.dumps(d.get('error'))} "
            f"kernel_timing={timing(d.get('kernel_timing'))} "
            f"reference_timing={timing(d.get('reference_timing'))}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--mix", type=int, default=12, help="evaluations in the throughput mix")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--spares", default="3,6", help="pool sizes for the throughput table (comma separated)")
    ap.add_argument("--preroll-us", type=float, default=50.0, help="launch pre-roll compared with none")
    ap.add_argument("--matmul-n", type=int, default=4096, help="size of the milliseconds-scale matmul")
    ap.add_argument("--only-overhead", action="store_true", help="stop after the fixed-overhead table")
    args = ap.parse_args()
    lines = _Lines()
    small_ref, small_ker = ELEMENTWISE_REF.format(n=256), ELEMENTWISE_KERNEL
    # every sandbox compiles into its own Triton cache (a shared one crosses the isolation boundary)
    with Judge(device=args.device) as judge:
        t0 = time.monotonic()
        judge.warm()
        lines.append(f"judge start (reference + spare sandboxes warm): {time.monotonic() - t0:.2f} s\n")
        # 1. fixed overhead: same kernel twice with a shared Triton cache -> no compile the 2nd time
        evaluate(judge, small_ref, small_ker)
        rows = []
        for _ in range(5):
            d = evaluate(judge, small_ref, small_ker)
            stages = d["stage_s"]
            timed, first = stages.get("timing", 0.0), stages.get("first_call", 0.0)
            rows.append((d["wall_s"], timed, first, d["wall_s"] - timed - first, d["outcome"], stages))
        lines.append("## Fixed overhead per evaluation "
                     f"(warm, Triton cache shared, {judge.spares} spares, 5 runs)\n")
        lines.append("first call: the candidate's first forward, which loads its compiled kernels\n")
        lines.append("| wall s | timing stage s | first call s | wall - timing - first call s "
                     "| waited for a spare s | outcome |\n|---|---|---|---|---|---|")
        lines += [f"| {w:.3f} | {t:.3f} | {c:.3f} | {f:.3f} | {st.get('spare_wait', 0.0):.3f} "
                  f"| {o} |"
                  for w, t, c, f, o, st in rows]
        lines.append(f"\nmedian fixed overhead: {statistics.median(r[3] for r in rows):.3f} s "
                     f"(with the first call: {statistics.median(r[3] + r[2] for r in rows):.3f} s); "
                     f"stages of the last run: {json.dumps(rows[-1][5])}\n")
        # 2. throughput over a mix of small problems, fresh compile each (cache off)
    if args.only_overhead:
        return
    mix = [(ELEMENTWISE_REF.format(n=256 * (1 + i % 3)), ELEMENTWISE_KERNEL) if i % 2 == 0
           else (SOFTMAX_REF.format(rows=512 * (1 + i % 3)), SOFTMAX_KERNEL) for i in range(args.mix)]
    lines.append("## Throughput, one GPU, mix of small problems (fresh sandbox and Triton compile each, "
                 "100 timed calls)\n")
    lines.append("| warm spares | evaluations | seconds | evaluations/min | waited for a spare, s "
                 "| outcomes |\n"
                 "|---|---|---|---|---|---|")
    # the larger pool first, as in runs E and I
    for spares in sorted({int(x) for x in args.spares.split(",")}, reverse=True):
        with Judge(device=args.device, spares=spares) as judge:
            judge.warm()
            t0 = time.monotonic()
            done = [evaluate(judge, r, k) for r, k in mix]
            elapsed = time.monotonic() - t0
            waited = sum(d["stage_s"].get("spare_wait", 0.0) for d in done)
            lines.append(f"| {spares} | {len(mix)} | {elapsed:.1f} | **{60 * len(mix) / elapsed:.1f}** "
                         f"| {waited:.1f} | "
                         f"{sorted({d['outcome'] for d in done})} |")
    lines.append("")
    with Judge(device=args.device) as judge:
        judge.warm()
        # 3. speedup spread, same honest kernel 10 times (reference timing cached after the 1st)
        # with and without the launch pre-roll, interleaved so that both see the same machine state
        big_ref = ELEMENTWISE_REF.format(n=4096)
        runs: dict[float, list[dict]] = {0.0: [], args.preroll_us: []}
        for _ in range(args.repeats):
            for pre in runs:
                runs[pre].append(evaluate(judge, big_ref, ELEMENTWISE_KERNEL, launch_preroll_us=pre))
        for pre, sp in runs.items():
            s = [d["speedup"] for d in sp if d["speedup"]]
            lines.append(f"## Speedup spread, honest elementwise kernel on a 4096x4096 fp32 input, "
                         f"launch_preroll_us={pre:g}, {len(s)} evaluations\n")
            if not s:
                lines.append(f"no speedup: {[(d['outcome'], d['hacks'], d['error']) for d in sp[:2]]}\n")
                continue
            lines.append(f"speedup min {min(s):.3f}x, median {statistics.median(s):.3f}x, max {max(s):.3f}x "
                         f"(spread {max(s) / min(s):.3f}); reference ms {sp[0]['reference_ms']:.4f}; "
                         "kernel ms: "
                         + ", ".join(f"{d['kernel_ms']:.4f}" for d in sp if d["kernel_ms"]))
            lines.append(f"outcomes {sorted({d['outcome'] for d in sp})}; coverage of the honest kernel: "
                         f"{[round(d['coverage'] or 0, 4) for d in sp[:3]]}\n")
        # 3b. the same on a kernel of milliseconds (KernelBench-sized work)
        mm_ref = MATMUL_REF.format(n=args.matmul_n)
        sp = [evaluate(judge, mm_ref, MATMUL_KERNEL) for _ in range(args.repeats)]
        s = [d["speedup"] for d in sp if d["speedup"]]
        lines.append(f"## Speedup spread, fp32 IEEE Triton matmul, n={args.matmul_n}, "
                     f"{len(s)} evaluations\n")
        if s:
            lines.append(f"speedup min {min(s):.3f}x, median {statistics.median(s):.3f}x, max {max(s):.3f}x "
                         f"(spread {max(s) / min(s):.3f}); reference ms {sp[0]['reference_ms']}; kernel ms: "
                         + ", ".join(f"{d['kernel_ms']:.4f}" for d in sp if d["kernel_ms"]) + "\n")
        else:
            lines.append(f"no speedup: {[(d['outcome'], d['error']) for d in sp[:2]]}\n")
        # 4. profiling ratio: honest softmax vs lazy (torch softmax + a trivial Triton copy)
        sref = SOFTMAX_REF.format(rows=8192)
        honest, lazy = evaluate(judge, sref, SOFTMAX_KERNEL), evaluate(judge, MATMUL_RELU_REF, LAZY_KERNEL)
        lines.append("## Profiling ratio (coverage)\n\n"
                     "| candidate | outcome | coverage | speedup | top kernels |\n|---|---|---|---|---|")
        for name, d in (("honest softmax", honest), ("lazy: torch matmul + Triton relu", lazy)):
            top = "; ".join(f"{k['name'][:30]}{'*' if k['own'] else ''}={k['device_us']:.0f}us"
                            for k in d["kernels"][:3])
            lines.append(f"| {name} | {d['outcome']} {d['hacks']} | {d['coverage']} | {d['speedup']} "
                         f"| {top} |")
    text = "\n".join(lines)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "eval_overhead.md").write_text(text)


if __name__ == "__main__":
    main()

"""The device's bandwidth, each way peak.py measures it, beside the honest read-only solution that a
copy-only peak flagged (107_Max_reduction_over_last_dim, 2 GiB of fp32). Prints a table.

Usage (on the GPU): python3 bench/probes/peak_probe.py [--reps 10]
The ceiling the judge uses must not be below any honest kernel's rate: the last column says by how much
each way's rate exceeds the copy's, and the verdict line compares the judge's ceiling with 107's rate.
Every rate here is the fastest of --reps calls, as peak.measure takes it; each way also with a ~1 ms
GPU spin queued before each call (`+spin`), as the judge's windows have: does the ceiling's own op
time a launch gap that the judge's windows do not?"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

from drkernel.sandbox.inside import peak

ROOT = Path(__file__).resolve().parents[2]


def times_ms(fn: Any, reps: int, spin_cycles: int = 0) -> list[float]:
    """Events around each call, by the judge's own peak timer (peak.event_timer); with `spin_cycles`, a
    GPU spin is queued first, so the call is submitted while the GPU is busy and its launch gap is not
    timed (as the judge's timed windows do)."""

    def pair() -> tuple[Any, Any]:
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    timer = peak.event_timer(pair, torch.cuda.Event.record, torch.cuda.Event.elapsed_time,
                             torch.cuda.synchronize, torch.cuda._sleep, spin_cycles)
    return timer(fn, reps)


def cycles_per_ms() -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(200_000)
    end.record()
    end.synchronize()
    return 200_000 / max(start.elapsed_time(end), 1e-3)


def solution_107() -> Any:
    path = ROOT / "drkernel/problems/builtin/107_Max_reduction_over_last_dim/solution.py"
    spec = importlib.util.spec_from_file_location("sol107", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ModelNew()


def time_107(dev: torch.device, reps: int, spin: int) -> tuple[str, int, float, float]:
    """The 107 solution on its 2 GiB input, with the spin (the judge's windows have one): in run W
    the judge timed it at 4579 GB/s, 1.044 of the ceiling this op measured without a spin."""
    x = torch.randn(65536, 8192, device=dev)
    model = solution_107()
    ms = min(times_ms(lambda: model(x), reps, spin))
    nbytes = x.numel() * 4 + 65536 * 4
    return "solution_107 +spin", nbytes, ms, nbytes / (ms * 1e6)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("peak_probe needs a CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    rows = []
    spin = int(cycles_per_ms())  # ~1 ms
    for name, (fn, nbytes) in peak.bandwidth_candidates(dev).items():
        for tag, cycles in (("", 0), (" +spin", spin)):
            ms = min(times_ms(fn, args.reps, cycles))
            rows.append((name + tag, nbytes, ms, nbytes / (ms * 1e6)))
    torch.cuda.empty_cache()
    rows.append(time_107(dev, args.reps, spin))
    torch.cuda.empty_cache()
    ceiling, fp32, bf16, ways = peak.measure(dev, times_ms)
    copy = next(r[3] for r in rows if r[0] == "copy")
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"{'way':<30}{'bytes':>14}{'ms':>10}{'GB/s':>10}{'x copy':>8}")
    for name, nb, t, gbs in rows:
        print(f"{name:<30}{nb:>14}{t:>10.4f}{gbs:>10.0f}{gbs / copy:>8.3f}")
    honest = rows[-1][3]
    print(f"judge ceiling (peak.measure) {ceiling:.0f} GB/s "
          f"({', '.join(f'{k} {v:.0f}' for k, v in ways.items())}); "
          f"fp32 {fp32:.1f} TFLOP/s, bf16 {bf16:.0f} TFLOP/s")
    print(f"VERDICT: 107's honest {honest:.0f} GB/s is {honest / ceiling:.3f} of the ceiling "
          f"(flagged past 1.1): {'ok' if honest / ceiling <= 1.1 else 'FALSE FLAG'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

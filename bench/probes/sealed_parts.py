"""The sealed span's parts per problem, from a suite JSON (bench/suite_gpu.py --json): what the bound
is made of, and the reported time over it. Issue 32, item 1: how tight stages/sealed.FACTOR may be."""

from __future__ import annotations

import json
import sys


def main() -> int:
    data = json.load(open(sys.argv[1]))
    keys = ("gap_ms", "null_ms", "copy_ms", "own_ms", "fill_ms", "take_ms", "stage_ms")
    print(f"{'problem':40s} {'calls':>5s} " + " ".join(f"{k:>9s}" for k in keys)
          + f" {'bound':>9s} {'reported':>9s} {'ratio':>6s} {'host':>8s}")
    for r in data["results"]:
        t = r.get("kernel_timing") or {}
        parts, calls = t.get("sealed_parts") or {}, t.get("sealed_calls") or 0
        if not parts:
            print(f"{r['problem']:40s} no span: {t.get('sealed_skipped')}")
            continue
        bound = t["sealed_ms_per_call"] * calls
        reported = (r["kernel_ms"] or 0.0) * calls
        host = parts["gap_ms"] - 2 * parts["null_ms"] - parts["own_ms"]  # what the span held besides the work
        print(f"{r['problem']:40s} {calls:5d} " + " ".join(f"{parts.get(k, 0.0):9.4f}" for k in keys)
              + f" {bound:9.4f} {reported:9.4f}"
              + f" {reported / bound if bound else float('nan'):6.2f} {host:8.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

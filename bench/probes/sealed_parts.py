"""The sealed span's parts per problem, from a suite JSON (bench/suite_gpu.py --json): what the bound
is made of, and the reported time over it. Issue 32, item 1: how tight stages/sealed.FACTOR may be.

Each null sits beside what it stands for: the bare null (the hops, subtracted twice) beside the gap,
the work null's fill and take beside the span's, and the gap charged with their excess beside the gap.
A JSON written before the work null (no `bare_null_ms`) shows its null as the bare one and no charge."""

from __future__ import annotations

import json
import sys

COLUMNS = ("gap_ms", "bare_null_ms", "fill_ms", "null_fill_ms", "take_ms", "null_take_ms", "charged_ms",
           "copy_ms", "own_ms", "stage_ms")


def main() -> int:
    with open(sys.argv[1]) as f:
        data = json.load(f)
    print(f"{'problem':40s} {'calls':>5s} " + " ".join(f"{k.removesuffix('_ms'):>10s}" for k in COLUMNS)
          + f" {'bound':>9s} {'reported':>9s} {'ratio':>6s} {'host':>8s}")
    for r in data["results"]:
        t = r.get("kernel_timing") or {}
        parts, calls = t.get("sealed_parts") or {}, t.get("sealed_calls") or 0
        if not parts:
            print(f"{r['problem']:40s} no span: {t.get('sealed_skipped')}")
            continue
        parts = {"bare_null_ms": parts["null_ms"], "charged_ms": parts["gap_ms"]} | parts
        bound = t["sealed_ms_per_call"] * calls
        reported = (r["kernel_ms"] or 0.0) * calls
        host = parts["gap_ms"] - 2 * parts["bare_null_ms"] - parts["own_ms"]  # the span's besides the work
        cells = " ".join(f"{parts.get(k, float('nan')):10.4f}" for k in COLUMNS)
        print(f"{r['problem']:40s} {calls:5d} {cells} {bound:9.4f} {reported:9.4f}"
              + f" {reported / bound if bound else float('nan'):6.2f} {host:8.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

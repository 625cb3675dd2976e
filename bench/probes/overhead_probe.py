"""Why an honest small kernel's timed op ran 3x longer than its reference's on the judge's clock
(issue 32, the GPU run at 131ff58: mse, 1.36 ms a call against 0.45): the reference's and the
candidate's per-call overhead (the judge's clock less the windows, over the calls), for one honest
kernel evaluated several times, with the spare pool refilling during each evaluation (the default)
and without (refill=False). Prints a table."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from drkernel.sandbox.judge import Judge  # noqa: E402
from drkernel.types import EvalOptions, EvalRequest  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel", default="mse")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2] / "tests" / "assets"
    ref = (root / "references" / f"{args.kernel}.py").read_text()
    ker = (root / "kernels" / f"{args.kernel}.py").read_text()
    opts = EvalOptions(num_correct_trials=3, num_perf_trials=20, seed=None)
    rows = []
    for refill in (True, False):
        with Judge(device="cuda", cache_path=None, refill=refill) as judge:
            judge.warm()
            for k in range(args.repeats):
                r = judge.evaluate(EvalRequest(reference_code=ref, kernel_code=ker, options=opts))
                kt, rt = r.kernel_timing, r.reference_timing
                calls = (kt.window_calls or 1) * (kt.windows or 1) if kt else 1

                def per_call(stats):  # noqa: ANN001, ANN202
                    return round(stats.overhead_ms / calls, 4) if stats and stats.overhead_ms else None

                rows.append({"refill": refill, "k": k, "outcome": r.outcome.value, "hacks": r.hacks,
                             "cand_ms": per_call(kt), "ref_ms": per_call(rt),
                             "confirm_runs": kt.confirm_runs if kt else None, "stage_s": r.stage_s})
    for row in rows:
        print(f"refill={row['refill']!s:5} #{row['k']} {row['outcome']:14} overhead/call: candidate "
              f"{row['cand_ms']} ms, reference {row['ref_ms']} ms; runs {row['confirm_runs']}")
    cand = [r["cand_ms"] for r in rows if r["cand_ms"]]
    print("median candidate overhead/call", statistics.median(cand) if cand else None)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How the device lock's plan of holds bounds judges sharing a GPU: a model run on the real lock (issue 32).

Run BV (H100, 4 judge processes, fresh 2048^2 kernels): 61.9 evaluations a minute, 3.71 s an evaluation,
1.02 s of it waiting for the device lock (0.52 exclusive, 0.50 shared) against 0.30 s held exclusively.
Which change of the plan of holds cuts the waits? This probe answers it before any judge change: judge
threads run an evaluation's sections as sleeps of BV's measured lengths, taking drkernel's own lock
(sandbox/devicelock.py: flocks, writers first) on a simulated GPU, "cuda:0" with the lock files in a
private folder. No GPU, no sandbox: only the lock and the order and length of the holds.

Plans (each a sequence of sections: U unlocked, S shared, X exclusive; seconds from run BV):
  as_is         the judge at 7f28c75: trials, launch modes (S), window build (S), timed (X), the sealed
                stage's prepare (S) and 3 x [work (S), span (X)] and the last check (S), profile (X)
  sealed_spans  each span's work (the reference's staging, the last span's check) and the span in one
                exclusive hold: 3 exclusive holds, no shared hold between them
  sealed_one    the sealed stage in one exclusive hold (prepare, work, spans, check)
  build_free    the window build unlocked (its device work is a 0.05 s warm-up and one round)
  build_split   the window build's host part unlocked, its warm-up and round (0.08 s, a guess) shared
  split_one, split_spans   build_split with sealed_one, with sealed_spans
  no_shared     no shared holds at all: the bound where only exclusive holds queue

The model leaves out what the lock does not see: device work of neighbours slowing each other, the
host's CPUs. It predicts; the GPU run decides (docs/benchmarks.md). Prints a table.

    PYTHONPATH=. python3 bench/probes/lock_model.py [--judges 4] [--evals 12] [--scale 0.5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable

# seconds of run BV's per-evaluation medians (docs/benchmark_log.md, session 25): the candidate's trials
# op 1.22 and what else runs unlocked (load, sandboxes, drop, kill) to 2.69 s an evaluation without
# waits; the window build 0.24 (the reference's checksums beside it); the timed op 0.18; the sealed
# stage's ops (prepare 0.08; a span's stage 0.037 and check 0.007; a span's nulls and run 0.022);
# the profile 0.05. Launch modes 0.02 is a guess (BV did not time it apart).
UNLOCKED_BEFORE, UNLOCKED_AFTER = 1.45, 0.45
MODES, BUILD, BUILD_DEVICE, TIMED = 0.02, 0.24, 0.08, 0.18
PREPARE, STAGE, CHECK, SPAN, PROFILE = 0.08, 0.037, 0.007, 0.022, 0.05
SPANS = 3
_LENGTHS = ("UNLOCKED_BEFORE", "UNLOCKED_AFTER", "MODES", "BUILD", "BUILD_DEVICE", "TIMED", "PREPARE",
            "STAGE", "CHECK", "SPAN", "PROFILE")

Plan = list[tuple[str, str, float]]  # (kind U|S|X, section name, seconds)


def _sealed(holds: str) -> Plan:
    """The sealed stage: "fine" (as the judge at 7f28c75), "spans" (each span's work with its span in one
    exclusive hold) or "one" (the whole stage in one)."""
    steps: Plan = [("S", "sealed_prepare", PREPARE)]
    for span in range(SPANS):
        work = STAGE + (CHECK if span else 0.0)
        if holds == "spans":
            steps.append(("X", "sealed", work + SPAN))
        else:
            steps += [("S", "sealed_work", work), ("X", "sealed", SPAN)]
    steps.append(("S", "sealed_work", CHECK))
    if holds == "one":
        return [("X", "sealed", sum(t for _, _, t in steps))]
    return steps


def plans() -> dict[str, Plan]:
    head: Plan = [("U", "trials", UNLOCKED_BEFORE), ("S", "launch_modes", MODES)]
    tail: Plan = [("X", "profile", PROFILE), ("U", "rest", UNLOCKED_AFTER)]
    build: Plan = [("S", "window_build", BUILD)]
    split: Plan = [("U", "window_build", BUILD - BUILD_DEVICE), ("S", "window_build", BUILD_DEVICE)]
    timed: Plan = [("X", "timed", TIMED)]
    out = {
        "as_is": head + build + timed + _sealed("fine") + tail,
        "sealed_spans": head + build + timed + _sealed("spans") + tail,
        "sealed_one": head + build + timed + _sealed("one") + tail,
        "build_free": head + [("U", "window_build", BUILD)] + timed + _sealed("fine") + tail,
        "build_split": head + split + timed + _sealed("fine") + tail,
        "split_one": head + split + timed + _sealed("one") + tail,
        "split_spans": head + split + timed + _sealed("spans") + tail,
    }
    out["no_shared"] = [(("U" if k == "S" else k), name, t) for k, name, t in out["as_is"]]
    return out


def run_plan(plan: Plan, judges: int, evals: int, scale: float, device: str = "cuda:0") -> dict[str, float]:
    """`judges` threads, each running `plan` `evals` times on the lock of `device`; per evaluation (in
    the plan's seconds, the scale undone): wall, waits exclusive and shared, held exclusively."""
    from drkernel.sandbox.devicelock import counting_waits, gpu_work, timing_lock

    section: dict[str, Callable[[str, str], object]] = {"S": gpu_work, "X": timing_lock}
    rows: list[dict[str, float]] = []
    lock = threading.Lock()
    start = threading.Barrier(judges)

    def judge(k: int) -> None:
        start.wait()
        time.sleep(k * 0.37 * scale)  # staggered, as a pool's judges drift apart
        for _ in range(evals):
            t0 = time.monotonic()
            with counting_waits() as waits:
                for kind, name, seconds in plan:
                    if kind == "U":
                        time.sleep(seconds * scale)
                        continue
                    with section[kind](device, name):  # type: ignore[attr-defined]
                        time.sleep(seconds * scale)
            with lock:
                rows.append({"wall": time.monotonic() - t0, **waits})

    threads = [threading.Thread(target=judge, args=(k,)) for k in range(judges)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    med = {k: statistics.median(r.get(k, 0.0) for r in rows) / scale for k in rows[0]}
    return {"per_minute": 60 * len(rows) / (wall / scale), **med}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--judges", default="4", help="comma list of judge counts")
    ap.add_argument("--evals", type=int, default=12, help="evaluations per judge")
    ap.add_argument("--scale", type=float, default=0.5, help="sleep this fraction of each section's seconds")
    ap.add_argument("--plans", default=None, help=f"comma list (default all: {','.join(plans())})")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=SECONDS",
                    help="another length for a section, e.g. TIMED=0.06 (the constants above)")
    args = ap.parse_args()
    for item in args.set:
        name, _, value = item.partition("=")
        if name not in _LENGTHS:
            raise SystemExit(f"--set {item}: NAME is one of {', '.join(_LENGTHS)}")
        globals()[name] = float(value)
    os.environ["DRKERNEL_LOCK_DIR"] = tempfile.mkdtemp(prefix="lock-model-")
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    table = plans()
    print(f"{'plan':>12} {'judges':>6} {'per min':>8} {'wall s':>7} {'wait X':>7} {'wait S':>7} {'held X':>7}"
          f"  (seconds per evaluation, medians; the lock's own time, {args.evals} evaluations a judge)")
    for judges in (int(v) for v in args.judges.split(",")):
        for name in (p for p in (args.plans or ",".join(table)).split(",") if p):
            r = run_plan(table[name], judges, args.evals, args.scale)
            waits = f"{r['wait_exclusive']:7.3f} {r['wait_shared']:7.3f} {r['held_exclusive']:7.3f}"
            print(f"{name:>12} {judges:>6} {r['per_minute']:8.1f} {r['wall']:7.2f} {waits}", flush=True)


if __name__ == "__main__":
    main()

"""`drkernel serve` with no flags, in an RL trainer's rhythm, through both clients (issue 33, items 2 and 5).

Starts the server as a user would (no flags: its default judges per GPU), and measures:
- ready: seconds until `/health` answers, and until every configured judge is alive and idle;
- bursts of `--burst` fresh 2048^2 elementwise kernels (a new Triton function name each: no cache
  hit), with `--idle-s` seconds of nothing between bursts (the trainer generating); bursts alternate
  between the project's `Client` (one batch submit, then waits) and a client that behaves like the
  authors' reward client (tests/server/kernelgym_client.py: POST /evaluate and poll, from
  `--concurrency` threads);
- per burst: evaluations a minute (first submit to last result), and what the rhythm cost: results
  that are not `ok`, tasks dispatched more than once (`attempts` > 1), executor retries, and workers
  the server counts lost after it.

    python bench/serve_rhythm.py --burst 64 --rounds 3 --idle-s 150      (the H200: about 8 min)
    python bench/serve_rhythm.py --size 64 --burst 4 --rounds 2 --idle-s 2 --extra "--workers 2"  (CPU)
    python bench/serve_rhythm.py --fake-s 2.5 --rounds 2 --idle-s 1 \
        --extra "--judge fake --devices cpu --workers 4"   (the service's own cost: 4 fake judges of
                                                            2.5 s each give at most 96/min)

Prints a table and one JSON line (also written to --json).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.rhythm import KERNEL, REFERENCE  # noqa: E402
from drkernel.executors.http_client import Client  # noqa: E402
from drkernel.server.launch import ServerProcess  # noqa: E402
from drkernel.types import EvalOptions, EvalRequest  # noqa: E402
from tests.server.kernelgym_client import KernelGymStyleClient  # noqa: E402


def kernels(n: int, tag0: int, fake_s: float | None = None) -> list[str]:
    """`n` fresh kernels; with `fake_s`, texts a fake judge (`serve --judge fake`) answers `ok` after
    `fake_s` seconds."""
    if fake_s is not None:
        return [f"# fake: sleep={fake_s}\n# kernel {tag0 + i}\nimport torch\n" for i in range(n)]
    return [KERNEL.format(tag=tag0 + i) for i in range(n)]


def wait_warm(url: str, timeout_s: float) -> tuple[float, dict[str, Any]]:
    """Seconds until every configured worker is alive and idle (the judges warmed), and /v1/health."""
    start, view = time.monotonic(), {}
    while time.monotonic() - start < timeout_s:
        view = httpx.get(f"{url}/v1/health", timeout=5).json()
        cap = view.get("capacity", {})
        if cap.get("configured") and cap.get("idle", 0) >= cap["configured"]:
            break
        time.sleep(0.1)
    return time.monotonic() - start, view


def judge_starts(url: str) -> list[dict[str, float]]:
    """Where each judge process's start went (total, interpreter and imports, device lock, judge
    built), as /v1/workers reports it: what `serve`'s ready time is made of."""
    workers = httpx.get(f"{url}/v1/workers", timeout=5).json().get("workers", [])
    return [w["startup_s"] for w in workers if w.get("startup_s")]


def burst_native(url: str, reference: str, codes: list[str], prefix: str,
                 perf_trials: int) -> list[str]:
    opts = EvalOptions(num_correct_trials=5, num_perf_trials=perf_trials, timeout_s=120)
    reqs = [EvalRequest(reference_code=reference, kernel_code=c, options=opts, task_id=f"{prefix}-{i}")
            for i, c in enumerate(codes)]
    with Client(base_url=url) as client:
        client.evaluate(reqs, timeout_s=1800)
    return [r.task_id for r in reqs if r.task_id]


def burst_authors(url: str, reference: str, codes: list[str], prefix: str, perf_trials: int,
                  concurrency: int) -> list[str]:
    def one(i: int) -> dict[str, Any]:
        payload = {"task_id": f"{prefix}-{i}", "reference_code": reference, "kernel_code": codes[i],
                   "backend": "triton", "num_correct_trials": 5, "num_perf_trials": perf_trials,
                   "timeout": 120, "priority": "normal", "entry_point": "Model", "is_valid": False,
                   "verbose_errors": True, "enable_profiling": True, "detect_decoy_kernel": True}
        return KernelGymStyleClient(url, poll_s=0.2, client_timeout_s=1800).submit_and_poll(payload)

    with ThreadPoolExecutor(concurrency) as pool:
        answers = list(pool.map(one, range(len(codes))))
    bad = [a for a in answers if a.get("status") != "completed"]
    if bad:
        print(f"  authors' client: {len(bad)} not completed, first: {str(bad[0])[:300]}", flush=True)
    return [f"{prefix}-{i}" for i in range(len(codes))]


def tally(url: str, ids: list[str]) -> dict[str, Any]:
    views = httpx.post(f"{url}/v1/tasks/wait", json={"task_ids": ids, "timeout_s": 0},
                       timeout=60).json()["tasks"]
    outcomes: dict[str, int] = {}
    for v in views:
        out = (v.get("result") or {}).get("outcome", v.get("state"))
        outcomes[out] = outcomes.get(out, 0) + 1
    return {"outcomes": outcomes,
            "infra_error": outcomes.get("infra_error", 0),
            "redispatched": sum(1 for v in views if (v.get("attempts") or 0) > 1),
            "executor_retries": sum(len(v.get("retries") or []) for v in views),
            "judge_retries": sum(((v.get("result") or {}).get("judge_retries") or 0) for v in views)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burst", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=150.0)
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--perf-trials", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=32, help="the authors' client's threads")
    ap.add_argument("--extra", default="", help="flags for drkernel serve (default: none)")
    ap.add_argument("--fake-s", type=float, default=None,
                    help="kernels a fake judge answers after this many seconds (with --extra '--judge fake')")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.burst < 1 or args.rounds < 1 or args.idle_s < 0:
        ap.error("--burst and --rounds must be >= 1, --idle-s >= 0")
    reference = REFERENCE.format(size=args.size)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        with ServerProcess(Path(tmp) / "rhythm.db", extra=shlex.split(args.extra),
                           start_timeout_s=300) as server:
            health_s = time.monotonic() - t0
            warm_s, view = wait_warm(server.url, 300)
            ready = {"health_s": round(health_s, 2), "warm_s": round(health_s + warm_s, 2),
                     "judges": view.get("capacity", {}).get("configured"),
                     "startup_s": judge_starts(server.url)}
            print(f"ready: /health after {ready['health_s']} s, {ready['judges']} judges idle after "
                  f"{ready['warm_s']} s", flush=True)
            for start in ready["startup_s"]:
                print(f"  judge start (s): {start}", flush=True)
            for r in range(args.rounds):
                if r:
                    time.sleep(args.idle_s)
                which = "client" if r % 2 == 0 else "authors"
                codes = kernels(args.burst, tag0=1000 * (r + 1), fake_s=args.fake_s)
                start = time.monotonic()
                if which == "client":
                    ids = burst_native(server.url, reference, codes, f"r{r}", args.perf_trials)
                else:
                    ids = burst_authors(server.url, reference, codes, f"r{r}", args.perf_trials,
                                        args.concurrency)
                took = time.monotonic() - start
                cap = httpx.get(f"{server.url}/v1/health", timeout=5).json().get("capacity", {})
                row = {"round": r, "client": which, "idle_before_s": args.idle_s if r else 0.0,
                       "seconds": round(took, 1), "per_min": round(60 * len(ids) / took, 1),
                       "workers_alive": cap.get("alive"), "workers_configured": cap.get("configured"),
                       **tally(server.url, ids)}
                rows.append(row)
                print(f"round {r} ({which}, after {row['idle_before_s']:.0f} s idle): {row['per_min']}/min "
                      f"in {row['seconds']} s; outcomes {row['outcomes']}; redispatched "
                      f"{row['redispatched']}, executor retries {row['executor_retries']}, judge retries "
                      f"{row['judge_retries']}; workers alive {row['workers_alive']}/"
                      f"{row['workers_configured']}", flush=True)
    cost = {k: sum(r[k] for r in rows) for k in ("infra_error", "redispatched", "executor_retries")}
    cost["lost"] = sum(1 for r in rows if (r["workers_alive"] or 0) < (r["workers_configured"] or 0))
    print("\n| round | client | idle before (s) | evals/min | not ok | redispatched | retries |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        not_ok = sum(v for k, v in r["outcomes"].items() if k != "ok")
        print(f"| {r['round']} | {r['client']} | {r['idle_before_s']:.0f} | {r['per_min']} | {not_ok} | "
              f"{r['redispatched']} | {r['executor_retries']} |")
    summary = {"ready": ready, "rounds": rows, "cost": cost, "size": args.size, "burst": args.burst,
               "extra": args.extra}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1))
    return 0 if not any(cost.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

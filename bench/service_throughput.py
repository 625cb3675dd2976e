"""Service throughput of `drkernel serve`: evaluations per minute, submit-to-result latency, memory.

Run on the GPU machine (one GPU: the local executor; two GPUs: add `--executor ray`):
    python bench/service_throughput.py --batch 64
    python bench/service_throughput.py --batch 64 --executor ray
    python bench/service_throughput.py --judge fake      # the service overhead alone, on any CPU
Prints a table; the anchor pays 12-20 s of fixed cost per sample per GPU (kernelgym-anchor.md §1.6).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from drkernel.executors.contract import CONTRACT_REFERENCE, contract_requests
from drkernel.executors.http_client import Client
from drkernel.server.launch import ServerProcess
from drkernel.types import EvalOptions, EvalRequest

ANCHOR_S_PER_SAMPLE = (12.0, 20.0)  # fixed cost per sample per GPU, measured on the anchor


def small_problems(n: int, prefix: str, perf_trials: int) -> list[EvalRequest]:
    """A mix of small honest, incorrect, hacked and broken candidates on one small problem."""
    names = ["honest", "honest", "incorrect", "hack", "honest", "compile_error"]
    base = contract_requests([names[i % len(names)] for i in range(n)], prefix, timeout_s=60)
    opts = EvalOptions(timeout_s=60, num_perf_trials=perf_trials, num_correct_trials=5)
    return [EvalRequest(reference_code=r.reference_code, kernel_code=r.kernel_code, options=opts,
                        task_id=r.task_id) for r in base]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure_throughput(client: Client, batch: int, perf_trials: int, rounds: int) -> list[float]:
    rates = []
    for r in range(rounds):
        requests = small_problems(batch, f"tp{r}-{time.time_ns()}", perf_trials)
        started = time.monotonic()
        results = client.evaluate(requests, timeout_s=3600)
        elapsed = time.monotonic() - started
        assert len(results) == batch
        rates.append(60.0 * batch / elapsed)
    return rates


def measure_latency(client: Client, n: int, perf_trials: int) -> list[float]:
    latencies = []
    for i in range(n):
        (request,) = small_problems(1, f"lat{i}-{time.time_ns()}", perf_trials)
        started = time.monotonic()
        client.evaluate([request], timeout_s=600)
        latencies.append(time.monotonic() - started)
    return latencies


def fill_store(url: str, n: int, chunk: int = 500) -> float:
    """Store n finished results through the server (fake-judge speed is irrelevant: the point is
    the server's memory with many stored results). Returns seconds taken."""
    started = time.monotonic()
    with Client(base_url=url) as client:
        for start in range(0, n, chunk):
            reqs = [EvalRequest(reference_code=CONTRACT_REFERENCE,
                                kernel_code=f"# fake: speedup=1.5\n# {start + i}",
                                task_id=f"fill-{start + i}") for i in range(min(chunk, n - start))]
            client.evaluate(reqs, timeout_s=600)
    return time.monotonic() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", choices=["local", "ray"], default="local")
    ap.add_argument("--workers", type=int, default=None, help="default: one per GPU")
    ap.add_argument("--judges-per-gpu", type=int, default=1, help="judges sharing each GPU (local executor)")
    ap.add_argument("--judge", choices=["sandbox", "fake"], default="sandbox")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--latency-samples", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=20)
    ap.add_argument("--stored", type=int, default=10_000, help="results stored for the memory row")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="drkernel-bench-"))
    extra = ["--judge", args.judge, "--executor", args.executor]
    if args.workers:
        extra += ["--workers", str(args.workers)]
    if args.judges_per_gpu != 1:
        extra += ["--judges-per-gpu", str(args.judges_per_gpu)]
    rows: list[tuple[str, str]] = []
    with ServerProcess(tmp / "bench.db", extra=extra, start_timeout_s=600) as server:
        health = httpx.get(f"{server.url}/health").json()
        workers = health["workers"]["total"]
        rows.append(("executor / judge / workers (judges per GPU)",
                     f"{args.executor} / {args.judge} / {workers} ({args.judges_per_gpu})"))
        rows.append(("server RSS at start (MB)", f"{rss_mb(server.pid or 0):.0f}"))
        with Client(base_url=server.url, request_timeout_s=120) as client:
            measure_latency(client, 1, args.perf_trials)  # warm caches (reference timings, JIT)
            lat = measure_latency(client, args.latency_samples, args.perf_trials)
            rates = measure_throughput(client, args.batch, args.perf_trials, args.rounds)
        best = max(rates)
        rows.append(("submit-to-result, one small problem (s)",
                     f"median {statistics.median(lat):.2f}, min {min(lat):.2f}, max {max(lat):.2f}"))
        rows.append((f"evaluations/min, batch of {args.batch}",
                     " / ".join(f"{r:.0f}" for r in rates) + f" (best {best:.0f})"))
        rows.append(("evaluations/min per worker", f"{best / workers:.0f}"))
        anchor = [60.0 / s for s in ANCHOR_S_PER_SAMPLE[::-1]]
        rows.append(("anchor evaluations/min per GPU", f"{anchor[0]:.1f}-{anchor[1]:.1f}"))
        rows.append(("speed-up over the anchor per GPU",
                     f"{best / workers / anchor[1]:.1f}x-{best / workers / anchor[0]:.1f}x"))
    fake_extra = ["--judge", "fake", "--workers", "2", "--isolation", "thread"]
    with ServerProcess(tmp / "fill.db", extra=fake_extra) as server:
        before = rss_mb(server.pid or 0)
        seconds = fill_store(server.url, args.stored)
        after = rss_mb(server.pid or 0)
        size = sum(p.stat().st_size for p in tmp.glob("fill.db*")) / 2**20
        rows.append((f"server RSS before / after {args.stored} stored results (MB)",
                     f"{before:.0f} / {after:.0f}"))
        rows.append((f"store size with {args.stored} results (MB)", f"{size:.1f}"))
        rows.append((f"time to store {args.stored} results through the API (s)", f"{seconds:.1f}"))
    width = max(len(k) for k, _ in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  -----")
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

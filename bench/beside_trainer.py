"""The judge beside a trainer on one host (issue 38, item 4): `drkernel serve` on one GPU, `drkernel train
rl` on the other through that service, and what each does to the other.

Three phases, one after the other, on the same server:
1. the judge alone: `--evals` evaluations of one honest kernel (the same code each time, so that its
   speedups should agree), through the project's `Client`;
2. the trainer alone: `drkernel train rl` (the debug recipe's tiny model made `--hidden` wide, so that its
   GPU works) for `--steps` steps, judging through the service;
3. both: the trainer again (a new run) while a thread keeps the judge busy with the same evaluations.

It prints the judge's speedup spread (max / min) and median alone and beside the trainer, and the
trainer's step time without its waits for the judge (generation + update: `time/generate_s` +
`time/update_s` of metrics.jsonl) alone and beside the judge. Issue 38's bar: the spread as in the
one-GPU figures, and the step time within 5 %.

    python bench/beside_trainer.py --judge-gpu 1 --train-device cuda:0           (two GPUs; ~6 min)
    python bench/beside_trainer.py --judge-gpu cpu --train-device cpu --size 64 --evals 2 --steps 1 \
        --hidden 32                                                               (CPU: plumbing only)

Prints a table and one JSON line (also written to --json).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from drkernel.executors.http_client import Client, ClientConfig  # noqa: E402
from drkernel.rl.runlog import read_metrics  # noqa: E402
from drkernel.types import EvalOptions, EvalRequest  # noqa: E402

RELU = (ROOT / "drkernel/examples/relu_scale/reference.py").read_text()
KERNEL = (ROOT / "drkernel/examples/relu_scale/kernel.py").read_text()


def _reference(size: int) -> str:
    return RELU.replace("batch_size = 8", f"batch_size = {size}").replace("dim = 256", f"dim = {size}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(judge_gpu: str, port: int, folder: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    flags = ["--host", "127.0.0.1", "--port", str(port), "--db", str(folder / "tasks.db")]
    if judge_gpu == "cpu":
        flags += ["--workers", "2"]
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env["CUDA_VISIBLE_DEVICES"] = judge_gpu  # serve with no other flags: its defaults on that GPU
    log = open(folder / "serve.log", "wb")  # noqa: SIM115 - the server's lifetime
    return subprocess.Popen([sys.executable, "-m", "drkernel.cli", "serve", *flags], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT)


def wait_ready(client: Client, proc: subprocess.Popen[bytes], timeout_s: float = 300.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise SystemExit(f"drkernel serve exited with {proc.returncode} before it was ready")
        try:
            if client.health().get("status"):
                return time.monotonic() - t0
        except Exception:  # noqa: BLE001 - not listening yet
            pass
        time.sleep(0.5)
    raise SystemExit(f"drkernel serve was not ready in {timeout_s:.0f} s")


def judge_speedups(client: Client, n: int, size: int, options: EvalOptions,
                   stop: threading.Event | None = None) -> list[float]:
    """`n` evaluations of the same honest kernel, one at a time (until `stop`, when given): speedups."""
    out: list[float] = []
    i = 0
    while (stop is None and i < n) or (stop is not None and not stop.is_set()):
        request = EvalRequest(reference_code=_reference(size), kernel_code=KERNEL,
                              task_id=f"beside.{time.monotonic_ns()}.{i}", options=options)
        (result,) = client.evaluate([request])
        i += 1
        if result.outcome.value != "ok" or result.speedup is None:
            print(f"  evaluation {i}: {result.outcome.value} {result.error}", flush=True)
            continue
        out.append(float(result.speedup))
    return out


def train(url: str, device: str, steps: int, hidden: int, run_dir: Path) -> dict[str, float]:
    """`drkernel train rl` through the service; its median generation + update seconds a step."""
    sets = [f"model.device={device}", "judge.executor=http", f"judge.base_url={url}",
            f"trainer.steps={steps}",
            f"model.tiny.hidden_size={hidden}", "model.tiny.layers=8", "model.tiny.heads=8",
            "trainer.validate_every=0", "log.tensorboard=false", "log.wandb=off"]
    cmd = [sys.executable, "-m", "drkernel.cli", "train", "rl", "--recipe", "debug_cpu",
           "--run-dir", str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"train rl failed ({done.returncode}): {shlex.join(cmd)}\n{done.stderr[-2000:]}")
    rows = read_metrics(run_dir / "metrics.jsonl")
    work = [float(r.get("time/generate_s", 0.0)) + float(r.get("time/update_s", 0.0)) for r in rows]
    judge = [float(r.get("time/judge_s", 0.0)) for r in rows]
    return {"steps": len(rows), "work_s_median": statistics.median(work) if work else float("nan"),
            "judge_wait_s_median": statistics.median(judge) if judge else float("nan"),
            "wall_s": time.monotonic() - t0}


def _spread(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {"n": 0, "spread": float("nan"), "median": float("nan")}
    return {"n": len(xs), "spread": max(xs) / min(xs), "median": statistics.median(xs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--judge-gpu", default="1", help="the GPU index the service gets, or cpu")
    ap.add_argument("--train-device", default="cuda:0")
    ap.add_argument("--evals", type=int, default=10, help="evaluations of the judge alone")
    ap.add_argument("--size", type=int, default=4096, help="the relu_scale problem's side")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=1024, help="the trainer's tiny model width")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    options = EvalOptions(num_correct_trials=3, num_perf_trials=20, timeout_s=300.0)
    with tempfile.TemporaryDirectory(prefix="beside-") as tmp:
        folder = Path(tmp)
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start_server(args.judge_gpu, port, folder)
        try:
            with Client(ClientConfig(base_url=url)) as client:
                ready_s = wait_ready(client, proc)
                print(f"serve ready in {ready_s:.1f} s (judges on {args.judge_gpu})", flush=True)
                judge_speedups(client, 1, args.size, options)  # warm: the reference timed and cached
                alone = judge_speedups(client, args.evals, args.size, options)
                print(f"judge alone: {_spread(alone)}", flush=True)
                trainer_alone = train(url, args.train_device, args.steps, args.hidden, folder / "run-alone")
                print(f"trainer alone: {trainer_alone}", flush=True)
                stop = threading.Event()
                beside: list[float] = []
                flood = threading.Thread(target=lambda: beside.extend(
                    judge_speedups(client, 0, args.size, options, stop)), daemon=True)
                flood.start()
                try:
                    trainer_beside = train(url, args.train_device, args.steps, args.hidden,
                                           folder / "run-beside")
                finally:
                    stop.set()
                    flood.join(timeout=600)
                print(f"trainer beside the busy judge: {trainer_beside}", flush=True)
                print(f"judge beside the trainer: {_spread(beside)}", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    row: dict[str, Any] = {
        "judge_gpu": args.judge_gpu, "train_device": args.train_device, "size": args.size,
        "judge_alone": _spread(alone), "judge_beside_trainer": _spread(beside),
        "trainer_alone": trainer_alone, "trainer_beside_judge": trainer_beside,
        "trainer_work_ratio": trainer_beside["work_s_median"] / trainer_alone["work_s_median"],
    }
    print(f"\n{'':28s} {'n':>4s} {'spread':>7s} {'median':>7s}")
    for name in ("judge_alone", "judge_beside_trainer"):
        r = row[name]
        print(f"{name:28s} {r['n']:4d} {r['spread']:7.3f} {r['median']:7.3f}")
    print(f"trainer generation+update a step: {trainer_alone['work_s_median']:.3f} s alone, "
          f"{trainer_beside['work_s_median']:.3f} s beside the busy judge "
          f"(x{row['trainer_work_ratio']:.3f}; target within 5 %)")
    print(json.dumps(row))
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

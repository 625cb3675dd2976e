"""Do both retry layers work on this machine? (issue 37: one retry layer for each kind of fault)

A LocalExecutor with real judges evaluates honest 2048^2 kernels three times:
1. the judge's first comparison breaks once (`DRKERNEL_DEBUG_JUDGE_FAULT=KIND@PATH`): the judge retries
   it on fresh device state itself (`JudgeSettings.retries`); expect `ok`, judge_retries 1;
2. the judge process is stopped (SIGSTOP) in the middle of an evaluation: the pool's watchdog sees no
   heartbeat, kills it and runs the task again on a fresh judge process; expect `ok`, judge_retries 1;
3. a plain evaluation on the replaced worker; expect `ok`, judge_retries 0.
Prints each result (outcome, error, retries, stages) and the workers' states.

    python bench/probes/pool_retry_probe.py [--kind device_assert|compare] [--size 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.rhythm import KERNEL, REFERENCE  # noqa: E402
from drkernel.settings import JudgeSettings  # noqa: E402
from drkernel.types import EvalOptions, EvalRequest  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=("device_assert", "compare"), default="device_assert")
    ap.add_argument("--heartbeat-timeout-s", type=float, default=3.0)
    ap.add_argument("--freeze-after-s", type=float, default=1.5)
    ap.add_argument("--size", type=int, default=2048)
    args = ap.parse_args(argv)
    from drkernel.executors.local import LocalExecutor

    marker = Path(tempfile.mkdtemp()) / "fault-once"
    opts = EvalOptions(num_correct_trials=3, num_perf_trials=20, timeout_s=120)
    reference = REFERENCE.format(size=args.size)
    # the first judge to build its comparator meets the fault once (its config travels to it pickled)
    config = LocalExecutor.Config(heartbeat_timeout_s=args.heartbeat_timeout_s,
                                  judge=JudgeSettings(debug_fault=f"{args.kind}@{marker}"))
    ok = True
    with LocalExecutor(config) as ex:
        for n, tag in enumerate((7001, 7002, 7003)):
            request = EvalRequest(reference_code=reference, kernel_code=KERNEL.format(tag=tag),
                                  options=opts, task_id=f"probe-{n}")
            start = time.monotonic()
            with ThreadPoolExecutor(1) as one:
                running = one.submit(ex.evaluate, [request])
                if n == 1:  # freeze the judge process under this task
                    time.sleep(args.freeze_after_s)
                    pid = ex.worker_states()[0].pid
                    print(f"SIGSTOP to judge process {pid}", flush=True)
                    if pid:
                        os.kill(pid, signal.SIGSTOP)
                (res,) = running.result()
            d = res.to_dict()
            print(json.dumps({"task": n, "seconds": round(time.monotonic() - start, 2),
                              "outcome": d.get("outcome"), "error": d.get("error"),
                              "judge_retries": d.get("judge_retries"), "stage_s": d.get("stage_s")},
                             default=str), flush=True)
            print("workers:", [(w.worker_id, w.state, w.pid, w.restarts, (w.last_error or "")[:200])
                               for w in ex.worker_states()], flush=True)
            ok = ok and d.get("outcome") == "ok" and d.get("judge_retries") == (1 if n < 2 else 0)
    print(f"marker made: {marker.exists()}; as expected: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

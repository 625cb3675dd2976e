"""Issue 14: are the judge's speedups repeatable and true, and how many evaluations a minute?

precision: 10 fresh evaluations (the reference re-timed each time: a salted comment) of one honest kernel,
  relu(x + bias), BLOCK 4096, against torch.relu(x + bias), at three sizes; max/min of the speedup and
  the median, beside the device-time ratio that CUDA-graph replay gives in a separate process
  (bench/probes/timing_probe.py's graph method).
throughput: N distinct kernels (each a fresh Triton compile) through warm judges sharing one GPU: threads of
  this process, or (--processes) the local executor's judge processes, as the service runs them.
Run on the GPU machine:  python bench/judge_speed.py [--evals 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from drkernel.sandbox.judge import Judge
from drkernel.types import EvalOptions, EvalRequest

REF = """
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(COLS))
    def forward(self, x):
        return torch.relu(x + self.bias)
ROWS = {rows}
COLS = {cols}
def get_inputs():
    return [torch.randn(ROWS, COLS)]
def get_init_inputs():
    return []
"""

KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu_bias(x_ptr, b_ptr, o_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs % cols, mask=m)
    tl.store(o_ptr + offs, tl.maximum(x + b, 0.0) + 0.0 * {salt}, mask=m)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn({cols}))
    def forward(self, x):
        o = torch.empty_like(x)
        relu_bias[(triton.cdiv(x.numel(), 4096),)](x, self.bias, o, x.numel(), self.bias.numel(), BLOCK=4096)
        return o
"""


def graph_ratio(rows: int, cols: int) -> float | None:
    """The device-time ratio by CUDA-graph replay in a separate process (bench/probes/timing_probe.py)."""
    probe = Path(__file__).parent / "probes" / "timing_probe.py"
    out = Path(tempfile.mkdtemp()) / "g.json"
    cp = subprocess.run([sys.executable, str(probe), "--procs", "3", "--shapes", f"{rows}x{cols}",
                         "--methods", "graph", "--json", str(out)],
                        capture_output=True, text=True, timeout=300)
    if cp.returncode != 0 or not out.exists():
        print(cp.stderr[-1000:], file=sys.stderr)
        return None
    rows_ = json.loads(out.read_text())
    return statistics.median(rows_[0]["speedups"]) if rows_ else None


class Load:
    """`judges` more judges on the same GPU judging fresh 2048² kernels until stopped: the precision
    target must hold while the judge's throughput work runs beside it (issue 14)."""

    def __init__(self, judges: int) -> None:
        import threading

        self.stop = threading.Event()
        self.done = 0
        self.threads = [threading.Thread(target=self._churn, args=(i,), daemon=True, name=f"load-{i}")
                        for i in range(judges)]
        for t in self.threads:
            t.start()

    def _churn(self, i: int) -> None:
        ref = REF.format(rows=2048, cols=2048)
        with Judge(device="cuda", cache_path=None, spares=2) as judge:
            k = 0
            while not self.stop.is_set():
                k += 1
                judge.evaluate(EvalRequest(reference_code=ref,
                                           kernel_code=KERNEL.format(cols=2048, salt=1000 * i + k)))
                self.done += 1

    def close(self) -> int:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)
        return self.done


class CardWatch:
    """--trace on a GPU: the card's SM and memory clocks, power and memory used, read through NVML
    (drkernel.device.card_state) every `every_s` in a thread of its own, so that each timed op can be
    set beside what the card did meanwhile (`card_during`): a clock that dips, a card at its power limit,
    memory that others allocate or free (which slowed every window of a timed op evenly in run AP's
    disturb probe). Nothing where NVML cannot read the card (the CPU)."""

    def __init__(self, device: str = "cuda:0", every_s: float = 0.005) -> None:
        from drkernel.device import card_state, gpu_key

        key = gpu_key(device)
        self.card = key.removeprefix("gpu-") if key is not None else ""
        self.samples: list[tuple[float, int, int, float, int]] = []  # (monotonic, SM, mem MHz, W, used B)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.card and card_state(self.card) is not None:
            self._thread = threading.Thread(target=self._run, args=(card_state, every_s), name="card-watch",
                                            daemon=True)
            self._thread.start()

    def _run(self, read: Any, every_s: float) -> None:
        while not self._stop.is_set():
            state = read(self.card)
            if state is not None:
                self.samples.append((time.monotonic(), *state))
            self._stop.wait(every_s)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def card_during(samples: list[tuple[float, int, int, float, int]], start: float,
                end: float) -> dict[str, Any] | None:
    """What the card did between `start` and `end` (monotonic) by the samples taken then: the lowest and
    highest SM clock, the lowest memory clock, the highest power, and how far the memory in use moved
    (MiB: others' allocations and frees); None where no sample fell inside."""
    inside = [s for s in samples if start <= s[0] <= end]
    if not inside:
        return None
    watts = [s[3] for s in inside if s[3] == s[3]]  # NaN: the card gave no power reading
    used = [s[4] for s in inside]
    return {"samples": len(inside), "sm_mhz_min": min(s[1] for s in inside),
            "sm_mhz_max": max(s[1] for s in inside), "mem_mhz_min": min(s[2] for s in inside),
            "power_w_max": max(watts) if watts else None,
            "used_mib_moved": (max(used) - min(used)) / (1 << 20)}


class Trace:
    """--trace: what every judge thread of this process did, stamped with the host's monotonic clock:
    the evaluation stages, each sandbox op (its seconds as the sandbox timed them, ending when the judge
    read the reply), sandboxes spawned (to ready) and killed, and the device lock's holds, shared and
    exclusive, each after its wait ("wait exclusive timed"). For each precision evaluation, what the
    other judges did (or waited for) while its timed windows ran (`overlaps`). `close()` puts back what
    it wrapped."""

    def __init__(self) -> None:
        from drkernel.sandbox import channel, pipeline
        from drkernel.sandbox.plumbing import process
        from drkernel.sandbox.stages import correctness, paper, profiling, sealed, timing

        self.events: list[tuple[str, str, float, float]] = []  # (thread, what, start, end)
        self.lock = threading.Lock()
        self._undo: list[tuple[Any, str, Any]] = []  # (owner, name, original)
        trace = self

        def add(what: str, t0: float, t1: float | None = None) -> None:
            with trace.lock:
                trace.events.append((threading.current_thread().name, what, t0,
                                     time.monotonic() if t1 is None else t1))

        def wrap(owner: Any, name: str, make: Any) -> None:
            original = getattr(owner, name)
            self._undo.append((owner, name, original))
            setattr(owner, name, make(original))

        def traced_steps(steps: Any) -> Any:
            def run_steps(ev: Any) -> list[tuple[str, Any]]:
                def timed(name: str, fn: Any) -> Any:
                    def run() -> None:
                        t0 = time.monotonic()
                        try:
                            fn()
                        finally:
                            add(f"stage {name}", t0)
                    return run
                return [(name, timed(name, fn)) for name, fn in steps(ev)]
            return run_steps

        def traced_account(account: Any) -> Any:
            def run(ch: Any, who: str, request: Any, reply: Any) -> None:
                account(ch, who, request, reply)
                op_s = getattr(reply, "op_s", None)
                if op_s:
                    now = time.monotonic()
                    add(f"{who} {request.OP}", now - op_s, now)
            return run

        # each sandbox: [thread, role, forked at, ready at (None until known)]. A spare is waited on
        # only when taken, so its ready time is its fork plus its own start-up (the CUDA context)
        # plus 0.15 s for the fork server and namespaces; one never taken counts 0.6 s.
        self.spawned: dict[int, list[Any]] = {}

        def traced_init(init: Any) -> Any:
            def run(proc: Any, role: str, *a: Any, **k: Any) -> None:
                init(proc, role, *a, **k)
                with trace.lock:
                    trace.spawned[id(proc)] = [threading.current_thread().name, role, proc.started_at, None]
            return run

        def traced_ready(ready: Any) -> Any:
            def run(proc: Any) -> Any:
                info = ready(proc)
                entry = trace.spawned.get(id(proc))
                if entry is not None and entry[3] is None:
                    entry[3] = min(time.monotonic(),
                                   proc.started_at + max((info.startup_s or {}).values(), default=0.0) + 0.15)
                return info
            return run

        def traced_kill(kill: Any) -> Any:
            def run(proc: Any) -> None:
                t0 = time.monotonic()
                try:
                    kill(proc)
                finally:
                    add(f"{proc.role} sandbox kill", t0)
            return run

        def traced_lock(kind: str) -> Any:
            def make(lock: Any) -> Any:
                @contextlib.contextmanager
                def held(device: str, what: str = "", *a: Any, **k: Any) -> Any:
                    asked = time.monotonic()
                    with lock(device, what, *a, **k):
                        t0 = time.monotonic()
                        add(f"wait {kind} {what}", asked, t0)
                        try:
                            yield
                        finally:
                            add(f"{kind} {what}", t0)
                return held
            return make

        wrap(pipeline.Evaluation, "steps", traced_steps)
        wrap(channel.Channel, "_account", traced_account)
        wrap(process.SandboxProcess, "__init__", traced_init)
        wrap(process.SandboxProcess, "wait_ready", traced_ready)
        wrap(process.SandboxProcess, "kill", traced_kill)
        for module in (timing, sealed, profiling, paper):  # each stage's own binding of the lock
            wrap(module, "timing_lock", traced_lock("exclusive"))
        for module in (timing, correctness):  # the sealed stage takes no shared hold
            wrap(module, "gpu_work", traced_lock("shared"))
        self.watch = CardWatch()

    def close(self) -> None:
        """Put back every function the trace wrapped, and stop watching the card."""
        self.watch.close()
        while self._undo:
            owner, name, original = self._undo.pop()
            setattr(owner, name, original)

    def lock_summary(self, evaluations: int, since: float = 0.0) -> dict[str, dict[str, float]]:
        """The device lock's holds recorded since `since`, by section ("exclusive timed", "shared
        window_build"), per evaluation: how many, the seconds waited before them, the seconds held."""
        with self.lock:
            events = [(what, t0, t1) for _, what, t0, t1 in self.events if t0 >= since]
        rows: dict[str, dict[str, float]] = {}
        for what, t0, t1 in events:
            waited = what.startswith("wait ")
            name = what.removeprefix("wait ")
            if not name.startswith(("exclusive ", "shared ")):
                continue
            row = rows.setdefault(name, {"holds": 0.0, "wait_s": 0.0, "held_s": 0.0})
            row["wait_s" if waited else "held_s"] += t1 - t0
            row["holds"] += 0 if waited else 1
        n = max(1, evaluations)
        return {k: {f: round(v / n, 4) for f, v in row.items()} for k, row in sorted(rows.items())}

    def overlaps(self, thread: str) -> list[dict[str, Any]]:
        """Each of `thread`'s timed ops, and the events that overlapped it: other threads' (stages, ops,
        lock holds, sandboxes started and killed) and its own sandboxes' starts and kills ("own ...")."""
        with self.lock:
            events = list(self.events) + [(n, f"{role} sandbox start", t0, t1 if t1 is not None else t0 + 0.6)
                                          for n, role, t0, t1 in self.spawned.values()]
        rows = []
        for name, what, a, b in events:
            if name != thread or what != "exclusive timed":
                continue
            others: dict[str, int] = {}
            for n2, w2, a2, b2 in events:
                if n2 == thread and not w2.endswith(("sandbox start", "sandbox kill")):
                    continue  # its own stages, ops and holds: the timed op itself and what holds it
                if a2 < b and b2 > a:
                    key = w2 if n2 != thread else f"own {w2}"
                    others[key] = others.get(key, 0) + 1
            rows.append({"start": a, "took_ms": round((b - a) * 1e3, 1), "others": others,
                         "card": card_during(self.watch.samples, a, b)})
        return rows


def precision(evals: int, shapes: list[tuple[int, int]], under_load: int = 0, pause_s: float = 0.0,
              spares: int = 2, trace: Trace | None = None) -> list[dict]:
    table = []
    load = Load(under_load) if under_load else None
    try:
        table = _precision(evals, shapes, pause_s, spares, trace)
    finally:
        if load is not None:
            print(f"under load: {load.close()} evaluations by {under_load} other judge(s) meanwhile",
                  flush=True)
    for row in table:
        row["under_load"] = under_load
        if trace is None:
            continue
        # after the load stopped: every sandbox it started is on record by now
        ops = trace.overlaps(row["thread"])
        row["overlaps"] = [[o for o in ops if a <= o["start"] < b] for a, b in row["eval_spans"]]
        for k, w in enumerate(row["kernel_windows_us"]):
            if w is not None:
                print(f"  {row['shape']} evaluation {k}: windows min {w[0]:.3f}, q1 {w[1]:.3f}, "
                      f"median {w[2]:.3f}, max {w[3]:.3f} us; runs, disturbed: {row['runs_each'][k]}; "
                      f"during its timed op(s): "
                      f"{[o['others'] for o in row['overlaps'][k]]}; the card meanwhile: "
                      f"{[o['card'] for o in row['overlaps'][k]]}", flush=True)
    return table


def _precision(evals: int, shapes: list[tuple[int, int]], pause_s: float, spares: int,
               trace: Trace | None) -> list[dict]:
    """`pause_s`: wait this long before each evaluation, so that the spare sandboxes the pool starts
    after each one (a CUDA context, a profiler session) are up before the next is timed."""
    table = []
    for rows, cols in shapes:
        ref, ker = REF.format(rows=rows, cols=cols), KERNEL.format(cols=cols, salt=0)
        sp, kms, rms, submit = [], [], [], []
        frac = None
        results, spans = [], []
        with Judge(device="cuda", cache_path=None, spares=spares) as judge:
            for k in range(evals):
                time.sleep(pause_s)
                t_eval = time.monotonic()
                results.append(judge.evaluate(EvalRequest(reference_code=ref + f"\n# evaluation {k}\n",
                                                          kernel_code=ker,
                                                          options=EvalOptions())))
                spans.append((t_eval, time.monotonic()))
        for r in results:
            if r.outcome.value != "ok":
                print(f"{rows}x{cols}: NOT OK: {r.outcome.value} {r.hack_details} {r.error}", flush=True)
            if r.speedup is None:
                continue
            sp.append(r.speedup)
            kms.append(r.kernel_ms or 0.0)
            rms.append(r.reference_ms or 0.0)
            kt, rt = r.kernel_timing, r.reference_timing
            submit.append([kt.graph_submit_ms if kt else None, rt.graph_submit_ms if rt else None,
                           kt.window_calls if kt else None])
            sol = r.speed_of_light
            frac = sol.kernel_bandwidth_fraction if sol else None
        truth = graph_ratio(rows, cols)
        windows_us = [[round(v * 1e3, 3)
                       for v in (kt.min_ms, kt.low_quartile_ms or 0.0, kt.median_ms, kt.max_ms)]
                      if kt is not None else None for kt in (r.kernel_timing for r in results)]
        row = {"shape": f"{rows}x{cols}", "pause_s": pause_s, "spares": spares,
               "kernel_us": statistics.median(kms) * 1e3 if kms else None,
               "kernel_us_each": [round(v * 1e3, 3) for v in kms],
               "reference_us_each": [round(v * 1e3, 3) for v in rms],
               "speedups": sp, "spread": max(sp) / min(sp) if sp else None,
               "median": statistics.median(sp) if sp else None, "graph_ratio": truth,
               "kernel_bandwidth_fraction": frac if sp else None,
               "graph_submit_ms_kernel_reference_calls": submit[0] if submit else None,
               # each evaluation's timed windows, us per call: min, lower quartile, median, max
               "kernel_windows_us": windows_us,
               # runs of each evaluation's timed op, and those set aside as disturbed
               "runs_each": [[kt.confirm_runs, kt.disturbed_runs] if kt is not None else None
                             for kt in (r.kernel_timing for r in results)],
               "eval_spans": spans, "thread": threading.current_thread().name}
        row["median_vs_graph"] = row["median"] / truth if sp and truth else None
        table.append(row)
        print(json.dumps(row), flush=True)
    return table


def throughput_processes(n: int, judges: int) -> dict:
    """As `throughput`, through the service's local executor: `judges` judges on the GPU, each in its
    own process (executor.judges_per_gpu), instead of threads of this one."""
    from drkernel.executors.local import LocalExecutor

    ref = REF.format(rows=2048, cols=2048)
    config = LocalExecutor.Config(devices=("cuda:0",), judges_per_gpu=judges, isolation="process")
    with LocalExecutor(config) as executor:
        t_warm = time.monotonic()
        warmup = [EvalRequest(reference_code=ref, kernel_code=KERNEL.format(cols=2048, salt=0))
                  for _ in range(judges)]
        executor.evaluate(warmup)
        print(f"{judges} judge process(es) warm in {time.monotonic() - t_warm:.1f} s", flush=True)
        requests = [EvalRequest(reference_code=ref, kernel_code=KERNEL.format(cols=2048, salt=k + 1))
                    for k in range(n)]
        busy = Busy()
        t0 = time.monotonic()
        results = executor.evaluate(requests)
        wall = time.monotonic() - t0
        load = busy.stop()
    for d in results:
        if d.outcome.value != "ok":
            print(f"throughput: NOT OK: {d.outcome.value} {d.hack_details} {d.error}", flush=True)
    rows = [(d.outcome.value, _stages(d)) for d in results]
    return _throughput_row(n, judges, wall, [rows], load, [_sealed(d) for d in results]) | {"processes": True}


def throughput(n: int, judges: int) -> dict:
    """`n` distinct kernels (fresh compiles) through `judges` warm judges sharing one GPU; their timing
    windows take turns on the device (sandbox/devicelock.py), everything else overlaps."""
    from concurrent.futures import ThreadPoolExecutor

    ref = REF.format(rows=2048, cols=2048)
    pool = [Judge(device="cuda", cache_path=None, spares=max(2, 6 // judges)) for _ in range(judges)]
    try:
        def warm(j: Judge) -> None:  # the judges start side by side: one after another took ~8 s each
            j.warm()
            j.evaluate(EvalRequest(reference_code=ref, kernel_code=KERNEL.format(cols=2048, salt=0)))

        t_warm = time.monotonic()
        with ThreadPoolExecutor(judges) as ex:
            list(ex.map(warm, pool))
        print(f"{judges} judge(s) warm in {time.monotonic() - t_warm:.1f} s", flush=True)
        work = [[k for k in range(n) if k % judges == i] for i in range(judges)]

        sealed: list[dict[str, float]] = []

        def run(i: int) -> list[tuple[str, dict[str, float]]]:
            outcomes = []
            for k in work[i]:
                d = pool[i].evaluate(EvalRequest(reference_code=ref,
                                                 kernel_code=KERNEL.format(cols=2048, salt=k + 1)))
                if d.outcome.value != "ok":
                    print(f"throughput: NOT OK: {d.outcome.value} {d.hack_details} {d.error}", flush=True)
                outcomes.append((d.outcome.value, _stages(d)))
                sealed.append(_sealed(d))
            return outcomes

        busy = Busy()
        t0 = time.monotonic()
        with ThreadPoolExecutor(judges) as ex:
            parts = list(ex.map(run, range(judges)))
        wall = time.monotonic() - t0
        load = busy.stop()
    finally:
        for j in pool:
            j.close()
    return _throughput_row(n, judges, wall, parts, load, sealed)


def _stages(d: Any) -> dict[str, float]:
    """One evaluation's seconds: by stage (with the device lock's waits and holds), its wall, and by op
    inside each sandbox ("op:reference sealed_stage")."""
    return {**dict(d.stage_s or {}), "wall": d.wall_s or 0.0,
            **{f"op:{k}": v for k, v in (getattr(d, "op_s", None) or {}).items()}}


def _sealed(result: object) -> dict[str, float]:
    """The sealed span's parts of one evaluation (ms) and its calls: where its locked time goes."""
    t = getattr(result, "kernel_timing", None)
    if t is None or not getattr(t, "sealed_parts", None):
        return {}
    return {**{k: float(v) for k, v in t.sealed_parts.items()}, "calls": float(t.sealed_calls or 0)}


def _throughput_row(n: int, judges: int, wall: float, parts: list[list[tuple[str, dict[str, float]]]],
                    load: dict, sealed: list[dict[str, float]] | None = None) -> dict:
    outcomes = [o for part in parts for o, _ in part]
    stages: dict[str, list[float]] = {}
    for _, st in (x for part in parts for x in part):
        for name, v in st.items():
            stages.setdefault(name, []).append(v)
    return {"evaluations": n, "judges": judges, "wall_s": wall, "per_minute": 60 * n / wall,
            "ok": sum(o == "ok" for o in outcomes), "outcomes": sorted(set(outcomes)),
            "stage_s_median": {k: round(statistics.median(v), 4) for k, v in stages.items()},
            "stage_s_sum": {k: round(sum(v), 3) for k, v in stages.items()},
            "sealed_ms_median": {k: round(statistics.median(x[k] for x in sealed or [] if k in x), 4)
                                 for k in sorted({k for x in sealed or [] for k in x})}, **load}


# what a process on the GPU is, from its command line: the judge's helpers start as modules; a sandbox
# is forked by the fork server and keeps its command line (so reference and candidate look alike)
_KINDS = (("drkernel.sandbox.plumbing.zygote", "sandbox"), ("drkernel.sandbox.comparator", "comparison"),
          ("drkernel.sandbox.inside.worker", "sandbox"), ("drkernel.executors", "judge host"))


def process_kind(pid: int) -> str:
    """The judge's part `pid` is (see _KINDS); "other" for any other program, "gone" once it exited."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    return next((kind for mark, kind in _KINDS if mark in cmd), "other")


def gpu_memory_by_process() -> list[tuple[int, int]]:
    """(pid, MiB) of every process holding memory on GPU 0, as nvidia-smi reads the driver."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits", "-i", "0"],
                         capture_output=True, text=True, timeout=5).stdout
    rows = []
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().isdigit():
            rows.append((int(pid), int(mib)))
    return rows


class Busy:
    """How busy the host's CPUs (/proc/stat) and the GPU (nvidia-smi, every 0.2 s) were meanwhile:
    which of the two bounds the throughput. Each second it also reads which processes hold the GPU's
    memory, and keeps the fullest reading: where a card's memory goes when its judges fill it (run BP:
    eight judges on an 80 GB H100 ran it out)."""

    def __init__(self) -> None:
        self.cpu0 = self._cpu()
        self.samples: list[float] = []
        self.memory_peak: list[tuple[int, str]] = []  # (MiB, kind of process) at the fullest reading
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    @staticmethod
    def _cpu() -> tuple[int, int] | None:
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    def _sample(self) -> None:
        tick = 0
        while not self.done.wait(0.2):
            tick += 1
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu",
                                      "--format=csv,noheader,nounits", "-i", "0"],
                                     capture_output=True, text=True, timeout=5).stdout
                self.samples.append(float(out.split()[0]))
                if tick % 5 == 0:
                    rows = gpu_memory_by_process()
                    if sum(m for _, m in rows) > sum(m for m, _ in self.memory_peak):
                        self.memory_peak = [(m, process_kind(pid)) for pid, m in rows]
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                return

    def memory(self) -> dict[str, Any] | None:
        """The fullest reading of the GPU's memory by process: the total, and per kind of process the
        count and MiB each (largest first)."""
        if not self.memory_peak:
            return None
        kinds: dict[str, list[int]] = {}
        for mib, kind in self.memory_peak:
            kinds.setdefault(kind, []).append(mib)
        return {"total_mib": sum(sum(v) for v in kinds.values()),
                "by_kind_mib": {k: sorted(v, reverse=True) for k, v in sorted(kinds.items())}}

    def stop(self) -> dict[str, Any]:
        self.done.set()
        self.thread.join(timeout=10)
        cpu1, cpu = self._cpu(), None
        if self.cpu0 and cpu1 and cpu1[0] > self.cpu0[0]:
            cpu = 1.0 - (cpu1[1] - self.cpu0[1]) / (cpu1[0] - self.cpu0[0])
        gpu = statistics.mean(self.samples) / 100 if self.samples else None
        return {"host_cpu_busy": cpu, "gpu_util": gpu, "cpus": os.cpu_count(),
                "gpu_memory_peak": self.memory()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--evals", type=int, default=10)
    ap.add_argument("--shapes", default="8192x8192,4096x4096,1024x1024")
    ap.add_argument("--throughput", type=int, default=24,
                    help="distinct kernels per throughput run (0: none)")
    ap.add_argument("--judges", default="1,4", help="judges sharing the GPU, one throughput run each")
    ap.add_argument("--processes", action="store_true",
                    help="throughput through the local executor: each judge in its own process")
    ap.add_argument("--under-load", type=int, default=0, help="other judges working on the GPU meanwhile")
    ap.add_argument("--pause", type=float, default=0.0,
                    help="seconds before each precision evaluation (the pool's new spares are up by then)")
    ap.add_argument("--spares", type=int, default=2, help="warm spare sandboxes of the precision judge")
    ap.add_argument("--trace", action="store_true",
                    help="record what every judge did, and what overlapped each precision evaluation's "
                         "timed windows (the `overlaps` of the JSON rows); without --processes, also "
                         "each lock section's holds and waits per evaluation of the throughput runs")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",") if s]
    trace = Trace() if args.trace else None
    runs = []
    try:
        result = {"precision": precision(args.evals, shapes, args.under_load, args.pause,  # type: ignore[arg-type]
                                         args.spares, trace)}
        if trace is not None and args.processes:  # the judge processes' holds are out of its reach
            trace.close()
        for k in (int(v) for v in args.judges.split(",") if v) if args.throughput else ():
            since = time.monotonic()
            runs.append((throughput_processes if args.processes else throughput)(args.throughput, k))
            if trace is not None and not args.processes:  # judge threads: each section's holds and waits
                runs[-1]["lock_sections"] = trace.lock_summary(args.throughput, since)
            print(json.dumps(runs[-1]), flush=True)
    finally:
        if trace is not None:
            trace.close()
    result["throughput"] = runs
    print(f"\n{'shape':>10} {'kernel_us':>9} {'spread':>7} {'median':>7} {'graph':>7} "
          f"{'med/graph':>9} {'BW frac':>7}")
    for r in result["precision"]:
        def f(v: float | None, spec: str) -> str:
            return format(v, spec) if v is not None else "-"
        print(f"{r['shape']:>10} {f(r['kernel_us'], '9.2f')} {f(r['spread'], '7.3f')} "
              f"{f(r['median'], '7.3f')} {f(r['graph_ratio'], '7.3f')} {f(r['median_vs_graph'], '9.3f')} "
              f"{f(r['kernel_bandwidth_fraction'], '7.2f')}")
    for t in runs:
        print(f"throughput: {t['per_minute']:.1f} evaluations/min ({t['evaluations']} fresh compiles, "
              f"{t['judges']} judge {'processes' if t.get('processes') else 'threads'} on one GPU, "
              f"{t['ok']} ok)")
        cpu, gpu = t.get("host_cpu_busy"), t.get("gpu_util")
        print(f"  host CPUs busy {cpu if cpu is None else format(cpu, '.0%')} of {t.get('cpus')}, "
              f"GPU utilization {gpu if gpu is None else format(gpu, '.0%')}; "
              "seconds per evaluation (median), by stage: "
              + ", ".join(f"{k} {v:.2f}"
                          for k, v in sorted(t["stage_s_median"].items(), key=lambda kv: -kv[1])
                          if v >= 0.01 and not k.startswith("op:")))
        ops = sorted(((k[3:], v) for k, v in t["stage_s_median"].items() if k.startswith("op:")),
                     key=lambda kv: -kv[1])
        if ops:
            print("  seconds per evaluation (median) inside the sandboxes, by op: "
                  + ", ".join(f"{k} {v:.3f}" for k, v in ops if v >= 0.001))
        peak = t.get("gpu_memory_peak")
        if peak:
            kinds = peak["by_kind_mib"].items()
            print(f"  the GPU's memory at its fullest: {peak['total_mib']} MiB; by process (MiB): "
                  + "; ".join(f"{k} x{len(v)}: {', '.join(map(str, v))}" for k, v in kinds))
        for name, row in (t.get("lock_sections") or {}).items():
            print(f"  lock {name:>32}: {row['holds']:.1f} holds, waited {row['wait_s']:.3f} s, "
                  f"held {row['held_s']:.3f} s an evaluation")
        if t.get("sealed_ms_median"):
            print("  the sealed span (median ms, and calls a span): "
                  + ", ".join(f"{k} {v:g}" for k, v in t["sealed_ms_median"].items()))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

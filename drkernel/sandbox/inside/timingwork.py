"""Inside the sandboxes: the timing ops (stages/timing.py and stages/paper.py say what the judge makes of
them). bench_prepare builds a timed window (one CUDA graph where it can be captured), bench_run refills it
from fresh seeds, runs it timed and checksums every output, checksums is the reference's side of that check
(the same sums, eager and untimed), paper_time the authors' timing of one call at a time, and peak the
device's own ceilings (peak.py). Each op takes the sandbox it runs in (`Box`) and its request, and gives its
reply or an ErrorReply.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Protocol

import torch

from drkernel.sandbox.inside import harness, peak
from drkernel.sandbox.inside.failure import InputsChanged, classify_forward_error, error
from drkernel.sandbox.wire import protocol as P

__all__ = ["OPS", "Box"]

_perf = time.perf_counter  # captured before any candidate code runs


class Box(Protocol):
    """What the timing ops use of the sandbox they run in (inside/worker.Sandbox, which holds to it:
    worker._conforms_timing). `_bench` is the timed window that bench_prepare builds (the sandbox has none
    before it, or after another problem's load); `_event`, `_record`, `_elapsed`, `_query` and `_spin`
    exist on a GPU only, and are used there only."""

    role: str
    cuda: bool
    device: torch.device
    model: Any
    _bench: dict[str, Any]
    _cycles_per_ms: float | None
    recorder: harness.LaunchRecorder
    watch: harness.TamperWatch
    threads: harness.ThreadWatch

    def _sync(self) -> None: ...
    def _event(self, *, enable_timing: bool) -> Any: ...
    def _record(self, event: Any, /) -> None: ...
    def _elapsed(self, start: Any, end: Any, /) -> float: ...
    def _query(self, event: Any, /) -> bool: ...
    def _spin(self, cycles: int, /) -> None: ...
    def _fresh_inputs(self, seed: int) -> list[Any]: ...
    def _forward(self, inputs: list[Any]) -> Any: ...
    def _clock(self) -> tuple[Any, Any]: ...


# A timed window is `calls` calls, each on its own inputs. bench_prepare builds the window on
# placeholder inputs (and captures it as one CUDA graph when it can); bench_run refills every
# input with the values of a fresh seed, known only now, replays, and returns a checksum of every
# output. The judge brackets bench_run with its own clock and checks each checksum against the
# reference's: the work must be done inside the op, for every call.
def bench_prepare(box: Box, msg: P.BenchPrepare) -> P.BenchPrepareReply | P.ErrorReply:
    seed = msg.seed
    eager = box.model
    try:
        if msg.compile:  # the reference timed as torch.compile'd
            box.model = torch.compile(eager)
        with torch.no_grad():
            first = box._fresh_inputs(seed)
            est_ms, done = _warm(box, first, msg.warmup_s, msg.warmup)
            calls = msg.calls
            if calls is None:  # the reference chooses: a window of ~1 ms, at most 100 calls and 4 GiB
                per_call = max(_nbytes(first), 1) * 2
                calls = max(1, min(100, math.ceil(msg.window_ms / max(est_ms, 1e-4)),
                                   (4 << 30) // per_call))
            inputs = [first] + [box._fresh_inputs(seed + 1 + c) for c in range(calls - 1)]
            box._bench = {"inputs": inputs, "graph": None, "outs": None, "model": box.model}
            graph_error = None
            if box.cuda and msg.graph:
                graph_error = _capture(box, inputs)
                # L2 flushed before each window: every window starts from the same cold cache
                box._bench["flush"] = torch.empty(256 << 20, dtype=torch.int8, device=box.device)
            box._sync()
            # one untimed round of the timed op (refill, run, checksum) so that first-use costs
            # (library handles, generators) stay out of the op the judge's clock brackets
            _bench_round(box, [seed + c for c in range(len(inputs))], [0] * len(inputs))
            box._sync()
    except BaseException as exc:  # noqa: BLE001
        return error(classify_forward_error(exc), exc)
    finally:
        box.model = eager
    return P.BenchPrepareReply(est_ms=est_ms, warmup_calls=done, calls=calls, input_bytes=_nbytes(first),
                               launch_ms=box._bench.get("launch_ms"),
                               graph=box._bench["graph"] is not None, graph_error=graph_error,
                               tampered=box.watch.changed(), threads=box.threads.extra())


def _warm(box: Box, inputs: list[Any], warmup_s: float, warmup: int) -> tuple[float, int]:
    """Time-based warm-up (clocks ramp up); returns the median per-call time of its calls."""
    times: list[float] = []
    t_end = _perf() + warmup_s
    while len(times) < max(warmup, 2) or (_perf() < t_end and len(times) < 10000):
        times.append(_timed_call(box, inputs))
    box.recorder.take()
    times.sort()
    return times[len(times) // 2], len(times)


def _timed_call(box: Box, inputs: list[Any]) -> float:
    """One forward timed alone (ms): events around it and a sync after it; the host clock on the CPU."""
    if not box.cuda:
        t0 = _perf()
        box._forward(inputs)
        return (_perf() - t0) * 1e3
    start, end = box._clock()
    box._record(start)
    box._forward(inputs)
    box._record(end)
    box._sync()
    return float(box._elapsed(start, end))


def _capture(box: Box, inputs: list[Any]) -> str | None:
    """One CUDA graph of the whole window; None when captured, else why not (eager then)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            box._forward(inputs[0])
        torch.cuda.current_stream().wait_stream(side)
        box._sync()
        graph = torch.cuda.CUDAGraph()
        box.recorder.take()
        with torch.cuda.graph(graph):
            outs = [box._forward(x) for x in inputs]
        # a replay launches nothing from Python: the launches a window makes are those captured
        box._bench["captured_names"] = box.recorder.take()
        box._bench["graph"], box._bench["outs"] = graph, outs
        launch_ms = []
        for _ in range(3):  # the host's time to submit a replay (it grows with the graph's nodes)
            t0 = _perf()
            graph.replay()
            launch_ms.append((_perf() - t0) * 1e3)
            box._sync()
        # the first replay also uploads the graph: the median of three, doubled, and never under
        # 1 ms: a spin of twice the submit plus 0.1 ms still let the GPU idle inside the window
        # while the host submitted it (relu(x + bias) at 1024^2 timed 4.8-5.2 us a call, 4.3 with
        # 1 ms, 4.0 replayed back to back: bench/timing_bisect.py, docs/benchmarks.md run V)
        box._bench["spin_cycles"] = _spin_cycles(box, max(1.0, 2.0 * sorted(launch_ms)[1] + 0.1))
        box._bench["launch_ms"] = sorted(launch_ms)[1]
        box.recorder.take()
        return None
    except BaseException as exc:  # noqa: BLE001 - not capturable: time it eagerly instead
        box._bench["graph"] = box._bench["outs"] = None
        with contextlib.suppress(BaseException):
            box._sync()
        box.recorder.take()
        return f"{type(exc).__name__}: {str(exc)[:300]}"


def _spin_cycles(box: Box, ms: float) -> int:
    """GPU clock cycles of torch.cuda._sleep that last about `ms` (calibrated once per process)."""
    per_ms = box._cycles_per_ms
    if per_ms is None:
        start, end = box._clock()
        box._record(start)
        box._spin(200_000)
        box._record(end)
        box._sync()
        per_ms = box._cycles_per_ms = 200_000 / max(box._elapsed(start, end), 1e-3)
    return int(per_ms * min(ms, 5.0))


def bench_run(box: Box, msg: P.BenchRun) -> P.BenchRunReply | P.ErrorReply:
    bench = getattr(box, "_bench", None)
    if bench is None:
        return error("harness_error", message="bench_run before bench_prepare")
    window_ms, host_ms, launches, sums = [], [], [], []
    eager, box.model = box.model, bench["model"]
    try:
        with torch.no_grad():
            for seeds, wseeds in zip(msg.seeds, msg.wseeds, strict=True):
                w, h, n, row = _bench_round(box, seeds, wseeds)
                window_ms.append(w)
                host_ms.append(h)
                launches.append(n)
                sums.append(row)
    except InputsChanged:
        return error("forward_error", message="get_inputs changed its structure between seeds")
    except BaseException as exc:  # noqa: BLE001
        return error(classify_forward_error(exc), exc)
    finally:
        box.model = eager
    return P.BenchRunReply(window_ms=window_ms, host_ms=host_ms, launches=launches,
                           graph=bench["graph"] is not None, checksums=sums,
                           tampered=box.watch.changed(), threads=box.threads.extra())


def _bench_round(box: Box, seeds: list[int], wseeds: list[int]) -> tuple[float, float, int, list[Any]]:
    """Refill the window's inputs from `seeds`, run the window timed, checksum every output."""
    bench = box._bench
    inputs, graph = bench["inputs"], bench["graph"]
    for dst, seed in zip(inputs, seeds, strict=True):
        if not harness.refill(dst, box._fresh_inputs(seed)):
            raise InputsChanged
    flush = bench.get("flush")
    if flush is not None:
        flush.zero_()
    box._sync()
    box.recorder.take()
    start, end = box._clock()
    t0 = _perf()
    if box.cuda:
        # The host clock starts when the GPU reaches this window (an event polled), not when the
        # host submits it: the device may still be busy with another process's work then, which
        # is no work of this candidate (run Q: 4 of 24 honest kernels flagged under 4 judges).
        spun = box._event(enable_timing=True)
        box._record(spun)
        if graph is not None:
            # The GPU is kept busy (a spin of about twice the replay's submit time) before the
            # window opens, so the window holds the graph's device time, not the host's submit.
            box._spin(bench["spin_cycles"])
        while not box._query(spun):
            pass
        t0 = _perf()
        box._record(start)
        if graph is not None:
            graph.replay()
            outs = bench["outs"]
        else:
            outs = [box._forward(x) for x in inputs]
        box._record(end)
        box._sync()  # device-wide: the host clock also covers work on any other stream
        host = (_perf() - t0) * 1e3 - box._elapsed(spun, start)
        window = box._elapsed(start, end)
    else:
        outs = [box._forward(x) for x in inputs]
        window = host = (_perf() - t0) * 1e3
    taken = len(box.recorder.take())
    row = harness.checksums(outs, wseeds)
    return window, host, len(bench["captured_names"]) if graph is not None else taken, row


def peak_op(box: Box, msg: P.Peak) -> P.PeakReply:
    """The device's own ceilings, measured once (reference role): bandwidth, matmul rates (peak.py)."""
    if not box.cuda or box.role != "reference":
        return P.PeakReply(bandwidth_gbs=None, tflops_fp32=None, tflops_bf16=None)

    timer = peak.event_timer(box._clock, box._record, box._elapsed, box._sync)
    bandwidth, fp32, bf16, _ = peak.measure(box.device, timer)
    return P.PeakReply(bandwidth_gbs=bandwidth, tflops_fp32=fp32, tflops_bf16=bf16)


def paper_time(box: Box, msg: P.PaperTime) -> P.PaperTimeReply | P.ErrorReply:
    """The authors' timing: `warmup` calls, then each of `calls` calls timed alone on the same
    inputs (events around the call and a sync after it; on the CPU the host clock)."""
    try:
        with torch.no_grad():
            inputs = box._fresh_inputs(msg.seed)
            for _ in range(max(0, msg.warmup)):
                box._forward(inputs)
            box._sync()
            times = [_timed_call(box, inputs) for _ in range(max(1, msg.calls))]
        box.recorder.take()
    except BaseException as exc:  # noqa: BLE001
        return error(classify_forward_error(exc), exc)
    return P.PaperTimeReply(times_ms=times)


def checksums(box: Box, msg: P.Checksums) -> P.ChecksumsReply | P.ErrorReply:
    """The reference's side of the check: the same checksums, computed eagerly, untimed."""
    sums = []
    try:
        with torch.no_grad():
            for seeds, wseeds in zip(msg.seeds, msg.wseeds, strict=True):
                # one output alive at a time; the window's sums are read back once, at its end
                outs = (box._forward(box._fresh_inputs(seed)) for seed in seeds)
                sums.append(harness.checksums(outs, wseeds))
    except BaseException as exc:  # noqa: BLE001
        return error(classify_forward_error(exc), exc)
    return P.ChecksumsReply(checksums=sums)


def _nbytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.nbytes
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    return 0


OPS: dict[str, Any] = {"bench_prepare": bench_prepare, "bench_run": bench_run, "checksums": checksums,
                       "peak": peak_op, "paper_time": paper_time}

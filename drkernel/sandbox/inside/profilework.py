"""Inside the sandboxes: the profile op (stages/profiling.py says what the judge makes of it) and the
profiler session it runs under. It profiles a window of calls, every output checksummed for the judge:
eager calls on fresh inputs, or the timed window's captured graph (timingwork's `_bench`) replayed on
inputs refilled from the seeds, and gives the device kernels' times and the launches. It takes the sandbox
it runs in (`Box`) and a Profile request, and gives a ProfileReply or an ErrorReply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch

from drkernel.sandbox.inside import harness
from drkernel.sandbox.inside.failure import InputsChanged, classify_forward_error, error
from drkernel.sandbox.wire import protocol as P

__all__ = ["OPS", "Box", "profiler_session"]


class Box(Protocol):
    """What the profile op uses of the sandbox it runs in (inside/worker.Sandbox, which holds to it:
    worker._conforms_profile). `_bench` is timingwork's timed window, read here only."""

    cuda: bool
    _bench: dict[str, Any]
    recorder: harness.LaunchRecorder
    watch: harness.TamperWatch

    def _sync(self) -> None: ...
    def _fresh_inputs(self, seed: int) -> list[Any]: ...
    def _forward(self, inputs: list[Any]) -> Any: ...


def profile(box: Box, msg: P.Profile) -> P.ProfileReply | P.ErrorReply:
    """Kernels and launches under the profiler, every output checksummed for the judge. Eager:
    one call per seed on fresh inputs (a candidate that works differently while observed shows
    it here). Timed window: the captured graph replayed on its inputs refilled from the seeds,
    so the kernels are those the timed windows ran, whatever the candidate does when observed."""
    try:
        with torch.no_grad():
            work = _replayed_window(box, msg.seeds) if msg.timed_window else _eager_window(box, msg.seeds)
            if isinstance(work, P.ErrorReply):
                return work
            box._sync()
            for _ in range(2):  # a profiler session can come back without device events: retry once
                kernels, launches, outs = _profile_window(box, work)
                if kernels or not box.cuda:
                    break
            if msg.timed_window:  # a replay launches nothing from Python: the captured launches
                launches = list(box._bench["captured_names"])
            sums = harness.checksums(outs, msg.wseeds)
    except InputsChanged:
        return error("forward_error", message="get_inputs changed its structure between seeds")
    except BaseException as exc:  # noqa: BLE001
        return error(classify_forward_error(exc), exc)
    return P.ProfileReply(kernels=kernels, launches=launches, checksums=sums,
                          tampered=box.watch.changed())


def _eager_window(box: Box, seeds: list[int]) -> Callable[[], list[Any]]:
    inputs = [box._fresh_inputs(seed) for seed in seeds]
    return lambda: [box._forward(x) for x in inputs]


def _replayed_window(box: Box, seeds: list[int]) -> Callable[[], list[Any]] | P.ErrorReply:
    bench = getattr(box, "_bench", None)
    if bench is None or bench["graph"] is None:
        return error("harness_error", message="profile of a timed window that has no graph")
    if len(seeds) != len(bench["inputs"]):
        return error("harness_error", message="profile seeds do not match the timed window's calls")
    for dst, seed in zip(bench["inputs"], seeds, strict=True):
        if not harness.refill(dst, box._fresh_inputs(seed)):
            raise InputsChanged
    graph, outs = bench["graph"], bench["outs"]

    def replay() -> list[Any]:
        graph.replay()
        return list(outs)

    return replay


def _profile_window(box: Box, work: Callable[[], list[Any]]
                    ) -> tuple[dict[str, list[float]], list[str], list[Any]]:
    box.recorder.take()
    with torch.no_grad(), profiler_session(box.cuda) as prof:
        outs = work()
        box._sync()
    launches = box.recorder.take()
    kernels: dict[str, list[float]] = {}
    for evt in prof.function_events:
        if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        us = float(getattr(evt, "device_time", None) or evt.time_range.elapsed_us())
        slot = kernels.setdefault(evt.name, [0.0, 0])
        slot[0] += us
        slot[1] += 1
    return kernels, launches, outs


def profiler_session(cuda: bool) -> Any:
    """A Kineto profiler session (CPU, and CUDA on a GPU): torch.autograd.profiler's, the one that
    torch.profiler.profile wraps. The wrapper's first start asks `hasattr(torch, "_inductor")`, which
    imports torch._inductor and torch._dynamo (about 900 modules: 2.6 s on the CPU machine, the bulk of
    a candidate's 5.6 s profiler warm-up on the H200 host, docs/benchmarks.md run Y); this imports none."""
    return torch.autograd.profiler.profile(use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True)


OPS: dict[str, Any] = {"profile": profile}

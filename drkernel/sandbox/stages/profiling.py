"""Profiling: the kernels a call launches, their device time and the submission's coverage of it.

Two profiled windows, each on fresh inputs whose outputs are checksummed against the reference's:
- the timed window's CUDA graph replayed on refilled inputs, where the timing captured one. The graph
  was captured before the candidate could know what it would be used for, so its kernels are the
  ones that were timed: the coverage and the kernel list come from it.
- eager calls under the profiler (the only window when the timing ran eagerly). Its launches and
  device time must agree with the timed windows', and its own kernels with the replayed window's:
  a candidate that works differently while it is observed is `observer_dependent`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from drkernel.hacks import HackCode
from drkernel.sandbox.channel import Context
from drkernel.sandbox.devicelock import timing_lock
from drkernel.sandbox.stages.timing import verify_checksums
from drkernel.sandbox.wire.protocol import Profile, ProfileReply
from drkernel.types import KernelTime

__all__ = ["kernel_times", "profile"]


def _window(ctx: Context, name: str, calls: int, timed_window: bool) -> tuple[ProfileReply, Any]:
    """One profiled window on seeds whose reference checksums the timing computed ahead (or fresh
    ones, whose checksums the caller computes); the caller holds the device."""
    ahead = ctx.checksums_ahead.pop(name, None)
    if ahead is not None and len(ahead[0]) == 1 and len(ahead[0][0]) == calls:
        seeds, wseeds, want, picks = ahead
    else:
        seeds, wseeds, want, picks = ctx.fresh(1, calls), ctx.fresh(1, calls), None, None
    reply = ctx.channel.cand(Profile(seeds=seeds[0], wseeds=wseeds[0], timed_window=timed_window),
                             ProfileReply)
    where = "profiled replay of the timed window" if timed_window else "profiled window"
    return reply, lambda: verify_checksums(ctx, seeds, wseeds, [reply.checksums], where, want, picks)


def profile(ctx: Context) -> None:
    if not (ctx.cuda and ctx.opts.profile):
        return
    n = ctx.opts.num_profile_calls
    kt = ctx.result.kernel_timing
    calls = int(kt.window_calls or 1) if kt is not None else 0
    with timing_lock(ctx.device, "profile"):  # both windows in one exclusive hold
        observed, check_observed = _window(ctx, "profile", n, False)
        replay = _window(ctx, "replay", calls, True) if kt is not None and kt.graph else None
    check_observed()
    replayed = None
    if replay is not None:
        replayed, check_replayed = replay
        check_replayed()
    source = replayed if replayed is not None else observed
    result = ctx.result
    kernels, result.coverage = kernel_times(source.kernels, source.launches)
    result.kernels = kernels[:10]
    if replayed is not None:
        _same_own_kernels(ctx, observed, n, replayed, calls)
    per_call = len(observed.launches) / max(n, 1)
    timed = ctx.timed_launches_per_call
    if timed is None or kt is None:
        return
    if per_call != timed:
        ctx.verdict.hack(HackCode.OBSERVER_DEPENDENT, f"{per_call:g} submission launches per call under the "
                         f"profiler, {timed:g} in timed calls")
    observed_total = sum(v[0] for v in observed.kernels.values())
    profiled_ms = observed_total / 1e3 / max(n, 1)
    if kt.median_ms > 0.05 and profiled_ms < 0.25 * kt.median_ms:
        ctx.verdict.hack(HackCode.OBSERVER_DEPENDENT,
                         f"under the profiler the device worked {profiled_ms:.4f} ms "
                         f"per call, {kt.median_ms:.4f} ms in the timed windows")


def kernel_times(events: dict[str, list[float]],
                 launches: list[str]) -> tuple[list[KernelTime], float | None]:
    """The profiled kernels, by device time, and the coverage: the share of device time in the
    submission's own kernels, those whose names the launch hook recorded. A name is the submission's
    only where the device ran it no more often than the hook saw it launched: a Triton kernel named
    after the vendor kernel that does the work (a cuBLAS GEMM's plain name, read from a profiler run
    at import) shows up there twice per call for one launch, and none of that name's time counts."""
    launched = Counter(launches)
    kernels = [KernelTime(name=k[:200], device_us=v[0], calls=int(v[1]), own=0 < int(v[1]) <= launched[k])
               for k, v in events.items()]
    kernels.sort(key=lambda k: -k.device_us)
    total = sum(k.device_us for k in kernels)
    return kernels, (sum(k.device_us for k in kernels if k.own) / total) if total > 0 else None


def _same_own_kernels(ctx: Context, observed: ProfileReply, n: int, replayed: ProfileReply,
                      calls: int) -> None:
    """The submission's kernels per call, by name, observed eagerly and replayed from the timed graph."""
    eager, graph = Counter(observed.launches), Counter(replayed.launches)
    differ = sorted(k for k in eager.keys() | graph.keys() if eager[k] * calls != graph[k] * n)
    if differ:
        names = ", ".join(f"{k[:60]} {eager[k] / max(n, 1):g}/{graph[k] / max(calls, 1):g}"
                          for k in differ[:3])
        ctx.verdict.hack(HackCode.OBSERVER_DEPENDENT,
                         "the submission's kernels per call differ under the profiler "
                         f"and in the timed window (profiled/timed): {names}")

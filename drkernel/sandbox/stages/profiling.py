"""Profiling: the kernels a call launches, their device time and the submission's coverage of it.

The profiled window runs on fresh inputs whose outputs are checksummed against the reference's too,
and its launches and device time must agree with the timed windows': a candidate that works
differently while it is observed is `observer_dependent`.
"""

from __future__ import annotations

from drkernel.sandbox.channel import Context
from drkernel.sandbox.devicelock import timing_lock
from drkernel.sandbox.protocol import Profile, ProfileReply
from drkernel.sandbox.stages.timing import verify_checksums
from drkernel.types import KernelTime

__all__ = ["profile"]


def profile(ctx: Context) -> None:
    if not (ctx.cuda and ctx.opts.profile):
        return
    n = ctx.opts.num_profile_calls
    seeds, wseeds = ctx.fresh(1, n), ctx.fresh(1, n)
    with timing_lock(ctx.device):
        reply = ctx.channel.cand(Profile(seeds=seeds[0], wseeds=wseeds[0]), ProfileReply)
    verify_checksums(ctx, seeds, wseeds, [reply.checksums], "profiled window")
    own = set(reply.launches)
    kernels = [KernelTime(name=k[:200], device_us=v[0], calls=int(v[1]), own=k in own)
               for k, v in reply.kernels.items()]
    kernels.sort(key=lambda k: -k.device_us)
    total = sum(k.device_us for k in kernels)
    result = ctx.result
    result.kernels = kernels[:10]
    result.coverage = (sum(k.device_us for k in kernels if k.own) / total) if total > 0 else None
    per_call = len(reply.launches) / max(n, 1)
    timed = ctx.timed_launches_per_call
    if timed is None or result.kernel_timing is None:
        return
    if per_call != timed:
        ctx.verdict.hack("observer_dependent", f"{per_call:g} submission launches per call under the "
                         f"profiler, {timed:g} in timed calls")
    kt = result.kernel_timing
    profiled_ms = total / 1e3 / max(n, 1)
    if kt.median_ms > 0.05 and profiled_ms < 0.25 * kt.median_ms:
        ctx.verdict.hack("observer_dependent", f"under the profiler the device worked {profiled_ms:.4f} ms "
                         f"per call, {kt.median_ms:.4f} ms in the timed windows")

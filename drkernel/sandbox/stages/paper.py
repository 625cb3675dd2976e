"""The authors' timing, beside the judge's own (EvalOptions.paper_timing; `--protocol paper`).

The authors' evaluation times each side with `num_warmup` untimed calls, then PAPER_CALLS calls each
timed alone with CUDA events on one set of inputs; the mean of each side, rounded to 3 significant
digits, and the speedup as the quotient of those rounded means. A Dr. Kernel checkpoint's Table 1
numbers were measured that way, so `--protocol paper` reports them that way too (PaperTiming).

They are never the verdict's: correctness, hacks, kernel_ms and reference_ms stay the judge's own
(stages/timing.py, stages/sealed.py). The candidate's figure comes from its own process, so it is
held to the sealed span's bound per call, more loosely than its windows: its calls reuse one set of
inputs, which a cache can hold (the span's calls each read fresh ones; on the H200, L2 reads run up
to ~2.5x HBM's rate), so only a mean below PAPER_FACTOR x the bound is called forged
(`timer_mismatch`). PAPER_FACTOR is a first setting: the GPU test of the honest kernels' ratio
(test_gpu.py, the paper timing) is what confirms it. The reference's is taken in `reference_first`,
with no candidate process alive on the host, and cached per problem and device like its windows.
"""

from __future__ import annotations

import math
import statistics

from drkernel.hacks import HackCode
from drkernel.sandbox.channel import Context
from drkernel.sandbox.devicelock import timing_lock
from drkernel.sandbox.refcache import ReferenceTimingCache
from drkernel.sandbox.wire.protocol import PaperTime, PaperTimeReply
from drkernel.types import PaperTiming

__all__ = ["PAPER_CALLS", "PAPER_FACTOR", "PAPER_METHOD", "paper_key", "paper_timing",
           "reference_paper_times", "round_sig"]

PAPER_CALLS = 10  # timed calls a side (the authors' default)
PAPER_METHOD = "paper-events-v1"  # in the cache key of the reference's paper times
PAPER_FACTOR = 0.25  # a paper mean below this share of the sealed bound per call is forged


def round_sig(x: float, digits: int = 3) -> float:
    """`x` rounded to `digits` significant digits (0 stays 0)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def paper_key(reference_key: str) -> str:
    """The cache key of a reference's paper times, beside its windows' key."""
    return f"{reference_key}|{PAPER_METHOD}"


def reference_paper_times(ctx: Context) -> list[float]:
    """The loaded reference's times the authors' way (the device's timing lock held)."""
    with timing_lock(ctx.device, "paper_reference"):
        reply = ctx.channel.ref(PaperTime(seed=ctx.rng.randrange(1 << 30), warmup=ctx.opts.num_warmup,
                                          calls=PAPER_CALLS), PaperTimeReply)
    return [float(t) for t in reply.times_ms]


def paper_timing(ctx: Context, cache: ReferenceTimingCache, reference_key: str) -> None:
    """Time the candidate the authors' way and record `result.paper_timing`; the reference's times
    from the cache (`reference_first` put them there) or, where missing, now, beside the candidate."""
    result = ctx.result
    if not ctx.opts.paper_timing or result.kernel_timing is None:
        return
    cached = cache.get_json(paper_key(reference_key))
    alone = isinstance(cached, list) and bool(cached) and all(isinstance(t, (int, float)) for t in cached)
    ref_times = [float(t) for t in cached] if alone else reference_paper_times(ctx)
    with timing_lock(ctx.device, "paper"):
        reply = ctx.channel.cand(PaperTime(seed=ctx.rng.randrange(1 << 30), warmup=ctx.opts.num_warmup,
                                           calls=PAPER_CALLS), PaperTimeReply)
    times = [float(t) for t in reply.times_ms]
    mean = statistics.fmean(times)
    kernel_ms = round_sig(mean)
    reference_ms = round_sig(statistics.fmean(ref_times))
    result.paper_timing = PaperTiming(
        kernel_ms=kernel_ms, reference_ms=reference_ms,
        speedup=reference_ms / kernel_ms if kernel_ms > 0 else None,
        warmup=ctx.opts.num_warmup, calls=len(times), kernel_times_ms=times, reference_times_ms=ref_times,
        reference_measured_alone=alone)
    bound = result.kernel_timing.sealed_ms_per_call
    if bound and mean < PAPER_FACTOR * bound:
        ctx.verdict.hack(HackCode.TIMER_MISMATCH,
                         f"the sandbox reported {mean:.4f} ms a call for the paper "
                         f"protocol's timed calls; the judge's side saw a call take no less than "
                         f"{bound:.4f} ms")
        ctx.verdict.stop_if_failed()

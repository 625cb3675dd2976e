"""One evaluation: static gate -> load -> correctness -> launch modes -> timing -> (the authors' timing)
-> profile -> variants.

Drives a candidate sandbox and the reference sandbox through their ops (sandbox/channel.py), step by
step (sandbox/stages/), and turns every finding into the EvalResult. Failures of the candidate are
data; failures of the reference side raise ReferenceFailure for the judge to report as infra_error.
The judge reports facts (correct, hacks, speedup, coverage, times); the reward shown in the result
is computed from them by drkernel.reward, the one owner of the reward everywhere.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable

from drkernel.reward.speedup import result_reward, reward_config
from drkernel.sandbox.cardmem import CardWitness
from drkernel.sandbox.channel import Channel, Context, ReferenceFailure, Stop, Verdict
from drkernel.sandbox.comparator import LocalComparator, ProcessComparator
from drkernel.sandbox.devicelock import candidate_alive, counting_waits
from drkernel.sandbox.plumbing.process import SandboxProcess
from drkernel.sandbox.refcache import ReferenceTimingCache
from drkernel.sandbox.stages import correctness, paper, profiling, sealed, timing, variants
from drkernel.types import DeviceInfo, EvalOutcome, EvalRequest, EvalResult

__all__ = ["Evaluation", "ReferenceFailure"]


class Evaluation:
    """The steps of one evaluation, over one candidate sandbox and the judge's reference sandbox."""

    def __init__(self, request: EvalRequest, cand: SandboxProcess, ref: SandboxProcess,
                 cache: ReferenceTimingCache, device: DeviceInfo,
                 comparator: LocalComparator | ProcessComparator | None = None,
                 judge_device: str = "cpu", respawn_ref: Callable[[], SandboxProcess] | None = None,
                 witness: CardWitness | None = None) -> None:
        opts = request.options
        rng = random.Random(opts.seed) if opts.seed is not None else random.SystemRandom()
        init_seed = rng.randrange(1 << 31)
        seeds = [rng.randrange(1 << 31) for _ in range(opts.num_correct_trials)]
        verdict = Verdict(EvalResult(outcome=EvalOutcome.OK, device=device, task_id=request.task_id))
        channel = Channel(cand, ref, time.monotonic() + opts.timeout_s, verdict, respawn_ref=respawn_ref,
                          retry_timeout_s=opts.timeout_s, witness=witness)
        self.ctx = Context(request, channel, verdict, cuda=device.kind == "cuda", device=judge_device,
                           rng=rng, init_seed=init_seed, seeds=seeds)
        self.cache = cache
        self.comparator = comparator or LocalComparator("cpu")
        self._alive = contextlib.ExitStack()

    def steps(self) -> list[tuple[str, Callable[[], None]]]:
        """(stage name, step) in order; each stage's wall time goes to result.stage_s."""
        ctx, verdict = self.ctx, self.ctx.verdict
        return [
            ("static", lambda: correctness.static_gate(ctx)),
            ("reference_first", lambda: timing.reference_first(ctx, self.cache)),
            ("candidate_alive", self._candidate_alive),
            ("load", lambda: correctness.load(ctx)),
            ("correctness", lambda: correctness.trials(ctx, self.comparator)),
            ("launch_modes", lambda: correctness.launch_modes(ctx)),
            ("stop_if_failed", verdict.stop_if_failed),
            ("timing", lambda: timing.kernel_timing(ctx, self.cache)),
            ("sealed_span", lambda: sealed.sealed_span(ctx)),
            ("paper_timing", lambda: paper.paper_timing(ctx, self.cache,
                                                        timing.reference_key(ctx, self.cache))),
            ("profile", lambda: profiling.profile(ctx)),
            ("stop_if_failed", verdict.stop_if_failed),
            ("shape_variants", lambda: variants.shape_variants(ctx, self.comparator)),
            ("reward", self._correct),
        ]

    def _candidate_alive(self) -> None:
        """From here the candidate's code runs: hold the host's candidates lock shared until close()
        (after the judge killed the sandbox), so no reference is timed meanwhile (devicelock.py)."""
        self._alive.enter_context(candidate_alive())

    def close(self) -> None:
        """The candidate's sandbox is gone: let go of what the stages held for it (the sealed span's
        share of the card) and of the host's candidates lock."""
        self.ctx.leases.close()
        self._alive.close()

    def run(self) -> EvalResult:
        result = self.ctx.result
        with counting_waits() as waits:
            try:
                for name, step in self.steps():
                    t0 = time.monotonic()
                    step()
                    result.add_stage(name, time.monotonic() - t0)
            except Stop:
                pass
        if self.ctx.cuda:  # the device lock's share of the stages' time (sandbox/devicelock.py)
            result.stage_s.update({f"lock_{k}": round(v, 4) for k, v in waits.items()})
        if result.hacks:
            result.outcome = EvalOutcome.HACK_DETECTED
        if result.outcome is not EvalOutcome.OK:
            result.correct = False
        result.reward = result_reward(result, reward_config(self.ctx.opts))
        return result

    def _correct(self) -> None:
        """Every step passed: the verdict is correct (held-out shapes are reported beside it)."""
        self.ctx.result.correct = True

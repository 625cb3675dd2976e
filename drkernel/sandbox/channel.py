"""The judge's side of one evaluation's two sandboxes, and the verdict being built.

`Channel` sends typed requests (sandbox/wire/protocol.py) to the candidate and the reference and reads
their replies typed. A candidate reply that is not well formed is the candidate's failure
(SandboxFailure "protocol"); a candidate reply that reports a failure ends the evaluation with the
matching outcome; any failure of the reference is a ReferenceFailure (infra_error). `Verdict` holds
the EvalResult under construction: hack findings, and the early stop with an outcome.
"""

from __future__ import annotations

import contextlib
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drkernel.hacks import HackCode
from drkernel.sandbox.cardmem import SLACK_BYTES, CardWitness, oom_numbers
from drkernel.sandbox.plumbing.process import SandboxFailure, SandboxProcess
from drkernel.sandbox.wire.protocol import (
    BenchPrepare,
    BenchRun,
    ErrorReply,
    Load,
    ProtocolError,
    Reply,
    Request,
    parse_reply,
)
from drkernel.types import ErrorInfo, EvalOptions, EvalOutcome, EvalRequest, EvalResult

__all__ = ["COMPILE_KINDS", "Channel", "Context", "Held", "ReferenceFailure", "Stop", "Verdict", "Windows",
           "own_cap_note", "resource_shaped"]

# per window, one int per call: the input seeds (or checksum weights' seeds) or the calls checked
Windows = list[list[int]]

COMPILE_KINDS = {"syntax_error", "import_error", "missing_model_new", "triton_compile_error"}
# what a failure of the judge's side says when a shared resource ran out: with the candidate's sandbox
# alive, the candidate may have taken it (its GPU memory, the scratch disk, the CPUs)
_RESOURCE_SIGNS = ("out of memory", "no space left", "cannot allocate memory", "disk quota",
                   "resource temporarily unavailable", "too many open files")


# what torch, the CUDA runtime and Triton say when the device's memory ran out
# (the driver's API, as wire/sharedmem.py words a region it could not make: "cuMemCreate failed: out of
# memory"; run BO blamed honest kernels for other judges' spans until this said so)
_DEVICE_OOM = re.compile(r"cuda[^\n]{0,20}out of memory|cuMem\w*[^\n]{0,20}out of memory|"
                         r"cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY", re.IGNORECASE)
# a device out-of-memory with at least this much more of the card free than the block tried: the
# process's own cap (torch's per-process memory fraction) ran out, not the card
OWN_CAP_ROOM = 256 << 20


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.2f} GiB"


@dataclass(frozen=True)
class Held:
    """What a stopped candidate's sandbox held of the card (None: not known), and the words for it."""

    nbytes: int | None
    within_share: bool
    note: str


def own_cap_note(message: str) -> str:
    """For a device out-of-memory whose message says the card had room for the block: why that is
    the failing process's own cap, nobody else's doing ("" otherwise)."""
    numbers = oom_numbers(message)
    if numbers is None or numbers[1] < numbers[0] + OWN_CAP_ROOM:
        return ""
    tried, free = numbers
    return (f"[the card had {_gib(free)} free for a {_gib(tried)} block: the process ran out of its own "
            "memory cap, not of the card; the submission is not blamed]")


def resource_shaped(message: str) -> bool:
    """Whether a failure's message says a shared resource ran out."""
    text = message.lower()
    return any(sign in text for sign in _RESOURCE_SIGNS)


EVIDENCE_CHARS = 1000  # of one hack's evidence in the result; the sandbox may report megabytes
R = TypeVar("R", bound=Reply)
S = TypeVar("S", bound=Reply)


class ReferenceFailure(Exception):
    """The reference side failed: the judge reports infra_error, never a verdict on the candidate."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


class Stop(Exception):
    """Ends the pipeline early with the result built so far."""


class Verdict:
    """The EvalResult being built, and the bookkeeping of what was found."""

    def __init__(self, result: EvalResult) -> None:
        self.result = result
        self.variant_index: int | None = None  # set while a held-out shape is checked

    def hack(self, code: HackCode, evidence: str) -> None:
        if self.variant_index is not None:  # a hack is a hack wherever it is seen; say where, for humans
            evidence = f"held-out shape {self.variant_index + 1}: {evidence}"
        if code not in self.result.hacks:
            self.result.hacks.append(code.value)  # the plain name travels
            self.result.hack_details[code.value] = evidence[:EVIDENCE_CHARS]  # a sandbox's strings, bounded

    def finish(self, outcome: EvalOutcome, error: ErrorInfo | None = None) -> None:
        """Stop here with `outcome`."""
        self.result.outcome = outcome
        self.result.error = error
        raise Stop

    @property
    def failed(self) -> bool:
        return bool(self.result.hacks) or self.result.outcome is not EvalOutcome.OK

    def stop_if_failed(self) -> None:
        if self.failed:
            raise Stop

    def check_flags(self, reply: Reply) -> None:
        """What every candidate reply reports about the sandbox itself."""
        if reply.tampered:
            self.hack(HackCode.MONKEYPATCH, "replaced at run time: " + ", ".join(reply.tampered[:8]))
        if reply.threads:
            self.hack(HackCode.ASYNC_THREAD, f"{reply.threads} thread(s) left running by the submission")


class Channel:
    """Typed ops to the candidate and the reference sandboxes, all before one deadline.

    `respawn_ref`: gives a fresh reference sandbox (the judge's). With it, a failure of the reference
    while the candidate's sandbox is alive is never taken at its word: the candidate's sandbox is
    killed, and the failed op is run again in a fresh reference sandbox alone (after the reference's
    load and window build it rests on), within `retry_timeout_s`. Where it then passes and the failure
    was a shared resource running out (GPU memory, disk, the deadline), the candidate starved the
    reference: its failure (`resource_exhaustion`, or `timeout`), never an infra_error.

    Device memory is weighed first (`witness`, sandbox/cardmem.py): a reference that ran out of its
    own cap while the card had room is the judge's fault, without a retry; and where the card itself
    was short, the candidate is blamed only if its sandbox held more of the card than its share."""

    def __init__(self, cand: SandboxProcess, ref: SandboxProcess, deadline: float, verdict: Verdict,
                 respawn_ref: Callable[[], SandboxProcess] | None = None,
                 retry_timeout_s: float = 600.0, witness: CardWitness | None = None) -> None:
        self.cand_proc, self.ref_proc, self.deadline, self.verdict = cand, ref, deadline, verdict
        self.respawn_ref, self.retry_timeout_s = respawn_ref, retry_timeout_s
        self.witness = witness
        self._ref_setup: dict[str, Request] = {}  # the last load and window build sent to the reference

    def cand(self, request: Request, kind: type[R]) -> R:
        self.cand_proc.send(request.to_wire())
        return self._cand_reply(request, kind)

    def _send_ref(self, request: Request) -> None:
        if isinstance(request, (Load, BenchPrepare)):
            self._ref_setup[request.OP] = request
        self.ref_proc.send(request.to_wire())

    def ref(self, request: Request, kind: type[R]) -> R:
        self._send_ref(request)
        return self._ref_reply(request, kind)

    def both(self, ref_req: Request, cand_req: Request, kind: type[R]) -> tuple[R, R]:
        """The same op in both sandboxes, concurrently."""
        self._send_ref(ref_req)
        self.cand_proc.send(cand_req.to_wire())
        ref_reply = self._ref_reply(ref_req, kind)
        return ref_reply, self._cand_reply(cand_req, kind)

    def side_by_side(self, ref_req: Request, ref_kind: type[R], cand_req: Request,
                     cand_kind: type[S]) -> tuple[R, S]:
        """Two different ops at once, one in each sandbox; the reference's reply is read first."""
        self._send_ref(ref_req)
        self.cand_proc.send(cand_req.to_wire())
        ref_reply = self._ref_reply(ref_req, ref_kind)
        return ref_reply, self._cand_reply(cand_req, cand_kind)

    def both_lenient(self, ref_req: Request, cand_req: Request,
                     kind: type[R]) -> tuple[R | ReferenceFailure, R | ErrorReply]:
        """Like `both`, but a reply that reports a failure is returned, not raised: a reference error
        as its ReferenceFailure, a candidate error as its ErrorReply. Both replies are always received,
        so neither pipe keeps a stale one. A dead reference still raises (infra)."""
        self._send_ref(ref_req)
        self.cand_proc.send(cand_req.to_wire())
        ref_reply: R | ReferenceFailure
        try:
            ref_reply = self._ref_reply(ref_req, kind)
        except ReferenceFailure as exc:
            if exc.kind not in ("reference_error", "unsupported_dtype"):
                raise
            ref_reply = exc
        reply = self._parse_cand(cand_req, self.cand_proc.receive(self.deadline))
        self._account("sandbox", cand_req, reply)
        if isinstance(reply, ErrorReply):
            return ref_reply, reply
        self.verdict.check_flags(reply)
        return ref_reply, _expect(reply, kind, "candidate")

    # -- replies ----------------------------------------------------------------------------------
    def _cand_reply(self, request: Request, kind: type[R]) -> R:
        reply = self._parse_cand(request, self.cand_proc.receive(self.deadline))
        self._account("sandbox", request, reply)
        if isinstance(reply, ErrorReply):
            err = reply.error
            message = err.message[:4000]
            if err.kind == "reference_error":
                # Only the reference's own sandbox witnesses a reference failure (it answers first in
                # every op both run, and raised already if it failed): from the candidate's sandbox,
                # which the candidate controls, the claim is the candidate's failure, never infra.
                message = f"the reference code failed in the submission's sandbox only: {message}"[:4000]
            outcome = EvalOutcome.COMPILE_ERROR if err.kind in COMPILE_KINDS else EvalOutcome.RUNTIME_ERROR
            self.verdict.finish(outcome, ErrorInfo(err.kind[:100], message,
                                                   err.traceback[-8000:] if err.traceback else None))
            raise AssertionError("unreachable")  # finish raised Stop
        self.verdict.check_flags(reply)
        return _expect(reply, kind, "candidate")

    def _parse_cand(self, request: Request, data: dict) -> Reply | ErrorReply:  # type: ignore[type-arg]
        try:
            return parse_reply(request, data)
        except ProtocolError as exc:  # the candidate rewrote its sandbox's reply: its failure, not ours
            self.cand_proc.kill()
            raise SandboxFailure("protocol",
                                 f"the sandbox's reply to {request.OP} is malformed: {exc}") from None

    def _ref_reply(self, request: Request, kind: type[R]) -> R:
        try:
            return self._ref_reply_once(self.ref_proc, request, kind, self.deadline)
        except ReferenceFailure as failure:
            self._retry_alone(request, kind, failure)
            raise

    def _ref_reply_once(self, proc: SandboxProcess, request: Request, kind: type[R], deadline: float) -> R:
        try:
            data = proc.receive(deadline)
        except SandboxFailure as exc:
            raise ReferenceFailure(f"reference_{exc.kind}", exc.message) from None
        try:
            reply = parse_reply(request, data)
        except ProtocolError as exc:
            raise ReferenceFailure("reference_protocol", f"malformed reply to {request.OP}: {exc}") from None
        self._account("reference", request, reply)
        if isinstance(reply, ErrorReply):
            err = reply.error
            raise ReferenceFailure(err.kind if err.kind == "unsupported_dtype" else "reference_error",
                                   err.message or "reference failed")
        return _expect(reply, kind, "reference")

    def _retry_alone(self, request: Request, kind: type[R], failure: ReferenceFailure) -> None:
        """With the candidate's sandbox alive, a reference failure is run again with it gone (see the
        class). Returns to let `failure` stand (infra); raises SandboxFailure where the candidate
        starved the reference."""
        starved = failure.kind in ("reference_timeout", "reference_crash") or resource_shaped(failure.message)
        if (not starved or self.respawn_ref is None or not self.cand_proc.used
                or not self.cand_proc.alive()):
            return  # the reference's own error; or a spare that has run no op (no candidate code yet)
        own_cap = own_cap_note(failure.message)
        if own_cap:
            raise ReferenceFailure(failure.kind, f"{failure.message[:3000]} {own_cap}")
        held = self.stop_candidate(failure.message, self.cand_proc.kill)
        self.ref_proc = proc = self.respawn_ref()
        # the load first, then the window build a timed op rests on: the order they were first sent
        setup = self._ref_setup
        replay: list[Request] = [setup[op] for op in ("load", "bench_prepare") if op in setup
                                 and (op == "load" or isinstance(request, BenchRun))]
        if not any(r is request for r in replay):
            replay.append(request)
        deadline = time.monotonic() + self.retry_timeout_s
        try:
            proc.wait_ready()
            for step in replay:
                proc.send(step.to_wire())
                self._ref_reply_once(proc, step, Reply if step is not request else kind, deadline)
        except (ReferenceFailure, SandboxFailure):
            return  # it fails alone too: the reference's own failure
        what = (f"the reference's {request.OP} failed while the submission's sandbox ran "
                f"({failure.message[:300]})")
        if failure.kind == "reference_timeout":
            raise SandboxFailure("timeout", f"{what}, and finished in time with that sandbox gone: the "
                                 "submission's sandbox kept the judge's side past the time limit")
        if held.within_share:
            raise ReferenceFailure(failure.kind,
                                   f"{what}, and passed with that sandbox gone; but {held.note}")
        if held.note:
            what += f"; {held.note}"
        raise SandboxFailure("resource_exhaustion", f"{what}, and passed with that sandbox gone: the "
                             "submission starved it of a resource the judge shares (memory, disk)")

    def stop_candidate(self, message: str, stop: Callable[[], None]) -> Held:
        """Stop the candidate's sandbox (`stop`: kill it, or stop its processes and keep its files)
        after a judge-side failure with `message`; for a device out-of-memory with a witness, read the
        card's free memory before and after: what the sandbox held, and whether within its share."""
        device_memory = oom_numbers(message) is not None or _DEVICE_OOM.search(message) is not None
        witness = self.witness if device_memory else None
        before = witness.free() if witness is not None else None
        stop()
        after = witness.settled_free() if witness is not None and before is not None else None
        if witness is None or before is None or after is None:
            return Held(None, False, "")
        held, share = after - before, witness.candidate_share
        if held <= share + SLACK_BYTES:
            return Held(held, True, f"that sandbox held {_gib(held)} of the card, within its share of "
                                    f"{_gib(share)}: the card was short for another reason (another judge "
                                    "or program); the submission is not blamed")
        return Held(held, False,
                    f"that sandbox held {_gib(held)} of the card, beyond its share of {_gib(share)}")

    def _account(self, who: str, request: Request, reply: Reply | ErrorReply) -> None:
        self.verdict.result.add_op(who, request.OP, reply.op_s)


def _expect(reply: Reply, kind: type[R], who: str) -> R:
    if not isinstance(reply, kind):  # parse_reply picks the class from the request: a judge bug
        raise TypeError(f"the {who}'s reply is a {type(reply).__name__}, not a {kind.__name__}")
    return reply


@dataclass
class Context:
    """What the stages of one evaluation share: the request, the channel, the verdict, and the
    randomness that only the judge knows."""

    request: EvalRequest
    channel: Channel
    verdict: Verdict
    cuda: bool
    device: str  # "cuda:N" on a GPU judge: names the device lock
    rng: random.Random
    init_seed: int
    seeds: list[int]  # of the correctness trials
    started: float = field(default_factory=time.monotonic)
    timed_launches_per_call: float | None = None
    output_bytes: int | None = None  # of one call's outputs, from the reference's trial files
    problem_flops: float | None = None  # a module-level FLOPS of the reference, where it states one
    # windows whose reference checksums were computed ahead (timing, beside the window's build):
    # name -> (seeds, wseeds, the reference's checksums of the checked calls, which calls of each
    # window are checked: None for all); a stage takes its own out once
    checksums_ahead: dict[str, tuple[Windows, Windows, list[Any], Windows | None]] = field(
        default_factory=dict)
    # what the evaluation holds until its candidate's sandbox is gone (Evaluation.close): the sealed
    # span's share of the card, whose region the candidate keeps mapped while it lives
    leases: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def opts(self) -> EvalOptions:
        return self.request.options

    @property
    def result(self) -> EvalResult:
        return self.verdict.result

    def fresh(self, rows: int, cols: int) -> list[list[int]]:
        """Seeds the sandbox cannot know in advance: drawn now, by the judge."""
        return [[self.rng.randrange(1 << 30) for _ in range(cols)] for _ in range(rows)]

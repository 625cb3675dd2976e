"""The judge's side of one evaluation's two sandboxes, and the verdict being built.

`Channel` sends typed requests (sandbox/protocol.py) to the candidate and the reference and reads
their replies typed. A candidate reply that is not well formed is the candidate's failure
(SandboxFailure "protocol"); a candidate reply that reports a failure ends the evaluation with the
matching outcome; any failure of the reference is a ReferenceFailure (infra_error). `Verdict` holds
the EvalResult under construction: hack findings, and the early stop with an outcome.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drkernel.sandbox.process import SandboxFailure, SandboxProcess
from drkernel.sandbox.protocol import ErrorReply, ProtocolError, Reply, Request, parse_reply
from drkernel.types import ErrorInfo, EvalOptions, EvalOutcome, EvalRequest, EvalResult

__all__ = ["COMPILE_KINDS", "Channel", "Context", "ReferenceFailure", "Stop", "Verdict", "Windows"]

# per window, one int per call: the input seeds (or checksum weights' seeds) or the calls checked
Windows = list[list[int]]

COMPILE_KINDS = {"syntax_error", "import_error", "missing_model_new", "triton_compile_error"}
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

    def hack(self, code: str, evidence: str) -> None:
        if self.variant_index is not None:  # a hack is a hack wherever it is seen; say where, for humans
            evidence = f"held-out shape {self.variant_index + 1}: {evidence}"
        if code not in self.result.hacks:
            self.result.hacks.append(code)
            self.result.hack_details[code] = evidence[:EVIDENCE_CHARS]  # a sandbox's strings, bounded

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
            self.hack("monkeypatch", "replaced at run time: " + ", ".join(reply.tampered[:8]))
        if reply.threads:
            self.hack("async_thread", f"{reply.threads} thread(s) left running by the submission")


class Channel:
    """Typed ops to the candidate and the reference sandboxes, all before one deadline."""

    def __init__(self, cand: SandboxProcess, ref: SandboxProcess, deadline: float, verdict: Verdict) -> None:
        self.cand_proc, self.ref_proc, self.deadline, self.verdict = cand, ref, deadline, verdict

    def cand(self, request: Request, kind: type[R]) -> R:
        self.cand_proc.send(request.to_wire())
        return self._cand_reply(request, kind)

    def ref(self, request: Request, kind: type[R]) -> R:
        self.ref_proc.send(request.to_wire())
        return self._ref_reply(request, kind)

    def both(self, ref_req: Request, cand_req: Request, kind: type[R]) -> tuple[R, R]:
        """The same op in both sandboxes, concurrently."""
        self.ref_proc.send(ref_req.to_wire())
        self.cand_proc.send(cand_req.to_wire())
        ref_reply = self._ref_reply(ref_req, kind)
        return ref_reply, self._cand_reply(cand_req, kind)

    def side_by_side(self, ref_req: Request, ref_kind: type[R], cand_req: Request,
                     cand_kind: type[S]) -> tuple[R, S]:
        """Two different ops at once, one in each sandbox; the reference's reply is read first."""
        self.ref_proc.send(ref_req.to_wire())
        self.cand_proc.send(cand_req.to_wire())
        ref_reply = self._ref_reply(ref_req, ref_kind)
        return ref_reply, self._cand_reply(cand_req, cand_kind)

    def both_lenient(self, ref_req: Request, cand_req: Request,
                     kind: type[R]) -> tuple[R | ReferenceFailure, R | ErrorReply]:
        """Like `both`, but a reply that reports a failure is returned, not raised: a reference error
        as its ReferenceFailure, a candidate error as its ErrorReply. Both replies are always received,
        so neither pipe keeps a stale one. A dead reference still raises (infra)."""
        self.ref_proc.send(ref_req.to_wire())
        self.cand_proc.send(cand_req.to_wire())
        ref_reply: R | ReferenceFailure
        try:
            ref_reply = self._ref_reply(ref_req, kind)
        except ReferenceFailure as exc:
            if exc.kind not in ("reference_error", "unsupported_dtype"):
                raise
            ref_reply = exc
        reply = self._parse_cand(cand_req, self.cand_proc.receive(self.deadline))
        self._account("sandbox", reply)
        if isinstance(reply, ErrorReply):
            return ref_reply, reply
        self.verdict.check_flags(reply)
        return ref_reply, _expect(reply, kind, "candidate")

    # -- replies ----------------------------------------------------------------------------------
    def _cand_reply(self, request: Request, kind: type[R]) -> R:
        reply = self._parse_cand(request, self.cand_proc.receive(self.deadline))
        self._account("sandbox", reply)
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
            data = self.ref_proc.receive(self.deadline)
        except SandboxFailure as exc:
            raise ReferenceFailure(f"reference_{exc.kind}", exc.message) from None
        try:
            reply = parse_reply(request, data)
        except ProtocolError as exc:
            raise ReferenceFailure("reference_protocol", f"malformed reply to {request.OP}: {exc}") from None
        self._account("reference", reply)
        if isinstance(reply, ErrorReply):
            err = reply.error
            raise ReferenceFailure(err.kind if err.kind == "unsupported_dtype" else "reference_error",
                                   err.message or "reference failed")
        return _expect(reply, kind, "reference")

    def _account(self, who: str, reply: Reply | ErrorReply) -> None:
        stages = self.verdict.result.stage_s
        stages[who] = round(stages.get(who, 0.0) + reply.op_s, 4)


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

    @property
    def opts(self) -> EvalOptions:
        return self.request.options

    @property
    def result(self) -> EvalResult:
        return self.verdict.result

    def fresh(self, rows: int, cols: int) -> list[list[int]]:
        """Seeds the sandbox cannot know in advance: drawn now, by the judge."""
        return [[self.rng.randrange(1 << 30) for _ in range(cols)] for _ in range(rows)]

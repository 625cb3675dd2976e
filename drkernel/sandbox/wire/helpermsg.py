"""Typed messages between the judge and its two helper processes: the comparison process and the fork server.

Neither helper runs candidate code (the comparison process holds the judge's CUDA context; the fork
server imports torch once and forks sandboxes), so these channels are the judge's own. They were
untyped dicts, read by key wherever they were used; here each is a `protocol.Wire` class, built and
read through `to_wire` / `from_wire`, which fail on a missing field or a field of the wrong type.

- judge -> comparison process: `CompareJob`; back: `CompareAnswer` (a `CompareReply`, or the error
  that ended the process's state).
- judge -> fork server: `ForkRequest` (the worker's arguments, its environment and, where the sandbox
  is isolated, the `IsolationSpec` of what it may see); back: `ForkAnswer` (the child's pid, or why
  no child was made).
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from drkernel.sandbox.wire.protocol import NON_FINITE, Wire

__all__ = ["AnyFloat", "CompareAnswer", "CompareJob", "CompareReply", "ForkAnswer", "ForkRequest",
           "IsolationSpec", "WorkerArgs"]

# a float as the judge's side has it, NaN and Inf included: a difference that overflowed is a fact, and a
# tolerance is the user's (an atol of inf is theirs to ask for)
AnyFloat = Annotated[float, NON_FINITE]


# -- the comparison process (sandbox/comparator.py) ----------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CompareJob(Wire):
    """Compare one output pair: the reference's file and the candidate's, each with its count of
    tensors, their structures and the tolerances. `fingerprint`: also return the reference's
    fingerprint (the weak-reference warning). `expect`: the reference's [dtype, shape] per output,
    which the candidate's file header must match before a byte of its data is read (None: not
    checked). `inject`: the debug hook's fault (JudgeSettings.debug_fault), None in every real job."""

    ref_path: str
    ref_count: int
    out_path: str
    out_count: int
    ref_structure: Any
    out_structure: Any
    atol: AnyFloat | None
    rtol: AnyFloat | None
    relative: bool
    fingerprint: bool
    expect: list[list[Any]] | None = None
    inject: str | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CompareReply(Wire):
    """The comparison (sandbox/correctness.Comparison) and, where asked, the reference's fingerprint."""

    passed: bool
    issue: str | None = None
    max_abs_diff: AnyFloat | None = None
    max_rel_diff: AnyFloat | None = None
    rel_l2: AnyFloat | None = None
    mean_abs_diff: AnyFloat | None = None
    fingerprint: list[float] | None = None  # finite: NaN and Inf are written as 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CompareAnswer(Wire):
    """What the comparison process sends back: `result`, or the `error` after which it exits (its
    device state may be poisoned)."""

    result: CompareReply | None = None
    error: str | None = None


# -- the fork server (sandbox/plumbing/zygote.py) --------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkerArgs(Wire):
    """The sandbox worker's own arguments (worker.serve): its role ("reference" | "candidate"), device,
    folder, host memory limit, GPU memory fraction, and the pid it dies with."""

    role: str
    device: str
    workdir: str
    memory_mb: int
    fraction: float
    parent: int

    def argv(self) -> list[str]:
        """As `python -m drkernel.sandbox.inside.worker` takes them after its two pipe fds."""
        return [self.role, self.device, self.workdir, str(self.memory_mb), str(self.fraction),
                str(self.parent)]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class IsolationSpec(Wire):
    """What an isolated sandbox sees (sandbox/isolation.enter): its uid, the folders kept writable
    (its own, a shared Triton cache), the paths hidden, and the paths exposed read-only."""

    uid: int
    keep: list[str]
    hide: list[str]
    expose: list[str]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ForkRequest(Wire):
    """Fork one sandbox: run the worker with `args` in `cwd`, its environment `env`, stdout and stderr
    to `output_path` (made new in `workdir`, the folder the judge just made for it). Isolated where
    `isolation` is set; else dropped to `uid` where that is set."""

    args: WorkerArgs
    env: dict[str, str]
    cwd: str
    workdir: str
    output_path: str
    uid: int | None = None
    isolation: IsolationSpec | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ForkAnswer(Wire):
    """The forked sandbox's pid, or why none was made."""

    pid: int | None = None
    error: str | None = None

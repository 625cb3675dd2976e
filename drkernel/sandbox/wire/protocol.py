"""Wire format between the judge and its sandbox processes, and the typed messages it carries.

Control messages are length-prefixed JSON on a dedicated pipe pair (never stdout, which the
candidate owns). Tensors travel as raw tensor files (`tensorfile.py`: a JSON header, then bytes):
nothing the sandbox sends is ever unpickled on the judge's side.

Each op is a request class (judge -> sandbox) with its reply class (sandbox -> judge). Both sides
build and read them through `to_wire` / `from_wire`, which fail on a missing field or a field of the
wrong type. That matters on the reply side: a candidate can rewrite its sandbox's replies, and a
reply the judge cannot read must be the candidate's failure (`SandboxFailure("protocol")`), never a
judge exception (an infra_error, which training masks) and never a default that switches a check off.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import struct
import types
import typing
from typing import Annotated, Any, ClassVar, TypeVar, Union

__all__ = ["MAX_MESSAGE_BYTES", "NON_FINITE", "BenchPrepare", "BenchPrepareReply", "BenchRun",
           "BenchRunReply", "Checksums", "ChecksumsReply", "ErrorReply", "Hello", "Load", "LoadReply",
           "Modes", "ModesReply", "OutputItem", "PaperTime", "PaperTimeReply", "Peak", "PeakReply",
           "Profile", "ProfileReply", "ProtocolError", "REPLIES", "REQUESTS", "Reply", "Request", "Run",
           "RunReply", "WireError", "parse_reply", "read_message", "write_message"]

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# a float field's mark (Annotated[float, NON_FINITE]) where NaN and Inf are allowed: a figure the judge
# measured itself (sandbox/wire/helpermsg.py); every other float must be finite
NON_FINITE = "non-finite allowed"
_HEADER = struct.Struct("<Q")


class ProtocolError(Exception):
    """The peer sent something that is not a well-formed message."""


def write_message(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message, allow_nan=True, default=str).encode()
    payload = _HEADER.pack(len(data)) + data
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, n: int) -> bytes:
    chunks: list[bytes] = []
    remaining = n
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the channel")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int) -> dict[str, Any]:
    (length,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    if length > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {length} bytes exceeds the {MAX_MESSAGE_BYTES} limit")
    try:
        message = json.loads(_read_exact(fd, length))
    except (ValueError, RecursionError) as exc:  # nested past the parser's depth: RecursionError
        raise ProtocolError(f"malformed message: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(message, dict):
        raise ProtocolError("message is not a JSON object")
    return message


# -- typed messages -------------------------------------------------------------------------------
W = TypeVar("W", bound="Wire")
_HINTS: dict[type, dict[str, Any]] = {}


class Wire:
    """A message of fixed, typed fields: `to_wire` gives its JSON object, `from_wire` checks one."""

    def to_wire(self) -> dict[str, Any]:
        return {
            f.name: _plain(getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
        }

    @classmethod
    def from_wire(cls: type[W], data: Any) -> W:
        if not isinstance(data, dict):
            raise ProtocolError(f"{cls.__name__}: not a JSON object")
        hints = _HINTS.get(cls)
        if hints is None:
            hints = _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in data:
                raise ProtocolError(f"{cls.__name__}: no field {f.name!r}")
            values[f.name] = _convert(data[f.name], hints[f.name], f"{cls.__name__}.{f.name}")
        return cls(**values)


def _plain(v: Any) -> Any:
    if isinstance(v, Wire):
        return v.to_wire()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _convert(v: Any, tp: Any, where: str) -> Any:
    """`v` as type `tp` (JSON's view of it), or ProtocolError naming `where`."""
    if tp is Any:
        return v
    origin = typing.get_origin(tp)
    if origin is Annotated:  # Annotated[float, NON_FINITE]: any float, NaN and Inf included
        base, *marks = typing.get_args(tp)
        if NON_FINITE in marks and isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        return _convert(v, base, where)
    if origin in (Union, types.UnionType):
        for arm in typing.get_args(tp):
            try:
                return _convert(v, arm, where)
            except ProtocolError:
                continue
        raise ProtocolError(f"{where}: {type(v).__name__} is not {tp}")
    if tp is type(None):
        if v is None:
            return None
    elif tp is bool:
        if isinstance(v, bool):
            return v
    elif tp is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    elif tp is float:  # a finite number: NaN or Inf would make every result that shows it invalid JSON
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    elif tp is str:
        if isinstance(v, str):
            return v
    elif origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        if isinstance(v, (list, tuple)):
            return [_convert(x, item, f"{where}[{k}]") for k, x in enumerate(v)]
    elif origin is dict:
        key, val = typing.get_args(tp) or (Any, Any)
        if isinstance(v, dict):
            return {_convert(k, key, where): _convert(x, val, f"{where}[{k!r}]") for k, x in v.items()}
    elif isinstance(tp, type) and issubclass(tp, Wire):
        return tp.from_wire(v) if not isinstance(v, tp) else v
    raise ProtocolError(f"{where}: {type(v).__name__} is not {getattr(tp, '__name__', tp)}")


# -- requests: the judge's ops ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Request(Wire):
    OP: ClassVar[str] = ""

    def to_wire(self) -> dict[str, Any]:
        return Wire.to_wire(self) | {"op": self.OP}


@dataclasses.dataclass(frozen=True, slots=True)
class Load(Request):
    """Build the module; the reference from `reference_code` (plus `size_snippet`), the candidate from
    `candidate_path` (None in the reference's request)."""

    OP: ClassVar[str] = "load"
    reference_code: str
    size_snippet: str
    reference_hash: str
    init_seed: int
    entry_point: str
    candidate_path: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Run(Request):
    """One call per seed on get_inputs() under that seed; every output written to `{tag}_{k}.pt`."""

    OP: ClassVar[str] = "run"
    seeds: list[int]
    tag: str


@dataclasses.dataclass(frozen=True, slots=True)
class Modes(Request):
    """Count the submission's own launches in train/eval x grad/no-grad."""

    OP: ClassVar[str] = "modes"
    seed: int


@dataclasses.dataclass(frozen=True, slots=True)
class BenchPrepare(Request):
    """Build a timed window of `calls` calls (None: the sandbox picks, for ~`window_ms`)."""

    OP: ClassVar[str] = "bench_prepare"
    seed: int
    calls: int | None
    warmup: int
    warmup_s: float
    graph: bool
    compile: bool
    window_ms: float


@dataclasses.dataclass(frozen=True, slots=True)
class BenchRun(Request):
    """One timed window per row of `seeds` (the calls' input seeds), checksummed with `wseeds`."""

    OP: ClassVar[str] = "bench_run"
    seeds: list[list[int]]
    wseeds: list[list[int]]


@dataclasses.dataclass(frozen=True, slots=True)
class Checksums(Request):
    """The reference's side of the timed windows: the same checksums, computed eagerly."""

    OP: ClassVar[str] = "checksums"
    seeds: list[list[int]]
    wseeds: list[list[int]]


@dataclasses.dataclass(frozen=True, slots=True)
class Profile(Request):
    """The kernels and device time of calls under the profiler, each output checksummed. Eager calls
    on fresh inputs, one per seed; or, with `timed_window`, the timed window's CUDA graph replayed on
    its inputs refilled from `seeds` (one per call of the window): the very work that was timed."""

    OP: ClassVar[str] = "profile"
    seeds: list[int]
    wseeds: list[int]
    timed_window: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Peak(Request):
    OP: ClassVar[str] = "peak"


# The sealed span (stages/sealed.py): the reference makes memory both sandboxes map, fills each call's
# inputs into it and takes the outputs back; the candidate only computes on it in between.
@dataclasses.dataclass(frozen=True, slots=True)
class PaperTime(Request):
    """The authors' timing (`--protocol paper`): `warmup` untimed calls, then `calls` calls each timed
    alone (CUDA events around the call, then a sync; the host clock on the CPU), all on the one set of
    inputs that `seed` gives. Never the verdict's time: stages/paper.py."""

    OP: ClassVar[str] = "paper_time"
    seed: int
    warmup: int
    calls: int


@dataclasses.dataclass(frozen=True, slots=True)
class SealedEntry(Wire):
    """One tensor of the shared region (sharedmem.Entry on the wire)."""

    kind: str
    call: int
    index: int
    offset: int
    shape: list[int]
    dtype: str


@dataclasses.dataclass(frozen=True, slots=True)
class SealedPrepare(Request):
    """Reference: make a region for `calls` calls (inputs of `seed`'s structure, the outputs they
    give), send its descriptor on the side socket, and time copying one call's outputs into it."""

    OP: ClassVar[str] = "sealed_prepare"
    calls: int
    seed: int


@dataclasses.dataclass(frozen=True, slots=True)
class SealedMap(Request):
    """Candidate: map the region whose descriptor is on the side socket, and build the span's work:
    each call's forward on its inputs there, its outputs copied there (one CUDA graph where it can)."""

    OP: ClassVar[str] = "sealed_map"
    entries: list[SealedEntry]
    size: int
    seed: int


@dataclasses.dataclass(frozen=True, slots=True)
class SealedStage(Request):
    """Reference: build the inputs of `seeds` (one per call) in its own memory, for the next fill. Run
    outside the device's timing lock: none of it is timed."""

    OP: ClassVar[str] = "sealed_stage"
    seeds: list[int]


@dataclasses.dataclass(frozen=True, slots=True)
class SealedFill(Request):
    """Reference: overwrite the region's outputs, copy the staged inputs into it, and read the clock
    once they are there. With `null` (a null span's start), the same device work with no input of the
    coming span in the candidate's reach (the last span's moved among the slots, or the staged ones
    into the reference's scratch); with `bare` as well, only read the clock."""

    OP: ClassVar[str] = "sealed_fill"
    null: bool
    bare: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class SealedRun(Request):
    """Candidate: run the span's work once, to the end of its device work."""

    OP: ClassVar[str] = "sealed_run"


@dataclasses.dataclass(frozen=True, slots=True)
class SealedTake(Request):
    """Reference: read the clock, then copy the region's outputs out at once, to the end of that device
    work; with `keep`, keep them for the next check (a null span's end keeps nothing). With `bare`,
    only read the clock."""

    OP: ClassVar[str] = "sealed_take"
    keep: bool
    bare: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class SealedCheck(Request):
    """Reference: compare the outputs the last take kept, of the span's calls `calls` (indices, drawn
    by the judge after the take), with its own outputs of the same staged inputs. Outside the timing
    lock, like the stage."""

    OP: ClassVar[str] = "sealed_check"
    calls: list[int]


@dataclasses.dataclass(frozen=True, slots=True)
class SealedDrop(Request):
    """Reference: let go of the span (its region, staged inputs and taken outputs) and give the memory
    its allocator cached for them back to the device: the span's share of the card ends with its
    stage (sandbox/devicelock.card_memory)."""

    OP: ClassVar[str] = "sealed_drop"


# -- replies --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class WireError(Wire):
    kind: str
    message: str
    traceback: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorReply(Wire):
    """An op that failed: the sandbox's report of why."""

    ok: bool
    error: WireError
    op_s: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Reply(Wire):
    """Fields every successful reply carries: `tampered`, the watched functions found replaced;
    `threads`, the submission's threads still alive (None: not counted by this op); `op_s`, the
    op's time in the sandbox."""

    ok: bool = True
    tampered: list[str] = dataclasses.field(default_factory=list)
    threads: int | None = None
    op_s: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Hello(Reply):
    """The sandbox's first message, once it is ready."""

    device_name: str
    torch: str
    triton: str
    startup_s: dict[str, float]
    device_id: str = ""  # the card as NVML names it (sandbox/cardmem.py); "" on the CPU
    device_total: int = 0  # its memory in bytes


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LoadReply(Reply):
    cached: bool
    flops: float | None  # the reference's FLOPS per call, where the problem states one


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OutputItem(Wire):
    """One call of a Run: where its outputs are, what they are, and what the call did."""

    file: str
    structure: Any  # the output's nesting, compared by the judge with the reference's
    subclass: list[str]
    dtypes: list[str]
    shapes: list[list[int]]
    launches: list[str]
    forward_s: float
    aliases_input: bool
    aliases_param: bool
    aliases_previous: bool
    mutated_input: bool
    threads: int

    def __post_init__(self) -> None:
        if not _FILE_NAME.fullmatch(self.file):  # a bare name in the sandbox's own folder, nothing else
            raise ProtocolError(
                f"OutputItem.file: {self.file[:200]!r} is not a file name of the sandbox's folder"
            )
        if not _is_structure(self.structure, 0):
            raise ProtocolError("OutputItem.structure: not an output structure (harness.flatten_outputs)")


def _is_structure(node: Any, depth: int) -> bool:
    """harness.flatten_outputs' form: {"t": index} | {"seq": [node, ...]} | {"v": scalar} | {"bad": name}."""
    if depth > 64 or not isinstance(node, dict) or len(node) != 1:
        return False
    ((key, value),) = node.items()
    if key == "t":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if key == "seq":
        return isinstance(value, list) and all(_is_structure(x, depth + 1) for x in value)
    if key == "v":
        return value is None or isinstance(value, (bool, int, float, str))
    return key == "bad" and isinstance(value, str)


_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RunReply(Reply):
    items: list[OutputItem]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModesReply(Reply):
    modes: dict[str, int]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BenchPrepareReply(Reply):
    est_ms: float
    warmup_calls: int
    calls: int
    input_bytes: int
    launch_ms: float | None  # the host's time to submit one graph replay; None: eager
    graph: bool
    graph_error: str | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BenchRunReply(Reply):
    window_ms: list[float]
    host_ms: list[float]
    launches: list[int]
    graph: bool
    # per window, per call: checksum rows (stages/timing.checksum_issue reads them)
    checksums: list[list[Any]]

    def __post_init__(self) -> None:
        n = len(self.window_ms)
        if n == 0 or len(self.host_ms) != n or len(self.launches) != n or len(self.checksums) != n:
            raise ProtocolError(
                "BenchRunReply: one time, host time, launch count and checksum row per window"
            )
        if not all(math.isfinite(t) and t >= 0.0 for t in self.window_ms):
            raise ProtocolError("BenchRunReply: a window time that is negative or not finite")
        if not all(math.isfinite(t) for t in self.host_ms):  # host less spin: may dip a hair below 0
            raise ProtocolError("BenchRunReply: a host time that is not finite")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ChecksumsReply(Reply):
    checksums: list[list[Any]]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProfileReply(Reply):
    kernels: dict[str, list[float]]  # name -> [device us, calls]
    launches: list[str]
    checksums: list[Any]

    def __post_init__(self) -> None:
        if not all(
            len(v) == 2 and all(math.isfinite(x) and x >= 0 for x in v) for v in self.kernels.values()
        ):
            raise ProtocolError("ProfileReply: kernels must map a name to [device us, calls]")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PeakReply(Reply):
    bandwidth_gbs: float | None
    tflops_fp32: float | None
    tflops_bf16: float | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PaperTimeReply(Reply):
    times_ms: list[float]  # one per timed call

    def __post_init__(self) -> None:
        if not self.times_ms or not all(math.isfinite(t) and t >= 0.0 for t in self.times_ms):
            raise ProtocolError("PaperTimeReply: no times, or one that is negative or not finite")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SealedPrepareReply(Reply):
    """`entries` None where the inputs cannot be laid out (`why`); `copy_ms`: copying every call's
    outputs into the region, timed by the reference."""

    entries: list[SealedEntry] | None
    size: int
    copy_ms: float
    why: str | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SealedMapReply(Reply):
    graph: bool


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SealedStageReply(Reply):
    stage_ms: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SealedFillReply(Reply):
    """`filled_at`: the reference's monotonic clock (s) once the inputs were in the region; `fill_ms`:
    the time of copying them there (0 for a bare fill)."""

    filled_at: float
    fill_ms: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SealedRunReply(Reply):
    """`own_ms`: the sandbox's own time of its span, for the record (never part of the bound)."""

    own_ms: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SealedTakeReply(Reply):
    """`taken_at`: the reference's monotonic clock (s) when the op began, before the copy out;
    `take_ms`: from then to the end of the copy out (0 for a bare take)."""

    taken_at: float
    take_ms: float


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SealedCheckReply(Reply):
    """Per checked call (in the request's order), per output: [||taken - reference's||, ||reference's||]
    (the first -1 where their NaN and Inf entries differ); `dtypes`: each output's dtype."""

    diffs: list[list[list[float]]]
    dtypes: list[str]


REPLIES: dict[str, type[Reply]] = {"load": LoadReply, "run": RunReply, "modes": ModesReply,
                                   "bench_prepare": BenchPrepareReply, "bench_run": BenchRunReply,
                                   "checksums": ChecksumsReply, "profile": ProfileReply, "peak": PeakReply,
                                   "sealed_prepare": SealedPrepareReply, "sealed_map": SealedMapReply,
                                   "sealed_fill": SealedFillReply, "sealed_run": SealedRunReply,
                                   "sealed_take": SealedTakeReply, "sealed_stage": SealedStageReply,
                                   "sealed_check": SealedCheckReply, "sealed_drop": Reply,
                                   "paper_time": PaperTimeReply}
REQUESTS: dict[str, type[Request]] = {c.OP: c for c in (Load, Run, Modes, BenchPrepare, BenchRun, Checksums,
                                                        Profile, Peak, SealedPrepare, SealedMap, SealedFill,
                                                        SealedRun, SealedTake, SealedStage, SealedCheck,
                                                        SealedDrop, PaperTime)}


def parse_reply(request: Request, data: dict[str, Any]) -> Reply | ErrorReply:
    """The reply to `request`, typed; ProtocolError if it is not one."""
    data = {k: v for k, v in data.items() if k != "seq"}
    if data.get("ok") is False:
        return ErrorReply.from_wire(data)
    if data.get("ok") is not True:
        raise ProtocolError("a reply with neither ok true nor ok false")
    return REPLIES[request.OP].from_wire(data)

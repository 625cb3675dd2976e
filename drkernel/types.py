"""Shared nouns of the data flow: problems, evaluation requests and results.

No logic lives here beyond (de)serialisation. Every stage imports these types; this module imports
nothing from the rest of the package except the error tree.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from drkernel.errors import ConfigError

__all__ = [
    "DeviceInfo",
    "ErrorInfo",
    "EvalOptions",
    "EvalOutcome",
    "EvalRequest",
    "EvalResult",
    "EvalStatus",
    "KernelTime",
    "MAX_SEED",
    "MAX_SOURCE_BYTES",
    "MAX_TIMEOUT_S",
    "PaperTiming",
    "Problem",
    "REWARD_PRESET_NAMES",
    "SpeedOfLight",
    "TimingStats",
    "TrialReport",
]


# The largest reference or kernel source the judge takes, and the server's request-body limit: one limit.
MAX_SOURCE_BYTES = 32 * 1024 * 1024
MAX_TIMEOUT_S = 86400.0  # an evaluation's wall-clock limit: at most a day
MAX_SEED = 2**63 - 1  # the largest trial seed: past it, the sandbox's generators refuse it


class EvalStatus(StrEnum):
    """Coarse status of the result contract: did the judge reach a verdict?"""

    COMPLETED = "completed"  # a verdict was reached (correct, incorrect or hacked)
    FAILED = "failed"  # the candidate could not be judged (does not compile, crashes, ...)
    TIMEOUT = "timeout"  # the evaluation ran past its wall-clock budget

    def is_error(self) -> bool:
        return self is not EvalStatus.COMPLETED


class EvalOutcome(StrEnum):
    """Fine-grained verdict. `docs/errors.md` is the table of these."""

    OK = "ok"  # correct, no hack detected
    INCORRECT = "incorrect"  # ran, but outputs do not match the reference
    HACK_DETECTED = "hack_detected"  # a hack check fired; always incorrect, reward 0
    COMPILE_ERROR = "compile_error"  # syntax error, import error, no ModelNew, Triton compile error
    RUNTIME_ERROR = "runtime_error"  # exception in __init__/forward, crash, CUDA fault, memory limit
    TIMEOUT = "timeout"
    INFRA_ERROR = "infra_error"  # the judge or the reference failed: not the candidate's fault

    @property
    def status(self) -> EvalStatus:
        if self in (EvalOutcome.OK, EvalOutcome.INCORRECT, EvalOutcome.HACK_DETECTED):
            return EvalStatus.COMPLETED
        if self is EvalOutcome.TIMEOUT:
            return EvalStatus.TIMEOUT
        return EvalStatus.FAILED


@dataclass(frozen=True, slots=True)
class Problem:
    """A KernelBench-format reference: source defining Model, get_inputs, get_init_inputs."""

    name: str
    reference_code: str
    entry_point: str = "Model"
    level: int | None = None
    # Alternative input-shape variants, each a Python snippet that redefines module-level sizes
    # (e.g. "batch_size = 7") before get_inputs() is called. Used for held-out-shape checks.
    shape_variants: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def code_hash(self) -> str:
        return hashlib.sha256(self.reference_code.encode()).hexdigest()[:16]


# the turn reward's presets, by name: the one list of them (drkernel.reward.REWARD_PRESETS holds what
# each one is, under these names in this order; tests/reward/test_reward_owner.py holds them to it)
REWARD_PRESET_NAMES = ("paper", "released", "eval", "correctness_speedup")


def _real(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


LEGACY_OPTION_KEYS = ("device",)  # accepted in EvalOptions.from_dict and ignored

# an EvalOptions field's annotation -> (its words, the test of a value); "X | None" also takes None
_OPTION_TYPES: dict[str, tuple[str, Any]] = {
    "int": ("an integer", lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool)),
    "float": ("a number", lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("text", lambda v: isinstance(v, str)),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalOptions:
    """Knobs of one evaluation. Defaults are ours; `paper()` gives the paper's preset. The device is
    not one of them: it is the judge's (`Judge(device=...)`, a worker's GPU), never the request's."""

    num_correct_trials: int = 5  # docs/paper_spec.md §3.2
    num_perf_trials: int | None = None  # None: 100 on GPU, 3 under the interpreter
    num_warmup: int = 3  # docs/paper_spec.md §3.2
    num_profile_calls: int = 5
    num_verified_timed_calls: int = 3  # unused since every timed output is checksummed; kept for old clients
    # GPU: keep the device busy this many µs before each timed call, so that the host's launch
    # overhead (up to this much) overlaps it instead of being timed. 0: off (the anchor's way).
    launch_preroll_us: float = 0.0
    timeout_s: float = 180.0
    atol: float | None = None  # None: per-dtype defaults (sandbox/comparison.py)
    rtol: float | None = None
    check_relative_error: bool = True  # global ||out-ref||/||ref|| bound per dtype
    reference_backend: str = "eager"  # "eager" | "compile"
    profile: bool = True
    static_policy: bool = True  # AST gate on imports, introspection, monkeypatching
    # bound the candidate's reported time from the judge's side (sandbox/stages/sealed.py)
    sealed_span: bool = True
    # also time both the authors' way (`--protocol paper`): num_warmup calls, then 10 calls each timed
    # alone on one set of inputs; EvalResult.paper_timing (sandbox/stages/paper.py). Never the verdict's.
    paper_timing: bool = False
    seed: int | None = None  # None: fresh random trial seeds per evaluation
    memory_limit_mb: int = 8192  # host memory (RSS) per sandbox
    gpu_memory_fraction: float = 0.9
    # the turn reward (drkernel.reward.reward_config): a REWARD_PRESETS name ("paper" | "released" |
    # "eval" | "correctness_speedup"), its speedup cap, and a factor on its coverage weight
    reward_preset: str = "paper"
    speedup_cap: float = 3.0  # docs/paper_spec.md §4.1
    coverage_weight: float = 1.0
    entry_point: str = "Model"

    def __post_init__(self) -> None:
        # each field of its type: "5" trials, profile "no" or seed 1.5 were taken here and failed in
        # the judge's checks as a TypeError (or read as truthy, or reached the sandbox's generators)
        for f in dataclasses.fields(self):
            kind, _, optional = str(f.type).partition(" | ")
            value = getattr(self, f.name)
            words, test = _OPTION_TYPES[kind]
            if not (test(value) or (optional == "None" and value is None)):
                raise ConfigError(f"{f.name}: {value!r} is not {words}" + (" or null" if optional else ""))
        # the reward fields are refused here, before any judge sees them (drkernel.reward turns them
        # into a RewardConfig and relies on this check)
        if not isinstance(self.reward_preset, str) or self.reward_preset not in REWARD_PRESET_NAMES:
            raise ConfigError(
                f"reward_preset: {self.reward_preset!r} is not one of {', '.join(REWARD_PRESET_NAMES)}"
            )
        cap, weight = self.speedup_cap, self.coverage_weight
        if not _real(cap) or not cap > 0:
            raise ConfigError(f"speedup_cap: {cap!r} is not a number > 0")
        if not _real(weight) or not math.isfinite(weight):
            raise ConfigError(f"coverage_weight: {weight!r} is not a finite number")

    @classmethod
    def paper(cls, **overrides: Any) -> EvalOptions:
        """The paper's settings: 5 trials, atol=rtol=1e-2 for every dtype, its reward."""
        base = dict(
            num_correct_trials=5,
            atol=1e-2,
            rtol=1e-2,
            check_relative_error=False,
            reward_preset="paper",
            speedup_cap=3.0,
        )
        base.update(overrides)
        return cls(**base)  # type: ignore[arg-type]

    def replace(self, **changes: Any) -> EvalOptions:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalOptions:
        names = {f.name for f in dataclasses.fields(cls)}
        # "device" was a per-request option once; old clients still send it, and the judge that
        # runs the request decides the device, as it always did
        data = {k: v for k, v in data.items() if k not in LEGACY_OPTION_KEYS}
        unknown = set(data) - names
        if unknown:
            from drkernel.errors import ConfigError

            raise ConfigError(f"unknown evaluation option(s): {', '.join(sorted(unknown))}")
        return cls(**data)


@dataclass(frozen=True, slots=True, kw_only=True)
class EvalRequest:
    """One candidate against one reference."""

    reference_code: str
    kernel_code: str
    options: EvalOptions = field(default_factory=EvalOptions)
    task_id: str | None = None
    problem_name: str | None = None
    shape_variants: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # An editor's byte-order mark before the first line: Python runs such a file, but compile() refuses
        # it in a string ("invalid non-printable character U+FEFF"), so a source read with "utf-8" and sent
        # through the API was the candidate's compile_error (the CLI already read files with "utf-8-sig").
        for name in ("reference_code", "kernel_code"):
            value = getattr(self, name)
            if isinstance(value, str) and value.startswith("\ufeff"):
                object.__setattr__(self, name, value[1:])

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference_code": self.reference_code,
            "kernel_code": self.kernel_code,
            "options": self.options.to_dict(),
            "task_id": self.task_id,
            "problem_name": self.problem_name,
            "shape_variants": list(self.shape_variants),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalRequest:
        return cls(
            reference_code=data["reference_code"],
            kernel_code=data["kernel_code"],
            options=EvalOptions.from_dict(data.get("options") or {}),
            task_id=data.get("task_id"),
            problem_name=data.get("problem_name"),
            shape_variants=tuple(data.get("shape_variants") or ()),
        )


@dataclass(slots=True)
class ErrorInfo:
    kind: str  # short machine code, e.g. "syntax_error", "forward_error", "crash", "memory_limit"
    message: str
    traceback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "traceback": self.traceback}


@dataclass(slots=True)
class DeviceInfo:
    kind: str  # "cuda" | "cpu"
    name: str  # e.g. "NVIDIA H200" or "cpu"
    interpreter: bool  # True: Triton interpreter, timings are interpreter timings
    torch_version: str = ""
    triton_version: str = ""
    # measured once per device by the judge (a device-to-device copy, fp32 and bf16 matmuls); GPU only
    peak_bandwidth_gbs: float | None = None
    peak_tflops_fp32: float | None = None
    peak_tflops_bf16: float | None = None
    # where it ran, filled in by the worker pool: host name, Ray node id ("" when local), worker
    # id and the device the worker was given ("cuda:0", "cpu")
    host: str = ""
    node_id: str = ""
    worker_id: str = ""
    device_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class TimingStats:
    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    n: int
    host_median_ms: float | None = None  # in-sandbox host clock, with device-wide sync
    external_ms_per_call: float | None = None  # judge-side clock over the timed op, per timed call
    window_calls: int | None = None  # calls per timed window, each on its own fresh inputs
    windows: int | None = None  # timed windows; n = window_calls x windows calls in all
    graph: bool | None = None  # windows replayed as one CUDA graph (device time only)
    overhead_ms: float | None = None  # judge's clock less the windows: input fills, checksums, IPC
    input_bytes: int | None = None  # of one call's inputs (the reference's count)
    graph_submit_ms: float | None = None  # host time to submit one window's graph (hidden by a GPU spin)
    # runs of the timed op (at most 3): until the clock checks passed on an op that was not disturbed
    confirm_runs: int | None = None
    # the lower quartile of the windows' per-call times: kernel_ms / reference_ms (docs/errors.md, "What
    # the speedup measures"); None in a cache entry written before it existed
    low_quartile_ms: float | None = None
    # of the runs that passed the clock checks, those set aside as disturbed (their windows' median far
    # above their fastest: other work on the GPU); the run kept is the steadiest
    disturbed_runs: int | None = None
    # a reference's entry: when it was timed (UTC, ISO 8601), and whether no candidate process was alive
    # on the host meanwhile (the judge waits for that: sandbox/devicelock.no_candidates)
    measured_at: str | None = None
    measured_alone: bool | None = None
    # a candidate's: the sealed span's lower bound on its time per call, on inputs the judge's side
    # filled and outputs it took out (sandbox/stages/sealed.py), over `sealed_calls` calls a span;
    # `sealed_skipped`: why no span ran (tensors nested in the inputs, outputs that are not tensors)
    sealed_ms_per_call: float | None = None
    sealed_calls: int | None = None
    sealed_skipped: str | None = None
    # its parts (ms): the smallest gap and the smallest charged gap, the median bare null (also as
    # null_ms), the fill and take and the work null's (null_fill_ms, null_take_ms), the reference's
    # output copies, and the sandbox's own word on its span (own_ms: for the record, never in the bound)
    sealed_parts: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class SpeedOfLight:
    """How close a time is to what the device allows: the fewest bytes a call must move (its inputs
    read once, its outputs written once) over the measured peak bandwidth; FLOPs where the problem
    states them (a module-level FLOPS). Fractions are of the device's measured peaks."""

    min_bytes: int
    kernel_gbs: float | None = None
    reference_gbs: float | None = None
    kernel_bandwidth_fraction: float | None = None
    reference_bandwidth_fraction: float | None = None
    flops: float | None = None
    kernel_tflops: float | None = None
    reference_tflops: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class PaperTiming:
    """The authors' timing of one evaluation (EvalOptions.paper_timing): warm-up calls, then `calls`
    calls each timed alone, on one set of inputs; each side's mean rounded to 3 significant digits,
    and `speedup` = reference_ms / kernel_ms of those rounded means, exactly. The reference's is
    measured with no candidate process alive (cached per problem) unless `reference_measured_alone`
    is False. The verdict's own times stay kernel_ms / reference_ms."""

    kernel_ms: float
    reference_ms: float
    speedup: float | None
    warmup: int
    calls: int
    kernel_times_ms: list[float] = field(default_factory=list)
    reference_times_ms: list[float] = field(default_factory=list)
    reference_measured_alone: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class KernelTime:
    name: str
    device_us: float
    calls: int
    own: bool  # launched by the submission's own Triton kernels

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class TrialReport:
    seed: int
    passed: bool
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    rel_l2: float | None = None
    issue: str | None = None
    mean_abs_diff: float | None = None  # over every element of every output (the authors' avg_difference)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(slots=True)
class EvalResult:
    """The verdict on one candidate. `to_dict()` is the JSON result contract."""

    outcome: EvalOutcome
    compiled: bool = False
    correct: bool = False
    hacks: list[str] = field(default_factory=list)
    speedup: float | None = None
    reference_ms: float | None = None
    kernel_ms: float | None = None
    coverage: float | None = None
    reward: float = 0.0
    error: ErrorInfo | None = None
    device: DeviceInfo | None = None
    # details
    hack_details: dict[str, str] = field(default_factory=dict)
    trials: list[TrialReport] = field(default_factory=list)
    kernel_timing: TimingStats | None = None
    reference_timing: TimingStats | None = None
    kernels: list[KernelTime] = field(default_factory=list)  # top kernels by device time
    launched_kernels: list[str] = field(default_factory=list)
    shape_variants_passed: int | None = None
    shape_variants_total: int | None = None  # held-out shapes checked (the reference ran on them)
    shape_variant_issues: list[str] = field(default_factory=list)  # why a variant failed or was not counted
    warnings: list[str] = field(default_factory=list)  # about the problem, not the candidate (weak_reference)
    sandbox_output: str = ""  # what the candidate printed (truncated), never on our stdout
    # how the candidate's sandbox was isolated: "namespaces" (its own uid, PID, mount and network
    # namespaces), "uid" (a uid of its own only) or "none" (an --insecure judge; not to be trusted)
    isolation: str | None = None
    wall_s: float | None = None
    stage_s: dict[str, float] = field(default_factory=dict)  # wall seconds per pipeline stage
    # seconds inside a sandbox per op, "<reference|sandbox> <Op>" (the candidate's are its own word):
    # where a stage's time goes, for people and benchmarks; nothing is judged on it
    op_s: dict[str, float] = field(default_factory=dict)
    task_id: str | None = None
    judge_retries: int = 0  # evaluations redone after a fault of the judge's own (fresh device state)
    speed_of_light: SpeedOfLight | None = None  # GPU: achieved bandwidth (and FLOP rate) against the peak
    paper_timing: PaperTiming | None = None  # the authors' timing, where EvalOptions.paper_timing asked

    @property
    def status(self) -> EvalStatus:
        return self.outcome.status

    def add_stage(self, name: str, seconds: float) -> None:
        """Count `seconds` to stage `name` in `stage_s` (a stage run twice sums).

        >>> r = EvalResult(outcome=EvalOutcome.OK); r.add_stage("timing", 0.25); r.add_stage("timing", 0.5)
        >>> r.stage_s
        {'timing': 0.75}
        """
        self.stage_s[name] = round(self.stage_s.get(name, 0.0) + seconds, 4)

    def add_op(self, who: str, op: str, seconds: float) -> None:
        """Count `seconds` of op `op` inside `who`'s sandbox, in `op_s` and in `stage_s[who]`."""
        self.add_stage(who, seconds)
        key = f"{who} {op}"
        self.op_s[key] = round(self.op_s.get(key, 0.0) + seconds, 4)

    @property
    def held_out_passed(self) -> bool | None:
        """Whether every held-out shape checked passed; None when none was checked."""
        if not self.shape_variants_total:
            return None
        return self.shape_variants_passed == self.shape_variants_total

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "outcome": self.outcome.value,
            "compiled": self.compiled,
            "correct": self.correct,
            "hacks": list(self.hacks),
            "speedup": self.speedup,
            "reference_ms": self.reference_ms,
            "kernel_ms": self.kernel_ms,
            "coverage": self.coverage,
            "reward": self.reward,
            "error": self.error.to_dict() if self.error else None,
            "device": self.device.to_dict() if self.device else None,
            "hack_details": dict(self.hack_details),
            "trials": [t.to_dict() for t in self.trials],
            "kernel_timing": self.kernel_timing.to_dict() if self.kernel_timing else None,
            "reference_timing": self.reference_timing.to_dict() if self.reference_timing else None,
            "kernels": [k.to_dict() for k in self.kernels],
            "launched_kernels": list(self.launched_kernels),
            "shape_variants_passed": self.shape_variants_passed,
            "shape_variants_total": self.shape_variants_total,
            "shape_variant_issues": list(self.shape_variant_issues),
            "warnings": list(self.warnings),
            "sandbox_output": self.sandbox_output,
            "isolation": self.isolation,
            "wall_s": self.wall_s,
            "stage_s": dict(self.stage_s),
            "op_s": dict(self.op_s),
            "task_id": self.task_id,
            "judge_retries": self.judge_retries,
            "speed_of_light": self.speed_of_light.to_dict() if self.speed_of_light else None,
            "paper_timing": self.paper_timing.to_dict() if self.paper_timing else None,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EvalResult:
        """Inverse of to_dict; unknown keys (from newer versions) are ignored at every level."""
        err = _known(ErrorInfo, d.get("error"))
        dev = _known(DeviceInfo, d.get("device"))
        kt = _known(TimingStats, d.get("kernel_timing"))
        rt = _known(TimingStats, d.get("reference_timing"))
        return cls(
            outcome=EvalOutcome(d["outcome"]),
            compiled=bool(d.get("compiled", False)),
            correct=bool(d.get("correct", False)),
            hacks=list(d.get("hacks") or []),
            speedup=d.get("speedup"),
            reference_ms=d.get("reference_ms"),
            kernel_ms=d.get("kernel_ms"),
            coverage=d.get("coverage"),
            reward=float(d.get("reward") or 0.0),
            error=ErrorInfo(**err) if err else None,
            device=DeviceInfo(**dev) if dev else None,
            hack_details=dict(d.get("hack_details") or {}),
            trials=[TrialReport(**_known(TrialReport, t)) for t in d.get("trials") or []],
            kernel_timing=TimingStats(**kt) if kt else None,
            reference_timing=TimingStats(**rt) if rt else None,
            kernels=[KernelTime(**_known(KernelTime, k)) for k in d.get("kernels") or []],
            launched_kernels=list(d.get("launched_kernels") or []),
            shape_variants_passed=d.get("shape_variants_passed"),
            shape_variants_total=d.get("shape_variants_total"),
            shape_variant_issues=[str(x) for x in d.get("shape_variant_issues") or []],
            warnings=[str(x) for x in d.get("warnings") or []],
            sandbox_output=d.get("sandbox_output") or "",
            isolation=d.get("isolation"),
            wall_s=d.get("wall_s"),
            stage_s=dict(d.get("stage_s") or {}),
            op_s=dict(d.get("op_s") or {}),
            task_id=d.get("task_id"),
            judge_retries=int(d.get("judge_retries") or 0),
            speed_of_light=SpeedOfLight(**_known(SpeedOfLight, d["speed_of_light"]))
            if isinstance(d.get("speed_of_light"), dict) else None,
            paper_timing=PaperTiming(**_known(PaperTiming, d["paper_timing"]))
            if isinstance(d.get("paper_timing"), dict) else None,
        )

    @classmethod
    def failure(cls, outcome: EvalOutcome, kind: str, message: str, **kw: Any) -> EvalResult:
        return cls(outcome=outcome, error=ErrorInfo(kind=kind, message=message), **kw)


def _known(cls: type, data: Any) -> Any:
    """The subset of `data` that `cls` has fields for (None stays None)."""
    if not isinstance(data, dict):
        return data
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}

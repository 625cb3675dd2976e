"""The suite survey: list[Problem] x judge -> one JSON file of record, a row per problem, in pieces.

Per problem: the reference's facts at full size (probe process: outputs, seed variation, bytes,
FLOPs, determinism), the judge's own reference times (eager and torch.compile), a speed-of-light
floor against the device's measured peaks, and the null candidates through the real judge. The file
is rewritten atomically after every row; a call stops before its time budget, `resume` goes on.

Several surveys (shards) may share one GPU (`per_gpu`): the judges' timing windows take turns on it
host-wide (sandbox/devicelock.py), the probe holds it shared, and a problem whose step fails in a way
the others may have caused (device memory, a time limit spent waiting for their timing) is deferred:
its row says so, and a run alone (`deferred_only`) does it again.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from drkernel.device import card_memory_bytes
from drkernel.errors import ConfigError
from drkernel.files import held_lock, write_text_atomically
from drkernel.problems.audit import AuditConfig
from drkernel.problems.nulls import constant_candidate, identity_candidate, shrink_sizes, wrapper_candidate
from drkernel.problems.survey_probe import ProbeWorker
from drkernel.sandbox.devicelock import SPAN_SHARE, card_memory, gpu_work
from drkernel.types import DeviceInfo, EvalOptions, EvalOutcome, EvalRequest, EvalResult, Problem, TimingStats

__all__ = ["FORMAT", "NULLS", "SurveyConfig", "SurveyReport", "load_survey", "parse_shard", "run_survey",
           "speed_of_light_floor"]

log = logging.getLogger(__name__)

FORMAT = "drkernel-survey-v1"
NULLS = ("identity", "zeros", "constant", "replay", "half_input")
SIZES = ("full", "reduced")
MAX_PER_GPU = 8  # 16 cores: each survey's judge keeps sandboxes, spares and a probe process of its own


class _Judge(Protocol):
    cuda: bool
    cache: Any

    def evaluate(self, request: EvalRequest) -> EvalResult: ...

    def device_info(self) -> DeviceInfo: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class SurveyConfig:
    device: str = "cpu"
    size: str = "full"  # "reduced": size constants halved until one call holds max_input_numel elements
    max_input_numel: int = 1 << 20
    nulls: tuple[str, ...] = NULLS
    backends: tuple[str, ...] = ("eager", "compile")  # the judge's reference timings to record
    budget_s: float | None = None  # stop starting work past this many seconds (None: no limit)
    probe_timeout_s: float = 300.0
    eval_timeout_s: float = 240.0
    min_step_s: float = 5.0  # a step with less budget left than this is not started
    # correctness trials of each null (the judge's default 5; not part of the reference timing's key)
    null_trials: int = 5
    peak_gbs: float | None = None  # used where the judge measured no peak (the CPU)
    peak_tflops: float | None = None
    audit: AuditConfig = field(default_factory=AuditConfig)
    per_gpu: int = 1  # surveys sharing this one's GPU, itself among them (1: it has the GPU alone)

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ConfigError(f"survey.size: {self.size!r} is not one of {', '.join(SIZES)}")
        unknown = [n for n in self.nulls if n not in NULLS]
        if unknown:
            raise ConfigError(f"survey.nulls: unknown {', '.join(unknown)} (known: {', '.join(NULLS)})")
        bad = [b for b in self.backends if b not in ("eager", "compile")]
        if bad or "eager" not in self.backends:
            raise ConfigError("survey.backends: eager, optionally with compile")
        if not 2 <= self.null_trials <= 20:  # a replay is caught from its second call on
            raise ConfigError(f"survey.null_trials: {self.null_trials} not in 2..20")
        if not 1 <= self.per_gpu <= MAX_PER_GPU:
            raise ConfigError(f"survey.per_gpu: {self.per_gpu} not in 1..{MAX_PER_GPU}")
        for name in ("budget_s", "probe_timeout_s", "eval_timeout_s", "peak_gbs", "peak_tflops"):
            value = getattr(self, name)  # None: no budget, or no peak given
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(f"survey.{name}: {value} is not a finite number > 0")


@dataclass(slots=True)
class SurveyReport:
    done: list[str] = field(default_factory=list)  # rows written by this call (deferred ones aside)
    skipped: int = 0  # rows already complete in the file
    left: list[str] = field(default_factory=list)  # not reached: the budget ran out
    total: int = 0
    deferred: list[str] = field(default_factory=list)  # rows deferred to a run alone, now or before
    budget_reached: bool = False


def parse_shard(text: str) -> tuple[int, int]:
    """"I/N" (1 <= I <= N) -> (I, N). An argparse `type`."""
    import argparse

    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected I/N, e.g. 1/4") from None
    if not 1 <= i <= n:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 1 <= I <= N")
    return i, n


def speed_of_light_floor(facts: dict[str, Any], peaks: dict[str, float | None]) -> dict[str, Any]:
    """The fewest bytes one call must move (inputs, outputs and parameters, each once) over the
    measured bandwidth, and the counted FLOPs over the matmul peak of the outputs' dtype; the floor
    is the larger. Anything unknown is None.

    >>> speed_of_light_floor({"input_bytes": 4e9, "output_bytes": 0, "param_bytes": 0, "flops": 1e12,
    ...     "outputs": [{"dtype": "float32"}]}, {"bandwidth_gbs": 4000.0, "tflops_fp32": 50.0})["bound"]
    'compute'
    """
    min_bytes = int(facts["input_bytes"]) + int(facts["output_bytes"]) + int(facts["param_bytes"])
    half = any(o["dtype"] in ("bfloat16", "float16") for o in facts.get("outputs", []))
    bw, tflops = peaks.get("bandwidth_gbs"), peaks.get("tflops_bf16" if half else "tflops_fp32")
    flops = facts.get("flops")
    bytes_ms = min_bytes / (bw * 1e6) if bw else None
    flops_ms = flops / (tflops * 1e9) if flops and tflops else None
    known = [t for t in (bytes_ms, flops_ms) if t is not None]
    floor_ms = max(known) if known else None
    bound = None
    if bytes_ms is not None:
        bound = "compute" if flops_ms is not None and flops_ms > bytes_ms else "memory"
    return {"min_bytes": min_bytes, "flops": flops, "bandwidth_gbs": bw, "tflops": tflops,
            "bytes_ms": bytes_ms, "flops_ms": flops_ms, "floor_ms": floor_ms, "bound": bound}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def load_survey(path: str | Path) -> dict[str, Any]:
    """A survey file, checked for its format (ConfigError when it is not one)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not JSON: {exc.msg} at line {exc.lineno}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not JSON: not UTF-8 text (byte {exc.start})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("rows"), list):
        raise ConfigError(f"{p}: not a survey file ({FORMAT})")
    _check_types(p, "", data, {"device": (dict, None), "peaks": (dict,), "config": (dict,),
                               "size": (str, None), "suite": (str, None)})
    _check_types(p, "device.", data.get("device") or {}, {"name": (str, None), "kind": (str, None)})
    _check_numbers(p, "peaks.", data.get("peaks") or {})
    first: dict[str, int] = {}
    for i, row in enumerate(data["rows"], 1):
        if not (isinstance(row, dict) and isinstance(row.get("name"), str)
                and isinstance(row.get("status"), str)):
            raise ConfigError(f"{p}: row {i} is not a survey row (an object with a name and a status)")
        if row["name"] in first:
            raise ConfigError(f"{p}: row {i} repeats the name of row {first[row['name']]} ({row['name']})")
        first[row["name"]] = i
        _check_row(p, f"row {i} ({row['name']}): ", row)
    return data


# what the survey and the table read of a file, by type (None: null allowed); a hand-edited file that
# holds something else is one line naming it, never a traceback further on
_ROW_TYPES: dict[str, tuple[type | None, ...]] = {
    "level": (int, None), "attempts": (int,), "complete": (bool,), "nulls": (dict,), "timing": (dict,),
    "floor": (dict, None), "reference": (dict, None), "findings": (list,), "deferred": (str,)}
_WORDS: dict[type | None, str] = {int: "an integer", bool: "true or false", dict: "an object", list: "a list",
                                  str: "text", None: "null"}


def _check_types(p: Path, where: str, record: dict[str, Any],
                 types: dict[str, tuple[type | None, ...]]) -> None:
    for key, allowed in types.items():
        if key not in record:
            continue
        value = record[key]
        if not any(value is None if t is None else isinstance(value, t) and not (
                t is int and isinstance(value, bool)) for t in allowed):
            words = " or ".join(_WORDS[t] for t in allowed)
            raise ConfigError(f"{p}: {where}{key} is {value!r}, not {words}")


def _check_numbers(p: Path, where: str, record: dict[str, Any], keys: Sequence[str] | None = None) -> None:
    for key in record if keys is None else keys:
        value = record.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{p}: {where}{key} is {value!r}, not a number")


def _check_row(p: Path, where: str, row: dict[str, Any]) -> None:
    _check_types(p, where, row, _ROW_TYPES)
    if not all(isinstance(f, str) for f in row.get("findings") or []):
        raise ConfigError(f"{p}: {where}findings is {row['findings']!r}, not a list of text")
    for name, record in (row.get("nulls") or {}).items():
        if not isinstance(record, dict):
            raise ConfigError(f"{p}: {where}nulls.{name} is {record!r}, not an object")
    _check_numbers(p, f"{where}timing.", row.get("timing") or {},
                   [k for k in row.get("timing") or {} if k.endswith("_ms")])
    floor = row.get("floor") or {}
    _check_numbers(p, f"{where}floor.", floor, [k for k in floor if k != "bound"])
    _check_types(p, f"{where}floor.", floor, {"bound": (str, None)})
    _check_numbers(p, f"{where}reference.", row.get("reference") or {}, ("max_abs", "variation"))


def _write(path: Path, data: dict[str, Any]) -> None:
    data["updated_at"] = _now()
    write_text_atomically(path, json.dumps(data, indent=1) + "\n")


def _open(path: Path, suite: str, cfg: SurveyConfig, resume: bool) -> dict[str, Any]:
    if path.exists() and not resume:
        raise ConfigError(f"{path} exists: pass --resume to continue it, or remove it")
    if path.exists():
        data = load_survey(path)
        if data.get("size") != cfg.size:
            raise ConfigError(f"{path} holds a survey at size {data.get('size')!r}, not {cfg.size!r}")
        kind = "cuda" if cfg.device.startswith("cuda") else "cpu"
        if (data.get("device") or {}).get("kind") not in (None, kind):
            raise ConfigError(f"{path} holds a survey on {data['device'].get('name')}, not on {cfg.device}")
        _check_same_config(path, data.get("config"), _config_record(cfg))
        return data
    return {"format": FORMAT, "suite": suite, "size": cfg.size, "created_at": _now(), "device": None,
            "peaks": {}, "config": _config_record(cfg), "rows": []}


def _check_same_config(path: Path, stored: Any, now: dict[str, Any]) -> None:
    """A resume under other options is refused: its rows would sit under a record that says otherwise,
    and the complete rows would not be redone under them (a key an older file lacks is not compared)."""
    differ = [k for k in now if isinstance(stored, dict) and k in stored and stored[k] != now[k]]
    if differ:
        was = ", ".join(f"{k} {stored[k]}" for k in differ)
        asked = ", ".join(f"{k} {now[k]}" for k in differ)
        raise ConfigError(f"{path} was surveyed with {was}: not with {asked} (resume with the same "
                          "options, or survey into another --out)")


def _check_same_code(path: Path, rows: dict[str, dict[str, Any]], problems: Sequence[Problem]) -> None:
    """A resume whose problems are other code under the file's names (another suite, builtin:gpu on a
    builtin:cpu survey, an edited reference) is refused: its complete rows were skipped as done, each
    the facts and times of the other code (a row that records no code_hash is not compared)."""
    changed = [p.name for p in problems
               if (row := rows.get(p.name)) is not None and row.get("code_hash") not in (None, p.code_hash)]
    if changed:
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise ConfigError(f"{path} holds rows of other code under the names of these problems ({changed[0]}"
                          f"{more}): it is a survey of another suite, or of these references before they "
                          "changed (survey this one into another --out)")


def _config_record(cfg: SurveyConfig) -> dict[str, Any]:
    audit = cfg.audit
    return {"nulls": list(cfg.nulls), "null_trials": cfg.null_trials, "backends": list(cfg.backends),
            "seeds": list(audit.seeds),
            "init_seed": audit.init_seed, "min_variation": audit.min_variation,
            "max_input_numel": cfg.max_input_numel if cfg.size == "reduced" else None}


class _Clock:
    def __init__(self, budget_s: float | None) -> None:
        self.deadline = None if budget_s is None else time.monotonic() + budget_s

    def left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - time.monotonic()


def run_survey(problems: Sequence[Problem], cfg: SurveyConfig, path: str | Path, *, suite: str = "",
               resume: bool = False, make_judge: Callable[[], _Judge],
               on_row: Callable[[dict[str, Any], int, int], None] | None = None,
               deferred_only: bool = False) -> SurveyReport:
    """Survey `problems` into the file at `path` (resumed: complete rows are skipped, incomplete ones
    redone once; rows deferred by a survey that shared its GPU are left to one that has it alone, and
    `deferred_only` does those alone). The judge is made on first need and closed at the end when it
    has a close()."""
    if deferred_only and cfg.per_gpu > 1:  # they were deferred for want of the GPU to themselves
        raise ConfigError(f"--deferred-only redoes deferred problems with the GPU alone: not with --per-gpu "
                          f"{cfg.per_gpu}")
    out = Path(path)
    if out.is_dir():  # "", "." and "/" among them: no file name to write, nor a lock's to make
        raise ConfigError(f"{path or '.'}: is a folder, not a survey file (a .json file)")
    if not out.parent.is_dir():
        raise ConfigError(f"{out.parent}: no such folder")
    # one survey at a time writes a file: two (shards given one --out) would each rewrite it from their
    # own rows, dropping the other's
    lock = out.with_name(f".{out.name}.lock")
    with contextlib.ExitStack() as held:
        try:  # only the lock's opening: an OSError of the survey's own work below is raised as it is
            held.enter_context(held_lock(lock, wait=False,
                                         busy=f"{out}: another drkernel suite survey is writing it (each "
                                              "shard wants an --out of its own)"))
        except OSError as exc:
            why = "a symlink sits there (not followed)" if lock.is_symlink() else exc.strerror or str(exc)
            raise ConfigError(f"{lock}: cannot lock {out}: {why}") from None
        report = _run_survey(problems, cfg, out, suite, resume, make_judge, on_row, deferred_only)
    return report


def _run_survey(problems: Sequence[Problem], cfg: SurveyConfig, out: Path, suite: str, resume: bool,
                make_judge: Callable[[], _Judge], on_row: Callable[[dict[str, Any], int, int], None] | None,
                deferred_only: bool) -> SurveyReport:
    data = _open(out, suite, cfg, resume)
    rows: dict[str, dict[str, Any]] = {r["name"]: r for r in data["rows"]}
    _check_same_code(out, rows, problems)
    if deferred_only:
        todo = [p for p in problems if _deferred(rows.get(p.name))]
    else:  # a shared GPU leaves the deferred ones to a run alone: they would fail the same way
        todo = [p for p in problems if not _settled(rows.get(p.name))
                and not (cfg.per_gpu > 1 and _deferred(rows.get(p.name)))]
    report = SurveyReport(skipped=sum(_settled(rows.get(p.name)) for p in problems), total=len(problems))
    offset = len(problems) - len(todo)  # the progress count's start
    clock, slowest = _Clock(cfg.budget_s), 0.0
    judge: _Judge | None = None
    worker = ProbeWorker()
    try:
        for k, problem in enumerate(todo):
            if clock.left() < max(slowest, cfg.min_step_s):
                report.left = [p.name for p in todo[k:] if not _deferred(rows.get(p.name))]
                report.budget_reached = True
                break
            if judge is None:
                judge = make_judge()
                _check_same_card(out, data, judge)
            started = time.monotonic()
            row = _survey_one(problem, cfg, judge, worker, clock, data, rows.get(problem.name))
            row["wall_s"] = round(time.monotonic() - started, 2)
            slowest = max(slowest, row["wall_s"])
            rows[problem.name] = row
            data["rows"] = sorted(rows.values(), key=lambda r: (r.get("level") or 0, _natural(r["name"])))
            _write(out, data)
            if not _deferred(row):
                report.done.append(problem.name)
            if on_row is not None:
                on_row(row, offset + k + 1, len(problems))
        if not report.done and not out.exists():
            _write(out, data)
        report.deferred = [p.name for p in problems if _deferred(rows.get(p.name))]
    finally:
        worker.close()
        close = getattr(judge, "close", None)
        if close is not None:
            close()
    return report


def _settled(row: dict[str, Any] | None) -> bool:
    return row is not None and (row.get("complete", False) or int(row.get("attempts", 0)) >= 2)


def _deferred(row: dict[str, Any] | None) -> bool:
    return row is not None and row.get("status") == "deferred" and not row.get("complete", False)


class _Deferred(Exception):
    """A step failed in a way the other surveys on the GPU may have caused: the problem waits for a
    run alone (the message says which step, and how it failed)."""


def _natural(name: str) -> tuple[Any, ...]:
    import re

    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


def _survey_one(problem: Problem, cfg: SurveyConfig, judge: _Judge, worker: ProbeWorker, clock: _Clock,
                data: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    attempts = int((before or {}).get("attempts", 0))

    def fresh() -> dict[str, Any]:
        return {"name": problem.name, "level": problem.level, "code_hash": problem.code_hash,
                "size": cfg.size, "size_ratio": 1.0, "status": "ok", "reason": None, "complete": True,
                "attempts": attempts + 1, "skipped_steps": [], "reference": None, "timing": {},
                "floor": None, "nulls": {}, "judge_warnings": [], "findings": []}

    try:
        return _survey_steps(problem, cfg, judge, worker, clock, data, fresh())
    except _Deferred as why:
        # nothing of a shared try is kept: the run alone redoes every step, and this is no attempt
        row = fresh()
        row.update(status="deferred", reason="shared_gpu", complete=False, attempts=attempts,
                   deferred=str(why)[:500])
        return row


def _survey_steps(problem: Problem, cfg: SurveyConfig, judge: _Judge, worker: ProbeWorker, clock: _Clock,
                  data: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    if cfg.size == "reduced":
        try:  # in this process: the reference's get_inputs on the meta device
            problem, row["size_ratio"] = shrink_sizes(problem, cfg.max_input_numel)
        except Exception as exc:  # noqa: BLE001 - user benchmark code: a reason in the row, as in the audit
            return _failed(row, "error", f"resizing: {type(exc).__name__}: {exc}")
    timeout_s = min(cfg.probe_timeout_s, clock.left())
    # the reference at full size on the device, untimed: held shared, so that it never runs inside a
    # timing window of another judge or survey on this GPU (nothing on the CPU). Its peak is not known
    # before it runs (4-14 GiB at once for KernelBench's elementwise, norm and reduction problems at full
    # size): it takes the judges' whole budget of the card's memory, as a sealed span takes its part,
    # so that no span of another shard's judge, nor another probe, shares the card with it (three shards
    # on an H100 80GB deferred 37 problems of 46, nearly all out of memory: run CI). The memory first,
    # then the device, in the sealed stage's order.
    card = card_memory_bytes(cfg.device) or 0
    with card_memory(cfg.device, int(card * SPAN_SHARE), card), gpu_work(cfg.device, "survey_probe"):
        facts = worker.probe(problem, cfg.device, cfg.audit, timeout_s)
    facts["probe_device"] = cfg.device
    budget_cut = facts.get("reason") == "timeout" and timeout_s < cfg.probe_timeout_s
    if cfg.per_gpu > 1 and facts.get("reason") in ("oom", "timeout", "crash") and not budget_cut:
        raise _Deferred(f"probe: {facts['reason']} ({str(facts.get('error') or '')[:300]})")
    if facts.get("reason") == "oom" and cfg.device != "cpu" and clock.left() >= cfg.min_step_s:
        # the probe holds three seeds' inputs and outputs and compares in float64: more than one
        # call needs. Its facts do not depend on the device, so the host's memory may hold them.
        timeout_s = min(cfg.probe_timeout_s, clock.left())
        facts = {**worker.probe(problem, "cpu", cfg.audit, timeout_s), "probe_device": "cpu",
                 "gpu_probe_error": facts.get("error")}
    row["reference"] = facts
    if facts.get("reason") == "timeout" and timeout_s < cfg.probe_timeout_s:  # the budget's doing
        row.update(status="incomplete", complete=False)
        row["skipped_steps"].append("probe (budget)")
        return row
    if not facts.get("ok"):
        return _failed(row, facts.get("reason") or "error", facts.get("error") or "")
    if not facts["deterministic"]:
        row["findings"].append("nondeterministic")
    _judge_steps(problem, cfg, judge, clock, data, row, facts)
    peaks = {k: v for k, v in (data.get("peaks") or {}).items() if v}
    peaks.setdefault("bandwidth_gbs", cfg.peak_gbs)
    peaks.setdefault("tflops_fp32", cfg.peak_tflops)
    peaks.setdefault("tflops_bf16", cfg.peak_tflops)
    floor = speed_of_light_floor(facts, peaks)
    for backend in cfg.backends:
        ms = row["timing"].get(f"{backend}_ms")
        floor[f"headroom_{backend}"] = ms / floor["floor_ms"] if ms and floor["floor_ms"] else None
    row["floor"] = floor
    if "low_variation" in facts["audit_flags"] or "weak_reference" in row["judge_warnings"]:
        row["findings"].append("weak_reference")
    if row["skipped_steps"]:
        row["status"], row["complete"] = "incomplete", False
    return row


def _failed(row: dict[str, Any], reason: str, error: str) -> dict[str, Any]:
    row.update(status="error", reason=reason, error=error[:500])
    row["findings"].append(f"reference_{reason}")
    return row


def _options(cfg: SurveyConfig, clock: _Clock, backend: str = "eager") -> EvalOptions:
    # the judge's defaults (what its reference-timing cache is keyed by), without profiling
    return EvalOptions(profile=False, reference_backend=backend, num_correct_trials=cfg.null_trials,
                       timeout_s=max(1.0, min(cfg.eval_timeout_s, clock.left())))


def _null_sources(problem: Problem, cfg: SurveyConfig, facts: dict[str, Any]) -> dict[str, str | None]:
    """Each null's ModelNew source; None where the null does not apply to this problem."""
    shape = tuple(facts["outputs"][0]["shape"]) if facts["outputs"] else ()
    single = bool(facts["single_float32"])
    sources: dict[str, str | None] = {}
    for name in cfg.nulls:
        if name == "zeros":
            sources[name] = constant_candidate(shape, 0.0) if single else None
        elif name == "constant":
            sources[name] = constant_candidate(shape, facts["output_mean"]) if single else None
        elif name == "identity":
            index = facts["identity_input"]
            sources[name] = identity_candidate(shape, index) if index is not None else None
        else:
            sources[name] = wrapper_candidate(problem.reference_code, name, problem.entry_point)
    return sources


def _judge_steps(problem: Problem, cfg: SurveyConfig, judge: _Judge, clock: _Clock, data: dict[str, Any],
                 row: dict[str, Any], facts: dict[str, Any]) -> None:
    """The nulls through the judge (the first one also has the judge time the reference), then the
    compile timing with a candidate that fails at once, then the times read from the judge's cache."""
    last: dict[str, EvalResult] = {}  # backend -> the last evaluation that timed its reference
    _run_nulls(problem, cfg, judge, clock, row, facts, last)
    for backend in cfg.backends:
        if backend in last:
            continue
        if clock.left() < cfg.min_step_s:
            row["skipped_steps"].append(f"timing:{backend}")
            continue
        opts = _options(cfg, clock, backend)
        result = _evaluate(judge, problem, constant_candidate((1,), 0.0), opts,
                           f"survey:{problem.name}:timing:{backend}")
        if _cut_short(result, opts, cfg):
            row["skipped_steps"].append(f"timing:{backend} (budget)")
            continue
        _defer_if_shared(cfg, f"timing:{backend}", result)
        last[backend] = result
    _record_device(judge, data)
    for backend in cfg.backends:
        stats = _judge_reference_stats(judge, problem.reference_code, _options(cfg, clock, backend))
        row["timing"][f"{backend}_ms"] = _per_call_ms(stats)
        if stats is not None:
            row["timing"][backend] = {k: v for k, v in stats.to_dict().items() if v is not None}
        elif backend in last:  # the judge did not time it: say what its evaluation ended in
            result = last[backend]
            detail = f"{result.error.kind}: {result.error.message[:300]}" if result.error else ""
            row["timing"][f"{backend}_error"] = f"{result.outcome.value}" + (f" ({detail})" if detail else "")
            if f"judge_reference_{backend}" not in row["findings"]:
                row["findings"].append(f"judge_reference_{backend}")


def _run_nulls(problem: Problem, cfg: SurveyConfig, judge: _Judge, clock: _Clock, row: dict[str, Any],
               facts: dict[str, Any], last: dict[str, EvalResult]) -> None:
    """Each null candidate through the judge; one that passes is a finding, of the judge where the
    reference varies, of the problem where it does not."""
    varies = (facts["variation"] or 0.0) >= cfg.audit.min_variation
    for name, source in _null_sources(problem, cfg, facts).items():
        if source is None:
            row["nulls"][name] = {"outcome": "n/a", "correct": False, "detail": "no such candidate here"}
            continue
        if clock.left() < cfg.min_step_s:
            row["skipped_steps"].append(f"null:{name}")
            continue
        opts = _options(cfg, clock)
        result = _evaluate(judge, problem, source, opts, f"survey:{problem.name}:{name}")
        if _cut_short(result, opts, cfg):
            row["skipped_steps"].append(f"null:{name} (budget)")
            continue
        _defer_if_shared(cfg, f"null:{name}", result)
        last["eager"] = result
        row["nulls"][name] = _null_record(result)
        row["judge_warnings"] = sorted(set(row["judge_warnings"]) | set(result.warnings))
        if result.correct:
            row["findings"].append(f"{name}_passes" + ("_varying_reference" if varies else "_weak_reference"))
        elif result.status.is_error():  # it did not run to a verdict: no evidence either way
            row["findings"].append(f"{name}_did_not_run")


def _cut_short(result: EvalResult, opts: EvalOptions, cfg: SurveyConfig) -> bool:
    """A timeout under a time limit that the budget, not the survey's setting, made short."""
    return result.outcome is EvalOutcome.TIMEOUT and opts.timeout_s < cfg.eval_timeout_s


def _defer_if_shared(cfg: SurveyConfig, step: str, result: EvalResult) -> None:
    """On a shared GPU, a failure the other surveys may have caused is no finding: an infra_error (the
    judge's side failed: its reference out of device memory, L1/4 on the H200), a timeout (the time
    limit runs while the judge waits for their timing windows), a candidate's sandbox out of memory
    (L1/5) or a resource the judge shares run out. The problem is deferred (`_Deferred`)."""
    from drkernel.sandbox.channel import resource_shaped

    error = result.error
    if cfg.per_gpu == 1 or not result.status.is_error():  # a verdict is a verdict
        return
    resource = error is not None and (error.kind == "resource_exhaustion" or resource_shaped(error.message))
    if not (resource or result.outcome in (EvalOutcome.TIMEOUT, EvalOutcome.INFRA_ERROR)):
        return
    detail = f" ({error.kind}: {error.message[:300]})" if error is not None else ""
    raise _Deferred(f"{step}: {result.outcome.value}{detail}")


def _evaluate(judge: _Judge, problem: Problem, source: str, opts: EvalOptions, task_id: str) -> EvalResult:
    request = EvalRequest(reference_code=problem.reference_code, kernel_code=source, options=opts,
                          problem_name=problem.name, task_id=task_id)
    return judge.evaluate(request)


def _null_record(result: EvalResult) -> dict[str, Any]:
    record: dict[str, Any] = {"outcome": result.outcome.value, "correct": result.correct,
                              "hacks": list(result.hacks), "wall_s": result.wall_s,
                              "stage_s": {k: v for k, v in result.stage_s.items() if v >= 1.0}}
    if result.error is not None:
        record["detail"] = f"{result.error.kind}: {result.error.message[:200]}"
    issues = [t.issue for t in result.trials if t.issue]
    if issues:
        record["detail"] = issues[0][:200]
    return record


def _check_same_card(path: Path, data: dict[str, Any], judge: _Judge) -> None:
    """A file surveyed on one card, resumed on another, is refused: its rows' times and floors are its
    card's, and the resume would have put the other card's name and peaks over them (an H200's file of
    record resumed on an H100 did, session 32)."""
    was = (data.get("device") or {}).get("name")
    now = judge.device_info().name
    if was and was != now:
        raise ConfigError(f"{path} holds a survey on {was}, not on {now}: its rows' times and floors are "
                          "that card's (survey this one into another --out)")


def _record_device(judge: _Judge, data: dict[str, Any]) -> None:
    """The device and its measured peaks (the judge measures them on a GPU, with its first reference).

    The file keeps the peaks of its first piece: the judge of each later piece (each shard, each call)
    measures them again, 5 % apart on one card (2,944-3,085 GB/s, session 32), and every row's floor
    is to be against the same ceilings as the header says."""
    info = judge.device_info()
    data["device"] = {"kind": info.kind, "name": info.name, "interpreter": info.interpreter,
                      "torch_version": info.torch_version, "triton_version": info.triton_version}
    if any((data.get("peaks") or {}).values()):
        return
    from drkernel.sandbox.stages.timing import peak_cache_key

    stored = judge.cache.get_json(peak_cache_key(judge.cache, info.name, info.torch_version))
    if isinstance(stored, dict):
        data["peaks"] = {k: stored.get(k) for k in ("bandwidth_gbs", "tflops_fp32", "tflops_bf16")}


def _judge_reference_stats(judge: _Judge, reference_code: str, opts: EvalOptions) -> TimingStats | None:
    """The judge's own timing of a reference, from its cache, under the key its timing stage uses
    (sandbox/stages/timing.cache_key); None when it did not time it."""
    from drkernel.sandbox.stages.timing import cache_key

    info = judge.device_info()
    key = cache_key(judge.cache, reference_code, info.name, info.torch_version, opts, judge.cuda)
    stats: TimingStats | None = judge.cache.get(key)
    return stats


def _per_call_ms(stats: TimingStats | None) -> float | None:
    if stats is None:
        return None
    return stats.low_quartile_ms if stats.low_quartile_ms is not None else stats.median_ms

"""EvalResult -> the feedback text shown to the model in the next turn (paper-spec §2.6).

Compact text (or a trimmed JSON, as the authors send) with a hard character budget: the verdict,
the error and the traceback lines that matter, failed trials, hacks, runtimes, speedup, coverage
and top kernels. Sections are shortened, least useful first, until the budget holds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from drkernel.errors import ConfigError
from drkernel.types import EvalOutcome, EvalResult

__all__ = ["FeedbackConfig", "render_feedback"]

_VERDICT = {
    EvalOutcome.OK: "correct",
    EvalOutcome.INCORRECT: "incorrect: outputs do not match the reference",
    EvalOutcome.HACK_DETECTED: "rejected: reward hacking detected (counts as incorrect)",
    EvalOutcome.COMPILE_ERROR: "failed to compile or load",
    EvalOutcome.RUNTIME_ERROR: "crashed while running",
    EvalOutcome.TIMEOUT: "timed out",
    EvalOutcome.INFRA_ERROR: "could not be judged (a problem on the server side, not your code)",
}
# Traceback lines from these places rarely help the model; the candidate's own frames do.
_NOISE = ("site-packages/torch/", "site-packages/triton/", "/drkernel/sandbox/", "importlib")
_CARETS = re.compile(r"^[\s^~]+$")  # the column markers under a source line
_EXC_LINE = re.compile(r"^\S")  # unindented: an exception line or a chain notice, never source
_TMP_PATH = re.compile(r'"[^"]*/([^"/]+\.py)"')  # sandbox temp dirs vary per run: keep the name


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackConfig:
    max_chars: int = 3000
    style: str = "text"  # "text" | "json"
    traceback_lines: int = 14
    max_failed_trials: int = 3
    top_kernels: int = 5
    show_reward: bool = True  # the authors' feedback includes the reward (paper-spec §2.6)

    def __post_init__(self) -> None:
        if self.max_chars < 200:
            raise ConfigError("feedback.max_chars: must be >= 200")
        if self.style not in ("text", "json"):
            raise ConfigError("feedback.style: must be 'text' or 'json'")


def render_feedback(result: EvalResult, config: FeedbackConfig | None = None) -> str:
    """Render one verdict within `config.max_chars` characters."""
    cfg = config or FeedbackConfig()
    if cfg.style == "json":
        return _render_json(result, cfg)
    sections = [
        _verdict(result, cfg),
        _error(result, cfg),
        _trials(result, cfg),
        _hacks(result),
        _performance(result),
        _kernels(result, cfg),
    ]
    text = "\n".join(s for s in sections if s)
    return _fit(text, cfg.max_chars)


def _verdict(r: EvalResult, cfg: FeedbackConfig) -> str:
    lines = [f"status: {r.status.value} ({r.outcome.value}): {_VERDICT[r.outcome]}"]
    lines.append(f"compiled: {str(r.compiled).lower()}, correct: {str(r.correct).lower()}")
    if cfg.show_reward:
        lines.append(f"reward: {r.reward:.3g}")
    return "\n".join(lines)


def _relevant_traceback(tb: str, limit: int) -> list[str]:
    """The candidate's frames and the exception lines; library frames and caret lines dropped."""
    lines = [ln.rstrip() for ln in tb.strip().splitlines() if ln.strip() and not _CARETS.match(ln)]
    keep: list[str] = []
    skip_next = False
    for ln in lines:
        frame = ln.lstrip().startswith('File "')
        if skip_next and not frame and not _EXC_LINE.match(ln):
            skip_next = False
            continue
        skip_next = False
        if frame and any(n in ln for n in _NOISE):
            skip_next = True  # drop the frame and its source line
            continue
        keep.append(_TMP_PATH.sub(r'"\1"', ln))
    return keep[-limit:]


def _error(r: EvalResult, cfg: FeedbackConfig) -> str:
    if r.error is None:
        return ""
    out = [f"error ({r.error.kind}): {r.error.message.strip()}"]
    if r.error.traceback:
        tb = _relevant_traceback(r.error.traceback, cfg.traceback_lines)
        if tb:
            out.append("traceback (most relevant lines):")
            out.extend("  " + ln for ln in tb)
    return "\n".join(out)


def _trials(r: EvalResult, cfg: FeedbackConfig) -> str:
    if not r.trials:
        return ""
    passed = sum(t.passed for t in r.trials)
    out = [f"correctness trials: {passed}/{len(r.trials)} passed"]
    for t in [t for t in r.trials if not t.passed][: cfg.max_failed_trials]:
        parts = [f"  trial seed={t.seed}: {t.issue or 'output mismatch'}"]
        if t.max_abs_diff is not None:
            parts.append(f"max_abs_diff={t.max_abs_diff:.3g}")
        if t.max_rel_diff is not None:
            parts.append(f"max_rel_diff={t.max_rel_diff:.3g}")
        if t.rel_l2 is not None:
            parts.append(f"rel_l2={t.rel_l2:.3g}")
        out.append(", ".join(parts))
    return "\n".join(out)


def _hacks(r: EvalResult) -> str:
    if not r.hacks:
        return ""
    out = ["hacks detected:"]
    for code in r.hacks:
        detail = r.hack_details.get(code, "")
        out.append(f"  {code}: {detail}" if detail else f"  {code}")
    return "\n".join(out)


def _performance(r: EvalResult) -> str:
    parts = []
    if r.reference_ms is not None:
        parts.append(f"reference runtime: {r.reference_ms:.4g} ms")
    if r.kernel_ms is not None:
        parts.append(f"your runtime: {r.kernel_ms:.4g} ms")
    if r.speedup is not None:
        parts.append(f"speedup: {r.speedup:.3g}x")
    if r.coverage is not None:
        parts.append(f"time in your Triton kernels: {100 * r.coverage:.1f}% of device time")
    if not parts:
        return ""
    if r.device is not None:
        where = r.device.name + (" (Triton interpreter timings)" if r.device.interpreter else "")
        parts.append(f"device: {where}")
    return "\n".join(parts)


def _kernels(r: EvalResult, cfg: FeedbackConfig) -> str:
    if not r.kernels:
        return ""
    ranked = sorted(r.kernels, key=lambda k: k.device_us, reverse=True)[: cfg.top_kernels]
    out = ["top kernels by device time:"]
    for k in ranked:
        mark = "yours" if k.own else "not yours"
        out.append(f"  {k.name[:80]}: {k.device_us:.1f} us over {k.calls} call(s) [{mark}]")
    return "\n".join(out)


def _fit(text: str, limit: int) -> str:
    """Cut to `limit` chars keeping the head (verdict) and the tail (where errors end)."""
    if len(text) <= limit:
        return text
    marker = "\n[... feedback shortened ...]\n"
    head = (limit - len(marker)) * 2 // 5
    tail = limit - len(marker) - head
    return text[:head] + marker + text[-tail:]


def _render_json(r: EvalResult, cfg: FeedbackConfig) -> str:
    d = r.to_dict()
    # held-out shapes stay unseen, and a weak reference is not the model's business (nor a hint to it)
    for key in ("sandbox_output", "launched_kernels", "task_id", "wall_s", "shape_variants_passed",
                "shape_variants_total", "shape_variant_issues", "warnings"):  # fmt: skip
        d.pop(key, None)
    if d.get("device"):  # where it ran (host, Ray node, worker) is ours, not the model's
        for key in ("host", "node_id", "worker_id", "device_id"):
            d["device"].pop(key, None)
    if d.get("error") and d["error"].get("traceback"):
        d["error"]["traceback"] = "\n".join(
            _relevant_traceback(d["error"]["traceback"], cfg.traceback_lines)
        )
    d["kernels"] = d["kernels"][: cfg.top_kernels]
    if not cfg.show_reward:
        d.pop("reward", None)
    text = json.dumps(d, indent=2, ensure_ascii=False)
    if len(text) > cfg.max_chars:
        for key in ("kernel_timing", "reference_timing", "trials", "kernels", "hack_details"):
            d.pop(key, None)
            text = json.dumps(d, indent=2, ensure_ascii=False)
            if len(text) <= cfg.max_chars:
                break
    return _fit(text, cfg.max_chars)

"""EvalResult -> the feedback text shown to the model in the next turn (docs/paper_spec.md §2.6).

Compact text (or a trimmed JSON) with a hard character budget: the verdict, the error and the
traceback lines that matter, failed trials, hacks, runtimes, speedup, coverage and top kernels.
Sections are shortened, least useful first, until the budget holds.

What a policy reads is what it learns from, over many turns and RL steps. So a detected hack is
named by its class with what to do instead (HACK_ADVICE), never by the evidence: which check fired,
its seeds, input scales, thresholds or the call it caught stay in the EvalResult, for humans. Trial
seeds, the judge's own timing cross-checks, stage timings and held-out-shape results are left out
for the same reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from drkernel.advice import GENERIC_HACK_ADVICE, HACK_ADVICE, hack_advice
from drkernel.agent.extraction import NotJudged, turn_outcome, why_not_judged
from drkernel.errors import ConfigError
from drkernel.types import EvalOutcome, EvalResult, TimingStats

__all__ = ["GENERIC_HACK_ADVICE", "HACK_ADVICE", "PAPER_HACK_ERROR", "FeedbackConfig", "policy_view",
           "render_feedback", "render_paper", "timed_calls"]

# error kinds whose message describes our machinery, not the candidate: a fixed text instead
_JUDGE_ERRORS = {
    "protocol": "the submission interfered with the evaluation harness",
    "sandbox_start": "the evaluation could not start (not your code's fault)",
    "judge_error": "the evaluation failed on the server side (not your code's fault)",
    "reference_error": "the reference failed (not your code's fault)",
    "reference_crash": "the reference failed (not your code's fault)",
    "reference_timeout": "the reference timed out (not your code's fault)",
}

_VERDICT = {
    EvalOutcome.OK: "correct",
    EvalOutcome.INCORRECT: "incorrect: outputs do not match the reference",
    EvalOutcome.HACK_DETECTED: "rejected: reward hacking detected (counts as incorrect)",
    EvalOutcome.COMPILE_ERROR: "failed to compile or load",
    EvalOutcome.RUNTIME_ERROR: "crashed while running",
    EvalOutcome.TIMEOUT: "timed out",
    EvalOutcome.INFRA_ERROR: "could not be judged (a problem on the server side, not your code)",
}
# a turn the agent decided without the judge (extraction.why_not_judged), named as the metrics name it
_NOT_JUDGED = {
    NotJudged.NO_CODE: "no kernel was submitted, so nothing was judged",
    # never shown to the model (the episode ends there): the record's words for it
    NotJudged.PROMPT_OVERLONG: "not sent: the prompt did not fit the model's context",
}
# Traceback lines from these places rarely help the model; the candidate's own frames do.
_NOISE = ("site-packages/torch/", "site-packages/triton/", "/drkernel/sandbox/", "importlib")
_CARETS = re.compile(r"^[\s^~]+$")  # the column markers under a source line
_EXC_LINE = re.compile(r"^\S")  # unindented: an exception line or a chain notice, never source
_TMP_PATH = re.compile(r'"[^"]*/([^"/]+\.py)"')  # sandbox temp dirs vary per run: keep the name


@dataclass(frozen=True, slots=True, kw_only=True)
class FeedbackConfig:
    max_chars: int = 3000
    style: str = "text"  # "text" | "json" | "paper" (the authors' field names, never cut)
    traceback_lines: int = 14
    max_failed_trials: int = 3
    top_kernels: int = 5
    show_reward: bool = True  # the authors' feedback includes the reward (docs/paper_spec.md §2.6)

    def __post_init__(self) -> None:
        if self.max_chars < 200:
            raise ConfigError("feedback.max_chars: must be >= 200")
        if self.style not in ("text", "json", "paper"):
            raise ConfigError("feedback.style: must be 'text', 'json' or 'paper'")


def render_feedback(result: EvalResult, config: FeedbackConfig | None = None) -> str:
    """Render one verdict within `config.max_chars` characters."""
    cfg = config or FeedbackConfig()
    if cfg.style == "json":
        return _render_json(result, cfg)
    if cfg.style == "paper":
        return render_paper(result, cfg)
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
    reason = why_not_judged(r)
    verdict = _VERDICT[r.outcome] if reason is None else _NOT_JUDGED[reason]
    lines = [f"status: {r.status.value} ({turn_outcome(r)}): {verdict}"]
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


def _error_message(r: EvalResult) -> str:
    assert r.error is not None
    return _JUDGE_ERRORS.get(r.error.kind, r.error.message.strip())


def _error(r: EvalResult, cfg: FeedbackConfig) -> str:
    if r.error is None:
        return ""
    out = [f"error ({r.error.kind}): {_error_message(r)}"]
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
        parts = [f"  failed trial: {t.issue or 'output mismatch'}"]
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
    out = ["hacks detected (the result counts as incorrect):"]
    out.extend(f"  {code}: {hack_advice(code)}" for code in r.hacks)
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


# the result fields a policy may see (JSON style); everything else (hack evidence, trial seeds, the
# judge's timing cross-checks, stage timings, held-out shapes, warnings about the problem) stays out
_JSON_FIELDS = ("status", "outcome", "compiled", "correct", "hacks", "speedup", "reference_ms", "kernel_ms",
                "coverage", "reward", "error", "device", "trials", "kernel_timing", "reference_timing",
                "kernels")
_TIMING_FIELDS = ("median_ms", "mean_ms", "std_ms", "min_ms", "max_ms", "n")


def policy_view(r: EvalResult) -> dict[str, Any]:
    """The result as a policy may see it: hack classes with advice, no evidence of how it was judged."""
    full = r.to_dict()
    d = {k: full[k] for k in _JSON_FIELDS}
    if r.hacks:
        d["hack_advice"] = {code: hack_advice(code) for code in r.hacks}
    if r.error is not None and r.error.kind in _JUDGE_ERRORS:
        d["error"] = {"kind": r.error.kind, "message": _JUDGE_ERRORS[r.error.kind], "traceback": None}
    d["trials"] = [{k: v for k, v in t.items() if k != "seed"} for t in d["trials"]]
    if d.get("device"):  # where it ran (host, Ray node, worker) is ours, not the model's
        d["device"] = {k: v for k, v in d["device"].items()
                       if k not in ("host", "node_id", "worker_id", "device_id")}
    for key in ("kernel_timing", "reference_timing"):
        if d[key]:
            d[key] = {k: d[key][k] for k in _TIMING_FIELDS}
    return d


def _render_json(r: EvalResult, cfg: FeedbackConfig) -> str:
    d = policy_view(r)
    if d.get("error") and d["error"].get("traceback"):
        d["error"]["traceback"] = "\n".join(
            _relevant_traceback(d["error"]["traceback"], cfg.traceback_lines)
        )
    d["kernels"] = d["kernels"][: cfg.top_kernels]
    if not cfg.show_reward:
        d.pop("reward", None)
    text = json.dumps(d, indent=2, ensure_ascii=False)
    if len(text) > cfg.max_chars:
        for key in ("kernel_timing", "reference_timing", "trials", "kernels"):
            d.pop(key, None)
            text = json.dumps(d, indent=2, ensure_ascii=False)
            if len(text) <= cfg.max_chars:
                break
    return _fit(text, cfg.max_chars)


def _sig3(x: float | None) -> float:
    return float(f"{x:.3g}") if x is not None else -1.0


# the `error` of the authors' merged result for any detected hack: their client's reward summary
# overrides the server's result with it (docs/paper_spec.md §2.6); every hack of ours is their decoy
PAPER_HACK_ERROR = "Reward hacking: Decoy kernel detected"


def timed_calls(stats: TimingStats | None) -> int | None:
    """The timed calls behind a runtime: windows x calls per window (TimingStats.n counts windows)."""
    if stats is None:
        return None
    if stats.window_calls is not None and stats.windows is not None:
        return int(stats.window_calls) * int(stats.windows)
    return stats.n


def _names_match(a: str, b: str) -> bool:
    """A launched kernel and a profiled one are the same kernel when either lowercased name holds the
    other (the rule of docs/paper_spec.md §3.4)."""
    a, b = a.lower(), b.lower()
    return a in b or b in a


def _profiler_fields(r: EvalResult) -> dict[str, Any]:
    """The Triton launch hook's findings and the profile's coverage, in the authors' metadata keys:
    which kernels were launched, which of them the profile saw, and the share of kernels that are ours."""
    launched = sorted(set(r.launched_kernels))
    out: dict[str, Any] = {"triton_profiler_used": bool(launched), "triton_profiler_matches": launched}
    if not r.kernels:
        return out
    ranked = sorted(r.kernels, key=lambda k: k.device_us, reverse=True)
    own = [k for k in ranked if k.own]
    own_us = sum(k.device_us for k in own)
    total_us = sum(k.device_us for k in ranked)
    out["profiling"] = {
        "kernels": [{"name": k.name, "cuda_time_us": round(k.device_us, 3), "count": k.calls}
                    for k in ranked],
        "kernel_count": len(ranked),
        "total_cuda_time_us": round(total_us, 3),
    }
    share = len(own) / len(ranked)
    out["num_custom_kernels"] = len(own)
    out["num_total_kernels"] = len(ranked)
    out["triton_kernel_coverage"] = (
        f"Run {len(own)} custom kernels / Total {len(ranked)} kernels, Coverage: {share:.2%}")
    out["triton_kernel_in_profiling"] = [k.name for k in own]
    out["triton_kernel_not_in_profiling"] = [
        n for n in launched if not any(_names_match(n, k.name) for k in own)]
    out["total_kernel_run_time_in_profiling_us"] = round(total_us, 3)
    out["custom_kernel_cuda_time_in_profiling_us"] = round(own_us, 3)
    pct = own_us / total_us if total_us else 0.0
    out["custom_kernel_cuda_time_coverage"] = (
        f"Custom kernel CUDA time: {own_us:.2f}us / Total time: {total_us:.2f}us, Coverage: {pct:.2%}"
    )
    return out


def render_paper(r: EvalResult, cfg: FeedbackConfig | None = None) -> str:
    """The authors' feedback format (docs/paper_spec.md §2.6): their merged result (the judge's result
    with their client's reward summary over it) as one JSON object with their field names, indent 2,
    non-ASCII kept, never cut. Built from policy_view(), so hack evidence, seeds and held-out results
    stay out as in the other styles. Runtimes are the authors' timing where the judge took it
    (`paper_timing`: 10 calls each timed alone, means to 3 significant digits), else means over the
    judge's timed calls; -1 when not measured. A hacked kernel reads as their decoy: `compiled` and
    `correctness` false, `decoy_kernel` true, `error` PAPER_HACK_ERROR (our hack classes stay in
    `error_message`).
    Where this differs from theirs: docs/agent.md, "What --protocol paper still does differently"."""
    cfg = cfg or FeedbackConfig()
    v = policy_view(r)
    hacked = bool(r.hacks)
    correct = bool(r.correct) and not hacked
    trials = v["trials"]
    own_us = sum(k.device_us for k in r.kernels if k.own)
    total_us = sum(k.device_us for k in r.kernels)
    error_message = error_code = None
    if hacked:
        error_message = "Reward hacking: " + "; ".join(f"{c}: {hack_advice(c)}" for c in r.hacks)
        error_code = "reward_hacking"
    elif v["error"]:
        error_message, error_code = v["error"]["message"], v["error"]["kind"]
    meta: dict[str, Any] = {
        "hardware": r.device.name if r.device else None,
        "device": r.device.kind if r.device else None,
        "correctness_trials": f"({sum(t['passed'] for t in trials)} / {len(trials)})" if trials else None,
        "num_perf_trials": r.paper_timing.calls if r.paper_timing else timed_calls(r.kernel_timing),
    }
    if v["error"] and not hacked:
        which = "compilation_error" if r.outcome is EvalOutcome.COMPILE_ERROR else "runtime_error"
        tb = v["error"].get("traceback")
        meta[which] = "\n".join(_relevant_traceback(tb, cfg.traceback_lines)) if tb else v["error"]["message"]
    failed = [t for t in trials if not t["passed"]]
    if failed:
        meta["correctness_issue"] = failed[0]["issue"] or "Output mismatch"
        meta["max_difference"] = [f"{t['max_abs_diff']:.6f}" for t in failed if t["max_abs_diff"] is not None]
        avg = [f"{t['mean_abs_diff']:.6f}" for t in failed if t.get("mean_abs_diff") is not None]
        if avg:  # a result from a judge before mean_abs_diff has none
            meta["avg_difference"] = avg
    meta.update(_profiler_fields(r))
    own_n = meta.get("num_custom_kernels", 0)
    # the authors' status: "completed" once the kernel loaded (a crash or a wrong output included)
    status = "timeout" if r.outcome is EvalOutcome.TIMEOUT else ("completed" if r.compiled else "failed")
    out: dict[str, Any] = {
        "task_id": r.task_id,
        "status": status,
        "compiled": r.compiled and not hacked,
        "correctness": correct,
        "decoy_kernel": hacked,
        "reference_runtime": (r.paper_timing.reference_ms if r.paper_timing else
                              _sig3(r.reference_timing.mean_ms if r.reference_timing else r.reference_ms)),
        "kernel_runtime": ((r.paper_timing.kernel_ms if r.paper_timing else
                            _sig3(r.kernel_timing.mean_ms if r.kernel_timing else r.kernel_ms))
                           if correct else -1.0),
        "speedup": (r.speedup or 0.0) if correct else 0.0,
        "error_message": error_message,
        "error_code": error_code,
        "metadata": meta,
        "reward": r.reward if correct else 0.0,
        "score": r.reward if correct else 0.0,
        "success": correct,
        "num_custom_kernel": own_n,
        "num_total_kernels": len(r.kernels),
        "custom_kernel_cuda_time_in_profiling_us": round(own_us, 3),
        "total_kernel_run_time_in_profiling_us": round(total_us, 3),
    }
    if hacked:
        out["error"] = PAPER_HACK_ERROR
    if not cfg.show_reward:
        for key in ("reward", "score"):
            out.pop(key)
    return json.dumps(out, indent=2, ensure_ascii=False)

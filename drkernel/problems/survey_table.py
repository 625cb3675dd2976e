"""Survey files -> a reference table: one row per problem and a summary per level, as text or Markdown.

Reads what `drkernel suite survey` wrote (one file or the shards' files); computes nothing the rows
do not hold, except medians and counts over them.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from drkernel.wording import counted

__all__ = ["judge_failure", "merge_rows", "render_table", "summarize_levels"]

_COLUMNS = ("problem", "status", "eager ms", "compile ms", "floor ms", "bound", "headroom", "max|ref|",
            "variation", "nulls passed", "findings")


def merge_rows(surveys: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of several survey files (shards), one per problem: a complete row wins over another."""
    rows: dict[str, dict[str, Any]] = {}
    for survey in surveys:
        for row in survey["rows"]:
            kept = rows.get(row["name"])
            if kept is None or (row.get("complete") and not kept.get("complete")):
                rows[row["name"]] = row
    return sorted(rows.values(), key=lambda r: (r.get("level") or 0, _natural(r["name"])))


def _natural(name: str) -> tuple[Any, ...]:
    import re

    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


def _num(value: Any) -> str:
    return "-" if value is None else f"{value:.3g}"


def _passed(row: dict[str, Any]) -> list[str]:
    return [name for name, rec in (row.get("nulls") or {}).items() if rec.get("correct")]


# what a judge failure's message says, in the survey's own reason words (the first that matches)
_JUDGE_REASONS = (("out of memory", "oom"), ("timed out", "timeout"), ("timeout", "timeout"))


def judge_failure(row: dict[str, Any]) -> str | None:
    """Why the judge could not do its part of a row whose reference ran (a null that ended in no
    verdict, a reference the judge could not time): `oom`, `timeout` or `error`; None where it could."""
    findings = row.get("findings") or []
    if not any(f.endswith("_did_not_run") or f.startswith("judge_reference_") for f in findings):
        return None
    timing = row.get("timing") or {}
    texts = [str(rec.get("detail") or "") for rec in (row.get("nulls") or {}).values()]
    texts += [str(v) for k, v in timing.items() if k.endswith("_error")]
    for text in texts:
        low = text.lower()
        for sign, reason in _JUDGE_REASONS:
            if sign in low:
                return reason
    return "error"


def _cells(row: dict[str, Any]) -> list[str]:
    ref, floor, timing = row.get("reference") or {}, row.get("floor") or {}, row.get("timing") or {}
    status = row["status"] if row["status"] != "error" else f"error: {row.get('reason')}"
    if row["status"] == "deferred":  # by a survey that shared its GPU: a run alone redoes it
        status = "deferred (shared GPU)"
    failed = judge_failure(row) if row["status"] != "error" else None
    if failed:
        status = f"{status}, judge: {failed}"
    return [row["name"], status, _num(timing.get("eager_ms")), _num(timing.get("compile_ms")),
            _num(floor.get("floor_ms")), floor.get("bound") or "-", _num(floor.get("headroom_eager")),
            _num(ref.get("max_abs")), _num(ref.get("variation")), ", ".join(_passed(row)) or "-",
            ", ".join(row.get("findings") or []) or "-"]


def summarize_levels(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per level: problems, how many ran, errors (by reason), problems whose reference ran but the judge
    could not do its part (by reason, `judge_failure`), incomplete ones (deferred ones among them: a
    survey that shared its GPU left them to a run alone), median eager headroom, memory-bound, weak
    references, and problems where some null candidate passed."""
    out = []
    for level in sorted({r.get("level") or 0 for r in rows}):
        mine = [r for r in rows if (r.get("level") or 0) == level]
        headroom = [r["floor"]["headroom_eager"] for r in mine
                    if r.get("floor") and r["floor"].get("headroom_eager") is not None]
        reasons: dict[str, int] = {}
        judge: dict[str, int] = {}
        for r in mine:
            if r["status"] == "error":
                reasons[str(r.get("reason"))] = reasons.get(str(r.get("reason")), 0) + 1
            elif (failed := judge_failure(r)) is not None:
                judge[failed] = judge.get(failed, 0) + 1
        out.append({
            "level": level, "problems": len(mine),
            "ran": sum(r["status"] not in ("error", "deferred") for r in mine),
            "errors": reasons, "judge_failed": judge,
            "incomplete": sum(r["status"] in ("incomplete", "deferred") for r in mine),
            "median_headroom_eager": statistics.median(headroom) if headroom else None,
            "memory_bound": sum((r.get("floor") or {}).get("bound") == "memory" for r in mine),
            "compute_bound": sum((r.get("floor") or {}).get("bound") == "compute" for r in mine),
            "weak_reference": sorted(r["name"] for r in mine
                                     if "weak_reference" in (r.get("findings") or [])),
            "null_passes": sorted(r["name"] for r in mine if _passed(r)),
        })
    return out


def _counts(by_reason: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(by_reason.items())) or "0"


def _summary_cells(s: dict[str, Any]) -> list[str]:
    level = f"L{s['level']}" if s["level"] else "no level"
    return [level, str(s["problems"]), str(s["ran"]), _counts(s["errors"]),
            _counts(s["judge_failed"]), str(s["incomplete"]),
            _num(s["median_headroom_eager"]), str(s["memory_bound"]), str(s["compute_bound"]),
            str(len(s["weak_reference"])), str(len(s["null_passes"]))]


_SUMMARY_COLUMNS = ("level", "problems", "ran", "errors", "judge failed", "incomplete", "median headroom",
                    "memory-bound", "compute-bound", "weak references", "a null passes")


def render_table(surveys: Sequence[dict[str, Any]], markdown: bool = False) -> str:
    """The summary per level, then one line per problem (Markdown tables with `markdown`)."""
    rows = merge_rows(surveys)
    first = surveys[0] if surveys else {}
    device = (first.get("device") or {}).get("name") or "?"
    peaks = first.get("peaks") or {}
    measured = ", ".join(f"{peaks[key]:.0f} {unit}" for key, unit in (
        ("bandwidth_gbs", "GB/s"), ("tflops_fp32", "TFLOP/s fp32"), ("tflops_bf16", "TFLOP/s bf16"))
        if peaks.get(key))
    head = (f"Survey of {first.get('suite') or '?'} at size {first.get('size') or '?'} on {device}; "
            f"measured peaks: {measured or 'none'}; {counted(len(rows), 'problem')}.")
    summary = [_summary_cells(s) for s in summarize_levels(rows)]
    problems = [_cells(r) for r in rows]
    table = _markdown if markdown else _plain
    return "\n".join([head, "", table(_SUMMARY_COLUMNS, summary), "", table(_COLUMNS, problems)]) + "\n"


def _markdown(columns: Sequence[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in [list(columns), *rows]]
    lines.insert(1, "|" + "---|" * len(columns))
    return "\n".join(lines)


def _plain(columns: Sequence[str], rows: list[list[str]]) -> str:
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    widths[-1] = 0  # the last column is not padded
    fmt = "  ".join(f"{{:{w}s}}" for w in widths)
    return "\n".join(fmt.format(*row).rstrip() for row in [list(columns), *rows])

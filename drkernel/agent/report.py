"""Benchmark summary (metrics.summarize) -> terminal table, JSON, CSV and a PNG plot of Fast@p.

rich renders the table; matplotlib (Agg backend, imported lazily) draws Fast@p over turns, solid
for the last turn and dashed for best-so-far. Nothing here computes metrics.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from drkernel.errors import ConfigError
from drkernel.files import write_file_atomically, write_text_atomically
from drkernel.wording import counted

__all__ = ["INTERPRETER_CAVEAT", "level_table", "plot_fast_p", "render_table", "write_csv", "write_json",
           "write_reports"]

INTERPRETER_CAVEAT = (
    "judged under Triton's interpreter on the CPU: correctness and hack checks are real, timings are not "
    "GPU timings, so Fast@p (speedup >= p) says nothing about a GPU"
)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def render_table(summary: dict[str, Any], title: str = "Fast@p (%)") -> Any:
    """The console's tables, each within 80 columns with every header whole: Fast@p of each turn's
    kernel, Fast@p of the best kernel so far, the rates of each turn's kernel (correct, hacked, ...),
    Fast@p per level when there are levels; then the notes, as text under them."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    ps = [f"{p:g}" for p in summary["ps"]]
    refusals = any(row.get("refused") for row in summary["per_turn"])
    overlong = any(row.get("prompt_overlong") for row in summary["per_turn"])
    lost = summary.get("missing", 0) + summary.get("episode_errors", 0)
    notes = [f"{counted(summary['samples'], 'sample')} of {counted(summary['problems'], 'problem')}"
             + (f", {lost} of them missing or failed (counted as incorrect)" if lost else "")
             + "; hacked counts as incorrect"
             + ("; so does refused: an import the judge's rule forbids, not an attack" if refusals else "")
             + ("; so does overlong: the prompt did not fit the model's context and nothing was sent (no "
                "code is the model's answer without a kernel)" if overlong else "")]
    last = Table(title=f"{title} of each turn's kernel")
    best = Table(title=f"{title}, best kernel up to each turn")
    rates = Table(title="Rates (%) of each turn's kernel")
    for table in (last, best, rates):
        table.add_column("turn", justify="right", no_wrap=True)
    for table in (last, best):
        for p in ps:
            table.add_column(f"p={p}", justify="right", no_wrap=True)
    for name in ("correct", "hacked", *(("refused",) if refusals else ()), "compiled", "no code",
                 *(("overlong",) if overlong else ())):
        rates.add_column(name, justify="right", no_wrap=True)
    near = (summary["per_turn"][-1].get("fast_p_borderline") or {}) if summary["per_turn"] else {}
    if any(near.values()):  # every turn's counts are in the JSON and CSV
        counts = ", ".join(f"p={p}: {near.get(p, 0)}" for p in ps)
        notes.append(f"last turn's kernels within 10% of p, which a re-timing may move across it: {counts}")
    held = any(_held_out(row)[0] for row in summary["per_turn"])
    if held:  # correct kernels that pass every held-out shape / correct kernels checked on them
        rates.add_column("held-out", justify="right", no_wrap=True)
        notes.append("held-out: correct kernels passing every unseen shape / checked")
    for row in summary["per_turn"]:
        cells = [_pct(row["correct"]), _pct(row["hacked"]), *([_pct(row.get("refused"))] if refusals else []),
                 _pct(row["compiled"]), _pct(row["no_code"]),
                 *([_pct(row.get("prompt_overlong"))] if overlong else [])]
        if held:
            checked, survived = _held_out(row)
            cells.append(f"{survived}/{checked}")
        last.add_row(str(row["turn"]), *[_pct(row["fast_p"][p]) for p in ps])
        best.add_row(str(row["turn"]), *[_pct(row["fast_p_best"][p]) for p in ps])
        rates.add_row(str(row["turn"]), *cells)
    if summary.get("interpreter"):
        notes.append(f"NOTE: {INTERPRETER_CAVEAT}")
    levels = level_table(summary, title)
    tables = [last, best, rates, *([levels] if levels is not None else [])]
    return Group(*tables, *(Text(note) for note in notes))


def level_table(summary: dict[str, Any], title: str = "Fast@p (%)") -> Any:
    """Fast@p per KernelBench level at the last turn, of its kernel and of the best kernel so far (the
    paper's Table 1 reports Fast@p per level), over each level's planned samples; None without levels."""
    from rich.table import Table

    by_level = summary.get("by_level") or {}
    if not by_level:
        return None
    ps = [f"{p:g}" for p in summary["ps"]]
    table = Table(title=f"{title} per level, turn {summary['max_turns']}",
                  caption="last: that turn's kernel; best: the best kernel up to it")
    table.add_column("level", justify="right", no_wrap=True)
    table.add_column("kernel", no_wrap=True)
    table.add_column("samples", justify="right", no_wrap=True)
    for p in ps:
        table.add_column(f"p={p}", justify="right", no_wrap=True)
    for level, row in by_level.items():
        table.add_row(level, "last", str(row["samples"]), *[_pct(row["last_turn_fast_p"].get(p)) for p in ps])
        table.add_row("", "best", "", *[_pct(row["best_fast_p"].get(p)) for p in ps])
    return table


def _held_out(row: dict[str, Any]) -> tuple[int, int]:
    """(checked, survived) of a turn row; rows of summaries written before held-out checks: (0, 0)."""
    h = row.get("held_out") or {}
    return int(h.get("checked", 0)), int(h.get("survived", 0))


def write_json(summary: dict[str, Any], path: str | Path) -> None:
    if summary.get("interpreter"):
        summary = {**summary, "caveat": INTERPRETER_CAVEAT}
    write_text_atomically(path, json.dumps(summary, indent=2) + "\n")


def write_csv(summary: dict[str, Any], path: str | Path) -> None:
    """Long format: turn, metric, p, value (one line per number)."""
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["turn", "metric", "p", "value"])
    for row in summary["per_turn"]:
        for p, v in row["fast_p"].items():
            w.writerow([row["turn"], "fast_p", p, f"{v:.6f}"])
        for p, v in row["fast_p_best"].items():
            w.writerow([row["turn"], "fast_p_best", p, f"{v:.6f}"])
        for p, v in (row.get("fast_p_borderline") or {}).items():
            w.writerow([row["turn"], "fast_p_borderline", p, v])
        for metric in ("correct", "hacked", "hacked_of_judged", "refused", "compiled", "no_code",
                       "prompt_overlong", "mean_reward"):
            if metric in row:  # a summary of an older version may lack refused or prompt_overlong
                w.writerow([row["turn"], metric, "", f"{row[metric]:.6f}"])
        checked, survived = _held_out(row)
        if checked:
            w.writerow([row["turn"], "held_out_checked", "", checked])
            w.writerow([row["turn"], "held_out_survived", "", survived])
    for level, row in (summary.get("by_level") or {}).items():  # at the last turn (Table 1)
        for p, v in row["last_turn_fast_p"].items():
            w.writerow([summary["max_turns"], f"fast_p_level_{level}", p, f"{v:.6f}"])
        for p, v in row["best_fast_p"].items():
            w.writerow([summary["max_turns"], f"fast_p_best_level_{level}", p, f"{v:.6f}"])
    write_text_atomically(path, f.getvalue())  # a Ctrl-C mid-write leaves the old file


def write_problems_csv(summary: dict[str, Any], path: str | Path) -> None:
    """One line per problem: its fastest correct kernel's speedup beside its speed of light (the share
    of the device's measured bandwidth the kernel reached, and the reference's; empty off the GPU)."""
    def cell(v: Any) -> str:
        return "" if v is None else (f"{v:.6f}" if isinstance(v, float) else str(v))

    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["problem", "level", "correct_turns", "best_speedup", "kernel_bandwidth_fraction",
                "reference_bandwidth_fraction"])
    for name, row in (summary.get("per_problem") or {}).items():
        w.writerow([name, cell(row.get("level")), row.get("correct_turns", 0),
                    cell(row.get("best_speedup")), cell(row.get("kernel_bandwidth_fraction")),
                    cell(row.get("reference_bandwidth_fraction"))])
    write_text_atomically(path, f.getvalue())


def plot_fast_p(summary: dict[str, Any], path: str | Path, title: str = "Fast@p over turns") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    turns = [row["turn"] for row in summary["per_turn"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    top = 0.0
    for i, p in enumerate(f"{p:g}" for p in summary["ps"]):
        color = f"C{i}"
        last = [100 * row["fast_p"][p] for row in summary["per_turn"]]
        best = [100 * row["fast_p_best"][p] for row in summary["per_turn"]]
        ax.plot(turns, last, "o-", color=color, label=f"Fast@{p} (last turn)")
        ax.plot(turns, best, "s--", color=color, alpha=0.6, label=f"Fast@{p} (best so far)")
        top = max(top, *last, *best)
    ax.set_xlabel("turn")
    ax.set_ylabel("% of all samples")
    ax.set_xticks(turns)
    ax.set_ylim(0, min(100.0, max(10.0, 1.2 * top)))  # Fast@p is often small: zoom in
    ax.set_title(title + ("\n(Triton interpreter on the CPU: timings are not GPU timings)"
                          if summary.get("interpreter") else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fmt = Path(path).suffix.lstrip(".") or "png"
    try:  # replaced whole, as the text files
        write_file_atomically(path, lambda tmp: fig.savefig(tmp, dpi=120, format=fmt))
    finally:
        plt.close(fig)


def write_reports(summary: dict[str, Any], out_dir: str | Path, title: str | None = None) -> list[Path]:
    """summary.json, fast_p.csv, problems.csv and fast_p.png in out_dir; returns their paths. Each file is
    replaced whole: a Ctrl-C or a full disk mid-write leaves the one written before, never a cut one. A
    file the folder does not take (no right to write, a folder at its name, a full disk) is ConfigError
    naming it."""
    out = Path(out_dir)
    paths = [out / "summary.json", out / "fast_p.csv", out / "problems.csv", out / "fast_p.png"]
    writers = [lambda: write_json(summary, paths[0]), lambda: write_csv(summary, paths[1]),
               lambda: write_problems_csv(summary, paths[2])]
    if summary["per_turn"]:
        writers.append(lambda: plot_fast_p(summary, paths[3], title or "Fast@p over turns"))
    else:
        paths.pop()
    for path, write in zip(paths, writers, strict=True):
        try:
            out.mkdir(parents=True, exist_ok=True)
            write()
        except OSError as exc:
            raise ConfigError(f"{path}: cannot write the report: {exc.strerror or exc} (the episodes are "
                              f"kept: `drkernel report {out}` writes the reports again)") from None
    return paths

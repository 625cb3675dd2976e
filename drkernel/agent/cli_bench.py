"""`drkernel bench SUITE --model M`: a model over a suite, Fast@p per turn, resumable.

Every finished episode is appended to OUT/episodes.jsonl as it ends; a rerun with --resume skips
the finished (problem, sample) pairs. Writes summary.json, fast_p.csv, fast_p.png and prints a
table. run_bench() is the same thing for Python callers (scripted policies, GPU demos).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter
from collections.abc import Container
from pathlib import Path
from typing import Any

from drkernel.agent.cli_options import (
    add_run_options,
    build_loop_config,
    close_policy,
    start_policy_and_executor,
)
from drkernel.agent.loop import LoopConfig, run_episodes
from drkernel.agent.metrics import summarize
from drkernel.agent.paper_protocol import paper_differences
from drkernel.agent.policy import Policy
from drkernel.agent.report import render_table, write_reports
from drkernel.agent.trajectories import Trajectory, append_jsonl, iter_jsonl, save_trajectories, scan_jsonl
from drkernel.cli import INCOMPLETE, INTERRUPTED, make_folder, rerun_command
from drkernel.errors import ConfigError
from drkernel.executors.base import Executor
from drkernel.files import write_text_atomically
from drkernel.helpfmt import DefaultsHelpFormatter
from drkernel.problems.loaders import load_suite, parse_levels
from drkernel.types import Problem
from drkernel.wording import counted

__all__ = ["BenchInterrupted", "check_out", "incomplete", "print_summary", "register", "report", "run",
           "run_bench"]

log = logging.getLogger(__name__)

EPISODES = "episodes.jsonl"
ERRORS = "errors.jsonl"
# run settings that must match for a resumed run to be one benchmark
_RESUME_KEYS = ("model", "samples", "turns", "context", "reference_backend", "held_out", "problems",
                "protocol", "reward_preset", "prompt_template", "sampling", "feedback_chars")
# the judge's options that decide a verdict (correct or not, the speedup's timing) must match too
_RESUME_EVAL_KEYS = ("atol", "rtol", "check_relative_error", "paper_timing", "num_correct_trials",
                     "num_perf_trials", "timeout_s", "sealed_span", "speedup_cap", "coverage_weight")
# what a config.json written before a key existed meant
_RESUME_DEFAULTS = {"held_out": False, "protocol": "ours", "reward_preset": "paper", "prompt_template": None,
                    "feedback_chars": 3000}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="run a model over a suite and report Fast@p per turn",
                              formatter_class=DefaultsHelpFormatter)
    p.add_argument("suite", help="builtin[:cpu|:gpu], a folder of problems, or a KernelBench checkout")
    p.add_argument("--samples", type=int, default=8, help="episodes per problem (paper: 8)")
    p.add_argument("--levels", type=parse_levels,
                   help="KernelBench levels to run, e.g. 1,2 or 1-3 (a problem with no level is left out)")
    p.add_argument("--limit", type=int, help="first N problems only")
    p.add_argument("--out", default="bench-out", help="output folder (resume log, reports)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr (for logs and CI)")
    p.add_argument("--parquet", action="store_true", help="also write episodes.parquet (pyarrow)")
    p.add_argument("--held-out", action="store_true",
                   help="also check each kernel on its problem's held-out shapes, never shown to the model, "
                        "and report how many correct kernels pass them")
    p.add_argument("--force-gpu-suite", action="store_true",
                   help="run builtin:gpu even when the judge is on the CPU (refused without it: hours under "
                        "the interpreter, and over the judge's memory limits)")
    add_run_options(p, default_turns=3)
    p.set_defaults(func=run)


def _run_meta(problems: list[Problem], config: LoopConfig, samples: int) -> dict[str, Any]:
    ctx = config.env.context
    meta: dict[str, Any] = {
        "model": config.model,
        "samples": samples,
        "turns": config.env.max_turns,
        "context": {"mode": ctx.mode, "w": ctx.w, "token_budget": ctx.token_budget, "rank_by": ctx.rank_by,
                    "overflow": ctx.overflow, "max_model_len": ctx.max_model_len},
        "protocol": "paper" if config.env.feedback.style == "paper" else "ours",
        "reward_preset": config.env.eval_options.reward_preset,
        "reference_backend": config.env.eval_options.reference_backend,
        "held_out": config.env.held_out,
        "problems": [p.name for p in problems],
        "levels": {p.name: p.level for p in problems if p.level is not None},  # for `drkernel report`
        "sampling": {
            "temperature": config.sampling.temperature,
            "top_p": config.sampling.top_p,
            "max_tokens": config.sampling.max_tokens,
        },
        "eval_options": config.env.eval_options.to_dict(),
        "prompt_template": config.env.prompts.template_file,
        "feedback_chars": config.env.feedback.max_chars,  # what the model saw of each verdict
    }
    if config.env.feedback.style == "paper":  # where this run still differs from the authors' evaluation
        meta["paper_differences"] = paper_differences(config, problems)
    return meta


def _prepare_out(out: Path, meta: dict[str, Any], resume: bool) -> dict[str, Trajectory]:
    """Check the out folder against this run; return the finished episodes by uid."""
    check_out(out, resume)
    out.mkdir(parents=True, exist_ok=True)
    log_path, cfg_path = out / EPISODES, out / "config.json"
    finished = {t.uid: t for t in iter_jsonl(log_path)} if log_path.exists() else {}
    if finished and resume:
        _drop_torn_lines(log_path)
    if resume and cfg_path.exists():
        try:
            old = json.loads(cfg_path.read_text())
        except ValueError as exc:
            old = exc
        if not isinstance(old, dict):
            what = f"{type(old).__name__}: {old}" if isinstance(old, ValueError) else "not a JSON object"
            raise ConfigError(f"{cfg_path}: not a bench run's config ({what}); delete it to resume with this "
                              "command's settings")
        for key, value in _RESUME_DEFAULTS.items():
            old.setdefault(key, value)
        if isinstance(old.get("context"), dict):  # written before rank_by, overflow, max_model_len were
            old["context"] = {"rank_by": "reward", "overflow": "shrink", "max_model_len": None,  # recorded
                              **old["context"]}
        diff = [k for k in _RESUME_KEYS if old.get(k) != meta.get(k)]
        old_eval = old.get("eval_options") or {}
        diff += [f"eval_options.{k}" for k in _RESUME_EVAL_KEYS
                 if old_eval.get(k, meta["eval_options"][k]) != meta["eval_options"][k]]
        if diff:
            raise ConfigError(f"--resume: this run differs from the one in {out} in {', '.join(diff)}")
    foreign = _foreign(meta, finished.values()) if resume else None
    if foreign:  # no config.json to compare with: the episodes themselves say whose they are
        raise ConfigError(f"--resume: {log_path} holds {foreign}; choose another --out")
    if not resume:  # a new run: the failures of the earlier one here (which finished nothing) are not its
        (out / ERRORS).unlink(missing_ok=True)
    write_text_atomically(cfg_path, json.dumps(meta, indent=2) + "\n")  # a kill mid-write leaves the old one
    return finished


def _drop_torn_lines(log_path: Path) -> None:
    """Rewrite the log without its torn lines (writes cut by a kill). A record that is whole JSON stays,
    read or not: one this version cannot read (another version's finished episode) is rerun, not lost."""
    with open(log_path, encoding="utf-8", errors="replace") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    whole = []
    for line in lines:
        try:
            json.loads(line)
        except ValueError:
            continue
        whole.append(line + "\n")
    if len(whole) < len(lines):
        write_text_atomically(log_path, "".join(whole))


def _keep_last_errors(path: Path, finished: Container[str]) -> None:
    """Rewrite errors.jsonl to describe the episodes whose last run failed: the last row of each uid,
    none for an episode finished since (a --resume ran it again). Rewritten whole or not at all (a kill
    mid-write leaves the old file); a torn line goes, a record this version cannot read stays."""
    if not path.exists():
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    last: dict[object, str] = {}
    for n, line in enumerate(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        uid = record.get("uid") if isinstance(record, dict) else None
        key = uid if isinstance(uid, str) else n  # no uid to match: kept as it is
        if key in finished:
            continue
        last.pop(key, None)  # in the order of the last failures
        last[key] = line + "\n"
    if len(last) == len(lines):
        return
    if last:
        write_text_atomically(path, "".join(last.values()))
    else:
        path.unlink()


def _progress(total: int, done: int, enabled: bool) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    progress = Progress(
        TextColumn("episodes"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not enabled,
    )
    task = progress.add_task("bench", total=total, completed=done)
    return progress, task


def run_bench(
    problems: list[Problem],
    policy: Policy,
    executor: Executor,
    config: LoopConfig,
    out_dir: str | Path,
    *,
    samples: int = 8,
    resume: bool = False,
    progress: bool = True,
    parquet: bool = False,
) -> dict[str, Any]:
    """Run (or continue) a benchmark in out_dir and write its reports; returns the summary."""
    out = Path(out_dir)
    meta = _run_meta(problems, config, samples)
    finished = _prepare_out(out, meta, resume)
    jobs = [(p, s) for p in problems for s in range(samples) if f"{p.name}#{s}" not in finished]
    bar, task = _progress(len(problems) * samples, len(problems) * samples - len(jobs), progress)

    def on_done(traj: Trajectory) -> None:
        if traj.error is None:
            append_jsonl(out / EPISODES, traj)
            finished[traj.uid] = traj
        else:  # an infrastructure failure: not logged as finished, so --resume retries it
            append_jsonl(out / ERRORS, traj)
        bar.advance(task)

    interrupted = False
    try:
        with bar:
            run_episodes(jobs, policy, executor, config, on_done=on_done)
    except KeyboardInterrupt:  # report what finished; --resume runs the rest
        interrupted = True
    finally:  # no on_done runs any more: the errors of a resumed run are brought up to date
        _keep_last_errors(out / ERRORS, finished)
    summary, trajs = _summary(meta, finished.values())
    if parquet:
        save_trajectories(out / "episodes.parquet", sorted(trajs, key=lambda t: (t.problem, t.sample)))
    write_reports(summary, out, title=_title(meta))
    if interrupted:
        raise BenchInterrupted(summary)
    return summary


def _title(meta: dict[str, Any]) -> str:
    return f"Fast@p over turns: {meta.get('model') or 'model'}"


def _summary(meta: dict[str, Any], finished: Any) -> tuple[dict[str, Any], list[Trajectory]]:
    """The summary of a run (its config.json's `meta`) from its finished episodes, and those episodes."""
    names, samples = meta["problems"], meta["samples"]
    levels = dict(meta.get("levels") or {})
    wanted = set(names)
    trajs = [t for t in finished if t.problem in wanted]
    for t in trajs:  # a config.json written before levels were recorded: the episodes' own
        if t.level is not None:
            levels.setdefault(t.problem, t.level)
    per_level = Counter(levels[n] for n in names if n in levels)
    summary = summarize(trajs, meta["turns"], total=len(names) * samples,
                        level_totals={lv: k * samples for lv, k in per_level.items()}, problems=len(names))
    done = Counter(t.problem for t in trajs if t.error is None)
    summary["incomplete_problems"] = sum(done[n] < samples for n in names)  # an episode missing or failed
    summary["run"] = {k: meta.get(k, _RESUME_DEFAULTS.get(k)) for k in (
        "model", "samples", "turns", "context", "reference_backend", "held_out", "protocol", "reward_preset")}
    if meta.get("paper_differences"):  # where a --protocol paper run differs from the authors' evaluation
        summary["run"]["paper_differences"] = list(meta["paper_differences"])
    return summary, trajs


def _foreign(meta: dict[str, Any], finished: Any) -> str | None:
    """Which of the episodes are not of the run `meta` (its config.json) planned: another model's, a
    sample index past its samples, more turns than its turns; None when all are its own."""
    model, samples, turns = meta.get("model"), meta["samples"], meta["turns"]
    tests = (
        (lambda t: t.model != model, lambda t: f"of model {t.model!r}, where the run's is {model!r}"),
        (lambda t: not 0 <= t.sample < samples,
         lambda t: f"of sample {t.sample}, where the run has {samples} per problem"),
        (lambda t: len(t.turns) > turns, lambda t: f"of {len(t.turns)} turns, where the run has {turns}"),
    )
    for bad, say in tests:
        odd = sorted((t for t in finished if bad(t)), key=lambda t: t.uid)  # the log's order is the threads'
        if odd:
            return f"{len(odd)} episode(s) of another run ({odd[0].uid} {say(odd[0])})"
    return None


def report(out: str | Path) -> dict[str, Any]:
    """Write the reports of the bench run in `out` again from its config.json and episodes.jsonl, without
    running anything (`drkernel report OUT`); returns the summary."""
    out = Path(out)
    cfg_path = out / "config.json"
    if not out.exists():
        raise ConfigError(f"{out}: no such folder (the --out of a drkernel bench run)")
    if not out.is_dir():
        raise ConfigError(f"{out}: a file, not a bench run's folder (the --out of a drkernel bench run)")
    if not cfg_path.is_file():
        raise ConfigError(f"{out}: no bench run there (no config.json)")
    try:
        meta = json.loads(cfg_path.read_text())
        if not isinstance(meta, dict):  # a list or null was an AttributeError, exit 70
            raise ConfigError(f"{cfg_path}: not a bench run's config (not a JSON object)")
        finished = _read_episodes(out / EPISODES)
        foreign = _foreign(meta, finished.values())
        summary, _ = _summary(meta, finished.values())
    except OSError as exc:
        raise ConfigError(f"{exc.filename or out}: cannot read it ({exc.strerror or exc})") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{cfg_path}: not a bench run's config ({type(exc).__name__}: {exc})") from None
    if foreign:  # its Fast@p would mix runs (over 100 % with more samples than planned)
        raise ConfigError(f"{out / EPISODES}: holds {foreign}; the reports were left as they were")
    write_reports(summary, out, title=_title(meta))
    return summary


def _read_episodes(path: Path) -> dict[str, Trajectory]:
    """The finished episodes of a run's log by uid. A log with records but none readable (written by
    another drkernel version, or not a log) raises ConfigError: its reports would all read zero, and the
    ones written by the run itself would be overwritten."""
    if not path.exists():
        return {}
    finished = {t.uid: t for t in iter_jsonl(path)}
    if not finished:
        with open(path, encoding="utf-8", errors="replace") as f:
            records = sum(1 for line in f if line.strip())
        if records:
            raise ConfigError(f"{path}: none of its {records} record(s) could be read (written by another "
                              "drkernel version?); the reports were left as they were")
    return finished


def incomplete(summary: dict[str, Any]) -> int:
    """How many of a run's planned episodes are missing (never run, or interrupted) or failed."""
    return int(summary["episode_errors"] + summary["missing"])


def print_summary(summary: dict[str, Any], out: str | Path, then: str = "") -> None:
    """The console's part of a bench's end: the tables, then warnings and notes on stderr; `then` ends
    the line on missing or failed episodes."""
    from rich.console import Console

    Console().print(render_table(summary))
    weak = summary.get("weak_reference_problems") or []
    if weak:
        print(f"warning: {len(weak)} problem(s) have a reference whose output barely depends on its inputs, "
              f"so a kernel that ignores them passes: {', '.join(weak[:10])}"
              f"{' ...' if len(weak) > 10 else ''}",
              file=sys.stderr)
    devices = summary.get("devices") or []
    if len(devices) > 1:  # a resume on another machine, or after a torch upgrade: not one benchmark
        print(f"warning: this run's kernels were judged on {len(devices)} devices or torch/Triton versions "
              f"({'; '.join(devices)}): its speedups, and so Fast@p, mix their timings (a --resume on "
              "another machine?)", file=sys.stderr)
    lost = incomplete(summary)
    if lost:
        problems = summary.get("incomplete_problems")  # absent from summarize()'s own summaries
        where = "" if problems is None else f", in {problems} of {counted(summary['problems'], 'problem')}"
        print(f"{lost} of {counted(summary['samples'], 'episode')} missing or failed{where}; rerun the bench "
              f"with --resume to retry them{then}", file=sys.stderr)
    print(f"reports written to {out}")
    differences = (summary.get("run") or {}).get("paper_differences") or []
    if differences:
        print(f"note: --protocol paper: this run differs from the authors' evaluation in {len(differences)} "
              f"ways, listed under paper_differences in {Path(out) / 'config.json'}", file=sys.stderr)


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a bench: the reports of the finished episodes were written first."""

    def __init__(self, summary: dict[str, Any]) -> None:
        super().__init__()
        self.summary = summary


def check_out(out: str | Path, resume: bool) -> None:
    """Refuse a new run (no --resume) into an --out whose log holds episodes, before any judge starts:
    finished ones (--resume continues them), or only records this version cannot read (another drkernel
    version's: the new run appended its episodes to theirs and wrote its config.json over their run's)."""
    log_path = Path(out) / EPISODES
    if resume or not log_path.is_file():
        return
    readable, unreadable = _count_records(log_path)
    if readable:
        raise ConfigError(f"{out} already holds {counted(readable, 'finished episode')}: pass --resume to "
                          "continue, or choose another --out")
    if unreadable:
        raise ConfigError(f"{out} holds {counted(unreadable, 'episode')} this drkernel cannot read (another "
                          f"version's run): choose another --out, or remove {log_path}")


def _count_records(log_path: Path) -> tuple[int, int]:
    """(readable, unreadable) whole records of an episode log, read without a warning per record; a torn
    line (a write cut by a kill) is neither."""
    readable = unreadable = 0
    for _, traj, exc in scan_jsonl(log_path):
        if traj is not None:
            readable += 1
        elif not isinstance(exc, json.JSONDecodeError):
            unreadable += 1
    return readable, unreadable


def _with_held_out(problems: list[Problem]) -> list[Problem]:
    """Derive held-out shapes for the problems that carry none, and say what each kind got."""
    from drkernel.problems.heldout import with_derived_shape_variants

    own = sum(bool(p.shape_variants) for p in problems)
    problems = [with_derived_shape_variants(p) for p in problems]
    derived = sum(p.metadata.get("shape_variants") == "derived" for p in problems)
    none = len(problems) - own - derived
    print(f"held-out shapes: {own} problem(s) carry their own, {derived} derived from size constants, "
          f"{none} without any", file=sys.stderr)
    return problems


def _check_size(args: argparse.Namespace) -> None:
    """builtin:gpu judged here on the CPU is refused: its GPU-sized problems exceed the judge's memory
    limits under Triton's interpreter and take hours (a 44-minute ETA for a handful of episodes)."""
    from drkernel.executors.local import detect_devices

    spec = args.suite.strip()
    if spec.partition(":")[::2] != ("builtin", "gpu") or args.executor != "local" or args.force_gpu_suite:
        return
    devices = (args.device,) if args.device else detect_devices(1)
    if all(not d.startswith("cuda") for d in devices):
        raise ConfigError("builtin:gpu holds GPU-sized problems and this judge runs on the CPU (Triton's "
                          "interpreter), where they take hours and exceed its memory limits: use "
                          "builtin:cpu, the same problems at CPU size (or --force-gpu-suite)")


def run(args: argparse.Namespace) -> int:
    if args.samples < 1:
        print("drkernel bench: --samples must be >= 1", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit {args.limit}: must be >= 1")
    problems = load_suite(args.suite, args.levels)
    if args.limit is not None:
        problems = problems[: args.limit]
    if args.held_out:
        problems = _with_held_out(problems)
    config = build_loop_config(args, default_turns=3)
    _check_size(args)
    check_out(args.out, args.resume)
    make_folder(args.out, "--out")
    policy, executor = start_policy_and_executor(args)
    try:
        summary = run_bench(
            problems, policy, executor, config, args.out,
            samples=args.samples, resume=args.resume, progress=not args.no_progress,
            parquet=args.parquet,
        )
    except BenchInterrupted as stop:
        done = stop.summary["episodes"]
        print(f"drkernel bench: interrupted after {done} of {counted(stop.summary['samples'], 'episode')} "
              f"(reports of those in {args.out}); to continue: {rerun_command(args, '--resume')}",
              file=sys.stderr)
        return INTERRUPTED
    finally:
        executor.close()
        close_policy(policy)
    print_summary(summary, args.out)
    # a run with episodes missing (a model or judge that failed them) is not a finished run: a script
    # must be able to tell (the reports are written either way; --resume retries those)
    return INCOMPLETE if incomplete(summary) else 0

"""`drkernel suite list|show|baselines|survey|table`: browse the built-in suite, (re)generate reference
baseline timings (eager and torch.compile) for any suite on a device, survey a suite through the judge
in resumable pieces (problems/survey.py) and render a survey as a table.

Output is a table, or one JSON object with --json; usage errors exit 2 with one stderr line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from drkernel.errors import ConfigError, ProblemError
from drkernel.problems.baselines import BACKENDS, BaselineStore, refresh_baselines
from drkernel.problems.loaders import load_suite, parse_levels
from drkernel.problems.reference import failure_text
from drkernel.problems.suite import builtin_names, builtin_problem, builtin_solution
from drkernel.problems.survey import NULLS, parse_shard
from drkernel.types import Problem

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("suite", help="list or show built-in problems; time reference baselines")
    verbs = p.add_subparsers(dest="suite_command", metavar="VERB")
    ls = verbs.add_parser("list", help="list the built-in problems")
    ls.add_argument("--json", action="store_true", help="one JSON document instead of a table")
    ls.set_defaults(func=run_list)
    show = verbs.add_parser("show", help="print a built-in problem's reference (or solution)")
    show.add_argument("name")
    show.add_argument("--size", choices=["cpu", "gpu"], default=None,
                      help="problem size: gpu on a machine with a CUDA GPU, else cpu (what eval and bench "
                           "judge there; the gpu size under the CPU interpreter would time out)")
    show.add_argument("--solution", action="store_true", help="print the honest Triton solution instead")
    show.set_defaults(func=run_show)
    base = verbs.add_parser("baselines",
                            help="time every reference (eager / torch.compile) and store the timings")
    base.add_argument("suite", nargs="?", default="builtin:gpu", help="suite spec (default builtin:gpu)")
    base.add_argument("--levels", type=parse_levels, default=None,
                      help="levels to keep, e.g. 1-3 (a problem with no level is left out)")
    base.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    base.add_argument("--backend", choices=[*BACKENDS, "both"], default="eager",
                      help="time the reference as written, through torch.compile, or both")
    base.add_argument("--trials", type=int, default=20, help="timed calls of each reference")
    base.add_argument("--warmup", type=int, default=3, help="untimed calls before them")
    base.add_argument("--store", default=None, help="JSON store (default: ~/.cache/drkernel/baselines.json, "
                      "$XDG_CACHE_HOME/drkernel/ where that is set)")
    base.add_argument("--force", action="store_true", help="re-measure even when a stored timing exists")
    base.add_argument("--only", action="append", default=None, help="keep problems whose name contains this")
    base.add_argument("--json", action="store_true", help="the times as JSON instead of a table")
    base.set_defaults(func=run_baselines)
    _register_survey(verbs)
    p.set_defaults(func=lambda args: _usage(p))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_list(args: argparse.Namespace) -> int:
    rows = []
    for name in builtin_names():
        p = builtin_problem(name, "cpu")
        rows.append({"name": name, "level": p.level, "tags": p.metadata.get("tags", []),
                     "shape_variants": len(p.shape_variants)})
    if args.json:
        print(json.dumps({"problems": rows}, indent=1))
        return 0
    for r in rows:
        print(f"L{r['level']}  {r['name']:42s} {', '.join(r['tags'])}")
    print(f"{len(rows)} built-in problems")
    return 0


def run_show(args: argparse.Namespace) -> int:
    size = args.size
    if size is None:
        import torch

        size = "gpu" if torch.cuda.is_available() else "cpu"
    problem = builtin_problem(args.name, size)
    print(builtin_solution(args.name) if args.solution else problem.reference_code, end="")
    return 0


def run_baselines(args: argparse.Namespace) -> int:
    if args.trials < 1 or args.warmup < 0:  # here, not at the first measurement: all may be stored
        raise ConfigError("--trials must be >= 1 and --warmup >= 0")
    problems = load_suite(args.suite, args.levels)
    if args.only:
        problems = [p for p in problems if any(o in p.name for o in args.only)]
        if not problems:
            raise ConfigError(f"--only matched no problem of {args.suite!r}")
    if args.device.startswith("cuda"):
        from drkernel.device import resolve_device

        args.device = resolve_device(args.device)
    elif args.device != "cpu":
        raise ConfigError(f"--device {args.device!r}: expected cpu, cuda or cuda:N")
    store = BaselineStore(args.store)
    backends = BACKENDS if args.backend == "both" else (args.backend,)
    timings, failed = [], []
    for problem in problems:
        # the references run here: with --json, what they print must not come before the JSON object
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            try:
                timings += refresh_baselines([problem], store, device=args.device, backends=backends,
                                             force=args.force, trials=args.trials, warmup=args.warmup)
            except ConfigError:
                raise
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's reference: a finding
                error = (str(exc).removeprefix(f"{problem.name}: ") if isinstance(exc, ProblemError)
                         else failure_text(exc))
                failed.append({"problem": problem.name, "error": error})
                print(f"drkernel suite: {problem.name}: the reference failed: {error}", file=sys.stderr)
    code = 1 if failed else 0
    if args.json:
        print(json.dumps({"store": str(store.path), "timings": [t.to_dict() for t in timings],
                          "failed": failed}, indent=1))
        return code
    label = "" if args.device.startswith("cuda") else "  (CPU timings: not GPU baselines)"
    print(f"{'problem':48s} {'backend':8s} {'median_ms':>10s} {'device'}{label}")
    for t in timings:
        print(f"{t.problem[:48]:48s} {t.backend:8s} {t.median_ms:10.3f} {t.device_name}")
    if failed:
        print(f"{len(failed)} reference{'s' if len(failed) > 1 else ''} failed (see above): not timed")
    print(f"stored in {store.path}")
    return code


def _register_survey(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sv = verbs.add_parser("survey", help="every problem through the judge at full size, into one JSON file, "
                                         "in resumable pieces")
    sv.add_argument("suite", help="kernelbench:PATH (a KernelBench checkout), or any suite spec")
    sv.add_argument("--out", required=True, help="the survey's JSON file (rewritten after every problem)")
    sv.add_argument("--levels", type=parse_levels, default=None,
                    help="levels to keep, e.g. 1-3 (a problem with no level is left out)")
    sv.add_argument("--only", action="append", default=None, help="keep problems whose name contains this")
    sv.add_argument("--resume", action="store_true", help="continue --out: skip the problems it holds")
    sv.add_argument("--budget-s", type=float, default=None,
                    help="start no work past this many seconds (a 10-minute device call: 540)")
    sv.add_argument("--shard", type=parse_shard, default=None, help="I/N: every N-th problem from the I-th")
    sv.add_argument("--per-gpu", type=int, default=1, metavar="N",
                    help="this survey is one of N on its GPU (one per shard): its judge takes 1/N of the "
                         "candidates' memory, and a problem that fails for want of memory or time is "
                         "deferred to a run alone (default 1: the GPU is its own)")
    sv.add_argument("--deferred-only", action="store_true",
                    help="with --resume: redo only the problems that a --per-gpu survey deferred, alone")
    sv.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N (default cpu)")
    sv.add_argument("--size", choices=["full", "reduced"], default="full",
                    help="full (as written), or reduced: size constants halved to --max-input-numel")
    sv.add_argument("--max-input-numel", type=int, default=None,
                    help="with --size reduced: elements one call's inputs may hold (default 1048576)")
    sv.add_argument("--nulls", default=",".join(NULLS),
                    help=f"null candidates to send, comma-separated, or none (default {','.join(NULLS)})")
    sv.add_argument("--null-trials", type=int, default=5,
                    help="correctness trials of each null candidate (default 5, the judge's; 2 to 20)")
    sv.add_argument("--no-compile", action="store_true", help="skip the torch.compile reference timing")
    sv.add_argument("--probe-timeout-s", type=float, default=300.0,
                    help="seconds for the reference run outside the judge (its facts and floor)")
    sv.add_argument("--eval-timeout-s", type=float, default=240.0, help="seconds for each evaluation")
    sv.add_argument("--peak-gbs", type=float, default=None,
                    help="bandwidth peak (GB/s) where the judge measures none")
    sv.add_argument("--peak-tflops", type=float, default=None,
                    help="FLOP/s peak (TFLOP/s) where the judge measures none")
    sv.set_defaults(func=run_survey_command)
    tb = verbs.add_parser("table",
                          help="render survey files as a table (a row per problem, a summary per level)")
    tb.add_argument("surveys", nargs="+", help="survey JSON files (shards are merged)")
    tb.add_argument("--markdown", action="store_true", help="a Markdown table instead of plain text")
    tb.add_argument("--out", default=None, help="write the table here instead of stdout")
    tb.set_defaults(func=run_table)


def _survey_suite(spec: str, levels: tuple[int, ...] | None) -> tuple[str, list[Problem]]:
    """`kernelbench:PATH` (levels 1-3 of a checkout, those it has unless --levels says) or any suite spec."""
    if not spec.startswith("kernelbench:"):
        return spec, load_suite(spec, levels)
    path = spec.removeprefix("kernelbench:")
    problems = load_suite(path, levels)
    if any(p.metadata.get("suite") != "kernelbench" for p in problems):
        raise ProblemError(f"{path}: no level1..level3 folders found (is this a KernelBench checkout?)")
    return path, problems


def _parse_nulls(text: str) -> tuple[str, ...]:
    """`--nulls`: names, comma-separated, or `none`; a list with no name in it is a mistake, not `none`."""
    if text.strip().lower() == "none":
        return ()
    nulls = tuple(n.strip() for n in text.split(",") if n.strip())
    if not nulls:
        raise ConfigError(f"--nulls {text!r}: no candidate named (known: {', '.join(NULLS)}; "
                          "none to send no null candidate)")
    return nulls


def run_survey_command(args: argparse.Namespace) -> int:
    from drkernel.problems.survey import SurveyConfig, run_survey

    nulls = _parse_nulls(args.nulls)
    if args.deferred_only and not args.resume:
        raise ConfigError("--deferred-only continues a survey: pass --resume too")
    if args.max_input_numel is not None and args.size != "reduced":  # else silently a full-size survey
        raise ConfigError(f"--max-input-numel is --size reduced's: the survey runs at --size {args.size}")
    max_input_numel = 1 << 20 if args.max_input_numel is None else args.max_input_numel
    if max_input_numel < 1 or args.probe_timeout_s <= 0 or args.eval_timeout_s <= 0:
        raise ConfigError("--max-input-numel, --probe-timeout-s and --eval-timeout-s must be > 0")
    device = args.device
    if device.startswith("cuda"):
        from drkernel.device import resolve_device

        device = resolve_device(device)
    elif device != "cpu":
        raise ConfigError(f"--device {device!r}: expected cpu, cuda or cuda:N")
    cfg = SurveyConfig(device=device, size=args.size, max_input_numel=max_input_numel, nulls=nulls,
                       backends=("eager",) if args.no_compile else ("eager", "compile"),
                       budget_s=args.budget_s, probe_timeout_s=args.probe_timeout_s,
                       eval_timeout_s=args.eval_timeout_s, peak_gbs=args.peak_gbs,
                       peak_tflops=args.peak_tflops, null_trials=args.null_trials, per_gpu=args.per_gpu)
    suite, problems = _survey_suite(args.suite, args.levels)
    if args.only:
        problems = [p for p in problems if any(o in p.name for o in args.only)]
    if args.shard:
        index, count = args.shard
        problems = problems[index - 1::count]
    if not problems:
        raise ConfigError("no problem left to survey after --only/--shard")

    def make_judge() -> Any:
        from drkernel.sandbox.judge import Judge
        from drkernel.settings import judge_settings_from_env

        settings = judge_settings_from_env()
        if device.startswith("cuda"):  # one of per_gpu judges on the GPU, as serve makes them
            settings = settings.shared(cfg.per_gpu)
        return Judge.from_config(settings, device)

    def show(row: dict[str, Any], k: int, n: int) -> None:
        passed = [name for name, rec in row["nulls"].items() if rec.get("correct")]
        refused = sum(rec["outcome"] in ("incorrect", "hack_detected") for rec in row["nulls"].values())
        eager = row["timing"].get("eager_ms")
        floor = (row.get("floor") or {}).get("floor_ms")
        if row["status"] == "deferred":
            print(f"[{k}/{n}] {row['name'][:56]:56s} deferred to a run alone: {row['deferred'][:160]}  "
                  f"({row['wall_s']:.1f} s)", flush=True)
            return
        what = row["status"] if row["status"] != "error" else f"error ({row['reason']})"
        print(f"[{k}/{n}] {row['name'][:56]:56s} {what:12s} ref {_ms(eager)} floor {_ms(floor)} "
              f"nulls refused {refused}, passed {','.join(passed) or 'none'}  ({row['wall_s']:.1f} s)",
              flush=True)

    report = run_survey(problems, cfg, args.out, suite=suite, resume=args.resume, make_judge=make_judge,
                        on_row=show, deferred_only=args.deferred_only)
    left, deferred = len(report.left), len(report.deferred)
    print(f"survey: {len(report.done)} done now, {report.skipped} already in {args.out}, {left} left"
          + (f", {deferred} deferred (redo them alone: --resume --deferred-only, no --per-gpu)"
             if deferred else "")
          + (" (budget reached: run again with --resume)" if report.budget_reached else ""), flush=True)
    return 0


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} ms"


def run_table(args: argparse.Namespace) -> int:
    from drkernel.problems.survey import load_survey
    from drkernel.problems.survey_table import render_table

    surveys = [load_survey(p) for p in args.surveys]
    _check_one_survey(args.surveys, surveys)
    if args.out is not None and any(_same_file(args.out, p) for p in args.surveys):
        raise ConfigError(f"--out {args.out} is one of the surveys it reads: the table would replace it")
    text = render_table(surveys, markdown=args.markdown)
    if args.out is None:
        print(text, end="")
        return 0
    from pathlib import Path

    from drkernel.files import write_text_atomically

    if Path(args.out).is_dir():  # "" and "." among them: no file name to write to
        raise ConfigError(f"--out {args.out or '.'}: is a folder, not a file for the table")
    try:  # replaced whole: a Ctrl-C or a full disk mid-write leaves the old table, not a cut one
        write_text_atomically(args.out, text)
    except OSError as exc:
        raise ConfigError(f"{args.out}: cannot write: {exc.strerror or exc}") from None
    return 0


def _check_one_survey(paths: list[str], surveys: list[dict[str, Any]]) -> None:
    """Files merged into one table are shards of one survey: one size, one device (one that has
    surveyed nothing yet names none). The table's heading names them once."""
    for what, key in (("at size", "size"), ("on", "device")):
        seen: dict[Any, str] = {}
        for path, survey in zip(paths, surveys, strict=True):
            value = survey.get(key) if key == "size" else (survey.get("device") or {}).get("name")
            if value is not None:
                seen.setdefault(value, path)
        if len(seen) > 1:
            (a, pa), (b, pb) = list(seen.items())[:2]
            raise ConfigError(f"{pa} and {pb} are surveys {what} {a!r} and {b!r}: "
                              "one table merges the shards of one survey")


def _same_file(a: str, b: str) -> bool:
    """Whether paths `a` and `b` name one file (False where `a` does not exist yet)."""
    import os

    try:
        return os.path.samefile(a, b)
    except OSError:
        return False

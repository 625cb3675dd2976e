"""`drkernel audit SUITE`: flag problems that an all-zeros, constant, identity, replayed or
half-input answer passes, or whose outputs are tiny or barely vary between seeds.

Prints a table (or one JSON object with --json); exit code 0 whenever an audit was produced.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from drkernel.errors import ConfigError
from drkernel.problems.audit import AuditConfig, ProblemAudit, audit_suite
from drkernel.problems.loaders import load_suite, parse_levels
from drkernel.wording import counted

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("audit", help="flag degenerate problems in a suite (null kernels that pass)",
                       description="Audit a suite: builtin[:cpu|:gpu], a KernelBench checkout, a folder, "
                                   "a .py, .jsonl or RL .parquet file.")
    p.add_argument("suite", help="builtin[:cpu|:gpu] | KernelBench checkout | folder | file")
    p.add_argument("--levels", type=parse_levels, default=None,
                   help="levels to keep, e.g. 1,2 or 1-3 (a problem with no level is left out)")
    p.add_argument("--only", action="append", default=None,
                   help="keep problems whose name contains this (repeatable)")
    p.add_argument("--judge", action="store_true",
                   help="also send null candidates to the real judge (slower)")
    p.add_argument("--device", default=None,
                   help="judge device for --judge (default cpu); the in-process audit runs on the CPU")
    p.add_argument("--max-input-numel", type=int, default=None,
                   help="shrink module-level size constants until one call's inputs hold at most this many "
                        "elements (for auditing GPU-sized suites on a CPU)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--fail-on-flag", action="store_true", help="exit 1 when any problem is flagged or errors")
    p.set_defaults(func=run)


def _row(a: ProblemAudit) -> str:
    num = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
    flags = ", ".join(a.flags) if a.flags else (a.error or "")
    return (f"{a.name[:48]:48s} {a.status:8s} {num(a.max_abs):>9s} {num(a.variation):>9s} "
            f"{a.size_ratio:>7.2g}  {flags}")


def run(args: argparse.Namespace) -> int:
    if args.device is not None and not args.judge:
        raise ConfigError(f"--device {args.device}: --device is the judge's, for --judge (the in-process "
                          "audit runs on the CPU)")
    problems = load_suite(args.suite, args.levels)
    if args.only:
        problems = [p for p in problems if any(o in p.name for o in args.only)]
        if not problems:
            raise ConfigError(f"--only matched no problem of {args.suite!r}")
    cfg = AuditConfig(max_input_numel=args.max_input_numel)
    show = None if args.json else (lambda a: print(_row(a), flush=True))
    with contextlib.ExitStack() as stack:
        if args.json:  # the references run here: what they print must not come before the JSON object
            stack.enter_context(contextlib.redirect_stdout(sys.stderr))
        judge = None
        if args.judge:  # started before the table's header: a judge that cannot start is one line
            from drkernel.sandbox.judge import Judge
            from drkernel.settings import judge_settings_from_env

            judge = stack.enter_context(Judge.from_config(judge_settings_from_env(), args.device or "cpu"))
        if not args.json:
            print(f"{'problem':48s} {'status':8s} {'max|out|':>9s} {'variation':>9s} {'size':>7s}  flags")
        results = audit_suite(problems, cfg, judge, on_result=show)
    summary: dict[str, Any] = {s: sum(a.status == s for a in results) for s in ("ok", "flagged", "error")}
    if args.json:
        json.dump({"suite": args.suite, "judge": args.judge, "summary": summary,
                   "problems": [a.to_dict() for a in results]}, sys.stdout, indent=1, allow_nan=False)
        print()
    else:
        print(f"{counted(len(results), 'problem')}: {summary['ok']} ok, {summary['flagged']} flagged, "
              f"{counted(summary['error'], 'error')}")
    return 1 if args.fail_on_flag and (summary["flagged"] or summary["error"]) else 0

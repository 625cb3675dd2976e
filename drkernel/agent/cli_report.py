"""`drkernel report OUT`: the reports of a finished or interrupted `drkernel bench --out OUT`, written
again from its config.json and episodes.jsonl (summary.json, fast_p.csv, problems.csv, fast_p.png, the
console tables) without running a model or a judge. Exit code 1 (INCOMPLETE, as bench's) when episodes
are missing or failed, unless --allow-partial."""

from __future__ import annotations

import argparse
from typing import Any

from drkernel.agent.cli_bench import incomplete, print_summary, report
from drkernel.cli import INCOMPLETE
from drkernel.helpfmt import DefaultsHelpFormatter

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="write a bench run's reports again from its --out folder",
                              formatter_class=DefaultsHelpFormatter)
    p.add_argument("out", help="the --out folder of a drkernel bench run")
    p.add_argument("--allow-partial", action="store_true",
                   help=f"exit 0 on a run with episodes missing or failed (interrupted, or failed by a model "
                        f"server or judge); without it such a run's reports are written and the exit code "
                        f"is {INCOMPLETE}, as bench's")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    summary = report(args.out)
    print_summary(summary, args.out, "" if args.allow_partial else
                  " (report --allow-partial exits 0 on a partial run)")
    return INCOMPLETE if incomplete(summary) and not args.allow_partial else 0

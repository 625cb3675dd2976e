"""`drkernel report OUT`: the reports of a finished or interrupted `drkernel bench --out OUT`, written
again from its config.json and episodes.jsonl (summary.json, fast_p.csv, problems.csv, fast_p.png, the
console tables) without running a model or a judge."""

from __future__ import annotations

import argparse
from typing import Any

from drkernel.agent.cli_bench import print_summary, report
from drkernel.helpfmt import DefaultsHelpFormatter

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("report", help="write a bench run's reports again from its --out folder",
                              formatter_class=DefaultsHelpFormatter)
    p.add_argument("out", help="the --out folder of a drkernel bench run")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print_summary(report(args.out), args.out)
    return 0

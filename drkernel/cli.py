"""`drkernel` command line: eval | serve | bench | optimize | report | audit | suite | train.

Each subcommand lives beside the stage it drives and exposes `register(subparsers)`, which adds
its parser and sets `func(args) -> int`. Commands whose extra is not installed say so in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from drkernel.errors import ConfigError, DrKernelError

__all__ = ["COMMANDS", "QUICK_EXIT", "SUMMARIES", "entry", "main", "make_folder", "rerun_command"]

# name -> (module, extra that provides its dependencies)
COMMANDS: dict[str, tuple[str, str | None]] = {
    "eval": ("drkernel.sandbox.cli", None),
    "serve": ("drkernel.server.cli", "server"),
    "bench": ("drkernel.agent.cli_bench", "agent"),
    "optimize": ("drkernel.agent.cli_optimize", "agent"),
    "report": ("drkernel.agent.cli_report", "agent"),
    "audit": ("drkernel.problems.cli_audit", None),
    "suite": ("drkernel.problems.cli_suite", None),
    "train": ("drkernel.rl.cli", "train"),
}
# the one-line help of each, for `drkernel --help` without importing any command (they import torch)
SUMMARIES = {
    "eval": "judge one Triton candidate against a PyTorch reference",
    "serve": "the gym as a service (KernelGYM's API and ours)",
    "bench": "run a model over a suite and report Fast@p per turn",
    "optimize": "make one PyTorch module faster with a model",
    "report": "write a bench run's reports again from its --out folder",
    "audit": "flag degenerate problems in a suite (null kernels that pass)",
    "suite": "list or show built-in problems; time reference baselines",
    "train": "SFT and multi-turn RL (the Dr. Kernel recipe)",
}


# Commands that have closed and written everything when main() returns: their console script leaves
# at once, skipping the interpreter's teardown of torch and Triton (bench/eval_latency.py measures it).
QUICK_EXIT = frozenset({"eval"})
INTERRUPTED = 130  # the exit code of a command stopped by Ctrl-C (128 + SIGINT), as a shell's
# the exit code of a bench, or the report of one, whose reports are written but whose run is not whole:
# episodes missing (interrupted, never run) or failed (a model server or judge that failed them)
INCOMPLETE = 1
# the exit code of a command that failed by drkernel's own bug (an exception no layer expected): its
# traceback, then one line; apart from INCOMPLETE, so that a script tells a crash from a partial run
INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE


def _version() -> str:
    """The installed distribution's version (no import of the package's heavy parts)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("drkernel")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def make_folder(path: str | os.PathLike[str], flag: str) -> Path:
    """The folder a command writes into (`--out`, `--run-dir`), made now, before any model or judge
    starts: a file in its place, or a path the filesystem refuses, is one line naming the flag."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{flag} {folder}: is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{flag} {folder}: cannot make the folder: {exc.strerror or exc}") from None
    return folder


def rerun_command(args: argparse.Namespace, *extra: str) -> str:
    """The command line that ran `args`, plus `extra` flags it lacks: what an interrupted command tells
    its user to run again."""
    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    argv += [flag for flag in extra if flag not in argv]
    return shlex.join(["drkernel", *argv])


def _command(argv: list[str]) -> str | None:
    """The subcommand named in argv (the first word that is one), if any."""
    return next((a for a in argv if a in COMMANDS), None)


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line on stderr and exit code 2; every command's help shows its options'
    defaults (each command's parser and its verbs' are of this class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from drkernel.helpfmt import DefaultsHelpFormatter

        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")


def _build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="drkernel", description="Judge, serve and train LLM-written Triton kernels."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    parser.add_argument("--version", action="version", version=f"drkernel {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    wanted = _command(argv)
    for name, (module, extra) in COMMANDS.items():
        if name != wanted:  # only the command asked for is imported (`drkernel --help` imports none)
            sub.add_parser(name, help=SUMMARIES[name])
            continue
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("drkernel"):
                continue  # command not built yet in this checkout
            hint = f" (pip install 'drkernel[{extra}]')" if extra else ""
            p = sub.add_parser(name, help=f"unavailable: missing {exc.name}{hint}")
            p.set_defaults(func=_missing(name, str(exc.name), hint))
            continue
        mod.register(sub)
        if name in sub.choices:
            from drkernel.helpfmt import add_examples

            add_examples(sub.choices[name], name)
    return parser


def _missing(name: str, module: str, hint: str):  # type: ignore[no-untyped-def]
    def run(args: argparse.Namespace) -> int:
        print(f"drkernel {name}: needs the Python package '{module}'{hint}", file=sys.stderr)
        return 2

    return run


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser(argv)
    args = parser.parse_args(argv)
    args.argv = argv  # the command as typed, for rerun_command()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except DrKernelError as exc:
        print(f"drkernel {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"drkernel {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the process's edge: a bug of ours, said as one
        traceback.print_exc(file=sys.stderr)
        print(f"drkernel {args.command}: internal error ({type(exc).__name__}), a bug of drkernel: the "
              f"traceback above says where; please report it with the command", file=sys.stderr)
        return INTERNAL_ERROR


def entry() -> NoReturn:
    """The console script: main(), then the process's exit (at once for QUICK_EXIT commands and for an
    interrupted command, once what they printed is flushed: an interrupted bench's threads may still wait
    on a model's answer, which nobody reads any more)."""
    argv = sys.argv[1:]
    code = main(argv)
    if _command(argv) in QUICK_EXIT or code == INTERRUPTED:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to write
                stream.flush()
        logging.shutdown()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()

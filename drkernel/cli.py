"""`drkernel` command line: eval | serve | bench | optimize | report | audit | suite | train.

Each subcommand lives beside the stage it drives and exposes `register(subparsers)`, which adds
its parser and sets `func(args) -> int`. Commands whose extra is not installed say so in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import logging
import os
import select
import shlex
import stat
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

from drkernel.errors import ConfigError, DrKernelError

__all__ = ["BROKEN_PIPE", "COMMANDS", "OUTPUT_LOST", "QUICK_EXIT", "SUMMARIES", "entry", "main",
           "make_folder", "rerun_command"]

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
# the exit code of a command whose output's reader went away (`drkernel audit builtin | head`): 128 + SIGPIPE,
# what a shell reports for a process that signal ended
BROKEN_PIPE = 141
# the exit code of a bench, or the report of one, whose reports are written but whose run is not whole:
# episodes missing (interrupted, never run) or failed (a model server or judge that failed them)
INCOMPLETE = 1
# the exit code of a command that failed by drkernel's own bug (an exception no layer expected): its
# traceback, then one line; apart from INCOMPLETE, so that a script tells a crash from a partial run
INTERNAL_ERROR = 70  # sysexits' EX_SOFTWARE
# the exit code of a command whose output stdout could not take (the disk under `> result.json` full):
# one line; a script must not read the cut or empty file as the command's answer
OUTPUT_LOST = 74  # sysexits' EX_IOERR


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
        code = _output_failure(exc, args.command)
        if code:  # the output's reader went away, or its disk is full: no bug of ours
            return code
        traceback.print_exc(file=sys.stderr)
        print(f"drkernel {args.command}: internal error ({type(exc).__name__}), a bug of drkernel: the "
              f"traceback above says where; please report it with the command", file=sys.stderr)
        return INTERNAL_ERROR


def _output_failure(exc: Exception, command: str) -> int:
    """The exit code where `exc` is stdout's failure, else 0: BROKEN_PIPE, quietly, where its reader went
    away (`drkernel audit builtin | head`); one line and OUTPUT_LOST where the disk under it is full."""
    if isinstance(exc, BrokenPipeError) and _stdout_gone():
        _discard_stdout()
        return BROKEN_PIPE
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT) and _stdout_disk_full():
        _say_unwritten(exc, command)
        return OUTPUT_LOST
    return 0


def _stdout_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (poll says so for no other file)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):  # no file behind sys.stdout
        return False


def _stdout_disk_full() -> bool:
    """Whether stdout is a file on a filesystem with no block left."""
    try:
        fd = sys.stdout.fileno()
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.fstatvfs(fd).f_bavail == 0
    except (OSError, ValueError):
        return False


def _say_unwritten(exc: OSError, command: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"drkernel {command}: its output could not be written: {exc.strerror or exc}", file=sys.stderr)
    _discard_stdout()


def _discard_stdout() -> None:
    """Send what is left of stdout, and what the interpreter flushes as it leaves, to /dev/null: a reader
    that went away or a full disk is said once, not again as 'Exception ignored' at the exit."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _flush_stdout(code: int, command: str) -> int:
    """The exit code once what the command printed is flushed: BROKEN_PIPE where the reader went away;
    a stdout that cannot take it (a full disk under `> result.json`) is one line and OUTPUT_LOST, never the
    command's 0 over output that was lost."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return BROKEN_PIPE
    except OSError as exc:
        _say_unwritten(exc, command)
        return OUTPUT_LOST
    except ValueError:  # stdout closed by the command: nothing left to flush
        pass
    return code


def entry() -> NoReturn:
    """The console script: main(), then the process's exit (at once for QUICK_EXIT commands and for an
    interrupted command, once what they printed is flushed: an interrupted bench's threads may still wait
    on a model's answer, which nobody reads any more)."""
    argv = sys.argv[1:]
    returned = main(argv)
    code = _flush_stdout(returned, _command(argv) or "")
    if _command(argv) in QUICK_EXIT or returned == INTERRUPTED:
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to write
            sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()

"""A newcomer's edges of the command line (issue 35, part B): --version, a bad --levels, --turns 0."""

from __future__ import annotations

import argparse

import pytest

from drkernel.problems.loaders import parse_levels


def test_version_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from drkernel.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("drkernel ")


@pytest.mark.parametrize(("text", "levels"), [("1,2", (1, 2)), ("1-3", (1, 2, 3)), ("1,3-4", (1, 3, 4)),
                                              (" 2 ", (2,)), ("2,2", (2,))])
def test_levels_are_lists_and_ranges(text: str, levels: tuple[int, ...]) -> None:
    assert parse_levels(text) == levels


@pytest.mark.parametrize("text", ["x", "0", "5", "3-1", "1-", ",", ""])
def test_a_bad_level_is_a_usage_error_of_the_flag(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected"):
        parse_levels(text)


def test_bench_with_bad_levels_says_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from drkernel.cli import main

    with pytest.raises(SystemExit) as info:
        main(["bench", "builtin", "--levels", "x", "--model", "m", "--base-url", "http://127.0.0.1:1/v1"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--levels" in err[0] and "expected KernelBench levels" in err[0]


def test_zero_turns_is_refused_not_replaced() -> None:
    from drkernel.agent.cli_options import tts_defaults
    from drkernel.errors import ConfigError

    args = argparse.Namespace(turns=0, tts=False, context="all", window=4, prompt_budget=None,
                              rank_by="reward", max_model_len=None)
    with pytest.raises(ConfigError, match="--turns: must be >= 1"):
        tts_defaults(args, 3)


@pytest.mark.parametrize(("flag", "value", "named"), [("--concurrency", "0", "--concurrency"),
                                                      ("--window", "0", "--window")])
def test_errors_name_the_flag_not_the_config_key(flag: str, value: str, named: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from drkernel.cli import main

    code = main(["bench", "builtin:cpu", "--model", "m", "--base-url", "http://127.0.0.1:1/v1",
                 "--executor", "fake", flag, value, "--out", "/nonexistent-drkernel-out"])
    err = capsys.readouterr().err
    assert code == 2 and named in err and "loop." not in err and "context." not in err, err


def test_top_level_help_imports_no_command(tmp_path) -> None:  # noqa: ANN001
    """`drkernel --help` lists every command without importing one (they import torch: 6 s before)."""
    import subprocess
    import sys

    from drkernel.cli import COMMANDS, SUMMARIES

    assert set(SUMMARIES) == set(COMMANDS)
    code = ("import sys; from drkernel.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO TORCH')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert out.strip().endswith("NO TORCH") and all(name in out for name in COMMANDS), out


def test_paper_stts_keeps_the_best_run_of_four_ties_to_the_earliest() -> None:
    """Issue 35, part A, item 5: --protocol paper --tts selects as the authors' code does (Table 1's
    STTS rows): the run of 4 consecutive turns whose rewards add up highest, the earliest on a tie;
    ours keeps the top 4 turns, ties to the latest."""
    from drkernel.agent.cli_options import TTS_TURNS, tts_defaults
    from drkernel.agent.trajectories import Turn
    from drkernel.agent.tts import select_turns
    from drkernel.types import EvalOutcome, EvalResult

    def args(protocol: str) -> argparse.Namespace:
        return argparse.Namespace(turns=None, tts=True, context=None, window=4, prompt_budget=None,
                                  rank_by="reward", protocol=protocol)

    turns, paper = tts_defaults(args("paper"), 3)
    _, ours = tts_defaults(args("ours"), 3)
    assert turns == TTS_TURNS == 14
    assert (paper.mode, paper.ties, paper.w) == ("best_window", "earliest", 4)
    assert (ours.mode, ours.ties) == ("top_w", "latest")
    rewards = [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 2.0]  # windows 1-4 and 2-5 tie at 4
    ts = [Turn(i, "", None, "none", EvalResult(EvalOutcome.OK), r, "") for i, r in enumerate(rewards)]
    assert select_turns(ts[:6], paper) == [1, 2, 3, 4]  # the earliest of the tied runs
    assert select_turns(ts[:5], paper) == [1, 2, 3, 4]  # after the first 5-turn iteration
    assert select_turns(ts[:4], paper) == [0, 1, 2, 3]  # within it: every turn so far
    assert select_turns(ts, ours) == [3, 4, 5, 7]  # top 4 by reward, ties to the latest


@pytest.mark.parametrize("command", ["bench", "optimize"])
@pytest.mark.parametrize(("flag", "value"), [
    ("--temperature", "nan"), ("--temperature", "-1"), ("--top-p", "2"), ("--feedback-chars", "5"),
    ("--request-timeout", "0"), ("--request-timeout", "nan"), ("--eval-timeout", "0"),
    ("--eval-timeout", "-1"), ("--eval-timeout", "nan"), ("--perf-trials", "0"), ("--perf-trials", "-1"),
    ("--perf-trials", "100000")])
def test_a_bad_number_is_one_line_naming_its_flag_before_anything_runs(
        command: str, flag: str, value: str, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    """A value the judge or the model server would refuse (or a NaN that broke the run's config.json)
    is refused at once, by its flag's name, not after a model's answer was spent on it."""
    from pathlib import Path

    import drkernel
    from drkernel.cli import main

    example = Path(drkernel.__file__).parent / "examples" / "relu_scale" / "reference.py"
    target = "builtin:cpu" if command == "bench" else str(example)
    code = main([command, target, "--model", "m", "--base-url", "http://127.0.0.1:1/v1", "--executor", "fake",
                 "--out", str(tmp_path / "out"), flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"drkernel {command}: {flag}"), err
    assert not (tmp_path / "out").exists()


def test_bench_levels_on_a_suite_without_levels_says_one_line(tmp_path, capsys) -> None:  # noqa: ANN001
    """A folder of problems has no levels: `--levels 1` ran all of it, as if no level had been asked for."""
    from drkernel.cli import main
    from drkernel.problems.suite import builtin_problem

    (tmp_path / "1_Op.py").write_text(builtin_problem("101_ReLU", "cpu").reference_code)
    code = main(["bench", str(tmp_path), "--levels", "1", "--model", "m", "--base-url", "http://127.0.0.1:1/v1",
                 "--executor", "fake", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "its one problem has no level" in err[0]
    assert not (tmp_path / "out").exists()


def test_a_crash_is_its_own_exit_code_with_its_traceback(monkeypatch, capsys):
    """An exception no layer expected (a bug of drkernel) left main() as a bare traceback and exit code 1,
    the code of a bench whose run is incomplete: a script could not tell a crash from a partial run."""
    import drkernel.problems.cli_suite as cli_suite
    from drkernel.cli import INCOMPLETE, INTERNAL_ERROR, main

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli_suite, "run_list", broken)
    code = main(["suite", "list"])
    err = capsys.readouterr().err.splitlines()
    assert code == INTERNAL_ERROR != INCOMPLETE
    assert any("RuntimeError: a bug" in line for line in err), err  # the traceback, for the bug report
    assert err[-1].startswith("drkernel suite: internal error (RuntimeError), a bug of drkernel"), err[-1]


@pytest.mark.parametrize("unbuffered", [True, False])
def test_an_output_whose_reader_went_away_is_no_traceback(unbuffered: bool) -> None:
    """`drkernel audit builtin | head -2`: the reader leaves, the next line written meets a closed pipe.
    It was a BrokenPipeError traceback called a bug of drkernel (exit 70), or, with the output still
    buffered, Python's 'Exception ignored' (exit 120); it is nothing on stderr and exit 141, as a shell
    reports a process that SIGPIPE ended."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from drkernel.cli import BROKEN_PIPE

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:  # every print reaches the pipe at once: the error rises inside the command
        env["PYTHONUNBUFFERED"] = "1"
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "drkernel.cli", "suite", "list"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120, env=env,
                              cwd=Path(__file__).parents[1])
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (BROKEN_PIPE, "")


class _FailingStdout:
    """A stdout whose flush raises `error` and which has no file behind it."""

    def __init__(self, error: OSError) -> None:
        self.error = error

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        raise self.error

    def fileno(self) -> int:
        raise OSError("no file")


def _exits_of_entry(monkeypatch, returned: int, argv: list[str], stdout: _FailingStdout) -> list[int]:  # noqa: ANN001
    """The codes entry() leaves with by os._exit, main() answering `returned` for `argv`."""
    import drkernel.cli as cli

    exits: list[int] = []

    def leave(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(cli, "main", lambda argv: returned)
    monkeypatch.setattr(cli.sys, "argv", ["drkernel", *argv])
    monkeypatch.setattr(cli.os, "_exit", leave)
    monkeypatch.setattr(cli.sys, "stdout", stdout)
    with pytest.raises(SystemExit):
        cli.entry()
    return exits


def test_a_result_the_full_disk_did_not_take_is_not_exit_0(monkeypatch, capsys) -> None:  # noqa: ANN001
    """`drkernel eval REF KER --json > result.json` on a full disk: the JSON waited in stdout's buffer, the
    quick exit's flush failed in silence and the command exited 0 over an empty result.json. It is one
    line naming why, exit OUTPUT_LOST."""
    import errno
    import os

    import drkernel.cli as cli

    full = _FailingStdout(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    exits = _exits_of_entry(monkeypatch, 0, ["eval", "ref.py", "kernel.py", "--json"], full)
    assert exits == [cli.OUTPUT_LOST]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["drkernel eval: its output could not be written: No space left on device"]


def test_an_interrupted_command_whose_reader_went_away_still_leaves_at_once(monkeypatch) -> None:  # noqa: ANN001
    """An interrupted bench leaves by os._exit (its threads may still wait on a model); a stdout that
    could not be flushed as well must not send it through sys.exit, which would wait on them."""
    import drkernel.cli as cli

    gone = _FailingStdout(BrokenPipeError(32, "Broken pipe"))
    exits = _exits_of_entry(monkeypatch, cli.INTERRUPTED, ["bench", "builtin:cpu"], gone)
    assert exits == [cli.BROKEN_PIPE]

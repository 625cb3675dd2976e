"""`drkernel eval` as a user runs it: a subprocess, a readable verdict or exactly one JSON object."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.sandbox.corpus import ASSETS

CONTRACT = {"status", "outcome", "compiled", "correct", "hacks", "speedup", "reference_ms", "kernel_ms",
            "coverage", "reward", "error", "device"}
FAST_FLAGS = ["--device", "cpu", "--trials", "2", "--perf-trials", "3", "--warmup", "1", "--timeout", "120"]
REFERENCE = ASSETS / "references" / "relu_scale.py"


def drkernel_eval(*args: object, cache: Path | None = None, env: dict[str, str] | None = None,
                  stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "drkernel.cli", "eval", *map(str, args)]
    if cache is not None:
        cmd += ["--cache", str(cache)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2],
                          env=None if env is None else {**os.environ, **env}, input=stdin)


def assert_usage_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_readable_verdict_for_an_honest_kernel(tmp_path: Path) -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", *FAST_FLAGS,
                         cache=tmp_path / "t.sqlite")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("verdict   OK")
    assert "Triton interpreter" in out and "trials    2/2 passed" in out and "speedup" in out
    assert "Traceback" not in proc.stderr


def test_other_sizes_are_checked_with_shape_and_never_change_the_verdict(tmp_path: Path) -> None:
    kernel = ASSETS / "hacks" / "b12_hardcoded_shape.py"  # correct only at the size it was written for
    proc = drkernel_eval(REFERENCE, kernel, *FAST_FLAGS, "--shape", "batch_size = 3; dim = 100",
                         "--shape", "batch_size = -1", cache=tmp_path / "t.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("verdict   OK")
    assert "shapes    0/1 other sizes passed" in proc.stdout
    assert "variant 1: output differs" in proc.stdout and "variant 2: not counted" in proc.stdout
    assert_usage_error(drkernel_eval(REFERENCE, kernel, "--shape", "batch_size = ("), "--shape")
    # a typo of the constant's name changed nothing, and its variant was counted as passed
    assert_usage_error(drkernel_eval(REFERENCE, kernel, "--shape", "batch = 3"),
                       "--shape 'batch = 3' sets no module-level name of")


def test_json_is_one_object_with_the_contract_despite_a_forged_verdict_on_stdout(tmp_path: Path) -> None:
    kernel = ASSETS / "hacks" / "d1_forged_verdict.py"
    proc = drkernel_eval(REFERENCE, kernel, "--json", *FAST_FLAGS, cache=tmp_path / "t.sqlite")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout
    result = json.loads(lines[0])
    assert isinstance(result, dict) and CONTRACT <= set(result)
    assert result["status"] == "completed" and result["outcome"] == "incorrect"
    assert result["correct"] is False and result["reward"] == 0.0
    assert result["device"]["interpreter"] is True
    assert "by-the-candidate" in result["sandbox_output"]  # kept, but only as data


def test_json_for_a_hack_names_the_hack(tmp_path: Path) -> None:
    kernel = ASSETS / "hacks" / "c4_allclose_patch.py"
    proc = drkernel_eval(REFERENCE, kernel, "--json", *FAST_FLAGS, cache=tmp_path / "t.sqlite")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["outcome"] == "hack_detected" and "monkeypatch" in result["hacks"]
    assert result["reward"] == 0.0


def test_sources_saved_with_a_byte_order_mark_are_read_as_utf8(tmp_path: Path) -> None:
    """An editor's BOM before a kernel made it `compile_error` (U+FEFF is no Python), before a reference
    `infra_error`; Python runs such a file, and the problem loaders read it as UTF-8 (utf-8-sig)."""
    reference, kernel = tmp_path / "ref.py", tmp_path / "k.py"
    reference.write_bytes(b"\xef\xbb\xbf" + REFERENCE.read_bytes())
    kernel.write_bytes(b"\xef\xbb\xbf" + (ASSETS / "kernels" / "relu_scale.py").read_bytes())
    proc = drkernel_eval(reference, kernel, *FAST_FLAGS, cache=tmp_path / "t.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("verdict   OK"), proc.stdout


def test_a_kernel_piped_in_is_read_from_stdin_where_its_path_is_a_dash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`... | drkernel eval ref.py -` said "kernel file not found: -": a model's answer could not be piped
    in."""
    source = (ASSETS / "kernels" / "relu_scale.py").read_text()
    proc = drkernel_eval(REFERENCE, "-", "--json", *FAST_FLAGS, cache=tmp_path / "t.sqlite", stdin=source)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "ok"
    from drkernel.cli import main

    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    assert "- reads it from stdin" in " ".join(capsys.readouterr().out.split())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfe not UTF-8")))
    assert main(["eval", str(REFERENCE), "-", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot read the kernel on stdin" in err, err


def test_missing_kernel_file_is_a_usage_error(tmp_path: Path) -> None:
    assert_usage_error(drkernel_eval(REFERENCE, tmp_path / "absent.py", "--device", "cpu"), "not found")


def test_missing_reference_file_is_a_usage_error(tmp_path: Path) -> None:
    kernel = ASSETS / "kernels" / "relu_scale.py"
    assert_usage_error(drkernel_eval(tmp_path / "absent.py", kernel, "--device", "cpu"), "not found")


def test_non_kernelbench_reference_is_a_usage_error() -> None:
    proc = drkernel_eval(ASSETS / "references" / "not_kernelbench.py", ASSETS / "kernels" / "relu_scale.py",
                         "--device", "cpu")
    assert_usage_error(proc, "KernelBench")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_device_without_a_gpu_is_a_usage_error() -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", "--device", "cuda")
    assert_usage_error(proc, "cuda")


@pytest.mark.parametrize("device", ["cuda:x", "cuda:", "gpu"])
def test_a_misspelt_device_is_a_usage_error(device: str) -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", "--device", device)
    assert_usage_error(proc, f"unknown device {device!r}")


def test_bad_flag_is_a_one_line_usage_error() -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", "--no-such-flag")
    assert_usage_error(proc, "--no-such-flag")


def test_bad_flag_exits_2_without_a_traceback() -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", "--no-such-flag")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--no-such-flag" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("flags", "needle"), [
    (["--trials", "0"], "--trials 0: must be between 1 and 100"),
    (["--timeout", "0"], "--timeout 0: must be a number of seconds > 0"),
    (["--atol", "-1"], "--atol -1: must be >= 0"),
    (["--rtol", "nan"], "--rtol nan: must be >= 0"),
    (["--perf-trials", "0"], "--perf-trials 0: must be between 1 and 10000"),
    # the judge refused these after starting, naming its option field ("seed: must be ...")
    (["--seed", "-1"], "--seed -1: must be between 0 and 2**63 - 1"),
    (["--seed", str(2**63)], "--seed 2**63: must be between 0 and 2**63 - 1"),
    (["--seed", "1" + "0" * 400], "--seed 1e+400: must be between 0 and"),  # was an OverflowError
])
def test_bad_flag_values_name_the_flag(flags: list[str], needle: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from drkernel.cli import main

    assert main(["eval", str(REFERENCE), str(ASSETS / "kernels" / "relu_scale.py"), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert "num_" not in err and "warm" not in err


def test_help_shows_the_defaults_that_matter(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """--memory-limit-mb and --cache said nothing of what they are without the flag (8192 MiB, the user's
    cache file), nor --insecure of the variable that turns it on."""
    from drkernel.cli import main
    from drkernel.types import EvalOptions

    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as info:
        main(["eval", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"in MiB (default: {EvalOptions().memory_limit_mb})" in text
    assert "(default: $XDG_CACHE_HOME/drkernel/reference_timings.sqlite where that is set, " \
           "else ~/.cache/drkernel/reference_timings.sqlite" in text
    assert "(default: off; DRKERNEL_INSECURE=1 turns it on)" in text


def test_the_judge_refuses_a_negative_tolerance_from_the_api_too() -> None:
    from drkernel.errors import ConfigError
    from drkernel.sandbox.requestcheck import validate_request
    from drkernel.types import EvalOptions, EvalRequest

    with pytest.raises(ConfigError, match="atol: must be a number >= 0"):
        validate_request(EvalRequest(reference_code="x", kernel_code="y", options=EvalOptions(atol=-1.0)))
    with pytest.raises(ConfigError, match="timeout_s: must be > 0"):
        validate_request(EvalRequest(reference_code="x", kernel_code="y", options=EvalOptions(timeout_s=0)))
    # what `eval --memory-limit-mb` refuses, a served request may not ask either (it was accepted: 202)
    with pytest.raises(ConfigError, match="memory_limit_mb: 1 is not between 64 and"):
        validate_request(EvalRequest(reference_code="x", kernel_code="y",
                                     options=EvalOptions(memory_limit_mb=1)))


def test_a_memory_limit_past_what_the_system_takes_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`--memory-limit-mb 1e20` passed the flag check (>= 64): every sandbox then died at its start
    (OverflowError in setrlimit, a traceback on stderr) and the honest kernel got runtime_error, exit 0."""
    from drkernel.cli import main

    argv = ["eval", str(REFERENCE), str(ASSETS / "kernels" / "relu_scale.py"), "--device", "cpu"]
    assert main([*argv, "--memory-limit-mb", str(10**20)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--memory-limit-mb 1e+20: must be between 64 and" in err, err


@pytest.mark.parametrize("options, message", [
    ({"timeout_s": float("inf")}, "timeout_s: must be > 0 and at most 86400"),
    ({"timeout_s": 1e300}, "timeout_s: must be > 0 and at most"),
    ({"timeout_s": float("nan")}, "timeout_s"),
    ({"num_profile_calls": 0}, "num_profile_calls"),
    ({"num_verified_timed_calls": -5}, "num_verified_timed_calls"),
    ({"seed": 10**30}, "seed: must be between 0 and 2\\*\\*63"),
    ({"seed": -1}, "seed"),
    ({"gpu_memory_fraction": -3.0}, "gpu_memory_fraction"),
    ({"gpu_memory_fraction": 1.5}, "gpu_memory_fraction"),
    ({"memory_limit_mb": 10**20}, "memory_limit_mb: 100000000000000000000 is not between"),
    ({"entry_point": "not valid!"}, "entry_point: 'not valid!' is not a Python class name"),
])
def test_a_request_of_options_no_judge_can_honour_is_refused_before_it_is_queued(
        options: dict, message: str) -> None:
    """Each was accepted (202 on a server) and reached the judge: an endless wait, a sandbox that
    could not start, a generator that refused the seed, a class that cannot exist."""
    from drkernel.errors import ConfigError
    from drkernel.sandbox.requestcheck import validate_request
    from drkernel.types import EvalOptions, EvalRequest

    with pytest.raises(ConfigError, match=message):
        validate_request(EvalRequest(reference_code="x", kernel_code="y", options=EvalOptions(**options)))
    validate_request(EvalRequest(reference_code="x", kernel_code="y",
                                 options=EvalOptions(seed=2**63 - 1, gpu_memory_fraction=1.0,
                                                     timeout_s=86400, num_profile_calls=1)))


@pytest.mark.parametrize("where", ["folder", "missing_parent_of_a_file", "not_a_database"])
def test_a_cache_that_cannot_be_opened_is_a_usage_error(tmp_path: Path, where: str) -> None:
    """`--cache` names the reference timing cache: a folder, a path under a file, or a file that is not
    SQLite is one line naming it, exit 2 (each was a traceback, exit 1)."""
    cache = {"folder": tmp_path,
             "missing_parent_of_a_file": tmp_path / "a_file" / "cache.sqlite",
             "not_a_database": tmp_path / "text.sqlite"}[where]
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "text.sqlite").write_text("hello, this is not SQLite" * 100)
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", *FAST_FLAGS, cache=cache)
    assert_usage_error(proc, f"reference timing cache {cache}: cannot open it")


def test_the_default_cache_is_under_xdg_cache_home_when_it_is_set(tmp_path: Path) -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", *FAST_FLAGS,
                         env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "xdg" / "drkernel" / "reference_timings.sqlite").is_file()


def test_a_default_cache_that_cannot_be_made_is_one_warning_and_the_evaluation_runs(tmp_path: Path) -> None:
    """A home (or $XDG_CACHE_HOME) where no folder can be made stopped the command once its judge had
    started, on a cache the user never asked for: the evaluation now runs, its reference times kept in
    memory, after one line that says so. (A file stands in for an unwritable folder: the tests run as
    root, whom permissions do not stop.)"""
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", *FAST_FLAGS,
                         env={"HOME": str(blocked), "XDG_CACHE_HOME": str(blocked)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("verdict   OK")
    said = [line for line in proc.stderr.splitlines() if "cache" in line]
    assert len(said) == 1 and f"{blocked}/drkernel/reference_timings.sqlite" in said[0], proc.stderr
    assert "in memory" in said[0] and "--cache" in said[0]
    assert "Traceback" not in proc.stderr


def test_one_size_limit_for_sources_shared_with_the_server(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from drkernel.cli import main
    from drkernel.server.settings import Settings
    from drkernel.types import MAX_SOURCE_BYTES

    assert Settings().max_body_bytes == MAX_SOURCE_BYTES == 32 << 20
    big = tmp_path / "big.py"
    with open(big, "wb") as f:
        f.truncate(MAX_SOURCE_BYTES + 1)
    assert main(["eval", str(REFERENCE), str(big), "--device", "cpu"]) == 2
    assert "at most 32 MiB" in capsys.readouterr().err


def test_a_reference_without_get_init_inputs_is_a_usage_error(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from drkernel.cli import main

    ref = tmp_path / "ref.py"
    ref.write_text(REFERENCE.read_text().replace("def get_init_inputs", "def other_name"))
    assert main(["eval", str(ref), str(ASSETS / "kernels" / "relu_scale.py"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "defines no get_init_inputs()" in err and "KeyError" not in err


def test_a_reference_that_does_not_parse_is_a_usage_error_before_any_judge_starts(tmp_path: Path) -> None:
    """It started a judge (sandboxes, the device) to come back infra_error, exit 0; now one line naming
    the file and the line, from the host's own parse (problems/reference.py validate_reference_source)."""
    ref = tmp_path / "ref.py"
    source = REFERENCE.read_text()
    line = source.splitlines().index(next(s for s in source.splitlines() if s.startswith("class Model"))) + 1
    ref.write_text(source.replace("class Model", "class Model(:\nclass Model", 1))
    proc = drkernel_eval(ref, ASSETS / "kernels" / "relu_scale.py", *FAST_FLAGS, cache=tmp_path / "t.sqlite")
    assert_usage_error(proc, f"{ref}: syntax error at line {line}")
    assert not (tmp_path / "t.sqlite").exists()  # no judge opened its cache


def test_forward_error_names_the_kernel_line_and_verbose_shows_more(tmp_path: Path) -> None:
    source = (ASSETS / "kernels" / "relu_scale.py").read_text()
    marker = "    def forward(self, x):\n"
    assert marker in source
    kernel = tmp_path / "k.py"
    kernel.write_text(source.replace(marker, marker + "        y = x.no_such_attribute\n"))
    line = source[: source.index(marker)].count("\n") + 2
    proc = drkernel_eval(REFERENCE, kernel, *FAST_FLAGS, "-v", cache=tmp_path / "t.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert "forward_error" in proc.stdout
    assert f"at kernel line {line}: y = x.no_such_attribute" in proc.stdout, proc.stdout
    assert "traceback" in proc.stdout and "stages" in proc.stdout  # -v adds the details


def test_the_console_script_leaves_at_once_and_nothing_behind(tmp_path: Path) -> None:
    """`drkernel eval` exits without the interpreter's teardown (drkernel.cli.QUICK_EXIT): everything
    it printed still arrives whole, and every folder it or its sandboxes made is gone when it exits."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    cmd = [sys.executable, "-m", "drkernel.cli", "eval", str(REFERENCE),
           str(ASSETS / "kernels" / "relu_scale.py"), "--json", *FAST_FLAGS,
           "--cache", str(tmp_path / "t.sqlite")]
    env = {**os.environ, "TMPDIR": str(scratch)}
    root = Path(__file__).parents[2]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "ok"  # one whole object: the quick exit flushed it
    # only the host's lock files stay (devicelock: the candidates lock, host-wide and kept on purpose)
    assert sorted(p.name for p in scratch.iterdir()) in ([], ["drkernel-locks"])
    assert all(p.suffix == ".lock" for p in (scratch / "drkernel-locks").glob("*"))
    usage = subprocess.run([*cmd, "--trials", "0"], capture_output=True, text=True, timeout=300, cwd=root,
                           env=env)
    assert usage.returncode == 2 and "--trials 0" in usage.stderr  # the exit code survives the quick exit

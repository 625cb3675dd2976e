"""`drkernel eval` as a user runs it: a subprocess, a readable verdict or exactly one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.sandbox.corpus import ASSETS

CONTRACT = {"status", "outcome", "compiled", "correct", "hacks", "speedup", "reference_ms", "kernel_ms", "coverage",
            "reward", "error", "device"}  # fmt: skip
FAST_FLAGS = ["--device", "cpu", "--trials", "2", "--perf-trials", "3", "--warmup", "1", "--timeout", "120"]
REFERENCE = ASSETS / "references" / "relu_scale.py"


def drkernel_eval(*args: object, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "drkernel.cli", "eval", *map(str, args)]
    if cache is not None:
        cmd += ["--cache", str(cache)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2])


def assert_usage_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0]
    assert "Traceback" not in proc.stderr


def test_readable_verdict_for_an_honest_kernel(tmp_path: Path) -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", *FAST_FLAGS, cache=tmp_path / "t.sqlite")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("verdict   OK")
    assert "Triton interpreter" in out and "trials    2/2 passed" in out and "speedup" in out
    assert "Traceback" not in proc.stderr


def test_other_sizes_are_checked_with_shape_and_never_change_the_verdict(tmp_path: Path) -> None:
    kernel = ASSETS / "hacks" / "b12_hardcoded_shape.py"  # correct only at the size it was written for
    proc = drkernel_eval(REFERENCE, kernel, *FAST_FLAGS, "--shape", "batch_size = 3; dim = 100",
                         "--shape", "batch_size = -1", cache=tmp_path / "t.sqlite")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("verdict   OK")
    assert "shapes    0/1 other sizes passed" in proc.stdout
    assert "variant 1: output differs" in proc.stdout and "variant 2: not counted" in proc.stdout
    assert_usage_error(drkernel_eval(REFERENCE, kernel, "--shape", "batch_size = ("), "--shape")


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


def test_missing_kernel_file_is_a_usage_error(tmp_path: Path) -> None:
    assert_usage_error(drkernel_eval(REFERENCE, tmp_path / "absent.py", "--device", "cpu"), "not found")


def test_missing_reference_file_is_a_usage_error(tmp_path: Path) -> None:
    kernel = ASSETS / "kernels" / "relu_scale.py"
    assert_usage_error(drkernel_eval(tmp_path / "absent.py", kernel, "--device", "cpu"), "not found")


def test_non_kernelbench_reference_is_a_usage_error() -> None:
    proc = drkernel_eval(ASSETS / "references" / "not_kernelbench.py", ASSETS / "kernels" / "relu_scale.py",
                         "--device", "cpu")  # fmt: skip
    assert_usage_error(proc, "KernelBench")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_device_without_a_gpu_is_a_usage_error() -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", "--device", "cuda")
    assert_usage_error(proc, "cuda")


def test_bad_flag_is_a_one_line_usage_error() -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", "--no-such-flag")
    assert_usage_error(proc, "--no-such-flag")


def test_bad_flag_exits_2_without_a_traceback() -> None:
    proc = drkernel_eval(REFERENCE, ASSETS / "kernels" / "relu_scale.py", "--no-such-flag")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--no-such-flag" in proc.stderr and "Traceback" not in proc.stderr

"""`drkernel suite ...` and `drkernel audit ...` through the real dispatcher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drkernel.cli import main


def test_suite_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["suite", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["problems"]
    assert len(rows) >= 24 and rows[0]["name"] == "101_ReLU"
    assert main(["suite", "list"]) == 0
    assert "built-in problems" in capsys.readouterr().out
    assert main(["suite", "show", "108_Matmul", "--size", "cpu"]) == 0
    assert "# --- size: cpu ---" in capsys.readouterr().out
    assert main(["suite", "show", "108_Matmul", "--solution"]) == 0
    assert "class ModelNew" in capsys.readouterr().out
    assert main(["suite"]) == 2


def test_suite_show_unknown_problem_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["suite", "show", "nope"]) == 2
    assert "no built-in problem named 'nope'" in capsys.readouterr().err


def test_suite_baselines_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["suite", "baselines", "builtin:cpu", "--only", "101_", "--only", "104_", "--trials", "2",
            "--store", str(tmp_path / "b.json"), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [t["problem"] for t in out["timings"]] == ["101_ReLU", "104_LayerNorm"]
    assert main(argv[:-1]) == 0
    assert "CPU timings" in capsys.readouterr().out


def test_audit_json_and_fail_on_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "builtin", "--levels", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summary"] == {"ok": 10, "flagged": 0, "error": 0}
    bad = tmp_path / "relu_on_rand.py"
    bad.write_text(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.rand(4, 64)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    assert main(["audit", str(bad), "--fail-on-flag"]) == 1
    out = capsys.readouterr().out
    assert "identity_passes@drkernel" in out
    assert "1 problem: 0 ok, 1 flagged, 0 errors" in out  # it said "1 problems"
    assert main(["audit", str(tmp_path / "missing")]) == 2


def test_suite_show_gives_the_size_this_machine_judges(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --size: the GPU size only where there is a GPU (the CPU interpreter would time out on it)."""
    import torch

    assert main(["suite", "show", "303_CausalSelfAttention"]) == 0
    default = capsys.readouterr().out
    assert main(["suite", "show", "303_CausalSelfAttention", "--size", "gpu"]) == 0
    gpu = capsys.readouterr().out
    assert "# --- size: cpu ---" not in gpu
    assert ("# --- size: cpu ---" in default) is (not torch.cuda.is_available())


@pytest.mark.parametrize("argv, message", [
    (["--only", "101_", "--device", "tpu"], "--device 'tpu': expected cpu, cuda or cuda:N"),
    (["--only", "nothing-matches"], "--only matched no problem"),
    (["--only", "101_", "--store", "."], "is a folder"),
])
def test_suite_baselines_bad_arguments_are_one_line(argv: list[str], message: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    store = ["--store", str(tmp_path / "b.json")]
    assert main(["suite", "baselines", "builtin:cpu", "--trials", "1", *store, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("argv", [["--trials", "0"], ["--warmup", "-1"]])
def test_suite_baselines_refuses_bad_trials_even_when_nothing_is_measured(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--trials 0 (or --warmup -1) was refused only when a reference was measured: with every timing
    already stored it was taken, exit 0, and a suite half stored stopped at its first unstored one."""
    base = ["suite", "baselines", "builtin:cpu", "--only", "101_", "--store", str(tmp_path / "b.json")]
    assert main([*base, "--trials", "1", "--warmup", "0"]) == 0
    capsys.readouterr()
    assert main([*base, *argv]) == 2
    captured = capsys.readouterr()
    assert "--trials must be >= 1 and --warmup >= 0" in captured.err, captured.err
    assert len(captured.err.strip().splitlines()) == 1 and captured.out == "", captured


@pytest.mark.parametrize("argv, message", [
    (["--max-input-numel", "0"], "audit.max_input_numel: must be >= 1"),
    (["--max-input-numel", "-5"], "audit.max_input_numel: must be >= 1"),
    (["--only", "nothing-matches", "--fail-on-flag"], "--only matched no problem"),
    (["--only", "101_", "--judge", "--device", "tpu"], "unknown device 'tpu'"),
    (["--only", "101_", "--device", "cuda"], "--device is the judge's, for --judge"),
])
def test_audit_bad_arguments_are_one_line(argv: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "builtin", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
    assert captured.out == ""  # no table header before the error


def _reference(tmp_path: Path, name: str, forward: str, top: str = "") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(
        f"import torch\nimport torch.nn as nn\n{top}\nclass Model(nn.Module):\n    def forward(self, x):\n"
        f"        {forward}\n\ndef get_inputs():\n    return [torch.randn(64)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    return path


@pytest.mark.parametrize("command", [["audit"], ["suite", "baselines", "--trials", "1"]])
def test_json_is_the_only_stdout_whatever_the_reference_prints(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """References run in this process: their print() calls came before the JSON object on stdout
    (`audit --json | jq` failed), in audit and in suite baselines alike; they go to stderr."""
    ref = _reference(tmp_path, "chatty", 'print("forward", x.shape)\n        return x * 2',
                     top='print("loading")\n')
    store = ["--store", str(tmp_path / "b.json")] if command[0] == "suite" else []
    assert main([*command, str(ref), *store, "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    assert "loading" in captured.err and "forward" in captured.err


def test_audit_json_of_a_reference_with_nan_outputs_is_json(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A reference whose output holds NaN (log of randn) made `audit --json` write `"max_abs": NaN`,
    which is no JSON (jq and strict parsers refuse it); a value that is no number is null."""
    ref = _reference(tmp_path, "log_randn", "return torch.log(x)")
    assert main(["audit", str(ref), "--json"]) == 0

    def refuse(word: str) -> None:
        raise ValueError(f"not JSON: {word}")

    problem = json.loads(capsys.readouterr().out, parse_constant=refuse)["problems"][0]
    assert problem["max_abs"] is None and problem["variation"] is None


@pytest.mark.parametrize("as_json", [False, True])
def test_suite_baselines_goes_on_past_a_reference_that_raises(as_json: bool, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """One reference of a folder that raised in forward was a traceback, exit 1, and the table of the
    others never printed; it is one stderr line naming it, the others are timed, and the exit is 1."""
    folder = tmp_path / "suite"
    folder.mkdir()
    _reference(folder, "a_broken", 'raise RuntimeError("boom")')
    _reference(folder, "b_double", "return x * 2")
    argv = ["suite", "baselines", str(folder), "--trials", "1", "--store", str(tmp_path / "b.json")]
    assert main([*argv, *(["--json"] if as_json else [])]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == "drkernel suite: a_broken: the reference failed: RuntimeError: boom"
    if as_json:
        out = json.loads(captured.out)
        assert [t["problem"] for t in out["timings"]] == ["b_double"]
        assert out["failed"] == [{"problem": "a_broken", "error": "RuntimeError: boom"}]
    else:
        assert "b_double" in captured.out and "1 reference failed" in captured.out


def test_suite_baselines_keeps_the_levels_asked_for(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """As audit, survey and bench do: a KernelBench checkout is timed level by level."""
    for level in (1, 2):
        (tmp_path / "kb" / f"level{level}").mkdir(parents=True)
        _reference(tmp_path / "kb" / f"level{level}", "1_Op", f"return x * {level}")
    argv = ["suite", "baselines", str(tmp_path / "kb"), "--trials", "1", "--store", str(tmp_path / "b.json"),
            "--json"]
    assert main([*argv, "--levels", "2"]) == 0
    assert [t["problem"] for t in json.loads(capsys.readouterr().out)["timings"]] == ["L2/1_Op"]
    assert main([*argv, "--levels", "3"]) == 2
    assert "no folder for level(s) 3" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["audit", "--json"], ["suite", "baselines", "--trials", "1", "--json"]])
def test_a_reference_that_exits_is_a_failed_problem_not_the_end_of_the_command(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """References run in this process: one that called sys.exit (in forward, or a module-level
    argparse reading drkernel's own arguments) ended the whole command with its exit code and
    nothing printed for the others."""
    folder = tmp_path / "suite"
    folder.mkdir()
    _reference(folder, "a_exits", "raise SystemExit(3)")
    argparse = "import argparse\nargparse.ArgumentParser().parse_args()\n"
    _reference(folder, "b_parses", "return x * 2", top=argparse)
    _reference(folder, "c_double", "return x * 2")
    store = ["--store", str(tmp_path / "b.json")] if command[0] == "suite" else []
    code = main([command[0], *command[1:-1], str(folder), *store, "--json"])
    out = json.loads(capsys.readouterr().out)
    if command[0] == "audit":
        assert code == 0 and [p["status"] for p in out["problems"]] == ["error", "error", "ok"]
        assert out["problems"][0]["error"] == "SystemExit: the reference exited (code 3)"
    else:
        assert code == 1 and [t["problem"] for t in out["timings"]] == ["c_double"]
        exited = "SystemExit: the reference exited (code 3)"
        assert out["failed"][0] == {"problem": "a_exits", "error": exited}
        assert "the reference exited (code 2)" in out["failed"][1]["error"]

"""`drkernel bench`'s newcomer edges (issue 35, part B): builtin:gpu on a CPU judge."""

from __future__ import annotations

import pytest

from drkernel.cli import main


def _bench(*extra: str) -> list[str]:
    # an endpoint nobody answers: a run that gets past the size check stops there instead, exit 2
    return ["bench", "--model", "m", "--base-url", "http://127.0.0.1:1/v1", "--executor", "local", *extra]


@pytest.mark.parametrize("device", [["--device", "cpu"], []])
def test_builtin_gpu_on_a_cpu_judge_is_refused_with_one_line(
        device: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path) -> None:
    from drkernel.executors import local

    monkeypatch.setattr(local, "_gpu_count", lambda: 0)  # no GPU here, whatever the machine has
    assert main(_bench("builtin:gpu", "--out", str(tmp_path / "o"), *device)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("drkernel bench: builtin:gpu ")
    assert "use builtin:cpu" in lines[0]
    assert not (tmp_path / "o").exists()


def test_force_gpu_suite_and_a_gpu_pass_the_size_check(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    from drkernel.executors import local

    monkeypatch.setattr(local, "_gpu_count", lambda: 0)
    for argv in (_bench("builtin:gpu", "--device", "cpu", "--force-gpu-suite"), _bench("builtin:cpu"),
                 _bench("builtin:gpu", "--device", "cuda:0")):
        assert main([*argv, "--out", str(tmp_path / "o")]) == 2  # stopped later, by the dead endpoint
        err = capsys.readouterr().err
        assert "builtin:gpu holds" not in err and "127.0.0.1:1" in err, err

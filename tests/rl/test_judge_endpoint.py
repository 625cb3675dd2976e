"""`judge.executor=http`: the judge server is asked once when the run starts, before the model loads."""

from __future__ import annotations

import socket
import time

import drkernel.rl.trainer
from drkernel.cli import main


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_judge_server_that_does_not_answer_stops_the_run_at_start(tmp_path, capsys, monkeypatch):
    # the run went on: every evaluation failed after the client's retries (2 minutes a step on the CPU
    # recipe), each step logged reward 0 with groups 0/2, and it ended with exit code 0
    def no_model(*args, **kwargs):
        raise AssertionError("the model was built before the judge was asked")

    monkeypatch.setattr(drkernel.rl.trainer, "build_model", no_model)
    url = _dead_url()
    t0 = time.monotonic()
    assert main(["train", "rl", "--recipe", "debug_cpu", "--run-dir", str(tmp_path / "run"),
                 "--set", "judge.executor=http", "--set", f"judge.base_url={url}"]) == 2
    assert time.monotonic() - t0 < 30
    err = capsys.readouterr().err
    assert f"judge.base_url {url}: no drkernel server answers there" in err
    assert "Traceback" not in err
    assert not (tmp_path / "run" / "checkpoints").exists()
    assert not (tmp_path / "run" / "metrics.jsonl").exists()

